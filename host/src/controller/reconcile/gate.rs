//! The gate every reconcile of an object that may own infrastructure passes first, the
//! same for every role: the checks that decide, cheapest and most decisive first,
//! whether it goes on to its role's own reads and the plugin call, or stops here and
//! when it comes back. In order:
//!
//! 1. its tenant's share of plugin slots (a tenant at its share: no reads at all);
//! 2. the object as the API server has it now (from the cache when the cache holds our
//!    last write and the role trusts it; one found gone is forgotten);
//! 3. the managed-by annotation (someone else's infrastructure: nothing to do);
//! 4. the Cluster API owner the role needs (a machine's Machine; a deleting object that
//!    never had one has nothing made, and loses the finalizer), our finalizer on a
//!    deleting object, and the cluster an owned object belongs to;
//! 5. the Cluster, and whether it or the object is paused (said on the object);
//! 6. failed for good on this generation, with no credentials to wait for;
//! 7. the object's ownership id, proven by the manager's MAC, never by what a user wrote.
//!
//! A template owns nothing and makes nothing: none of these apply, and it does not pass.
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;

use super::context::Context;
use crate::controller::cache::packed::SpecOnly;
use crate::controller::cache::watch::cached_or_read;
use crate::controller::call::outcome::{self, Failed};
use crate::controller::error::Result;
use crate::controller::objects::{self, Uid, api, capi_cluster, finalizer};
use crate::controller::trust::ownership::Ownership;
use crate::controller::trust::unverified;
use crate::controller::write::coalesce::Coalescer;
use crate::controller::write::conditions::{Condition, PAUSED, reasons};
use crate::status::{Progressing, Status};

/// Whether a reconcile goes on, with what it read, or stops here, with when to come
/// back.
pub enum Gate<T> {
    Go(T),
    Stop(Action),
}

/// What sets one role's entry apart.
pub struct Rules<'a> {
    /// The Cluster API kind that must own the object before anything is done (a
    /// machine's `Machine`); an object it owns must belong to a cluster too.
    pub owner: Option<&'static str>,
    /// Start from the cached object when it holds our last write (machines: many, and
    /// polled while their tasks run); else it is always read afresh.
    pub from_cache: bool,
    /// Where the controller caches the Clusters (else the Cluster is read).
    pub clusters: Option<&'a Store<SpecOnly>>,
    /// The statuses the role holds unwritten, forgotten with an object found gone.
    pub held: Option<&'a Coalescer>,
}

/// An object through the gate.
pub struct Passed {
    /// The object as the API server has it now (or the cache, holding our last write).
    pub obj: DynamicObject,
    /// Its UID: what is kept for it is kept under this key.
    pub uid: Uid,
    pub own: Api<DynamicObject>,
    pub deleting: bool,
    /// Its owner of the kind [`Rules::owner`] asked for, and its cluster's name: both
    /// there whenever the role asked for an owner.
    pub owner: Option<Owner>,
    /// The Cluster it belongs to, if it names one and that one exists.
    pub cluster: Option<DynamicObject>,
    /// Whether it failed for good on this generation (never [`Failed::Stop`] here).
    pub failed: Failed,
    /// The ownership id proven, and the annotation to write when it is not stored yet.
    pub id: String,
    pub write_id: Option<String>,
}

/// The Cluster API owner an object was required to have, and its cluster.
pub struct Owner {
    pub name: String,
    pub cluster: String,
}

