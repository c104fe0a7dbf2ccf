//! `scale-bench`: provisions and deletes machines at scale through the real management
//! plane (etcd, kube-apiserver, kube-controller-manager, the Cluster API core manager),
//! pve-sim with realistic task durations, and `hyperplug run` as its own process with the
//! bundled plugin; prints one table. Asserts nothing about speed. See `scripts/bench.sh`.
mod audit;
mod drift;
mod report;
mod sim;
mod tenants;
mod watch;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use fleet::cpu::{self, MachineCpu};
use fleet::{Host, HostSpec, now_ms, objects, world};
use futures::{StreamExt, TryStreamExt};
use hyperplug_runtime::bindings::machine::TemplateRequest;
use hyperplug_runtime::{Limits, ObjectRef, Runtime, overhead};
use kube_world::PlaneOpts;
use pve_sim::{ListenOpts, Simulator};

/// The user the host authenticates as, so the audit log tells its writes apart.
const HOST_USER: &str = "hyperplug";

/// Provisioning at scale: M clusters × N machines through CAPI, pve-sim and hyperplug.
#[derive(Debug, Parser)]
#[command(name = "scale-bench", version, about)]
pub struct Args {
    /// Workload clusters (one namespace each).
    #[arg(long, default_value_t = 10)]
    pub clusters: usize,
    /// Machines per cluster.
    #[arg(long, default_value_t = 10)]
    pub machines: usize,
    /// PVE nodes; cluster i is pinned to node i mod NODES and clones that node's template.
    #[arg(long, default_value_t = 5)]
    pub nodes: usize,
    /// Tasks one PVE node runs at once (see `fleet::world::NODE_TASK_CONCURRENCY` for the figure).
    #[arg(long, default_value_t = world::NODE_TASK_CONCURRENCY)]
    pub node_task_concurrency: usize,
    /// Multiplies every task duration and boot delay (the CI smoke run uses 0.05).
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// The `hyperplug` binary to run.
    #[arg(long)]
    pub hyperplug: PathBuf,
    /// The plugin it serves.
    #[arg(long, default_value = "plugins/proxmox.wasm")]
    pub plugin: PathBuf,
    /// How the host was built, for the table's header.
    #[arg(long, default_value = "unknown build")]
    pub build: String,
    /// An extra argument for `hyperplug run` (repeat), e.g. `--host-arg=--reconcile-concurrency=32`.
    #[arg(long = "host-arg", allow_hyphen_values = true)]
    pub host_args: Vec<String>,
    /// Give up on a phase after this many seconds.
    #[arg(long, default_value_t = 3600)]
    pub timeout_secs: u64,
    /// Sequential calls timed for the plugin call overhead.
    #[arg(long, default_value_t = 5_000)]
    pub overhead_calls: usize,
    /// Objects created or deleted at once by the benchmark (CAPI's controllers create
    /// many machines at once too).
    #[arg(long, default_value_t = 32)]
    pub parallelism: usize,
    /// Static IPv4 addresses from each cluster's pool (`ipv4Config`, the seed's default
    /// path: one IPAddressClaim per machine, the in-cluster IPAM provider running) instead
    /// of DHCP.
    #[arg(long)]
    pub static_ips: bool,
    /// The smallest run, as CI runs it: 1 cluster × 2 machines on 1 node, task durations
    /// × 0.05, 200 overhead calls, 300 s per phase; replaces those flags.
    #[arg(long)]
    pub smoke: bool,
    /// Instead of the run at scale, issue 40's fair plugin slots measured: one tenant's
    /// `--machines` machines (namespace fleet-c0, a pve-sim of its own) provisioned
    /// alone, then again beside a slow tenant (fleet-c1, another pve-sim) whose endpoint
    /// stops answering while `--slow-machines` of its machines are being provisioned;
    /// prints both times and their ratio (goal ≤ 1.5×). Run it as
    /// `scripts/bench.sh --slow-tenant` (docs/security.md has the figures).
    #[arg(long)]
    pub slow_tenant: bool,
    /// With `--slow-tenant`: the slow tenant's machines, enough to want every plugin slot
    /// (`--plugin-concurrency`, 16).
    #[arg(long, default_value_t = 32)]
    pub slow_machines: usize,
    /// With `--slow-tenant`: how long the slow tenant's endpoint takes to answer each
    /// request. The default is past the plugin's 20 s first-byte timeout, so every call
    /// to it holds its slot until it gives up, as with an endpoint that hangs.
    #[arg(long, default_value_t = 60_000)]
    pub slow_latency_ms: u64,
}

