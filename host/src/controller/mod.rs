//! The controllers: for every kind a loaded plugin declares, a kube-rs controller of the
//! role that kind plays in the Cluster API contract. Discovered at start, so a new
//! plugin adds kinds without a rebuild.
//!
//! Laid out by concern, a folder per job, each importing only the rooms under it:
//! - `reconcile`: the reconcilers per role, and what they are handed (`context`);
//! - `call`: the plugin call (credentials, spec versions, result checks, outcome);
//! - `trust`: ownership ids, adoption, objects whose ownership does not verify;
//! - `cache`: the watches, what they keep of each object and what wakes a reconcile;
//! - `write`: the write path (patches, conditions, events, marks of our writes, held
//!   statuses);
//! - `schedule`: every requeue and delay, waits and their observers, priority, tasks;
//! - `ipam`: the InfraCluster's pools and the machines' address claims;
//! - `objects` and `error`: what every room speaks.
//!
//! This file wires them: one controller per kind, its watches and its entry to every
//! reconcile.
pub mod cache;
pub mod call;
mod error;
mod ipam;
pub mod objects;
mod reconcile;
mod schedule;
pub mod trust;
pub mod write;

use cache::scope::Scope;
use cache::{oversized, packed, triggers, watch};
use call::{grants, versions};
use reconcile::{cluster, context, machine, template};
use schedule::{backoff, priority, requeue, supervise, waits};
use trust::ownership;
use write::Writes;
use write::events::Events;

use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Config as ControllerConfig};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::Value;

pub use context::{DEFAULT_OWNERSHIP_KEY_SECRET, DEFAULT_RECONCILE_CONCURRENCY, ManagerOptions};
pub use error::Error;
pub use grants::CredentialsGrant;
pub use objects::finalizer;
pub use requeue::RESYNC;

use crate::metrics::Metrics;
use context::{Context, MachineContext, RoleContext};
use hyperplug_runtime::Plugin;
use hyperplug_runtime::bindings::identity::{KindInfo, KindRole};
use packed::{Packed, SpecOnly};

