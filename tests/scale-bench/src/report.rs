//! The figures, computed from what the run recorded, printed as one Markdown table.
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use hyperplug_runtime::overhead::{self, CallOverhead};
use pve_sim::Config;

use crate::Args;
use crate::sim::{self, SimTask};
use crate::watch::Seen;

pub struct Inputs {
    pub config: Config,
    pub total: usize,
    pub t0: u64,
    pub t_provisioned: u64,
    pub t_delete: u64,
    pub t_gone: u64,
    pub provisioned_in: Duration,
    /// Per machine (`namespace/name`): when its ProxmoxMachine was sent (Unix ms).
    pub created: Vec<(String, u64)>,
    pub provisioned: HashMap<String, Seen>,
    pub tasks: Vec<SimTask>,
    pub counters: BTreeMap<String, u64>,
    pub writes: BTreeMap<String, u64>,
    /// The host's reads of single objects (`get resource`), from the audit log.
    pub reads: BTreeMap<String, u64>,
    /// Per machine: when the host first wrote it or its status (its first reconcile), Unix
    /// ms from the audit log.
    pub first_written: HashMap<String, u64>,
    /// How long the API server took over each of the benchmark's ProxmoxMachine creates
    /// (ms; the manager's conversion and finalizer webhooks included).
    pub create_answered: Vec<i64>,
    pub peak_rss: u64,
    /// The host's counted heap peak (`hyperplug_heap_peak_bytes`), if it exports it.
    pub peak_heap: Option<u64>,
    pub cpu_lifecycle: f64,
    pub cpu_total: f64,
    /// The share of all cores' time spent busy (every process) while the benchmark
    /// created its machines.
    pub busy_creating: f64,
    /// The cores that share is of.
    pub cores: usize,
    /// CPU seconds of the machines' lifecycle of every other process on these cores.
    pub others_lifecycle: Vec<(String, f64)>,
    pub overhead: CallOverhead,
    /// From one VM destroyed out of band to its machine showing it.
    pub drift: Duration,
}

