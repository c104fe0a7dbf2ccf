//! Where a tag's pin is kept: the digest the tag named when it was first pulled, which
//! the tag is held to afterwards. A pin that is lost lets a re-pointed tag in as if it
//! were new, so it must last as long as the installation, not as long as a cache.
//!
//! - `hyperplug run` keeps its pins in a ConfigMap of the manager's own namespace
//!   (`--plugin-pins-configmap`, default `$POD_NAMESPACE/hyperplug-plugin-pins`): the
//!   release's cache directory is an emptyDir, which a pod's restart empties.
//! - Commands that run without a cluster (`inspect`, `crds`, `conformance`) keep them in
//!   the cache directory (`cache.rs`).
//!
//! The ConfigMap has one key, `pins`: a line per tag, `oci://REGISTRY/REPOSITORY:TAG
//! sha256:…`, oldest first, so an operator reads (and may edit) it with kubectl. It is
//! written with the resourceVersion it was read at (optimistic concurrency: replicas
//! starting together pin one digest, never each their own), and is kept under
//! [`MAX_BYTES`]: a manager loads a handful of tags, so only years of upgrades fill it,
//! and then the oldest pins (of tags no longer loaded, in practice) are dropped, each
//! logged.
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};

use super::cache::Cache;
use super::{FetchError, OciRef};

/// Name of the pins ConfigMap unless `--plugin-pins-configmap` says otherwise.
pub const DEFAULT_PINS_CONFIGMAP: &str = "hyperplug-plugin-pins";
/// The ConfigMap's data key.
const KEY: &str = "pins";
/// Most bytes of pins kept (a pin line is about 150 bytes: some 400 pins).
pub const MAX_BYTES: usize = 64 << 10;

/// Where `fetch` reads and keeps tag pins.
pub enum Pins {
    /// In the cache directory.
    Cache,
    /// In a ConfigMap of the manager's namespace.
    ConfigMap(Box<ConfigMapPins>),
    /// Nowhere the manager could name (its namespace unknown, the API unreachable): why.
    /// Only a tag needs a pin, so this fails only a plugin named by tag.
    Unavailable(String),
}

/// What writing a pin did.
#[derive(Debug, PartialEq, Eq)]
pub enum Set {
    Written,
    /// The pin changed since it was read (another replica pinned the tag): now this.
    Changed(Option<String>),
    /// Another writer wrote the pins between this one's read and write (another tag's,
    /// or this one's): nothing written, try again (the try reads afresh).
    Lost,
}

impl Pins {
    /// The digest `oci`'s `tag` was pinned to.
    pub(super) async fn get(
        &self,
        cache: &Cache,
        oci: &OciRef,
        tag: &str,
    ) -> Result<Option<String>, FetchError> {
        match self {
            Pins::Cache => cache.pin(oci.registry(), oci.repository(), tag),
            Pins::ConfigMap(pins) => {
                let (_, lines) = pins.read(oci).await?;
                Ok(pinned(&lines, &key(oci, tag)))
            }
            Pins::Unavailable(why) => Err(unavailable(oci, why)),
        }
    }

    /// Pin `oci`'s `tag` to `digest`, if it is still pinned to `previous`: one try, which
    /// the caller repeats while it is [`Set::Lost`].
    pub(super) async fn set(
        &self,
        cache: &Cache,
        oci: &OciRef,
        tag: &str,
        previous: Option<&str>,
        digest: &str,
    ) -> Result<Set, FetchError> {
        match self {
            Pins::Cache => {
                let current = cache.pin(oci.registry(), oci.repository(), tag)?;
                if current.as_deref() != previous {
                    return Ok(Set::Changed(current));
                }
                cache.set_pin(oci.registry(), oci.repository(), tag, digest)?;
                Ok(Set::Written)
            }
            Pins::ConfigMap(pins) => pins.set(oci, &key(oci, tag), previous, digest).await,
            Pins::Unavailable(why) => Err(unavailable(oci, why)),
        }
    }
}

fn unavailable(oci: &OciRef, why: &str) -> FetchError {
    FetchError::Pins {
        reference: oci.to_string(),
        detail: why.to_string(),
    }
}

/// A pin's line key: the reference with its tag spelled out (a reference without one
/// means `latest`).
fn key(oci: &OciRef, tag: &str) -> String {
    format!("oci://{}/{}:{tag}", oci.registry(), oci.repository())
}

/// Pins kept in the ConfigMap `namespace/name`.
pub struct ConfigMapPins {
    api: Api<ConfigMap>,
    namespace: String,
    name: String,
}

