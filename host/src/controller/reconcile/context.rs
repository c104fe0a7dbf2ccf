//! What every reconcile needs: the client, the plugin, the kind it serves, events,
//! metrics, backoff, and the manager's options.
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hyperplug_runtime::Plugin;
use hyperplug_runtime::bindings::identity::KindInfo;
use kube::Client;
use kube::api::ApiResource;
use kube::runtime::events::Recorder;

use crate::controller::cache::watch::Caches;
use crate::controller::call::credentials::Recent;
use crate::controller::call::grants::CredentialsGrant;
use crate::controller::ipam::asked::AskedAddresses;
use crate::controller::schedule::backoff::Backoff;
use crate::controller::schedule::waits::Waits;
use crate::controller::trust::ownership::OwnershipKeys;
use crate::controller::write::coalesce::Coalescer;
use crate::metrics::Metrics;

/// Options of the manager that controllers read.
#[derive(Debug, Clone)]
pub struct ManagerOptions {
    /// Per plugin name: `namespace/name` of the Secret used when one of its
    /// InfraClusters names none.
    pub default_credentials: BTreeMap<String, (String, String)>,
    /// Secrets in other namespaces InfraClusters may name (by default only their own
    /// namespace's).
    pub credentials_grants: Vec<CredentialsGrant>,
    /// Namespaces (`*`: all) where machines another provider made may be adopted
    /// (`adoption`).
    pub adopt_namespaces: Vec<String>,
    /// What narrows those grants (`--adopt-created-before`, `--adopt-provider-id`).
    pub adoption_limits: crate::controller::trust::adoption::AdoptionLimits,
    /// Bytes of credentials one InfraCluster may hand a call (`--credentials-max-kib`).
    pub credentials_max_bytes: usize,
    /// Bytes of what a tenant wrote that the caches keep per object; an object of ours
    /// over it is refused (`--object-max-kib`, see `oversized`).
    pub object_max_bytes: usize,
    /// `namespace/name` of the Secret with the ownership key (created if absent).
    pub ownership_key_secret: (String, String),
    /// Watch only this namespace.
    pub namespace: Option<String>,
    /// Reconciles in flight per controller.
    pub concurrency: u16,
    /// How often a provisioned object is re-checked for drift.
    pub resync: Duration,
}

impl Default for ManagerOptions {
    fn default() -> Self {
        ManagerOptions {
            default_credentials: BTreeMap::new(),
            credentials_grants: Vec::new(),
            adopt_namespaces: Vec::new(),
            adoption_limits: Default::default(),
            credentials_max_bytes:
                (crate::controller::call::credentials::DEFAULT_CREDENTIALS_MAX_KIB as usize) << 10,
            object_max_bytes: (crate::controller::cache::oversized::DEFAULT_OBJECT_MAX_KIB
                as usize)
                << 10,
            ownership_key_secret: ("default".into(), DEFAULT_OWNERSHIP_KEY_SECRET.into()),
            namespace: None,
            concurrency: DEFAULT_RECONCILE_CONCURRENCY,
            resync: crate::controller::schedule::requeue::RESYNC,
        }
    }
}

/// Reconciles in flight per kind unless `--reconcile-concurrency` says otherwise.
pub const DEFAULT_RECONCILE_CONCURRENCY: u16 = 64;

/// Name of the ownership key Secret unless `--ownership-key-secret` says otherwise.
pub const DEFAULT_OWNERSHIP_KEY_SECRET: &str = "hyperplug-ownership-key";

pub struct Context {
    pub client: Client,
    pub plugin: Plugin,
    pub kind: KindInfo,
    pub resource: ApiResource,
    /// The plugin's InfraCluster kind, which machines read their cluster spec from.
    pub cluster_kind: Option<ApiResource>,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub backoff: Backoff,
    pub options: ManagerOptions,
    /// Makes ownership ids unforgeable (see `ownership`).
    pub ownership: Arc<OwnershipKeys>,
    /// What this kind's objects wait for (machines: see `waits`).
    pub waits: Arc<Waits>,
    /// Machine statuses not written yet (see `coalesce`).
    pub coalescer: Coalescer,
    /// What machine reconciles read of other kinds (the InfraMachine controller only).
    pub caches: Option<Caches>,
    /// Credentials Secrets read a moment ago (see `credentials::Recent`).
    pub secrets: Recent,
    /// Which machines asked for addresses at their last step (see `asked`).
    pub asked: AskedAddresses,
    /// What the own kind's watch and the reconciler's own writes last showed of each
    /// object (see `watch::Seen`).
    pub seen: crate::controller::cache::watch::Seen,
    /// Specs the plugin converted for this kind's calls (see `versions`).
    pub specs: crate::controller::call::versions::SpecConversions,
    /// This kind's reconciles of provisioned objects in flight (see `priority`).
    pub housekeeping: crate::controller::schedule::priority::InFlight,
}

/// The finalizer on every object whose infrastructure we may create.
pub fn finalizer(plugin: &Plugin) -> String {
    hyperplug_kinds::crds::finalizer(plugin.info())
}
