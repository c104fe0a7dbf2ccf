//! Which API version the manager speaks to the API server, and which to the plugin.
//!
//! The manager reads, watches and writes each kind in its storage version: the API
//! server then converts nothing for it (every watch event and patch in another version
//! would be a conversion webhook round trip). Metadata and the host's status fields are
//! the same in every version. Only the spec a call hands the plugin must be in the
//! plugin's `api-version`: converted here, in process, by the plugin itself.
//!
//! Every reconcile hands the plugin its object's spec and its cluster's, which seldom
//! change, and the machines of a MachineDeployment share one spec: a conversion is
//! remembered by what it was asked ([`SpecConversions`]), so most reconciles make none.
use std::num::NonZeroUsize;
use std::sync::Mutex;

use hyperplug_runtime::Plugin;
use hyperplug_runtime::bindings::conversion::{ConversionRequest, Converted};
use hyperplug_runtime::bindings::identity::{KindInfo, PluginInfo};
use kube::api::DynamicObject;
use serde_json::{Value, json};

use lru::LruCache;
use sha2::{Digest, Sha256};

use super::outcome::{self, Outcome};
use crate::controller::error::Error;
use crate::controller::trust::ownership::OwnershipKeys;
use crate::controller::write::conditions::reasons;
use crate::conversion::data;
use crate::metrics::Metrics;

/// The version objects of `kind` are stored in (the plugin's `api-version` if it marks
/// none, which the loader does not let happen).
pub fn stored<'a>(info: &'a PluginInfo, kind: &'a KindInfo) -> &'a str {
    kind.versions
        .iter()
        .find(|v| v.storage)
        .map_or(info.api_version.as_str(), |v| v.name.as_str())
}

/// What converting a spec for the plugin's calls takes: the plugin, the keys that
/// vouch for the conversion data the manager kept, the conversions remembered, and the
/// metrics its calls are counted in.
#[derive(Clone, Copy)]
pub struct Converter<'a> {
    pub plugin: &'a Plugin,
    pub keys: &'a OwnershipKeys,
    pub specs: &'a SpecConversions,
    pub metrics: &'a Metrics,
}

/// `obj`'s spec (read in its stored version `version`) as the plugin's calls speak it,
/// as JSON. `kind` names the object's kind (a machine's InfraCluster is another kind).
pub async fn spec_for_plugin(
    with: Converter<'_>,
    kind: &str,
    version: &str,
    obj: &DynamicObject,
) -> Result<Value, Error> {
    for_plugin(with, kind, version, obj, false)
        .await
        .map(|(spec, _)| spec)
}

