//! Reading Cluster API objects, waiting on them, and the binaries the flow runs.
use anyhow::Result;
use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use serde_json::Value;

pub use fleet::binaries::{build_hyperplug, bundled_plugin, hyperplug_binary};

pub const CAPI: &str = "cluster.x-k8s.io/v1beta2";
pub const INFRA: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// A namespaced dynamic API for `apiVersion`/`kind`.
pub async fn api(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: &str,
) -> Result<Api<DynamicObject>> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    kube_world::apply::dynamic_api(
        client,
        &GroupVersionKind::gvk(group, version, kind),
        Some(namespace),
    )
    .await
}

/// Objects of a kind in a namespace (none when the kind is not installed).
pub async fn list(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: &str,
) -> Result<Vec<DynamicObject>> {
    Ok(api(client, api_version, kind, namespace)
        .await?
        .list(&Default::default())
        .await?
        .items)
}

/// The value at a dotted path.
pub fn field<'a>(obj: &'a DynamicObject, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(&obj.data, |v, k| v.get(k))
}

/// A Machine with its providerID set and `status.initialization.infrastructureProvisioned`.
pub fn machine_provisioned(m: &DynamicObject) -> bool {
    field(m, "spec.providerID")
        .and_then(Value::as_str)
        .is_some_and(|p| !p.is_empty())
        && field(m, "status.initialization.infrastructureProvisioned") == Some(&Value::Bool(true))
}

/// One line per Machine: name, phase, providerID, provisioned.
pub fn describe_machines(machines: &[DynamicObject]) -> String {
    machines
        .iter()
        .map(|m| {
            format!(
                "  {:<40} {:<12} {:<50} provisioned={}",
                m.name_any(),
                field(m, "status.phase")
                    .and_then(Value::as_str)
                    .unwrap_or("-"),
                field(m, "spec.providerID")
                    .and_then(Value::as_str)
                    .unwrap_or("-"),
                machine_provisioned(m)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}
