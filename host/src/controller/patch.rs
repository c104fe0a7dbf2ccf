//! Writes to our objects: status through the status subresource with a merge patch of
//! only the fields we own (never a blind full update), finalizers with JSON patches that
//! test before they change, and only when something changed.
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Map, Value, json};

use super::error::Result;

/// Merge-patch `fields` into `status`, skipping the write when nothing differs.
pub async fn status(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    fields: Map<String, Value>,
) -> Result<bool> {
    let current = obj.data.get("status").and_then(Value::as_object);
    let changed: Map<String, Value> = fields
        .into_iter()
        .filter(|(k, v)| {
            current.and_then(|c| c.get(k)) != Some(v)
                && !(v.is_null() && current.and_then(|c| c.get(k)).is_none())
        })
        .collect();
    if changed.is_empty() {
        return Ok(false);
    }
    api.patch_status(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": changed})),
    )
    .await?;
    Ok(true)
}

/// Merge-patch one spec field if it differs.
pub async fn spec_field(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    key: &str,
    value: Value,
) -> Result<()> {
    if obj.data.get("spec").and_then(|s| s.get(key)) == Some(&value) {
        return Ok(());
    }
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {key: value}})),
    )
    .await?;
    Ok(())
}

/// Before any plugin call that may create infrastructure: our finalizer, and the
/// ownership-id annotation (`objects::OWNERSHIP_ID_ANNOTATION`) set to `signed_id`,
/// the signed id the plugin is about to mark its resources with, when it is not
/// stored yet. One write; none when both are there.
pub async fn take_ownership(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    finalizer: &str,
    signed_id: Option<&str>,
) -> Result<()> {
    let mut ops = vec![
        // The version test makes a concurrent writer's change a conflict (retried)
        // rather than lost.
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": obj.resource_version()}),
    ];
    let current = obj.finalizers();
    if current.is_empty() {
        ops.push(json!({"op": "add", "path": "/metadata/finalizers", "value": [finalizer]}));
    } else if !current.iter().any(|f| f == finalizer) {
        ops.push(json!({"op": "add", "path": "/metadata/finalizers/-", "value": finalizer}));
    }
    let key = super::objects::OWNERSHIP_ID_ANNOTATION;
    if let Some(id) = signed_id {
        if obj.metadata.annotations.is_none() {
            ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": {key: id}}));
        } else {
            // JSON pointer escaping of `/` in the key (RFC 6901).
            let path = format!(
                "/metadata/annotations/{}",
                key.replace('~', "~0").replace('/', "~1")
            );
            ops.push(json!({"op": "add", "path": path, "value": id}));
        }
    }
    if ops.len() == 1 {
        return Ok(());
    }
    let patch: json_patch::Patch =
        serde_json::from_value(Value::Array(ops)).expect("valid JSON patch");
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::<()>::Json(patch),
    )
    .await?;
    Ok(())
}

pub async fn remove_finalizer(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    finalizer: &str,
) -> Result<()> {
    let Some(i) = obj.finalizers().iter().position(|f| f == finalizer) else {
        return Ok(());
    };
    let ops = json!([
        {"op": "test", "path": format!("/metadata/finalizers/{i}"), "value": finalizer},
        {"op": "remove", "path": format!("/metadata/finalizers/{i}")},
    ]);
    let patch: json_patch::Patch = serde_json::from_value(ops).expect("valid JSON patch");
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::<()>::Json(patch),
    )
    .await?;
    Ok(())
}

/// Merge `updates` into `status.conditions` (one status write, none when unchanged).
pub async fn conditions(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    updates: &[super::conditions::Condition],
) -> Result<()> {
    let existing = obj.data.get("status").and_then(|s| s.get("conditions"));
    let mut fields = Map::new();
    fields.insert(
        "conditions".into(),
        super::conditions::merge(existing, updates, obj.metadata.generation.unwrap_or(0)),
    );
    status(api, obj, fields).await?;
    Ok(())
}

/// The status fields every plugin progress report sets: its state and phase.
pub fn progress_fields(progress: &crate::runtime::bindings::types::Progress) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert("pluginState".into(), json!(progress.state));
    fields.insert("phase".into(), json!(progress.phase));
    fields
}
