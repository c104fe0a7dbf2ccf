//! The NICs a machine wants, the addresses each takes from which pool, and how NICs
//! read in PVE net strings.
//!
//! Every NIC takes one address per pool, in this order: the default IPv4 pool if it
//! is flagged `defaultIPv4`, the default IPv6 pool if `defaultIPv6`, then each of its
//! `ipPoolRef`s. When no NIC is flagged for a family, the first one is (CAPMOX's
//! defaulting rule, applied here since no webhook runs). The default pools are the
//! cluster's, or those of the machine's `network.zone`. A NIC flagged for IPv4 whose
//! cluster (zone) has no pool at all and that has no `ipPoolRef` asks DHCPv4
//! instead, unless `dhcp4` says otherwise; `dhcp4: true` replaces the default IPv4
//! address by DHCP (and `dhcp6: true` the IPv6 one).
use guest_kit::invalid;
use guest_kit::machine::{AddressPool, PoolRef as WitPoolRef};
use guest_kit::types::PluginError;

use super::properties::options;
use crate::spec::convert::Version;
use crate::spec::{ClusterSpec, IpConfig, MachineSpec, NetworkDevice, NicModel, PoolRef, SERVED};

/// The API group of Cluster API's IPAM pools.
const IPAM_GROUP: &str = "ipam.cluster.x-k8s.io";

/// One NIC as the spec wants it.
#[derive(Debug, Clone)]
pub(super) struct Nic {
    /// `net0` ... `net31`.
    pub(super) device: String,
    /// Where the user wrote it, e.g. `spec.network.default`.
    pub(super) path: String,
    /// None: the template's NIC as it is (the spec has no network).
    pub(super) spec: Option<NetworkDevice>,
    /// It takes the default IPv4 (IPv6) address, by its flag or as the first NIC.
    pub(super) default4: bool,
    pub(super) default6: bool,
    /// The addresses it takes, in order.
    pub(super) pools: Vec<Pool>,
    pub(super) dhcp4: bool,
    pub(super) dhcp6: bool,
}

/// Where one address of a NIC comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Pool {
    /// A default pool the cluster reports (its name there, e.g. `v4-icip`, `z1-v6-icip`).
    Default {
        name: String,
        v6: bool,
        metric: Option<u32>,
    },
    /// A pool the NIC names.
    Ref(PoolRef),
}

impl Pool {
    /// How the host is asked for it (`address-request.pool`): a default pool by the
    /// name the cluster reported; a referenced one by its reference (API group
    /// `ipam.cluster.x-k8s.io` unless it names another).
    pub(super) fn request_pool(&self) -> AddressPool {
        match self {
            Pool::Default { name, .. } => AddressPool::Reported(name.clone()),
            Pool::Ref(r) => AddressPool::Reference(WitPoolRef {
                api_group: r
                    .api_group
                    .clone()
                    .unwrap_or_else(|| IPAM_GROUP.to_string()),
                kind: r.kind.clone(),
                name: r.name.clone(),
            }),
        }
    }

    /// How the pool is named in messages: a default pool by the name the cluster
    /// reported; a referenced one as `<Kind>/<name>`.
    pub(super) fn request_name(&self) -> String {
        match self {
            Pool::Default { name, .. } => name.clone(),
            Pool::Ref(r) => format!("{}/{}", r.kind, r.name),
        }
    }
}

/// The name of a default pool as the cluster reports it: `v4-icip`/`v6-icip`, or
/// `<zone>-v4-icip` for a zone (lower-cased, `_` as `-`, to make a Kubernetes name).
/// The host's pool is `<cluster>-<name>`: the InClusterIPPool CAPMOX makes for the same
/// cluster, so a cluster taken over from it keeps its pools and its machines' claims.
pub fn default_pool_name(zone: Option<&str>, v6: bool) -> String {
    let family = if v6 { "v6-icip" } else { "v4-icip" };
    match zone {
        None => family.into(),
        Some(z) => format!("{}-{family}", z.to_ascii_lowercase().replace('_', "-")),
    }
}

/// What a zone (or the cluster, outside any) gives its machines.
pub(super) struct Zone<'a> {
    /// The default pools.
    pub(super) v4: Option<&'a IpConfig>,
    pub(super) v6: Option<&'a IpConfig>,
    pub(super) dns_servers: &'a [String],
}

