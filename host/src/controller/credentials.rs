//! The credentials of a call: the InfraCluster's `spec.credentialsRef` Secret, or the
//! manager's default, plus every Secret its `spec.credentialsRefs` list names (for
//! plugins that reach several endpoints, e.g. an inventory of machine controllers).
//! Secret values never reach logs, events or status.
use hyperplug_runtime::{Credentials, NamedCredentials, credentials};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::DynamicObject;

use super::context::Context;
use super::error::{Error, Result};
use super::objects::{field, str_field};

/// The credentials of a call: the primary ones and those of `spec.credentialsRefs`.
pub struct CallCredentials {
    pub primary: Credentials,
    pub more: Vec<NamedCredentials>,
}

/// Most Secrets one InfraCluster may name in `spec.credentialsRefs`.
const MAX_REFS: usize = 256;

pub async fn for_cluster(ctx: &Context, infra_cluster: &DynamicObject) -> Result<CallCredentials> {
    let own_ns = infra_cluster.metadata.namespace.clone().unwrap_or_default();
    let refs: &[serde_json::Value] = field(infra_cluster, "spec.credentialsRefs")
        .and_then(|v| v.as_array())
        .map_or(&[], Vec::as_slice);
    if refs.len() > MAX_REFS {
        return Err(Error::Terminal {
            reason: "InvalidCredentials".into(),
            message: format!(
                "spec.credentialsRefs names {} Secrets; at most {MAX_REFS} are allowed",
                refs.len()
            ),
        });
    }
    // The Secrets are independent reads: send them together.
    let mut named = Vec::with_capacity(refs.len());
    for (i, r) in refs.iter().enumerate() {
        let name = r
            .get("name")
            .and_then(|v| v.as_str())
            .filter(|n| !n.is_empty())
            .ok_or_else(|| Error::Terminal {
                reason: "InvalidCredentials".into(),
                message: format!("spec.credentialsRefs[{i}].name is not set"),
            })?;
        let ns = r
            .get("namespace")
            .and_then(|v| v.as_str())
            .unwrap_or(&own_ns);
        named.push((ns, name));
    }
    let more = futures::future::try_join_all(named.into_iter().map(|(ns, name)| async move {
        Ok::<_, Error>(NamedCredentials {
            name: format!("{ns}/{name}"),
            credentials: read(ctx, ns, name).await?,
        })
    }))
    .await?;
    let (namespace, name) = match str_field(infra_cluster, "spec.credentialsRef.name") {
        Some(name) => {
            let ns = field(infra_cluster, "spec.credentialsRef.namespace").and_then(|v| v.as_str()).unwrap_or(&own_ns);
            (ns.to_string(), name.to_string())
        }
        None => match (more.first(), &ctx.options.default_credentials) {
            // A list and no single Secret: the first of the list is the primary (never
            // the manager's default, which may belong to another kind of infrastructure).
            (Some(first), _) => return Ok(CallCredentials { primary: first.credentials.clone(), more }),
            (None, Some(default)) => default.clone(),
            (None, None) => return Err(Error::Terminal {
                reason: "NoCredentials".into(),
                message: "spec.credentialsRef (or spec.credentialsRefs) is not set and the manager has no --default-credentials-secret".into(),
            }),
        },
    };
    Ok(CallCredentials {
        primary: read(ctx, &namespace, &name).await?,
        more,
    })
}

async fn read(ctx: &Context, namespace: &str, name: &str) -> Result<Credentials> {
    let secret = super::objects::read(
        &Api::<Secret>::namespaced(ctx.client.clone(), namespace),
        name,
    )
    .await?
    .ok_or_else(|| Error::Dependency(format!("credentials Secret {namespace}/{name} not found")))?;
    from_secret(&secret, &format!("{namespace}/{name}"))
}

/// Credentials from a Secret's `data` (the keys `hyperplug conformance` reads from its
/// credentials file too).
pub fn from_secret(secret: &Secret, name: &str) -> Result<Credentials> {
    let data = secret.data.as_ref();
    credentials::from_keys(name, |key| Some(data?.get(key)?.0.as_slice())).map_err(|message| {
        Error::Terminal {
            reason: "InvalidCredentials".into(),
            message,
        }
    })
}
