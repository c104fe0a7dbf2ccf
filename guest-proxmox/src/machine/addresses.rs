//! Static addresses the host allocates and the addresses a machine reports.
//!
//! One address request per NIC and pool: `device` is `<net>-<index, two digits>-inet`
//! (so the host's claim, `<machine>-<device>`, is named as CAPMOX names it, e.g.
//! `m1-net0-00-inet`, and a dual-stack NIC's two claims differ), and `pool` is a
//! default pool by the name the cluster reported or the reference the NIC names. The
//! host echoes `device` in the address it allocates.
use guest_kit::machine::{AddressRequest, AddressType, AllocatedAddress, MachineAddress};

use super::context::Ctx;
use super::nics::{Nic, Pool};
use super::state::State;

/// The request device for the `index`th address of NIC `device`.
pub(super) fn request_device(device: &str, index: usize) -> String {
    format!("{device}-{index:02}-inet")
}

impl<'a> Ctx<'a> {
    pub(super) fn address_requests(&self) -> Vec<AddressRequest> {
        self.nics
            .iter()
            .flat_map(|n| {
                n.pools.iter().enumerate().map(|(i, p)| AddressRequest {
                    device: request_device(&n.device, i),
                    pool: p.request_pool(),
                    claim_suffix: None,
                })
            })
            .collect()
    }

    /// The address allocated for the `index`th pool of `nic`.
    pub(super) fn allocated(&self, nic: &Nic, index: usize) -> Option<&AllocatedAddress> {
        let device = request_device(&nic.device, index);
        self.req.addresses.iter().find(|a| a.device == device)
    }

    /// `(pool, address)` of every address allocated to `nic`, in order.
    pub(super) fn allocated_to<'n>(
        &self,
        nic: &'n Nic,
    ) -> impl Iterator<Item = (&'n Pool, &AllocatedAddress)> {
        nic.pools
            .iter()
            .enumerate()
            .filter_map(move |(i, p)| self.allocated(nic, i).map(|a| (p, a)))
    }

    pub(super) fn missing_addresses(&self) -> Vec<String> {
        let mut missing = vec![];
        for n in &self.nics {
            for (i, p) in n.pools.iter().enumerate() {
                if self.allocated(n, i).is_none() {
                    missing.push(format!("{}/{}", n.device, p.request_name()));
                }
            }
        }
        missing
    }

    pub(super) fn addresses(&self, st: &State) -> Vec<MachineAddress> {
        let mut out = vec![];
        for n in &self.nics {
            for (_, a) in self.allocated_to(n) {
                out.push(MachineAddress {
                    address_type: AddressType::InternalIp,
                    address: a.address.clone(),
                });
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
    use guest_kit::machine::AddressPool;
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
            "additionalDevices": [
                {"name": "net1", "bridge": "vmbr1", "dhcp4": true, "dhcp6": true},
                {"name": "net2", "bridge": "vmbr2", "ipv4PoolRef":
                    {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "GlobalInClusterIPPool", "name": "shared"}},
            ],
        });
        spec
    }

    #[test]
    fn one_address_is_requested_per_static_nic_and_pool_each_with_its_own_claim() {
        let req = request(spec(), dual_stack());
        let asked: Vec<(String, String)> = ctx(&req)
            .address_requests()
            .into_iter()
            .map(|r| {
                assert_eq!(r.claim_suffix, None);
                let pool = match r.pool {
                    AddressPool::Reported(name) => name,
                    AddressPool::Reference(p) => format!("{}/{}/{}", p.api_group, p.kind, p.name),
                };
                (r.device, pool)
            })
            .collect();
        let expected = [
            ("net0-00-inet", "v4-icip"),
            ("net0-01-inet", "v6-icip"),
            (
                "net2-00-inet",
                "ipam.cluster.x-k8s.io/GlobalInClusterIPPool/shared",
            ),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(d, p)| (d.to_string(), p.to_string()))
            .collect();
        assert_eq!(asked, expected);
    }

    #[test]
    fn what_the_host_has_not_allocated_yet_is_missing() {
        let mut req = request(spec(), dual_stack());
        assert_eq!(
            ctx(&req).missing_addresses(),
            [
                "net0/v4-icip",
                "net0/v6-icip",
                "net2/GlobalInClusterIPPool/shared"
            ]
        );
        req.addresses = vec![allocated("net0-00-inet", "10.0.0.11", 24, None)];
        assert_eq!(
            ctx(&req).missing_addresses(),
            ["net0/v6-icip", "net2/GlobalInClusterIPPool/shared"]
        );
    }

    #[test]
    fn a_machine_reports_its_static_and_dhcp_addresses_then_its_hostname() {
        let mut req = request(spec(), dual_stack());
        req.addresses = vec![
            allocated("net0-01-inet", "fd00::11", 64, None),
            allocated("net2-00-inet", "172.16.0.5", 24, None),
            allocated("net0-00-inet", "10.0.0.11", 24, None),
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
            ("AddressType::InternalIp", "172.16.0.5"),
            ("AddressType::Hostname", "m1"),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(t, a)| (t.to_string(), a.to_string()))
            .collect();
        assert_eq!(reported, expected);
    }
}
