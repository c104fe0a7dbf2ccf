//! The Proxmox side: pve-sim's world for the benchmark (one template per node, room for
//! every VM, realistic task durations) and what its task timeline says about the work.
use std::collections::BTreeMap;

use pve_sim::{Config, VmSeed};
use serde_json::Value;

/// Realistic task durations in milliseconds (a full clone of a small disk, a start, a
/// stop, a destroy, a NoCloud ISO upload).
pub const TASK_MS: &[(&str, u64)] = &[
    ("qmclone", 5_000),
    ("qmstart", 2_000),
    ("qmstop", 1_000),
    ("qmdestroy", 2_000),
    ("imgcopy", 500),
];

/// Tasks one node runs at once. PVE itself caps neither API-started tasks nor workers
/// per node (each task is a forked worker); the one per-node figure it documents is
/// `max_workers` in datacenter.cfg, default 4, the parallelism of bulk actions and HA.
/// Storage I/O is what really limits concurrent full clones, and 4 is a fair model of a
/// node's disks.
pub const NODE_TASK_CONCURRENCY: usize = 4;

/// Memory and VM size of the benchmark's machines.
pub const VM_MEMORY_MIB: u64 = 2048;

/// The template VMID on node `n` (1-based).
pub fn template_id(n: usize) -> u32 {
    9000 + n as u32
}

pub fn node_name(n: usize) -> String {
    format!("pve{n}")
}

/// `nodes` nodes, each with its own template and enough memory and disk for
/// `vms_per_node` VMs; task durations multiplied by `scale`.
pub fn world(nodes: usize, vms_per_node: usize, scale: f64, concurrency: usize) -> Config {
    let mut c = Config::default();
    let template = c.vms[0].clone();
    let memory = ((vms_per_node as u64 * VM_MEMORY_MIB) << 20) * 5 / 4 + (8 << 30);
    c.nodes = (1..=nodes)
        .map(|n| pve_sim::NodeConfig {
            name: node_name(n),
            ip: format!("192.0.2.{}", 10 + n),
            cpus: 64,
            memory: memory.max(64 << 30),
            ..pve_sim::NodeConfig::default()
        })
        .collect();
    for s in &mut c.storages {
        s.total = s.total.max((vms_per_node as u64 + 16) * (16 << 30));
    }
    c.vms = (1..=nodes)
        .map(|n| {
            let id = template_id(n);
            let mut config = template.config.clone();
            config.insert(
                "scsi0".into(),
                format!("local-lvm:base-{id}-disk-0,size=10G"),
            );
            config.insert(
                "ide2".into(),
                format!("local-lvm:vm-{id}-cloudinit,media=cdrom"),
            );
            config.remove("net0");
            config.insert("net0".into(), "virtio,bridge=vmbr0".into());
            VmSeed {
                vmid: id,
                node: node_name(n),
                config,
                ..template.clone()
            }
        })
        .collect();
    for ms in c.task_ms.values_mut() {
        *ms = scaled(*ms, scale);
    }
    for (kind, ms) in TASK_MS {
        c.task_ms.insert(kind.to_string(), scaled(*ms, scale));
    }
    c.boot_delay_ms = scaled(c.boot_delay_ms, scale);
    c.agent_delay_ms = scaled(c.agent_delay_ms, scale);
    c.node_task_concurrency = concurrency;
    c.dhcp.start = "10.20.0.10".into();
    c.dhcp.end = "10.20.255.250".into();
    c.dhcp.prefix = 16;
    c.dhcp.gateway = "10.20.0.1".into();
    c.seed = Some(1);
    c
}

fn scaled(ms: u64, scale: f64) -> u64 {
    (ms as f64 * scale).round() as u64
}

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
