//! What a reconcile is handed: the manager's options, what every controller shares
//! ([`Context`]: the client, the plugin, the kind it serves, its writes, metrics,
//! backoff), and what only the InfraMachine controller keeps besides ([`MachineContext`]:
//! waits, held statuses, caches of other kinds).
use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use hyperplug_runtime::bindings::identity::KindInfo;
use hyperplug_runtime::{Grants, Plugin};
use kube::Client;
use kube::api::{ApiResource, DynamicObject};

use crate::controller::cache::oversized::DEFAULT_OBJECT_MAX_KIB;
use crate::controller::cache::scope::Scope;
use crate::controller::cache::watch::{Caches, Seen};
use crate::controller::call::credentials::{self, DEFAULT_CREDENTIALS_MAX_KIB, Recent};
use crate::controller::call::grants::CredentialsGrant;
use crate::controller::call::versions::{self, SpecConversions};
use crate::controller::ipam::asked::AskedAddresses;
use crate::controller::objects;
use crate::controller::schedule::backoff::Backoff;
use crate::controller::schedule::priority::InFlight;
use crate::controller::schedule::requeue::RESYNC;
use crate::controller::schedule::waits::Waits;
use crate::controller::trust::adoption::{self, AdoptionLimits};
use crate::controller::trust::ownership::OwnershipKeys;
use crate::controller::write::Writes;
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
    pub adoption_limits: AdoptionLimits,
    /// Bytes of credentials one InfraCluster may hand a call (`--credentials-max-kib`).
    pub credentials_max_bytes: usize,
    /// Bytes of what a tenant wrote that the caches keep per object; an object of ours
    /// over it is refused (`--object-max-kib`, see `oversized`).
    pub object_max_bytes: usize,
    /// `namespace/name` of the Secret with the ownership key (created if absent).
    pub ownership_key_secret: (String, String),
    /// What this instance watches: a namespace, a `--watch-filter` value (or all).
    pub scope: Scope,
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
            credentials_max_bytes: (DEFAULT_CREDENTIALS_MAX_KIB as usize) << 10,
            object_max_bytes: (DEFAULT_OBJECT_MAX_KIB as usize) << 10,
            ownership_key_secret: ("default".into(), DEFAULT_OWNERSHIP_KEY_SECRET.into()),
            scope: Scope::default(),
            concurrency: DEFAULT_RECONCILE_CONCURRENCY,
            resync: RESYNC,
        }
    }
}

impl ManagerOptions {
    /// What an administrator granted `obj` (see `adoption`).
    pub fn grants_for(&self, obj: &DynamicObject) -> Grants {
        adoption::grants_for(&self.adopt_namespaces, &self.adoption_limits, obj)
    }
}

/// Reconciles in flight per kind unless `--reconcile-concurrency` says otherwise.
pub const DEFAULT_RECONCILE_CONCURRENCY: u16 = 64;

/// Name of the ownership key Secret unless `--ownership-key-secret` says otherwise.
pub const DEFAULT_OWNERSHIP_KEY_SECRET: &str = "hyperplug-ownership-key";

/// What every controller shares, whatever its kind's role: the API, the plugin, the
/// kind, its writes, and the manager's options and keys. A cluster's or a template's
/// reconcile is handed this alone; a machine's gets it inside [`MachineContext`].
pub struct Context {
    pub client: Client,
    pub plugin: Plugin,
    pub kind: KindInfo,
    pub resource: ApiResource,
    /// Its events, and the marks of its writes the cache reads (see `write`).
    pub writes: Writes,
    pub metrics: Arc<Metrics>,
    pub backoff: Backoff,
    pub options: ManagerOptions,
    /// Makes ownership ids unforgeable (see `ownership`).
    pub ownership: Arc<OwnershipKeys>,
    /// Credentials Secrets read a moment ago (see `credentials::Recent`).
    pub secrets: Recent,
    /// What the own kind's watch and the reconciler's own writes last showed of each
    /// object (see `watch::Seen`).
    pub seen: Seen,
    /// Specs the plugin converted for this kind's calls (see `versions`).
    pub specs: SpecConversions,
    /// This kind's reconciles of provisioned objects in flight (see `priority`).
    pub housekeeping: InFlight,
}

/// The InfraMachine controller's context: the shared one ([`Context`], which it
/// dereferences to, so a machine's reconcile reads `ctx.client` as any other) and what
/// only machines keep.
pub struct MachineContext {
    pub shared: Context,
    /// The plugin's InfraCluster kind, which machines read their cluster spec from
    /// (none when the plugin declares none).
    pub cluster_kind: Option<ApiResource>,
    /// What each machine's last step waits for (see `waits`).
    pub waits: Arc<Waits>,
    /// Machine statuses not written yet (see `coalesce`).
    pub coalescer: Coalescer,
    /// What machine reconciles read of other kinds (see `watch::Caches`).
    pub caches: Caches,
    /// Which machines asked for addresses at their last step (see `asked`).
    pub asked: AskedAddresses,
}

impl Deref for MachineContext {
    type Target = Context;

    fn deref(&self) -> &Context {
        &self.shared
    }
}

/// A controller's context as the controller wiring sees it (its entry to every
/// reconcile, its error policy): the part every role shares, and what a role forgets of
/// an object refused before its reconcile.
pub trait RoleContext: Send + Sync + 'static {
    fn shared(&self) -> &Context;

    /// `obj` is refused before its reconcile (over the bound, see `oversized`): nothing
    /// kept for it may wake it meanwhile.
    fn refused(&self, _obj: &DynamicObject) {}
}

impl RoleContext for Context {
    fn shared(&self) -> &Context {
        self
    }
}

impl RoleContext for MachineContext {
    fn shared(&self) -> &Context {
        &self.shared
    }

    /// What it waited for is not watched any more.
    fn refused(&self, obj: &DynamicObject) {
        self.waits.clear(&objects::obj_ref(obj, &self.resource));
    }
}

impl Context {
    /// Where this kind's calls read their credentials, under the manager's rules.
    pub fn credentials(&self) -> credentials::Sources<'_> {
        credentials::Sources {
            client: &self.client,
            recent: &self.secrets,
            grants: &self.options.credentials_grants,
            default: self.options.default_credentials.get(self.plugin.name()),
            max_bytes: self.options.credentials_max_bytes,
            plugin: self.plugin.name(),
        }
    }

    /// How this kind's calls convert a spec to the plugin's version.
    pub fn converter(&self) -> versions::Converter<'_> {
        versions::Converter {
            plugin: &self.plugin,
            keys: &self.ownership,
            specs: &self.specs,
            metrics: &self.metrics,
        }
    }
}
