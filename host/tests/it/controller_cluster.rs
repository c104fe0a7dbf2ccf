//! The InfraCluster controller against a real kube-apiserver and pve-sim: the contract
//! fields, pause, terminal errors, IP pools, and no secret in any log, event or status.

use crate::support::world::{TOKEN_SECRET, World, condition, logs, ready_reason};
use kube::api::{Api, DynamicObject};
use serde_json::json;

fn cluster_yaml(endpoint: bool) -> String {
    let endpoint = if endpoint {
        "  controlPlaneEndpoint:\n    host: 192.168.1.230\n    port: 6443\n"
    } else {
        ""
    };
    // As CAPI has it: the Cluster refers to the ProxmoxCluster, which carries the
    // cluster-name label and an owner reference (set below once the UID is known).
    format!(
        r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: demo
spec:
  clusterNetwork:
    pods:
      cidrBlocks: ["10.44.0.0/16"]
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: ProxmoxCluster
    name: demo
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: ProxmoxCluster
metadata:
  name: demo
  labels:
    cluster.x-k8s.io/cluster-name: demo
spec:
  allowedNodes: [pve1, pve2]
{endpoint}  dnsServers: [192.168.1.1]
  ipv4Config:
    addresses: ["192.168.1.220-192.168.1.229"]
    gateway: 192.168.1.1
    prefix: 24
  schedulerHints:
    memoryAdjustment: 0
  credentialsRef:
    name: pve-credentials
"#
    )
}

/// The world with the cluster `demo` applied and provisioned: the ProxmoxCluster API and
/// the object as first seen provisioned.
async fn provisioned_cluster() -> (World, Api<DynamicObject>, DynamicObject) {
    let world = World::start(pve_sim::Config::fast()).await;
    world.apply(&cluster_yaml(true)).await;
    let clusters = world
        .api("infrastructure.cluster.x-k8s.io/v1alpha1", "ProxmoxCluster")
        .await;
    let provisioned = world
        .wait_for(&clusters, "demo", "provisioned", |o| {
            o.data["status"]["initialization"]["provisioned"] == true
        })
        .await;
    (world, clusters, provisioned)
}

#[tokio::test]
async fn a_proxmox_cluster_is_provisioned_with_endpoint_failure_domains_and_pool() {
    let (world, clusters, pc) = provisioned_cluster().await;
    assert_eq!(condition(&pc, "Ready").unwrap()["status"], "True");
    assert_eq!(condition(&pc, "Paused").unwrap()["reason"], "NotPaused");
    let domains: Vec<_> = pc.data["status"]["failureDomains"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].clone())
        .collect();
    assert_eq!(domains, [json!("pve1"), json!("pve2")]);
    assert!(
        pc.metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"proxmox.infrastructure.hyperplug.dev".to_string())
    );
    let pools = world
        .api("ipam.cluster.x-k8s.io/v1alpha2", "InClusterIPPool")
        .await;
    let pool = world
        .wait_for(&pools, "demo-v4-icip", "pool exists", |_| true)
        .await;
    assert_eq!(
        pool.data["spec"]["addresses"],
        json!(["192.168.1.220-192.168.1.229"])
    );
    assert_eq!(pool.data["spec"]["prefix"], 24);
    // Metrics count reconciles, plugin calls and the API requests plugins made.
    let text = world.metrics.encode();
    assert!(
        text.contains(r#"hyperplug_reconciles_total{kind="ProxmoxCluster",result="ok"}"#),
        "{text}"
    );
    assert!(text.contains(
        r#"hyperplug_plugin_calls_total{plugin="proxmox",call="cluster.reconcile",result="ok"}"#
    ));
    assert!(
        text.contains(r#"hyperplug_infrastructure_api_requests_total{plugin="proxmox",method="GET",path="/api2/json/version"}"#),
        "{text}"
    );
    // Deleting it releases the finalizer (nothing cluster-wide on Proxmox to remove).
    clusters.delete("demo", &Default::default()).await.unwrap();
    world.wait_gone(&clusters, "demo").await;
}

#[tokio::test]
async fn a_spec_error_is_a_terminal_condition_until_the_spec_is_fixed() {
    let world = World::start(pve_sim::Config::fast()).await;
    world.apply(&cluster_yaml(false)).await;
    let clusters = world
        .api("infrastructure.cluster.x-k8s.io/v1alpha1", "ProxmoxCluster")
        .await;
    // No retries while the generation stays, not even at the 5 s resync: the
    // simulator sees no further calls.
    let ready = world.failed_terminally(&clusters, "demo", &[]).await;
    assert_eq!(ready["reason"], "InvalidSpec");
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .starts_with("spec.controlPlaneEndpoint:"),
        "{ready}"
    );
    // Fixing the spec (a new generation) recovers.
    world.apply(&cluster_yaml(true)).await;
    world
        .wait_for(&clusters, "demo", "recovered", |o| {
            o.data["status"]["initialization"]["provisioned"] == true
        })
        .await;
}

