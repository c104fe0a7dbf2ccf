//! `hyperplug run`: the manager.
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use hyperplug_runtime::blob_server;
use hyperplug_runtime::{BlobStore, Limits, Plugin, Runtime};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::limits::{BlobLimitArgs, LimitArgs};
use super::{CacheArgs, load_fetched};
use crate::admission::Finalizers;
use crate::controller::cache::oversized::DEFAULT_OBJECT_MAX_KIB;
use crate::controller::cache::scope::{Scope, parse_watch_filter};
use crate::controller::call::credentials::DEFAULT_CREDENTIALS_MAX_KIB;
use crate::controller::trust::adoption::AdoptionLimits;
use crate::controller::trust::ownership::OwnershipKeys;
use crate::controller::{
    self, CredentialsGrant, DEFAULT_OWNERSHIP_KEY_SECRET, DEFAULT_RECONCILE_CONCURRENCY,
    ManagerOptions, RESYNC,
};
use crate::conversion::Conversions;
use crate::health::{self, Health};
use crate::lease_claims::LeaseClaims;
use crate::listen::{self, Bounds, ServerArgs, Transport};
use crate::metrics::Metrics;
use crate::oci::{ConfigMapPins, DEFAULT_PINS_CONFIGMAP, Pins, PluginSource};
use crate::webhook::{self, CertDir};

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// A plugin to serve: a component file (.wasm) or an OCI artifact
    /// (oci://REGISTRY/REPOSITORY:TAG or …@sha256:DIGEST, pulled once and cached by
    /// digest); repeat for several. Each plugin's kinds get their own controllers.
    #[arg(
        long = "plugin",
        required = true,
        env = "HYPERPLUG_PLUGINS",
        value_delimiter = ','
    )]
    pub plugins: Vec<PluginSource>,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "HYPERPLUG_NAMESPACE")]
    pub namespace: Option<String>,
    /// Reconcile only objects labelled `cluster.x-k8s.io/watch-filter=VALUE`, as every
    /// Cluster API manager started with the same `--watch-filter` does: several instances
    /// of this manager (each with its own value, its own --leader-election-id and
    /// webhook) then share one management cluster, each acting only on its own clusters.
    /// Objects without the label are ignored by this instance's controllers and by its
    /// finalizer webhook. It divides work, not trust (anyone who may edit an object may
    /// label it): separate tenants with --namespace. Default: every object.
    #[arg(long, env = "HYPERPLUG_WATCH_FILTER", value_parser = parse_watch_filter)]
    pub watch_filter: Option<String>,
    /// Secret with the credentials a plugin's InfraClusters use when they name none
    /// (`spec.credentialsRef`/`credentialsRefs`): `PLUGIN=NAMESPACE/NAME`, repeat for
    /// several plugins; only another plugin's InfraClusters never get it. With exactly
    /// one plugin loaded, `NAMESPACE/NAME` alone means that plugin. Keys: `url`,
    /// `token`, `secret`, optional `ca.crt`, `fingerprint`, `insecure`.
    #[arg(
        long,
        env = "HYPERPLUG_DEFAULT_CREDENTIALS_SECRET",
        value_delimiter = ','
    )]
    pub default_credentials_secret: Vec<String>,
    /// Let InfraClusters in CLUSTER_NAMESPACE (`*`: any) name credentials Secrets in
    /// SECRET_NAMESPACE: `CLUSTER_NAMESPACE=SECRET_NAMESPACE`, repeatable. Without it an
    /// InfraCluster may use only Secrets of its own namespace (and the manager's
    /// default), so a tenant cannot borrow another team's credentials.
    #[arg(
        long,
        env = "HYPERPLUG_CROSS_NAMESPACE_CREDENTIALS",
        value_delimiter = ','
    )]
    pub cross_namespace_credentials: Vec<CredentialsGrant>,
    /// Adopt, in NAMESPACE (`*`: every namespace), machines another provider of the same
    /// kinds made (a cluster taken over, e.g. from CAPMOX): repeatable. A machine marked
    /// provisioned that this manager has no record of is left alone elsewhere (condition
    /// `AdoptionNotGranted`); here the plugin adopts its infrastructure only if it proves
    /// to be the machine's. Grant it for the takeover, then remove it.
    #[arg(long, env = "HYPERPLUG_ADOPT_NAMESPACE", value_delimiter = ',')]
    pub adopt_namespace: Vec<String>,
    /// Narrow every adoption grant to objects created before this time (RFC 3339, e.g.
    /// `2026-12-01T00:00:00Z`): machines that appear after the takeover began, which
    /// only a tenant can have made, are never adopted.
    #[arg(long, env = "HYPERPLUG_ADOPT_CREATED_BEFORE", value_parser = parse_time)]
    pub adopt_created_before: Option<Time>,
    /// Narrow every adoption grant to machines whose `spec.providerID` is one of these
    /// (repeatable, e.g. `proxmox://6c3fa683-bef9-4425-b413-eaa45a9d6191`): the list of
    /// what the takeover is to bring in, and nothing else.
    #[arg(long, env = "HYPERPLUG_ADOPT_PROVIDER_ID", value_delimiter = ',')]
    pub adopt_provider_id: Vec<String>,
    /// Most KiB of credentials (url, token, secret, CA, fingerprint of every Secret of
    /// spec.credentialsRef and spec.credentialsRefs) one InfraCluster may hand a call;
    /// more is `CredentialsTooLarge` on the object. Each value is at most 64 KiB.
    #[arg(long, default_value_t = DEFAULT_CREDENTIALS_MAX_KIB)]
    pub credentials_max_kib: u64,
    /// Most KiB of what its writers put in one object (every field but its status, its
    /// annotations, labels, owner references and finalizers) that the manager keeps in
    /// its caches. An object of the plugins' kinds over it is cached without its largest
    /// parts and gets no plugin call: `ObjectTooLarge` on it until it is smaller. A
    /// Cluster API object over it is read from the API server when a reconcile needs it.
    #[arg(long, default_value_t = DEFAULT_OBJECT_MAX_KIB)]
    pub object_max_kib: u64,
    /// Secret (`NAMESPACE/NAME`) holding the key that signs ownership ids, created on
    /// first start if absent. Default: `$POD_NAMESPACE/hyperplug-ownership-key` (one of
    /// them must be set). A manager that takes objects over by `clusterctl move` needs the
    /// source's key (see docs/security.md).
    #[arg(long, env = "HYPERPLUG_OWNERSHIP_KEY_SECRET")]
    pub ownership_key_secret: Option<String>,
    /// ConfigMap (`NAMESPACE/NAME`) keeping the digest each oci:// plugin tag named when
    /// first pulled, so a tag re-pointed later is refused across restarts too (the
    /// cache directory may be an emptyDir). Default:
    /// `$POD_NAMESPACE/hyperplug-plugin-pins` (one of them must be set when a plugin is
    /// named by tag).
    #[arg(long, env = "HYPERPLUG_PLUGIN_PINS_CONFIGMAP")]
    pub plugin_pins_configmap: Option<String>,
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
    /// Namespace of the leader-election Lease (default: $POD_NAMESPACE; one of them must
    /// be set).
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
    #[command(flatten)]
    pub blob_limits: BlobLimitArgs,
    #[command(flatten)]
    pub servers: ServerArgs,
    /// Address of the HTTPS webhook server: the CRD conversion webhook of kinds a plugin
    /// declares in several API versions, and the webhook that puts the finalizer on new
    /// InfraMachines (the release's Service `hyperplug-webhook-service` points at it).
    /// Not started when every kind has one version.
    #[arg(long, default_value = "0.0.0.0:9443", env = "HYPERPLUG_WEBHOOK_ADDR")]
    pub webhook_addr: SocketAddr,
    /// Directory of the webhook server's certificate (`tls.crt`, `tls.key`; the release
    /// mounts cert-manager's Secret there). Read again when the files change.
    #[arg(
        long,
        default_value = "/tmp/k8s-webhook-server/serving-certs",
        env = "HYPERPLUG_WEBHOOK_CERT_DIR"
    )]
    pub webhook_cert_dir: PathBuf,
    /// Namespace of the Leases that keep plugins' exclusive claims (e.g. which machine
    /// holds which bare-metal host). Default: $POD_NAMESPACE; one of them must be set.
    #[arg(long, env = "HYPERPLUG_CLAIMS_NAMESPACE")]
    pub claims_namespace: Option<String>,
    /// Reconciles in flight per kind. A reconcile mostly waits on the Kubernetes API and
    /// the plugin's endpoint, so this is set well above the cores: machines created in a
    /// burst then wait less for their first reconcile (at 1,000 machines, p99 23 s at 16
    /// and 1 s at 64). Plugin sandboxes alive at once are bounded by
    /// --plugin-concurrency, not by this.
    #[arg(
        long,
        default_value_t = DEFAULT_RECONCILE_CONCURRENCY,
        env = "HYPERPLUG_RECONCILE_CONCURRENCY"
    )]
    pub reconcile_concurrency: u16,
    /// Seconds between drift checks of provisioned objects their plugin does not watch (a
    /// watched one is checked when the plugin's observer reports a change, and hourly),
    /// and between checks of whether the credentials of a call that failed for good have
    /// changed since.
    #[arg(long, default_value_t = RESYNC.as_secs(), env = "HYPERPLUG_RESYNC_SECONDS")]
    pub resync_seconds: u64,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[command(flatten)]
    pub cache: CacheArgs,
}

