//! The kubeadm bootstrap and control plane managers start against the plane with their
//! webhooks on loopback: the bootstrap provider converts a KubeadmConfigTemplate to
//! v1beta1 and rejects an Ignition KubeadmConfig (feature gate off), and the control plane
//! provider rejects an even number of replicas with stacked etcd.

use anyhow::Result;
use kube_world::{Plane, PlaneOpts};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeadm_bootstrap_and_control_plane_managers_convert_and_validate_through_webhooks() {
    let plane = Plane::start(PlaneOpts::default())
        .await
        .expect("starting the plane");
    if let Err(e) = kubeadm(&plane).await {
        panic!("{e:#}");
    }
}

async fn kubeadm(plane: &Plane) -> Result<()> {
    plane.install_capi_crds().await?;
    let bootstrap = plane.start_kubeadm_bootstrap().await?;
    let control_plane = plane.start_kubeadm_control_plane().await?;
    eprintln!(
        "logs: {} {}",
        bootstrap.log.display(),
        control_plane.log.display()
    );
    let ns = plane.namespace("kubeadm").await?;

    plane
        .apply_yaml_in(
            &ns,
            r#"
apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KubeadmConfigTemplate
metadata:
  name: workers
spec:
  template:
    spec:
      format: cloud-config
      preKubeadmCommands: ["echo hello"]
"#,
        )
        .await?;
    // Served as v1beta1 through the bootstrap provider's conversion webhook.
    let old = plane
        .dynamic_api(
            "bootstrap.cluster.x-k8s.io/v1beta1",
            "KubeadmConfigTemplate",
            Some(&ns),
        )
        .await?
        .get("workers")
        .await?;
    assert_eq!(
        old.data["spec"]["template"]["spec"]["preKubeadmCommands"][0],
        "echo hello"
    );

    let err = plane
        .apply_yaml_in(
            &ns,
            "apiVersion: bootstrap.cluster.x-k8s.io/v1beta2\nkind: KubeadmConfig\nmetadata:\n  name: ign\nspec:\n  format: ignition\n",
        )
        .await
        .expect_err("Ignition needs a feature gate");
    assert!(
        format!("{err:#}").contains("validation.kubeadmconfig.bootstrap.cluster.x-k8s.io"),
        "{err:#}"
    );

    let err = plane
        .apply_yaml_in(
            &ns,
            r#"
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlane
metadata:
  name: even
spec:
  replicas: 2
  version: v1.35.4
  machineTemplate:
    spec:
      infrastructureRef:
        apiGroup: infrastructure.cluster.x-k8s.io
        kind: ExampleMachineTemplate
        name: cp
"#,
        )
        .await
        .expect_err("two stacked-etcd replicas must be rejected");
    let msg = format!("{err:#}");
    assert!(
        msg.contains("kubeadmcontrolplane.controlplane.cluster.x-k8s.io") && msg.contains("even"),
        "{msg}"
    );
    Ok(())
}
