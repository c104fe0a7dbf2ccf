//! The credentials of a call: the InfraCluster's `spec.credentialsRef` Secret, or the
//! manager's default for its plugin, plus every Secret its `spec.credentialsRefs` list
//! names (for plugins that reach several endpoints, e.g. an inventory of machine
//! controllers). Secret values never reach logs, events or status.
//!
//! A tenant who may edit InfraClusters in one namespace must not borrow another
//! team's credentials: a reference may name a Secret only in the InfraCluster's own
//! namespace, unless the operator grants more (`--cross-namespace-credentials`).
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::StreamExt;
use hyperplug_runtime::{Credentials, NamedCredentials, credentials};
use k8s_openapi::api::core::v1::Secret;
use kube::api::DynamicObject;
use kube::{Api, Client};

use super::grants::{CredentialsGrant, allowed};
use crate::controller::error::{Error, Result};
use crate::controller::objects::{field, str_field};

/// The credentials of a call: the primary ones and those of `spec.credentialsRefs`.
pub struct CallCredentials {
    pub primary: Credentials,
    pub more: Vec<NamedCredentials>,
    /// Which Secrets, at which resource versions, they were read from (a digest): a call
    /// that failed for good is tried again when it changes (see `outcome`).
    pub version: String,
}

/// Most Secrets one InfraCluster may name in `spec.credentialsRefs`.
const MAX_REFS: usize = 256;
/// Default of `--credentials-max-kib`: the bytes of all credentials one InfraCluster's
/// Secrets may hand a call (each value is bounded too, `credentials::MAX_VALUE_BYTES`).
pub const DEFAULT_CREDENTIALS_MAX_KIB: u64 = 256;
/// Secrets of `spec.credentialsRefs` one reconcile reads at once.
const REFS_AT_ONCE: usize = 4;

/// Condition reason of a reference to a Secret the InfraCluster may not use.
pub const NOT_ALLOWED: &str = "CredentialsNotAllowed";
/// Condition reasons of credentials that are not there or not complete.
pub const NO_CREDENTIALS: &str = "NoCredentials";
pub const NOT_FOUND: &str = "CredentialsNotFound";
pub const INVALID: &str = "InvalidCredentials";
/// Condition reason of credentials over `--credentials-max-kib`.
pub const TOO_LARGE: &str = "CredentialsTooLarge";

/// Where a call's credentials are read from, and the manager's rules for them (its
/// options): what [`for_cluster`] needs besides the InfraCluster.
#[derive(Clone, Copy)]
pub struct Sources<'a> {
    pub client: &'a Client,
    /// Secrets read a moment ago.
    pub recent: &'a Recent,
    /// Secrets in other namespaces an InfraCluster may name (`--cross-namespace-credentials`).
    pub grants: &'a [CredentialsGrant],
    /// `namespace/name` of this plugin's default Secret (`--default-credentials-secret`).
    pub default: Option<&'a (String, String)>,
    /// Bytes of credentials one InfraCluster may hand a call (`--credentials-max-kib`).
    pub max_bytes: usize,
    /// The plugin's name, as messages name it.
    pub plugin: &'a str,
}

