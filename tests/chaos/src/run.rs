//! One chaos run, from an empty world to the table.
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use kube::Client;
use kube_world::{Plane, PlaneOpts};
use pve_sim::{DEFAULT_TOKEN, ListenOpts, RunningSim, Simulator};
use serde_json::json;

use fleet::{HostSpec, now_ms, objects, world};

use crate::ledger::{Ledger, Machine};
use crate::migrations::Migrations;
use crate::pve::{ADMIN_TOKEN, Admin, principal};
use crate::replicas::{Kill, Replicas};
use crate::supervisor::Supervisor;
use crate::verdict::{self, Evidence, Foreign, Table, marker_of};
use crate::writers::Writers;
use crate::{faults, observe};

/// The managed VMID range every machine allocates in (`vmIDRange`), shared by all
/// clusters so that they compete for IDs.
const RANGE_START: u32 = 1000;

/// Creates and deletes machines in waves across clusters while PVE fails, the manager
/// is killed, writers conflict and VMs change out of band; prints the table of
/// invariants (every row must read 0 or yes).
#[derive(Debug, Clone, Parser)]
#[command(name = "chaos", version, about)]
pub struct Args {
    /// Machines in all (N), spread evenly over the clusters.
    #[arg(long, default_value_t = 500)]
    pub machines: usize,
    /// Workload clusters (M), one namespace each.
    #[arg(long, default_value_t = 10)]
    pub clusters: usize,
    /// SIGKILLs of the leading manager, at moments the seed picks.
    #[arg(long, default_value_t = 3)]
    pub kills: usize,
    /// Waves of creation (and as many of deletion).
    #[arg(long, default_value_t = 5)]
    pub waves: usize,
    /// Makes the run's choices reproducible (fault dice, kill moments, which machines
    /// are hit, writers, migrations); random when unset, printed either way.
    #[arg(long, env = "CHAOS_SEED")]
    pub seed: Option<u64>,
    /// PVE nodes; cluster i clones on node i mod NODES.
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Multiplies every PVE task duration, boot delay and lock wait (1 = realistic).
    #[arg(long, default_value_t = 0.2)]
    pub time_scale: f64,
    /// Seconds between the manager's drift checks of provisioned machines. Each check is a
    /// plugin call with a few PVE reads: at 500 machines, 30 s is what 2 cores keep up
    /// with beside the plane and the faults (at 5 s the manager falls behind and its
    /// queue starves some machines); the CI size uses 5 s.
    #[arg(long, default_value_t = 30)]
    pub resync_seconds: u64,
    /// The `hyperplug` binary to run.
    #[arg(long)]
    pub hyperplug: PathBuf,
    /// The plugin it serves.
    #[arg(long, default_value = "plugins/proxmox.wasm")]
    pub plugin: PathBuf,
    /// An extra argument for `hyperplug run` (repeat), e.g. `--host-arg=--reconcile-concurrency=32`.
    #[arg(long = "host-arg", allow_hyphen_values = true)]
    pub host_args: Vec<String>,
    /// Stop waiting for a phase after this many seconds (what is not done by then shows
    /// in the table).
    #[arg(long, default_value_t = 3600)]
    pub timeout_secs: u64,
    /// Objects created or deleted at once.
    #[arg(long, default_value_t = 16)]
    pub parallelism: usize,
    /// The size CI runs (`Args::ci`): 50 machines, 5 clusters, 3 waves, 1 kill, time
    /// scale 0.1; replaces those flags.
    #[arg(long)]
    pub ci: bool,
}

impl Args {
    /// The size CI runs: 50 machines across 5 clusters, one kill, PVE ten times faster.
    pub fn ci(hyperplug: PathBuf, plugin: PathBuf) -> Args {
        Args {
            ci: true,
            machines: 50,
            clusters: 5,
            kills: 1,
            waves: 3,
            seed: std::env::var("CHAOS_SEED")
                .ok()
                .and_then(|s| s.parse().ok()),
            nodes: 3,
            time_scale: 0.1,
            resync_seconds: 5,
            hyperplug,
            plugin,
            host_args: vec![],
            timeout_secs: 900,
            parallelism: 16,
        }
    }