pub struct Report {
    rows: Vec<(String, String, &'static str)>,
    header: String,
}

fn secs(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

/// Counts, the largest first (ties by name).
fn most_first(counts: &BTreeMap<String, u64>) -> Vec<(&String, &u64)> {
    let mut by_count: Vec<_> = counts.iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    by_count
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

impl Report {
    pub fn new(i: Inputs) -> Report {
        let n = i.total.max(1) as f64;
        let tail = i.config.boot_delay_ms + i.config.agent_delay_ms;
        let in_window = |from: u64, to: u64| -> Vec<&SimTask> {
            i.tasks
                .iter()
                .filter(|t| t.submitted_ms >= from && t.submitted_ms <= to)
                .collect()
        };
        let create = in_window(i.t0, i.t_provisioned);
        let delete = in_window(i.t_delete, i.t_gone);
        let last = i
            .provisioned
            .values()
            .map(|s| s.at_ms)
            .max()
            .unwrap_or(i.t0);
        let wall_create = last.saturating_sub(i.t0);
        let lb_create = sim::lower_bound_ms(&i.config, &create, tail);
        let wall_delete = i.t_gone.saturating_sub(i.t_delete);
        let lb_delete = sim::lower_bound_ms(&i.config, &delete, 0);

        let mut added: Vec<i64> = i
            .created
            .iter()
            .filter_map(|(key, created)| {
                let seen = i.provisioned.get(key)?;
                let own = seen.vmid.map(|v| sim::own_task_ms(&create, v)).unwrap_or(0) + tail;
                Some(seen.at_ms as i64 - *created as i64 - own as i64)
            })
            .collect();
        added.sort();
        let mut gaps: [Vec<i64>; 3] = Default::default();
        for (key, created) in &i.created {
            let Some(seen) = i.provisioned.get(key) else {
                continue;
            };
            let Some(g) = seen
                .vmid
                .and_then(|v| sim::gaps(&create, v, *created, seen.at_ms, tail))
            else {
                continue;
            };
            for (k, v) in g.into_iter().enumerate() {
                gaps[k].push(v);
            }
        }
        for g in &mut gaps {
            g.sort();
        }

        let mut rows: Vec<(String, String, &'static str)> = Vec::new();
        let mut row = |a: String, b: String, goal: &'static str| rows.push((a, b, goal));
        row("wall time to all provisioned".into(), secs(wall_create), "");
        // The latencies below count from each machine's creation: the faster the API
        // server takes the benchmark's creates, the longer the queue of first steps.
        let last_created = i.created.iter().map(|(_, at)| *at).max().unwrap_or(i.t0);
        row(
            "  of which creating every machine (the benchmark's creates)".into(),
            secs(last_created.saturating_sub(i.t0)),
            "",
        );
        row(
            "physical lower bound (tasks per node ÷ slots, chains, boot)".into(),
            secs(lb_create),
            "",
        );
        row(
            "ratio".into(),
            format!("{:.2}×", wall_create as f64 / lb_create.max(1) as f64),
            "≤ 1.05×",
        );
        row(
            "wall time to all deleted (lower bound)".into(),
            format!(
                "{} ({}, {:.2}×)",
                secs(wall_delete),
                secs(lb_delete),
                wall_delete as f64 / lb_delete.max(1) as f64
            ),
            "",
        );
        row(
            "controller-added latency per machine, p50".into(),
            secs(percentile(&added, 0.50).max(0) as u64),
            "",
        );
        row(
            "controller-added latency per machine, p99".into(),
            secs(percentile(&added, 0.99).max(0) as u64),
            "≤ 1 s",
        );
        for (name, p) in [("p50", 0.5), ("p99", 0.99)] {
            let part = |g: &[i64]| secs(percentile(g, p).max(0) as u64);
            row(
                format!("  of which: to the first task / between tasks / after the last ({name})"),
                format!(
                    "{} / {} / {}",
                    part(&gaps[0]),
                    part(&gaps[1]),
                    part(&gaps[2])
                ),
                "",
            );
        }
        // The first task waits for the machine's first reconcile: the controller's queue
        // (every machine created at once, on the same cores as the API server).
        let mut queued: Vec<i64> = i
            .created
            .iter()
            .filter_map(|(key, created)| Some(*i.first_written.get(key)? as i64 - *created as i64))
            .collect();
        queued.sort();
        row(
            "    waiting for a first reconcile (created → its first write), p50 / p99".into(),
            format!(
                "{} / {}",
                secs(percentile(&queued, 0.5).max(0) as u64),
                secs(percentile(&queued, 0.99).max(0) as u64)
            ),
            "",
        );
        // Part of that wait is the benchmark's own create: while every machine is created
        // at once, the API server answers every client's writes slowly.
        let mut answered = i.create_answered.clone();
        answered.sort();
        row(
            "    of which the API server's answer to the create (webhooks included), p50 / p99"
                .into(),
            format!(
                "{} / {}",
                secs(percentile(&answered, 0.5).max(0) as u64),
                secs(percentile(&answered, 0.99).max(0) as u64)
            ),
            "",
        );
        let pve_total: u64 = i.counters.values().sum();
        row(
            "PVE API calls per machine lifecycle".into(),
            format!("{:.1}", pve_total as f64 / n),
            "≤ 25",
        );
        let clones = i
            .counters
            .get("POST /nodes/{node}/qemu/{vmid}/clone")
            .copied()
            .unwrap_or(0);
        row(
            "clone requests per machine".into(),
            format!("{:.2}", clones as f64 / n),
            "1.00",
        );
        for (endpoint, count) in most_first(&i.counters) {
            row(
                format!("  `{endpoint}`"),
                format!("{:.2}", *count as f64 / n),
                "",
            );
        }
        let requests = [
            (
                "kube API writes per machine lifecycle (audit log, user hyperplug)",
                &i.writes,
                "≤ 6 DHCP / ≤ 7 static",
            ),
            (
                "kube API reads of one object per machine lifecycle (`get`, user hyperplug)",
                &i.reads,
                "",
            ),
        ];
        for (title, counts, goal) in requests {
            let total: u64 = counts.values().sum();
            row(title.into(), format!("{:.2}", total as f64 / n), goal);
            for (what, count) in most_first(counts) {
                row(format!("  {what}"), format!("{:.2}", *count as f64 / n), "");
            }
        }
        row(
            "host peak RSS (VmHWM)".into(),
            format!("{:.1} MiB", i.peak_rss as f64 / (1 << 20) as f64),
            "≤ 64 MiB at 1,000",
        );
        row(
            "  of which heap at its peak (counted allocator)".into(),
            i.peak_heap.map_or_else(
                || "not exported".into(),
                |b| format!("{:.1} MiB", b as f64 / (1 << 20) as f64),
            ),
            "",
        );
        row(
            "host CPU (machines' lifecycle / whole run)".into(),
            format!("{:.1} s / {:.1} s", i.cpu_lifecycle, i.cpu_total),
            "",
        );
        row(
            "host CPU per machine lifecycle".into(),
            format!("{:.3} s", i.cpu_lifecycle / n),
            "≤ 0.1 s",
        );
        // The host shares its cores with the plane and the benchmark: when they are
        // busy, every step of every process waits for a core (the latencies above).
        row(
            format!(
                "cores busy (every process) while the benchmark creates, {} cores",
                i.cores
            ),
            format!("{:.0} %", i.busy_creating * 100.0),
            "",
        );
        let mut others = i.others_lifecycle.clone();
        others.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        for (name, secs) in others.iter().filter(|(_, s)| s / n >= 0.0005) {
            row(
                format!("  CPU per machine lifecycle of `{name}`"),
                format!("{:.3} s", secs / n),
                "",
            );
        }
        row(
            "drift shown after a VM is destroyed out of band".into(),
            format!("{:.1} s", i.drift.as_secs_f64()),
            "≤ 10 s",
        );
        row(
            "plugin call overhead p50 / p99 (instantiate + call + drop)".into(),
            format!(
                "{:.0} µs / {:.0} µs",
                overhead::micros(i.overhead.p50),
                overhead::micros(i.overhead.p99)
            ),
            "",
        );
        let durations: Vec<String> = fleet::world::TASK_MS
            .iter()
            .map(|(k, _)| format!("{k} {}", secs(i.config.task_duration_ms(k))))
            .collect();
        let header = format!(
            "{} machines ({} provisioned in {:.1} s), {} PVE nodes × {} task slots; {}; boot + agent {}",
            i.total,
            i.provisioned.len(),
            i.provisioned_in.as_secs_f64(),
            i.config.nodes.len(),
            i.config.node_task_concurrency,
            durations.join(", "),
            secs(tail),
        );
        Report { rows, header }
    }

    pub fn print(&self, args: &Args) {
        println!(
            "scale-bench: {} clusters × {} machines, {}; host: {}",
            args.clusters,
            args.machines,
            if args.static_ips {
                "static IPv4 from each cluster's pool (IPAM)"
            } else {
                "DHCP"
            },
            args.build
        );
        println!("{}", self.header);
        println!();
        println!("| figure | value | goal |");
        println!("|---|---|---|");
        for (a, b, goal) in &self.rows {
            println!("| {a} | {b} | {goal} |");
        }
    }
}
