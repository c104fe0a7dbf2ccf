//! `hyperplug run`: the manager.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use hyperplug_runtime::blob_server;
use hyperplug_runtime::{BlobStore, Limits, Runtime};

use super::{CacheArgs, load_plugins};
use crate::controller::claims::LeaseClaims;
use crate::controller::{self, ManagerOptions};
use crate::health::{self, Health};
use crate::metrics::Metrics;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// A plugin component to serve; repeat for several. Each plugin's kinds get their
    /// own controllers.
    #[arg(
        long = "plugin",
        required = true,
        env = "HYPERPLUG_PLUGINS",
        value_delimiter = ','
    )]
    pub plugins: Vec<PathBuf>,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "HYPERPLUG_NAMESPACE")]
    pub namespace: Option<String>,
    /// Secret (`NAMESPACE/NAME`) with the credentials used when an InfraCluster has no
    /// `spec.credentialsRef`. Keys: `url`, `token`, `secret`, optional `ca.crt`,
    /// `fingerprint`, `insecure`.
    #[arg(long, env = "HYPERPLUG_DEFAULT_CREDENTIALS_SECRET")]
    pub default_credentials_secret: Option<String>,
    /// Address of the Prometheus `/metrics` endpoint (also serves `/healthz`, `/readyz`
    /// when it equals --health-addr).
    #[arg(long, default_value = "0.0.0.0:8080", env = "HYPERPLUG_METRICS_ADDR")]
    pub metrics_addr: SocketAddr,
    /// Address of `/healthz` and `/readyz`.
    #[arg(long, default_value = "0.0.0.0:8081", env = "HYPERPLUG_HEALTH_ADDR")]
    pub health_addr: SocketAddr,
    /// Elect one active replica through a Lease; the others wait as standbys.
    #[arg(long, env = "HYPERPLUG_LEADER_ELECT")]
    pub leader_elect: bool,
    /// Namespace of the leader-election Lease (default: $POD_NAMESPACE, else `default`).
    #[arg(long, env = "HYPERPLUG_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// Name of the leader-election Lease.
    #[arg(
        long,
        default_value = "hyperplug-leader",
        env = "HYPERPLUG_LEADER_ELECTION_ID"
    )]
    pub leader_election_id: String,
    /// Address the blob server listens on: it serves what plugins publish for the
    /// infrastructure to download (e.g. bootstrap media a machine controller boots).
    /// Only with --blob-advertise-url.
    #[arg(
        long,
        default_value = "0.0.0.0:8082",
        env = "HYPERPLUG_BLOB_LISTEN_ADDR"
    )]
    pub blob_listen_addr: SocketAddr,
    /// Base URL the infrastructure reaches the blob server at (e.g.
    /// `http://10.0.0.5:8082`). Unset: no blob server, and plugins that publish blobs
    /// report that they cannot.
    #[arg(long, env = "HYPERPLUG_BLOB_ADVERTISE_URL")]
    pub blob_advertise_url: Option<url::Url>,
    /// Longest a published blob lives, in seconds (a plugin may ask for less).
    #[arg(long, default_value_t = 3600, env = "HYPERPLUG_BLOB_TTL_SECONDS")]
    pub blob_ttl_seconds: u64,
    /// Largest blob a plugin may publish, in MiB.
    #[arg(long, default_value_t = 64, env = "HYPERPLUG_BLOB_MAX_MIB")]
    pub blob_max_mib: usize,
    /// Namespace of the Leases that keep plugins' exclusive claims (e.g. which machine
    /// holds which bare-metal host). Default: $POD_NAMESPACE, else `default`.
    #[arg(long, env = "HYPERPLUG_CLAIMS_NAMESPACE")]
    pub claims_namespace: Option<String>,
    /// Reconciles in flight per kind.
    #[arg(long, default_value_t = 16, env = "HYPERPLUG_RECONCILE_CONCURRENCY")]
    pub reconcile_concurrency: u16,
    /// Seconds between drift checks of provisioned objects.
    #[arg(long, default_value_t = 300, env = "HYPERPLUG_RESYNC_SECONDS")]
    pub resync_seconds: u64,
    #[command(flatten)]
    pub limits: Limits,
    #[command(flatten)]
    pub cache: CacheArgs,
}

