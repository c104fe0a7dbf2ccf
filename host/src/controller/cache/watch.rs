//! The watches of the controllers, kept lean: caches hold objects packed as JSON text
//! (`packed`), without what no reconcile reads (`managedFields`, the last-applied
//! annotation).
//!
//! - A controller's own kind ([`own_kind`]): only changes a reconcile acts on trigger
//!   one. Our own status writes (every step of every machine) come back as watch
//!   events; they change nothing a reconcile reads that it did not just write, so they
//!   wake nothing; nor does the echo of a machine's provider ID and ownership id, which
//!   the reconciler records as seen ([`Seen`]).
//! - What machines read of others ([`Caches`]): the Clusters, InfraClusters and
//!   Machines a machine reconcile reads come from these watches' caches (the watches
//!   also map their changes to machines) instead of one API read each per reconcile;
//!   one not cached yet is read from the API server. Cluster API's Clusters and
//!   Machines are cached without their status, which nothing here reads (a Cluster
//!   standing in for a plugin without an InfraCluster kind keeps it).
//!
//! Lists come in pages of [`LIST_PAGE`] objects: a page is read whole before its
//! objects are packed, and a tenant's objects may be 1.5 MiB each.
use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

use crate::controller::cache::packed::{Packed, SpecOnly};
use crate::controller::objects::Uid;
use crate::controller::write::written::WrittenAt;

/// Objects per list request of every watch. A page is held whole, as text, while it is
/// parsed: at the API server's largest objects (about 1.5 MiB) this is at most 48 MiB,
/// where the watcher's default of 500 would be 750 MiB. Objects of a few KiB make pages
/// of a hundred KiB or so, still few requests at 1,000 objects.
pub const LIST_PAGE: u32 = 32;

/// The objects of `api` that need a reconcile, and the store that caches them: those
/// whose [`acted_on`] digest differs from the last one `seen` (by this watch, or by the
/// reconciler in its own write). Every changed version the watch shows is told to
/// `written`, once the store holds it.
pub fn own_kind(
    api: Api<Packed>,
    ar: &ApiResource,
    config: watcher::Config,
    seen: Seen,
    written: WrittenAt,
) -> Watched {
    let writer = Writer::new(ar.clone());
    let store = writer.as_reader();
    // Relists are quorum reads and the watch resumes from their version, so no event
    // shows a version older than one shown before: `written` relies on that.
    let config = config.list_semantic(watcher::ListSemantic::MostRecent);
    let stream = watcher(api, config)
        .default_backoff()
        .reflect(writer)
        .filter_map(move |event| {
            // Changes only, not a relist's objects: those reach the store at its end, and
            // a relist read from a lagging cache could show a version before our write.
            if let Ok(watcher::Event::Apply(o)) = &event
                && let (Some(uid), Some(version)) =
                    (Uid::in_meta(&o.metadata), &o.metadata.resource_version)
            {
                written.watched(&uid, version);
            }
            let out = match event {
                Ok(watcher::Event::Apply(o)) => seen.changed(&o).then_some(Ok(o)),
                Ok(watcher::Event::InitApply(o)) => {
                    seen.listed(&o);
                    seen.changed(&o).then_some(Ok(o))
                }
                Ok(watcher::Event::Delete(o)) => {
                    seen.forget(&o);
                    if let Some(uid) = Uid::in_meta(&o.metadata) {
                        written.gone(&uid);
                    }
                    None
                }
                Ok(watcher::Event::Init) => {
                    seen.relisting();
                    None
                }
                Ok(watcher::Event::InitDone) => {
                    // Objects deleted while the watch was down.
                    for uid in seen.relisted() {
                        written.gone(&uid);
                    }
                    None
                }
                Err(e) => Some(Err(e)),
            };
            std::future::ready(out)
        });
    (stream.boxed(), store)
}

/// The last [`acted_on`] digest of each object of a controller's own kind, by UID: what
/// its watch saw last, or what the reconciler itself wrote. The echo of a reconciler's
/// own spec or metadata write (a machine's provider ID with its ownership id) then wakes
/// nothing, as a status write's echo never does; anyone else's change still does.
#[derive(Clone, Default)]
pub struct Seen(Arc<Mutex<Digests>>);

