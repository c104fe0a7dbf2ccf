//! The conversion data (`cluster.x-k8s.io/conversion-data`): what a plugin kept of an
//! object for the conversion back, which restores fields only the other version has.
//!
//! Anyone who may edit an object may write that annotation, and the API server
//! validates an object in the version it was sent in, never in the one the webhook
//! converts it to. Handed to the plugin as it is, a hand-written value would put into
//! the stored object fields the stored version's schema refuses (a `v1alpha1` write
//! carrying `v1alpha2` fields). So the manager vouches for what it writes: a MAC
//! (HMAC-SHA256 under the ownership key, `crate::controller::trust::ownership`) over the
//! object's group, kind, namespace, name and the data, kept beside it in
//! [`MAC_ANNOTATION`]. Data whose MAC does not verify for this very object (none,
//! edited, copied from another object, written by another provider or by a manager before this
//! check) is never handed to a plugin: the object converts as if it had none, and the
//! manager logs it.
//!
//! Bound to namespace and name rather than UID, like ownership ids: `clusterctl move`
//! (new UIDs) keeps it once the source's key is accepted, and on another object a copy
//! does not verify.
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::{Map, Value};

use super::PRESERVED_ANNOTATION;
use crate::controller::trust::ownership::OwnershipKeys;
use crate::telemetry::WarnLimit;

/// Where the MAC of an object's conversion data is kept.
pub const MAC_ANNOTATION: &str = "infrastructure.hyperplug.dev/conversion-data-mac";
/// Largest data the manager vouches for: the API server keeps at most 256 KiB of an
/// object's annotations, so a larger value is none it wrote (and is not hashed).
pub const MAX_BYTES: usize = 256 << 10;
/// The versioned domain of every MAC of conversion data.
const DOMAIN: &str = "hyperplug.dev/conversion-data/v1";

/// The object a value belongs to: what its MAC is bound to.
#[derive(Debug, Clone, Copy)]
pub struct Holder<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
}

impl<'a> Holder<'a> {
    /// The object of a conversion review (its group from `apiVersion`).
    pub fn of(object: &'a Value) -> Holder<'a> {
        let field = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or("");
        let api_version = field("/apiVersion");
        Holder {
            group: api_version.split_once('/').map_or("", |(g, _)| g),
            kind: field("/kind"),
            namespace: field("/metadata/namespace"),
            name: field("/metadata/name"),
        }
    }

    /// What the MAC covers: the domain, then group, kind, namespace and name each
    /// prefixed with its length (a posted review's names may hold anything, newlines
    /// too, and must not run into one another), then the data.
    fn message(&self, data: &str) -> Vec<u8> {
        let mut message = format!("{DOMAIN}\n");
        for part in [self.group, self.kind, self.namespace, self.name] {
            message.push_str(&format!("{}:{part}\n", part.len()));
        }
        message.push_str(data);
        message.into_bytes()
    }
}

/// Why an object's conversion data is not trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Untrusted {
    /// The annotation's value is not a string (only a posted review can say that).
    NotAString,
    /// Longer than [`MAX_BYTES`].
    TooLarge(usize),
    /// No MAC beside it (hand-written, or written by another provider or by a
    /// manager before this check).
    NoMac,
    /// A MAC that is not this data's for this object under a key the manager holds.
    DoesNotVerify,
}

impl std::fmt::Display for Untrusted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Untrusted::NotAString => write!(f, "its value is not a string"),
            Untrusted::TooLarge(n) => write!(f, "it is {n} bytes, more than {MAX_BYTES}"),
            Untrusted::NoMac => write!(f, "it has no {MAC_ANNOTATION}"),
            Untrusted::DoesNotVerify => write!(
                f,
                "its {MAC_ANNOTATION} does not verify: edited, copied from another object, or signed with a key this manager does not hold"
            ),
        }
    }
}

/// `data` (the annotation's value) if `mac` vouches for it on `holder`; none when
/// there is no data.
pub async fn check(
    keys: &OwnershipKeys,
    holder: &Holder<'_>,
    data: Option<&Value>,
    mac: Option<&Value>,
) -> Result<Option<String>, Untrusted> {
    let Some(data) = data else {
        return Ok(None);
    };
    let data = data.as_str().ok_or(Untrusted::NotAString)?;
    if data.len() > MAX_BYTES {
        return Err(Untrusted::TooLarge(data.len()));
    }
    let mac = mac.ok_or(Untrusted::NoMac)?;
    let mac = mac.as_str().ok_or(Untrusted::DoesNotVerify)?;
    match keys.verifies(&holder.message(data), mac).await {
        true => Ok(Some(data.to_string())),
        false => Err(Untrusted::DoesNotVerify),
    }
}