impl RunArgs {
    /// What this instance watches: the namespace and the watch filter (an empty value,
    /// as a Deployment's env may give, means all).
    fn scope(&self) -> Scope {
        Scope {
            namespace: self.namespace.clone().filter(|n| !n.is_empty()),
            watch_filter: self.watch_filter.clone().filter(|v| !v.is_empty()),
        }
    }

    /// What the controllers read of these flags, with what is resolved only at start
    /// (the default credentials by plugin, the ownership key's Secret).
    fn manager_options(
        &self,
        default_credentials: BTreeMap<String, (String, String)>,
        ownership_key_secret: (String, String),
    ) -> ManagerOptions {
        ManagerOptions {
            default_credentials,
            credentials_grants: self.cross_namespace_credentials.clone(),
            adopt_namespaces: self.adopt_namespace.clone(),
            adoption_limits: AdoptionLimits {
                created_before: self.adopt_created_before.clone(),
                provider_ids: self.adopt_provider_id.clone(),
            },
            credentials_max_bytes: usize::try_from(self.credentials_max_kib << 10)
                .unwrap_or(usize::MAX),
            object_max_bytes: usize::try_from(self.object_max_kib << 10).unwrap_or(usize::MAX),
            ownership_key_secret,
            scope: self.scope(),
            concurrency: self.reconcile_concurrency,
            resync: Duration::from_secs(self.resync_seconds),
        }
    }
}

