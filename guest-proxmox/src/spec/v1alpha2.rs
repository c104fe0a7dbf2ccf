//! `infrastructure.cluster.x-k8s.io/v1alpha2`: the Proxmox provider's current API
//! (every field of CAPMOX v0.9.0's `v1alpha2`, the version it stores) plus our own
//! extensions, which `v1alpha1` has too: `disks.additionalVolumes`, `cloudInit`, and
//! `dhcp4`/`dhcp6` per network device. The plugin works on this model; `v1alpha1`
//! specs are converted to it (`convert.rs`).
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    ApiEndpoint, Checks, CloudInit, DiskFormat, Disks, IpConfig, MetadataSettings, NicModel,
    PoolRef, SchedulerHints, TemplateSelector, VmIdRange, ZoneConfig,
};

/// ProxmoxCluster `spec` (and ProxmoxClusterTemplate `spec.template.spec`). The host
/// adds `credentialsRef` and `credentialsRefs` (it reads those Secrets itself).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// The workload cluster's API endpoint (e.g. a kube-vip address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// The control plane is hosted elsewhere (e.g. Kamaji), which sets
    /// `controlPlaneEndpoint`: the cluster waits for it and never writes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_managed_control_plane: Option<bool>,
    /// Proxmox nodes machines may be placed on; each is a failure domain. Empty: all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_nodes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_hints: Option<SchedulerHints>,
    /// The default IPv4 pool: machines' default devices take addresses from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv4_config: Option<IpConfig>,
    /// The default IPv6 pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6_config: Option<IpConfig>,
    /// DNS servers of every machine's devices (a device's own `dnsServers` win).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_servers: Vec<String>,
    /// Zones with their own default pools and DNS servers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zone_config: Vec<ZoneConfig>,
}

/// ProxmoxMachine `spec` (and ProxmoxMachineTemplate `spec.template.spec`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    /// Node holding the template to clone (with `templateID`).
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
    /// Description of the new VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Disk format for full clones on file storages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<DiskFormat>,
    /// Full clone (default) or linked clone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full: Option<bool>,
    /// Resource pool to add the VM to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// Snapshot of the template to clone from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snap_name: Option<String>,
    /// Storage for the clone's disks (full clones only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<String>,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_sockets: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_cores: Option<u32>,
    #[serde(default, rename = "memoryMiB", skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disks: Option<Disks>,
    /// The VM's NICs and VRFs. Unset: the template's NICs as they are, the first one
    /// taking the cluster's default addresses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
    /// Allocate the VM ID from this range instead of the cluster's next free ID.
    #[serde(default, rename = "vmIDRange", skip_serializing_if = "Option::is_none")]
    pub vm_id_range: Option<VmIdRange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<Checks>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_settings: Option<MetadataSettings>,
    /// Overrides the cluster's `allowedNodes` for this machine.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_nodes: Vec<String>,
    /// Extra VM tags; immutable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Where the cloud-init (NoCloud) ISO goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_init: Option<CloudInit>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Network {
    /// The cluster zone whose pools give the default addresses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// The NICs, `net0` ... `net31`.
    #[serde(default)]
    pub network_devices: Vec<NetworkDevice>,
    /// VRF devices in the guest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vrfs: Vec<VrfDevice>,
}

/// The name a device has when none is given.
pub fn default_device_name() -> String {
    "net0".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkDevice {
    /// `net0` ... `net31`.
    #[serde(default = "default_device_name")]
    pub name: String,
    /// Bridge to attach the NIC to. Unset: the template's NIC stays as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bridge: Option<String>,
    /// NIC model (default `virtio`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<NicModel>,
    /// Proxmox's MTU of the NIC (1: the bridge's); virtio guests adopt it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u32>,
    /// Multiqueue: queues of the NIC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<u32>,
    /// Takes an address from the cluster's (or zone's) default IPv4 pool. When no
    /// device says, the first one does.
    #[serde(
        default,
        rename = "defaultIPv4",
        skip_serializing_if = "Option::is_none"
    )]
    pub default_ipv4: Option<bool>,
    /// Takes an address from the default IPv6 pool; when no device says, the first one.
    #[serde(
        default,
        rename = "defaultIPv6",
        skip_serializing_if = "Option::is_none"
    )]
    pub default_ipv6: Option<bool>,
    /// Pools giving the NIC one address each, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_pool_ref: Vec<PoolRef>,
    /// Overrides the cluster's DNS servers on this NIC.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_servers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routing_policy: Vec<RoutingPolicySpec>,
    /// The MTU inside the guest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_mtu: Option<u32>,
    /// DHCPv4 on this NIC. Unset: when it takes a default address but the cluster
    /// has no pool at all (and the NIC no `ipPoolRef`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhcp4: Option<bool>,
    /// DHCPv6 on this NIC (default off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhcp6: Option<bool>,
}

impl Default for NetworkDevice {
    fn default() -> Self {
        NetworkDevice {
            name: default_device_name(),
            bridge: None,
            model: None,
            mtu: None,
            vlan: None,
            queues: None,
            default_ipv4: None,
            default_ipv6: None,
            ip_pool_ref: vec![],
            dns_servers: vec![],
            routes: vec![],
            routing_policy: vec![],
            link_mtu: None,
            dhcp4: None,
            dhcp6: None,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VrfDevice {
    /// The VRF's name in the guest.
    pub name: String,
    /// Its routing table.
    pub table: u32,
    /// NICs it enslaves (`net2`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routing_policy: Vec<RoutingPolicySpec>,
}

/// A route: `to` is an address, a CIDR, or `default`/`all`.
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
    /// IPv6 (for `default`/`all` without a `via` to tell).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is6: Option<bool>,
}

/// A routing-policy (FIB) rule.
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
    /// IPv6 (for `default`/`all` when neither side tells).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is6: Option<bool>,
}
