//! `kubectl apply --server-side` without kubectl: multi-document YAML through kube-rs's
//! dynamic API, with discovery for each kind.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use kube::{Client, ResourceExt};
use serde::Deserialize;

/// The field manager used for server-side apply.
pub const FIELD_MANAGER: &str = "kube-world";

/// Splits multi-document YAML into JSON values, skipping empty documents.
pub fn parse_documents(yaml: &str) -> Result<Vec<serde_json::Value>> {
    let mut docs = Vec::new();
    for (i, de) in serde_yaml::Deserializer::from_str(yaml).enumerate() {
        let value = serde_yaml::Value::deserialize(de)
            .with_context(|| format!("parsing YAML document {i}"))?;
        if value.is_null() {
            continue;
        }
        let json = serde_json::to_value(value)
            .with_context(|| format!("YAML document {i} is not JSON-compatible"))?;
        docs.push(json);
    }
    Ok(docs)
}

/// Group, version and kind of an object's `apiVersion`/`kind`.
pub fn gvk_of(obj: &serde_json::Value) -> Result<GroupVersionKind> {
    let api_version = obj
        .get("apiVersion")
        .and_then(|v| v.as_str())
        .ok_or_else(|| anyhow!("document without apiVersion"))?;
    let kind = obj
        .get("kind")
        .and_then(|v| v.as_str())
        .ok_or_else(|| anyhow!("document without kind"))?;
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    Ok(GroupVersionKind::gvk(group, version, kind))
}

/// An [`Api`] for a kind, found by discovery. Retries for up to 30 s while the kind is
/// unknown (a CRD that was just established takes a moment to appear in discovery).
pub async fn dynamic_api(
    client: &Client,
    gvk: &GroupVersionKind,
    namespace: Option<&str>,
) -> Result<Api<DynamicObject>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let (ar, caps) = loop {
        match discovery::pinned_kind(client, gvk).await {
            Ok(found) => break found,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => return Err(e).with_context(|| format!("discovering {gvk:?}")),
        }
    };
    Ok(match caps.scope {
        Scope::Cluster => Api::all_with(client.clone(), &ar),
        Scope::Namespaced => {
            Api::namespaced_with(client.clone(), namespace.unwrap_or("default"), &ar)
        }
    })
}

/// Server-side applies one object. Namespaced objects without `metadata.namespace` go to
/// `default_namespace` (or `default`).
pub async fn apply_object(
    client: &Client,
    default_namespace: Option<&str>,
    mut obj: serde_json::Value,
) -> Result<DynamicObject> {
    let gvk = gvk_of(&obj)?;
    if let Some(meta) = obj.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.remove("resourceVersion");
        meta.remove("managedFields");
        meta.remove("uid");
        meta.remove("creationTimestamp");
    }
    let dynobj: DynamicObject = serde_json::from_value(obj).context("not a Kubernetes object")?;
    let name = dynobj.name_any();
    if name.is_empty() {
        bail!("{} without metadata.name", gvk.kind);
    }
    let ns = dynobj
        .metadata
        .namespace
        .clone()
        .or_else(|| default_namespace.map(str::to_string));
    let api = dynamic_api(client, &gvk, ns.as_deref()).await?;
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(&name, &params, &Patch::Apply(&dynobj))
        .await
        .with_context(|| format!("applying {} {name}", gvk.kind))
}

/// Server-side applies every document of a multi-document YAML string, in order.
pub async fn apply_yaml(
    client: &Client,
    default_namespace: Option<&str>,
    yaml: &str,
) -> Result<Vec<DynamicObject>> {
    let mut out = Vec::new();
    for doc in parse_documents(yaml)? {
        out.push(apply_object(client, default_namespace, doc).await?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_document_yaml_skips_empty_documents_and_keeps_order() {
        let docs = parse_documents(
            "---\n# only a comment\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\napiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {name: b}\n",
        )
        .unwrap();
        assert_eq!(docs.len(), 2);
        let core = gvk_of(&docs[0]).unwrap();
        assert_eq!(
            (
                core.group.as_str(),
                core.version.as_str(),
                core.kind.as_str()
            ),
            ("", "v1", "ConfigMap")
        );
        let capi = gvk_of(&docs[1]).unwrap();
        assert_eq!(capi.group, "cluster.x-k8s.io");
        assert_eq!(capi.version, "v1beta2");
    }

    #[test]
    fn a_document_without_kind_is_an_error() {
        let docs = parse_documents("apiVersion: v1\nmetadata: {name: a}\n").unwrap();
        assert!(gvk_of(&docs[0]).is_err());
    }
}
