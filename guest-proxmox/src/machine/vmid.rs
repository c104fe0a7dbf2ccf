//! VMID allocation (see the module doc of `machine`).

use std::collections::BTreeSet;

use guest_kit::types::PluginError;
use guest_kit::{fnv1a, transient};
use serde_json::Value;

use super::RETRY_MS;
use super::context::Ctx;
use super::properties::u64_of;
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

/// The next VMID to propose (the clone verifies it).
pub(super) fn next_vmid(
    cx: &Ctx,
    attempt: u32,
    tried: &BTreeSet<u32>,
) -> Result<Option<u32>, PluginError> {
    let spread = fnv1a(cx.uid().as_bytes());
    if let Some(r) = &cx.spec.vm_id_range {
        let used = used_vmids(cx)?;
        let pick = in_range(r, spread, &used, tried);
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
    Ok(Some(after_next_id(base, spread, attempt, tried)))
}

/// The first ID of `range`, walking from an offset `spread` picks (so machines
/// allocating at once mostly start at different IDs), that is neither used nor tried.
pub(super) fn in_range(
    range: &VmIdRange,
    spread: u64,
    used: &BTreeSet<u32>,
    tried: &BTreeSet<u32>,
) -> Option<u32> {
    let size = u64::from(range.end - range.start) + 1;
    let offset = spread % size;
    (0..size)
        .map(|i| range.start + ((offset + i) % size) as u32)
        .find(|id| !used.contains(id) && !tried.contains(id))
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
    Ok(cx
        .resources()?
        .iter()
        .filter_map(|v| u64_of(v, "vmid").map(|n| n as u32))
        .collect())
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
            in_range(&range(200, 209), 3, &ids(&[]), &ids(&[])),
            Some(203)
        );
        assert_eq!(
            in_range(&range(200, 209), 13, &ids(&[]), &ids(&[])),
            Some(203)
        );
    }

    #[test]
    fn used_and_tried_ids_are_skipped_wrapping_around_the_range() {
        let used = ids(&[208, 209]);
        let tried = ids(&[200]);
        assert_eq!(in_range(&range(200, 209), 8, &used, &tried), Some(201));
    }

    #[test]
    fn a_full_range_has_nothing_to_offer() {
        let used = ids(&[300, 301]);
        assert_eq!(in_range(&range(300, 301), 0, &used, &ids(&[])), None);
        assert_eq!(in_range(&range(300, 300), 0, &ids(&[]), &ids(&[300])), None);
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
