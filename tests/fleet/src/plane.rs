//! The management plane a run drives: etcd, kube-apiserver, kube-controller-manager and
//! the Cluster API core manager as processes, with Cluster API's CRDs and the plugin's.
use std::path::Path;

use anyhow::{Context, Result, bail};
use kube_world::{Plane, PlaneOpts};

use crate::webhook::Service;

/// Starts the plane with `opts` (its controller manager once the CRDs are in, so the
/// garbage collector knows them), installs Cluster API's CRDs and those `hyperplug crds`
/// renders for `plugin` (converting through the returned webhook Service, which the
/// managers join as they start), and starts the Cluster API core manager.
pub async fn start(hyperplug: &Path, plugin: &Path, opts: PlaneOpts) -> Result<(Plane, Service)> {
    let plane = Plane::start(PlaneOpts {
        controller_manager: false,
        ..opts
    })
    .await?;
    plane.install_capi_crds().await?;
    let crds = std::process::Command::new(hyperplug)
        .arg("crds")
        .arg(plugin)
        .output()
        .context("running hyperplug crds")?;
    if !crds.status.success() {
        bail!(
            "hyperplug crds failed: {}",
            String::from_utf8_lossy(&crds.stderr)
        );
    }
    let webhook = Service::start(&plane).await?;
    plane
        .install_crds_yaml_converted_at(&String::from_utf8(crds.stdout)?, &webhook.url)
        .await?;
    plane.start_controller_manager().await?;
    plane.start_capi_core().await?;
    Ok((plane, webhook))
}
