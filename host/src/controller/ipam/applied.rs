//! What every object the host applies for IPAM carries: its field manager, and an
//! owner reference to the object it was made for (so it goes with it).
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use serde_json::json;

/// The field manager of the pools and claims the host applies.
pub(super) const FIELD_MANAGER: &str = "hyperplug";

/// The owner reference to `obj`, of kind `owner`, that the pools and claims made for it
/// carry.
pub(super) fn owner_ref(obj: &DynamicObject, owner: &ApiResource) -> serde_json::Value {
    json!({
        "apiVersion": owner.api_version,
        "kind": owner.kind,
        "name": obj.name_any(),
        "uid": obj.uid().unwrap_or_default(),
        "blockOwnerDeletion": true,
    })
}
