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
    use super::*;

    #[test]
    fn macs_are_found_in_net_strings() {
        assert_eq!(
            mac_of("virtio=BC:24:11:00:00:01,bridge=vmbr0").as_deref(),
            Some("BC:24:11:00:00:01")
        );
        assert_eq!(mac_of("virtio,bridge=vmbr0"), None);
    }
}
