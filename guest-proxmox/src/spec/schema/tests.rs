use serde_json::Value;

use super::*;

const KINDS: [Kind; 4] = [
    Kind::Cluster,
    Kind::ClusterTemplate,
    Kind::Machine,
    Kind::MachineTemplate,
];
const VERSIONS: [Version; 2] = [Version::V1alpha1, Version::V1alpha2];

/// Every schema of every kind and version, named.
fn all() -> Vec<(String, Value)> {
    let mut out = vec![];
    for k in KINDS {
        for v in VERSIONS {
            out.push((format!("{k:?} {} spec", v.as_str()), spec_schema(k, v)));
            if let Some(s) = status_schema(k, v) {
                out.push((format!("{k:?} {} status", v.as_str()), s));
            }
        }
    }
    out
}

/// The first thing a CRD would refuse at `path`, if any.
fn unstructural(s: &Value, path: &str) -> Option<String> {
    let obj = s.as_object()?;
    if obj.contains_key("$ref") || obj.contains_key("oneOf") || obj.contains_key("anyOf") {
        return Some(format!("{path}: $ref/oneOf/anyOf"));
    }
    if !obj.contains_key("type") {
        return Some(format!("{path}: no type"));
    }
    if let Some(values) = obj.get("enum").and_then(Value::as_array)
        && values.iter().any(|v| !v.is_string())
    {
        return Some(format!("{path}: an enum value that is not a string"));
    }
    if obj.get("x-kubernetes-list-type") == Some(&json!("map")) {
        let items = &obj["items"];
        for key in obj["x-kubernetes-list-map-keys"].as_array()? {
            let required = items["required"]
                .as_array()
                .is_some_and(|r| r.contains(key));
            let defaulted = items["properties"][key.as_str()?].get("default").is_some();
            if !required && !defaulted {
                return Some(format!(
                    "{path}: list-map key {key} neither required nor defaulted"
                ));
            }
        }
    }
    let props = obj.get("properties").and_then(Value::as_object);
    for (name, sub) in props.into_iter().flatten() {
        if let Some(e) = unstructural(sub, &format!("{path}.{name}")) {
            return Some(e);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = obj.get(key).filter(|v| v.is_object())
            && let Some(e) = unstructural(sub, &format!("{path}.{key}"))
        {
            return Some(e);
        }
    }
    None
}

fn rules(s: &Value) -> Vec<&str> {
    s["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["rule"].as_str())
        .collect()
}

#[test]
fn every_schema_of_every_kind_and_version_is_structural() {
    for (name, schema) in all() {
        assert_eq!(unstructural(&schema, &name), None);
    }
}

#[test]
fn a_machine_carries_capmoxs_five_rules_and_a_template_only_the_full_clone_ones() {
    let machine = spec_schema(Kind::Machine, Version::V1alpha2);
    assert_eq!(rules(&machine).len(), 5, "{:?}", rules(&machine));
    let template = spec_schema(Kind::MachineTemplate, Version::V1alpha2);
    let template_rules = rules(&template);
    assert!(template_rules.contains(&"self.full || !has(self.format)"));
    assert!(template_rules.contains(&"self.full || !has(self.storage)"));
    assert!(template_rules.contains(&"!has(self.providerID)"));
    assert!(
        template_rules
            .iter()
            .all(|r| !r.contains("templateSelector")),
        "a ClusterClass's templates get their template from patches: {template_rules:?}"
    );
    assert_eq!(
        rules(&spec_schema(Kind::Machine, Version::V1alpha1)).len(),
        4
    );
}

#[test]
fn v1alpha2_defaults_are_capmoxs() {
    let m = spec_schema(Kind::Machine, Version::V1alpha2);
    assert_eq!(m["properties"]["full"]["default"], true);
    assert_eq!(
        m["properties"]["templateSelector"]["properties"]["matchPolicy"]["default"],
        "exact"
    );
    let dev = &m["properties"]["network"]["properties"]["networkDevices"]["items"]["properties"];
    assert_eq!(dev["name"]["default"], "net0");
    assert_eq!(dev["model"]["default"], "virtio");
    let c = spec_schema(Kind::Cluster, Version::V1alpha2);
    assert_eq!(
        c["properties"]["externalManagedControlPlane"]["default"],
        false
    );
    assert_eq!(
        c["properties"]["ipv4Config"]["properties"]["metric"]["default"],
        100
    );
}

#[test]
fn v1alpha1_keeps_a_policy_free_selector_and_a_metric_free_pool() {
    let m = spec_schema(Kind::Machine, Version::V1alpha1);
    assert!(
        m["properties"]["templateSelector"]["properties"]["matchPolicy"]
            .get("default")
            .is_none()
    );
    let c = spec_schema(Kind::Cluster, Version::V1alpha1);
    assert!(
        c["properties"]["ipv4Config"]["properties"]["metric"]
            .get("default")
            .is_none()
    );
    assert!(
        c["properties"]["cloneSpec"].is_object(),
        "CAPMOX's v1alpha1 cloneSpec is accepted"
    );
}

#[test]
fn pool_references_allow_only_ipam_pools() {
    let m = spec_schema(Kind::Machine, Version::V1alpha2);
    let pool = &m["properties"]["network"]["properties"]["networkDevices"]["items"]["properties"]["ipPoolRef"]
        ["items"];
    assert_eq!(
        rules(pool),
        [
            "self.apiGroup == 'ipam.cluster.x-k8s.io'",
            "self.kind == 'InClusterIPPool' || self.kind == 'GlobalInClusterIPPool'"
        ]
    );
}

#[test]
fn the_status_schemas_hold_capmoxs_fields_so_adopted_objects_keep_them() {
    let m2 = status_schema(Kind::Machine, Version::V1alpha2).unwrap();
    for field in [
        "proxmoxNode",
        "ipAddresses",
        "vmStatus",
        "taskRef",
        "retryAfter",
        "network",
        "bootstrapDataProvided",
    ] {
        assert!(m2["properties"][field].is_object(), "{field}");
    }
    assert_eq!(
        m2["properties"]["ipAddresses"]["x-kubernetes-list-map-keys"],
        json!(["net"])
    );
    let m1 = status_schema(Kind::Machine, Version::V1alpha1).unwrap();
    assert_eq!(m1["properties"]["ipAddresses"]["type"], "object");
    let c2 = status_schema(Kind::Cluster, Version::V1alpha2).unwrap();
    for field in ["inClusterIPPoolRef", "inClusterZoneRef", "nodeLocations"] {
        assert!(c2["properties"][field].is_object(), "{field}");
    }
    let c1 = status_schema(Kind::Cluster, Version::V1alpha1).unwrap();
    assert!(c1["properties"]["inClusterIpPoolRef"].is_object());
    assert!(status_schema(Kind::MachineTemplate, Version::V1alpha2).is_none());
}