    /// These arguments, or the CI size with their binaries and seed when `--ci` is given.
    pub fn sized(self) -> Args {
        if !self.ci {
            return self;
        }
        let seed = self.seed;
        Args {
            seed,
            ..Args::ci(self.hyperplug, self.plugin)
        }
    }
}

/// What a run found and what it went through.
pub struct Outcome {
    pub seed: u64,
    pub duration: Duration,
    pub table: Table,
    /// What happened, as lines.
    pub happened: Vec<String>,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "chaos run, seed {} ({:.0?})\n", self.seed, self.duration)?;
        write!(f, "{}", self.table)?;
        writeln!(f, "\nwhat happened:")?;
        for l in &self.happened {
            writeln!(f, "  {l}")?;
        }
        Ok(())
    }
}

fn scaled(ms: u64, scale: f64) -> u64 {
    (ms as f64 * scale).round() as u64
}

/// Machines per cluster: N spread evenly.
fn per_cluster(args: &Args) -> Vec<usize> {
    (0..args.clusters)
        .map(|c| args.machines / args.clusters + usize::from(c < args.machines % args.clusters))
        .collect()
}

/// The simulator: one node per cluster group with its template, the fault mix, the
/// manager's token and the administrator's.
async fn simulator(args: &Args, seed: u64) -> Result<RunningSim> {
    let per_node = args.machines.div_ceil(args.nodes) + 1;
    let mut config = world::world(
        args.nodes,
        per_node,
        args.time_scale,
        world::NODE_TASK_CONCURRENCY,
    );
    config.tokens = vec![DEFAULT_TOKEN.into(), ADMIN_TOKEN.into()];
    config.seed = Some(seed);
    config.lock_wait_ms = scaled(config.lock_wait_ms, args.time_scale);
    config.clone_lock_wait_ms = scaled(config.clone_lock_wait_ms, args.time_scale);
    config.cloud_init_delay_ms = scaled(config.cloud_init_delay_ms, args.time_scale);
    config.faults = faults::like_pve();
    Simulator::start(
        config,
        ListenOpts {
            addr: "127.0.0.1:0".into(),
            tls: true,
        },
    )
    .await
}

/// The world of one run, and what it has done so far.
struct Run<'a> {
    args: &'a Args,
    rng: fastrand::Rng,
    plane: Plane,
    client: Client,
    sim: RunningSim,
    admin: Arc<Admin>,
    supervisor: Supervisor,
    ledger: Ledger,
    timeout: Duration,
    happened: Vec<String>,
    /// Each cluster's ProxmoxMachineTemplate, which its machines are made from.
    templates: Vec<objects::MachineTemplate>,
}

/// What keeps running beside the waves, for the record.
struct Background {
    writers: Writers,
    migrations: Migrations,
}

pub async fn run(args: &Args) -> Result<Outcome> {
    anyhow::ensure!(
        args.machines >= args.clusters && args.clusters > 0 && args.nodes > 0 && args.waves > 0,
        "--machines must be at least --clusters, and --clusters, --nodes, --waves at least 1"
    );
    let seed = args.seed.unwrap_or_else(|| fastrand::u64(..));
    eprintln!("[chaos] seed {seed} (CHAOS_SEED={seed} or --seed {seed} repeats the run's choices)");
    let mut rng = fastrand::Rng::with_seed(seed);
    let started = Instant::now();
    let sim = simulator(args, seed).await?;
    let admin = Arc::new(Admin::new(&sim)?);
    eprintln!("[chaos] starting the management plane");
    let (plane, webhook) =
        fleet::plane::start(&args.hyperplug, &args.plugin, PlaneOpts::default()).await?;
    let client = plane.client();
    eprintln!(
        "[chaos] plane and manager logs in {} (kept with KUBE_WORLD_KEEP=1)",
        plane.dir().display()
    );
    let mut host_args = vec![format!("--resync-seconds={}", args.resync_seconds)];
    host_args.extend(args.host_args.iter().cloned());
    let spec = HostSpec {
        binary: args.hyperplug.clone(),
        plugin: args.plugin.clone(),
        kubeconfig: plane.kubeconfig_for("hyperplug")?,
        args: host_args,
        env: vec![],
        webhook,
    };
    let replicas = Replicas::start(&spec, plane.dir().to_path_buf(), client.clone(), started)?;
    let supervisor = Supervisor::start(replicas, sim.state(), args.machines, args.kills, &mut rng);
    let mut run = Run {
        args,
        rng,
        plane,
        client,
        sim,
        admin,
        supervisor,
        ledger: Ledger::default(),
        timeout: Duration::from_secs(args.timeout_secs),
        happened: vec![],
        templates: vec![],
    };
    let (evidence, background) = run.go().await?;
    let Run {
        supervisor,
        ledger,
        mut happened,
        sim,
        plane,
        ..
    } = run;
    let (replicas, kills) = supervisor.finish().await?;
    record(&mut happened, &ledger, &sim, &kills, &replicas, &background);
    let table = verdict::judge(&ledger, &evidence);
    drop(replicas);
    if table.holds() {
        drop(plane);
    } else {
        keep_evidence(&mut happened, plane, &sim, &evidence)?;
    }
    sim.shutdown().await;
    Ok(Outcome {
        seed,
        duration: started.elapsed(),
        table,
        happened,
    })
}

