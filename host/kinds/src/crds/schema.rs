//! The schemas of a CRD version: the plugin's `spec` with what the contract and the
//! host add per role, the host's `status` (from the types in `crate::status`) with the
//! plugin's own fields joined, and the structural check every plugin schema passes.
use hyperplug_runtime::bindings::identity::KindRole;
use serde_json::{Value, json};

/// The plugin's spec schema with what the contract and the host add, per role.
pub(super) fn host_spec(role: KindRole, mut spec: Value) -> Value {
    match role {
        KindRole::InfraMachine => {
            add_property(
                &mut spec,
                "providerID",
                json!({
                    "type": "string",
                    "description": "The machine's ID as the workload cluster's Node reports it; set by the provider."
                }),
            );
            spec
        }
        KindRole::InfraCluster => {
            add_property(&mut spec, "controlPlaneEndpoint", endpoint_schema());
            add_credentials_refs(&mut spec);
            spec
        }
        KindRole::InfraMachineTemplate | KindRole::InfraClusterTemplate => {
            if role == KindRole::InfraClusterTemplate {
                add_property(&mut spec, "controlPlaneEndpoint", endpoint_schema());
                add_credentials_refs(&mut spec);
            }
            json!({
                "type": "object",
                "required": ["template"],
                "properties": {"template": {
                    "type": "object",
                    "required": ["spec"],
                    "properties": {
                        "metadata": {"type": "object", "properties": {
                            "labels": string_map(),
                            "annotations": string_map(),
                        }},
                        "spec": spec,
                    },
                }},
            })
        }
    }
}

/// The plugin's own `status` fields join the host's; the host's win a name clash (it
/// writes them).
pub(super) fn merge_status(status: &mut Value, own: Value) {
    let Some(own) = own.get("properties").and_then(Value::as_object) else {
        return;
    };
    if let Some(props) = properties(status) {
        for (name, schema) in own {
            props.entry(name.clone()).or_insert_with(|| schema.clone());
        }
    }
}

/// The `properties` of an object schema (`check_structural` made sure it is one),
/// added when it has none.
fn properties(schema: &mut Value) -> Option<&mut serde_json::Map<String, Value>> {
    schema
        .as_object_mut()?
        .entry("properties")
        .or_insert_with(|| json!({}))
        .as_object_mut()
}

/// Add `name` unless the plugin's schema has it (it may narrow it).
fn add_property(schema: &mut Value, name: &str, property: Value) {
    if let Some(props) = properties(schema) {
        props.entry(name).or_insert(property);
    }
}

/// `spec.credentialsRef` and `spec.credentialsRefs`: the host reads them
/// (`controller/call/credentials.rs`) and hands the Secrets to the plugin as credentials, so
/// they are the host's, whatever a plugin's schema says about them.
fn add_credentials_refs(spec: &mut Value) {
    let secret_ref = |description: &str| {
        json!({
            "type": "object",
            "description": description,
            "required": ["name"],
            "properties": {
                "name": {"type": "string"},
                "namespace": {"type": "string", "description": "Default: the object's namespace."},
            },
        })
    };
    let keys = "keys `url`, `token`, `secret`, and optionally `ca.crt`, `fingerprint`, `insecure`";
    if let Some(props) = properties(spec) {
        props.insert(
            "credentialsRef".into(),
            secret_ref(&format!(
                "A Secret with the infrastructure's credentials ({keys}). Unset: the first of credentialsRefs, else the manager's default credentials."
            )),
        );
        props.insert(
            "credentialsRefs".into(),
            json!({
                "type": "array",
                "description": "More credentials Secrets (the same keys), handed to the plugin in order, e.g. one per endpoint of an inventory.",
                "items": secret_ref("A credentials Secret."),
            }),
        );
    }
}

fn endpoint_schema() -> Value {
    json!({
        "type": "object",
        "description": "Where the workload cluster's API server is reached.",
        "properties": {
            "host": {"type": "string"},
            "port": {"type": "integer", "format": "int32", "minimum": 0, "maximum": 65535},
        },
    })
}

fn string_map() -> Value {
    json!({"type": "object", "additionalProperties": {"type": "string"}})
}

/// The status every kind of a role gets: the contract's fields plus the host's own, from
/// the type the controllers write (`crate::status`).
pub(super) fn status_schema(role: KindRole) -> Value {
    use crate::status::{self, schema};
    match role {
        KindRole::InfraMachine => schema::<status::InfraMachineStatus>(),
        KindRole::InfraCluster => schema::<status::InfraClusterStatus>(),
        KindRole::InfraMachineTemplate => schema::<status::InfraMachineTemplateStatus>(),
        KindRole::InfraClusterTemplate => schema::<status::InfraClusterTemplateStatus>(),
    }
}

/// CRD schemas must be structural: every node says its type, no `$ref`. Name the
/// first offending path so a plugin author knows what to fix.
pub(super) fn check_structural(schema: &Value, path: &str) -> Result<(), String> {
    let Some(obj) = schema.as_object() else {
        return Err(format!("{path}: schema must be a JSON object"));
    };
    if obj.contains_key("$ref") {
        return Err(format!(
            "{path}: `$ref` is not allowed in CRD schemas; inline it"
        ));
    }
    let typed = obj.contains_key("type")
        || obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
        || obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if !typed {
        return Err(format!("{path}: schema has no `type`"));
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            check_structural(sub, &format!("{path}.{name}"))?;
        }
    }
    if let Some(items) = obj.get("items") {
        check_structural(items, &format!("{path}[]"))?;
    }
    if let Some(extra) = obj.get("additionalProperties").filter(|v| v.is_object()) {
        check_structural(extra, &format!("{path}.*"))?;
    }
    Ok(())
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structural_check_names_the_untyped_field() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {}}}}});
        let err = check_structural(&schema, "X.spec").unwrap_err();
        assert_eq!(err, "X.spec.a.b: schema has no `type`");
    }

    #[test]
    fn every_roles_status_schema_is_structural() {
        for role in [
            KindRole::InfraCluster,
            KindRole::InfraClusterTemplate,
            KindRole::InfraMachine,
            KindRole::InfraMachineTemplate,
        ] {
            check_structural(&status_schema(role), &format!("{role:?}.status")).unwrap();
        }
    }

    #[test]
    fn refs_are_refused() {
        let schema = json!({"type": "object", "properties": {"a": {"$ref": "#/x"}}});
        assert!(
            check_structural(&schema, "X.spec")
                .unwrap_err()
                .contains("$ref")
        );
    }
}
