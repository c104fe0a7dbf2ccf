//! Blobs plugins publish for infrastructure that fetches from a URL (the `blobs`
//! import): bytes kept in memory under an unguessable token, served by
//! `crate::blob_server`, gone when withdrawn, expired, or their object is provisioned
//! or deleted.
//!
//! The URL is a secret (bootstrap data carries join tokens): nothing here logs it,
//! and a blob is keyed by (plugin, object UID, name) so a plugin need not keep it.
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::bindings::types::ObjectRef;
use super::limits::size;

/// Path prefix of every blob URL.
pub const PATH_PREFIX: &str = "/blobs/";

/// How much the host keeps for plugins' blobs: they live in the manager's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobLimits {
    /// Longest a published blob lives, seconds (a plugin may ask for less).
    pub blob_ttl_seconds: u64,
    /// Largest blob a plugin may publish, MiB.
    pub blob_max_mib: usize,
    /// Blobs one object may have published at once.
    pub blob_max_per_object: usize,
    /// Bytes of blobs one object may have published at once, MiB.
    pub blob_object_mib: usize,
    /// Bytes of blobs all objects of one plugin may have published at once, MiB.
    pub blob_plugin_mib: usize,
    /// Bytes of blobs the objects of one namespace may have published at once, MiB.
    pub blob_namespace_mib: usize,
}

/// The default of every blob limit, written once: the host's flags
/// (`host/src/cli/limits.rs`) and [`BlobLimits::default`] both read these.
pub mod defaults {
    /// `--blob-ttl-seconds`.
    pub const TTL_SECONDS: u64 = 3600;
    /// `--blob-max-mib`.
    pub const MAX_MIB: usize = 8;
    /// `--blob-max-per-object`.
    pub const MAX_PER_OBJECT: usize = 4;
    /// `--blob-object-mib`.
    pub const OBJECT_MIB: usize = 8;
    /// `--blob-plugin-mib`.
    pub const PLUGIN_MIB: usize = 32;
    /// `--blob-namespace-mib`.
    pub const NAMESPACE_MIB: usize = 16;
}

impl Default for BlobLimits {
    fn default() -> Self {
        BlobLimits {
            blob_ttl_seconds: defaults::TTL_SECONDS,
            blob_max_mib: defaults::MAX_MIB,
            blob_max_per_object: defaults::MAX_PER_OBJECT,
            blob_object_mib: defaults::OBJECT_MIB,
            blob_plugin_mib: defaults::PLUGIN_MIB,
            blob_namespace_mib: defaults::NAMESPACE_MIB,
        }
    }
}

impl BlobLimits {
    pub fn max_blob_bytes(&self) -> usize {
        self.blob_max_mib << 20
    }
    fn object_bytes(&self) -> usize {
        self.blob_object_mib << 20
    }
    fn plugin_bytes(&self) -> usize {
        self.blob_plugin_mib << 20
    }
    fn namespace_bytes(&self) -> usize {
        self.blob_namespace_mib << 20
    }
}

