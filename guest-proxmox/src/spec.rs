//! The user-facing API of the Proxmox kinds (`infrastructure.cluster.x-k8s.io/v1alpha1`).
//!
//! Field names follow the existing Proxmox provider where the feature is the same, so
//! manifests move over unchanged. The host adds `spec.providerID`, the InfraCluster's
//! `spec.credentialsRef` (the Proxmox API token Secret, which it reads itself) and owns
//! `status`.
use guest_kit::endpoint::ApiEndpoint;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// ProxmoxCluster `spec`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// The workload cluster's API endpoint (e.g. a kube-vip address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// The control plane endpoint is managed outside this provider.
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
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerHints {
    /// Percent of a node's memory that may be allocated to VMs (100 = no overcommit,
    /// 0 = no memory check at all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_adjustment: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IpConfig {
    /// Ranges (`10.0.0.10-10.0.0.20`), CIDRs or single addresses.
    pub addresses: Vec<String>,
    #[schemars(range(min = 1, max = 128))]
    pub prefix: u8,
    pub gateway: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<u32>,
}

/// ProxmoxMachine `spec` (and ProxmoxMachineTemplate `spec.template.spec`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
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
    #[schemars(range(min = 100, max = 999_999_999))]
    pub template_id: Option<u32>,
    /// Pick the template carrying all these tags instead of `templateID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_selector: Option<TemplateSelector>,
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
    /// Extra VM tags (lower-case letters, digits, `-`, `_`, `.`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4))]
    pub num_sockets: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 512))]
    pub num_cores: Option<u32>,
    #[serde(default, rename = "memoryMiB", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 16))]
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
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateSelector {
    #[schemars(length(min = 1))]
    pub match_tags: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DiskFormat {
    Raw,
    Qcow2,
    Vmdk,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disks {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_volume: Option<DiskSize>,
    /// Disks added after cloning.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_volumes: Vec<AdditionalVolume>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiskSize {
    /// Device, e.g. `scsi0`.
    pub disk: String,
    /// Size in GB; the boot volume only grows.
    #[schemars(range(min = 5))]
    pub size_gb: u32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdditionalVolume {
    /// Device, e.g. `scsi1`.
    pub disk: String,
    #[schemars(range(min = 1))]
    pub size_gb: u32,
    /// Storage for the new disk (default: the clone's storage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Network {
    /// The first NIC (`net0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<NetworkDevice>,
    /// Further NICs (`net1`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_devices: Vec<AdditionalNetworkDevice>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkDevice {
    pub bridge: String,
    /// NIC model (default `virtio`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<NicModel>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65520))]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4094))]
    pub vlan: Option<u32>,
    /// Take an IPv4 address by DHCP instead of from the cluster's `ipv4Config`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhcp4: Option<bool>,
    /// Take an IPv6 address by DHCP instead of from the cluster's `ipv6Config`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhcp6: Option<bool>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdditionalNetworkDevice {
    /// Device name, `net1` ... `net31`.
    #[schemars(regex(pattern = r"^net([1-9]|[12][0-9]|3[01])$"))]
    pub name: String,
    #[serde(flatten)]
    pub device: NetworkDevice,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NicModel {
    E1000,
    Virtio,
    Rtl8139,
    Vmxnet3,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct VmIdRange {
    #[schemars(range(min = 100, max = 999_999_999))]
    pub start: u32,
    #[schemars(range(min = 100, max = 999_999_999))]
    pub end: u32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Checks {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_cloud_init_status: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_qemu_guest_agent: Option<bool>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloudInit {
    /// Storage for the NoCloud ISO; must hold `iso` content. Default: the first
    /// directory storage of the node with `iso` content, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iso_storage: Option<String>,
    /// CD slot for the ISO (default `ide2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(ide[0-3]|sata[0-5]|scsi([0-9]|[12][0-9]|30))$"))]
    pub cd_slot: Option<String>,
}
