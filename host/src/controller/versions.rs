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
    let spec = obj.data.get("spec").cloned().unwrap_or_else(|| json!({}));
    let speaks = &ctx.plugin.info().api_version;
    if version == speaks {
        return Ok(spec);
    }
    let req = ConversionRequest {
        kind: kind.to_string(),
        from_version: version.to_string(),
        to_version: speaks.clone(),
        object: json!({ "spec": spec }).to_string(),
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
    Ok(object
        .get_mut("spec")
        .map(Value::take)
        .unwrap_or_else(|| json!({})))
}