/// Run every controller until one stops (none does, unless a task panics). Fails
/// at start if the ownership key can be neither read nor created. The plugins' runtime
/// keeps their claims where every replica sees them ([`crate::lease_claims::LeaseClaims`]).
pub async fn run(
    client: Client,
    plugins: Vec<Plugin>,
    options: ManagerOptions,
    metrics: Arc<Metrics>,
) -> anyhow::Result<()> {
    // Before any watch packs an object.
    oversized::set_bound(options.object_max_bytes);
    let (key_ns, key_name) = &options.ownership_key_secret;
    let ownership =
        Arc::new(ownership::OwnershipKeys::load_or_create(client.clone(), key_ns, key_name).await?);
    let mut running: Vec<(String, BoxFuture<'static, ()>)> = Vec::new();
    let reporter = Reporter {
        controller: "hyperplug".into(),
        instance: std::env::var("HOSTNAME").ok(),
    };
    for plugin in plugins {
        let info = plugin.info().clone();
        let resource = |k: &KindInfo| {
            // The stored version: the API server converts nothing for the manager.
            let gvk = GroupVersionKind::gvk(&info.group, versions::stored(&info, k), &k.kind);
            ApiResource::from_gvk_with_plural(&gvk, &hyperplug_kinds::crds::plural(&k.kind))
        };
        let cluster_kind = info
            .kinds
            .iter()
            .find(|k| k.role == KindRole::InfraCluster)
            .map(resource);
        for kind in &info.kinds {
            let ctx = Context {
                client: client.clone(),
                plugin: plugin.clone(),
                kind: kind.clone(),
                resource: resource(kind),
                writes: Writes {
                    events: Events::new(
                        Recorder::new(client.clone(), reporter.clone()),
                        resource(kind),
                    ),
                    written: Default::default(),
                },
                metrics: metrics.clone(),
                backoff: backoff::Backoff::new(requeue::BACKOFF_BASE, requeue::BACKOFF_MAX),
                options: options.clone(),
                ownership: ownership.clone(),
                secrets: Default::default(),
                seen: Default::default(),
                specs: Default::default(),
                housekeeping: Default::default(),
            };
            tracing::info!(plugin = plugin.name(), kind = %kind.kind, "starting controller");
            let name = format!("{} (plugin {})", kind.kind, plugin.name());
            match kind.role {
                KindRole::InfraMachine => {
                    let (waits, woken) = waits::Waits::new(plugin.clone(), metrics.clone());
                    let others = Others::watch(&client, &options.scope, cluster_kind.clone());
                    let ctx = Arc::new(MachineContext {
                        shared: ctx,
                        cluster_kind: cluster_kind.clone(),
                        waits,
                        coalescer: Default::default(),
                        caches: others.caches(),
                        asked: Default::default(),
                    });
                    running.push((name, Box::pin(machines(ctx, woken, others))))
                }
                KindRole::InfraCluster => running.push((name, Box::pin(clusters(Arc::new(ctx))))),
                KindRole::InfraMachineTemplate => {
                    running.push((name, Box::pin(templates(Arc::new(ctx)))))
                }
                // Nothing to reconcile: ClusterClass copies it into InfraClusters.
                KindRole::InfraClusterTemplate => {}
            }
        }
    }
    supervise::until_one_ends(running).await
}

/// The InfraMachines in the cache that belong to `cluster` in `namespace`.
fn machines_of(
    store: &Store<Packed>,
    ar: &ApiResource,
    namespace: Option<String>,
    cluster: Option<String>,
) -> Vec<ObjectRef<Packed>> {
    let Some(cluster) = cluster else {
        return Vec::new();
    };
    store
        .state()
        .into_iter()
        .filter(|m| {
            m.namespace() == namespace
                && objects::cluster_name_of(&m.metadata).as_deref() == Some(cluster.as_str())
        })
        .map(|m| ObjectRef::from_obj_with(m.as_ref(), ar.clone()))
        .collect()
}

/// Whether the cached machine `m` is not provisioned yet (or not cached: then a
/// reconcile finds out).
fn provisioning(store: &Store<Packed>, m: &ObjectRef<Packed>) -> bool {
    store
        .get(m)
        .is_none_or(|o| !objects::provisioned(&o.unpack()))
}

/// Whether waking the cached machine `m` is urgent (see `priority`): it is being
/// provisioned or deleted (or not cached: then a reconcile finds out).
fn urgent(store: &Store<Packed>, m: &ObjectRef<Packed>) -> bool {
    store
        .get(m)
        .is_none_or(|o| o.metadata.deletion_timestamp.is_some() || priority::is_urgent(&o.unpack()))
}

/// Every object of kind `ar` in `scope`, cached (see `watch::cached`).
fn cached_in<const STATUS: bool>(
    client: &Client,
    scope: &Scope,
    ar: &ApiResource,
) -> watch::Watched<STATUS> {
    watch::cached(scope.api(client, ar), ar, scope.watch_config())
}

/// The watch of a controller's own kind, in the instance's scope.
fn own_kind(ctx: &Context) -> watch::Watched {
    let scope = &ctx.options.scope;
    watch::own_kind(
        scope.api(&ctx.client, &ctx.resource),
        &ctx.resource,
        scope.watch_config(),
        ctx.seen.clone(),
        ctx.writes.written.clone(),
    )
}

fn config(ctx: &Context) -> ControllerConfig {
    ControllerConfig::default().concurrency(ctx.options.concurrency)
}

/// The watches of other kinds a machine controller reads (see `watch::Caches`).
struct Others {
    machines: watch::Watched<false>,
    clusters: watch::Watched<false>,
    infra_clusters: watch::Watched,
    /// The plugin's InfraCluster kind (a plugin without one gets Clusters twice).
    infra_cluster_ar: ApiResource,
}

impl Others {
    /// What machine reconciles read of other kinds (in `scope`), watched once and
    /// cached; `cluster_kind` is the plugin's InfraCluster kind.
    fn watch(client: &Client, scope: &Scope, cluster_kind: Option<ApiResource>) -> Others {
        let infra_cluster_ar = cluster_kind.unwrap_or_else(objects::capi_cluster);
        let (machine_ar, cluster_ar) = (objects::capi_machine(), objects::capi_cluster());
        Others {
            machines: cached_in(client, scope, &machine_ar),
            clusters: cached_in(client, scope, &cluster_ar),
            // Its readiness wakes its machines.
            infra_clusters: cached_in(client, scope, &infra_cluster_ar),
            infra_cluster_ar,
        }
    }

    /// The watches' caches, as machine reconciles read them.
    fn caches(&self) -> watch::Caches {
        watch::Caches {
            clusters: self.clusters.1.clone(),
            infra_clusters: self.infra_clusters.1.clone(),
            machines: self.machines.1.clone(),
        }
    }
}

/// The InfraMachine controller: its own objects, the Cluster API objects and Secrets
/// they depend on, and the machines whose waits the observer reports over (`woken`).
async fn machines(
    ctx: Arc<MachineContext>,
    woken: futures::channel::mpsc::UnboundedReceiver<ObjectRef<DynamicObject>>,
    others: Others,
) {
    let scope = &ctx.options.scope;
    let ar = ctx.resource.clone();
    let (own, store) = own_kind(&ctx);
    let controller = Controller::for_stream_with(own, store, ar.clone());
    let map = Arc::new(MachineTriggers::new(ar, controller.store()));
    let urgent = {
        let map = map.clone();
        move |r: &ObjectRef<DynamicObject>| map.urgent(r)
    };
    let woken = priority::prioritised(woken, urgent, ctx.housekeeping.clone())
        .map(mapper(&map, MachineTriggers::woken));
    // Labelled Secrets only, so the manager never watches every Secret; and only their
    // metadata: a tenant's labelled Secrets of any size cost the manager their names,
    // not their bytes.
    // Not narrowed by `--watch-filter`: a bootstrap Secret need not carry the label, and
    // it wakes only machines in this instance's cache.
    let secrets = watcher(
        scope.typed_api::<PartialObjectMeta<Secret>>(&ctx.client),
        watcher::Config::default()
            .labels(objects::CLUSTER_NAME_LABEL)
            .page_size(watch::LIST_PAGE),
    )
    .touched_objects();
    controller
        .with_config(config(&ctx))
        .reconcile_on(woken)
        .watches_stream_with(
            others.machines.0,
            mapper(&map, MachineTriggers::machine),
            objects::capi_machine(),
        )
        .watches_stream_with(
            others.clusters.0,
            mapper(&map, MachineTriggers::cluster),
            objects::capi_cluster(),
        )
        .watches_stream_with(secrets, mapper(&map, MachineTriggers::secret), ())
        .watches_stream_with(
            others.infra_clusters.0,
            mapper(&map, MachineTriggers::infra_cluster),
            others.infra_cluster_ar,
        )
        .run(
            |o, c| timed(o, c, |o, c| Box::pin(machine::reconcile(o, c))),
            error_policy,
            ctx.clone(),
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}

/// `f` applied with `map`, as a watch's mapper holds it.
fn mapper<T, R>(
    map: &Arc<MachineTriggers>,
    f: fn(&MachineTriggers, T) -> R,
) -> impl Fn(T) -> R + Send + Sync + 'static
where
    T: 'static,
    R: 'static,
{
    let map = map.clone();
    move |event| f(&map, event)
}

/// Which InfraMachines a change of what they depend on wakes. Built once for the
/// machine controller; its watches share it (their mappers hold it, see [`mapper`]),
/// and with it what each watch last found relevant.
struct MachineTriggers {
    /// The InfraMachine kind, and the controller's cache of its objects.
    ar: ApiResource,
    store: Store<Packed>,
    /// The machines waiting for a bootstrap Secret, learnt from their Machines.
    waiters: triggers::BootstrapWaiters,
    machine_changes: triggers::Relevant,
    cluster_changes: triggers::Relevant,
    infra_changes: triggers::Relevant,
}

impl MachineTriggers {
    fn new(ar: ApiResource, store: Store<Packed>) -> MachineTriggers {
        MachineTriggers {
            ar,
            store,
            waiters: Default::default(),
            machine_changes: Default::default(),
            cluster_changes: Default::default(),
            infra_changes: Default::default(),
        }
    }

    /// A machine the observer woke, as the controller's queue names it.
    fn woken(&self, r: ObjectRef<DynamicObject>) -> ObjectRef<Packed> {
        r.into_kind_unchecked(self.ar.clone())
    }

    /// Whether waking `r` is urgent (see `priority`).
    fn urgent(&self, r: &ObjectRef<DynamicObject>) -> bool {
        urgent(&self.store, &self.woken(r.clone()))
    }

    /// A Machine's spec changing (bootstrap data named, failure domain) maps to the
    /// InfraMachine it references; its status churn does not. The Secret it names is
    /// remembered for the Secret watch. A provisioned machine reads neither its
    /// Machine's spec nor its bootstrap data again: their changes wake only machines
    /// still being provisioned.
    fn machine(&self, m: SpecOnly) -> Option<ObjectRef<Packed>> {
        let m = m.unpack();
        let ns = m.namespace().unwrap_or_default();
        let (group, kind) = (&self.ar.group, &self.ar.kind);
        let infra = objects::reference_to(&m, "spec.infrastructureRef", group, kind)
            .map(|name| ObjectRef::new_with(&name, self.ar.clone()).within(&ns))?;
        let secret = objects::str_field(&m, "spec.bootstrap.dataSecretName");
        self.waiters.record(&m, secret, &infra.clone().erase());
        (self.machine_changes.changed(&m, ()) && provisioning(&self.store, &infra)).then_some(infra)
    }

    /// A Cluster's spec changing (paused) or its deletion maps to all its machines.
    fn cluster(&self, c: SpecOnly) -> Vec<ObjectRef<Packed>> {
        let c = c.unpack();
        if !self.cluster_changes.changed(&c, ()) {
            return Vec::new();
        }
        machines_of(&self.store, &self.ar, c.namespace(), Some(c.name_any()))
    }

    /// A bootstrap Secret appearing maps to the machine whose Machine names it, while
    /// that machine is being provisioned.
    fn secret(&self, s: PartialObjectMeta<Secret>) -> Option<ObjectRef<Packed>> {
        self.waiters
            .waiting_for(&s.namespace().unwrap_or_default(), &s.name_any())
            .map(|m| m.into_kind_unchecked::<Packed>(self.ar.clone()))
            .filter(|m| provisioning(&self.store, m))
    }

    /// The InfraCluster's spec or readiness changing maps to all machines of its cluster.
    fn infra_cluster(&self, c: Packed) -> Vec<ObjectRef<Packed>> {
        let c = c.unpack();
        let ready = objects::field(&c, "status.ready").and_then(Value::as_bool);
        if !self.infra_changes.changed(&c, ready) {
            return Vec::new();
        }
        machines_of(
            &self.store,
            &self.ar,
            c.namespace(),
            objects::cluster_name(&c),
        )
    }
}

async fn clusters(ctx: Arc<Context>) {
    let scope = &ctx.options.scope;
    let ar = ctx.resource.clone();
    let (group, kind) = (ar.group.clone(), ar.kind.clone());
    let mapped = ar.clone();
    let cluster_changes = triggers::Relevant::default();
    let (own, store) = own_kind(&ctx);
    Controller::for_stream_with(own, store, ar.clone())
        .with_config(config(&ctx))
        .watches_with(
            scope.api(&ctx.client, &objects::capi_cluster()),
            objects::capi_cluster(),
            scope.watch_config(),
            // Only its spec (paused, the reference) or its deletion: CAPI rewrites its status
            // on every machine change, and none of that is ours to act on.
            move |c: DynamicObject| {
                if !cluster_changes.changed(&c, ()) {
                    return None;
                }
                let ns = c.namespace().unwrap_or_default();
                objects::reference_to(&c, "spec.infrastructureRef", &group, &kind)
                    .map(|name| ObjectRef::new_with(&name, mapped.clone()).within(&ns))
            },
        )
        .run(
            |o, c| timed(o, c, |o, c| Box::pin(cluster::reconcile(o, c))),
            error_policy,
            ctx.clone(),
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}

async fn templates(ctx: Arc<Context>) {
    let ar = ctx.resource.clone();
    let (own, store) = own_kind(&ctx);
    Controller::for_stream_with(own, store, ar)
        .with_config(config(&ctx))
        .run(
            |o, c| timed(o, c, |o, c| Box::pin(template::reconcile(o, c))),
            error_policy,
            ctx.clone(),
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}

type Reconcile<C> = fn(Arc<DynamicObject>, Arc<C>) -> BoxFuture<'static, Result<Action, Error>>;

/// Count and time every reconcile by kind and result (of the object unpacked).
/// An object over `--object-max-kib` is not reconciled: it is refused (`oversized`).
async fn timed<C: RoleContext>(
    packed: Arc<Packed>,
    ctx: Arc<C>,
    f: Reconcile<C>,
) -> Result<Action, Error> {
    let started = Instant::now();
    let obj = packed.unpack();
    let shared = ctx.shared();
    let result = match packed.oversized() {
        Some(over) => {
            ctx.refused(&obj);
            oversized::refuse(
                &shared.writes,
                &shared.client,
                &shared.resource,
                shared.kind.role,
                &obj,
                over,
            )
            .await
        }
        None => {
            let _housekeeping = (!priority::is_urgent(&obj)).then(|| shared.housekeeping.enter());
            f(Arc::new(obj), ctx.clone()).await
        }
    };
    let label = match &result {
        Ok(_) => "ok",
        Err(e) => e.metric_label(),
    };
    shared.metrics.reconciled(&shared.kind.kind, label, started);
    result
}

/// Transient failures come back with exponential backoff and jitter, per object.
fn error_policy<C: RoleContext>(obj: Arc<Packed>, err: &Error, ctx: Arc<C>) -> Action {
    let ctx = ctx.shared();
    let key = objects::key(obj.as_ref());
    let delay = ctx.backoff.next(&key);
    tracing::warn!(kind = %ctx.kind.kind, object = %key, error = %err, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}
