//! Cached objects kept as JSON text: what the watches' caches hold.
//!
//! A `DynamicObject` holds its spec and status as a `serde_json::Value` tree, where every
//! small object (a condition, a reference) is a B-tree node of its own: at 1,000
//! machines the caches of ProxmoxMachines and Machines were about 16 KiB per machine,
//! most of the manager's heap. Kept as compact text with typed metadata (what the
//! caches' lookups and the triggers read), an object costs a few KiB; a reconcile
//! parses the one it works on (tens of microseconds).
use std::borrow::Cow;

use kube::api::{ApiResource, DynamicObject, ObjectMeta, TypeMeta};
use kube::core::DynamicResourceScope;
use kube::core::Resource;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// An object of any kind: typed metadata, the rest as JSON text.
#[derive(Debug, Clone)]
pub struct Packed {
    types: Option<TypeMeta>,
    pub metadata: ObjectMeta,
    /// The object's fields other than `apiVersion`, `kind` and `metadata`, as JSON.
    data: Box<str>,
}

impl Packed {
    /// Packs `obj` without what no reconcile reads (`strip`).
    pub fn pack(mut obj: DynamicObject) -> Packed {
        strip(&mut obj);
        Packed {
            types: obj.types,
            metadata: obj.metadata,
            data: obj.data.to_string().into_boxed_str(),
        }
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

    /// Drops the status (for kinds whose status nothing here reads).
    pub fn drop_status(&mut self) {
        if let Ok(Value::Object(mut fields)) = serde_json::from_str::<Value>(&self.data)
            && fields.remove("status").is_some()
        {
            self.data = Value::Object(fields).to_string().into_boxed_str();
        }
    }
}

impl<'de> Deserialize<'de> for Packed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        DynamicObject::deserialize(d).map(Packed::pack)
    }
}

impl Resource for Packed {
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
    use kube::api::GroupVersionKind;
    use serde_json::json;

    fn object() -> Value {
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
            "kind": "ProxmoxMachine",
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
        assert_eq!(obj.types.unwrap().kind, "ProxmoxMachine");
    }

    #[test]
    fn a_dropped_status_is_gone_and_the_spec_kept() {
        let mut packed: Packed = serde_json::from_value(object()).unwrap();
        packed.drop_status();
        let obj = packed.unpack();
        assert!(obj.data.get("status").is_none());
        assert_eq!(obj.data["spec"]["memoryMiB"], 4096);
        let gvk = GroupVersionKind::gvk(
            "infrastructure.cluster.x-k8s.io",
            "v1alpha1",
            "ProxmoxMachine",
        );
        let ar = ApiResource::from_gvk(&gvk);
        assert_eq!(Packed::kind(&ar), "ProxmoxMachine");
    }
}
