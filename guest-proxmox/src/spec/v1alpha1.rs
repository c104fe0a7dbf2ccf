//! `infrastructure.cluster.x-k8s.io/v1alpha1`: the API the seed's manifests are written
//! in, and every field of CAPMOX's deprecated `v1alpha1` (`target`, `cloneSpec`, pool
//! references, routes, VRFs on the devices). The network is one `default` NIC (`net0`)
//! plus `additionalDevices`; what it cannot say (zones, queues, which NIC takes the
//! default addresses, more than one pool per family) is `v1alpha2`'s.
use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    ApiEndpoint, Checks, CloudInit, DiskFormat, Disks, IpConfig, MetadataSettings, NicModel,
    PoolRef, SchedulerHints, TemplateSelector, VmIdRange,
};

/// ProxmoxCluster `spec`. The host adds `credentialsRef` and `credentialsRefs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// The workload cluster's API endpoint (e.g. a kube-vip address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// The control plane is hosted elsewhere, which sets `controlPlaneEndpoint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_managed_control_plane: Option<bool>,
    /// Proxmox nodes machines may be placed on; each is a failure domain. Empty: all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_nodes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_hints: Option<SchedulerHints>,
    /// IPv4 addresses handed to machines through Cluster API IPAM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv4_config: Option<IpConfig>,
    /// IPv6 addresses handed to machines through Cluster API IPAM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6_config: Option<IpConfig>,
    /// DNS servers written into each machine's network configuration.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_servers: Vec<String>,
    /// Accepted for manifests of older ClusterClasses; not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clone_spec: Option<CloneSpec>,
}

/// What older ClusterClass variables carried; kept, not used.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloneSpec {
    pub machine_spec: BTreeMap<String, MachineSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_authorized_keys: Option<Vec<String>>,
    #[serde(
        default,
        rename = "virtualIPNetworkInterface",
        skip_serializing_if = "Option::is_none"
    )]
    pub virtual_ip_network_interface: Option<String>,
}

/// ProxmoxMachine `spec` (and ProxmoxMachineTemplate `spec.template.spec`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    /// Node holding the template to clone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_node: Option<String>,
    /// VM ID of the template to clone.
    #[serde(
        default,
        rename = "templateID",
        skip_serializing_if = "Option::is_none"
    )]
    pub template_id: Option<u32>,
    /// Pick the template by its tags instead of `templateID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_selector: Option<TemplateSelector>,
    /// The node to clone to (as if `allowedNodes` named only it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Snapshot of the template to clone from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snap_name: Option<String>,
    /// Full clone (default) or linked clone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full: Option<bool>,
    /// Storage for the clone's disks (full clones only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<String>,
    /// Disk format for full clones on file storages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<DiskFormat>,
    /// Resource pool to add the VM to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Extra VM tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_sockets: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_cores: Option<u32>,
    #[serde(default, rename = "memoryMiB", skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disks: Option<Disks>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
    /// Allocate the VM ID from this range instead of the cluster's next free ID.
    #[serde(default, rename = "vmIDRange", skip_serializing_if = "Option::is_none")]
    pub vm_id_range: Option<VmIdRange>,
    /// Overrides the cluster's `allowedNodes` for this machine.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_nodes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<Checks>,
    /// Where the cloud-init (NoCloud) ISO goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_init: Option<CloudInit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_settings: Option<MetadataSettings>,
    /// `proxmox://<SMBIOS UUID>`, set by the provider.
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// The VM's ID, as the provider recorded it.
    #[serde(
        default,
        rename = "virtualMachineID",
        skip_serializing_if = "Option::is_none"
    )]
    pub virtual_machine_id: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Network {
    /// The first NIC (`net0`). Unset: the template's, as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<NetworkDevice>,
    /// Further NICs (`net1`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_devices: Vec<AdditionalNetworkDevice>,
    /// VRF devices in the guest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vrfs: Vec<VrfDevice>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkDevice {
    pub bridge: String,
    /// NIC model (default `virtio`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<NicModel>,
    /// Proxmox's MTU of the NIC (1: the bridge's); virtio guests adopt it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u32>,
    /// Overrides the cluster's DNS servers on this NIC.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_servers: Vec<String>,
    /// An IPv4 pool to take the address from instead of the cluster's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv4_pool_ref: Option<PoolRef>,
    /// An IPv6 pool to take the address from instead of the cluster's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6_pool_ref: Option<PoolRef>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routing_policy: Vec<RoutingPolicySpec>,
    /// The MTU inside the guest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_mtu: Option<u32>,
    /// Take an IPv4 address by DHCP instead of from the cluster's `ipv4Config`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhcp4: Option<bool>,
    /// Take an IPv6 address by DHCP instead of from the cluster's `ipv6Config`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhcp6: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdditionalNetworkDevice {
    /// Device name, `net1` ... `net31`.
    #[schemars(regex(pattern = r"^net([1-9]|[12][0-9]|3[01])$"))]
    pub name: String,
    #[serde(flatten)]
    pub device: NetworkDevice,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VrfDevice {
    pub name: String,
    pub table: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routing_policy: Vec<RoutingPolicySpec>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoutingPolicySpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u64>,
}
