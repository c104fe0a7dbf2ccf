//! Invalid specs derived from a plugin's own schema and the valid spec given: drop a
//! required property the spec sets, or give a property a value of the wrong type.
use serde_json::{Value, json};

/// An invalid spec and the field its error must name.
#[derive(Debug, Clone, PartialEq)]
pub struct Mutation {
    pub spec: Value,
    /// Dotted path from the spec root, e.g. `network.default.bridge`.
    pub path: Vec<String>,
    pub how: String,
}

impl Mutation {
    /// `spec.a.b`, as plugins name fields.
    pub fn field(&self) -> String {
        std::iter::once("spec")
            .chain(self.path.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(".")
    }

    /// Whether an error's `field` names the broken property: the path itself (with or
    /// without the `spec.` root), or its parent object with the property named in the
    /// message (as a "missing field `x`" error naturally reports it).
    pub fn named_by(&self, field: &str, message: &str) -> bool {
        let field = field.strip_prefix("spec.").unwrap_or(field);
        let path = self.path.join(".");
        if field == path {
            return true;
        }
        let parent = self.path[..self.path.len() - 1].join(".");
        let last = self.path.last().expect("non-empty path");
        let parent_named = field == parent || (parent.is_empty() && field == "spec");
        parent_named && message.contains(last.as_str())
    }
}

fn props(schema: &Value) -> Option<&serde_json::Map<String, Value>> {
    schema.get("properties").and_then(Value::as_object)
}

/// The first required property the spec sets, shallowest first.
pub fn drop_required(schema: &Value, spec: &Value) -> Option<Mutation> {
    let mut queue = vec![(Vec::<String>::new(), schema, spec)];
    while !queue.is_empty() {
        let mut next = Vec::new();
        for (path, schema, value) in queue {
            let Some(obj) = value.as_object() else {
                continue;
            };
            let required = schema.get("required").and_then(Value::as_array);
            for r in required.into_iter().flatten().filter_map(Value::as_str) {
                if obj.contains_key(r) {
                    let mut p = path.clone();
                    p.push(r.to_string());
                    let mut out = spec.clone();
                    remove_at(&mut out, &p);
                    return Some(Mutation {
                        spec: out,
                        path: p,
                        how: format!("dropped the required property `{r}`"),
                    });
                }
            }
            for (name, sub) in props(schema).into_iter().flatten() {
                if let Some(v) = obj.get(name).filter(|v| v.is_object()) {
                    let mut p = path.clone();
                    p.push(name.clone());
                    next.push((p, sub, v));
                }
            }
        }
        queue = next;
    }
    None
}

fn remove_at(spec: &mut Value, path: &[String]) {
    let (last, parents) = path.split_last().expect("non-empty path");
    let mut cur = spec;
    for p in parents {
        cur = &mut cur[p.as_str()];
    }
    if let Some(o) = cur.as_object_mut() {
        o.remove(last);
    }
}

/// A value no schema of type `ty` accepts.
fn wrong_value(ty: &str) -> Option<Value> {
    Some(match ty {
        "string" => json!(12345),
        "integer" | "number" => json!("not-a-number"),
        "boolean" => json!("not-a-boolean"),
        "array" => json!("not-a-list"),
        "object" => json!("not-an-object"),
        _ => return None,
    })
}

/// The first top-level property the spec sets whose schema has a plain type, with a
/// value of another type.
pub fn wrong_type(schema: &Value, spec: &Value) -> Option<Mutation> {
    let obj = spec.as_object()?;
    let properties = props(schema)?;
    for (name, sub) in properties {
        if !obj.contains_key(name) {
            continue;
        }
        let loose = sub.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
            || sub.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
        let Some(ty) = sub.get("type").and_then(Value::as_str).filter(|_| !loose) else {
            continue;
        };
        let Some(bad) = wrong_value(ty) else {
            continue;
        };
        let mut spec = spec.clone();
        spec[name.as_str()] = bad.clone();
        return Some(Mutation {
            spec,
            path: vec![name.clone()],
            how: format!("set `{name}` (type {ty}) to {bad}"),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "size": {"type": "integer"},
            "net": {"type": "object", "required": ["bridge"], "properties": {
                "bridge": {"type": "string"}, "vlan": {"type": "integer"}}},
        }})
    }

    #[test]
    fn a_nested_required_property_is_dropped() {
        let spec = json!({"size": 2, "net": {"bridge": "br0", "vlan": 3}});
        let m = drop_required(&schema(), &spec).unwrap();
        assert_eq!(m.spec, json!({"size": 2, "net": {"vlan": 3}}));
        assert_eq!(m.field(), "spec.net.bridge");
        assert!(m.named_by("spec.net.bridge", ""));
        assert!(m.named_by("spec.net", "missing field `bridge`"));
        assert!(!m.named_by("spec.net", "something else"));
        assert!(!m.named_by("spec.size", "bridge"));
    }

    #[test]
    fn nothing_to_drop_when_the_spec_sets_no_required_property() {
        assert_eq!(drop_required(&schema(), &json!({"size": 2})), None);
    }

    #[test]
    fn a_typed_property_gets_a_wrong_value() {
        let spec = json!({"size": 2});
        let m = wrong_type(&schema(), &spec).unwrap();
        assert_eq!(m.spec, json!({"size": "not-a-number"}));
        assert!(m.named_by("spec.size", "invalid type"));
        assert!(m.named_by("size", ""));
    }
}
