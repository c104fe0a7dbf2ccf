//! The binaries built by scripts/build-tools.sh carry real versions: clusterctl reports the
//! pinned Cluster API release, and the API server (via /version and via the built kubectl)
//! the pinned Kubernetes release, never `v0.0.0-master`.

use std::process::Command;

use anyhow::{Context, Result, ensure};
use kube_world::{Plane, PlaneOpts, Tools};

fn run_json(cmd: &mut Command) -> Result<serde_json::Value> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    ensure!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "{cmd:?} printed no JSON: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[test]
fn clusterctl_version_is_the_pinned_cluster_api_release() -> Result<()> {
    let tools = Tools::get()?;
    let v = run_json(
        Command::new(tools.clusterctl())
            .args(["version", "-o", "json"])
            .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true"),
    )?;
    eprintln!("clusterctl version: {v}");
    assert_eq!(v["clusterctl"]["gitVersion"], tools.capi_version());
    assert!(tools.capi_version().starts_with("v1.14."));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_reports_the_pinned_kubernetes_release_to_the_client_and_to_kubectl() {
    let plane = Plane::start(PlaneOpts::default())
        .await
        .expect("starting the plane");
    if let Err(e) = versions_match(&plane).await {
        panic!("{e:#}");
    }
}

async fn versions_match(plane: &Plane) -> Result<()> {
    let tools = plane.tools();
    let want = tools.kubernetes_version();
    eprintln!("plane started in {:?}", plane.started_in());

    // /version through kube-rs.
    let info = plane.client().apiserver_version().await?;
    assert_eq!(info.git_version, want);
    assert_eq!(plane.server_version().git_version, want);
    assert_ne!(info.git_version, "v0.0.0-master");

    // The built kubectl against the plane's generated kubeconfig.
    let v = run_json(
        Command::new(tools.kubectl())
            .arg(format!(
                "--kubeconfig={}",
                plane.kubeconfig_path().display()
            ))
            .args(["version", "-o", "json"]),
    )?;
    eprintln!("kubectl version: {v}");
    assert_eq!(v["serverVersion"]["gitVersion"], want);
    assert_eq!(v["clientVersion"]["gitVersion"], want);
    Ok(())
}