impl Args {
    /// These arguments, or the smoke size when `--smoke` is given.
    fn sized(self) -> Args {
        if !self.smoke {
            return self;
        }
        Args {
            clusters: 1,
            machines: 2,
            nodes: 1,
            time_scale: 0.05,
            overhead_calls: 200,
            timeout_secs: 300,
            ..self
        }
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse().sized();
    if args.clusters == 0 || args.machines == 0 || args.nodes == 0 {
        bail!("--clusters, --machines and --nodes must be at least 1");
    }
    if args.slow_tenant {
        if args.slow_machines == 0 {
            bail!("--slow-machines must be at least 1");
        }
        tenants::run(&args).await?.print(&args);
        return Ok(());
    }
    let report = run(&args).await?;
    report.print(&args);
    Ok(())
}

/// Plugin call overhead of the bundled plugin: `describe-template` without credentials
/// does no I/O, so this is the sandbox's cost (instantiate, call, drop).
async fn call_overhead(args: &Args) -> Result<overhead::CallOverhead> {
    let runtime = Runtime::new(Limits::default(), None)?;
    let plugin = runtime
        .load(&args.plugin)
        .await
        .with_context(|| format!("loading {}", args.plugin.display()))?;
    let req = TemplateRequest {
        template: ObjectRef {
            namespace: "bench".into(),
            name: "t".into(),
            uid: "uid-t".into(),
        },
        spec: r#"{"sourceNode":"pve1","templateID":9001,"numSockets":1,"numCores":2,"memoryMiB":2048}"#
            .into(),
        credentials: None,
    };
    plugin
        .describe_template(&req)
        .await?
        .map_err(|e| anyhow::anyhow!("describe-template: {e:?}"))?;
    Ok(overhead::measure(args.overhead_calls, move || {
        let (plugin, req) = (plugin.clone(), req.clone());
        async move {
            let _ = std::hint::black_box(plugin.describe_template(&req).await);
        }
    })
    .await)
}

async fn run(args: &Args) -> Result<report::Report> {
    let total = args.clusters * args.machines;
    let node_of = |c: usize| c % args.nodes + 1;
    let per_node = (0..args.nodes)
        .map(|n| (0..args.clusters).filter(|c| c % args.nodes == n).count() * args.machines)
        .max()
        .unwrap_or(0);
    eprintln!(
        "[bench] plugin call overhead ({} calls)",
        args.overhead_calls
    );
    let overhead = call_overhead(args).await?;

    let config = world::world(
        args.nodes,
        per_node,
        args.time_scale,
        args.node_task_concurrency,
    );
    let sim = Simulator::start(
        config.clone(),
        ListenOpts {
            addr: "127.0.0.1:0".into(),
            tls: true,
        },
    )
    .await?;
    let pve = objects::Pve::of(&sim, pve_sim::DEFAULT_TOKEN)?;

    let (plane, _ipam, mut host) = start_plane_and_host(args).await?;
    let client = plane.client();
    let audit_log = plane
        .audit_log_path()
        .context("the plane writes an audit log")?
        .to_path_buf();
    let timeout = Duration::from_secs(args.timeout_secs);
    let clusters: Vec<(usize, &objects::Pve, serde_json::Value)> = (0..args.clusters)
        .map(|c| (node_of(c), &pve, cluster_spec(args, c)))
        .collect();
    let templates = create_clusters(&client, &mut host, &plane, timeout, &clusters).await?;

    // The machines' lifecycle: everything from here to the last machine gone is theirs.
    let watcher = watch::Provisioned::start(client.clone());
    sim.state().reset_counters();
    let audit_from = audit::mark(&audit_log);
    let cpu_from = host.cpu_seconds()?;
    let others_from = others_cpu(&plane);
    let machine_from = MachineCpu::now()?;
    let t0 = now_ms();
    let started = Instant::now();
    eprintln!("[bench] creating {total} machines");
    let created = create_machines(
        &client,
        &templates,
        (0..args.machines).flat_map(|m| (0..args.clusters).map(move |c| (c, m))),
        args.parallelism,
    )
    .await?;
    let busy_creating = MachineCpu::now()?.busy_since(&machine_from);
    let cores = machine_from.cores;
    let w = watcher.clone();
    watch::wait(
        &mut host,
        &plane,
        timeout,
        "every machine provisioned",
        || {
            let w = w.clone();
            async move { Ok(w.count() >= total) }
        },
    )
    .await?;
    let provisioned_in = started.elapsed();
    let t_provisioned = now_ms();
    let provisioned = watcher.finish();
    if let Ok(m) = host.metrics() {
        let _ = std::fs::write(plane.dir().join("hyperplug-metrics-provisioned.txt"), m);
    }
    eprintln!("[bench] destroying one VM out of band");
    // The drift probe's writes (a Warning and a status) are no lifecycle's: not counted.
    let drift_from = audit::mark(&audit_log);
    let drift = drift::after_destroy(&client, &sim, &created[0].0, timeout).await?;
    // Its Warning event is written just after the status that shows it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let drift_to = audit::mark(&audit_log);

    eprintln!("[bench] deleting {total} machines");
    let t_delete = now_ms();
    delete_machines(
        &client,
        (0..args.machines).flat_map(|m| (0..args.clusters).map(move |c| (c, m))),
        args.parallelism,
    )
    .await?;
    let state = sim.state();
    watch::wait(
        &mut host,
        &plane,
        timeout,
        "every machine and VM gone",
        || all_gone(&client, &state),
    )
    .await?;
    let t_gone = now_ms();
    let cpu_lifecycle = host.cpu_seconds()? - cpu_from;
    let others_lifecycle: Vec<(String, f64)> = others_cpu(&plane)
        .into_iter()
        .filter_map(|(name, to)| {
            let from = others_from.iter().find(|(n, _)| *n == name)?.1;
            Some((name, to - from))
        })
        .collect();
    if let Ok(m) = host.metrics() {
        let _ = std::fs::write(plane.dir().join("hyperplug-metrics-gone.txt"), m);
    }
    let counters = sim.state().counters();
    // The requests in order, beside the plane's logs, for tracing one VM's calls.
    let journal: Vec<String> = sim
        .state()
        .requests()
        .iter()
        .map(|e| e.to_string())
        .collect();
    let _ = std::fs::write(plane.dir().join("pve-journal.jsonl"), journal.join("\n"));
    // And every task with its timeline (submitted, started, ended), for the gaps of one VM.
    let tasks_seen: Vec<String> = sim.state().tasks().iter().map(|t| t.to_string()).collect();
    let _ = std::fs::write(plane.dir().join("pve-tasks.jsonl"), tasks_seen.join("\n"));
    let audit_to = audit::mark(&audit_log);
    let mut host_events = audit::events_of(&audit_log, HOST_USER, audit_from, drift_from)?;
    host_events.extend(audit::events_of(&audit_log, HOST_USER, drift_to, audit_to)?);
    let (host_reads, host_writes): (Vec<_>, Vec<_>) =
        host_events.into_iter().partition(|ev| ev["verb"] == "get");
    let writes = audit::by_request(&host_writes);
    let reads = audit::by_request(&host_reads);
    let first_written = audit::first_writes(&host_writes, &objects::infra_machine().plural);
    let admin_writes =
        audit::events_of(&audit_log, kube_world::ADMIN_USER, audit_from, drift_from)?;
    let create_answered =
        audit::durations(&admin_writes, "create", &objects::infra_machine().plural);
    let tasks: Vec<sim::SimTask> = sim
        .state()
        .tasks()
        .iter()
        .map(sim::SimTask::parse)
        .collect();

    eprintln!("[bench] deleting the clusters");
    for c in 0..args.clusters {
        objects::delete_cluster(&client, c).await?;
    }
    watch::wait(&mut host, &plane, timeout, "every cluster gone", || {
        let client = client.clone();
        async move {
            Ok(
                objects::count(&client, &objects::infra_cluster()).await? == 0
                    && objects::count(&client, &objects::capi_cluster()).await? == 0,
            )
        }
    })
    .await?;
    let peak_rss = host.peak_rss()?;
    let peak_heap = host
        .metrics()
        .ok()
        .and_then(|m| metric(&m, "hyperplug_heap_peak_bytes"));
    let cpu_total = host.cpu_seconds()?;
    drop(host);
    drop(plane);
    sim.shutdown().await;

    Ok(report::Report::new(report::Inputs {
        config,
        total,
        t0,
        t_provisioned,
        t_delete,
        t_gone,
        provisioned_in,
        created,
        provisioned,
        tasks,
        counters,
        writes,
        reads,
        first_written,
        create_answered,
        peak_rss,
        peak_heap,
        cpu_lifecycle,
        cpu_total,
        busy_creating,
        cores,
        others_lifecycle,
        overhead,
        drift,
    }))
}

/// The management plane (every write and the manager's reads of one object in its
/// audit log), the in-cluster IPAM provider with `--static-ips`, and `hyperplug run`
/// against them as [`HOST_USER`]. The IPAM provider runs until it is dropped.
async fn start_plane_and_host(
    args: &Args,
) -> Result<(kube_world::Plane, Option<kube_world::Manager>, Host)> {
    eprintln!("[bench] starting the management plane");
    let (plane, webhook) = fleet::plane::start(
        &args.hyperplug,
        &args.plugin,
        PlaneOpts {
            // Every write, and the manager's reads of one object (lists and watches are its
            // caches).
            audit_policy: Some(kube_world::audit_writes_and_gets_by(HOST_USER)),
            ..PlaneOpts::default()
        },
    )
    .await?;
    let ipam = if args.static_ips {
        eprintln!("[bench] starting the in-cluster IPAM provider");
        Some(plane.start_ipam().await?)
    } else {
        None
    };
    eprintln!(
        "[bench] plane and host logs in {} (kept with KUBE_WORLD_KEEP=1)",
        plane.dir().display()
    );
    let kubeconfig = plane.kubeconfig_for(HOST_USER)?;
    let host = HostSpec {
        binary: args.hyperplug.clone(),
        plugin: args.plugin.clone(),
        kubeconfig,
        args: args.host_args.clone(),
        env: vec![],
        webhook,
    }
    .start(&plane.dir().join("hyperplug.log"))?;
    Ok((plane, ipam, host))
}

/// Cluster `c` of `clusters` (its PVE node, endpoint and extra ProxmoxCluster spec) with
/// its ProxmoxMachineTemplate, for every `c`; returns once every ProxmoxCluster is
/// provisioned and every template described, with the templates by cluster.
async fn create_clusters(
    client: &kube::Client,
    host: &mut Host,
    plane: &kube_world::Plane,
    timeout: Duration,
    clusters: &[(usize, &objects::Pve, serde_json::Value)],
) -> Result<Vec<objects::MachineTemplate>> {
    eprintln!("[bench] {} clusters", clusters.len());
    let mut templates = Vec::with_capacity(clusters.len());
    for (c, (node, pve, spec)) in clusters.iter().enumerate() {
        objects::create_cluster_with(client, c, *node, pve, spec).await?;
        templates.push(
            objects::create_machine_template(client, c, *node, &serde_json::json!({})).await?,
        );
    }
    // The templates' status too: the manager describes each once, and that write is
    // not one of the machines'.
    let n = clusters.len();
    watch::wait(
        host,
        plane,
        timeout,
        "the ProxmoxClusters and templates",
        || {
            let client = client.clone();
            async move {
                Ok(
                    objects::all_provisioned(&client, &objects::infra_cluster(), n).await?
                        && objects::all_templates_described(&client, n).await?,
                )
            }
        },
    )
    .await?;
    Ok(templates)
}

/// Machine `m` of cluster `c` for every `(c, m)`, `parallelism` creates at once (CAPI's
/// controllers create many machines at once too); each machine's `namespace/name` and
/// when its ProxmoxMachine was sent (Unix ms).
async fn create_machines(
    client: &kube::Client,
    templates: &[objects::MachineTemplate],
    machines: impl Iterator<Item = (usize, usize)>,
    parallelism: usize,
) -> Result<Vec<(String, u64)>> {
    futures::stream::iter(machines)
        .map(|(c, m)| {
            let (client, template) = (client.clone(), &templates[c]);
            async move {
                let created = objects::create_machine(&client, c, m, template).await?;
                Ok::<_, anyhow::Error>((
                    format!("{}/{}", objects::namespace(c), objects::machine_name(c, m)),
                    created.at_ms,
                ))
            }
        })
        .buffer_unordered(parallelism)
        .try_collect()
        .await
}

/// Deletes machine `m` of cluster `c` for every `(c, m)`, `parallelism` at once.
async fn delete_machines(
    client: &kube::Client,
    machines: impl Iterator<Item = (usize, usize)>,
    parallelism: usize,
) -> Result<()> {
    futures::stream::iter(machines)
        .map(|(c, m)| {
            let client = client.clone();
            async move { objects::delete_machine(&client, c, m).await }
        })
        .buffer_unordered(parallelism)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Whether no VM but the templates is left in `sim` and no Machine or ProxmoxMachine in
/// the plane.
async fn all_gone(client: &kube::Client, sim: &pve_sim::StateHandle) -> Result<bool> {
    let vms = sim
        .vms()
        .iter()
        .filter(|v| v["config"]["template"] != "1")
        .count();
    Ok(vms == 0
        && objects::count(client, &objects::infra_machine_stored()).await? == 0
        && objects::count(client, &objects::capi_machine()).await? == 0)
}

/// The extra ProxmoxCluster spec of cluster `c`: with `--static-ips`, a pool of 241
/// addresses of its own (`10.<c / 250>.<c % 250>.10-250`).
fn cluster_spec(args: &Args, c: usize) -> serde_json::Value {
    if !args.static_ips {
        return serde_json::json!({});
    }
    let net = format!("10.{}.{}", c / 250, c % 250);
    serde_json::json!({"ipv4Config": {
        "addresses": [format!("{net}.10-{net}.250")],
        "prefix": 24,
        "gateway": format!("{net}.1"),
    }})
}

/// CPU seconds so far of every process of the plane (the API server, etcd, Cluster
/// API's managers, ...) and of this one (the benchmark and pve-sim), by name: the cores
/// the host shares.
fn others_cpu(plane: &kube_world::Plane) -> Vec<(String, f64)> {
    plane
        .named_pids()
        .into_iter()
        .chain([(
            "scale-bench (the benchmark, pve-sim, the watchers)".to_string(),
            std::process::id(),
        )])
        .filter_map(|(name, pid)| Some((name, cpu::process_seconds(pid).ok()?)))
        .collect()
}

/// The value of an unlabelled metric in Prometheus text.
fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .find_map(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}
