//! Ownership that a user cannot forge. The ownership id handed to plugins (their
//! marker on what they create) is kept in the annotation
//! `infrastructure.hyperplug.dev/ownership-id` so it survives `clusterctl move`, which
//! gives objects new UIDs. Anyone who may edit an object may edit its annotations, so
//! the value carries a MAC: `<id>.<mac>`, where `mac` is HMAC-SHA256 under a key only
//! the manager holds, over the object's group and kind, namespace, name and the id.
//! A value copied to another object, or edited, does not verify; nothing is adopted,
//! created, deleted, withdrawn or released for it.
//!
//! The key is a Secret in the manager's namespace, created on first start. A manager
//! verifies with its own key (`key`) and with any `accept.*` keys the Secret holds, so
//! objects moved from a manager with another key verify once that key is copied in.
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::{Api, Client, ResourceExt};
use ring::hmac;

use crate::controller::objects::OWNERSHIP_ID_ANNOTATION;
use crate::controller::schedule::requeue::{RECHECK, RECHECK_AFTER_KEYS_REFRESH};

/// The Secret data key of the key that signs.
pub const SIGNING_KEY: &str = "key";
/// Secret data keys starting with this verify only (keys of other managers).
pub const ACCEPTED_KEY_PREFIX: &str = "accept.";
/// Condition reason of an object whose ownership id does not verify.
pub const OWNERSHIP_UNVERIFIED: &str = "OwnershipUnverified";
/// Shortest key accepted.
const MIN_KEY_BYTES: usize = 32;
/// Re-read the key Secret at most this often (when a value does not verify: the
/// operator may have just copied a key in).
const REFRESH_EVERY: Duration = Duration::from_secs(5);
/// The versioned domain of every MAC.
const DOMAIN: &str = "hyperplug.dev/ownership-id/v1";

/// What the object's ownership id proves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ownership {
    /// The plugin may act for `id`. `write` is the annotation value to store, when it
    /// is absent, unsigned or signed with a key that only verifies.
    Proven { id: String, write: Option<String> },
    /// It proves nothing: why, for the condition, and when to look again: [`RECHECK`],
    /// or sooner when the keys it was checked against were read from the Secret
    /// within the last few seconds and could not be re-read yet (a key copied in just
    /// before `clusterctl move` must not leave the moved objects unverified for a
    /// minute).
    Unproven { message: String, recheck: Duration },
}

/// The keys, as last read from the Secret.
struct Keyring {
    signing: hmac::Key,
    accepted: Vec<hmac::Key>,
}

/// The manager's ownership keys, from `namespace/name`. They also sign the conversion
/// data the webhook keeps on objects (`crate::conversion`), under a domain of its own.
pub struct OwnershipKeys {
    /// Where the keys are re-read from; none for keys held in memory only.
    api: Option<Api<Secret>>,
    namespace: String,
    name: String,
    ring: RwLock<Arc<Keyring>>,
    refreshed: tokio::sync::Mutex<Instant>,
}

