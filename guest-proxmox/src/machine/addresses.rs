//! Static addresses the host allocates and the addresses a machine reports.

use guest_kit::machine::{AddressRequest, AddressType, AllocatedAddress, MachineAddress};

use super::context::Ctx;
use super::state::State;

impl<'a> Ctx<'a> {
    pub(super) fn address_requests(&self) -> Vec<AddressRequest> {
        let mut out = vec![];
        for n in &self.nics {
            if n.v4 {
                out.push(AddressRequest {
                    device: n.device.clone(),
                    pool: "ipv4".into(),
                });
            }
            if n.v6 {
                out.push(AddressRequest {
                    device: n.device.clone(),
                    pool: "ipv6".into(),
                });
            }
        }
        out
    }

    /// The allocated address for (device, v6?).
    pub(super) fn allocated(&self, device: &str, v6: bool) -> Option<&AllocatedAddress> {
        self.req
            .addresses
            .iter()
            .find(|a| a.device == device && a.address.contains(':') == v6)
    }

    pub(super) fn missing_addresses(&self) -> Vec<String> {
        let mut missing = vec![];
        for n in &self.nics {
            if n.v4 && self.allocated(&n.device, false).is_none() {
                missing.push(format!("{}/ipv4", n.device));
            }
            if n.v6 && self.allocated(&n.device, true).is_none() {
                missing.push(format!("{}/ipv6", n.device));
            }
        }
        missing
    }

    pub(super) fn addresses(&self, st: &State) -> Vec<MachineAddress> {
        let mut out = vec![];
        for n in &self.nics {
            for v6 in [false, true] {
                if (!v6 && n.v4 || v6 && n.v6)
                    && let Some(a) = self.allocated(&n.device, v6)
                {
                    out.push(MachineAddress {
                        address_type: AddressType::InternalIp,
                        address: a.address.clone(),
                    });
                }
            }
            for a in st.dhcp.get(&n.device).into_iter().flatten() {
                out.push(MachineAddress {
                    address_type: AddressType::InternalIp,
                    address: a.clone(),
                });
            }
        }
        out.push(MachineAddress {
            address_type: AddressType::Hostname,
            address: self.req.machine.name.clone(),
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use guest_kit::testing::allocated;

    use crate::machine::testing::{ctx, request, template_spec};

    fn dual_stack() -> Value {
        json!({
            "ipv4Config": {"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24, "gateway": "10.0.0.1"},
            "ipv6Config": {"addresses": ["fd00::10-fd00::20"], "prefix": 64, "gateway": "fd00::1"},
        })
    }

    fn spec() -> Value {
        let mut spec = template_spec();
        spec["network"] = json!({
            "default": {"bridge": "vmbr0"},
            "additionalDevices": [{"name": "net1", "bridge": "vmbr1", "dhcp4": true, "dhcp6": true}],
        });
        spec
    }

    #[test]
    fn one_address_is_requested_per_static_nic_and_pool() {
        let req = request(spec(), dual_stack());
        let asked: Vec<(String, String)> = ctx(&req)
            .address_requests()
            .into_iter()
            .map(|r| (r.device, r.pool))
            .collect();
        assert_eq!(
            asked,
            [
                ("net0".to_string(), "ipv4".to_string()),
                ("net0".to_string(), "ipv6".to_string())
            ]
        );
    }

    #[test]
    fn what_the_host_has_not_allocated_yet_is_missing() {
        let mut req = request(spec(), dual_stack());
        assert_eq!(ctx(&req).missing_addresses(), ["net0/ipv4", "net0/ipv6"]);
        req.addresses = vec![allocated("net0", "10.0.0.11", 24, None)];
        assert_eq!(ctx(&req).missing_addresses(), ["net0/ipv6"]);
    }

    #[test]
    fn a_machine_reports_its_static_and_dhcp_addresses_then_its_hostname() {
        let mut req = request(spec(), dual_stack());
        req.addresses = vec![
            allocated("net0", "fd00::11", 64, None),
            allocated("net0", "10.0.0.11", 24, None),
        ];
        let mut st = State::default();
        st.dhcp.insert("net1".into(), vec!["192.168.1.50".into()]);
        let reported: Vec<(String, String)> = ctx(&req)
            .addresses(&st)
            .into_iter()
            .map(|a| (format!("{:?}", a.address_type), a.address))
            .collect();
        let expected = [
            ("AddressType::InternalIp", "10.0.0.11"),
            ("AddressType::InternalIp", "fd00::11"),
            ("AddressType::InternalIp", "192.168.1.50"),
            ("AddressType::Hostname", "m1"),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(t, a)| (t.to_string(), a.to_string()))
            .collect();
        assert_eq!(reported, expected);
    }
}
