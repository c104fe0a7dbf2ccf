//! Finding a host: the one this machine already holds, or a free one claimed now.

use guest_kit::machine::MachineRequest;
use guest_kit::types::PluginError;
use guest_kit::{claims, fnv1a, log, terminal, transient};

use crate::api::Redfish;
use crate::inventory::{Bmc, Host, bmc_at, hosts};
use crate::spec::MachineSpec;

/// Who holds a host's claim, as seen by this machine.
pub(super) enum Ownership {
    Ours,
    Free,
    /// Another object, of this UID.
    Foreign(String),
}

pub(super) fn ownership(req: &MachineRequest, host: &Host) -> Result<Ownership, PluginError> {
    let holder = claims::holder(&host.claim_key()).map_err(|e| {
        transient(
            format!("reading the claim of host {}: {e}", host.name),
            None,
        )
    })?;
    Ok(match holder {
        None => Ownership::Free,
        Some(uid) if uid == req.machine.uid => Ownership::Ours,
        Some(uid) => Ownership::Foreign(uid),
    })
}

/// The host whose claim this machine holds, found among the BMCs (after lost state).
pub(super) fn held_host(bmcs: &[Bmc]) -> Result<Option<Host>, PluginError> {
    let keys = claims::held().map_err(|e| transient(format!("reading claims: {e}"), None))?;
    if keys.is_empty() {
        return Ok(None);
    }
    for bmc in bmcs {
        if let Some(h) = hosts(bmc)?
            .into_iter()
            .find(|h| keys.contains(&h.claim_key()))
        {
            return Ok(Some(h));
        }
    }
    Err(terminal(
        "ClaimedHostNotInInventory",
        format!(
            "this machine holds {} but no BMC of the cluster's credentialsRefs serves it; add its BMC back",
            keys.join(", ")
        ),
    ))
}

/// How a call came to its host.
pub(super) enum Found {
    /// Claimed now: nothing has been done to it.
    Claimed(Host),
    /// This machine's already (its state was lost): it may be half or fully provisioned.
    Adopted(Host),
}

/// This machine's host: the one it holds a claim on, the one its `providerID` names
/// (set once it was provisioned; it survives `clusterctl move`, which loses state and
/// claims) where adoption is granted, or a free one it claims now. `Ok(None)`: none is
/// free (yet). A claim is the proof a host is this machine's; a provider ID is what
/// someone wrote, followed only with the administrator's grant.
pub(super) fn find_or_claim(
    req: &MachineRequest,
    spec: &MachineSpec,
    bmcs: &[Bmc],
) -> Result<Option<Found>, PluginError> {
    if let Some(held) = held_host(bmcs)? {
        log::info(
            "adopting the host this machine holds",
            &[("host", held.name.clone())],
        );
        return Ok(Some(Found::Adopted(held)));
    }
    if let Some(id) = &spec.provider_id {
        if !guest_kit::grants::adoption_allowed() {
            return Err(terminal(
                "AdoptionNotGranted",
                "spec.providerID names a host this machine holds no claim on, and adoption is not granted for it: nothing is touched. An administrator grants adoption with hyperplug run --adopt-namespace (after clusterctl move, for instance)",
            ));
        }
        return by_provider_id(id, bmcs).map(|h| Some(Found::Adopted(h)));
    }
    claim(req, spec, bmcs).map(|h| h.map(Found::Claimed))
}

/// The host a provider ID names, claimed again for this machine if free.
fn by_provider_id(id: &str, bmcs: &[Bmc]) -> Result<Host, PluginError> {
    let uuid = id.strip_prefix("redfish://").ok_or_else(|| {
        guest_kit::invalid(
            "spec.providerID",
            format!("`{id}` is not a redfish://<system UUID> provider ID"),
        )
    })?;
    let mut found = None;
    for bmc in bmcs {
        if let Some(h) = hosts(bmc)?
            .into_iter()
            .find(|h| h.uuid.eq_ignore_ascii_case(uuid))
        {
            found = Some(h);
            break;
        }
    }
    let host = found.ok_or_else(|| {
        terminal(
            "HostNotInInventory",
            format!("no BMC of the cluster's credentialsRefs serves {id}; add its BMC back"),
        )
    })?;
    match claims::acquire(&host.claim_key()) {
        Ok(None) => Ok(host),
        Ok(Some(uid)) => {
            // Who holds it is another object's business: the manager's log says, the
            // machine does not.
            log::warn(
                "a providerID names a host another object holds",
                &[("host", host.name.clone()), ("holder", uid)],
            );
            Err(terminal(
                "HostClaimedByAnother",
                format!(
                    "the host {id} names is held by another object; this machine will not touch it"
                ),
            ))
        }
        Err(e) => Err(transient(format!("claiming host {}: {e}", host.name), None)),
    }
}

