//! Writes to our objects: status through the status subresource with a merge patch of
//! only the fields we own (never a blind full update), finalizers with JSON patches that
//! test before they change, and only when something changed. Each says the resource
//! version it made; only [`super::Writes`] calls them, and records it.
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Map, Value, json};

use crate::controller::error::Result;
use crate::status::{Progressing, Status};

/// Write `new` as the object's status: a merge patch of what differs from `T`'s view of
/// the status the object has, fields `T` drops removed; no write when nothing differs.
/// The resource version it wrote, if it wrote.
pub async fn status<T: Status>(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    new: &T,
) -> Result<Option<String>> {
    let old = serde_json::to_value(T::of(obj)).expect("a status serializes");
    let new = serde_json::to_value(new).expect("a status serializes");
    let Some(diff) = merge_diff(&old, &new) else {
        return Ok(None);
    };
    let written = api
        .patch_status(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": diff })),
        )
        .await?;
    Ok(written.resource_version())
}

/// The JSON merge patch (RFC 7396) that turns `old` into `new`: changed members, removed
/// ones as `null`, objects compared member by member, anything else replaced whole.
/// `None` when they are equal.
pub fn merge_diff(old: &Value, new: &Value) -> Option<Value> {
    match (old, new) {
        (Value::Object(old), Value::Object(new)) => {
            let mut diff = Map::new();
            for (k, v) in new {
                let changed = match old.get(k) {
                    Some(o) => merge_diff(o, v),
                    // A null in a merge patch removes: an absent member is already that.
                    None if v.is_null() => None,
                    None => Some(v.clone()),
                };
                if let Some(c) = changed {
                    diff.insert(k.clone(), c);
                }
            }
            for k in old.keys().filter(|k| !new.contains_key(*k)) {
                diff.insert(k.clone(), Value::Null);
            }
            (!diff.is_empty()).then_some(Value::Object(diff))
        }
        _ if old == new => None,
        _ => Some(new.clone()),
    }
}

/// Merge-patch one spec field if it differs, with `annotation` (key, value) in the same
/// write; the object as the API server answered the write (`None`: nothing written).
pub async fn spec_field(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    key: &str,
    value: Value,
    annotation: Option<(&str, &str)>,
) -> Result<Option<DynamicObject>> {
    if obj.data.get("spec").and_then(|s| s.get(key)) == Some(&value) {
        return Ok(None);
    }
    let mut patch = json!({"spec": {key: value}});
    if let Some((k, v)) = annotation {
        patch["metadata"] = json!({"annotations": {k: v}});
    }
    let patched = api
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
    Ok(Some(patched))
}

/// Before any plugin call that may create infrastructure: our finalizer, and the
/// ownership-id annotation (`objects::OWNERSHIP_ID_ANNOTATION`) set to `signed_id`,
/// the signed id the plugin is about to mark its resources with, when it is not
/// stored yet. One write; none when both are there. The resource version it made, if
/// it wrote.
pub async fn take_ownership(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    finalizer: &str,
    replaces: &str,
    signed_id: Option<&str>,
) -> Result<Option<String>> {
    let mut ops = vec![
        // The version test makes a concurrent writer's change a conflict (retried)
        // rather than lost.
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": obj.resource_version()}),
    ];
    let current = obj.finalizers();
    if current.iter().any(|f| f == replaces) {
        // A provider of these kinds that ran before us (taken over): its finalizer
        // would keep the object forever, as nothing runs to remove it.
        let mut kept: Vec<&str> = current
            .iter()
            .map(String::as_str)
            .filter(|f| *f != replaces)
            .collect();
        if !kept.contains(&finalizer) {
            kept.push(finalizer);
        }
        ops.push(json!({"op": "replace", "path": "/metadata/finalizers", "value": kept}));
    } else if current.is_empty() {
        ops.push(json!({"op": "add", "path": "/metadata/finalizers", "value": [finalizer]}));
    } else if !current.iter().any(|f| f == finalizer) {
        ops.push(json!({"op": "add", "path": "/metadata/finalizers/-", "value": finalizer}));
    }
    let key = crate::controller::objects::OWNERSHIP_ID_ANNOTATION;
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
        return Ok(None);
    }
    let patch: json_patch::Patch =
        serde_json::from_value(Value::Array(ops)).expect("valid JSON patch");
    let written = api
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::<()>::Json(patch),
        )
        .await?;
    Ok(written.resource_version())
}

/// Remove `finalizer`, when it is there. The resource version it made, if it wrote.
pub async fn remove_finalizer(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    finalizer: &str,
) -> Result<Option<String>> {
    let Some(i) = obj.finalizers().iter().position(|f| f == finalizer) else {
        return Ok(None);
    };
    let ops = json!([
        {"op": "test", "path": format!("/metadata/finalizers/{i}"), "value": finalizer},
        {"op": "remove", "path": format!("/metadata/finalizers/{i}")},
    ]);
    let patch: json_patch::Patch = serde_json::from_value(ops).expect("valid JSON patch");
    let written = api
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::<()>::Json(patch),
        )
        .await?;
    Ok(written.resource_version())
}

/// Merge `updates` into the object's conditions (one status write, none when unchanged).
pub async fn conditions(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    updates: &[crate::controller::write::conditions::Condition],
) -> Result<Option<String>> {
    let mut status = Progressing::of(obj);
    status.conditions = crate::controller::write::conditions::merge(
        &status.conditions,
        updates,
        obj.metadata.generation.unwrap_or(0),
        &crate::controller::write::conditions::now(),
    );
    self::status(api, obj, &status).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_merge_diff_names_changes_and_removes_what_is_gone() {
        let old = json!({"phase": "Ready", "details": {"power": "running", "vmid": "100"}, "ready": true});
        let new = json!({"phase": "VMMissing", "details": {"vmid": "100"}, "ready": false});
        assert_eq!(
            merge_diff(&old, &new),
            Some(json!({"phase": "VMMissing", "details": {"power": null}, "ready": false}))
        );
        assert_eq!(merge_diff(&new, &new), None);
        assert_eq!(merge_diff(&json!({}), &json!({"a": null})), None);
        // Lists are replaced whole.
        assert_eq!(
            merge_diff(&json!({"l": [1, 2]}), &json!({"l": [2]})),
            Some(json!({"l": [2]}))
        );
    }

    #[test]
    fn applying_a_merge_diff_gives_the_new_value() {
        let cases = [
            (
                json!({"a": {"b": 1, "c": 2}, "d": 3}),
                json!({"a": {"c": 4}, "e": [5]}),
            ),
            (json!({"a": 1}), json!({"a": {"b": 2}})),
            (json!({"a": {"b": 2}}), json!({"a": "x"})),
        ];
        for (old, new) in cases {
            let mut patched = old.clone();
            if let Some(diff) = merge_diff(&old, &new) {
                json_patch::merge(&mut patched, &diff);
            }
            assert_eq!(patched, new, "{old} -> {new}");
        }
    }
}
