//! What pve-sim's task timeline says about the benchmark's work.
use std::collections::BTreeMap;

use pve_sim::Config;
use serde_json::Value;

/// One task as `/_sim/tasks` shows it.
#[derive(Debug, Clone)]
pub struct SimTask {
    pub kind: String,
    pub node: String,
    pub vm: Option<u32>,
    pub ok: bool,
    pub submitted_ms: u64,
    pub ended_ms: Option<u64>,
}

impl SimTask {
    pub fn parse(v: &Value) -> SimTask {
        let kind = v["type"].as_str().unwrap_or_default().to_string();
        // An upload names no VM; the plugin's ISO name carries the VMID
        // (`hyperplug-<vmid>-<uid>.iso`), which the task log shows as its target file.
        let vm = v["vm"].as_u64().map(|v| v as u32).or_else(|| {
            v["log"].as_array()?.iter().find_map(|l| {
                let l = l.as_str()?;
                let file = l.strip_prefix("target file: ")?;
                let name = file.rsplit('/').next()?;
                name.strip_prefix("hyperplug-")?
                    .split('-')
                    .next()?
                    .parse()
                    .ok()
            })
        });
        SimTask {
            kind,
            node: v["node"].as_str().unwrap_or_default().to_string(),
            vm,
            ok: v["exitstatus"].as_str() == Some("OK"),
            submitted_ms: v["submitted_ms"].as_u64().unwrap_or(0),
            ended_ms: v["ended_ms"].as_u64(),
        }
    }
}

/// The physical lower bound of a phase: every node runs its share of the tasks at full
/// concurrency (sum of their configured durations / slots), no machine finishes before
/// its own chain of tasks, and after its last task each machine still waits `tail_ms`
/// (boot and guest agent). In milliseconds.
pub fn lower_bound_ms(config: &Config, tasks: &[&SimTask], tail_ms: u64) -> u64 {
    let mut per_node: BTreeMap<&str, u64> = BTreeMap::new();
    let mut per_vm: BTreeMap<u32, u64> = BTreeMap::new();
    for t in tasks.iter().filter(|t| t.ok) {
        let ms = config.task_duration_ms(&t.kind);
        *per_node.entry(t.node.as_str()).or_default() += ms;
        if let Some(vm) = t.vm {
            *per_vm.entry(vm).or_default() += ms;
        }
    }
    let slots = match config.node_task_concurrency {
        0 => u64::MAX,
        n => n as u64,
    };
    let nodes = per_node
        .values()
        .map(|w| w.div_ceil(slots))
        .max()
        .unwrap_or(0);
    let chain = per_vm.values().copied().max().unwrap_or(0);
    nodes.max(chain) + tail_ms
}

/// The time a VM spent on its own PVE tasks (accepted → ended, queueing for a node slot
/// included: that is the simulator's physics, not the controller's).
pub fn own_task_ms(tasks: &[&SimTask], vm: u32) -> u64 {
    tasks
        .iter()
        .filter(|t| t.vm == Some(vm))
        .filter_map(|t| Some(t.ended_ms?.saturating_sub(t.submitted_ms)))
        .sum()
}

/// Where a machine's controller-added time went: before its first task was accepted,
/// between one task's end and the next one's acceptance, and from its last task's end
/// (plus `tail_ms`, boot and agent) to provisioned. In milliseconds.
pub fn gaps(
    tasks: &[&SimTask],
    vm: u32,
    created_ms: u64,
    provisioned_ms: u64,
    tail_ms: u64,
) -> Option<[i64; 3]> {
    let mut own: Vec<&&SimTask> = tasks.iter().filter(|t| t.vm == Some(vm)).collect();
    own.sort_by_key(|t| t.submitted_ms);
    let first = own.first()?;
    let last_end = own.iter().filter_map(|t| t.ended_ms).max()?;
    let between: i64 = own
        .windows(2)
        .map(|w| w[1].submitted_ms as i64 - w[0].ended_ms.unwrap_or(w[1].submitted_ms) as i64)
        .sum();
    Some([
        first.submitted_ms as i64 - created_ms as i64,
        between,
        provisioned_ms as i64 - last_end as i64 - tail_ms as i64,
    ])
}