pub async fn for_cluster(
    from: Sources<'_>,
    infra_cluster: &DynamicObject,
) -> Result<CallCredentials> {
    let own_ns = infra_cluster.metadata.namespace.clone().unwrap_or_default();
    let refs: &[serde_json::Value] = field(infra_cluster, "spec.credentialsRefs")
        .and_then(|v| v.as_array())
        .map_or(&[], Vec::as_slice);
    if refs.len() > MAX_REFS {
        return Err(Error::Credentials {
            reason: INVALID.into(),
            message: format!(
                "spec.credentialsRefs names {} Secrets; at most {MAX_REFS} are allowed",
                refs.len()
            ),
        });
    }
    // The Secrets are independent reads: a few go together, and the reading stops once
    // their credentials are over the bound (a tenant's Secrets are up to 1 MiB each).
    let mut named = Vec::with_capacity(refs.len());
    for (i, r) in refs.iter().enumerate() {
        let name = r
            .get("name")
            .and_then(|v| v.as_str())
            .filter(|n| !n.is_empty())
            .ok_or_else(|| Error::Credentials {
                reason: INVALID.into(),
                message: format!("spec.credentialsRefs[{i}].name is not set"),
            })?;
        let ns = r
            .get("namespace")
            .and_then(|v| v.as_str())
            .filter(|n| !n.is_empty())
            .unwrap_or(&own_ns);
        check_allowed(
            from.grants,
            &own_ns,
            ns,
            name,
            &format!("spec.credentialsRefs[{i}]"),
        )?;
        named.push((ns.to_string(), name.to_string()));
    }
    let max_bytes = from.max_bytes;
    let mut total = 0;
    let mut more = Vec::with_capacity(named.len());
    let mut versions = Vec::with_capacity(named.len() + 1);
    let mut reads = futures::stream::iter(named.into_iter().map(|(ns, name)| async move {
        let read = read(from, &ns, &name).await;
        (ns, name, read)
    }))
    .buffered(REFS_AT_ONCE);
    while let Some((ns, name, read)) = reads.next().await {
        let (credentials, version) = read?;
        total += credentials::bytes(&credentials);
        too_large(total, max_bytes)?;
        more.push(NamedCredentials {
            name: format!("{ns}/{name}"),
            credentials,
        });
        versions.push(version);
    }
    let (namespace, name) = match str_field(infra_cluster, "spec.credentialsRef.name") {
        Some(name) => {
            let ns = field(infra_cluster, "spec.credentialsRef.namespace")
                .and_then(|v| v.as_str())
                .filter(|n| !n.is_empty())
                .unwrap_or(&own_ns);
            check_allowed(from.grants, &own_ns, ns, name, "spec.credentialsRef")?;
            (ns.to_string(), name.to_string())
        }
        // The manager's default belongs to one plugin: another plugin's InfraCluster
        // never gets it.
        None => match (more.first(), from.default) {
            // A list and no single Secret: the first of the list is the primary (never
            // the manager's default, which may belong to another kind of infrastructure).
            (Some(first), _) => {
                return Ok(CallCredentials {
                    primary: first.credentials.clone(),
                    more,
                    version: digest(&versions),
                });
            }
            (None, Some(default)) => default.clone(),
            (None, None) => {
                return Err(Error::Credentials {
                    reason: NO_CREDENTIALS.into(),
                    message: format!(
                        "spec.credentialsRef (or spec.credentialsRefs) is not set and the manager has no --default-credentials-secret for plugin {}",
                        from.plugin
                    ),
                });
            }
        },
    };
    let (primary, version) = read(from, &namespace, &name).await?;
    too_large(total + credentials::bytes(&primary), max_bytes)?;
    versions.insert(0, version);
    Ok(CallCredentials {
        primary,
        more,
        version: digest(&versions),
    })
}

/// Refuse credentials of `total` bytes over `max`, naming the bound and its flag.
fn too_large(total: usize, max: usize) -> Result<()> {
    if total <= max {
        return Ok(());
    }
    Err(Error::Credentials {
        reason: TOO_LARGE.into(),
        message: format!(
            "the credentials of spec.credentialsRef and spec.credentialsRefs come to more than {} KiB, the most one InfraCluster may hand a call (--credentials-max-kib); name fewer or smaller Secrets",
            max >> 10
        ),
    })
}

/// A short digest of the Secrets' `namespace/name@resourceVersion`s.
fn digest(versions: &[String]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(versions.join("\n").as_bytes())[..12])
}

/// Refuse a reference to a Secret outside the InfraCluster's namespace, unless granted.
fn check_allowed(
    grants: &[CredentialsGrant],
    own: &str,
    ns: &str,
    name: &str,
    field: &str,
) -> Result<()> {
    if allowed(grants, own, ns) {
        return Ok(());
    }
    Err(Error::Credentials {
        reason: NOT_ALLOWED.into(),
        message: format!(
            "{field} names Secret {ns}/{name}, outside this object's namespace {own}; an InfraCluster may use only Secrets of its own namespace unless the manager is started with --cross-namespace-credentials {own}={ns} (or *={ns})"
        ),
    })
}

/// Credentials Secrets read in the last few seconds. A burst of new machines of one
/// cluster reads its Secret once, not once per reconcile (at 10,000 machines, 35,000
/// Secret reads went to the API server that bounded the run). A changed Secret is seen
/// within [`Recent::FRESH_FOR`]; only Secrets a reference was allowed to name get here.
pub struct Recent {
    read: Mutex<HashMap<SecretName, Read>>,
    /// Secret reads in flight, all reconciles together: each reads up to a 1 MiB
    /// Secret of a tenant's, so their number bounds the bytes they hold.
    reading: tokio::sync::Semaphore,
}

impl Default for Recent {
    fn default() -> Self {
        Recent {
            read: Mutex::default(),
            reading: tokio::sync::Semaphore::new(Self::READS_AT_ONCE),
        }
    }
}

