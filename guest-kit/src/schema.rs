//! OpenAPI v3 schemas of the specs, shaped for CRDs: inline, structural, no `$schema`.
use schemars::JsonSchema;

/// The CRD-ready schema of `T` (see the `crd-schema` crate, which the host's status
/// schemas go through too).
pub fn crd_schema<T: JsonSchema>() -> String {
    ::crd_schema::of::<T>().to_string()
}

#[cfg(test)]
mod tests {
    use schemars::JsonSchema;
    use serde_json::Value;

    use super::*;

    #[derive(JsonSchema)]
    #[allow(dead_code)]
    struct Spec {
        /// How many.
        count: u32,
        inner: Option<Inner>,
    }

    #[derive(JsonSchema)]
    #[allow(dead_code)]
    struct Inner {
        size: u8,
    }

    #[test]
    fn schemas_are_inline_and_keep_only_what_crds_accept() {
        let schema: Value = serde_json::from_str(&crd_schema::<Spec>()).unwrap();
        let text = schema.to_string();
        for refused in [
            "$schema",
            "$ref",
            "$defs",
            "\"title\"",
            "nullable",
            "uint32",
            "uint8",
        ] {
            assert!(!text.contains(refused), "{refused} in {text}");
        }
        assert_eq!(schema["properties"]["count"]["type"], "integer");
        assert_eq!(schema["properties"]["count"]["description"], "How many.");
        assert_eq!(
            schema["properties"]["inner"]["properties"]["size"]["type"],
            "integer"
        );
        assert_eq!(schema["required"], serde_json::json!(["count"]));
    }
}
