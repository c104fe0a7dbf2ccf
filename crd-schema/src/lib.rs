//! A Rust type's JSON schema as a CRD's `openAPIV3Schema` takes it. The host's status
//! types (`hyperplug-kinds`) and the plugins' spec types (`guest-kit`) both go through
//! here, so the two kinds of schema cannot drift apart in what they drop.
//!
//! Written here rather than taken from kube-core's schema rewriter: that one needs
//! k8s-openapi, which the plugins (wasm32-wasip2) would then compile too.
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::Value;

/// The CRD-ready schema of `T`: OpenAPI v3, every subschema inline (a CRD has no
/// `$ref`), then [`crd_ready`].
pub fn of<T: JsonSchema>() -> Value {
    let settings = SchemaSettings::openapi3().with(|s| {
        s.inline_subschemas = true;
        s.meta_schema = None;
    });
    let schema = settings.into_generator().into_root_schema_for::<T>();
    let mut value = serde_json::to_value(schema).expect("a schema serializes");
    crd_ready(&mut value);
    value
}

/// Drops what CRD schemas refuse or what only documents the Rust side: `$schema`,
/// titles and definitions, `nullable` (a field is left out, never set to null), Rust's
/// integer widths as formats (a CRD knows only `int32` and `int64`), and `null` among
/// an optional enum's values (a CRD enum holds only its type's).
pub fn crd_ready(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for key in [
                "$schema",
                "title",
                "components",
                "definitions",
                "$defs",
                "nullable",
            ] {
                map.remove(key);
            }
            if let Some(Value::String(f)) = map.get("format")
                && matches!(
                    f.as_str(),
                    "uint" | "uint8" | "uint16" | "uint32" | "uint64" | "int" | "int8" | "int16"
                )
            {
                map.remove("format");
            }
            if let Some(Value::Array(values)) = map.get_mut("enum") {
                values.retain(|v| !v.is_null());
            }
            map.values_mut().for_each(crd_ready);
        }
        Value::Array(items) => items.iter_mut().for_each(crd_ready),
        _ => {}
    }
}

/// Drops every `default`: in a status schema the API server would write it into every
/// object it reads, where only the controller may set a status.
pub fn without_defaults(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("default");
            map.values_mut().for_each(without_defaults);
        }
        Value::Array(items) => items.iter_mut().for_each(without_defaults),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn what_a_crd_refuses_is_dropped_at_every_depth() {
        let mut v = json!({
            "$schema": "x", "title": "T", "$defs": {}, "type": "object",
            "properties": {
                "n": {"type": "integer", "format": "uint32", "nullable": true},
                "m": {"type": "integer", "format": "int64"},
                "e": {"type": "string", "enum": ["a", null]},
                "d": {"type": "string", "format": "date-time", "default": "x"}
            }
        });
        crd_ready(&mut v);
        assert_eq!(
            v,
            json!({"type": "object", "properties": {
                "n": {"type": "integer"},
                "m": {"type": "integer", "format": "int64"},
                "e": {"type": "string", "enum": ["a"]},
                "d": {"type": "string", "format": "date-time", "default": "x"}
            }})
        );
        without_defaults(&mut v);
        assert!(v["properties"]["d"].get("default").is_none());
    }
}
