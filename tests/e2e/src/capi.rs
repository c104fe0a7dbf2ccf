//! Reading Cluster API objects, waiting on them, and the binaries the flow runs.
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, anyhow, bail};
use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use serde_json::Value;

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

/// The `hyperplug` binary next to the running executable (`target/<profile>/` for the
/// `quickstart` binary, its parent for test binaries in `deps/`), or `$HYPERPLUG_BIN`.
pub fn hyperplug_binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("HYPERPLUG_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .ok_or_else(|| anyhow!("no directory of {}", exe.display()))?;
    [dir.join("hyperplug"), dir.join("../hyperplug")]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| {
            anyhow!(
                "no hyperplug binary next to {}: run `cargo build -p hyperplug` (or set HYPERPLUG_BIN)",
                exe.display()
            )
        })
}

/// Builds the `hyperplug` binary into the target directory this test runs from
/// (integration tests of another package do not get it built by cargo), and returns it;
/// `$HYPERPLUG_BIN` when set (built already: scripts/test-parallel.sh runs these tests
/// while another cargo holds the target directory).
pub fn build_hyperplug() -> Result<PathBuf> {
    if std::env::var_os("HYPERPLUG_BIN").is_some() {
        return hyperplug_binary();
    }
    let exe = std::env::current_exe()?;
    // target/<profile>/deps/<test binary>
    let target = exe
        .ancestors()
        .nth(3)
        .ok_or_else(|| anyhow!("unexpected test binary path {}", exe.display()))?;
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "--quiet",
            "-p",
            "hyperplug",
            "--bin",
            "hyperplug",
            "--target-dir",
        ])
        .arg(target)
        .current_dir(packaging::repo_root())
        .status()
        .context("running cargo build -p hyperplug")?;
    if !status.success() {
        bail!("cargo build -p hyperplug failed ({status})");
    }
    hyperplug_binary()
}

/// The bundled plugin, built by `scripts/build-plugins.sh`.
pub fn bundled_plugin() -> Result<PathBuf> {
    let p = packaging::repo_root().join("plugins/proxmox.wasm");
    if !p.is_file() {
        bail!("{} is missing: run scripts/build-plugins.sh", p.display());
    }
    Ok(p)
}