impl Run<'_> {
    async fn go(&mut self) -> Result<(Evidence, Background)> {
        let args = self.args;
        self.supervisor
            .phase(format!("creating {} clusters", args.clusters));
        let pve = objects::Pve::of(&self.sim, DEFAULT_TOKEN)?;
        for c in 0..args.clusters {
            objects::create_cluster(&self.client, c, self.node_of(c), &pve).await?;
            let template = objects::create_machine_template(
                &self.client,
                c,
                self.node_of(c),
                &self.extra_spec(),
            )
            .await?;
            self.templates.push(template);
        }
        self.wait("every cluster provisioned", |client| async move {
            objects::all_provisioned(&client, &objects::infra_cluster(), args.clusters).await
        })
        .await?;

        let foreign = self.plant_foreign_vm().await?;
        let namespaces: Vec<String> = (0..args.clusters).map(objects::namespace).collect();
        let background = Background {
            writers: Writers::start(&self.client, namespaces, 2, self.rng.u64(..)),
            migrations: Migrations::start(
                self.sim.state(),
                self.admin.clone(),
                (1..=args.nodes).map(world::node_name).collect(),
                foreign.vmid,
                self.rng.u64(..),
            ),
        };
        self.create_in_waves().await?;
        let not_provisioned = self.wait_provisioned().await?;
        let drift = self.change_out_of_band().await?;
        self.delete_in_waves().await?;
        self.supervisor.kill_the_rest_now();
        self.supervisor.phase("waiting until every machine is gone");
        self.wait_or_record("every machine gone", |client| async move {
            Ok(
                objects::count(&client, &objects::infra_machine()).await? == 0
                    && objects::count(&client, &objects::capi_machine()).await? == 0,
            )
        })
        .await?;
        self.supervisor.phase("deleting the clusters");
        for c in 0..args.clusters {
            objects::delete_cluster(&self.client, c).await?;
        }
        self.wait_or_record("every cluster gone", |client| async move {
            Ok(
                objects::count(&client, &objects::infra_cluster()).await? == 0
                    && objects::count(&client, &objects::capi_cluster()).await? == 0,
            )
        })
        .await?;
        background.writers.stop();
        background.migrations.stop();

        let state = self.sim.state();
        let evidence = Evidence {
            final_vms: state.vms(),
            destroyed: state.destroyed(),
            manager_user: principal(DEFAULT_TOKEN).into(),
            foreign: Some(foreign),
            stuck: observe::stuck(&self.client).await?,
            not_provisioned,
            drift,
        };
        Ok((evidence, background))
    }

    fn node_of(&self, cluster: usize) -> usize {
        cluster % self.args.nodes + 1
    }

    /// The run's processes are alive (a replica may be down: the supervisor restarts it).
    fn alive(&self) -> Result<()> {
        self.plane.check_processes()?;
        self.supervisor.check()
    }

    async fn wait<F, Fut>(&self, what: &str, check: F) -> Result<()>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<bool>>,
    {
        fleet::wait::until(
            self.timeout,
            what,
            || self.alive(),
            || check(self.client.clone()),
        )
        .await
        .with_context(|| format!("plane and manager logs in {}", self.plane.dir().display()))
    }

    /// Like `wait`, but a timeout is recorded and the run goes on: the table tells what
    /// was left undone.
    async fn wait_or_record<F, Fut>(&mut self, what: &str, check: F) -> Result<()>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<bool>>,
    {
        if let Err(e) = self.wait(what, check).await {
            self.alive()?;
            eprintln!("[chaos] {e:#}");
            self.happened.push(format!("gave up: {e:#}"));
        }
        Ok(())
    }

    /// Size of the managed VMID range every machine allocates in.
    fn range_len(&self) -> u32 {
        (2 * self.args.machines as u32).max(20)
    }

    fn extra_spec(&self) -> serde_json::Value {
        json!({"vmIDRange": {"start": RANGE_START, "end": RANGE_START + self.range_len() - 1}})
    }

    /// The machine the foreign VM is named like: the last of cluster 0.
    fn foreign_namesake(&self) -> (usize, usize) {
        (0, per_cluster(self.args)[0] - 1)
    }

    /// A VM someone else made, in the managed range, on cluster 0's node, named like one
    /// of cluster 0's machines and tagged and marked as another manager's machine would
    /// be: it must never be adopted, changed or destroyed.
    async fn plant_foreign_vm(&mut self) -> Result<Foreign> {
        self.supervisor.phase("planting a foreign VM");
        let (c, m) = self.foreign_namesake();
        let name = objects::machine_name(c, m);
        let vmid = RANGE_START + self.rng.u32(0..self.range_len());
        let uid = format!("foreign-{:016x}", self.rng.u64(..));
        let node = world::node_name(self.node_of(c));
        self.admin.create_foreign(&node, vmid, &name, &uid).await?;
        let digest = self
            .admin
            .vm(vmid)
            .and_then(|v| v["digest"].as_str().map(String::from))
            .context("the foreign VM has a digest")?;
        self.happened.push(format!(
            "foreign VM {vmid} '{name}' planted on {node} in the managed range, marked for machine {uid}"
        ));
        Ok(Foreign { vmid, digest })
    }

    async fn create_in_waves(&mut self) -> Result<()> {
        let args = self.args;
        let per = per_cluster(args);
        for w in 0..args.waves {
            self.supervisor
                .phase(format!("creation wave {}/{}", w + 1, args.waves));
            let batch: Vec<(usize, usize)> = (0..args.clusters)
                .flat_map(|c| {
                    (per[c] * w / args.waves..per[c] * (w + 1) / args.waves).map(move |m| (c, m))
                })
                .collect();
            let created: Vec<(usize, usize, objects::Created)> =
                futures::stream::iter(batch.clone())
                    .map(|(c, m)| {
                        let (client, template) = (self.client.clone(), &self.templates[c]);
                        async move {
                            let created = objects::create_machine(&client, c, m, template).await?;
                            Ok::<_, anyhow::Error>((c, m, created))
                        }
                    })
                    .buffer_unordered(args.parallelism)
                    .try_collect()
                    .await?;
            for (c, m, created) in created {
                self.ledger.add(Machine {
                    cluster: c,
                    index: m,
                    namespace: objects::namespace(c),
                    name: objects::machine_name(c, m),
                    uid: created.uid,
                    created_ms: created.at_ms,
                    delete_ms: None,
                    early: false,
                });
            }
            tokio::time::sleep(Duration::from_millis(self.rng.u64(0..1500))).await;
            // Some are deleted while they are being provisioned (mid-clone, mid-boot).
            let namesake = self.foreign_namesake();
            let mut candidates: Vec<(usize, usize)> =
                batch.into_iter().filter(|cm| *cm != namesake).collect();
            self.rng.shuffle(&mut candidates);
            candidates.truncate(candidates.len() / 10);
            self.delete_machines(&candidates, true).await?;
            tokio::time::sleep(Duration::from_millis(self.rng.u64(500..2000))).await;
        }
        Ok(())
    }

    async fn delete_machines(&mut self, which: &[(usize, usize)], early: bool) -> Result<()> {
        for &(c, m) in which {
            self.ledger.deleting(c, m, early, now_ms());
        }
        futures::stream::iter(which.to_vec())
            .map(|(c, m)| {
                let client = self.client.clone();
                async move { objects::delete_machine(&client, c, m).await }
            })
            .buffer_unordered(self.args.parallelism)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    /// Waits until every machine not deleted is provisioned; returns those that are not.
    async fn wait_provisioned(&mut self) -> Result<Vec<String>> {
        self.supervisor
            .phase("waiting until every machine not deleted is provisioned");
        let want: BTreeSet<String> = self
            .ledger
            .machines()
            .filter(|m| m.delete_ms.is_none())
            .map(Machine::key)
            .collect();
        self.wait_or_record("every machine provisioned", |client| {
            let want = want.clone();
            async move { Ok(want.is_subset(&observe::provisioned(&client).await?)) }
        })
        .await?;
        let provisioned = observe::provisioned(&self.client).await?;
        Ok(want.difference(&provisioned).cloned().collect())
    }

    /// The VM of a machine, by its marker, as the simulator has it now.
    fn vm_of(&self, m: &Machine) -> Option<u32> {
        self.sim
            .state()
            .vms()
            .iter()
            .find(|v| marker_of(&v["config"]) == Some(m.uid.as_str()))
            .and_then(|v| v["vmid"].as_u64())
            .map(|v| v as u32)
    }

    /// One provisioned machine's VM is destroyed and another's powered off through the
    /// API; returns, per change, whether drift was reported for it.
    async fn change_out_of_band(&mut self) -> Result<Vec<(String, bool)>> {
        self.supervisor.phase("changing VMs out of band");
        let provisioned = observe::provisioned(&self.client).await?;
        let namesake = self.foreign_namesake();
        let mut candidates: Vec<Machine> = self
            .ledger
            .machines()
            .filter(|m| m.delete_ms.is_none() && provisioned.contains(&m.key()))
            .filter(|m| (m.cluster, m.index) != namesake)
            .cloned()
            .collect();
        self.rng.shuffle(&mut candidates);
        let mut changes = vec![];
        for (m, destroy) in candidates.into_iter().take(2).zip([true, false]) {
            let vmid = self
                .vm_of(&m)
                .with_context(|| format!("no VM carries the marker of {}", m.key()))?;
            let what = if destroy {
                self.admin.destroy(vmid).await?;
                format!("VM {vmid} of {} destroyed", m.key())
            } else {
                self.admin.power_off(vmid).await?;
                format!("VM {vmid} of {} powered off", m.key())
            };
            eprintln!("[chaos] out of band: {what}");
            self.happened.push(format!("out of band: {what}"));
            changes.push((m, what));
        }
        if changes.len() < 2 {
            self.happened
                .push("fewer than two provisioned machines for the out-of-band changes".into());
        }
        let drift_timeout = Duration::from_secs((self.args.resync_seconds * 12).max(60));
        let machines: Vec<Machine> = changes.iter().map(|(m, _)| m.clone()).collect();
        let reported = fleet::wait::until(
            drift_timeout,
            "drift reported",
            || self.alive(),
            || {
                let (client, machines) = (self.client.clone(), machines.clone());
                async move {
                    for m in &machines {
                        if !observe::drift_reported(&client, m).await? {
                            return Ok(false);
                        }
                    }
                    Ok(true)
                }
            },
        )
        .await;
        if reported.is_err() {
            self.alive()?;
        }
        let mut out = vec![];
        for (m, what) in changes {
            out.push((what, observe::drift_reported(&self.client, &m).await?));
        }
        Ok(out)
    }

    async fn delete_in_waves(&mut self) -> Result<()> {
        let mut rest: Vec<(usize, usize)> = self
            .ledger
            .machines()
            .filter(|m| m.delete_ms.is_none())
            .map(|m| (m.cluster, m.index))
            .collect();
        self.rng.shuffle(&mut rest);
        let size = rest.len().div_ceil(self.args.waves).max(1);
        let chunks: Vec<Vec<(usize, usize)>> = rest.chunks(size).map(<[_]>::to_vec).collect();
        for (i, chunk) in chunks.iter().enumerate() {
            self.supervisor
                .phase(format!("deletion wave {}/{}", i + 1, chunks.len()));
            self.delete_machines(chunk, false).await?;
            tokio::time::sleep(Duration::from_millis(self.rng.u64(500..2000))).await;
        }
        Ok(())
    }
}

