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