#[derive(Default)]
struct Digests {
    by_uid: HashMap<Uid, u64>,
    /// The UIDs a relist (the watch restarted) has shown so far: objects deleted while
    /// the watch was down are forgotten when it ends.
    listed: Option<std::collections::HashSet<Uid>>,
}

impl Seen {
    fn lock(&self) -> std::sync::MutexGuard<'_, Digests> {
        self.0.lock().expect("seen digests")
    }

    /// Whether `obj` changed what a reconcile acts on since last seen; remembers it.
    fn changed(&self, obj: &Packed) -> bool {
        let (Some(uid), Some(digest)) = (Uid::in_meta(&obj.metadata), acted_on(obj)) else {
            return true;
        };
        self.lock().by_uid.insert(uid, digest) != Some(digest)
    }

    fn forget(&self, obj: &Packed) {
        if let Some(uid) = Uid::in_meta(&obj.metadata) {
            self.lock().by_uid.remove(&uid);
        }
    }

    fn relisting(&self) {
        self.lock().listed = Some(Default::default());
    }

    fn listed(&self, obj: &Packed) {
        if let (Some(listed), Some(uid)) = (&mut self.lock().listed, Uid::in_meta(&obj.metadata)) {
            listed.insert(uid);
        }
    }

    /// The relist ended: objects it did not show are forgotten, and returned.
    fn relisted(&self) -> Vec<Uid> {
        let mut d = self.lock();
        let Some(listed) = d.listed.take() else {
            return Vec::new();
        };
        let gone: Vec<Uid> = d
            .by_uid
            .keys()
            .filter(|uid| !listed.contains(*uid))
            .cloned()
            .collect();
        for uid in &gone {
            d.by_uid.remove(uid);
        }
        gone
    }

    /// The reconciler wrote `obj` (as the API server answered its write): its echo is
    /// not a change. Should the echo come first, it wakes one reconcile, as before.
    pub fn wrote(&self, obj: &DynamicObject) {
        let packed = Packed::pack(obj.clone());
        if let (Some(uid), Some(digest)) = (Uid::in_meta(&obj.metadata), acted_on(&packed)) {
            self.lock().by_uid.insert(uid, digest);
        }
    }
}

/// A watch a controller is woken by, and its cache (of objects with their status, or
/// without: [`SpecOnly`]).
pub type Watched<const STATUS: bool = true> = (
    BoxStream<'static, Result<Packed<STATUS>, watcher::Error>>,
    Store<Packed<STATUS>>,
);

/// Every object of `api` that `config` lists, cached lean; the stream yields each one
/// changed or deleted.
pub fn cached<const STATUS: bool>(
    api: Api<Packed<STATUS>>,
    ar: &ApiResource,
    config: watcher::Config,
) -> Watched<STATUS> {
    let writer = Writer::new(ar.clone());
    let store = writer.as_reader();
    let stream = watcher(api, config)
        .default_backoff()
        .reflect(writer)
        .touched_objects();
    (stream.boxed(), store)
}

/// The caches of what machine reconciles read.
#[derive(Clone)]
pub struct Caches {
    pub clusters: Store<SpecOnly>,
    pub infra_clusters: Store<Packed>,
    pub machines: Store<SpecOnly>,
}

/// `name` in `ns` of kind `ar` from `store` when cached there whole, else as the API
/// server has it (created a moment ago, the watch still starting, or cached without
/// parts over `--object-max-kib`: then it is read for this reconcile only).
pub async fn cached_or_read<const STATUS: bool>(
    store: Option<&Store<Packed<STATUS>>>,
    client: &kube::Client,
    ar: &ApiResource,
    ns: &str,
    name: &str,
) -> kube::Result<Option<DynamicObject>> {
    let key = ObjectRef::new_with(name, ar.clone()).within(ns);
    if let Some(obj) = store.and_then(|s| s.get(&key))
        && obj.oversized().is_none()
    {
        return Ok(Some(obj.unpack()));
    }
    crate::controller::objects::read(&Api::namespaced_with(client.clone(), ns, ar), name).await
}

