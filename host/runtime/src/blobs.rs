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

use super::ObjectRef;

/// Path prefix of every blob URL.
pub const PATH_PREFIX: &str = "/blobs/";

/// Where published blobs are kept and how they are advertised.
pub struct BlobStore {
    /// Base URL the infrastructure reaches the blob server at; None: publishing fails.
    advertise: Option<url::Url>,
    max_ttl: Duration,
    max_bytes: usize,
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
    content: Bytes,
    expires: Instant,
}

impl BlobStore {
    /// A store that publishes under `advertise` (e.g. `http://10.0.0.5:8082`).
    pub fn new(advertise: url::Url, max_ttl: Duration, max_bytes: usize) -> BlobStore {
        BlobStore {
            advertise: Some(advertise),
            max_ttl,
            max_bytes,
            inner: Mutex::default(),
            served: Default::default(),
        }
    }

    /// A store that refuses every publish: the host serves no blobs.
    pub fn disabled() -> BlobStore {
        BlobStore {
            advertise: None,
            max_ttl: Duration::ZERO,
            max_bytes: 0,
            inner: Mutex::default(),
            served: Default::default(),
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
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        {
            return Err(format!(
                "blob name `{name}` must be 1-64 letters, digits, dots, dashes or underscores"
            ));
        }
        if content.len() > self.max_bytes {
            return Err(format!(
                "blob `{name}` is {} bytes; this host publishes at most {}",
                content.len(),
                self.max_bytes
            ));
        }
        if owner.uid.is_empty() {
            return Err("a blob needs the call's object UID".into());
        }
        let ttl = Duration::from_secs(ttl_seconds.max(1).into()).min(self.max_ttl);
        let key = Owner {
            plugin: plugin.into(),
            uid: owner.uid.clone(),
            name: name.into(),
        };
        let now = Instant::now();
        let mut blobs = self.inner.lock().expect("blob store");
        blobs.sweep(now);
        let token = match blobs.by_owner.get(&key) {
            Some(token) => token.clone(),
            None => {
                let token = hex::encode(rand::random::<[u8; 32]>());
                blobs.by_owner.insert(key.clone(), token.clone());
                token
            }
        };
        blobs.by_token.insert(
            token.clone(),
            Blob {
                owner: key,
                content: Bytes::from(content),
                expires: now + ttl,
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

impl Blobs {
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
        BlobStore::new(base, Duration::from_secs(3600), 1 << 20)
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
    fn expired_blobs_are_gone() {
        let s = BlobStore::new(url::Url::parse("http://h:1").unwrap(), Duration::ZERO, 10);
        let url = s.publish("p", &owner("u1"), "x", vec![1], 60).unwrap();
        let token = url.rsplit('/').nth(1).unwrap();
        assert!(s.get(token, "x").is_none());
    }

    #[test]
    fn bad_names_sizes_and_a_disabled_store_are_refused() {
        let s = store();
        assert!(s.publish("p", &owner("u1"), "../x", vec![], 60).is_err());
        assert!(
            s.publish("p", &owner("u1"), "x", vec![0; 2 << 20], 60)
                .is_err()
        );
        let err = BlobStore::disabled()
            .publish("p", &owner("u1"), "x", vec![], 60)
            .unwrap_err();
        assert!(err.contains("--blob-advertise-url"), "{err}");
    }
}