impl ConfigMapPins {
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> ConfigMapPins {
        ConfigMapPins {
            api: Api::namespaced(client, namespace),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    fn error(&self, oci: &OciRef, detail: impl std::fmt::Display) -> FetchError {
        FetchError::Pins {
            reference: oci.to_string(),
            detail: format!(
                "ConfigMap {}/{} (--plugin-pins-configmap): {detail}",
                self.namespace, self.name
            ),
        }
    }

    /// The ConfigMap (absent: none yet) and its pins.
    async fn read(
        &self,
        oci: &OciRef,
    ) -> Result<(Option<ConfigMap>, Vec<(String, String)>), FetchError> {
        let map = self.api.get_opt(&self.name).await.map_err(|e| {
            self.error(
                oci,
                format!("{e}; the manager needs get, create and update on it (deploy/rbac.yaml)"),
            )
        })?;
        let text = map
            .as_ref()
            .and_then(|m| m.data.as_ref()?.get(KEY).cloned())
            .unwrap_or_default();
        let pins = parse(&text).map_err(|e| self.error(oci, e))?;
        Ok((map, pins))
    }

    async fn set(
        &self,
        oci: &OciRef,
        key: &str,
        previous: Option<&str>,
        digest: &str,
    ) -> Result<Set, FetchError> {
        let (map, mut lines) = self.read(oci).await?;
        let current = pinned(&lines, key);
        if current.as_deref() != previous {
            return Ok(Set::Changed(current));
        }
        lines.retain(|(k, _)| k != key);
        lines.push((key.to_string(), digest.to_string()));
        let dropped = bound(&mut lines, MAX_BYTES).map_err(|e| self.error(oci, e))?;
        let data = Some([(KEY.to_string(), render(&lines))].into());
        // The resourceVersion read goes along: a write in between is a conflict.
        let written = match map {
            Some(mut map) => {
                map.data = data;
                self.api
                    .replace(&self.name, &PostParams::default(), &map)
                    .await
            }
            None => {
                let map = ConfigMap {
                    metadata: crate::kept::meta(
                        &self.name,
                        "The digest each oci:// plugin tag named when first pulled: a tag that names another later is refused. Remove a line to pin that tag again.",
                    ),
                    data,
                    ..Default::default()
                };
                self.api.create(&PostParams::default(), &map).await
            }
        };
        match written {
            Ok(_) => {
                for (reference, digest) in &dropped {
                    tracing::warn!(%reference, %digest, configmap = %format!("{}/{}", self.namespace, self.name), max_bytes = MAX_BYTES, "dropped the oldest tag pin to keep the pins under their bound");
                }
                Ok(Set::Written)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Set::Lost),
            Err(e) => Err(self.error(
                oci,
                format!("{e}; the manager needs get, create and update on it (deploy/rbac.yaml)"),
            )),
        }
    }
}

/// The pin lines, oldest first; a line that is not `oci://… sha256:…` is an error
/// naming it (only an operator edits the ConfigMap: refusing beats guessing).
fn parse(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut pins = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match line.split_once(' ') {
            Some((reference, digest))
                if reference.starts_with("oci://") && super::is_sha256(digest.trim()) =>
            {
                pins.push((reference.to_string(), digest.trim().to_string()));
            }
            _ => {
                return Err(format!(
                    "key `{KEY}`, line {}: `{line}` is not `oci://REGISTRY/REPOSITORY:TAG sha256:DIGEST`; fix or remove it",
                    n + 1
                ));
            }
        }
    }
    Ok(pins)
}

fn pinned(pins: &[(String, String)], key: &str) -> Option<String> {
    pins.iter().find(|(k, _)| k == key).map(|(_, d)| d.clone())
}

fn render(pins: &[(String, String)]) -> String {
    pins.iter().map(|(r, d)| format!("{r} {d}\n")).collect()
}

/// Drop the oldest pins until the lines fit in `max` bytes; the newest (last) is kept
/// or the whole write refused. The pins dropped.
fn bound(pins: &mut Vec<(String, String)>, max: usize) -> Result<Vec<(String, String)>, String> {
    let size = |p: &(String, String)| p.0.len() + p.1.len() + 2;
    let mut total: usize = pins.iter().map(size).sum();
    let mut dropped = Vec::new();
    while total > max && pins.len() > 1 {
        let oldest = pins.remove(0);
        total -= size(&oldest);
        dropped.push(oldest);
    }
    if total > max {
        return Err(format!(
            "one pin of {total} bytes is over the bound of {max} bytes"
        ));
    }
    Ok(dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const B: &str = "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

    #[test]
    fn pins_read_back_as_written_and_a_bad_line_is_named() {
        let pins = vec![
            ("oci://r:5000/team/p:1.0".to_string(), A.to_string()),
            ("oci://r:5000/team/p:1.1".to_string(), B.to_string()),
        ];
        assert_eq!(parse(&render(&pins)).unwrap(), pins);
        assert_eq!(parse("").unwrap(), vec![]);
        let err = parse(&format!("oci://r/p:1 {A}\nr/p:2 {B}\n")).unwrap_err();
        assert!(err.contains("line 2") && err.contains("r/p:2"), "{err}");
        assert!(parse("oci://r/p:1 sha256:abc").is_err());
    }

    #[test]
    fn the_oldest_pins_go_first_when_over_the_bound() {
        let line = |i: usize| (format!("oci://r/p:{i}"), A.to_string());
        let each = line(0).0.len() + A.len() + 2;
        let mut pins: Vec<_> = (0..5).map(line).collect();
        let dropped = bound(&mut pins, 3 * each).unwrap();
        assert_eq!(dropped, vec![line(0), line(1)]);
        assert_eq!(pins, vec![line(2), line(3), line(4)]);
        assert!(bound(&mut vec![line(0)], each - 1).is_err());
    }
}
