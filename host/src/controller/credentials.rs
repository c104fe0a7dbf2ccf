//! The credentials of a call: the InfraCluster's `spec.credentialsRef` Secret, or the
//! manager's default. Secret values never reach logs, events or status.
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::DynamicObject;

use super::context::Context;
use super::error::{Error, Result};
use super::objects::{field, str_field};
use crate::runtime::Credentials;

/// Keys read from the Secret.
pub const URL: &str = "url";
pub const TOKEN: &str = "token";
pub const SECRET: &str = "secret";
pub const CA: &str = "ca.crt";
pub const FINGERPRINT: &str = "fingerprint";
pub const INSECURE: &str = "insecure";

pub async fn for_cluster(ctx: &Context, infra_cluster: &DynamicObject) -> Result<Credentials> {
    let own_ns = infra_cluster.metadata.namespace.clone().unwrap_or_default();
    let (namespace, name) = match str_field(infra_cluster, "spec.credentialsRef.name") {
        Some(name) => {
            let ns = field(infra_cluster, "spec.credentialsRef.namespace").and_then(|v| v.as_str()).unwrap_or(&own_ns);
            (ns.to_string(), name.to_string())
        }
        None => ctx.options.default_credentials.clone().ok_or_else(|| Error::Terminal {
            reason: "NoCredentials".into(),
            message: "spec.credentialsRef is not set and the manager has no --default-credentials-secret".into(),
        })?,
    };
    let secret = super::objects::read(
        &Api::<Secret>::namespaced(ctx.client.clone(), &namespace),
        &name,
    )
    .await?
    .ok_or_else(|| Error::Dependency(format!("credentials Secret {namespace}/{name} not found")))?;
    from_secret(&secret, &format!("{namespace}/{name}"))
}

fn from_secret(secret: &Secret, name: &str) -> Result<Credentials> {
    let data = secret.data.clone().unwrap_or_default();
    let get = |key: &str| -> Option<String> {
        data.get(key)
            .map(|v| String::from_utf8_lossy(&v.0).trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let required = |key: &str| {
        get(key).ok_or_else(|| Error::Terminal {
            reason: "InvalidCredentials".into(),
            message: format!("credentials Secret {name} has no `{key}`"),
        })
    };
    Ok(Credentials {
        endpoint: required(URL)?,
        token: required(TOKEN)?,
        secret: required(SECRET)?,
        ca_bundle: get(CA),
        fingerprint: get(FINGERPRINT),
        insecure: get(INSECURE).is_some_and(|v| v == "true" || v == "1"),
    })
}