/// The conversion data of a review's `object` that may be handed to its plugin; data
/// that may not is logged and left out.
pub async fn trusted(keys: &OwnershipKeys, object: &Value) -> Option<String> {
    let annotations = object.pointer("/metadata/annotations");
    let data = annotations.and_then(|a| a.get(PRESERVED_ANNOTATION));
    let mac = annotations.and_then(|a| a.get(MAC_ANNOTATION));
    let holder = Holder::of(object);
    check(keys, &holder, data, mac).await.unwrap_or_else(|why| {
        untrusted(&holder, &why);
        None
    })
}

/// As [`trusted`], for an object of `group` and `kind` the manager read.
pub async fn trusted_in(
    keys: &OwnershipKeys,
    group: &str,
    kind: &str,
    obj: &DynamicObject,
) -> Option<String> {
    let annotations = obj.annotations();
    let value = |key: &str| annotations.get(key).map(|v| Value::String(v.clone()));
    let (data, mac) = (value(PRESERVED_ANNOTATION), value(MAC_ANNOTATION));
    let (namespace, name) = (obj.namespace().unwrap_or_default(), obj.name_any());
    let holder = Holder {
        group,
        kind,
        namespace: &namespace,
        name: &name,
    };
    check(keys, &holder, data.as_ref(), mac.as_ref())
        .await
        .unwrap_or_else(|why| {
            untrusted(&holder, &why);
            None
        })
}

/// Keep `preserved` on `object` with its MAC, or drop both when there is nothing to
/// keep (and any value the object came with, trusted or not).
pub fn keep(keys: &OwnershipKeys, object: &mut Value, preserved: Option<String>) {
    let mac = preserved
        .as_deref()
        .map(|data| keys.mac(&Holder::of(object).message(data)));
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    match (preserved, mac) {
        (Some(data), Some(mac)) => {
            let annotations = metadata
                .entry("annotations")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(a) = annotations.as_object_mut() {
                a.insert(PRESERVED_ANNOTATION.into(), Value::String(data));
                a.insert(MAC_ANNOTATION.into(), Value::String(mac));
            }
        }
        _ => {
            let now_empty = metadata
                .get_mut("annotations")
                .and_then(Value::as_object_mut)
                .map(|a| {
                    a.remove(PRESERVED_ANNOTATION);
                    a.remove(MAC_ANNOTATION);
                    a.is_empty()
                });
            if now_empty == Some(true) {
                metadata.remove("annotations");
            }
        }
    }
}

/// Log untrusted data: each time at debug, and a warning per object at most every
/// [`SAME_OBJECT_EVERY`], at most [`WARNINGS_PER_MINUTE`] in all: a stored object
/// carrying such data is converted on every read, and anyone who reaches the webhook
/// can post objects of any name.
fn untrusted(holder: &Holder<'_>, why: &Untrusted) {
    static WARNED: WarnLimit = untrusted_warnings();
    let Holder {
        group,
        kind,
        namespace,
        name,
    } = holder;
    let object = format!("{kind}.{group} {namespace}/{name}");
    tracing::debug!(%object, %why, "ignoring untrusted {PRESERVED_ANNOTATION}");
    if let Some(not_logged) = WARNED.may_warn(&object, Instant::now()) {
        tracing::warn!(
            %object,
            %why,
            not_logged,
            "ignoring the {PRESERVED_ANNOTATION} annotation: the manager did not write it for this object, so the object converts as if it had none (what it would restore of the other version is not applied)"
        );
    }
}

/// Warnings of an object's data at most this often.
const SAME_OBJECT_EVERY: Duration = Duration::from_secs(600);
/// Warnings at most this many a minute, whatever the objects.
const WARNINGS_PER_MINUTE: u32 = 10;

/// The bound on warnings of untrusted data (a function, not a constant: each call is a
/// limiter of its own, the log's and each test's).
const fn untrusted_warnings() -> WarnLimit {
    WarnLimit::new(Duration::from_secs(60), WARNINGS_PER_MINUTE).per_subject(SAME_OBJECT_EVERY)
}

#[cfg(test)]
mod tests;
