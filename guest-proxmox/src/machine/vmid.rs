//! VMID allocation (see the module doc of `machine`).

use std::collections::BTreeSet;

use guest_kit::hold;
use guest_kit::types::PluginError;
use guest_kit::{fnv1a, transient};
use serde_json::Value;

use super::RETRY_MS;
use super::context::Ctx;
use crate::api::PveError;
use crate::spec::VmIdRange;

pub(super) fn vmid_taken(e: &PveError) -> bool {
    match e {
        PveError::Status {
            message, errors, ..
        } => {
            message.contains("already exists")
                || errors
                    .as_ref()
                    .is_some_and(|e| e.to_string().contains("already exists"))
        }
        _ => false,
    }
}

/// How long a proposed VMID stays held for its machine against the manager's other
/// machines: past the clone request that verifies it and the start of its task (PVE's
/// `nextid` keeps answering an ID until the clone task writes its config).
const HOLD_MS: u32 = 60_000;
/// IDs held by other machines of this manager stepped over before this call gives up.
const MAX_HELD_SKIPS: usize = 256;

/// The reservation key of `vmid` on this PVE cluster (its URL digested: keys are short).
fn hold_key(cx: &Ctx, vmid: u32) -> String {
    format!("vmid:{:016x}:{vmid}", fnv1a(cx.pve.base().as_bytes()))
}

/// Holds `vmid` for this machine: false when another machine of this manager is about to
/// propose it. Between managers PVE's own refusal stays the arbiter.
pub(super) fn hold_id(cx: &Ctx, vmid: u32) -> bool {
    hold::reserve(&hold_key(cx, vmid), HOLD_MS)
}

/// Whether another machine of this manager holds `vmid` (it is proposing it, or its
/// clone to it runs): such a clone is not this machine's. Asking holds the ID for a
/// moment; it is let go at once.
pub(super) fn held_elsewhere(cx: &Ctx, vmid: u32) -> bool {
    if hold_id(cx, vmid) {
        release(cx, vmid);
        false
    } else {
        true
    }
}

/// Lets the hold on `vmid` go: its clone wrote its config (`nextid` skips it now), or it
/// turned out to be taken.
pub(super) fn release(cx: &Ctx, vmid: u32) {
    hold::release(&hold_key(cx, vmid));
}

/// The next VMID to propose (the clone verifies it), held against the manager's other
/// machines so that concurrent machines never propose the same one.
pub(super) fn next_vmid(
    cx: &Ctx,
    attempt: u32,
    tried: &BTreeSet<u32>,
) -> Result<Option<u32>, PluginError> {
    let spread = fnv1a(cx.uid().as_bytes());
    if let Some(r) = &cx.spec.vm_id_range {
        let used = used_vmids(cx)?;
        let pick = in_range(r, spread, &used, tried, |id| hold_id(cx, id));
        if pick.is_none() && in_range(r, spread, &used, tried, |_| true).is_some() {
            return Err(transient(
                format!(
                    "every free ID of vmIDRange {}-{} is being proposed by another machine of this manager",
                    r.start, r.end
                ),
                Some(RETRY_MS),
            ));
        }
        if pick.is_none() && attempt == 0 {
            return Err(transient(
                format!(
                    "vmIDRange {}-{} is exhausted: every ID is in use",
                    r.start, r.end
                ),
                Some(RETRY_MS * 6),
            ));
        }
        return Ok(pick);
    }
    let next = cx
        .pve
        .get("/cluster/nextid")
        .map_err(|e| e.classify("asking for the next free VMID"))?;
    let base: u32 = match &next {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_u64().map(|n| n as u32),
        _ => None,
    }
    .ok_or_else(|| transient(format!("unreadable nextid reply {next}"), None))?;
    // `nextid` answers the lowest free ID; above it, IDs whose clones wrote their
    // config (their holds gone) are in use: step over them rather than be refused.
    let mut skip = used_vmids(cx)?;
    skip.extend(tried);
    let first = after_next_id(base, spread, attempt, &skip);
    first_free(first, &skip, |id| hold_id(cx, id))
        .map(Some)
        .ok_or_else(|| {
            transient(
                format!(
                    "VMIDs {first} to {} are all being proposed by other machines of this manager",
                    first as usize + MAX_HELD_SKIPS
                ),
                Some(RETRY_MS),
            )
        })
}

/// The first ID from `start` up that is not in `tried` (tried, or in use) and that
/// `hold` grants, looking at most [`MAX_HELD_SKIPS`] IDs.
fn first_free(start: u32, tried: &BTreeSet<u32>, mut hold: impl FnMut(u32) -> bool) -> Option<u32> {
    (start..)
        .filter(|id| !tried.contains(id))
        .take(MAX_HELD_SKIPS)
        .find(|&id| hold(id))
}

/// The first ID of `range`, walking from an offset `spread` picks (so machines
/// allocating at once mostly start at different IDs), that is neither used nor tried
/// and that `hold` grants (no other machine of this manager is proposing it).
pub(super) fn in_range(
    range: &VmIdRange,
    spread: u64,
    used: &BTreeSet<u32>,
    tried: &BTreeSet<u32>,
    mut hold: impl FnMut(u32) -> bool,
) -> Option<u32> {
    let size = u64::from(range.end - range.start) + 1;
    let offset = spread % size;
    (0..size)
        .map(|i| range.start + ((offset + i) % size) as u32)
        .filter(|id| !used.contains(id) && !tried.contains(id))
        .take(MAX_HELD_SKIPS)
        .find(|&id| hold(id))
}

