//! VMID allocation (see the module doc of `machine`).

use std::collections::BTreeSet;

use guest_kit::types::PluginError;
use guest_kit::{fnv1a, transient};
use serde_json::Value;

use super::RETRY_MS;
use super::context::Ctx;
use super::properties::u64_of;
use crate::api::PveError;

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
        let size = u64::from(r.end - r.start) + 1;
        let offset = spread % size;
        let pick = (0..size)
            .map(|i| r.start + ((offset + i) % size) as u32)
            .find(|id| !used.contains(id) && !tried.contains(id));
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
    let mut id = if attempt == 0 {
        base
    } else {
        base + ((spread >> (attempt % 16)) % u64::from(4 * attempt)) as u32
    };
    while tried.contains(&id) {
        id += 1;
    }
    Ok(Some(id))
}

pub(super) fn used_vmids(cx: &Ctx) -> Result<BTreeSet<u32>, PluginError> {
    let vms = cx
        .pve
        .get("/cluster/resources?type=vm")
        .map_err(|e| e.classify("listing VMs"))?;
    Ok(vms
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| u64_of(v, "vmid").map(|n| n as u32))
        .collect())
}
