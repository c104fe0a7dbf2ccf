//! The user-facing API of the Redfish kinds (`infrastructure.cluster.x-k8s.io/v1alpha1`).
//! The host adds `spec.providerID` and owns `status`.
use guest_kit::endpoint::ApiEndpoint;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// RedfishCluster `spec`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// The workload cluster's API endpoint (e.g. a kube-vip address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// The control plane endpoint is managed outside this provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_managed_control_plane: Option<bool>,
    /// The inventory: one Secret per BMC, each with `url` (e.g.
    /// `https://10.0.0.21`), `token` (user name), `secret` (password) and optionally
    /// `ca.crt`, `fingerprint`, `insecure`. Every system a BMC serves is a host
    /// machines may claim.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials_refs: Vec<SecretRef>,
    /// One more BMC Secret (the same keys); with only `credentialsRefs`, unnecessary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_ref: Option<SecretRef>,
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

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct SecretRef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
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
