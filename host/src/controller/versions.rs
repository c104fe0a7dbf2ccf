//! Which API version the manager speaks to the API server, and which to the plugin.
//!
//! The manager reads, watches and writes each kind in its storage version: the API
//! server then converts nothing for it (every watch event and patch in another version
//! would be a conversion webhook round trip). Metadata and the host's status fields are
//! the same in every version. Only the spec a call hands the plugin must be in the
//! plugin's `api-version`: converted here, in process, by the plugin itself.
use hyperplug_runtime::bindings::conversion::ConversionRequest;
use hyperplug_runtime::bindings::identity::{KindInfo, PluginInfo};
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::{Value, json};

use super::conditions::reasons;
use super::context::Context;
use super::error::Error;
use super::outcome::{self, Outcome};
use crate::conversion::PRESERVED_ANNOTATION;

/// The version objects of `kind` are stored in (the plugin's `api-version` if it marks
/// none, which the loader does not let happen).
pub fn stored<'a>(info: &'a PluginInfo, kind: &'a KindInfo) -> &'a str {
    kind.versions
        .iter()
        .find(|v| v.storage)
        .map_or(info.api_version.as_str(), |v| v.name.as_str())
}

/// `obj`'s spec (read in its stored version `version`) as the plugin's calls speak it,
/// as JSON. `kind` names the object's kind (a machine's InfraCluster is another kind).
pub async fn spec_for_plugin(
    ctx: &Context,
    kind: &str,
    version: &str,
    obj: &DynamicObject,
) -> Result<Value, Error> {
    for_plugin(ctx, kind, version, obj, false)
        .await
        .map(|(spec, _)| spec)
}

/// As [`spec_for_plugin`], with the plugin's own status fields (those its status schema
/// of `version` declares, as `plugin-status`) when `with_status` and the object has any:
/// what another provider left there, for adopting what it made.
pub async fn for_plugin(
    ctx: &Context,
    kind: &str,
    version: &str,
    obj: &DynamicObject,
    with_status: bool,
) -> Result<(Value, Option<Value>), Error> {
    let spec = obj.data.get("spec").cloned().unwrap_or_else(|| json!({}));
    let status = if with_status {
        plugin_status(ctx.plugin.info(), kind, version, obj)
    } else {
        None
    };
    let speaks = &ctx.plugin.info().api_version;
    if version == speaks {
        return Ok((spec, status));
    }
    let mut object = json!({ "spec": spec });
    if let Some(s) = &status {
        object["status"] = s.clone();
    }
    let req = ConversionRequest {
        kind: kind.to_string(),
        from_version: version.to_string(),
        to_version: speaks.clone(),
        object: object.to_string(),
        // What an earlier conversion kept for this version (e.g. a field only the
        // version the user wrote can say).
        preserved: obj.annotations().get(PRESERVED_ANNOTATION).cloned(),
    };
    let name = ctx.plugin.name();
    let result = ctx
        .metrics
        .plugin_call(name, "conversion.convert", ctx.plugin.convert(&req))
        .await;
    let converted = match outcome::of(name, "conversion.convert", result) {
        Outcome::Done(converted) => converted,
        Outcome::Failed(e) => return Err(e),
    };
    let mut object: Value =
        serde_json::from_str(&converted.object).map_err(|e| Error::Terminal {
            reason: reasons::INVALID_PLUGIN_OUTPUT.into(),
            message: format!("plugin {name} converted {kind} to {speaks} as no JSON object: {e}"),
        })?;
    let spec = object
        .get_mut("spec")
        .map(Value::take)
        .unwrap_or_else(|| json!({}));
    let status = status.and(object.get_mut("status").map(Value::take));
    Ok((spec, status))
}

/// The fields of `obj`'s status that the plugin's status schema of `kind` in `version`
/// declares, as a JSON object; none when it declares none or the object has none.
fn plugin_status(
    info: &PluginInfo,
    kind: &str,
    version: &str,
    obj: &DynamicObject,
) -> Option<Value> {
    let schema = info
        .kinds
        .iter()
        .find(|k| k.kind == kind)?
        .versions
        .iter()
        .find(|v| v.name == version)?
        .status_schema
        .as_deref()?;
    let schema: Value = serde_json::from_str(schema).ok()?;
    let declared = schema.get("properties")?.as_object()?;
    let status = obj.data.get("status")?.as_object()?;
    let mine: serde_json::Map<String, Value> = status
        .iter()
        .filter(|(k, _)| declared.contains_key(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    (!mine.is_empty()).then_some(Value::Object(mine))
}
