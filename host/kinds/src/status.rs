//! The `status` of our kinds, typed: one type per role is both the CRD's status schema
//! (`crate::crds` generates it from the type) and what the controllers write (a merge patch
//! of what differs between the type's view of the object's status and the new value,
//! `controller/write/patch.rs`). A field the type drops is removed from the object; a field it
//! does not know is left alone.
use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What every reconciled kind reports about its progress: conditions, the plugin's step
/// and details, its opaque state, and which generation failed for good.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Progressing {
    /// `Ready`, `Paused` and `InfrastructureProvisioned` (whose reason is the current step).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The current step, as the plugin names it (a drift's reason while there is one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// What the plugin reports about the infrastructure (e.g. where the resource lives, its
    /// ID, its power state).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub details: BTreeMap<String, String>,
    /// Opaque progress the plugin hands back on its next call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin_state: Option<String>,
    /// Generation that failed terminally; retried when the spec changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_generation: Option<i64>,
    /// The credentials that failed generation was called with (a digest of their
    /// Secrets' resource versions): retried, at the resync period, once they change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_credentials: Option<String>,
}

/// A `metav1.Condition`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    #[schemars(length(max = 316))]
    pub type_: String,
    pub status: ConditionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
    #[schemars(extend("format" = "date-time"))]
    pub last_transition_time: String,
    /// CamelCase.
    #[schemars(length(max = 1024))]
    pub reason: String,
    #[serde(default)]
    #[schemars(length(max = 32768))]
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl From<bool> for ConditionStatus {
    fn from(b: bool) -> Self {
        if b {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }
}

/// The contract's `status.initialization`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Initialization {
    /// The infrastructure was provisioned (set once; Cluster API reads it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned: Option<bool>,
}

impl Initialization {
    pub fn provisioned() -> Option<Initialization> {
        Some(Initialization {
            provisioned: Some(true),
        })
    }
}

/// An InfraMachine's status.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InfraMachineStatus {
    #[serde(flatten)]
    pub progress: Progressing,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<Initialization>,
    /// The machine is provisioned and as specified (false while it drifts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<MachineAddress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domain: Option<String>,
}

/// One of a machine's addresses, as Cluster API copies it into the Machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MachineAddress {
    #[serde(rename = "type")]
    pub type_: AddressType,
    pub address: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum AddressType {
    Hostname,
    ExternalIP,
    InternalIP,
    ExternalDNS,
    InternalDNS,
}

/// An InfraCluster's status.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InfraClusterStatus {
    #[serde(flatten)]
    pub progress: Progressing,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<Initialization>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failure_domains: Vec<FailureDomain>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailureDomain {
    pub name: String,
    #[serde(default)]
    pub control_plane: bool,
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
}

/// An InfraMachineTemplate's status: what a machine made from it will have, for scaling
/// from zero.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InfraMachineTemplateStatus {
    /// Resource quantities, e.g. `cpu: "2"`, `memory: 4Gi`.
    #[serde(default)]
    #[schemars(schema_with = "quantities")]
    pub capacity: BTreeMap<String, String>,
    #[serde(default)]
    pub node_info: NodeInfo,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeInfo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operating_system: Option<String>,
}

/// An InfraClusterTemplate has no status of its own.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InfraClusterTemplateStatus {}

/// A map of Kubernetes resource quantities.
fn quantities(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "additionalProperties": {
            "x-kubernetes-int-or-string": true,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$",
        },
    })
}

/// A status type's view of an object's `status`.
pub trait Status: Serialize + DeserializeOwned + Default {
    /// The object's status as this type reads it; the default when there is none, or
    /// when it does not read (the API server validates status against this very type's
    /// schema, so only a status from another version of the CRD can fail to).
    fn from_status(status: Option<&Value>) -> Self {
        match status {
            None | Some(Value::Null) => Self::default(),
            Some(status) => Self::deserialize(status).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "status does not read; starting from an empty one");
                Self::default()
            }),
        }
    }
}

impl Status for Progressing {}
impl Status for InfraMachineStatus {}
impl Status for InfraClusterStatus {}
impl Status for InfraMachineTemplateStatus {}

/// The CRD schema of a status type: OpenAPI v3, inline, structural, and without
/// defaults (see `crd_schema::without_defaults`).
pub fn schema<T: JsonSchema>() -> Value {
    let mut value = crd_schema::of::<T>();
    crd_schema::without_defaults(&mut value);
    value
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_status_reads_back_as_it_was_written() {
        let status = InfraMachineStatus {
            progress: Progressing {
                phase: Some("Cloning".into()),
                details: [("vmid".to_string(), "100".to_string())].into(),
                plugin_state: Some("{}".into()),
                ..Default::default()
            },
            initialization: Initialization::provisioned(),
            ready: Some(false),
            addresses: vec![MachineAddress {
                type_: AddressType::InternalIP,
                address: "10.0.0.5".into(),
            }],
            failure_domain: Some("pve1".into()),
        };
        let value = serde_json::to_value(&status).unwrap();
        assert_eq!(
            value,
            json!({
                "phase": "Cloning", "details": {"vmid": "100"}, "pluginState": "{}",
                "initialization": {"provisioned": true}, "ready": false,
                "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}],
                "failureDomain": "pve1",
            })
        );
        assert_eq!(InfraMachineStatus::from_status(Some(&value)), status);
    }

    #[test]
    fn schemas_are_structural_and_name_the_contract_fields() {
        let machine = schema::<InfraMachineStatus>();
        let text = machine.to_string();
        for refused in [
            "$ref",
            "$schema",
            "nullable",
            "\"default\"",
            "title",
            "uint",
        ] {
            assert!(!text.contains(refused), "{refused} in {text}");
        }
        let props = &machine["properties"];
        assert_eq!(
            props["initialization"]["properties"]["provisioned"]["type"],
            "boolean"
        );
        assert_eq!(
            props["addresses"]["items"]["properties"]["type"]["enum"],
            json!([
                "Hostname",
                "ExternalIP",
                "InternalIP",
                "ExternalDNS",
                "InternalDNS"
            ])
        );
        assert_eq!(
            props["conditions"]["x-kubernetes-list-map-keys"],
            json!(["type"])
        );
        assert_eq!(
            props["conditions"]["items"]["required"],
            json!(["type", "status", "lastTransitionTime", "reason"])
        );
        assert_eq!(props["observedGeneration"]["format"], "int64");
        assert_eq!(props["details"]["additionalProperties"]["type"], "string");
        assert!(props.get("bootstrapDataHash").is_none());
        let cluster = schema::<InfraClusterStatus>();
        assert_eq!(
            cluster["properties"]["failureDomains"]["items"]["required"],
            json!(["name"])
        );
        let template = schema::<InfraMachineTemplateStatus>();
        assert_eq!(
            template["properties"]["capacity"]["additionalProperties"]["x-kubernetes-int-or-string"],
            true
        );
    }
}
