//! `--slow-tenant`: a tenant's provisioning time beside another tenant whose endpoint
//! hangs (issue 40, fair plugin slots: `host/runtime/src/slots.rs`).
//!
//! The fast tenant (namespace `fleet-c0`, a pve-sim of its own) provisions its machines
//! alone, and they are deleted. The slow tenant (`fleet-c1`, another pve-sim) has its
//! cluster provisioned while its endpoint still answers; then every request to it is
//! answered only after `--slow-latency-ms` and its machines are created, enough to want
//! every plugin slot. Once its calls hold a tenant's share of the slots, the fast tenant's
//! machines are made again, and the two times are compared. A time is from the first
//! create sent to the last of the tenant's machines seen provisioned. Asserts nothing
//! about speed: it prints one table.
use std::time::Duration;

use anyhow::Result;
use fleet::cpu::MachineCpu;
use fleet::{Host, now_ms, objects, world};
use hyperplug_runtime::{Limits, tenant_share};
use pve_sim::{Faults, ListenOpts, Simulator};

use crate::{Args, all_gone, cluster_spec, watch};

/// The fast tenant's cluster index (namespace `fleet-c0`), and the slow one's.
const FAST: usize = 0;
const SLOW: usize = 1;
/// The round beside the slow tenant is given up after this many times the round alone
/// (at least a minute): far past the goal of 1.5, and a starved tenant's round would
/// otherwise last until `--timeout-secs`.
const GIVE_UP_AFTER: u64 = 10;

/// What the run measured.
pub struct Outcome {
    alone: Timed,
    beside: Timed,
    /// The plugin slots, and how many one tenant may hold.
    slots: u32,
    share: u32,
    /// Requests that reached the slow tenant's endpoint before the fast tenant's second
    /// round started, and during it.
    slow_before: u64,
    slow_during: u64,
    peak_rss: u64,
    cores: usize,
    config: pve_sim::Config,
}

pub async fn run(args: &Args) -> Result<Outcome> {
    let timeout = Duration::from_secs(args.timeout_secs);
    // One node each: a tenant's endpoint is its own PVE cluster.
    let start = |machines: usize| {
        let config = world::world(1, machines, args.time_scale, args.node_task_concurrency);
        let listen = ListenOpts {
            addr: "127.0.0.1:0".into(),
            tls: true,
        };
        (config.clone(), Simulator::start(config, listen))
    };
    let (config, fast_sim) = start(args.machines);
    let fast_sim = fast_sim.await?;
    let slow_sim = start(args.slow_machines).1.await?;
    let fast_pve = objects::Pve::of(&fast_sim, pve_sim::DEFAULT_TOKEN)?;
    let slow_pve = objects::Pve::of(&slow_sim, pve_sim::DEFAULT_TOKEN)?;

    let (plane, _ipam, mut host) = crate::start_plane_and_host(args).await?;
    let client = plane.client();
    let clusters = [
        (1, &fast_pve, cluster_spec(args, FAST)),
        (1, &slow_pve, cluster_spec(args, SLOW)),
    ];
    let templates = crate::create_clusters(&client, &mut host, &plane, timeout, &clusters).await?;
    let round = Round {
        args,
        client: &client,
        templates: &templates,
        plane: &plane,
        timeout,
    };

    eprintln!("[bench] the fast tenant's {} machines alone", args.machines);
    let alone = round.fast(&mut host, 0..args.machines, timeout).await?;
    if !alone.complete() {
        anyhow::bail!(
            "the fast tenant's machines alone: only {} of {} provisioned in {}",
            alone.provisioned,
            alone.of,
            secs(alone.ms)
        );
    }
    crate::delete_machines(
        &client,
        (0..args.machines).map(|m| (FAST, m)),
        args.parallelism,
    )
    .await?;
    let fast_state = fast_sim.state();
    watch::wait(
        &mut host,
        &plane,
        timeout,
        "the fast tenant's machines and VMs gone",
        || all_gone(&client, &fast_state),
    )
    .await?;

    let slots = plugin_concurrency(&args.host_args);
    let share = tenant_share(slots as usize) as u32;
    let want = (share as u64).min(args.slow_machines as u64);
    eprintln!(
        "[bench] the slow tenant's {} machines, its endpoint answering after {} ms",
        args.slow_machines, args.slow_latency_ms
    );
    let slow = slow_sim.state();
    slow.set_faults(Faults {
        latency_ms: args.slow_latency_ms,
        ..Faults::default()
    });
    slow.reset_counters();
    let requests = || slow.counters().values().sum::<u64>();
    crate::create_machines(
        &client,
        &templates,
        (0..args.slow_machines).map(|m| (SLOW, m)),
        args.parallelism,
    )
    .await?;
    // Each request is counted as it arrives and then answered late: `want` requests
    // in are `want` calls holding a slot each (a call sends one request at a time).
    watch::wait(
        &mut host,
        &plane,
        timeout,
        "the slow tenant's calls holding their share of the plugin slots",
        || {
            let n = requests();
            async move { Ok(n >= want) }
        },
    )
    .await?;
    let slow_before = requests();

    eprintln!(
        "[bench] the fast tenant's {} machines beside the slow tenant",
        args.machines
    );
    // A round 10 times as long as alone is far past the goal: given up, as a figure.
    let give_up = Duration::from_millis(alone.ms * GIVE_UP_AFTER).max(Duration::from_secs(60));
    let beside = round
        .fast(&mut host, args.machines..2 * args.machines, give_up)
        .await?;
    let slow_during = requests() - slow_before;
    let peak_rss = host.peak_rss()?;
    if let Ok(m) = host.metrics() {
        let _ = std::fs::write(plane.dir().join("hyperplug-metrics-slow-tenant.txt"), m);
    }
    // The slow tenant's machines are left as they are: deleting them would wait on its
    // endpoint too. Everything goes with the plane, the host and the simulators.
    drop(host);
    drop(plane);
    Ok(Outcome {
        alone,
        beside,
        slots,
        share,
        slow_before,
        slow_during,
        peak_rss,
        cores: MachineCpu::now()?.cores,
        config,
    })
}