/// Claim a free host the spec allows. `Ok(None)`: none is free (yet).
fn claim(
    req: &MachineRequest,
    spec: &MachineSpec,
    bmcs: &[Bmc],
) -> Result<Option<Host>, PluginError> {
    let mut inventory = Vec::new();
    for bmc in bmcs {
        inventory.extend(hosts(bmc)?);
    }
    for host in claim_order(&req.machine.uid, spec, inventory) {
        match claims::acquire(&host.claim_key()) {
            Ok(None) => {
                log::info(
                    "claimed host",
                    &[("host", host.name.clone()), ("bmc", host.endpoint.clone())],
                );
                return Ok(Some(host));
            }
            Ok(Some(_)) => continue,
            Err(e) => return Err(transient(format!("claiming host {}: {e}", host.name), None)),
        }
    }
    Ok(None)
}

/// The hosts of `inventory` the spec allows (by name or UUID), in the order the
/// machine of `uid` tries to claim them: from a place derived from its UID, so machines
/// claiming at once mostly try different hosts first.
fn claim_order(uid: &str, spec: &MachineSpec, inventory: Vec<Host>) -> Vec<Host> {
    let mut candidates: Vec<Host> = inventory
        .into_iter()
        .filter(|h| {
            spec.hosts.is_empty()
                || spec
                    .hosts
                    .iter()
                    .any(|n| *n == h.name || n.eq_ignore_ascii_case(&h.uuid))
        })
        .collect();
    if !candidates.is_empty() {
        let start = (fnv1a(uid.as_bytes()) % candidates.len() as u64) as usize;
        candidates.rotate_left(start);
    }
    candidates
}

/// The client of the BMC serving `host`, which the call must still carry.
pub(super) fn client_for(bmcs: &[Bmc], host: &Host) -> Result<Redfish, PluginError> {
    bmc_at(bmcs, &host.endpoint).map(Bmc::client).ok_or_else(|| {
        terminal(
            "BmcNotInInventory",
            format!(
                "host {} is served by {}, which is no longer among the cluster's credentialsRefs; add it back",
                host.name, host.endpoint
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::machine::testing::host;

    fn inventory() -> Vec<Host> {
        vec![
            host("https://bmc1.test", "node-1", "uuid-1"),
            host("https://bmc1.test", "node-2", "uuid-2"),
            host("https://bmc2.test", "node-3", "uuid-3"),
        ]
    }

    fn spec(hosts: &[&str]) -> MachineSpec {
        serde_json::from_value(json!({"hosts": hosts})).unwrap()
    }

    fn names(hosts: &[Host]) -> Vec<&str> {
        hosts.iter().map(|h| h.name.as_str()).collect()
    }

    #[test]
    fn every_host_is_a_candidate_when_the_spec_names_none() {
        let mut order = names(&claim_order("m1-uid", &spec(&[]), inventory()))
            .into_iter()
            .map(str::to_string)
            .collect::<Vec<_>>();
        order.sort();
        assert_eq!(order, ["node-1", "node-2", "node-3"]);
    }

    #[test]
    fn the_spec_narrows_the_candidates_by_name_or_uuid_in_any_case() {
        let allowed = spec(&["node-2", "UUID-3"]);
        let mut order: Vec<String> = claim_order("m1-uid", &allowed, inventory())
            .into_iter()
            .map(|h| h.name)
            .collect();
        order.sort();
        assert_eq!(order, ["node-2", "node-3"]);
        assert!(claim_order("m1-uid", &spec(&["node-9"]), inventory()).is_empty());
    }

    #[test]
    fn machines_start_claiming_at_different_hosts_in_the_same_rotation() {
        let starts: std::collections::BTreeSet<String> = (0..12)
            .map(|i| {
                claim_order(&format!("machine-{i}"), &spec(&[]), inventory())[0]
                    .name
                    .clone()
            })
            .collect();
        assert_eq!(starts.len(), 3, "{starts:?}");
        for i in 0..12 {
            let order = claim_order(&format!("machine-{i}"), &spec(&[]), inventory());
            let at = ["node-1", "node-2", "node-3"]
                .iter()
                .position(|n| *n == order[0].name)
                .unwrap();
            let rotated: Vec<&str> = (0..3)
                .map(|k| ["node-1", "node-2", "node-3"][(at + k) % 3])
                .collect();
            assert_eq!(names(&order), rotated);
        }
    }

    #[test]
    fn the_same_machine_always_tries_the_same_host_first() {
        let first = claim_order("m1-uid", &spec(&[]), inventory());
        let again = claim_order("m1-uid", &spec(&[]), inventory());
        assert_eq!(first, again);
    }
}
