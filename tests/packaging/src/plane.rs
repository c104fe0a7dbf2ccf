//! The management plane the packaging tests apply to: Cluster API's core (with the
//! ClusterClass gate), kubeadm bootstrap and control-plane managers with their webhooks,
//! and the bundled plugin's CRDs converting through the manager's webhook.
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use kube_world::Plane;
use serde_json::Value;

use crate::install_bundled_crds;

/// Cluster API's core with ClusterClass (`clusterctl init` with `CLUSTER_TOPOLOGY=true`).
pub const TOPOLOGY_GATE: &str = "--feature-gates=ClusterTopology=true";
/// The kubeadm providers with Ignition bootstrap data as well (`clusterctl init` with
/// `EXP_KUBEADM_BOOTSTRAP_FORMAT_IGNITION=true`, what Flatcar flavors ask for).
pub const KUBEADM_GATES: &str =
    "--feature-gates=ClusterTopology=true,KubeadmBootstrapFormatIgnition=true";

/// Installs Cluster API's CRDs and ours and starts the managers.
pub async fn start_managers(plane: &Plane) -> Result<()> {
    plane.install_capi_crds().await?;
    install_bundled_crds(plane).await?;
    start_gated_managers(plane).await?;
    release_contract_labels(plane)
}

/// Starts Cluster API's core and kubeadm managers with the gates CAPMOX's flavors ask
/// for ([`TOPOLOGY_GATE`], [`KUBEADM_GATES`]).
pub async fn start_gated_managers(plane: &Plane) -> Result<()> {
    plane.start_capi_core_with(&[TOPOLOGY_GATE]).await?;
    plane.start_kubeadm_bootstrap_with(&[KUBEADM_GATES]).await?;
    plane
        .start_kubeadm_control_plane_with(&[KUBEADM_GATES])
        .await?;
    Ok(())
}

/// kube-world installs the kubeadm CRDs from `config/crd/bases`; released components
/// (what `clusterctl init` installs) carry the contract labels their kustomization adds,
/// which the ClusterClass controller needs to resolve template references. Add them
/// from the same kustomization files.
fn release_contract_labels(plane: &Plane) -> Result<()> {
    let capi = plane.tools().capi_dir();
    for (dir, crds) in [
        (
            "bootstrap/kubeadm/config/crd",
            &[
                "kubeadmconfigs.bootstrap.cluster.x-k8s.io",
                "kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io",
            ],
        ),
        (
            "controlplane/kubeadm/config/crd",
            &[
                "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
                "kubeadmcontrolplanetemplates.controlplane.cluster.x-k8s.io",
            ],
        ),
    ] {
        let kustomization: Value = serde_yaml::from_str(&std::fs::read_to_string(
            capi.join(dir).join("kustomization.yaml"),
        )?)?;
        let mut labels: Vec<String> = Vec::new();
        for entry in kustomization["labels"]
            .as_array()
            .context("kustomization without labels")?
        {
            for (k, v) in entry["pairs"].as_object().context("labels without pairs")? {
                labels.push(format!("{k}={}", v.as_str().unwrap_or_default()));
            }
        }
        ensure!(
            labels
                .iter()
                .any(|l| l.starts_with("cluster.x-k8s.io/v1beta2=")),
            "{dir}: {labels:?}"
        );
        for crd in crds {
            let out = std::process::Command::new(plane.tools().kubectl())
                .arg("--kubeconfig")
                .arg(plane.kubeconfig_path())
                .args(["label", "--overwrite", "crd", crd])
                .args(&labels)
                .output()?;
            ensure!(
                out.status.success(),
                "labelling {crd}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    Ok(())
}

/// An object of the plane as JSON.
pub async fn get(
    plane: &Plane,
    ns: &str,
    api_version: &str,
    kind: &str,
    name: &str,
) -> Result<Value> {
    let obj = plane
        .dynamic_api(api_version, kind, Some(ns))
        .await?
        .get(name)
        .await
        .with_context(|| format!("getting {kind} {ns}/{name}"))?;
    Ok(serde_json::to_value(obj)?)
}

pub async fn wait_class_reconciled(plane: &Plane, ns: &str, class: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let class = get(plane, ns, "cluster.x-k8s.io/v1beta2", "ClusterClass", class).await?;
        if class["status"]["observedGeneration"] == class["metadata"]["generation"]
            && class["status"]["variables"]
                .as_array()
                .is_some_and(|v| !v.is_empty())
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "ClusterClass not reconciled within 60 s: {}",
                class["status"]
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