/// What one round of the fast tenant's machines needs.
struct Round<'a> {
    args: &'a Args,
    client: &'a kube::Client,
    templates: &'a [objects::MachineTemplate],
    plane: &'a kube_world::Plane,
    timeout: Duration,
}

/// A round's time: ms from the first create sent to the last machine seen provisioned,
/// or to when the round was given up with only `provisioned` of `of` machines.
#[derive(Debug, Clone, Copy)]
struct Timed {
    ms: u64,
    provisioned: usize,
    of: usize,
}

impl Timed {
    fn complete(&self) -> bool {
        self.provisioned == self.of
    }

    /// The time, `> T (k of n)` for a round given up.
    fn show(&self) -> String {
        if self.complete() {
            secs(self.ms)
        } else {
            format!(
                "> {} ({} of {} provisioned)",
                secs(self.ms),
                self.provisioned,
                self.of
            )
        }
    }
}

impl Round<'_> {
    /// Creates the fast tenant's machines `machines` and waits until all are
    /// provisioned, or `give_up` after the first create.
    async fn fast(
        &self,
        host: &mut Host,
        machines: std::ops::Range<usize>,
        give_up: Duration,
    ) -> Result<Timed> {
        let watcher = watch::Provisioned::start(self.client.clone());
        let t0 = now_ms();
        let created = crate::create_machines(
            self.client,
            self.templates,
            machines.map(|m| (FAST, m)),
            self.args.parallelism,
        )
        .await?;
        let keys: Vec<String> = created.into_iter().map(|(key, _)| key).collect();
        let w = watcher.clone();
        let all = watch::wait(
            host,
            self.plane,
            self.timeout,
            "the fast tenant's machines provisioned",
            || {
                let done = w.count_of(&keys) >= keys.len();
                async move { Ok(done) }
            },
        );
        let left = give_up.saturating_sub(Duration::from_millis(now_ms() - t0));
        let given_up = match tokio::time::timeout(left, all).await {
            Ok(done) => {
                done?;
                false
            }
            Err(_) => true,
        };
        let seen = watcher.finish();
        let times: Vec<u64> = keys
            .iter()
            .filter_map(|k| seen.get(k))
            .map(|s| s.at_ms)
            .collect();
        let end = if given_up {
            now_ms()
        } else {
            times.iter().copied().max().unwrap_or(t0)
        };
        Ok(Timed {
            ms: end.saturating_sub(t0),
            provisioned: times.len(),
            of: keys.len(),
        })
    }
}

/// `--plugin-concurrency` as the host is run (`--host-arg`), else its default.
fn plugin_concurrency(host_args: &[String]) -> u32 {
    let mut value = None;
    let mut args = host_args.iter();
    while let Some(a) = args.next() {
        if let Some(v) = a.strip_prefix("--plugin-concurrency=") {
            value = v.parse().ok();
        } else if a == "--plugin-concurrency" {
            value = args.next().and_then(|v| v.parse().ok());
        }
    }
    value.unwrap_or(Limits::default().concurrency).max(1)
}

fn secs(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

impl Outcome {
    pub fn print(&self, args: &Args) {
        let durations: Vec<String> = world::TASK_MS
            .iter()
            .map(|(k, _)| format!("{k} {}", secs(self.config.task_duration_ms(k))))
            .collect();
        println!(
            "scale-bench --slow-tenant: the fast tenant's {} machines (fleet-c0, a pve-sim of \
             its own) alone, then beside a slow tenant's {} machines (fleet-c1, another pve-sim \
             answering each request after {}; the plugin gives up on a request at 20 s); host: {}",
            args.machines,
            args.slow_machines,
            secs(args.slow_latency_ms),
            args.build,
        );
        println!(
            "{} plugin slots, one tenant holds at most {}; 1 PVE node per tenant × {} task \
             slots; {}; {} cores; {} requests had reached the slow tenant's endpoint when the \
             fast tenant's second round began, {} more during it",
            self.slots,
            self.share,
            self.config.node_task_concurrency,
            durations.join(", "),
            self.cores,
            self.slow_before,
            self.slow_during,
        );
        println!();
        println!(
            "| fast tenant's machines | alone | beside the slow tenant | ratio | goal | peak RSS | goal |"
        );
        println!("|---|---|---|---|---|---|---|");
        let ratio = self.beside.ms as f64 / self.alone.ms.max(1) as f64;
        println!(
            "| {} | {} | {} | {}{ratio:.2}× | ≤ 1.5× | {} MiB | ≤ 256 MiB |",
            args.machines,
            self.alone.show(),
            self.beside.show(),
            if self.beside.complete() { "" } else { "> " },
            self.peak_rss >> 20,
        );
    }
}
