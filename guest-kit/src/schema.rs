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
            for v in map.values_mut() {
                clean(v);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(clean),
        _ => {}
    }
}
