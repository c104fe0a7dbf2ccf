//! The real Cluster API core manager runs against the plane with its webhooks served on
//! loopback, and reconciles a Cluster: v1beta2 conditions appear, admission webhooks are
//! called on create, and the conversion webhook serves the Cluster as v1beta1.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use kube::api::{Api, DynamicObject};
use kube_world::{Plane, PlaneOpts};

fn condition<'a>(obj: &'a DynamicObject, type_: &str) -> Option<&'a serde_json::Value> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

async fn wait_for_conditions(
    plane: &Plane,
    api: &Api<DynamicObject>,
    name: &str,
    types: &[&str],
) -> Result<DynamicObject> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        plane.check_processes()?;
        let obj = api.get(name).await?;
        if types.iter().all(|t| condition(&obj, t).is_some()) {
            return Ok(obj);
        }
        if Instant::now() > deadline {
            bail!(
                "conditions {types:?} not set on {name} after 90 s; status: {}",
                obj.data["status"]
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capi_core_manager_sets_paused_and_infrastructure_ready_conditions_on_a_cluster() {
    let plane = Plane::start(PlaneOpts::default())
        .await
        .expect("starting the plane");
    if let Err(e) = reconcile_a_cluster(&plane).await {
        panic!("{e:#}");
    }
}

async fn reconcile_a_cluster(plane: &Plane) -> Result<()> {
    plane.install_capi_crds().await?;
    let t = Instant::now();
    let mgr = plane.start_capi_core().await?;
    eprintln!(
        "capi core manager ready in {:?}, webhooks on 127.0.0.1:{}, log {}",
        t.elapsed(),
        mgr.webhook_port,
        mgr.log.display()
    );

    let ns = plane.namespace("capi-core").await?;
    plane
        .apply_yaml_in(
            &ns,
            r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: reconciled
spec:
  clusterNetwork:
    pods:
      cidrBlocks: ["10.244.0.0/16"]
"#,
        )
        .await?;
    let clusters = plane
        .dynamic_api("cluster.x-k8s.io/v1beta2", "Cluster", Some(&ns))
        .await?;
    let cluster = wait_for_conditions(
        plane,
        &clusters,
        "reconciled",
        &["Paused", "InfrastructureReady"],
    )
    .await?;
    let paused = condition(&cluster, "Paused").unwrap();
    assert_eq!(paused["status"], "False", "{paused}");
    eprintln!("conditions: {}", cluster.data["status"]["conditions"]);
    // The core controller adds its finalizer.
    assert!(
        cluster
            .metadata
            .finalizers
            .unwrap_or_default()
            .iter()
            .any(|f| f.starts_with("cluster.cluster.x-k8s.io")),
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

    // The validating webhook rejects an invalid Cluster (topology without a class).
    let err = plane
        .apply_yaml_in(
            &ns,
            r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: invalid
spec:
  topology:
    classRef:
      name: ""
    version: not-a-version
"#,
        )
        .await
        .expect_err("the Cluster webhook or schema must reject this");
    eprintln!("rejected as expected: {err:#}");
    Ok(())
}