/// A Secret's namespace and name.
type SecretName = (String, String);
/// When a Secret was read, its credentials and its version.
type Read = (Instant, Credentials, String);

impl Recent {
    const FRESH_FOR: Duration = Duration::from_secs(5);
    /// Bounds the map whatever the number of Secrets read within `FRESH_FOR`.
    const MAX_SECRETS: usize = 4096;
    /// Bounds the bytes of the credentials it keeps.
    const MAX_BYTES: usize = 16 << 20;
    /// Secret reads in flight (see `reading`).
    const READS_AT_ONCE: usize = 16;

    fn get(&self, namespace: &str, name: &str) -> Option<(Credentials, String)> {
        let read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        let (at, credentials, version) = read.get(&(namespace.to_string(), name.to_string()))?;
        (at.elapsed() < Self::FRESH_FOR).then(|| (credentials.clone(), version.clone()))
    }

    /// Expired entries go at every put: a Secret's values stay in memory no longer than
    /// the next read of any Secret after they expire.
    fn put(&self, namespace: &str, name: &str, credentials: &Credentials, version: &str) {
        let mut read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        read.retain(|_, (at, _, _)| at.elapsed() < Self::FRESH_FOR);
        let bytes: usize = read.values().map(|(_, c, _)| credentials::bytes(c)).sum();
        if read.len() >= Self::MAX_SECRETS
            || bytes + credentials::bytes(credentials) > Self::MAX_BYTES
        {
            read.clear();
        }
        read.insert(
            (namespace.to_string(), name.to_string()),
            (Instant::now(), credentials.clone(), version.to_string()),
        );
    }
}

/// The credentials of a Secret, and `namespace/name@resourceVersion` it was read at.
async fn read(from: Sources<'_>, namespace: &str, name: &str) -> Result<(Credentials, String)> {
    if let Some(recent) = from.recent.get(namespace, name) {
        return Ok(recent);
    }
    let _reading = from
        .recent
        .reading
        .acquire()
        .await
        .expect("the semaphore is never closed");
    let secret = crate::controller::objects::read(
        &Api::<Secret>::namespaced(from.client.clone(), namespace),
        name,
    )
    .await?
    .ok_or_else(|| Error::Credentials {
        reason: NOT_FOUND.into(),
        message: format!("credentials Secret {namespace}/{name} not found"),
    })?;
    let version = format!(
        "{namespace}/{name}@{}",
        secret
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default()
    );
    let credentials = from_secret(&secret, &format!("{namespace}/{name}"))?;
    from.recent.put(namespace, name, &credentials, &version);
    Ok((credentials, version))
}

/// Credentials from a Secret's `data` (the keys `hyperplug conformance` reads from its
/// credentials file too).
pub fn from_secret(secret: &Secret, name: &str) -> Result<Credentials> {
    let data = secret.data.as_ref();
    credentials::from_keys(name, |key| Some(data?.get(key)?.0.as_slice())).map_err(|message| {
        Error::Credentials {
            reason: INVALID.into(),
            message,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credentials(secret: &str) -> Credentials {
        Credentials {
            endpoint: "https://endpoint.example".into(),
            token: "user".into(),
            secret: secret.into(),
            ca_bundle: None,
            fingerprint: None,
            insecure: false,
        }
    }

    #[test]
    fn a_secret_read_a_moment_ago_is_reused_and_an_expired_one_read_again_and_dropped() {
        let recent = Recent::default();
        recent.put("team-a", "pve", &credentials("s1"), "team-a/pve@1");
        let (got, version) = recent.get("team-a", "pve").expect("fresh");
        assert_eq!(
            (got.secret.as_str(), version.as_str()),
            ("s1", "team-a/pve@1")
        );
        assert!(
            recent.get("team-b", "pve").is_none(),
            "another namespace's Secret"
        );
        // Read longer ago than FRESH_FOR: not served, and gone at the next put.
        let old = Instant::now() - Recent::FRESH_FOR;
        recent
            .read
            .lock()
            .unwrap()
            .get_mut(&("team-a".into(), "pve".into()))
            .unwrap()
            .0 = old;
        assert!(recent.get("team-a", "pve").is_none());
        recent.put("team-a", "other", &credentials("s2"), "team-a/other@1");
        assert!(
            !recent
                .read
                .lock()
                .unwrap()
                .contains_key(&("team-a".into(), "pve".into()))
        );
    }
}
