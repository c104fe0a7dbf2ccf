//! The CRD conversion webhook's work: a `ConversionReview` from the API server, each
//! object converted by the plugin that declares its kind (`conversion.convert`).
//!
//! The host keeps what is its own: `apiVersion` becomes the desired one, `metadata` is
//! untouched except the annotation that carries what the plugin asked to keep for the
//! way back (`preserved`), and the plugin sees and returns only `spec` and `status`.
//! That annotation is handed back to the plugin only if the manager wrote it for this
//! object ([`data`]).
use std::collections::BTreeMap;
use std::sync::Arc;

use hyperplug_runtime::Plugin;
use hyperplug_runtime::bindings::conversion::ConversionRequest;
use hyperplug_runtime::bindings::types::PluginError;
use kube::core::Status;
use kube::core::conversion::{
    ConversionRequest as ReviewRequest, ConversionResponse, ConversionReview,
};
use serde_json::{Map, Value};

use crate::controller::trust::ownership::OwnershipKeys;
use crate::metrics::Metrics;

pub mod data;

/// Where a conversion keeps what the other version cannot say, as Cluster API's own
/// conversions do.
pub const PRESERVED_ANNOTATION: &str = "cluster.x-k8s.io/conversion-data";

/// The plugins whose kinds have several versions, by `(group, kind)`.
#[derive(Clone)]
pub struct Conversions {
    by_kind: BTreeMap<(String, String), Plugin>,
    /// Where calls are counted and timed (`hyperplug_plugin_calls{call="conversion.convert"}`).
    metrics: Option<Arc<Metrics>>,
    /// What signs the conversion data kept on objects and verifies it before a plugin
    /// sees it: the manager's ownership key, which every replica and the controllers
    /// share (data one replica wrote is read back by another).
    keys: Arc<OwnershipKeys>,
}

impl Conversions {
    pub fn new(plugins: &[Plugin], keys: Arc<OwnershipKeys>) -> Self {
        let mut by_kind = BTreeMap::new();
        for plugin in plugins {
            let info = plugin.info();
            for kind in info.kinds.iter().filter(|k| k.versions.len() > 1) {
                by_kind.insert((info.group.clone(), kind.kind.clone()), plugin.clone());
            }
        }
        Self {
            by_kind,
            metrics: None,
            keys,
        }
    }

    /// Count and time the plugin calls in `metrics`.
    pub fn metered(self, metrics: Arc<Metrics>) -> Self {
        Self {
            metrics: Some(metrics),
            ..self
        }
    }

    /// Whether any kind needs the webhook.
    pub fn is_empty(&self) -> bool {
        self.by_kind.is_empty()
    }

    /// The answer to one review: every object converted, or a failure naming the first
    /// object that could not be (the API server then fails the client's request with
    /// that message).
    pub async fn review(&self, review: ConversionReview) -> ConversionReview {
        let mut request = match ReviewRequest::from_review(review) {
            Ok(request) => request,
            Err(_) => {
                return ConversionResponse::invalid(failure("the ConversionReview has no request"))
                    .into_review();
            }
        };
        let desired = request.desired_api_version.clone();
        // Which objects the API server converts, and at which versions: what tells a
        // write's own conversion from a cache's or a reader's.
        if tracing::enabled!(tracing::Level::DEBUG) {
            let objects: Vec<String> = request.objects.iter().map(describe_version).collect();
            tracing::debug!(%desired, ?objects, "conversion review");
        }
        // Each object is converted in place and moved to the answer: a review is held
        // once, whatever its size.
        let objects = std::mem::take(&mut request.objects);
        let mut converted = Vec::with_capacity(objects.len());
        for object in objects {
            match self.convert(object, &desired).await {
                Ok(object) => converted.push(object),
                Err(message) => {
                    // Anyone who reaches the port can post reviews: no log line per
                    // refusal at the default level (the API server reports it to its
                    // client, and the plugin-call metrics count it).
                    tracing::debug!(%message, "conversion refused");
                    return ConversionResponse::for_request(request)
                        .failure(failure(&message))
                        .into_review();
                }
            }
        }
        ConversionResponse::for_request(request)
            .success(converted)
            .into_review()
    }

