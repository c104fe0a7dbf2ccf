//! The real Cluster API core manager runs against the plane with its webhooks served on
//! loopback: its validating webhook rejects a bad Cluster, it reconciles a Cluster that
//! references one of our InfraCluster kinds (Paused / InfrastructureReady conditions,
//! finalizer, owner reference), picks up `status.initialization.provisioned` and the
//! endpoint from it, and its conversion webhook serves the Cluster as v1beta1.

use std::time::Instant;

use anyhow::Result;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube_world::{Plane, PlaneOpts};

use crate::support::wait_until;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/example-infra-crd.yaml"
);

fn condition<'a>(obj: &'a DynamicObject, type_: &str) -> Option<&'a serde_json::Value> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capi_core_manager_reconciles_a_cluster_with_our_infra_cluster_through_its_webhooks() {
    let plane = Plane::start(PlaneOpts::default())
        .await
        .expect("starting the plane");
    if let Err(e) = reconcile_a_cluster(&plane).await {
        panic!("{e:#}");
    }
}

async fn reconcile_a_cluster(plane: &Plane) -> Result<()> {
    plane.install_capi_crds().await?;
    plane.install_crds_file(FIXTURE).await?;
    let t = Instant::now();
    let mgr = plane.start_capi_core().await?;
    eprintln!(
        "capi core manager ready in {:?}, webhooks on 127.0.0.1:{}, log {}",
        t.elapsed(),
        mgr.webhook_port,
        mgr.log.display()
    );
    let ns = plane.namespace("capi-core").await?;

    // The validating webhook (rewritten to loopback) is called and rejects a Cluster that
    // references nothing; the schema alone would accept it.
    let err = plane
        .apply_yaml_in(
            &ns,
            "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata:\n  name: empty\nspec:\n  paused: false\n",
        )
        .await
        .expect_err("the Cluster validating webhook must reject a Cluster without references");
    assert!(
        format!("{err:#}").contains("admission webhook \"validation.cluster.cluster.x-k8s.io\""),
        "{err:#}"
    );

    plane
        .apply_yaml_in(
            &ns,
            r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: ExampleCluster
metadata:
  name: reconciled
spec: {}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: reconciled
spec:
  clusterNetwork:
    pods:
      cidrBlocks: ["10.244.0.0/16"]
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: ExampleCluster
    name: reconciled
"#,
        )
        .await?;
    let clusters = plane
        .dynamic_api("cluster.x-k8s.io/v1beta2", "Cluster", Some(&ns))
        .await?;
    let cluster = wait_until(
        plane,
        &clusters,
        "reconciled",
        "Paused and InfrastructureReady conditions",
        |c| condition(c, "Paused").is_some() && condition(c, "InfrastructureReady").is_some(),
    )
    .await?;
    eprintln!("conditions: {}", cluster.data["status"]["conditions"]);
    let paused = condition(&cluster, "Paused").unwrap();
    assert_eq!(paused["status"], "False", "{paused}");
    assert_eq!(paused["reason"], "NotPaused", "{paused}");
    assert_eq!(
        condition(&cluster, "InfrastructureReady").unwrap()["status"],
        "False"
    );
    // The core controller adds its finalizer and owns our InfraCluster.
    assert!(
        cluster
            .metadata
            .finalizers
            .unwrap_or_default()
            .iter()
            .any(|f| f.starts_with("cluster.cluster.x-k8s.io")),
    );
    let infra = plane
        .dynamic_api(
            "infrastructure.cluster.x-k8s.io/v1alpha1",
            "ExampleCluster",
            Some(&ns),
        )
        .await?;
    let owned = wait_until(
        plane,
        &infra,
        "reconciled",
        "Cluster owner reference on ExampleCluster",
        |o| {
            o.metadata.owner_references.as_ref().is_some_and(|refs| {
                refs.iter()
                    .any(|r| r.kind == "Cluster" && r.name == "reconciled")
            })
        },
    )
    .await?;
    assert_eq!(
        owned
            .metadata
            .labels
            .unwrap_or_default()
            .get("cluster.x-k8s.io/cluster-name")
            .map(String::as_str),
        Some("reconciled")
    );

    // Our side of the contract: endpoint, then provisioned -> the Cluster picks both up.
    // In this order, as a provider writes them: marked provisioned first, the Cluster
    // could take it (and be awaited below) before the endpoint was written.
    infra
        .patch(
            "reconciled",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "spec": { "controlPlaneEndpoint": { "host": "10.0.0.10", "port": 6443 } }
            })),
        )
        .await?;
    infra
        .patch_status(
            "reconciled",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "status": { "initialization": { "provisioned": true } }
            })),
        )
        .await?;
    let cluster = wait_until(
        plane,
        &clusters,
        "reconciled",
        "infrastructure provisioned",
        |c| {
            c.data["status"]["initialization"]["infrastructureProvisioned"] == true
                && condition(c, "InfrastructureReady").is_some_and(|r| r["status"] == "True")
        },
    )
    .await?;
    assert_eq!(
        cluster.data["spec"]["controlPlaneEndpoint"]["host"],
        "10.0.0.10"
    );

    // The conversion webhook (rewritten to loopback) serves the stored v1beta2 as v1beta1.
    let old = plane
        .dynamic_api("cluster.x-k8s.io/v1beta1", "Cluster", Some(&ns))
        .await?;
    let v1beta1 = old.get("reconciled").await?;
    assert_eq!(
        v1beta1.types.as_ref().map(|t| t.api_version.as_str()),
        Some("cluster.x-k8s.io/v1beta1")
    );
    assert_eq!(v1beta1.data["status"]["infrastructureReady"], true);
    Ok(())
}