/// The ID to propose when `nextid` answered `base`: `base` on the first attempt;
/// after a collision (another machine took it meanwhile) a `spread`-derived offset
/// above it, so two machines racing for `base` part ways; never one already tried.
pub(super) fn after_next_id(base: u32, spread: u64, attempt: u32, tried: &BTreeSet<u32>) -> u32 {
    let mut id = if attempt == 0 {
        base
    } else {
        base + ((spread >> (attempt % 16)) % u64::from(4 * attempt)) as u32
    };
    while tried.contains(&id) {
        id += 1;
    }
    id
}

/// VMIDs of every VM and container.
pub(super) fn used_vmids(cx: &Ctx) -> Result<BTreeSet<u32>, PluginError> {
    Ok(cx.resources()?.iter().filter_map(|v| v.vmid32()).collect())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn range(start: u32, end: u32) -> VmIdRange {
        VmIdRange { start, end }
    }

    fn ids(list: &[u32]) -> BTreeSet<u32> {
        list.iter().copied().collect()
    }

    #[test]
    fn a_range_is_walked_from_the_place_the_spread_picks() {
        assert_eq!(
            in_range(&range(200, 209), 3, &ids(&[]), &ids(&[]), |_| true),
            Some(203)
        );
        assert_eq!(
            in_range(&range(200, 209), 13, &ids(&[]), &ids(&[]), |_| true),
            Some(203)
        );
    }

    #[test]
    fn used_and_tried_ids_are_skipped_wrapping_around_the_range() {
        let used = ids(&[208, 209]);
        let tried = ids(&[200]);
        assert_eq!(
            in_range(&range(200, 209), 8, &used, &tried, |_| true),
            Some(201)
        );
    }

    #[test]
    fn ids_another_machine_holds_are_stepped_over() {
        let held_elsewhere = ids(&[203, 204]);
        let pick = in_range(&range(200, 209), 3, &ids(&[]), &ids(&[]), |id| {
            !held_elsewhere.contains(&id)
        });
        assert_eq!(pick, Some(205));
        assert_eq!(
            first_free(150, &ids(&[151]), |id| !held_elsewhere.contains(&id)
                && id != 150),
            Some(152)
        );
    }

    #[test]
    fn ids_in_use_above_nextid_are_stepped_over_not_proposed() {
        // nextid answered 100; 100-102 are held by machines about to clone, 103 is a
        // VM whose clone wrote its config (its hold gone): 104 is proposed.
        let in_use = ids(&[103]);
        let held_elsewhere = ids(&[100, 101, 102]);
        let pick = first_free(100, &in_use, |id| !held_elsewhere.contains(&id));
        assert_eq!(pick, Some(104));
    }

    #[test]
    fn a_walk_past_ids_held_elsewhere_is_bounded() {
        let mut asked = 0;
        assert_eq!(
            first_free(100, &ids(&[]), |_| {
                asked += 1;
                false
            }),
            None
        );
        assert_eq!(asked, MAX_HELD_SKIPS);
    }

    #[test]
    fn a_full_range_has_nothing_to_offer() {
        let used = ids(&[300, 301]);
        assert_eq!(
            in_range(&range(300, 301), 0, &used, &ids(&[]), |_| true),
            None
        );
        assert_eq!(
            in_range(&range(300, 300), 0, &ids(&[]), &ids(&[300]), |_| true),
            None
        );
    }

    #[test]
    fn nextid_is_proposed_as_is_first() {
        assert_eq!(after_next_id(100, 0xdead_beef, 0, &ids(&[])), 100);
    }

    #[test]
    fn after_a_collision_the_proposal_moves_above_nextid_and_never_repeats() {
        let tried = ids(&[100]);
        let second = after_next_id(100, 0xdead_beef, 1, &tried);
        assert!((101..104).contains(&second), "{second}");
        let tried = ids(&[100, 101, 102, 103]);
        assert_eq!(after_next_id(100, 0, 1, &tried), 104);
    }

    #[test]
    fn two_machines_racing_for_the_same_nextid_part_ways() {
        let a = after_next_id(100, fnv1a(b"machine-a"), 3, &ids(&[100]));
        let b = after_next_id(100, fnv1a(b"machine-b"), 3, &ids(&[100]));
        assert_ne!(a, b);
    }

    #[test]
    fn pve_saying_the_id_exists_means_it_is_taken() {
        let in_message = PveError::Status {
            status: 500,
            message: "unable to create VM 100: config file already exists".into(),
            errors: None,
        };
        let in_errors = PveError::Status {
            status: 400,
            message: "Parameter verification failed.".into(),
            errors: Some(json!({"newid": "VM 100 already exists"})),
        };
        let other = PveError::Status {
            status: 500,
            message: "storage 'local' does not exist".into(),
            errors: None,
        };
        assert!(vmid_taken(&in_message));
        assert!(vmid_taken(&in_errors));
        assert!(!vmid_taken(&other));
        assert!(!vmid_taken(&PveError::BadReply("?".into())));
    }
}
