//! The watch of a controller's own kind, kept lean: the cache holds objects without
//! what no reconcile reads (`managedFields`, the last-applied annotation), and only
//! changes a reconcile acts on trigger one. Our own status writes (every step of every
//! machine) come back as watch events; they change nothing a reconcile reads that it
//! did not just write, so they wake nothing.
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use futures::{Stream, StreamExt};
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{PredicateConfig, WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The objects of `api` that need a reconcile, and the store that caches them.
pub fn own_kind(
    api: Api<DynamicObject>,
    ar: &ApiResource,
) -> (
    impl Stream<Item = Result<DynamicObject, watcher::Error>> + Send + 'static,
    Store<DynamicObject>,
) {
    let writer = Writer::new(ar.clone());
    let store = writer.as_reader();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(strip)
        .reflect(writer)
        .applied_objects()
        .predicate_filter(acted_on, PredicateConfig::default());
    (stream.boxed(), store)
}

/// Drops what no reconcile reads (a few KiB per object, most of a cached machine).
fn strip(obj: &mut DynamicObject) {
    obj.metadata.managed_fields = None;
    if let Some(a) = obj.metadata.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

/// A digest of what a reconcile acts on: the object's identity, spec (by generation)
/// and metadata (labels, annotations, owners, finalizers, deletion); its status is the
/// reconciler's own output and left out.
fn acted_on(obj: &DynamicObject) -> Option<u64> {
    let m = &obj.metadata;
    let mut h = DefaultHasher::new();
    m.uid.hash(&mut h);
    m.generation.hash(&mut h);
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
    fn a_status_change_wakes_nothing_a_spec_or_metadata_change_does() {
        let a = machine(1, json!({ "phase": "Cloning" }));
        let b = machine(1, json!({ "phase": "Ready" }));
        assert_eq!(acted_on(&a), acted_on(&b));
        let mut c = a.clone();
        c.metadata.generation = Some(2);
        assert_ne!(acted_on(&a), acted_on(&c));
        let mut d = a.clone();
        d.metadata.finalizers = Some(vec!["f".into()]);
        assert_ne!(acted_on(&a), acted_on(&d));
        let mut e = a.clone();
        e.metadata.uid = Some("u2".into());
        assert_ne!(acted_on(&a), acted_on(&e));
    }

    #[test]
    fn the_cache_keeps_no_managed_fields_or_last_applied_configuration() {
        let mut o = machine(1, json!({}));
        o.metadata.managed_fields = Some(vec![Default::default()]);
        o.metadata.annotations = Some(
            [
                (LAST_APPLIED.to_string(), "{}".to_string()),
                ("keep".into(), "1".into()),
            ]
            .into(),
        );
        strip(&mut o);
        assert!(o.metadata.managed_fields.is_none());
        assert_eq!(o.annotations().len(), 1);
    }
}
