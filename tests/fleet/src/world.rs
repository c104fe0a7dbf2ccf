//! pve-sim's world for runs at scale: one template per node, room for every VM,
//! realistic task durations.
use pve_sim::{Config, VmSeed};

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