/// As [`spec_for_plugin`], with the plugin's own status fields (those its status schema
/// of `version` declares, as `plugin-status`) when `with_status` and the object has any:
/// what another provider left there, for adopting what it made.
pub async fn for_plugin(
    with: Converter<'_>,
    kind: &str,
    version: &str,
    obj: &DynamicObject,
    with_status: bool,
) -> Result<(Value, Option<Value>), Error> {
    let spec = obj.data.get("spec").cloned().unwrap_or_else(|| json!({}));
    let status = if with_status {
        plugin_status(with.plugin.info(), kind, version, obj)
    } else {
        None
    };
    let speaks = &with.plugin.info().api_version;
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
        // version the user wrote can say), if the manager kept it for this object: a
        // tenant's own value would hand the plugin fields no schema checked.
        preserved: data::trusted_in(with.keys, &with.plugin.info().group, kind, obj).await,
    };
    let name = with.plugin.name();
    let key = SpecConversions::key(&req);
    let converted = match with.specs.get(&key) {
        Some(converted) => converted,
        None => {
            let result = with
                .metrics
                .plugin_call(name, "conversion.convert", with.plugin.convert(&req))
                .await;
            match outcome::of(name, "conversion.convert", result) {
                Outcome::Done(converted) => {
                    with.specs.put(key, &converted);
                    converted
                }
                Outcome::Failed(e) => return Err(e),
            }
        }
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

/// Conversions the plugin made for calls, by a digest of the request: a plugin's
/// conversion is a function of what it is asked (a fresh sandbox each call, no clock
/// it is meant to read), so the same request gets the same answer without a call.
/// Bounded: [`SpecConversions::ENTRIES`] answers of at most
/// [`SpecConversions::MAX_BYTES`] each (a larger one is not kept).
pub struct SpecConversions {
    answers: Mutex<LruCache<[u8; 32], Converted>>,
}

impl Default for SpecConversions {
    fn default() -> Self {
        let entries = NonZeroUsize::new(Self::ENTRIES).expect("ENTRIES is not zero");
        SpecConversions {
            answers: Mutex::new(LruCache::new(entries)),
        }
    }
}

impl SpecConversions {
    /// Answers kept: a spec per MachineDeployment, cluster and template in use, with room.
    pub const ENTRIES: usize = 256;
    /// Largest answer kept (a machine's spec is well under 1 KiB).
    pub const MAX_BYTES: usize = 16 << 10;

    fn key(req: &ConversionRequest) -> [u8; 32] {
        let mut h = Sha256::new();
        let preserved = req.preserved.as_deref();
        for part in [
            Some(req.kind.as_str()),
            Some(req.from_version.as_str()),
            Some(req.to_version.as_str()),
            Some(req.object.as_str()),
            preserved,
        ] {
            // Length-prefixed, so no two requests share a digest input; a missing
            // `preserved` differs from an empty one.
            match part {
                Some(p) => {
                    h.update((p.len() as u64).to_le_bytes());
                    h.update(p.as_bytes());
                }
                None => h.update(u64::MAX.to_le_bytes()),
            }
        }
        h.finalize().into()
    }

    fn get(&self, key: &[u8; 32]) -> Option<Converted> {
        self.answers
            .lock()
            .expect("spec conversions poisoned")
            .get(key)
            .cloned()
    }

    fn put(&self, key: [u8; 32], converted: &Converted) {
        let size = converted.object.len() + converted.preserved.as_ref().map_or(0, String::len);
        if size > Self::MAX_BYTES {
            return;
        }
        self.answers
            .lock()
            .expect("spec conversions poisoned")
            .put(key, converted.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(object: &str, preserved: Option<&str>) -> ConversionRequest {
        ConversionRequest {
            kind: "InfraMachine".into(),
            from_version: "v1alpha2".into(),
            to_version: "v1alpha1".into(),
            object: object.into(),
            preserved: preserved.map(str::to_string),
        }
    }

    fn answer(object: &str) -> Converted {
        Converted {
            object: object.into(),
            preserved: None,
        }
    }

    #[test]
    fn a_conversion_is_remembered_by_all_it_was_asked() {
        let specs = SpecConversions::default();
        let asked = request(r#"{"spec":{"a":1}}"#, None);
        let key = SpecConversions::key;
        assert!(specs.get(&key(&asked)).is_none());
        specs.put(key(&asked), &answer(r#"{"spec":{"b":1}}"#));
        assert_eq!(
            specs.get(&key(&asked)).unwrap().object,
            r#"{"spec":{"b":1}}"#
        );
        // Anything else asked is another conversion.
        assert!(
            specs
                .get(&key(&request(r#"{"spec":{"a":2}}"#, None)))
                .is_none()
        );
        assert!(
            specs
                .get(&key(&request(r#"{"spec":{"a":1}}"#, Some(""))))
                .is_none()
        );
        let mut back = asked.clone();
        back.to_version = "v1alpha3".into();
        assert!(specs.get(&key(&back)).is_none());
        // An answer too large to keep is not kept.
        let big = request(r#"{"spec":{"big":1}}"#, None);
        specs.put(
            key(&big),
            &answer(&"x".repeat(SpecConversions::MAX_BYTES + 1)),
        );
        assert!(specs.get(&key(&big)).is_none());
    }
}
