//! Plugin claims kept as `coordination.k8s.io/v1` Leases, so every replica and every
//! management cluster sharing the API sees them. Creating an object is atomic in
//! Kubernetes: of many claimants of one key, exactly one create succeeds.
//!
//! One Lease per (plugin, key), named from a hash of both, holder in
//! `spec.holderIdentity` (the object's UID) and in a label, so the claims of a deleted
//! object are found and released.
use std::collections::BTreeMap;

use hyperplug_runtime::ObjectRef;
use hyperplug_runtime::claims::{ClaimFuture, ClaimStore};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams, Preconditions};
use sha2::{Digest, Sha256};

const HOLDER_LABEL: &str = "hyperplug.dev/claim-holder";
const PLUGIN_LABEL: &str = "hyperplug.dev/claim-plugin";
const KEY_ANNOTATION: &str = "hyperplug.dev/claim-key";
const OBJECT_ANNOTATION: &str = "hyperplug.dev/claim-object";

pub struct LeaseClaims {
    api: Api<Lease>,
}

impl LeaseClaims {
    /// Claims kept in `namespace`.
    pub fn new(client: kube::Client, namespace: &str) -> LeaseClaims {
        LeaseClaims {
            api: Api::namespaced(client, namespace),
        }
    }
}

fn lease_name(plugin: &str, key: &str) -> String {
    let digest = hex::encode(Sha256::digest(format!("{plugin}\n{key}")));
    format!("hp-claim-{plugin}-{}", &digest[..32])
}

fn holder_of(lease: &Lease) -> Option<String> {
    lease.spec.as_ref()?.holder_identity.clone()
}

fn text(e: kube::Error) -> String {
    format!("claims: {e}")
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

impl LeaseClaims {
    async fn acquire_once(
        &self,
        plugin: &str,
        key: &str,
        holder: &ObjectRef,
    ) -> Result<Option<Option<String>>, String> {
        let name = lease_name(plugin, key);
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(BTreeMap::from([
                    (HOLDER_LABEL.to_string(), holder.uid.clone()),
                    (PLUGIN_LABEL.to_string(), plugin.to_string()),
                ])),
                annotations: Some(BTreeMap::from([
                    (KEY_ANNOTATION.to_string(), key.to_string()),
                    (
                        OBJECT_ANNOTATION.to_string(),
                        format!("{}/{}", holder.namespace, holder.name),
                    ),
                ])),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.uid.clone()),
                ..Default::default()
            }),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(_) => return Ok(Some(None)),
            Err(e) if is_status(&e, 409) => {}
            Err(e) => return Err(text(e)),
        }
        match self.api.get_opt(&name).await.map_err(text)? {
            Some(existing) => {
                let current = holder_of(&existing);
                Ok(Some(current.filter(|uid| *uid != holder.uid)))
            }
            // Released between our create and get: try again.
            None => Ok(None),
        }
    }
}

impl ClaimStore for LeaseClaims {
    fn acquire<'a>(
        &'a self,
        plugin: &'a str,
        key: &'a str,
        holder: &'a ObjectRef,
    ) -> ClaimFuture<'a, Option<String>> {
        Box::pin(async move {
            for _ in 0..3 {
                if let Some(result) = self.acquire_once(plugin, key, holder).await? {
                    return Ok(result);
                }
            }
            Err(format!("claim `{key}` is changing hands; try again"))
        })
    }

    fn holder<'a>(&'a self, plugin: &'a str, key: &'a str) -> ClaimFuture<'a, Option<String>> {
        Box::pin(async move {
            let lease = self
                .api
                .get_opt(&lease_name(plugin, key))
                .await
                .map_err(text)?;
            Ok(lease.as_ref().and_then(holder_of))
        })
    }

    fn held<'a>(&'a self, plugin: &'a str, uid: &'a str) -> ClaimFuture<'a, Vec<String>> {
        Box::pin(async move {
            let selector = format!("{HOLDER_LABEL}={uid},{PLUGIN_LABEL}={plugin}");
            let leases = self
                .api
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(text)?;
            let mut keys: Vec<String> = leases
                .items
                .iter()
                .filter(|l| holder_of(l).as_deref() == Some(uid))
                .filter_map(|l| {
                    l.metadata
                        .annotations
                        .as_ref()?
                        .get(KEY_ANNOTATION)
                        .cloned()
                })
                .collect();
            keys.sort();
            Ok(keys)
        })
    }

    fn release<'a>(&'a self, plugin: &'a str, key: &'a str, uid: &'a str) -> ClaimFuture<'a, ()> {
        Box::pin(async move {
            let name = lease_name(plugin, key);
            let Some(lease) = self.api.get_opt(&name).await.map_err(text)? else {
                return Ok(());
            };
            if holder_of(&lease).as_deref() != Some(uid) {
                return Ok(());
            }
            self.delete(&lease).await
        })
    }

    fn release_all<'a>(&'a self, uid: &'a str) -> ClaimFuture<'a, usize> {
        Box::pin(async move {
            let leases = self
                .api
                .list(&ListParams::default().labels(&format!("{HOLDER_LABEL}={uid}")))
                .await
                .map_err(text)?;
            let mut released = 0;
            for lease in leases
                .items
                .iter()
                .filter(|l| holder_of(l).as_deref() == Some(uid))
            {
                self.delete(lease).await?;
                released += 1;
            }
            Ok(released)
        })
    }
}

impl LeaseClaims {
    /// Delete exactly the Lease we looked at: never one re-created by a new holder.
    async fn delete(&self, lease: &Lease) -> Result<(), String> {
        let name = lease.metadata.name.clone().unwrap_or_default();
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: lease.metadata.uid.clone(),
                resource_version: lease.metadata.resource_version.clone(),
            }),
            ..Default::default()
        };
        match self.api.delete(&name, &params).await {
            Ok(_) => Ok(()),
            Err(e) if is_status(&e, 404) || is_status(&e, 409) => Ok(()),
            Err(e) => Err(text(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_names_are_valid_and_distinct_per_plugin_and_key() {
        let a = lease_name("acme", "system/1");
        assert!(a.len() <= 63 && a.starts_with("hp-claim-acme-"), "{a}");
        assert_ne!(a, lease_name("acme", "system/2"));
        assert_ne!(a, lease_name("other", "system/1"));
    }
}
