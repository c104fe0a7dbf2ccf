//! A real etcd + kube-apiserver + kube-controller-manager: Cluster API v1beta2 objects and
//! one of our infrastructure kinds are stored, read back, and deleted through owner
//! reference garbage collection.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use kube::api::DeleteParams;
use kube_world::{Plane, PlaneOpts};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/example-infra-crd.yaml"
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_machine_and_infra_machine_round_trip_and_are_garbage_collected() {
    let plane = Plane::start(PlaneOpts::default())
        .await
        .expect("starting the plane");
    // Panicking while the plane is alive keeps its directory (logs) and prints it.
    if let Err(e) = round_trip_and_collect(&plane).await {
        panic!("{e:#}");
    }
}

async fn round_trip_and_collect(plane: &Plane) -> Result<()> {
    eprintln!(
        "plane {} up in {:?} ({}); kubeconfig {}",
        plane.server_url(),
        plane.started_in(),
        plane.server_version().git_version,
        plane.kubeconfig_path().display()
    );
    let t = Instant::now();
    let capi = plane.install_capi_crds().await?;
    let ours = plane.install_crds_file(FIXTURE).await?;
    eprintln!(
        "{} CRDs installed in {:?}",
        capi.len() + ours.len(),
        t.elapsed()
    );
    assert!(capi.contains(&"clusters.cluster.x-k8s.io".to_string()));
    assert_eq!(
        ours,
        [
            "exampleclusters.infrastructure.cluster.x-k8s.io",
            "examplemachines.infrastructure.cluster.x-k8s.io"
        ]
    );
    // Started after the CRDs so its garbage collector knows the kinds from the start.
    plane.start_controller_manager().await?;

    let ns = plane.namespace("gc-round-trip").await?;
    let cluster = plane
        .apply_yaml_in(
            &ns,
            r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: demo
spec:
  clusterNetwork:
    pods:
      cidrBlocks: ["10.244.0.0/16"]
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: ExampleCluster
    name: demo
"#,
        )
        .await?
        .remove(0);
    let cluster_uid = cluster.metadata.uid.clone().expect("uid");

    let machine = plane
        .apply_yaml_in(
            &ns,
            &format!(
                r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata:
  name: demo-cp-0
  labels:
    cluster.x-k8s.io/cluster-name: demo
  ownerReferences:
  - apiVersion: cluster.x-k8s.io/v1beta2
    kind: Cluster
    name: demo
    uid: {cluster_uid}
spec:
  clusterName: demo
  version: v1.35.4
  bootstrap:
    dataSecretName: demo-bootstrap
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: ExampleMachine
    name: demo-cp-0
"#
            ),
        )
        .await?
        .remove(0);
    let machine_uid = machine.metadata.uid.clone().expect("uid");

    plane
        .apply_yaml_in(
            &ns,
            &format!(
                r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: ExampleMachine
metadata:
  name: demo-cp-0
  ownerReferences:
  - apiVersion: cluster.x-k8s.io/v1beta2
    kind: Machine
    name: demo-cp-0
    uid: {machine_uid}
    controller: true
    blockOwnerDeletion: true
spec:
  providerID: proxmox://00000000-0000-0000-0000-000000000001
  cores: 2
"#
            ),
        )
        .await?;

    // Read everything back.
    let clusters = plane
        .dynamic_api("cluster.x-k8s.io/v1beta2", "Cluster", Some(&ns))
        .await?;
    let machines = plane
        .dynamic_api("cluster.x-k8s.io/v1beta2", "Machine", Some(&ns))
        .await?;
    let infra = plane
        .dynamic_api(
            "infrastructure.cluster.x-k8s.io/v1alpha1",
            "ExampleMachine",
            Some(&ns),
        )
        .await?;
    let c = clusters.get("demo").await?;
    assert_eq!(
        c.data["spec"]["infrastructureRef"]["kind"],
        "ExampleCluster"
    );
    let m = machines.get("demo-cp-0").await?;
    assert_eq!(m.data["spec"]["clusterName"], "demo");
    assert_eq!(
        m.data["spec"]["bootstrap"]["dataSecretName"],
        "demo-bootstrap"
    );
    let im = infra.get("demo-cp-0").await?;
    assert_eq!(
        im.data["spec"]["providerID"],
        "proxmox://00000000-0000-0000-0000-000000000001"
    );
    assert_eq!(im.data["spec"]["cores"], 2);

    // Delete the Cluster; the garbage collector removes the Machine, then ours.
    clusters.delete("demo", &DeleteParams::background()).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        plane.check_processes()?;
        let m = machines.get_opt("demo-cp-0").await?;
        let i = infra.get_opt("demo-cp-0").await?;
        let c = clusters.get_opt("demo").await?;
        if m.is_none() && i.is_none() && c.is_none() {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "not garbage-collected after 60 s: cluster {} machine {} infra machine {}",
                c.is_some(),
                m.is_some(),
                i.is_some()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}