/// A digest of what a reconcile acts on: the object's identity, spec and metadata
/// (labels, annotations, owners, finalizers, deletion). Its status is the reconciler's
/// own output, and so is the spec's `providerID` (written once a machine is ready):
/// both are left out. Of an object over the bound, its size counts too (what was left
/// out of it is not here to compare).
fn acted_on(obj: &Packed) -> Option<u64> {
    let m = &obj.metadata;
    let mut h = DefaultHasher::new();
    m.uid.hash(&mut h);
    obj.oversized().map(|o| o.bytes).hash(&mut h);
    let mut spec = obj.spec();
    if let Some(fields) = spec.as_object_mut() {
        fields.remove("providerID");
    }
    spec.to_string().hash(&mut h);
    m.deletion_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .hash(&mut h);
    m.finalizers.hash(&mut h);
    m.labels.hash(&mut h);
    m.annotations.hash(&mut h);
    m.owner_references
        .iter()
        .flatten()
        .map(|o| (&o.uid, &o.kind, &o.name, o.controller))
        .for_each(|o| o.hash(&mut h));
    obj.name_any().hash(&mut h);
    Some(h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::{GroupVersionKind, ObjectMeta};
    use serde_json::json;

    fn machine(generation: i64, status: serde_json::Value) -> DynamicObject {
        let gvk = GroupVersionKind::gvk("infrastructure.cluster.x-k8s.io", "v1alpha1", "M");
        let mut o = DynamicObject::new("m", &ApiResource::from_gvk(&gvk));
        o.metadata = ObjectMeta {
            name: Some("m".into()),
            uid: Some("u1".into()),
            generation: Some(generation),
            ..Default::default()
        };
        o.data = json!({ "spec": {}, "status": status });
        o
    }

    #[test]
    fn a_status_or_provider_id_change_wakes_nothing_a_spec_or_metadata_change_does() {
        let a = machine(1, json!({ "phase": "Cloning" }));
        let b = machine(1, json!({ "phase": "Ready" }));
        assert_eq!(
            acted_on(&Packed::pack(a.clone())),
            acted_on(&Packed::pack(b.clone()))
        );
        let mut c = a.clone();
        c.data["spec"]["memoryMiB"] = json!(4096);
        assert_ne!(
            acted_on(&Packed::pack(a.clone())),
            acted_on(&Packed::pack(c.clone()))
        );
        let mut ours = a.clone();
        ours.data["spec"]["providerID"] = json!("proxmox://u");
        ours.metadata.generation = Some(2);
        assert_eq!(
            acted_on(&Packed::pack(a.clone())),
            acted_on(&Packed::pack(ours.clone())),
            "the providerID is our own write"
        );
        let mut d = a.clone();
        d.metadata.finalizers = Some(vec!["f".into()]);
        assert_ne!(
            acted_on(&Packed::pack(a.clone())),
            acted_on(&Packed::pack(d.clone()))
        );
        let mut e = a.clone();
        e.metadata.uid = Some("u2".into());
        assert_ne!(
            acted_on(&Packed::pack(a.clone())),
            acted_on(&Packed::pack(e.clone()))
        );
    }

    #[test]
    fn the_echo_of_our_own_write_wakes_nothing_anyone_elses_change_does() {
        let seen = Seen::default();
        let a = machine(1, json!({}));
        assert!(seen.changed(&Packed::pack(a.clone())), "first seen");
        assert!(!seen.changed(&Packed::pack(a.clone())), "unchanged");
        // The reconciler writes the provider ID with the ownership id (an annotation).
        let mut ours = a.clone();
        ours.data["spec"]["providerID"] = json!("proxmox://u");
        ours.metadata.annotations = Some([("own/id".to_string(), "u.mac".to_string())].into());
        seen.wrote(&ours);
        assert!(!seen.changed(&Packed::pack(ours.clone())), "our echo");
        let mut edited = ours.clone();
        edited.metadata.annotations = Some([("own/id".to_string(), "x.mac".to_string())].into());
        assert!(seen.changed(&Packed::pack(edited)), "a tenant's edit");
        // A relist forgets what it no longer lists.
        seen.relisting();
        let mut b = a.clone();
        b.metadata.uid = Some("u9".into());
        seen.listed(&Packed::pack(b.clone()));
        seen.relisted();
        assert!(
            seen.lock().by_uid.is_empty(),
            "u1 was deleted while not watched"
        );
    }
}
