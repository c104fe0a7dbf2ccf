//! OpenAPI v3 schemas of the specs, shaped for CRDs: inline, structural, no `$schema`.
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::Value;

/// The CRD-ready schema of `T`.
pub fn crd_schema<T: JsonSchema>() -> String {
    let settings = SchemaSettings::openapi3().with(|s| {
        s.inline_subschemas = true;
    });
    let schema = settings.into_generator().into_root_schema_for::<T>();
    let mut value = serde_json::to_value(schema).expect("schema serializes");
    clean(&mut value);
    value.to_string()
}

/// Drop what CRDs refuse and what only documents the Rust side.
fn clean(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for key in ["$schema", "title", "components", "definitions", "$defs"] {
                map.remove(key);
            }
            // CRDs allow only a few formats; Rust's integer widths are not among them.
            if let Some(Value::String(f)) = map.get("format")
                && matches!(
                    f.as_str(),
                    "uint" | "uint8" | "uint16" | "uint32" | "uint64" | "int" | "int8" | "int16"
                )
            {
                map.remove("format");
            }
            map.remove("nullable");
            // An optional enum lists `null` among its values; CRD enums hold only their type's.
            if let Some(Value::Array(values)) = map.get_mut("enum") {
                values.retain(|v| !v.is_null());
            }
            for v in map.values_mut() {
                clean(v);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(clean),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use schemars::JsonSchema;

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
