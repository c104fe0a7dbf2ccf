//! Exclusive claims plugins hold on keys of their own (the `claims` import), e.g. one
//! bare-metal host of an inventory per machine.
//!
//! The runtime only defines what a claim store does; `hyperplug run` backs it with
//! Kubernetes (`hyperplug::lease_claims`), so every replica and every cluster sees
//! the same claims. [`MemoryClaims`] serves a single process (tests, one-off tools).
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use crate::bindings::types::ObjectRef;

pub type ClaimFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;

/// Where claims live. Keys are scoped by plugin; holders are object UIDs.
pub trait ClaimStore: Send + Sync {
    /// Claim `key` for `holder`: `None` when granted (or already held by it), else
    /// the UID of the current holder. Must be atomic across every caller.
    fn acquire<'a>(
        &'a self,
        plugin: &'a str,
        key: &'a str,
        holder: &'a ObjectRef,
    ) -> ClaimFuture<'a, Option<String>>;
    /// The UID holding `key`.
    fn holder<'a>(&'a self, plugin: &'a str, key: &'a str) -> ClaimFuture<'a, Option<String>>;
    /// Keys `uid` holds under `plugin`.
    fn held<'a>(&'a self, plugin: &'a str, uid: &'a str) -> ClaimFuture<'a, Vec<String>>;
    /// Release `key` if `uid` holds it.
    fn release<'a>(&'a self, plugin: &'a str, key: &'a str, uid: &'a str) -> ClaimFuture<'a, ()>;
    /// Release every claim `uid` holds (its object is gone); returns how many.
    fn release_all<'a>(&'a self, uid: &'a str) -> ClaimFuture<'a, usize>;
}

/// Claims in this process's memory.
#[derive(Default)]
pub struct MemoryClaims {
    /// (plugin, key) → holder UID.
    claims: Mutex<HashMap<(String, String), String>>,
}

impl MemoryClaims {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<(String, String), String>) -> T) -> T {
        f(&mut self.claims.lock().expect("claims"))
    }
}

impl ClaimStore for MemoryClaims {
    fn acquire<'a>(
        &'a self,
        plugin: &'a str,
        key: &'a str,
        holder: &'a ObjectRef,
    ) -> ClaimFuture<'a, Option<String>> {
        let result = self.with(|c| {
            let entry = c
                .entry((plugin.into(), key.into()))
                .or_insert_with(|| holder.uid.clone());
            (*entry != holder.uid).then(|| entry.clone())
        });
        Box::pin(async move { Ok(result) })
    }

    fn holder<'a>(&'a self, plugin: &'a str, key: &'a str) -> ClaimFuture<'a, Option<String>> {
        let result = self.with(|c| c.get(&(plugin.into(), key.into())).cloned());
        Box::pin(async move { Ok(result) })
    }

    fn held<'a>(&'a self, plugin: &'a str, uid: &'a str) -> ClaimFuture<'a, Vec<String>> {
        let mut keys: Vec<String> = self.with(|c| {
            c.iter()
                .filter(|((p, _), h)| p == plugin && *h == uid)
                .map(|((_, k), _)| k.clone())
                .collect()
        });
        keys.sort();
        Box::pin(async move { Ok(keys) })
    }

    fn release<'a>(&'a self, plugin: &'a str, key: &'a str, uid: &'a str) -> ClaimFuture<'a, ()> {
        self.with(|c| {
            let k = (plugin.to_string(), key.to_string());
            if c.get(&k).is_some_and(|h| h == uid) {
                c.remove(&k);
            }
        });
        Box::pin(async { Ok(()) })
    }

    fn release_all<'a>(&'a self, uid: &'a str) -> ClaimFuture<'a, usize> {
        let n = self.with(|c| {
            let before = c.len();
            c.retain(|_, h| h != uid);
            before - c.len()
        });
        Box::pin(async move { Ok(n) })
    }
}