/// How long a leader's lease lasts without renewal.
const LEASE: Duration = Duration::from_secs(15);

pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let default_credentials = match &args.default_credentials_secret {
        None => None,
        Some(s) => {
            let (ns, name) = s.split_once('/').with_context(|| {
                format!("--default-credentials-secret `{s}` must be NAMESPACE/NAME")
            })?;
            Some((ns.to_string(), name.to_string()))
        }
    };
    let client = kube::Client::try_default()
        .await
        .context("cannot reach the Kubernetes API (set KUBECONFIG or run in a cluster)")?;
    let metrics = Arc::new(Metrics::default());
    let observed = metrics.clone();
    let claims_namespace = args
        .claims_namespace
        .clone()
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .unwrap_or_else(|| "default".into());
    let mut runtime = Runtime::builder(args.limits.clone())
        .observe_http(Arc::new(move |p, method, path| {
            observed.infrastructure_request(p, method, path)
        }))
        // Claims must hold across replicas and restarts: keep them in Kubernetes.
        .claims(Arc::new(LeaseClaims::new(
            client.clone(),
            &claims_namespace,
        )));
    let blobs = args.blob_advertise_url.as_ref().map(|advertise| {
        Arc::new(BlobStore::new(
            advertise.clone(),
            Duration::from_secs(args.blob_ttl_seconds),
            args.blob_max_mib << 20,
        ))
    });
    if let Some(store) = &blobs {
        runtime = runtime.blobs(store.clone());
    }
    let plugins = load_plugins(&args.plugins, runtime, &args.cache).await?;
    for plugin in &plugins {
        let kinds: Vec<_> = plugin
            .info()
            .kinds
            .iter()
            .map(|k| k.kind.as_str())
            .collect();
        tracing::info!(plugin = plugin.name(), version = %plugin.info().version, ?kinds, "plugin loaded");
    }
    if let (Some(advertise), Some(store)) = (&args.blob_advertise_url, blobs) {
        let listener = tokio::net::TcpListener::bind(args.blob_listen_addr)
            .await
            .with_context(|| format!("--blob-listen-addr {}", args.blob_listen_addr))?;
        tracing::info!(addr = %args.blob_listen_addr, advertised = %advertise, "serving blobs");
        tokio::spawn(log_exit("blobs", blob_server::serve(listener, store)));
    }
    let ready = Arc::new(AtomicBool::new(false));
    let health = Health {
        ready: ready.clone(),
        metrics: metrics.clone(),
    };
    tokio::spawn(log_exit(
        "health",
        health::serve(args.health_addr, health.clone()),
    ));
    if args.metrics_addr != args.health_addr {
        tokio::spawn(log_exit(
            "metrics",
            health::serve(args.metrics_addr, health),
        ));
    }
    let options = ManagerOptions {
        default_credentials,
        // An empty value (as a Deployment's env may give) means all namespaces.
        namespace: args.namespace.clone().filter(|n| !n.is_empty()),
        concurrency: args.reconcile_concurrency,
        resync: Duration::from_secs(args.resync_seconds),
    };
    ready.store(true, Ordering::Relaxed);
    let elector = args.leader_elect.then(|| {
        let namespace = args
            .leader_election_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| "default".into());
        let identity = std::env::var("HOSTNAME")
            .unwrap_or_else(|_| format!("hyperplug-{}", std::process::id()));
        crate::leader::Elector::new(
            client.clone(),
            &namespace,
            &args.leader_election_id,
            &identity,
            LEASE,
        )
    });
    if let Some(elector) = &elector {
        tokio::select! {
            acquired = elector.acquire() => acquired.context("leader election")?,
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
        }
    }
    tracing::info!("manager started");
    let lost = async {
        match &elector {
            Some(e) => e.keep().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = controller::run(client, plugins, options, metrics) => {}
        _ = lost => {
            // Another replica may be reconciling now: stop at once.
            return Ok(ExitCode::FAILURE);
        }
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted; stopping"),
    }
    Ok(ExitCode::SUCCESS)
}

async fn log_exit(what: &str, fut: impl Future<Output = anyhow::Result<()>>) {
    if let Err(e) = fut.await {
        tracing::error!(server = what, error = %e, "server stopped");
    }
}