/// How long a leader's lease lasts without renewal.
const LEASE: Duration = Duration::from_secs(15);

pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    listen::raise_fd_limit();
    // Claims are Leases, so the runtime needs the API client; a bad plugin or flag is
    // still reported before an unreachable API (the runtime is then never used).
    let client = kube::Client::try_default().await;
    let pod_namespace = std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|n| !n.is_empty());
    // Where the manager keeps its own objects is never guessed (namespace `default` may
    // be a tenant's): told, or the error comes once the plugins are checked.
    let claims_namespace = own_namespace(
        args.claims_namespace.as_deref(),
        pod_namespace.as_deref(),
        "--claims-namespace NS",
    );
    let metrics = Arc::new(Metrics::default());
    let observed = metrics.clone();
    let mut runtime = Runtime::builder(Limits::from(args.limits.clone())).observe_http(Arc::new(
        move |p, method, path| observed.infrastructure_request(p, method, path),
    ));
    if let Ok(client) = &client {
        // Claims must hold across replicas and restarts: keep them in Kubernetes.
        // Unknown, no call is made: the manager stops once the plugins are checked.
        let namespace = claims_namespace.as_deref().unwrap_or_default();
        runtime = runtime.claims(Arc::new(LeaseClaims::new(client.clone(), namespace)));
    }
    let blobs = args.blob_advertise_url.as_ref().map(|advertise| {
        Arc::new(BlobStore::new(
            advertise.clone(),
            args.blob_limits.clone().into(),
        ))
    });
    if let Some(store) = &blobs {
        runtime = runtime.blobs(store.clone());
    }
    let pins = tag_pins(&args, &client, pod_namespace.as_deref())?;
    let plugins: Vec<_> = load_fetched(&args.plugins, runtime, &args.cache, &pins)
        .await?
        .into_iter()
        .map(|(plugin, _)| plugin)
        .collect();
    let names: Vec<&str> = plugins.iter().map(|p| p.name()).collect();
    let default_credentials = default_credentials(&args.default_credentials_secret, &names)?;
    claims_namespace?;
    let ownership_key_secret = own_object(
        args.ownership_key_secret.as_deref(),
        pod_namespace.as_deref(),
        "--ownership-key-secret",
        DEFAULT_OWNERSHIP_KEY_SECRET,
    )?;
    for plugin in &plugins {
        let kinds: Vec<_> = plugin
            .info()
            .kinds
            .iter()
            .map(|k| k.kind.as_str())
            .collect();
        tracing::info!(plugin = plugin.name(), version = %plugin.info().version, ?kinds, "plugin loaded");
    }
    let client =
        client.context("cannot reach the Kubernetes API (set KUBECONFIG or run in a cluster)")?;
    serve_blobs(&args, blobs).await?;
    serve_webhooks(&args, &client, &plugins, &ownership_key_secret, &metrics).await?;
    let ready = Arc::new(AtomicBool::new(false));
    serve_probes(&args, ready.clone(), metrics.clone());
    let options = args.manager_options(default_credentials, ownership_key_secret);
    ready.store(true, Ordering::Relaxed);
    let elector = leader_elector(&args, &client, pod_namespace.as_deref())?;
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
        stopped = controller::run(client, plugins, options, metrics) => stopped?,
        _ = lost => {
            // Another replica may be reconciling now: stop at once.
            return Ok(ExitCode::FAILURE);
        }
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted; stopping"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Where tag pins are kept. They outlive the pod (its cache is an emptyDir): kept beside
/// the ownership key. Only a plugin named by tag needs them, so a missing namespace or
/// API fails only that plugin, naming why.
fn tag_pins(
    args: &RunArgs,
    client: &Result<kube::Client, kube::Error>,
    pod_namespace: Option<&str>,
) -> anyhow::Result<Pins> {
    let pins_at = match own_object(
        args.plugin_pins_configmap.as_deref(),
        pod_namespace,
        "--plugin-pins-configmap",
        DEFAULT_PINS_CONFIGMAP,
    ) {
        // A flag given wrong is wrong whatever the plugins are.
        Err(e) if args.plugin_pins_configmap.is_some() => return Err(e),
        at => at,
    };
    Ok(match (client, pins_at) {
        (Ok(client), Ok((ns, name))) => {
            Pins::ConfigMap(Box::new(ConfigMapPins::new(client.clone(), &ns, &name)))
        }
        (Err(e), _) => Pins::Unavailable(format!(
            "`hyperplug run` keeps tag pins in the Kubernetes API, which it cannot reach: {e}"
        )),
        (_, Err(e)) => Pins::Unavailable(e.to_string()),
    })
}