    /// One object in `desired` (`group/version`).
    async fn convert(&self, object: Value, desired: &str) -> Result<Value, String> {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let kind = object["kind"].as_str().unwrap_or_default().to_string();
        let name = describe(&object);
        let (group, from) = api_version
            .split_once('/')
            .ok_or_else(|| format!("{name}: apiVersion `{api_version}` has no group"))?;
        let (to_group, to) = desired
            .split_once('/')
            .ok_or_else(|| format!("desired apiVersion `{desired}` has no group"))?;
        if to_group != group {
            return Err(format!(
                "{name}: cannot convert from group {group} to {to_group}"
            ));
        }
        let plugin = self
            .by_kind
            .get(&(group.to_string(), kind.clone()))
            .ok_or_else(|| format!("{name}: no loaded plugin converts {kind}.{group}"))?;
        let (from, to) = (from.to_string(), to.to_string());
        let mut out = object;
        out["apiVersion"] = Value::String(desired.to_string());
        if from == to {
            return Ok(out);
        }
        // A value the manager did not write for this object is left out (and logged):
        // the API server validated this object in `from` only, so a hand-written one
        // would bring `to`'s fields past `to`'s schema.
        let preserved = data::trusted(&self.keys, &out).await;
        // The plugin's part is taken out (its place kept) and replaced by its answer.
        let mut parts = Map::new();
        for key in ["spec", "status"] {
            if let Some(v) = out.get_mut(key) {
                parts.insert(key.into(), v.take());
            }
        }
        let req = ConversionRequest {
            kind,
            from_version: from,
            to_version: to,
            object: Value::Object(parts).to_string(),
            preserved,
        };
        let call = plugin.convert(&req);
        let result = match &self.metrics {
            Some(m) => {
                m.plugin_call(plugin.name(), "conversion.convert", call)
                    .await
            }
            None => call.await,
        };
        let result = match result {
            Ok(Ok(result)) => result,
            Ok(Err(e)) => return Err(format!("{name}: {}", plugin_error(&e))),
            Err(e) => return Err(format!("{name}: plugin {}: {e}", plugin.name())),
        };
        let mut parts: Map<String, Value> = serde_json::from_str(&result.object).map_err(|e| {
            format!(
                "{name}: plugin {} returned a conversion that is not a JSON object: {e}",
                plugin.name()
            )
        })?;
        for key in ["spec", "status"] {
            match parts.remove(key) {
                Some(v) => out[key] = v,
                None => {
                    if let Some(o) = out.as_object_mut() {
                        o.remove(key);
                    }
                }
            }
        }
        data::keep(&self.keys, &mut out, result.preserved);
        Ok(out)
    }
}

/// `describe(object)` at its `apiVersion` and `resourceVersion`.
fn describe_version(object: &Value) -> String {
    let field = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or("?");
    format!(
        "{} {} rv {}",
        describe(object),
        field("/apiVersion"),
        field("/metadata/resourceVersion")
    )
}

/// `Kind namespace/name` for messages.
fn describe(object: &Value) -> String {
    let kind = object["kind"].as_str().unwrap_or("object");
    let name = object.pointer("/metadata/name").and_then(Value::as_str);
    match (
        object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str),
        name,
    ) {
        (Some(ns), Some(name)) => format!("{kind} {ns}/{name}"),
        (None, Some(name)) => format!("{kind} {name}"),
        _ => kind.to_string(),
    }
}

fn plugin_error(e: &PluginError) -> String {
    match e {
        PluginError::InvalidSpec(i) if i.field.is_empty() => i.message.clone(),
        PluginError::InvalidSpec(i) => format!("{}: {}", i.field, i.message),
        PluginError::Terminal(t) => format!("{} ({})", t.message, t.reason),
        PluginError::Transient(t) => t.message.clone(),
    }
}

fn failure(message: &str) -> Status {
    Status::failure(message, "ConversionFailed")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_are_named_in_messages() {
        let object =
            json!({"kind": "ExampleMachine", "metadata": {"namespace": "ns", "name": "m"}});
        assert_eq!(describe(&object), "ExampleMachine ns/m");
    }
}