/// Pass `cached`, an object of the kind `ctx` serves, through the gate under `rules`.
pub async fn pass(
    ctx: &Context,
    cached: &DynamicObject,
    rules: &Rules<'_>,
) -> Result<Gate<Passed>> {
    let ns = cached.namespace().unwrap_or_default();
    // Its tenant's calls hold or wait for all the plugin slots it may have: this worker
    // goes to another object, before any read (see `outcome::at_share`).
    if let Some(later) = outcome::tenant_at_share(&ctx.plugin, &ns) {
        return Ok(Gate::Stop(later));
    }
    let own = api(&ctx.client, &ctx.resource, &ns);
    let Some(obj) = object_now(ctx, &own, cached, rules).await? else {
        return Ok(Gate::Stop(Action::await_change()));
    };
    // The API server gives every object it stores a UID: one without is nothing it
    // stored, nothing to reconcile, and nothing to remember.
    let Some(uid) = Uid::of(&obj) else {
        return Ok(Gate::Stop(Action::await_change()));
    };
    if objects::has_annotation(&obj, objects::MANAGED_BY_ANNOTATION) {
        return Ok(Gate::Stop(Action::await_change()));
    }
    let deleting = obj.metadata.deletion_timestamp.is_some();
    let owner = match owned(ctx, &own, &obj, rules.owner).await? {
        Gate::Go(owner) => owner,
        Gate::Stop(action) => return Ok(Gate::Stop(action)),
    };
    let cluster_name = objects::cluster_name(&obj);
    let cluster = match &cluster_name {
        Some(name) => {
            cached_or_read(rules.clusters, &ctx.client, &capi_cluster(), &ns, name).await?
        }
        None => None,
    };
    // Pause: no plugin call at all, and say so.
    if let Some(why) = objects::paused_why(&obj, cluster.as_ref()) {
        let paused = Condition::new(PAUSED, true, reasons::PAUSED, why);
        ctx.writes.conditions(&own, &obj, &[paused]).await?;
        return Ok(Gate::Stop(Action::await_change()));
    }
    // Failed for good on this generation: nothing more to read until the spec changes
    // (or, at the resync period, the credentials it was called with: the role's to read).
    let failed = outcome::still_failing(&Progressing::of(&obj), obj.metadata.generation, deleting);
    if failed == Failed::Stop {
        return Ok(Gate::Stop(Action::await_change()));
    }
    // Whose infrastructure this is. Unproven, the plugin is not called at all.
    let (id, write_id) = match ctx.ownership.verify(&ctx.resource, &obj).await {
        Ownership::Proven { id, write } => (id, write),
        Ownership::Unproven { message, recheck } => {
            let refused =
                unverified::refuse(&ctx.writes, &ctx.plugin, &own, &obj, message, recheck);
            return refused.await.map(Gate::Stop);
        }
    };
    Ok(Gate::Go(Passed {
        obj,
        uid,
        own,
        deleting,
        owner,
        cluster,
        failed,
        id,
        write_id,
    }))
}

/// The object as the API server has it now. The cache a reconcile is handed can lag
/// behind our own last write; working from it would hand the plugin a state from before
/// its last step and write that older state back. So it is read afresh, unless the role
/// starts from the cache and the cache holds our last write. `None`: it is gone, and
/// what was kept for it is forgotten.
async fn object_now(
    ctx: &Context,
    own: &Api<DynamicObject>,
    cached: &DynamicObject,
    rules: &Rules<'_>,
) -> Result<Option<DynamicObject>> {
    let written = &ctx.writes.written;
    let uid = Uid::of(cached);
    let version = cached.resource_version();
    let current = uid
        .as_ref()
        .is_some_and(|uid| written.is_current(uid, version.as_deref()));
    if rules.from_cache && current {
        return Ok(Some(cached.clone()));
    }
    let read = objects::fresh(own, cached).await?;
    match (&read, uid) {
        (Some(obj), _) => {
            if let Some(uid) = Uid::of(obj) {
                written.read_at(&uid, obj.resource_version());
            }
        }
        (None, Some(uid)) => {
            if let Some(held) = rules.held {
                held.forget(&uid);
            }
            written.forget(&uid);
        }
        (None, None) => {}
    }
    Ok(read)
}

/// The owner of kind `kind` that `obj` must have (none asked: go on), and the cluster it
/// belongs to; and, deleting, our finalizer on it, or there is nothing of ours to do.
async fn owned(
    ctx: &Context,
    own: &Api<DynamicObject>,
    obj: &DynamicObject,
    kind: Option<&str>,
) -> Result<Gate<Option<Owner>>> {
    let deleting = obj.metadata.deletion_timestamp.is_some();
    let finalizer = finalizer(&ctx.plugin);
    let name = match kind.map(|kind| objects::capi_owner(obj, kind)) {
        None => None,
        Some(Some(name)) => Some(name),
        Some(None) => {
            if deleting {
                // Never owned: nothing can have been created.
                ctx.writes.remove_finalizer(own, obj, &finalizer).await?;
            }
            // Else its owner's controller sets itself as owner soon; the owner's watch
            // brings us back.
            return Ok(Gate::Stop(Action::await_change()));
        }
    };
    if deleting && !obj.finalizers().contains(&finalizer) {
        return Ok(Gate::Stop(Action::await_change()));
    }
    let Some(name) = name else {
        return Ok(Gate::Go(None));
    };
    match objects::cluster_name(obj) {
        Some(cluster) => Ok(Gate::Go(Some(Owner { name, cluster }))),
        None => Ok(Gate::Stop(Action::await_change())),
    }
}