/// The blob server, when plugins publish blobs (`--blob-advertise-url`).
async fn serve_blobs(args: &RunArgs, blobs: Option<Arc<BlobStore>>) -> anyhow::Result<()> {
    if let (Some(advertise), Some(store)) = (&args.blob_advertise_url, blobs) {
        let listener = tokio::net::TcpListener::bind(args.blob_listen_addr)
            .await
            .with_context(|| format!("--blob-listen-addr {}", args.blob_listen_addr))?;
        tracing::info!(addr = %args.blob_listen_addr, advertised = %advertise, "serving blobs");
        let (app, bounds) = (blob_server::router(store), Bounds::blobs(&args.servers));
        let server = listen::serve(listener, Transport::Plain, app, bounds);
        tokio::spawn(log_exit("blobs", server));
    }
    Ok(())
}

/// The webhook server (conversion, and the finalizer of new InfraMachines), when a kind
/// has several versions. It serves on every replica, leader or standby: the API server
/// calls whichever the Service picks. The conversion data it keeps on objects is signed
/// with the ownership key, so what one replica wrote verifies on the others and in the
/// controllers.
async fn serve_webhooks(
    args: &RunArgs,
    client: &kube::Client,
    plugins: &[Plugin],
    ownership_key_secret: &(String, String),
    metrics: &Arc<Metrics>,
) -> anyhow::Result<()> {
    let (key_ns, key_name) = ownership_key_secret;
    let keys = OwnershipKeys::load_or_create(client.clone(), key_ns, key_name).await?;
    let conversions = Conversions::new(plugins, Arc::new(keys)).metered(metrics.clone());
    if !conversions.is_empty() {
        let certs = CertDir {
            dir: args.webhook_cert_dir.clone(),
        };
        let finalizers = Finalizers::new(plugins, args.scope());
        let server = webhook::Server::bind(args.webhook_addr, certs, conversions, finalizers)
            .await
            .context("the webhook server (--webhook-addr, --webhook-cert-dir)")?
            .bounded(Bounds::webhook(&args.servers));
        tokio::spawn(log_exit("webhook", server.serve()));
    }
    Ok(())
}