/// Where published blobs are kept and how they are advertised.
pub struct BlobStore {
    /// Base URL the infrastructure reaches the blob server at; None: publishing fails.
    advertise: Option<url::Url>,
    limits: BlobLimits,
    inner: Mutex<Blobs>,
    served: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct Blobs {
    by_token: HashMap<String, Blob>,
    by_owner: HashMap<Owner, String>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Owner {
    plugin: String,
    uid: String,
    name: String,
}

struct Blob {
    owner: Owner,
    /// The namespace of the object that published it (its budget).
    namespace: String,
    content: Bytes,
    /// Set at the first publication and never moved: publishing again replaces the
    /// bytes, not the time the URL stops working.
    expires: Instant,
}

impl BlobStore {
    /// A store that publishes under `advertise` (e.g. `http://10.0.0.5:8082`).
    pub fn new(advertise: url::Url, limits: BlobLimits) -> BlobStore {
        BlobStore {
            advertise: Some(advertise),
            limits,
            inner: Mutex::default(),
            served: Default::default(),
        }
    }

    /// A store that refuses every publish: the host serves no blobs.
    pub fn disabled() -> BlobStore {
        BlobStore {
            advertise: None,
            limits: BlobLimits {
                blob_max_mib: 0,
                ..BlobLimits::default()
            },
            inner: Mutex::default(),
            served: Default::default(),
        }
    }

    /// The largest blob this store takes (0 when it serves none).
    pub fn max_blob_bytes(&self) -> usize {
        if self.advertise.is_some() {
            self.limits.max_blob_bytes()
        } else {
            0
        }
    }

    /// Publish (or replace) `name` for `owner`; the same URL each time until it is
    /// withdrawn or expires.
    pub fn publish(
        &self,
        plugin: &str,
        owner: &ObjectRef,
        name: &str,
        content: Vec<u8>,
        ttl_seconds: u32,
    ) -> Result<String, String> {
        let Some(base) = &self.advertise else {
            return Err(
                "this host serves no blobs: start `hyperplug run` with --blob-advertise-url".into(),
            );
        };
        check_name(name)?;
        let limits = &self.limits;
        if content.len() > limits.max_blob_bytes() {
            return Err(format!(
                "blob `{name}` is {} bytes; this host publishes at most {} per blob (--blob-max-mib)",
                content.len(),
                size(limits.max_blob_bytes())
            ));
        }
        if owner.uid.is_empty() {
            return Err("a blob needs the call's object UID".into());
        }
        let ttl = Duration::from_secs(ttl_seconds.max(1).into())
            .min(Duration::from_secs(limits.blob_ttl_seconds));
        let key = Owner {
            plugin: plugin.into(),
            uid: owner.uid.clone(),
            name: name.into(),
        };
        let now = Instant::now();
        let mut blobs = self.inner.lock().expect("blob store");
        blobs.sweep(now);
        blobs.check_room(limits, &key, &owner.namespace, content.len())?;
        let token = match blobs.by_owner.get(&key) {
            Some(token) => token.clone(),
            None => {
                let token = hex::encode(rand::random::<[u8; 32]>());
                blobs.by_owner.insert(key.clone(), token.clone());
                token
            }
        };
        let expires = blobs
            .by_token
            .get(&token)
            .map_or(now + ttl, |published| published.expires);
        blobs.by_token.insert(
            token.clone(),
            Blob {
                owner: key,
                namespace: owner.namespace.clone(),
                content: Bytes::from(content),
                expires,
            },
        );
        let mut url = base.clone();
        let path = format!(
            "{}{PATH_PREFIX}{token}/{name}",
            base.path().trim_end_matches('/')
        );
        url.set_path(&path);
        Ok(url.to_string())
    }

    /// Remove what `uid` published as `name` under `plugin`.
    pub fn withdraw(&self, plugin: &str, uid: &str, name: &str) {
        let key = Owner {
            plugin: plugin.into(),
            uid: uid.into(),
            name: name.into(),
        };
        let mut blobs = self.inner.lock().expect("blob store");
        if let Some(token) = blobs.by_owner.remove(&key) {
            blobs.by_token.remove(&token);
        }
    }

    /// Remove every blob of the object `uid` (it was provisioned or deleted); returns
    /// how many there were.
    pub fn withdraw_object(&self, uid: &str) -> usize {
        let mut blobs = self.inner.lock().expect("blob store");
        let tokens: Vec<String> = blobs
            .by_owner
            .iter()
            .filter(|(o, _)| o.uid == uid)
            .map(|(_, t)| t.clone())
            .collect();
        blobs.by_owner.retain(|o, _| o.uid != uid);
        for token in &tokens {
            blobs.by_token.remove(token);
        }
        tokens.len()
    }

    /// The content behind `token`/`name`, if published and not expired.
    pub fn get(&self, token: &str, name: &str) -> Option<Bytes> {
        let mut blobs = self.inner.lock().expect("blob store");
        blobs.sweep(Instant::now());
        let found = blobs
            .by_token
            .get(token)
            .filter(|b| b.owner.name == name)
            .map(|b| b.content.clone());
        if found.is_some() {
            self.served
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        found
    }

    /// How many times a blob was handed out.
    pub fn served(&self) -> u64 {
        self.served.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many blobs are published (for tests and metrics).
    pub fn len(&self) -> usize {
        let mut blobs = self.inner.lock().expect("blob store");
        blobs.sweep(Instant::now());
        blobs.by_token.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A blob name is a file name: letters, digits, dots, dashes, underscores, starting
/// with a letter or digit (never `.`, `..` or a hidden file).
fn check_name(name: &str) -> Result<(), String> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "blob name `{name}` must be 1-64 letters, digits, dots, dashes or underscores, starting with a letter or digit"
        ))
    }
}

impl Blobs {
    /// Whether `owner` (of `namespace`) may publish `bytes` more (replacing what it
    /// published under that name): per object by count and size, per namespace and per
    /// plugin by size.
    fn check_room(
        &self,
        limits: &BlobLimits,
        owner: &Owner,
        namespace: &str,
        bytes: usize,
    ) -> Result<(), String> {
        let (mut object_count, mut object_bytes, mut plugin_bytes) = (0, 0, 0);
        let mut namespace_bytes = 0;
        for blob in self.by_token.values() {
            if blob.owner.plugin != owner.plugin || blob.owner == *owner {
                continue;
            }
            plugin_bytes += blob.content.len();
            if blob.namespace == namespace {
                namespace_bytes += blob.content.len();
            }
            if blob.owner.uid == owner.uid {
                object_count += 1;
                object_bytes += blob.content.len();
            }
        }
        if namespace_bytes + bytes > limits.namespace_bytes() {
            return Err(format!(
                "this namespace's blobs would take {} bytes; the host allows {} per namespace (--blob-namespace-mib); try again when some are withdrawn",
                namespace_bytes + bytes,
                size(limits.namespace_bytes())
            ));
        }
        if object_count + 1 > limits.blob_max_per_object {
            return Err(format!(
                "this object already has {object_count} blobs published, the most the host allows (--blob-max-per-object)"
            ));
        }
        if object_bytes + bytes > limits.object_bytes() {
            return Err(format!(
                "this object's blobs would take {} bytes; the host allows {} per object (--blob-object-mib)",
                object_bytes + bytes,
                size(limits.object_bytes())
            ));
        }
        if plugin_bytes + bytes > limits.plugin_bytes() {
            return Err(format!(
                "this plugin's blobs would take {} bytes; the host allows {} per plugin (--blob-plugin-mib); try again when some are withdrawn",
                plugin_bytes + bytes,
                size(limits.plugin_bytes())
            ));
        }
        Ok(())
    }

    fn sweep(&mut self, now: Instant) {
        let expired: Vec<String> = self
            .by_token
            .iter()
            .filter(|(_, b)| b.expires <= now)
            .map(|(t, _)| t.clone())
            .collect();
        for token in expired {
            if let Some(blob) = self.by_token.remove(&token) {
                self.by_owner.remove(&blob.owner);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(uid: &str) -> ObjectRef {
        ObjectRef {
            namespace: "ns".into(),
            name: "m".into(),
            uid: uid.into(),
        }
    }

    fn store() -> BlobStore {
        let base = url::Url::parse("http://10.0.0.5:8082/base/").unwrap();
        BlobStore::new(
            base,
            BlobLimits {
                blob_max_mib: 1,
                blob_max_per_object: 2,
                blob_object_mib: 1,
                blob_plugin_mib: 2,
                ..BlobLimits::default()
            },
        )
    }

    #[test]
    fn publishing_again_gives_the_same_url_and_new_content() {
        let s = store();
        let a = s
            .publish("p", &owner("u1"), "seed.iso", b"one".to_vec(), 60)
            .unwrap();
        let b = s
            .publish("p", &owner("u1"), "seed.iso", b"two".to_vec(), 60)
            .unwrap();
        assert_eq!(a, b);
        assert!(a.starts_with("http://10.0.0.5:8082/base/blobs/"), "{a}");
        let token = a.rsplit('/').nth(1).unwrap();
        assert_eq!(token.len(), 64);
        assert_eq!(s.get(token, "seed.iso").unwrap(), &b"two"[..]);
        assert!(s.get(token, "other.iso").is_none());
    }

    #[test]
    fn objects_and_plugins_never_share_a_blob() {
        let s = store();
        let a = s.publish("p", &owner("u1"), "x", vec![1], 60).unwrap();
        let b = s.publish("p", &owner("u2"), "x", vec![2], 60).unwrap();
        let c = s.publish("q", &owner("u1"), "x", vec![3], 60).unwrap();
        assert!(a != b && a != c && b != c);
        assert_eq!(s.withdraw_object("u1"), 2);
        assert_eq!(s.len(), 1);
        s.withdraw("p", "u2", "x");
        assert!(s.is_empty());
    }

    #[test]
    fn publishing_again_never_moves_the_time_a_url_stops_working() {
        let s = store();
        s.publish("p", &owner("u1"), "x", vec![1], 60).unwrap();
        let first = |s: &BlobStore| {
            let blobs = s.inner.lock().unwrap();
            blobs.by_token.values().next().unwrap().expires
        };
        let expires = first(&s);
        s.publish("p", &owner("u1"), "x", vec![2], 3600).unwrap();
        assert_eq!(first(&s), expires);
    }

    #[test]
    fn one_namespace_cannot_take_the_whole_plugin_budget() {
        let s = BlobStore::new(
            url::Url::parse("http://h:1").unwrap(),
            BlobLimits {
                blob_namespace_mib: 1,
                ..BlobLimits::default()
            },
        );
        let in_ns = |ns: &str, uid: &str| ObjectRef {
            namespace: ns.into(),
            name: "m".into(),
            uid: uid.into(),
        };
        let most = vec![0; 700 << 10];
        s.publish("p", &in_ns("a", "u1"), "x", most.clone(), 60)
            .unwrap();
        let err = s
            .publish("p", &in_ns("a", "u2"), "x", most.clone(), 60)
            .unwrap_err();
        assert!(err.contains("--blob-namespace-mib"), "{err}");
        s.publish("p", &in_ns("b", "u3"), "x", most, 60).unwrap();
    }

    #[test]
    fn expired_blobs_are_gone() {
        let limits = BlobLimits {
            blob_ttl_seconds: 0,
            ..BlobLimits::default()
        };
        let s = BlobStore::new(url::Url::parse("http://h:1").unwrap(), limits);
        let url = s.publish("p", &owner("u1"), "x", vec![1], 60).unwrap();
        let token = url.rsplit('/').nth(1).unwrap();
        assert!(s.get(token, "x").is_none());
    }

    #[test]
    fn bad_names_sizes_and_a_disabled_store_are_refused() {
        let s = store();
        for bad in ["../x", ".", "..", ".hidden", "", "a/b"] {
            assert!(
                s.publish("p", &owner("u1"), bad, vec![], 60).is_err(),
                "{bad}"
            );
        }
        assert!(
            s.publish("p", &owner("u1"), "x", vec![0; 2 << 20], 60)
                .is_err()
        );
        let err = BlobStore::disabled()
            .publish("p", &owner("u1"), "x", vec![], 60)
            .unwrap_err();
        assert!(err.contains("--blob-advertise-url"), "{err}");
    }

    #[test]
    fn blobs_are_bounded_per_object_and_per_plugin() {
        let s = store();
        let half = vec![0u8; 512 << 10];
        s.publish("p", &owner("u1"), "a", half.clone(), 60).unwrap();
        // Replacing a blob does not count it twice.
        s.publish("p", &owner("u1"), "a", half.clone(), 60).unwrap();
        s.publish("p", &owner("u1"), "b", half.clone(), 60).unwrap();
        let err = s.publish("p", &owner("u1"), "c", vec![1], 60).unwrap_err();
        assert!(err.contains("--blob-max-per-object"), "{err}");
        let err = s
            .publish("p", &owner("u1"), "a", vec![0; 600 << 10], 60)
            .unwrap_err();
        assert!(err.contains("--blob-object-mib"), "{err}");
        s.publish("p", &owner("u2"), "a", half.clone(), 60).unwrap();
        s.publish("p", &owner("u2"), "b", half.clone(), 60).unwrap();
        let err = s.publish("p", &owner("u3"), "a", vec![1], 60).unwrap_err();
        assert!(err.contains("--blob-plugin-mib"), "{err}");
        // Another plugin has its own budget.
        s.publish("q", &owner("u3"), "a", half, 60).unwrap();
        assert_eq!(s.len(), 5);
    }
}
