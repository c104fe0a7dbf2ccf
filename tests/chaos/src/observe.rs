//! What the API server says about the run's objects: which machines are provisioned,
//! whether drift was reported, what still carries our finalizer.
use std::collections::BTreeSet;

use anyhow::Result;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, ListParams};
use kube::{Client, ResourceExt};
use serde_json::Value;

use fleet::objects;

use crate::ledger::Machine;

/// Reasons that report drift: the host's own and, since drift tells its kind, the
/// plugin's CamelCase ones.
const DRIFT_REASONS: &[&str] = &[
    "Drift",
    "VMMissing",
    "VMPoweredOff",
    "VMStopped",
    "VMForeign",
    "InfrastructureMissing",
    "InfrastructureChanged",
    "InfrastructureForeign",
];

/// The suffix of every finalizer the manager puts on (`<plugin>.infrastructure.hyperplug.dev`).
const FINALIZER_SUFFIX: &str = ".infrastructure.hyperplug.dev";

/// `namespace/name` of every ProxmoxMachine with `status.initialization.provisioned`.
pub async fn provisioned(client: &Client) -> Result<BTreeSet<String>> {
    let list = Api::<DynamicObject>::all_with(client.clone(), &objects::infra_machine())
        .list(&ListParams::default())
        .await?;
    Ok(list
        .items
        .iter()
        .filter(|o| {
            o.data
                .pointer("/status/initialization/provisioned")
                .and_then(Value::as_bool)
                == Some(true)
        })
        .map(|o| format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any()))
        .collect())
}

/// Whether drift was reported on the machine's ProxmoxMachine: a Warning event with a
/// drift reason, or its Ready condition False with one.
pub async fn drift_reported(client: &Client, m: &Machine) -> Result<bool> {
    let kind = objects::infra_machine().kind;
    let events = Api::<Event>::namespaced(client.clone(), &m.namespace)
        .list(&ListParams::default())
        .await?;
    let warned = events.items.iter().any(|e| {
        e.regarding
            .as_ref()
            .is_some_and(|r| r.name.as_deref() == Some(&m.name) && r.kind.as_deref() == Some(&kind))
            && e.type_.as_deref() == Some("Warning")
            && e.reason
                .as_deref()
                .is_some_and(|r| DRIFT_REASONS.contains(&r))
    });
    if warned {
        return Ok(true);
    }
    let obj = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &m.namespace,
        &objects::infra_machine(),
    )
    .get_opt(&m.name)
    .await?;
    Ok(obj.is_some_and(|o| {
        o.data
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c["type"] == "Ready"
                        && c["status"] == "False"
                        && c["reason"]
                            .as_str()
                            .is_some_and(|r| DRIFT_REASONS.contains(&r))
                })
            })
    }))
}

/// Infrastructure objects (machines and clusters) that still exist with our finalizer.
pub async fn stuck(client: &Client) -> Result<Vec<String>> {
    let mut out = vec![];
    for ar in [objects::infra_machine(), objects::infra_cluster()] {
        let list = Api::<DynamicObject>::all_with(client.clone(), &ar)
            .list_metadata(&ListParams::default())
            .await?;
        for o in list.items {
            if o.finalizers().iter().any(|f| f.ends_with(FINALIZER_SUFFIX)) {
                let deleting = if o.metadata.deletion_timestamp.is_some() {
                    "being deleted"
                } else {
                    "not deleted"
                };
                out.push(format!(
                    "{} {}/{} ({deleting})",
                    ar.kind,
                    o.namespace().unwrap_or_default(),
                    o.name_any()
                ));
            }
        }
    }
    Ok(out)
}
