//! `hyperplug conformance`: check a plugin against a real endpoint, csi-sanity style.
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use hyperplug_conformance::drive::{Pacing, TRANSIENT_RETRIES};
use hyperplug_conformance::{Options, inputs};
use hyperplug_runtime::blob_server;
use hyperplug_runtime::{BlobLimits, BlobStore, Limits, Plugin, Runtime};

use super::limits::LimitArgs;
use super::{CacheArgs, load_plugins};
use crate::oci::PluginSource;

/// Runs a plugin through the same runtime and limits as `hyperplug run` and checks the
/// provider invariants: idempotent create and delete, adoption of lost state, describe
/// before, during and after, invalid specs naming their field, transient errors for
/// unreachable and failing endpoints, call deadlines, and no leaks. Prints a verdict per
/// case; exits 1 if any case failed.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  hyperplug conformance --plugin my-plugin.wasm \\\n    --target https://infra.example:8443 --credentials creds.yaml \\\n    --spec machine.yaml --cluster-spec cluster.yaml --junit conformance.xml\n\nSee docs/plugin-authors.md."
)]
pub struct ConformanceArgs {
    /// The plugin under test: a component file (.wasm) or an oci:// reference.
    #[arg(long, required_unless_present = "list")]
    pub plugin: Option<PluginSource>,
    /// Base URL of the infrastructure API the plugin drives (the credentials' `url`).
    #[arg(long, required_unless_present = "list")]
    pub target: Option<String>,
    /// YAML/JSON with the keys of a credentials Secret: `token`, `secret`, optional
    /// `ca.crt`, `fingerprint`, `insecure` (a Secret manifest works too).
    #[arg(long, required_unless_present = "list")]
    pub credentials: Option<PathBuf>,
    /// A valid InfraMachine spec (YAML/JSON; a whole manifest works too). The suite
    /// creates several machines from it.
    #[arg(long, required_unless_present = "list")]
    pub spec: Option<PathBuf>,
    /// The InfraCluster spec, reconciled first and handed to every machine call.
    #[arg(long)]
    pub cluster_spec: Option<PathBuf>,
    /// Address pools for the plugin's address requests: a list of `name`, `addresses`
    /// (ranges, CIDRs, single addresses), `prefix`, `gateway`. Pools the cluster
    /// reconcile reports are used too; a pool in this file wins.
    #[arg(long)]
    pub addresses: Option<PathBuf>,
    /// Where the kit serves what plugins publish through the `blobs` import (e.g. boot
    /// media a machine controller downloads); the target must reach it.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub blob_listen_addr: std::net::SocketAddr,
    /// The URL the target reaches the blob server at (default: `http://` and the bound
    /// --blob-listen-addr).
    #[arg(long)]
    pub blob_advertise_url: Option<url::Url>,
    /// Bootstrap data for plugins that ask for it (default: a dummy cloud-config).
    #[arg(long)]
    pub bootstrap: Option<PathBuf>,
    /// Write the verdicts as JUnit XML to this file.
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// How many times create and delete are repeated with the same inputs.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,
    /// The call deadline of the `call-deadline` case, in milliseconds (the other cases
    /// use --plugin-timeout-ms).
    #[arg(long, default_value_t = 2_000)]
    pub deadline_ms: u64,
    /// Cap each requeue hint at this many milliseconds (for fast simulators); by default
    /// the kit waits as long as the plugin asks.
    #[arg(long)]
    pub max_requeue_ms: Option<u64>,
    /// Give up on a create or delete that has not converged after this many seconds.
    #[arg(long, default_value_t = 600)]
    pub drive_timeout_seconds: u64,
    /// Namespace written into the object references the plugin sees.
    #[arg(long, default_value = "conformance")]
    pub namespace: String,
    /// Id in every object name (`conf-<id>-main`, ...); default: random.
    #[arg(long)]
    pub run_id: Option<String>,
    /// A case not to run (repeatable); it is reported as skipped.
    #[arg(long, value_name = "CASE")]
    pub skip: Vec<String>,
    /// List the cases and exit.
    #[arg(long)]
    pub list: bool,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[command(flatten)]
    pub cache: CacheArgs,
}