/// `/healthz` and `/readyz`, and `/metrics` (on the same address unless told otherwise).
fn serve_probes(args: &RunArgs, ready: Arc<AtomicBool>, metrics: Arc<Metrics>) {
    let health = Health { ready, metrics };
    let (health_addr, metrics_addr) = (args.health_addr, args.metrics_addr);
    let probes = health::serve(health_addr, health.clone(), Bounds::probes("health"));
    tokio::spawn(log_exit("health", probes));
    if metrics_addr != health_addr {
        let scrapes = health::serve(metrics_addr, health, Bounds::probes("metrics"));
        tokio::spawn(log_exit("metrics", scrapes));
    }
}

/// The leader elector, with `--leader-elect`.
fn leader_elector(
    args: &RunArgs,
    client: &kube::Client,
    pod_namespace: Option<&str>,
) -> anyhow::Result<Option<crate::leader::Elector>> {
    let elector_namespace = match args.leader_elect {
        true => Some(own_namespace(
            args.leader_election_namespace.as_deref(),
            pod_namespace,
            "--leader-election-namespace NS",
        )?),
        false => None,
    };
    Ok(elector_namespace.map(|namespace| {
        let identity = std::env::var("HOSTNAME")
            .unwrap_or_else(|_| format!("hyperplug-{}", std::process::id()));
        crate::leader::Elector::new(
            client.clone(),
            &namespace,
            &args.leader_election_id,
            &identity,
            LEASE,
        )
    }))
}

/// `NAMESPACE/NAME`.
fn namespaced(value: &str, flag: &str) -> anyhow::Result<(String, String)> {
    match value.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_string(), name.to_string()))
        }
        _ => anyhow::bail!("{flag} `{value}` must be NAMESPACE/NAME"),
    }
}

/// `--default-credentials-secret` values by plugin name: each names its plugin
/// (`PLUGIN=NAMESPACE/NAME`), or, with one plugin loaded, may leave it out.
fn default_credentials(
    values: &[String],
    plugins: &[&str],
) -> anyhow::Result<BTreeMap<String, (String, String)>> {
    const FLAG: &str = "--default-credentials-secret";
    let mut by_plugin = BTreeMap::new();
    for value in values.iter().filter(|v| !v.is_empty()) {
        let (plugin, secret) = match value.split_once('=') {
            Some((plugin, secret)) => (plugin, secret),
            None => match plugins {
                [only] => (*only, value.as_str()),
                _ => anyhow::bail!(
                    "{FLAG} `{value}` does not say which plugin's InfraClusters may use it, and {} plugins are loaded ({}); write PLUGIN=NAMESPACE/NAME",
                    plugins.len(),
                    plugins.join(", ")
                ),
            },
        };
        anyhow::ensure!(
            plugins.contains(&plugin),
            "{FLAG} `{value}` names plugin `{plugin}`, which is not loaded (loaded: {})",
            plugins.join(", ")
        );
        let secret = namespaced(secret, FLAG)?;
        anyhow::ensure!(
            by_plugin.insert(plugin.to_string(), secret).is_none(),
            "{FLAG} names plugin `{plugin}` twice"
        );
    }
    Ok(by_plugin)
}

async fn log_exit(what: &str, fut: impl Future<Output = anyhow::Result<()>>) {
    if let Err(e) = fut.await {
        tracing::error!(server = what, error = %e, "server stopped");
    }
}

/// An RFC 3339 time, as Kubernetes writes `creationTimestamp`.
fn parse_time(s: &str) -> Result<Time, String> {
    serde_json::from_value(serde_json::Value::String(s.into()))
        .map_err(|e| format!("`{s}` is not an RFC 3339 time like 2026-12-01T00:00:00Z: {e}"))
}

