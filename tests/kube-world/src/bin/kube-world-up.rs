//! Starts a plane for a person to look around, prints its kubeconfig, and tears it down on
//! Ctrl-C. Flags: `--controller-manager`, `--capi` (CAPI CRDs + core manager),
//! `--kubeadm` (kubeadm bootstrap + control plane managers), `--ipam`, `--cert-manager`,
//! `--crds <file-or-dir>` (repeatable).

use std::path::PathBuf;

use anyhow::{Result, bail};
use kube_world::{Plane, PlaneOpts};

#[tokio::main]
async fn main() -> Result<()> {
    let mut opts = PlaneOpts::default();
    let (mut capi, mut kubeadm, mut ipam, mut cert_manager) = (false, false, false, false);
    let mut crds: Vec<PathBuf> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--controller-manager" => opts.controller_manager = true,
            "--capi" => capi = true,
            "--kubeadm" => kubeadm = true,
            "--ipam" => ipam = true,
            "--cert-manager" => cert_manager = true,
            "--crds" => match args.next() {
                Some(p) => crds.push(p.into()),
                None => bail!("--crds needs a file or directory"),
            },
            other => bail!("unknown argument {other}"),
        }
    }
    let plane = Plane::start(opts).await?;
    if capi || kubeadm || ipam {
        plane.install_capi_crds().await?;
    }
    for c in &crds {
        if c.is_dir() {
            plane.install_crds_dir(c).await?;
        } else {
            plane.install_crds_file(c).await?;
        }
    }
    if capi {
        plane.start_capi_core().await?;
    }
    if kubeadm {
        plane.start_kubeadm_bootstrap().await?;
        plane.start_kubeadm_control_plane().await?;
    }
    if ipam {
        plane.start_ipam().await?;
    }
    if cert_manager {
        plane.start_cert_manager().await?;
    }
    println!(
        "plane {} ({}) up in {:?}",
        plane.server_url(),
        plane.server_version().git_version,
        plane.started_in()
    );
    println!(
        "export KUBECONFIG={}\nkubectl: {}\nlogs in {}\nCtrl-C to stop.",
        plane.kubeconfig_path().display(),
        plane.tools().kubectl().display(),
        plane.dir().display()
    );
    tokio::signal::ctrl_c().await?;
    drop(plane);
    Ok(())
}
