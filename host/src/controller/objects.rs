//! Reading and addressing the objects of the Cluster API contract, kept dynamic: the
//! host serves kinds it learns from plugins at start.
use std::borrow::Borrow;

use kube::api::{Api, ApiResource, DynamicObject, GetParams, GroupVersionKind, ObjectMeta};
use kube::{Client, Resource, ResourceExt};
use serde_json::Value;

use hyperplug_runtime::{ObjectRef, Plugin};

pub const CAPI_GROUP: &str = "cluster.x-k8s.io";
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";
pub const MANAGED_BY_ANNOTATION: &str = "cluster.x-k8s.io/managed-by";
/// The identity a plugin proves ownership with. It starts as the object's UID and is
/// kept in an annotation because `clusterctl move` recreates objects with new UIDs but
/// copies annotations: the moved object keeps proving ownership of what it made. The
/// value is signed by the manager (`crate::controller::trust::ownership`), so a copy proves nothing.
pub const OWNERSHIP_ID_ANNOTATION: &str = "infrastructure.hyperplug.dev/ownership-id";

pub fn capi_cluster() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(CAPI_GROUP, "v1beta2", "Cluster"),
        "clusters",
    )
}

pub fn capi_machine() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(CAPI_GROUP, "v1beta2", "Machine"),
        "machines",
    )
}

pub fn ip_address_claim() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("ipam.cluster.x-k8s.io", "v1beta2", "IPAddressClaim"),
        "ipaddressclaims",
    )
}

pub fn ip_address() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("ipam.cluster.x-k8s.io", "v1beta2", "IPAddress"),
        "ipaddresses",
    )
}

pub fn in_cluster_ip_pool() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("ipam.cluster.x-k8s.io", "v1alpha2", "InClusterIPPool"),
        "inclusterippools",
    )
}

/// Reads an object as the API server's watch cache has it (`resourceVersion=0`): as
/// fresh as the watch events that trigger our reconciles (the same cache serves both),
/// without a quorum read from etcd for each of the several reads of every reconcile.
pub async fn read<K>(api: &Api<K>, name: &str) -> kube::Result<Option<K>>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.get_with(name, &GetParams::any()).await {
        Ok(obj) => Ok(Some(obj)),
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(None),
        Err(err) => Err(err),
    }
}

pub fn api(client: &Client, ar: &ApiResource, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, ar)
}

/// `obj.data` at a dotted path, e.g. `spec.bootstrap.dataSecretName`.
pub fn field<'a>(obj: &'a DynamicObject, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(&obj.data, |v, k| v.get(k))
}

pub fn str_field<'a>(obj: &'a DynamicObject, path: &str) -> Option<&'a str> {
    field(obj, path)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

pub fn has_annotation(obj: &DynamicObject, key: &str) -> bool {
    obj.annotations().contains_key(key)
}

/// The name of the owner of `kind` in the CAPI group, from ownerReferences.
pub fn capi_owner(obj: &DynamicObject, kind: &str) -> Option<String> {
    owner_named(&obj.metadata, kind)
}

fn owner_named(meta: &ObjectMeta, kind: &str) -> Option<String> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == kind && o.api_version.starts_with(&format!("{CAPI_GROUP}/")))
        .map(|o| o.name.clone())
}

/// The CAPI Cluster an object belongs to: its owner, or the cluster-name label.
pub fn cluster_name(obj: &DynamicObject) -> Option<String> {
    cluster_name_of(&obj.metadata)
}

/// [`cluster_name`] from an object's metadata.
pub fn cluster_name_of(meta: &ObjectMeta) -> Option<String> {
    owner_named(meta, "Cluster").or_else(|| meta.labels.as_ref()?.get(CLUSTER_NAME_LABEL).cloned())
}

/// A v1beta2 contract reference `{apiGroup, kind, name}` at `path`, if it names `kind`
/// in `group`.
pub fn reference_to(obj: &DynamicObject, path: &str, group: &str, kind: &str) -> Option<String> {
    let r = field(obj, path)?;
    let matches = r.get("kind").and_then(Value::as_str) == Some(kind)
        && r.get("apiGroup").and_then(Value::as_str) == Some(group);
    matches
        .then(|| r.get("name").and_then(Value::as_str).map(str::to_string))
        .flatten()
}

/// The object as the API server has it now. The watch cache a reconcile is handed can
/// lag behind our own last status write; working from it would hand the plugin a state
/// from before its last step and write that older state back. `None` once it is gone.
pub async fn fresh(
    api: &kube::Api<DynamicObject>,
    cached: &DynamicObject,
) -> Result<Option<DynamicObject>, kube::Error> {
    api.get_opt(&cached.name_any()).await
}

/// Why reconciling is paused, if it is: the owning Cluster's `spec.paused`, or the
/// object's paused annotation.
pub fn paused_why(obj: &DynamicObject, cluster: Option<&DynamicObject>) -> Option<&'static str> {
    if cluster
        .and_then(|c| field(c, "spec.paused"))
        .and_then(Value::as_bool)
        == Some(true)
    {
        Some("the Cluster is paused")
    } else if has_annotation(obj, PAUSED_ANNOTATION) {
        Some("the object has the paused annotation")
    } else {
        None
    }
}

/// `namespace/name`: how logs, backoff and metrics name an object.
pub fn key(obj: &impl ResourceExt) -> String {
    format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any())
}

/// The object as its controller's queue names it (what `waits` wakes).
pub fn obj_ref(
    obj: &DynamicObject,
    resource: &ApiResource,
) -> kube::runtime::reflector::ObjectRef<DynamicObject> {
    kube::runtime::reflector::ObjectRef::from_obj_with(obj, resource.clone())
}

/// The object as the plugin sees it, with `id` (a proven ownership id, or a UID the
/// API server assigned) as its `uid`.
pub fn object_ref(obj: &DynamicObject, id: &str) -> ObjectRef {
    ObjectRef {
        namespace: obj.namespace().unwrap_or_default(),
        name: obj.name_any(),
        uid: id.to_string(),
    }
}

/// Whether the object's infrastructure was provisioned (`status.initialization.provisioned`).
pub fn provisioned(obj: &DynamicObject) -> bool {
    field(obj, "status.initialization.provisioned").and_then(Value::as_bool) == Some(true)
}

/// An object's UID: the key of everything the controllers keep per object (the marks of
/// our writes, held statuses, which machines asked for addresses, what the watches last
/// saw of it). The API server gives every object it stores one; an object without one
/// was never stored, so nothing is kept for it: [`Uid::of`] is `None`, never an empty
/// key that every such object would share.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Uid(String);

impl Uid {
    /// `obj`'s UID, if it has one.
    pub fn of(obj: &impl Resource) -> Option<Uid> {
        Self::in_meta(obj.meta())
    }

    /// The UID in an object's metadata, if there is one.
    pub fn in_meta(meta: &ObjectMeta) -> Option<Uid> {
        let uid = meta.uid.as_deref().filter(|uid| !uid.is_empty())?;
        Some(Uid(uid.to_string()))
    }
}

/// A map keyed by UID is read with the text of one too.
impl Borrow<str> for Uid {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// Tests name their objects by plain text.
#[cfg(test)]
impl From<&str> for Uid {
    fn from(uid: &str) -> Uid {
        Uid(uid.to_string())
    }
}

#[cfg(test)]
impl PartialEq<&str> for Uid {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// The finalizer on every object whose infrastructure we may create.
pub fn finalizer(plugin: &Plugin) -> String {
    hyperplug_kinds::crds::finalizer(plugin.info())
}
