//! `pve-sim`: serve a simulated Proxmox VE API. See `pve-sim --help` and the README.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use pve_sim::{Config, ListenOpts, Simulator};

/// Proxmox VE API simulator (the /api2/json subset a Cluster API provider uses).
///
/// Default world (without --config):
///   nodes pve1, pve2, pve3 (16 CPUs, 64 GiB each); on every node the storages
///   `local` (dir: iso,vztmpl,backup,snippets) and `local-lvm` (lvmthin: images,rootdir);
///   template VM 9000 `ubuntu-2404-cloudinit` on pve1 (scsi0 on local-lvm, net0 virtio on
///   vmbr0, agent on, ide2 cloud-init drive); pool `capi`; API token
///   `capmox@pve!capi=REDACTED-SIM-SECRET`; user root@pam, password
///   `REDACTED-SIM-PASSWORD` (tickets); DHCP leases from 10.10.0.100-250.
///
/// Config file (TOML, every key optional; --print-default-config prints the defaults):
///   pve_version            version presented: 8.0.x, 8.4.x, 9.x (schema, error bodies)
///   cluster_name           shown by /cluster/status
///   [[nodes]]              name, cpus, memory (bytes), base_memory_used, ip, online
///   [[storages]]           id, type = dir|lvmthin|zfspool, content = [..], total,
///                          nodes = [..] (empty: all), shared
///   [[vms]]                vmid, node, config = { key = "value", .. }, running, pool
///   [[vm_sets]]            bulk copies for benchmarks: count, clone_of, first_vmid,
///                          nodes, running, name_prefix, pool
///   pools, tokens          ["capi"], ["USER@REALM!TOKENID=SECRET"] (privilege-separated)
///   [[api_tokens]]         id, secret, privsep (default true): tokens with settings
///   users                  { "root@pam" = "password" }
///   [roles]                custom roles: NAME = ["VM.Audit", ..] beside the built-in ones
///   [[acls]]               path, principal (user or token), role, privs = [..],
///                          propagate; evaluated as PVE does (most specific path wins,
///                          pools, token privsep); users that no entry names (nor
///                          their tokens) are unrestricted
///   [task_ms]              per task type: qmclone, qmstart, qmstop, qmshutdown, qmreboot,
///                          qmdestroy, resize, qmconfig, qmcreate, qmigrate, imgcopy,
///                          imgdel (ms)
///   default_task_ms        duration of other task types
///   node_task_concurrency  tasks running at once per node (0 = unlimited)
///   lock_wait_ms           wait for a VM's config lock held by a task (10000)
///   clone_lock_wait_ms     a clone task's wait for its source's and target's locks (1000)
///   time_scale             multiplies every duration, delay and lock wait (1.0)
///   auth_failure_delay_ms  delay of 401 answers (PVE: ~3000; default 0)
///   boot_delay_ms          start task end -> guest booted with addresses
///   agent_delay_ms         boot -> guest agent answers
///   cloud_init_delay_ms    boot -> `cloud-init status` (agent exec) says done
///   strict_memory          refuse starts beyond the node's free memory
///   [dhcp]                 start, end, prefix, gateway
///   [faults]               latency_ms, latency_jitter_ms, task_failure_rate,
///                          task_failure_message, lock_timeout_rate, slow_task_rate,
///                          slow_task_factor, unreachable_nodes = [..]
///   [[faults.rules]]       name, endpoint = "METHOD PATH" (`*`/`{x}` one segment, `**`
///                          any; "*" = every request), probability, delay_ms, skip,
///                          max_count, kind = http|delay|task_failure|lock_timeout|
///                          vmid_race, status = 500|503|595, message, handled
///                          (http: act first, then answer the error: a lost reply)
///   seed, max_body_bytes   reproducible randomness; largest request body
///
/// Inspection (unauthenticated, same listener):
///   GET /_sim/vms, /_sim/vms/{vmid}, /_sim/state, /_sim/counters, /_sim/tasks,
///   /_sim/destroyed,
///   /_sim/faults, /_sim/faults/hits, /_sim/endpoints; POST /_sim/counters/reset,
///   /_sim/vms/{vmid}/crash, /_sim/vms/{vmid}/migrate?target=NODE;
///   PUT /_sim/faults (JSON with the keys of [faults]).
#[derive(Debug, Parser)]
#[command(name = "pve-sim", version, about, long_about, verbatim_doc_comment)]
struct Cli {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, env = "PVE_SIM_LISTEN", default_value = "127.0.0.1:8006")]
    listen: String,

    /// Accepted API token `USER@REALM!TOKENID=SECRET`; repeat for several. Replaces the
    /// tokens of the config (default: capmox@pve!capi=REDACTED-SIM-SECRET).
    #[arg(long, env = "PVE_SIM_TOKEN")]
    token: Vec<String>,

    /// TOML config file describing the world, timings and faults.
    #[arg(long, short = 'c', env = "PVE_SIM_CONFIG")]
    config: Option<PathBuf>,

    /// Serve plain HTTP instead of HTTPS.
    #[arg(long)]
    http: bool,

    /// Set every task duration and the boot/agent delays to zero (for tests).
    #[arg(long)]
    fast: bool,

    /// PVE version to present (8.0.x, 8.4.x or 9.x; decides the schema used for
    /// validation and whether error bodies carry `message`).
    #[arg(long)]
    pve_version: Option<String>,

    /// Seed for MACs, UUIDs and fault dice (reproducible runs).
    #[arg(long)]
    seed: Option<u64>,

    /// Also copy the generated CA certificate (PEM) to this path.
    #[arg(long)]
    ca_out: Option<PathBuf>,

    /// Print the default config as TOML and exit.
    #[arg(long)]
    print_default_config: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let cli = Cli::parse();
    if cli.print_default_config {
        print!("{}", toml::to_string_pretty(&Config::default())?);
        return Ok(());
    }
    let mut config = match &cli.config {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            Config::from_toml(&text).with_context(|| format!("parsing {}", p.display()))?
        }
        None => Config::default(),
    };
    if !cli.token.is_empty() {
        for t in &cli.token {
            anyhow::ensure!(
                pve_sim::api::parse_token(t).is_some(),
                "token must look like USER@REALM!TOKENID=SECRET, got {t:?}"
            );
        }
        config.tokens = cli.token.clone();
    }
    if cli.fast {
        config = config.with_fast();
    }
    if let Some(v) = cli.pve_version {
        config.pve_version = v;
    }
    if cli.seed.is_some() {
        config.seed = cli.seed;
    }
    let summary = config.clone();
    let sim = Simulator::start(
        config,
        ListenOpts {
            addr: cli.listen.clone(),
            tls: !cli.http,
        },
    )
    .await?;
    if let (Some(out), Some(ca)) = (&cli.ca_out, sim.ca_path()) {
        std::fs::copy(ca, out).with_context(|| format!("writing {}", out.display()))?;
    }
    println!("pve-sim: Proxmox VE {} API simulator", summary.pve_version);
    println!("  API:          {}/api2/json", sim.base_url());
    if let Some(ca) = sim.ca_path() {
        println!(
            "  CA:           {}",
            cli.ca_out.as_ref().unwrap_or(&ca.to_path_buf()).display()
        );
        println!("  fingerprint:  {}", sim.fingerprint());
    }
    for t in &summary.tokens {
        println!("  token:        PVEAPIToken={t}");
    }
    for u in summary.users.keys() {
        println!("  user:         {u} (POST /access/ticket)");
    }
    for n in &summary.nodes {
        println!(
            "  node:         {} ({} CPUs, {} GiB){}",
            n.name,
            n.cpus,
            n.memory >> 30,
            if n.online { "" } else { " offline" }
        );
    }
    for s in &summary.storages {
        println!(
            "  storage:      {} ({}, {}){}",
            s.id,
            s.kind.as_str(),
            s.content.join(","),
            if s.shared { " shared" } else { "" }
        );
    }
    for v in &summary.vms {
        let name = v.config.get("name").cloned().unwrap_or_default();
        let kind = if v.config.get("template").is_some_and(|t| t == "1") {
            "template"
        } else {
            "vm"
        };
        let id = format!("{}:", v.vmid);
        println!("  {kind:<13} {id} {name} on {}", v.node);
    }
    println!(
        "  inspection:   {}/_sim/state (also /_sim/vms, /_sim/counters, /_sim/faults)",
        sim.base_url()
    );
    tokio::signal::ctrl_c().await?;
    sim.shutdown().await;
    Ok(())
}