#[tokio::test]
async fn pausing_the_cluster_stops_plugin_calls_and_unpausing_resumes() {
    let (world, clusters, _) = provisioned_cluster().await;
    world
        .pausing_the_cluster_stops_plugin_calls(&clusters, "demo")
        .await;
}

#[tokio::test]
async fn no_secret_appears_in_logs_events_or_status() {
    let (world, clusters, _) = provisioned_cluster().await;
    let statuses =
        serde_json::to_string(&clusters.list(&Default::default()).await.unwrap().items).unwrap();
    let events = world
        .plane
        .dynamic_api("v1", "Event", Some(&world.ns))
        .await
        .unwrap();
    // The event is published just after the status that shows the cluster provisioned.
    let mut tries = 0;
    let events = loop {
        let listed =
            serde_json::to_string(&events.list(&Default::default()).await.unwrap().items).unwrap();
        tries += 1;
        if listed.contains(r#""reason":"Ready""#) || tries == 100 {
            break listed;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(
        events.contains(r#""reason":"Ready""#),
        "the Ready phase is published as an event: {events}"
    );
    let logs = String::from_utf8_lossy(&logs().lock().unwrap()).to_string();
    assert!(!logs.is_empty());
    for (what, text) in [("status", &statuses), ("events", &events), ("logs", &logs)] {
        assert!(
            !text.contains(TOKEN_SECRET),
            "the token secret leaked into {what}"
        );
    }
}

#[tokio::test]
async fn a_wrong_token_shows_authentication_failed_until_the_secret_is_fixed() {
    let world = World::start(pve_sim::Config::fast()).await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(world.plane.client(), &world.ns);
    let token = |value: &str| kube::api::Patch::Merge(json!({"stringData": {"secret": value}}));
    secrets
        .patch(
            "pve-credentials",
            &Default::default(),
            &token("a-wrong-token-secret"),
        )
        .await
        .unwrap();
    world.apply(&cluster_yaml(true)).await;
    let clusters = world
        .api("infrastructure.cluster.x-k8s.io/v1alpha1", "ProxmoxCluster")
        .await;
    let pc = world
        .wait_for(&clusters, "demo", "authentication failed", |o| {
            ready_reason(o).as_deref() == Some("AuthenticationFailed")
        })
        .await;
    let ready = condition(&pc, "Ready").unwrap();
    assert_eq!(ready["status"], "False");
    let message = ready["message"].as_str().unwrap();
    assert!(message.contains("401"), "{message}");
    assert!(!message.contains("a-wrong-token-secret"), "{message}");
    assert!(pc.data["status"]["failedGeneration"].is_i64());
    assert_ne!(pc.data["status"]["initialization"]["provisioned"], true);
    // The user fixes the Secret, not the spec: the next resync (5 s here) tries again.
    secrets
        .patch("pve-credentials", &Default::default(), &token(TOKEN_SECRET))
        .await
        .unwrap();
    let pc = world
        .wait_for(&clusters, "demo", "provisioned", |o| {
            o.data["status"]["initialization"]["provisioned"] == true
        })
        .await;
    assert_eq!(condition(&pc, "Ready").unwrap()["status"], "True");
    assert!(pc.data["status"].get("failedGeneration").is_none());
}

#[tokio::test]
async fn a_missing_credentials_secret_says_so_and_is_retried_until_it_appears() {
    let world = World::start(pve_sim::Config::fast()).await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(world.plane.client(), &world.ns);
    let secret = secrets.get("pve-credentials").await.unwrap();
    secrets
        .delete("pve-credentials", &Default::default())
        .await
        .unwrap();
    world.apply(&cluster_yaml(true)).await;
    let clusters = world
        .api("infrastructure.cluster.x-k8s.io/v1alpha1", "ProxmoxCluster")
        .await;
    let pc = world
        .wait_for(&clusters, "demo", "credentials not found", |o| {
            ready_reason(o).as_deref() == Some("CredentialsNotFound")
        })
        .await;
    let message = condition(&pc, "Ready").unwrap()["message"].to_string();
    assert!(message.contains("pve-credentials"), "{message}");
    assert!(pc.data["status"].get("failedGeneration").is_none());
    secrets
        .create(
            &Default::default(),
            &k8s_openapi::api::core::v1::Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some("pve-credentials".into()),
                    ..Default::default()
                },
                data: secret.data,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    world
        .wait_for(&clusters, "demo", "provisioned", |o| {
            o.data["status"]["initialization"]["provisioned"] == true
        })
        .await;
}
