//! The user-facing API of the Redfish kinds (`infrastructure.cluster.x-k8s.io/v1alpha1`).
//! The host adds `spec.providerID`, the InfraCluster's `spec.credentialsRefs` and
//! `spec.credentialsRef` (it reads the Secrets and hands them to the plugin as the
//! call's credentials) and owns `status`.
use guest_kit::endpoint::ApiEndpoint;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// RedfishCluster `spec`. The inventory is the BMCs of `spec.credentialsRefs` (and
/// `spec.credentialsRef`): one Secret per BMC, each with `url` (e.g.
/// `https://10.0.0.21`), `token` (user name), `secret` (password) and optionally
/// `ca.crt`, `fingerprint`, `insecure`. Every system a BMC serves is a host machines
/// may claim.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// The workload cluster's API endpoint (e.g. a kube-vip address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// The control plane endpoint is managed outside this provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_managed_control_plane: Option<bool>,
    /// IPv4 addresses handed to machines through Cluster API IPAM and written into
    /// their NoCloud network configuration. Unset: hosts use DHCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv4_config: Option<IpConfig>,
    /// DNS servers written into each machine's network configuration.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_servers: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IpConfig {
    /// Ranges (`10.0.0.10-10.0.0.20`), CIDRs or single addresses.
    pub addresses: Vec<String>,
    #[schemars(range(min = 1, max = 32))]
    pub prefix: u8,
    pub gateway: String,
}

/// RedfishMachine `spec` (and RedfishMachineTemplate `spec.template.spec`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    /// Only these hosts (system names or UUIDs) may be claimed. Empty: any free host
    /// of the inventory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// Set by Cluster API once provisioned: `redfish://<system UUID>`.
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
}

#[cfg(test)]
mod tests {
    use guest_kit::parse_spec;
    use guest_kit::types::PluginError;

    use super::*;

    #[test]
    fn a_cluster_spec_parses_with_the_credentials_refs_the_host_reads() {
        let spec: ClusterSpec = parse_spec(
            r#"{"controlPlaneEndpoint": {"host": "10.0.0.10", "port": 6443},
                "credentialsRefs": [{"name": "bmc-rack1"}], "dnsServers": ["10.0.0.2"]}"#,
            "spec",
        )
        .unwrap();
        assert_eq!(spec.control_plane_endpoint.unwrap().host, "10.0.0.10");
        assert_eq!(spec.dns_servers, ["10.0.0.2"]);
    }

    #[test]
    fn the_schema_leaves_credentials_to_the_host() {
        let schema: serde_json::Value =
            serde_json::from_str(&guest_kit::schema::crd_schema::<ClusterSpec>()).unwrap();
        let properties = schema["properties"].as_object().unwrap();
        assert!(properties.contains_key("controlPlaneEndpoint"));
        assert!(!properties.contains_key("credentialsRef"));
        assert!(!properties.contains_key("credentialsRefs"));
    }

    #[test]
    fn a_machine_spec_names_hosts_and_keeps_the_provider_id() {
        let spec: MachineSpec = parse_spec(
            r#"{"hosts": ["node-1"], "providerID": "redfish://uuid-1"}"#,
            "spec",
        )
        .unwrap();
        assert_eq!(spec.hosts, ["node-1"]);
        assert_eq!(spec.provider_id.as_deref(), Some("redfish://uuid-1"));
    }

    #[test]
    fn a_mistyped_field_is_named() {
        match parse_spec::<MachineSpec>(r#"{"hosts": "node-1"}"#, "spec") {
            Err(PluginError::InvalidSpec(i)) => assert_eq!(i.field, "spec.hosts"),
            other => panic!("expected an invalid spec, got {other:?}"),
        }
    }
}
