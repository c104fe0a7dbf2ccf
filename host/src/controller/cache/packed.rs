//! Cached objects kept as JSON text: what the watches' caches hold.
//!
//! A `DynamicObject` holds its spec and status as a `serde_json::Value` tree, where every
//! small object (a condition, a reference) is a B-tree node of its own: at 1,000
//! machines the caches of InfraMachines and Machines were about 16 KiB per machine,
//! most of the manager's heap. Kept as compact text with typed metadata (what the
//! caches' lookups and the triggers read), an object costs a few KiB; a reconcile
//! parses the one it works on (tens of microseconds). What a tenant wrote is kept up to
//! `--object-max-kib` per object (`oversized`).
use std::borrow::Cow;

use kube::api::{ApiResource, DynamicObject, ObjectMeta, TypeMeta};
use kube::core::DynamicResourceScope;
use kube::core::Resource;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::controller::cache::oversized::{self, Oversized};

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// An object of any kind: typed metadata, the rest as JSON text; with its status when
/// `STATUS`, else without ([`SpecOnly`]).
#[derive(Debug, Clone)]
pub struct Packed<const STATUS: bool = true> {
    types: Option<TypeMeta>,
    pub metadata: ObjectMeta,
    /// The object's fields other than `apiVersion`, `kind` and `metadata`, as JSON.
    data: Box<str>,
    /// Set when it was over the bound: what it is kept without.
    oversized: Option<Box<Oversized>>,
}

/// An object cached without its status: Cluster API's own kinds, whose status (its
/// conditions above all) is most of the object and is never read here.
pub type SpecOnly = Packed<false>;

impl<const STATUS: bool> Packed<STATUS> {
    /// Packs `obj` without what no reconcile reads (`strip`), within the manager's
    /// bound per object.
    pub fn pack(obj: DynamicObject) -> Packed<STATUS> {
        Packed::pack_within(obj, oversized::bound())
    }

    /// Packs `obj` without what no reconcile reads, and without its largest parts if
    /// what its tenant wrote is over `max` bytes (see `oversized`).
    pub fn pack_within(mut obj: DynamicObject, max: usize) -> Packed<STATUS> {
        strip(&mut obj);
        if !STATUS && let Some(fields) = obj.data.as_object_mut() {
            fields.remove("status");
        }
        let oversized = oversized::trim(&mut obj, max).map(Box::new);
        Packed {
            types: obj.types,
            metadata: obj.metadata,
            data: obj.data.to_string().into_boxed_str(),
            oversized,
        }
    }

    /// What the object is cached without, when it was over the bound.
    pub fn oversized(&self) -> Option<&Oversized> {
        self.oversized.as_deref()
    }

    /// The object as reconciles read it.
    pub fn unpack(&self) -> DynamicObject {
        DynamicObject {
            types: self.types.clone(),
            metadata: self.metadata.clone(),
            // It was serialized from a `Value` by `pack`.
            data: serde_json::from_str(&self.data).unwrap_or(Value::Null),
        }
    }

    /// The spec alone (the rest of the text is skipped, not built): what the own
    /// kinds' watch digests on every event, our own status writes included.
    pub fn spec(&self) -> Value {
        #[derive(Deserialize)]
        struct SpecOnly {
            #[serde(default)]
            spec: Value,
        }
        serde_json::from_str::<SpecOnly>(&self.data).map_or(Value::Null, |o| o.spec)
    }
}

impl<'de, const STATUS: bool> Deserialize<'de> for Packed<STATUS> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        DynamicObject::deserialize(d).map(Packed::pack)
    }
}

impl<const STATUS: bool> Resource for Packed<STATUS> {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Drops what no reconcile reads (a few KiB per object, most of a cached machine).
fn strip(obj: &mut DynamicObject) {
    obj.metadata.managed_fields = None;
    if let Some(a) = obj.metadata.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;
    use serde_json::json;

    fn object() -> Value {
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
            "kind": "ExampleMachine",
            "metadata": {
                "name": "m", "namespace": "ns", "uid": "u1",
                "managedFields": [{"manager": "kubectl"}],
                "annotations": {LAST_APPLIED: "{}", "keep": "1"},
            },
            "spec": {"memoryMiB": 4096},
            "status": {"ready": true},
        })
    }

    #[test]
    fn a_packed_object_unpacks_as_it_was_without_what_no_reconcile_reads() {
        let packed: Packed = serde_json::from_value(object()).unwrap();
        let obj = packed.unpack();
        assert_eq!(obj.name_any(), "m");
        assert_eq!(obj.metadata.managed_fields, None);
        assert_eq!(obj.annotations().len(), 1);
        assert_eq!(obj.data["spec"]["memoryMiB"], 4096);
        assert_eq!(obj.data["status"]["ready"], true);
        assert_eq!(obj.types.unwrap().kind, "ExampleMachine");
        assert_eq!(packed.spec(), json!({"memoryMiB": 4096}));
    }

    #[test]
    fn a_spec_only_object_has_no_status_and_keeps_its_spec() {
        let packed: SpecOnly = serde_json::from_value(object()).unwrap();
        let obj = packed.unpack();
        assert!(obj.data.get("status").is_none());
        assert_eq!(obj.data["spec"]["memoryMiB"], 4096);
    }

    #[test]
    fn an_object_over_the_bound_is_kept_without_its_spec_and_marked() {
        let mut big = object();
        big["spec"]["description"] = json!("d".repeat(100 << 10));
        let packed = Packed::<true>::pack_within(serde_json::from_value(big).unwrap(), 64 << 10);
        let over = packed.oversized().expect("marked");
        assert_eq!((&*over.dropped, over.max), ("spec", 64 << 10));
        let obj = packed.unpack();
        assert!(obj.data.get("spec").is_none());
        assert_eq!(obj.data["status"]["ready"], true);
        assert_eq!(obj.name_any(), "m");
        let small =
            Packed::<true>::pack_within(serde_json::from_value(object()).unwrap(), 64 << 10);
        assert!(small.oversized().is_none());
    }
}