impl OwnershipKeys {
    /// Read the key Secret, creating it with a fresh random key if it is absent. Of
    /// replicas racing to create it, one create wins and all read the winner's.
    pub async fn load_or_create(
        client: Client,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<OwnershipKeys> {
        let api: Api<Secret> = Api::namespaced(client, namespace);
        let what = || format!("ownership key Secret {namespace}/{name}");
        let secret = match api.get_opt(name).await.with_context(what)? {
            Some(secret) => secret,
            None => {
                let key: [u8; 32] = rand::random();
                let secret = Secret {
                    metadata: crate::kept::meta(
                        name,
                        "The key that makes ownership ids unforgeable. Keep it (and back it up): without it no object's ownership verifies. Copy it to a manager that takes objects over by clusterctl move.",
                    ),
                    data: Some([(SIGNING_KEY.into(), ByteString(key.to_vec()))].into()),
                    type_: Some("Opaque".into()),
                    ..Default::default()
                };
                match api.create(&PostParams::default(), &secret).await {
                    Ok(created) => {
                        tracing::info!(secret = %format!("{namespace}/{name}"), "created the ownership key");
                        created
                    }
                    Err(kube::Error::Api(s)) if s.code == 409 => {
                        api.get(name).await.with_context(what)?
                    }
                    Err(e) => return Err(e).with_context(what),
                }
            }
        };
        let ring = keyring(&secret).with_context(what)?;
        Ok(OwnershipKeys {
            api: Some(api),
            namespace: namespace.into(),
            name: name.into(),
            ring: RwLock::new(Arc::new(ring)),
            refreshed: tokio::sync::Mutex::new(Instant::now()),
        })
    }

    /// A fresh random key held in this process only, with no Secret behind it: for a
    /// webhook served without a manager (tests, tools), whose MACs verify nowhere else.
    pub fn in_memory() -> OwnershipKeys {
        let key: [u8; 32] = rand::random();
        OwnershipKeys {
            api: None,
            namespace: String::new(),
            name: "(in memory)".into(),
            ring: RwLock::new(Arc::new(Keyring {
                signing: hmac::Key::new(hmac::HMAC_SHA256, &key),
                accepted: vec![],
            })),
            refreshed: tokio::sync::Mutex::new(Instant::now()),
        }
    }

    /// `namespace/name` of the key Secret.
    pub fn secret(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn ring(&self) -> Arc<Keyring> {
        self.ring.read().expect("keyring").clone()
    }

    /// The annotation value proving `id` for this object.
    pub fn sign(&self, kind: &ApiResource, obj: &DynamicObject, id: &str) -> String {
        let tag = hmac::sign(&self.ring().signing, &message(kind, obj, id));
        format!("{id}.{}", URL_SAFE_NO_PAD.encode(tag.as_ref()))
    }

    /// What `obj`'s ownership id proves. Absent, it is minted from the object's own
    /// UID (assigned by the API server, so unforgeable); unsigned, it is accepted only
    /// if it is that UID; signed, only if the MAC verifies for this very object.
    pub async fn verify(&self, kind: &ApiResource, obj: &DynamicObject) -> Ownership {
        let own_uid = obj.uid().unwrap_or_default();
        let value = obj
            .annotations()
            .get(OWNERSHIP_ID_ANNOTATION)
            .filter(|v| !v.is_empty());
        let Some(value) = value else {
            return Ownership::Proven {
                write: Some(self.sign(kind, obj, &own_uid)),
                id: own_uid,
            };
        };
        let Some((id, mac)) = value.split_once('.') else {
            if *value == own_uid {
                // Written before ids were signed, by this object itself.
                return Ownership::Proven {
                    write: Some(self.sign(kind, obj, &own_uid)),
                    id: own_uid,
                };
            }
            return Ownership::Unproven {
                message: self.unproven_message(
                    kind,
                    obj,
                    "is unsigned and is not this object's own UID",
                ),
                recheck: RECHECK,
            };
        };
        let Ok(mac) = URL_SAFE_NO_PAD.decode(mac) else {
            return Ownership::Unproven {
                message: self.unproven_message(kind, obj, "is malformed"),
                recheck: RECHECK,
            };
        };
        let recheck = match self.signer(&message(kind, obj, id), &mac).await {
            Ok(Signer::Signing) => {
                return Ownership::Proven {
                    id: id.into(),
                    write: None,
                };
            }
            Ok(Signer::Accepted) => {
                return Ownership::Proven {
                    write: Some(self.sign(kind, obj, id)),
                    id: id.into(),
                };
            }
            Err(NotSigned { keys_readable_in }) => {
                keys_readable_in.map_or(RECHECK, |d| (d + RECHECK_AFTER_KEYS_REFRESH).min(RECHECK))
            }
        };
        Ownership::Unproven {
            message: self.unproven_message(
                kind,
                obj,
                "does not verify: it was copied from another object or edited, or it was signed by a manager with another ownership key",
            ),
            recheck,
        }
    }

    /// The MAC (base64url) of `message` under the signing key: for another value the
    /// manager vouches for, `message` starting with a domain of its own.
    pub fn mac(&self, message: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(hmac::sign(&self.ring().signing, message).as_ref())
    }

    /// Whether `mac` (base64url, as [`OwnershipKeys::mac`] makes it) is `message`'s
    /// under the signing key or an accepted one.
    pub async fn verifies(&self, message: &[u8], mac: &str) -> bool {
        match URL_SAFE_NO_PAD.decode(mac) {
            Ok(mac) => self.signer(message, &mac).await.is_ok(),
            Err(_) => false,
        }
    }

    /// Which key made `mac` over `message`; the Secret is re-read once when none did
    /// (the operator may have just copied a key in).
    async fn signer(&self, message: &[u8], mac: &[u8]) -> Result<Signer, NotSigned> {
        let ring = self.ring();
        if let Some(signer) = ring.signer(message, mac) {
            return Ok(signer);
        }
        match self.refresh().await {
            Refresh::Read => self.ring().signer(message, mac).ok_or(NotSigned {
                keys_readable_in: None,
            }),
            Refresh::TooSoon(wait) => Err(NotSigned {
                keys_readable_in: Some(wait),
            }),
            Refresh::Unavailable => Err(NotSigned {
                keys_readable_in: None,
            }),
        }
    }

    /// Re-read the key Secret (at most every few seconds).
    async fn refresh(&self) -> Refresh {
        let Some(api) = &self.api else {
            return Refresh::Unavailable;
        };
        let mut last = self.refreshed.lock().await;
        let since = last.elapsed();
        if since < REFRESH_EVERY {
            return Refresh::TooSoon(REFRESH_EVERY - since);
        }
        *last = Instant::now();
        match api.get(&self.name).await {
            Ok(secret) => match keyring(&secret) {
                Ok(ring) => {
                    *self.ring.write().expect("keyring") = Arc::new(ring);
                    Refresh::Read
                }
                Err(e) => {
                    tracing::warn!(secret = %self.secret(), error = %e, "ignoring an unusable ownership key Secret");
                    Refresh::Unavailable
                }
            },
            Err(e) => {
                tracing::warn!(secret = %self.secret(), error = %e, "cannot re-read the ownership key");
                Refresh::Unavailable
            }
        }
    }

    fn unproven_message(&self, kind: &ApiResource, obj: &DynamicObject, why: &str) -> String {
        format!(
            "the annotation {OWNERSHIP_ID_ANNOTATION} of {} {}/{} {why}. Nothing is created, adopted or deleted for it. \
             After clusterctl move from a manager with another key: copy the `{SIGNING_KEY}` of that manager's key Secret into this manager's, {}, as an `{ACCEPTED_KEY_PREFIX}<name>` entry. \
             A copy that should own only what it creates itself: remove the annotation.",
            kind.kind,
            obj.namespace().unwrap_or_default(),
            obj.name_any(),
            self.secret(),
        )
    }
}

/// The key that verified a MAC.
enum Signer {
    Signing,
    Accepted,
}

/// No key verified a MAC; `keys_readable_in`: the keys checked were read from the
/// Secret so lately that they could not be re-read yet, and may be in this long.
struct NotSigned {
    keys_readable_in: Option<Duration>,
}

/// What a re-read of the key Secret did.
enum Refresh {
    Read,
    /// The last read was less than [`REFRESH_EVERY`] ago: possible again in this long.
    TooSoon(Duration),
    /// No Secret behind the keys, or it could not be read or used.
    Unavailable,
}

impl Keyring {
    fn signer(&self, message: &[u8], mac: &[u8]) -> Option<Signer> {
        if hmac::verify(&self.signing, message, mac).is_ok() {
            return Some(Signer::Signing);
        }
        self.accepted
            .iter()
            .any(|k| hmac::verify(k, message, mac).is_ok())
            .then_some(Signer::Accepted)
    }
}

/// What a MAC covers: the domain, then group/kind, namespace, name and the id, each
/// on its own line (none of them can hold a newline).
fn message(kind: &ApiResource, obj: &DynamicObject, id: &str) -> Vec<u8> {
    format!(
        "{DOMAIN}\n{}/{}\n{}\n{}\n{id}",
        kind.group,
        kind.kind,
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    )
    .into_bytes()
}

fn keyring(secret: &Secret) -> anyhow::Result<Keyring> {
    let data = secret.data.clone().unwrap_or_default();
    let key = |bytes: &ByteString, name: &str| {
        anyhow::ensure!(
            bytes.0.len() >= MIN_KEY_BYTES,
            "`{name}` is shorter than {MIN_KEY_BYTES} bytes"
        );
        Ok(hmac::Key::new(hmac::HMAC_SHA256, &bytes.0))
    };
    let signing = data
        .get(SIGNING_KEY)
        .with_context(|| format!("has no `{SIGNING_KEY}`"))?;
    let accepted = data
        .iter()
        .filter(|(k, _)| k.starts_with(ACCEPTED_KEY_PREFIX))
        .map(|(k, v)| key(v, k))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Keyring {
        signing: key(signing, SIGNING_KEY)?,
        accepted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::GroupVersionKind;

    fn kind(k: &str) -> ApiResource {
        ApiResource::from_gvk(&GroupVersionKind::gvk("infra.example", "v1", k))
    }

    fn obj(ns: &str, name: &str, uid: &str, annotation: Option<&str>) -> DynamicObject {
        let mut o = DynamicObject::new(name, &kind("Machine")).within(ns);
        o.metadata.uid = Some(uid.into());
        if let Some(a) = annotation {
            o.metadata.annotations = Some([(OWNERSHIP_ID_ANNOTATION.into(), a.into())].into());
        }
        o
    }

    fn keys(signing: &[u8], accepted: &[&[u8]]) -> OwnershipKeys {
        let mut data = std::collections::BTreeMap::new();
        data.insert(SIGNING_KEY.to_string(), ByteString(signing.to_vec()));
        for (i, k) in accepted.iter().enumerate() {
            data.insert(format!("{ACCEPTED_KEY_PREFIX}{i}"), ByteString(k.to_vec()));
        }
        let secret = Secret {
            data: Some(data),
            ..Default::default()
        };
        // A client is never used by these tests: refresh waits out its interval.
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        OwnershipKeys {
            api: Some(Api::namespaced(client, "ns")),
            namespace: "ns".into(),
            name: "k".into(),
            ring: RwLock::new(Arc::new(keyring(&secret).unwrap())),
            refreshed: tokio::sync::Mutex::new(Instant::now()),
        }
    }

    const A: &[u8; 32] = b"0123456789abcdef0123456789abcdef";
    const B: &[u8; 32] = b"fedcba9876543210fedcba9876543210";

    fn proven(o: Ownership) -> (String, Option<String>) {
        match o {
            Ownership::Proven { id, write } => (id, write),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn an_object_without_an_id_gets_its_own_uid_signed() {
        let k = keys(A, &[]);
        let (id, write) = proven(
            k.verify(&kind("Machine"), &obj("ns", "m", "u1", None))
                .await,
        );
        assert_eq!(id, "u1");
        let signed = write.unwrap();
        assert!(signed.starts_with("u1."), "{signed}");
        // Written back, it verifies and needs no write.
        let o = obj("ns", "m", "u-new", Some(&signed));
        assert_eq!(
            proven(k.verify(&kind("Machine"), &o).await),
            ("u1".into(), None)
        );
    }

    #[tokio::test]
    async fn a_copied_or_edited_id_proves_nothing() {
        let k = keys(A, &[]);
        let signed = k.sign(&kind("Machine"), &obj("ns", "victim", "u1", None), "u1");
        for (ns, name, kd) in [
            ("ns", "thief", "Machine"),
            ("other", "victim", "Machine"),
            ("ns", "victim", "Cluster"),
        ] {
            let o = obj(ns, name, "u2", Some(&signed));
            assert!(matches!(
                k.verify(&kind(kd), &o).await,
                Ownership::Unproven { .. }
            ));
        }
        let edited = signed.replacen("u1", "u9", 1);
        let o = obj("ns", "victim", "u2", Some(&edited));
        let Ownership::Unproven { message, recheck } = k.verify(&kind("Machine"), &o).await else {
            panic!("edited id verified");
        };
        assert!(message.contains("does not verify"), "{message}");
        // The keys were read moments ago and cannot be re-read yet: a key copied in
        // meanwhile is looked for as soon as they can, not a RECHECK later.
        assert!(
            recheck > RECHECK_AFTER_KEYS_REFRESH
                && recheck <= REFRESH_EVERY + RECHECK_AFTER_KEYS_REFRESH,
            "{recheck:?}"
        );
        assert!(message.contains("ns/k"), "names the key Secret: {message}");
    }

    #[tokio::test]
    async fn an_unsigned_id_is_accepted_only_when_it_is_the_objects_own_uid() {
        let k = keys(A, &[]);
        let (id, write) = proven(
            k.verify(&kind("Machine"), &obj("ns", "m", "u1", Some("u1")))
                .await,
        );
        assert_eq!(id, "u1");
        assert!(write.is_some());
        assert!(matches!(
            k.verify(&kind("Machine"), &obj("ns", "m", "u2", Some("u1")))
                .await,
            Ownership::Unproven { .. }
        ));
    }

    #[tokio::test]
    async fn an_id_signed_by_an_accepted_key_verifies_and_is_signed_again() {
        let source = keys(B, &[]);
        let signed = source.sign(&kind("Machine"), &obj("ns", "m", "u1", None), "u1");
        let moved = obj("ns", "m", "u2", Some(&signed));
        assert!(matches!(
            keys(A, &[]).verify(&kind("Machine"), &moved).await,
            Ownership::Unproven { .. }
        ));
        let target = keys(A, &[B]);
        let (id, write) = proven(target.verify(&kind("Machine"), &moved).await);
        assert_eq!(id, "u1");
        assert_eq!(write.unwrap(), target.sign(&kind("Machine"), &moved, "u1"));
    }

    #[test]
    fn short_keys_are_refused() {
        let secret = Secret {
            data: Some([(SIGNING_KEY.into(), ByteString(b"short".to_vec()))].into()),
            ..Default::default()
        };
        let err = keyring(&secret).err().unwrap().to_string();
        assert!(err.contains("shorter than 32 bytes"), "{err}");
    }
}