pub async fn run(args: ConformanceArgs) -> anyhow::Result<ExitCode> {
    if args.list {
        for (name, about) in hyperplug_conformance::cases() {
            println!("{name:<34} {about}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let known: Vec<&str> = hyperplug_conformance::cases()
        .iter()
        .map(|(n, _)| *n)
        .collect();
    if let Some(bad) = args.skip.iter().find(|s| !known.contains(&s.as_str())) {
        anyhow::bail!("--skip {bad}: no such case (see --list)");
    }
    // clap requires these unless --list was given.
    let (Some(plugin_path), Some(target), Some(creds_path), Some(spec_path)) =
        (&args.plugin, &args.target, &args.credentials, &args.spec)
    else {
        anyhow::bail!("--plugin, --target, --credentials and --spec are required");
    };
    let credentials = inputs::read_credentials(creds_path, target)?;
    let spec = inputs::read_spec(spec_path)?;
    let cluster_spec = match &args.cluster_spec {
        Some(p) => inputs::read_spec(p)?,
        None => serde_json::json!({}),
    };
    let pools = match &args.addresses {
        Some(p) => inputs::read_pools(p)?,
        None => vec![],
    };
    let bootstrap = inputs::read_bootstrap(args.bootstrap.as_deref())?;
    let (plugin, deadline_plugin) = load_twice(&args, plugin_path).await?;
    let run_id = args
        .run_id
        .clone()
        .unwrap_or_else(hyperplug_conformance::new_run_id);
    println!(
        "hyperplug conformance: plugin {} {} against {} (run {run_id})",
        plugin.name(),
        plugin.info().version,
        credentials.endpoint
    );
    let opts = Options {
        plugin,
        deadline_plugin,
        deadline: Duration::from_millis(args.deadline_ms),
        // The JUnit report names the plugin as given: its file or its oci:// reference.
        plugin_path: PathBuf::from(plugin_path.to_string()),
        credentials,
        spec,
        cluster_spec,
        pools,
        bootstrap,
        repeat: args.repeat as usize,
        pacing: Pacing {
            max_requeue: args.max_requeue_ms.map(Duration::from_millis),
            drive_timeout: Duration::from_secs(args.drive_timeout_seconds),
            transient_retries: TRANSIENT_RETRIES,
        },
        namespace: args.namespace.clone(),
        run_id,
        skip: args.skip.clone(),
    };
    let report = hyperplug_conformance::run(opts).await?;
    println!("\n{}", report.summary());
    if let Some(path) = &args.junit {
        std::fs::write(path, report.junit())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if report.failed() {
        let failed: Vec<&str> = report
            .cases
            .iter()
            .filter(|c| matches!(c.verdict, hyperplug_conformance::Verdict::Fail(_)))
            .map(|c| c.name)
            .collect();
        eprintln!("conformance failed: {}", failed.join(", "));
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// The plugin twice: with its limits, and with the short deadline of the `call-deadline`
/// case. Both publish blobs to one store, served as `hyperplug run` serves it.
async fn load_twice(
    args: &ConformanceArgs,
    plugin_path: &PluginSource,
) -> anyhow::Result<(Plugin, Plugin)> {
    let listener = tokio::net::TcpListener::bind(args.blob_listen_addr)
        .await
        .with_context(|| format!("--blob-listen-addr {}", args.blob_listen_addr))?;
    let advertise = match &args.blob_advertise_url {
        Some(url) => url.clone(),
        None => url::Url::parse(&format!("http://{}", listener.local_addr()?))?,
    };
    let blobs = Arc::new(BlobStore::new(advertise, BlobLimits::default()));
    let runtime = |limits: Limits| Runtime::builder(limits).blobs(blobs.clone());
    let plugin = load_plugins(
        std::slice::from_ref(plugin_path),
        runtime(Limits::from(args.limits.clone())),
        &args.cache,
    )
    .await?
    .remove(0);
    let short = Limits {
        timeout_ms: args.deadline_ms,
        ..Limits::from(args.limits.clone())
    };
    let deadline_plugin = load_plugins(
        std::slice::from_ref(plugin_path),
        runtime(short),
        &args.cache,
    )
    .await?
    .remove(0);
    let bounds = crate::listen::Bounds::blobs(&Default::default());
    let app = blob_server::router(blobs);
    tokio::spawn(crate::listen::serve(
        listener,
        crate::listen::Transport::Plain,
        app,
        bounds,
    ));
    Ok((plugin, deadline_plugin))
}