/// The default pools (`ipv4Config`, `ipv6Config`) of `zone` in the cluster, and the
/// zone's DNS servers; an unknown zone is an invalid spec.
pub(super) fn zone_pools<'a>(
    cluster: &'a ClusterSpec,
    zone: Option<&str>,
) -> Result<Zone<'a>, PluginError> {
    match zone {
        None => Ok(Zone {
            v4: cluster.ipv4_config.as_ref(),
            v6: cluster.ipv6_config.as_ref(),
            dns_servers: &cluster.dns_servers,
        }),
        Some(z) => {
            let config = cluster
                .zone_config
                .iter()
                .find(|c| c.zone == z)
                .ok_or_else(|| {
                    invalid(
                        "spec.network.zone",
                        format!(
                            "the cluster has no zone {z} (its zoneConfig names: {})",
                            cluster
                                .zone_config
                                .iter()
                                .map(|c| c.zone.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    )
                })?;
            let dns = if config.dns_servers.is_empty() {
                &cluster.dns_servers
            } else {
                &config.dns_servers
            };
            Ok(Zone {
                v4: config.ipv4_config.as_ref(),
                v6: config.ipv6_config.as_ref(),
                dns_servers: dns,
            })
        }
    }
}

/// The machine's NICs, in the order of the spec (or `net0`, the template's NIC, when
/// the spec has no network).
pub(super) fn plan_nics(
    spec: &MachineSpec,
    cluster: &ClusterSpec,
) -> Result<Vec<Nic>, PluginError> {
    let zone = spec.network.as_ref().and_then(|n| n.zone.as_deref());
    let Zone { v4, v6, .. } = zone_pools(cluster, zone)?;
    let devices: Vec<(Option<NetworkDevice>, String)> = match &spec.network {
        None => vec![(None, "spec.network".into())],
        Some(net) => net
            .network_devices
            .iter()
            .enumerate()
            .map(|(i, d)| (Some(d.clone()), device_path(&net.network_devices, i)))
            .collect(),
    };
    let flagged = |get: fn(&NetworkDevice) -> Option<bool>| {
        let any = devices
            .iter()
            .any(|(d, _)| d.as_ref().and_then(get) == Some(true));
        move |i: usize, d: &Option<NetworkDevice>| {
            d.as_ref().and_then(get) == Some(true) || (!any && i == 0)
        }
    };
    let default4 = flagged(|d| d.default_ipv4);
    let default6 = flagged(|d| d.default_ipv6);
    let no_pool = v4.is_none() && v6.is_none();
    let mut nics = vec![];
    for (i, (dev, path)) in devices.iter().enumerate() {
        let refs: &[PoolRef] = dev.as_ref().map_or(&[], |d| &d.ip_pool_ref);
        let (d4, d6) = (default4(i, dev), default6(i, dev));
        let dhcp4 = dev
            .as_ref()
            .and_then(|d| d.dhcp4)
            .unwrap_or(d4 && no_pool && refs.is_empty());
        let dhcp6 = dev.as_ref().and_then(|d| d.dhcp6).unwrap_or(false);
        let mut pools = vec![];
        for (wanted, dhcp, config, is_v6) in [(d4, dhcp4, v4, false), (d6, dhcp6, v6, true)] {
            if let (true, false, Some(c)) = (wanted, dhcp, config) {
                pools.push(Pool::Default {
                    name: default_pool_name(zone, is_v6),
                    v6: is_v6,
                    metric: c.metric,
                });
            }
        }
        pools.extend(refs.iter().cloned().map(Pool::Ref));
        nics.push(Nic {
            device: dev
                .as_ref()
                .map_or_else(|| "net0".into(), |d| d.name.clone()),
            path: path.clone(),
            spec: dev.clone(),
            default4: d4,
            default6: d6,
            pools,
            dhcp4,
            dhcp6,
        });
    }
    Ok(nics)
}

/// The path of device `i` as the user wrote it in the version the host serves.
pub(super) fn device_path(devices: &[NetworkDevice], i: usize) -> String {
    match SERVED {
        Version::V1alpha2 => format!("spec.network.networkDevices[{i}]"),
        Version::V1alpha1 if devices[i].name == "net0" => "spec.network.default".into(),
        Version::V1alpha1 => {
            let k = devices[..i].iter().filter(|d| d.name != "net0").count();
            format!("spec.network.additionalDevices[{k}]")
        }
    }
}

pub(super) fn mac_of(net: &str) -> Option<String> {
    options(net).into_iter().find_map(|(k, v)| {
        let model = matches!(
            k.as_str(),
            "virtio" | "e1000" | "rtl8139" | "vmxnet3" | "e1000e" | "macaddr"
        );
        (model && v.contains(':')).then_some(v)
    })
}

pub(super) fn model_name(m: NicModel) -> &'static str {
    match m {
        NicModel::E1000 => "e1000",
        NicModel::Virtio => "virtio",
        NicModel::Rtl8139 => "rtl8139",
        NicModel::Vmxnet3 => "vmxnet3",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::machine::testing::template_spec;
    use crate::spec::{cluster_spec, machine_spec};

    /// The plan of a `v1alpha1` machine with this `network` (null: none).
    fn plan(network: Value, cluster: Value) -> Vec<Nic> {
        let mut spec = template_spec();
        if !network.is_null() {
            spec["network"] = network;
        }
        plan_nics(
            &machine_spec(&spec.to_string(), "spec").unwrap(),
            &cluster_spec(&cluster.to_string(), "spec").unwrap(),
        )
        .unwrap()
    }

    /// The plan of a `v1alpha2` spec's network.
    fn plan2(network: Value, cluster: Value) -> Result<Vec<Nic>, PluginError> {
        let mut spec: MachineSpec = serde_json::from_value(template_spec()).unwrap();
        spec.network = Some(serde_json::from_value(network).unwrap());
        plan_nics(&spec, &serde_json::from_value(cluster).unwrap())
    }

    fn pool() -> Value {
        json!({"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24, "gateway": "10.0.0.1"})
    }

    fn pool6() -> Value {
        json!({"addresses": ["fd00::10-fd00::20"], "prefix": 64, "gateway": "fd00::1"})
    }

    /// (device, pools asked, dhcp4, dhcp6) of each NIC.
    fn summary(nics: &[Nic]) -> Vec<(String, Vec<String>, bool, bool)> {
        nics.iter()
            .map(|n| {
                let pools = n.pools.iter().map(Pool::request_name).collect();
                (n.device.clone(), pools, n.dhcp4, n.dhcp6)
            })
            .collect()
    }

    fn row(
        device: &str,
        pools: &[&str],
        dhcp4: bool,
        dhcp6: bool,
    ) -> (String, Vec<String>, bool, bool) {
        (
            device.into(),
            pools.iter().map(|p| p.to_string()).collect(),
            dhcp4,
            dhcp6,
        )
    }

    #[test]
    fn macs_are_found_in_net_strings() {
        assert_eq!(
            mac_of("virtio=BC:24:11:00:00:01,bridge=vmbr0").as_deref(),
            Some("BC:24:11:00:00:01")
        );
        assert_eq!(
            mac_of("e1000e=BC:24:11:00:00:02,bridge=vmbr0,firewall=1").as_deref(),
            Some("BC:24:11:00:00:02")
        );
        assert_eq!(
            mac_of("bridge=vmbr0,macaddr=BC:24:11:00:00:03,model=virtio").as_deref(),
            Some("BC:24:11:00:00:03")
        );
        assert_eq!(mac_of("virtio,bridge=vmbr0"), None);
        assert_eq!(mac_of("bridge=vmbr0,tag=5"), None);
    }

    #[test]
    fn every_model_has_its_pve_name() {
        let names: Vec<&str> = [
            NicModel::E1000,
            NicModel::Virtio,
            NicModel::Rtl8139,
            NicModel::Vmxnet3,
        ]
        .into_iter()
        .map(model_name)
        .collect();
        assert_eq!(names, ["e1000", "virtio", "rtl8139", "vmxnet3"]);
    }

    #[test]
    fn without_a_network_spec_the_templates_nic_takes_dhcp() {
        let nics = plan(Value::Null, json!({}));
        assert_eq!(summary(&nics), [row("net0", &[], true, false)]);
        assert!(nics[0].spec.is_none());
    }

    #[test]
    fn with_a_cluster_ipv4_pool_every_v1alpha1_nic_takes_a_static_ipv4_address() {
        let network = json!({
            "default": {"bridge": "vmbr0"},
            "additionalDevices": [{"name": "net1", "bridge": "vmbr1"}],
        });
        let nics = plan(network, json!({"ipv4Config": pool()}));
        assert_eq!(
            summary(&nics),
            [
                row("net0", &["v4-icip"], false, false),
                row("net1", &["v4-icip"], false, false)
            ]
        );
    }

    #[test]
    fn a_nic_asking_for_dhcp_takes_no_static_address() {
        let network = json!({
            "default": {"bridge": "vmbr0"},
            "additionalDevices": [{"name": "net1", "bridge": "vmbr1", "dhcp4": true, "dhcp6": true}],
        });
        let nics = plan(
            network,
            json!({"ipv4Config": pool(), "ipv6Config": pool6()}),
        );
        assert_eq!(
            summary(&nics),
            [
                row("net0", &["v4-icip", "v6-icip"], false, false),
                row("net1", &[], true, true)
            ]
        );
    }

    #[test]
    fn additional_nics_keep_their_names_and_order() {
        let network = json!({"additionalDevices": [
            {"name": "net3", "bridge": "vmbr3"},
            {"name": "net1", "bridge": "vmbr1"},
        ]});
        let devices: Vec<String> = plan(network, json!({}))
            .into_iter()
            .map(|n| n.device)
            .collect();
        assert_eq!(devices, ["net3", "net1"]);
    }

    #[test]
    fn when_no_nic_is_flagged_the_first_takes_the_default_addresses() {
        let network = json!({"networkDevices": [
            {"name": "net0", "bridge": "vmbr0"},
            {"name": "net1", "bridge": "vmbr1"},
        ]});
        let nics = plan2(
            network,
            json!({"ipv4Config": pool(), "ipv6Config": pool6()}),
        )
        .unwrap();
        assert_eq!(
            summary(&nics),
            [
                row("net0", &["v4-icip", "v6-icip"], false, false),
                row("net1", &[], false, false)
            ]
        );
    }

    #[test]
    fn flags_pick_the_nic_per_family_and_pool_references_follow_in_order() {
        let network = json!({"networkDevices": [
            {"name": "net0", "bridge": "vmbr0", "defaultIPv4": true},
            {"name": "net1", "bridge": "vmbr1", "defaultIPv6": true, "ipPoolRef": [
                {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "GlobalInClusterIPPool", "name": "shared"},
                {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "extra"},
            ]},
        ]});
        let nics = plan2(
            network,
            json!({"ipv4Config": pool(), "ipv6Config": pool6()}),
        )
        .unwrap();
        assert_eq!(
            summary(&nics),
            [
                row("net0", &["v4-icip"], false, false),
                row(
                    "net1",
                    &[
                        "v6-icip",
                        "GlobalInClusterIPPool/shared",
                        "InClusterIPPool/extra"
                    ],
                    false,
                    false
                )
            ]
        );
    }

    #[test]
    fn a_zone_gives_its_own_default_pools_and_an_unknown_zone_is_refused() {
        let cluster = json!({"ipv4Config": pool(), "zoneConfig": [
            {"zone": "Rack_A", "ipv4Config": pool(), "dnsServers": ["10.9.0.1"]},
        ]});
        let nics = plan2(
            json!({"zone": "Rack_A", "networkDevices": [{"name": "net0"}]}),
            cluster.clone(),
        )
        .unwrap();
        assert_eq!(
            summary(&nics),
            [row("net0", &["rack-a-v4-icip"], false, false)]
        );
        match plan2(
            json!({"zone": "b", "networkDevices": [{"name": "net0"}]}),
            cluster,
        ) {
            Err(PluginError::InvalidSpec(i)) => assert_eq!(i.field, "spec.network.zone"),
            other => panic!("expected an invalid zone, got {other:?}"),
        }
    }

    #[test]
    fn a_cluster_with_pools_of_one_family_gives_no_dhcp_for_the_other() {
        let nics = plan2(
            json!({"networkDevices": [{"name": "net0"}]}),
            json!({"ipv6Config": pool6()}),
        )
        .unwrap();
        assert_eq!(summary(&nics), [row("net0", &["v6-icip"], false, false)]);
    }

    #[test]
    fn v1alpha1_paths_name_the_default_and_additional_devices() {
        let network = json!({
            "default": {"bridge": "vmbr0"},
            "additionalDevices": [{"name": "net2", "bridge": "vmbr1"}, {"name": "net1", "bridge": "vmbr1"}],
        });
        let paths: Vec<String> = plan(network, json!({}))
            .into_iter()
            .map(|n| n.path)
            .collect();
        assert_eq!(
            paths,
            [
                "spec.network.default",
                "spec.network.additionalDevices[0]",
                "spec.network.additionalDevices[1]"
            ]
        );
    }
}