/// A run that broke an invariant keeps, for its post-mortem, the plane's directory (the
/// replicas' and the plane's logs) and writes beside them what pve-sim saw: its state,
/// every task, every destroy and the requests it served.
fn keep_evidence(
    happened: &mut Vec<String>,
    plane: Plane,
    sim: &RunningSim,
    evidence: &Evidence,
) -> Result<()> {
    let Some(dir) = plane.keep() else {
        return Ok(());
    };
    let state = sim.state();
    let files = [
        ("pve-state.json", state.dump()),
        ("pve-tasks.json", serde_json::Value::from(state.tasks())),
        (
            "pve-destroyed.json",
            serde_json::Value::from(evidence.destroyed.clone()),
        ),
        (
            "pve-requests.json",
            serde_json::Value::from(state.requests()),
        ),
    ];
    for (name, value) in files {
        let path = dir.join(name);
        std::fs::write(&path, serde_json::to_vec_pretty(&value)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    happened.push(format!(
        "evidence kept in {} (the replicas' logs, pve-*.json)",
        dir.display()
    ));
    Ok(())
}

/// What the run went through, as lines for the report.
fn record(
    happened: &mut Vec<String>,
    ledger: &Ledger,
    sim: &RunningSim,
    kills: &[Kill],
    replicas: &Replicas,
    background: &Background,
) {
    let early = ledger.machines().filter(|m| m.early).count();
    happened.insert(
        0,
        format!(
            "machines: {} created, {early} of them deleted while being provisioned",
            ledger.len()
        ),
    );
    for k in kills {
        happened.push(format!(
            "SIGKILL of the leader {} at {:.0?} during {}",
            k.identity, k.at, k.during
        ));
    }
    for e in &replicas.exits {
        happened.push(format!("replica exited by itself and was restarted: {e}"));
    }
    let w = &background.writers.stats;
    happened.push(format!(
        "concurrent writers: {} writes, {} conflicts, {} other errors",
        w.writes.load(Ordering::Relaxed),
        w.conflicts.load(Ordering::Relaxed),
        w.errors.load(Ordering::Relaxed)
    ));
    let m = &background.migrations.stats;
    happened.push(format!(
        "migrations: {} by the load balancer, {} through the API, {} refused",
        m.balanced.load(Ordering::Relaxed),
        m.migrated.load(Ordering::Relaxed),
        m.refused.load(Ordering::Relaxed)
    ));
    let state = sim.state();
    for rule in state.fault_hits().as_array().into_iter().flatten() {
        happened.push(format!(
            "PVE fault '{}': {} of {} requests",
            rule["name"].as_str().unwrap_or_default(),
            rule["fired"],
            rule["matched"]
        ));
    }
    let isos: Vec<String> = state.dump()["storages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["volumes"].is_array())
        .flat_map(|s| {
            let node = s["node"].as_str().unwrap_or("shared").to_string();
            s["volumes"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter_map(move |v| Some(format!("{} on {node}", v["volid"].as_str()?)))
        })
        .filter(|v| v.contains("iso/hyperplug-"))
        .collect();
    happened.push(format!(
        "NoCloud ISOs left in storage: {}{}",
        isos.len(),
        if isos.is_empty() {
            String::new()
        } else {
            format!(" ({})", isos.join(", "))
        }
    ));
    let destroyed = state.destroyed();
    let by = |user: &str| destroyed.iter().filter(|d| d["user"] == user).count();
    happened.push(format!(
        "VMs destroyed: {} by the manager, {} by the administrator",
        by(principal(DEFAULT_TOKEN)),
        by(principal(ADMIN_TOKEN)),
    ));
    let tasks = state.tasks();
    let failed = |text: &str| {
        tasks
            .iter()
            .filter(|t| t["exitstatus"].as_str().is_some_and(|s| s.contains(text)))
            .count()
    };
    happened.push(format!(
        "PVE tasks: {} in all, {} failed by injection, {} on a lock timeout, {} lost their VMID to another clone",
        tasks.len(),
        failed(faults::TASK_FAILURE),
        failed("got timeout"),
        failed("already exists"),
    ));
}
