//! Choosing the node for a new VM.

use guest_kit::types::PluginError;
use guest_kit::{terminal, transient};
use serde_json::Value;

use super::context::Ctx;
use super::properties::{str_of, u64_of};
use super::{MIB, RETRY_MS};

/// The node for a new VM: CAPI's failure domain if given, else the allowed node with
/// the most free memory (node memory × memoryAdjustment% minus the memory of its VMs;
/// 0 disables the check) that has at least as many CPUs as the VM.
pub(super) fn pick_node(cx: &Ctx) -> Result<String, PluginError> {
    if let Some(fd) = &cx.req.failure_domain
        && !fd.is_empty()
    {
        return Ok(fd.clone());
    }
    let allowed: Vec<String> = if !cx.spec.allowed_nodes.is_empty() {
        cx.spec.allowed_nodes.clone()
    } else {
        cx.cluster.allowed_nodes.clone()
    };
    let all = cx
        .pve
        .get("/cluster/resources")
        .map_err(|e| e.classify("reading cluster resources"))?;
    let items: Vec<&Value> = all.as_array().into_iter().flatten().collect();
    let adjustment = cx
        .cluster
        .scheduler_hints
        .as_ref()
        .and_then(|h| h.memory_adjustment)
        .unwrap_or(100);
    let need_mem = cx.spec.memory_mib.unwrap_or(0) * MIB;
    let need_cpu = u64::from(cx.spec.num_sockets.unwrap_or(1) * cx.spec.num_cores.unwrap_or(1));
    let mut best: Option<(i128, String)> = None;
    let mut refused = vec![];
    for n in items
        .iter()
        .filter(|v| v.get("type").and_then(Value::as_str) == Some("node"))
    {
        let Some(name) = str_of(n, "node") else {
            continue;
        };
        if !allowed.is_empty() && !allowed.contains(&name) {
            continue;
        }
        if str_of(n, "status").as_deref() != Some("online") {
            refused.push(format!("{name}: offline"));
            continue;
        }
        let cpus = u64_of(n, "maxcpu").unwrap_or(0);
        if cpus > 0 && need_cpu > cpus {
            refused.push(format!("{name}: {cpus} CPUs < {need_cpu}"));
            continue;
        }
        let total = u64_of(n, "maxmem").unwrap_or(0);
        let used: u64 = items
            .iter()
            .filter(|v| matches!(v.get("type").and_then(Value::as_str), Some("qemu" | "lxc")))
            .filter(|v| str_of(v, "node").as_deref() == Some(name.as_str()))
            .filter(|v| u64_of(v, "template") != Some(1))
            .filter_map(|v| u64_of(v, "maxmem"))
            .sum();
        let free = (i128::from(total) * i128::from(adjustment)) / 100 - i128::from(used);
        if adjustment != 0 && free < i128::from(need_mem) {
            refused.push(format!(
                "{name}: {} MiB free of {}% < {} MiB",
                free.max(0) / i128::from(MIB),
                adjustment,
                need_mem / MIB
            ));
            continue;
        }
        let score = if adjustment == 0 {
            -i128::from(used)
        } else {
            free
        };
        if best.as_ref().is_none_or(|(s, _)| score > *s) {
            best = Some((score, name));
        }
    }
    match best {
        Some((_, n)) => Ok(n),
        None if refused.is_empty() => Err(terminal(
            "NoNodeAllowed",
            format!("none of the allowed nodes {allowed:?} exists in the Proxmox cluster"),
        )),
        None => Err(transient(
            format!("no node can take the VM now: {}", refused.join("; ")),
            Some(RETRY_MS * 6),
        )),
    }
}
