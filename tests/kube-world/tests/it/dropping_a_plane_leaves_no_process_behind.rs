//! Teardown: dropping a plane kills every process it started (managers included) and
//! removes its directory; a second plane at the same time gets its own ports.

use std::path::Path;

use kube_world::{Plane, PlaneOpts};

fn alive(pid: u32) -> bool {
    // A zombie would still have /proc/<pid>; the plane reaps its children, so none remain.
    Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_planes_kills_their_processes_and_removes_their_directories() {
    let (a, b) = tokio::join!(
        Plane::start(PlaneOpts {
            controller_manager: true,
            ..PlaneOpts::default()
        }),
        Plane::start(PlaneOpts::default())
    );
    let (a, b) = (a.expect("plane a"), b.expect("plane b"));
    assert_ne!(a.server_url(), b.server_url());
    a.install_capi_crds().await.expect("CAPI CRDs");
    a.start_capi_core().await.expect("CAPI core manager");

    let pids = a.pids();
    assert_eq!(
        pids.len(),
        4,
        "etcd, kube-apiserver, kube-controller-manager, capi-core"
    );
    assert!(pids.iter().all(|p| alive(*p)));
    let dir = a.dir().to_path_buf();
    drop(a);
    for pid in pids {
        assert!(!alive(pid), "process {pid} survived the plane");
    }
    assert!(!dir.exists(), "{} was not removed", dir.display());

    // The other plane is unaffected.
    let v = b
        .client()
        .apiserver_version()
        .await
        .expect("plane b still serves");
    assert_eq!(v.git_version, b.tools().kubernetes_version());
}
