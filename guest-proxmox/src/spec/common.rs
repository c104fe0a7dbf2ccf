//! The parts of the API that are the same in every version (the Rust shapes; what a
//! version's CRD says about them beyond this is in `schema.rs`).
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use guest_kit::endpoint::ApiEndpoint;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerHints {
    /// Percent of a node's memory that may be allocated to VMs (100 = no overcommit,
    /// 0 = no memory check at all). Default 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_adjustment: Option<u64>,
}

/// Addresses handed to machines through Cluster API IPAM.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IpConfig {
    /// Ranges (`10.0.0.10-10.0.0.20`), CIDRs or single addresses.
    pub addresses: Vec<String>,
    #[schemars(range(min = 1, max = 128))]
    pub prefix: u8,
    /// The default gateway of the pool's addresses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    /// Metric of the default route through `gateway`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<u32>,
}

/// A zone of the cluster: machines with `network.zone` set to it take their default
/// addresses from its pools and its DNS servers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ZoneConfig {
    #[schemars(regex(pattern = r"^[a-z0-9A-Z](?:[a-z0-9A-Z-_.]{0,61}[a-z0-9A-Z])?$"))]
    pub zone: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv4_config: Option<IpConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6_config: Option<IpConfig>,
    /// DNS servers of the zone's machines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_servers: Vec<String>,
}

/// How `templateSelector.matchTags` select among the templates carrying them:
/// `exact` (the template's tags are the match tags), `uniqueSubset` (it carries all
/// of them, maybe more; only one may) or `bestSubset` (of those carrying all of them,
/// the one with the fewest others).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum MatchPolicy {
    #[serde(rename = "exact")]
    Exact,
    #[serde(rename = "uniqueSubset")]
    UniqueSubset,
    #[serde(rename = "bestSubset")]
    BestSubset,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateSelector {
    /// Tags the template must carry.
    pub match_tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_policy: Option<MatchPolicy>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DiskFormat {
    Raw,
    Qcow2,
    Vmdk,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disks {
    /// Grows the boot disk (never shrinks it); immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_volume: Option<DiskSize>,
    /// Disks added after cloning.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_volumes: Vec<AdditionalVolume>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiskSize {
    /// Device, e.g. `scsi0`.
    #[schemars(length(min = 1))]
    pub disk: String,
    /// Size in GB; the boot volume only grows.
    #[schemars(range(min = 5))]
    pub size_gb: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NicModel {
    E1000,
    Virtio,
    Rtl8139,
    Vmxnet3,
}

/// A Cluster API IPAM pool: an `InClusterIPPool` (in the cluster's namespace) or a
/// `GlobalInClusterIPPool`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    pub kind: String,
    pub name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VmIdRange {
    #[schemars(range(min = 100, max = 999_999_999))]
    pub start: u32,
    #[schemars(range(min = 100, max = 999_999_999))]
    pub end: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Checks {
    /// Do not wait for cloud-init to apply the meta-data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_cloud_init_status: Option<bool>,
    /// Do not enable or wait for the QEMU guest agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_qemu_guest_agent: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetadataSettings {
    /// Write `provider-id: proxmox://<SMBIOS UUID>` into the meta-data. Unset (or no
    /// `metadataSettings`): written.
    #[serde(
        default,
        rename = "providerIDInjection",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id_injection: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
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

/// Pattern of Proxmox tags (template selector tags and VM tags).
pub const TAG_PATTERN: &str = r"^(?i)[a-z0-9_][a-z0-9_\-\+\.]*$";
