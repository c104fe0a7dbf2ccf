//! The NICs a machine wants and how they read in PVE net strings.

use super::properties::options;
use crate::spec::{ClusterSpec, MachineSpec, NetworkDevice, NicModel};

/// One NIC as the spec wants it.
#[derive(Debug, Clone)]
pub(super) struct Nic {
    pub(super) device: String,
    /// None: keep the template's NIC as it is.
    pub(super) dev: Option<NetworkDevice>,
    /// Static address from the `ipv4` / `ipv6` pool.
    pub(super) v4: bool,
    pub(super) v6: bool,
    pub(super) dhcp4: bool,
    pub(super) dhcp6: bool,
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

/// The machine's NICs: `net0` (the default device, or the template's NIC when the spec
/// has no network) and the additional devices.
pub(super) fn plan_nics(spec: &MachineSpec, cluster: &ClusterSpec) -> Vec<Nic> {
    let has4 = cluster.ipv4_config.is_some();
    let has6 = cluster.ipv6_config.is_some();
    let nic = |device: String, dev: Option<NetworkDevice>| {
        let dhcp4 = dev.as_ref().and_then(|d| d.dhcp4).unwrap_or(!has4);
        let dhcp6 = dev.as_ref().and_then(|d| d.dhcp6).unwrap_or(false);
        Nic {
            device,
            v4: has4 && !dhcp4,
            v6: has6 && !dhcp6,
            dhcp4,
            dhcp6,
            dev,
        }
    };
    let net = spec.network.clone().unwrap_or_default();
    let mut nics = vec![nic("net0".into(), net.default.clone())];
    for extra in &net.additional_devices {
        nics.push(nic(extra.name.clone(), Some(extra.device.clone())));
    }
    nics
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::machine::testing::template_spec;

    fn plan(network: Value, cluster: Value) -> Vec<Nic> {
        let mut spec = template_spec();
        if !network.is_null() {
            spec["network"] = network;
        }
        let spec: MachineSpec = serde_json::from_value(spec).unwrap();
        let cluster: ClusterSpec = serde_json::from_value(cluster).unwrap();
        plan_nics(&spec, &cluster)
    }

    fn pool() -> Value {
        json!({"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24, "gateway": "10.0.0.1"})
    }

    /// (device, v4, v6, dhcp4, dhcp6) of each NIC.
    fn summary(nics: &[Nic]) -> Vec<(&str, bool, bool, bool, bool)> {
        nics.iter()
            .map(|n| (n.device.as_str(), n.v4, n.v6, n.dhcp4, n.dhcp6))
            .collect()
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
        assert_eq!(summary(&nics), [("net0", false, false, true, false)]);
        assert!(nics[0].dev.is_none());
    }

    #[test]
    fn with_a_cluster_ipv4_pool_every_nic_takes_a_static_ipv4_address() {
        let network = json!({
            "default": {"bridge": "vmbr0"},
            "additionalDevices": [{"name": "net1", "bridge": "vmbr1"}],
        });
        let nics = plan(network, json!({"ipv4Config": pool()}));
        assert_eq!(
            summary(&nics),
            [
                ("net0", true, false, false, false),
                ("net1", true, false, false, false)
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
            json!({"ipv4Config": pool(), "ipv6Config": {
                "addresses": ["fd00::10-fd00::20"], "prefix": 64, "gateway": "fd00::1"
            }}),
        );
        assert_eq!(
            summary(&nics),
            [
                ("net0", true, true, false, false),
                ("net1", false, false, true, true)
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
        assert_eq!(devices, ["net0", "net3", "net1"]);
    }
}