/// The namespace the manager keeps one of its own objects in: the flag's, else the
/// pod's (`POD_NAMESPACE`, which the release sets), else an error naming both.
fn own_namespace(flag: Option<&str>, pod: Option<&str>, name: &str) -> anyhow::Result<String> {
    match flag.or(pod).filter(|n| !n.is_empty()) {
        Some(ns) => Ok(ns.to_string()),
        None => anyhow::bail!(
            "the manager's own namespace is unknown: set POD_NAMESPACE (the release sets it to the pod's namespace) or {name}; it is never guessed, as namespace `default` may be a tenant's"
        ),
    }
}

/// `NAMESPACE/NAME` of one of the manager's own objects: the flag's value, else
/// `default` in the pod's namespace, else an error naming the flag.
fn own_object(
    value: Option<&str>,
    pod: Option<&str>,
    flag: &str,
    default: &str,
) -> anyhow::Result<(String, String)> {
    match value {
        Some(value) => namespaced(value, flag),
        None => Ok((
            own_namespace(None, pod, &format!("{flag} NS/NAME"))?,
            default.into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{default_credentials, own_namespace, own_object};

    /// Every command run with no optional flag gets exactly what tests and embedders get
    /// from `Default`: each default is one constant, and this keeps the clap attributes
    /// reading it.
    #[test]
    fn no_flags_run_with_the_defaults() {
        use crate::cli::{Cli, Command};
        use clap::Parser as _;
        use hyperplug_runtime::{BlobLimits, Limits};

        let cli = Cli::parse_from(["hyperplug", "run", "--plugin", "p.wasm"]);
        let Command::Run(args) = cli.command else {
            panic!("not `run`")
        };
        assert_eq!(Limits::from(args.limits.clone()), Limits::default());
        assert_eq!(
            BlobLimits::from(args.blob_limits.clone()),
            BlobLimits::default()
        );
        assert_eq!(args.servers, crate::listen::ServerArgs::default());
        let fetch = crate::oci::FetchArgs::default();
        assert_eq!(format!("{:?}", args.cache.fetch), format!("{fetch:?}"));
        let default = super::ManagerOptions::default();
        let options = args.manager_options(
            default.default_credentials.clone(),
            default.ownership_key_secret.clone(),
        );
        assert_eq!(format!("{options:?}"), format!("{default:?}"));

        let cli = Cli::parse_from(["hyperplug", "conformance", "--list"]);
        let Command::Conformance(args) = cli.command else {
            panic!("not `conformance`")
        };
        assert_eq!(Limits::from(args.limits), Limits::default());
    }

    #[test]
    fn the_managers_namespace_is_told_never_guessed() {
        assert_eq!(own_namespace(Some("a"), Some("b"), "--x").unwrap(), "a");
        assert_eq!(own_namespace(None, Some("b"), "--x").unwrap(), "b");
        let err = own_namespace(None, None, "--claims-namespace NS").unwrap_err();
        assert!(err.to_string().contains("POD_NAMESPACE"), "{err}");
        assert!(err.to_string().contains("--claims-namespace NS"), "{err}");
        assert!(own_namespace(Some(""), None, "--x").is_err());
        let (ns, name) = own_object(None, Some("sys"), "--pins", "pins").unwrap();
        assert_eq!((ns.as_str(), name.as_str()), ("sys", "pins"));
        let err = own_object(None, None, "--pins", "pins").unwrap_err();
        assert!(err.to_string().contains("--pins NS/NAME"), "{err}");
        assert!(own_object(Some("no-slash"), Some("sys"), "--pins", "p").is_err());
    }

    #[test]
    fn default_credentials_belong_to_one_plugin() {
        let one = default_credentials(&["ns/creds".into()], &["proxmox"]).unwrap();
        assert_eq!(one["proxmox"], ("ns".into(), "creds".into()));
        let two = default_credentials(
            &["proxmox=ns/p".into(), "redfish=ns/r".into()],
            &["proxmox", "redfish"],
        )
        .unwrap();
        assert_eq!(two.len(), 2);
        let err = default_credentials(&["ns/creds".into()], &["proxmox", "redfish"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("PLUGIN=NAMESPACE/NAME"), "{err}");
        let err = default_credentials(&["other=ns/c".into()], &["proxmox"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("not loaded"), "{err}");
        assert!(default_credentials(&["proxmox=nope".into()], &["proxmox"]).is_err());
    }
}
