//! `--watch-filter`, as Cluster API defines it for several instances of a provider on one
//! management cluster: each instance reconciles only the objects whose
//! `cluster.x-k8s.io/watch-filter` label has its value. Two managers, each as a user of
//! its own, against one API server; the API server's audit log says who wrote what.
use hyperplug::controller::ManagerOptions;
use hyperplug::controller::cache::scope::{Scope, WATCH_FILTER_LABEL};
use kube::ResourceExt;
use kube::api::DynamicObject;

use crate::support::controllers;
use crate::support::world::World;

const V1ALPHA1: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";

/// A Cluster, its ProxmoxCluster (addresses `.{first}`–`.{first + 4}`, endpoint
/// `.{endpoint}`), one Machine with its bootstrap Secret: every object labelled
/// with the watch filter `value`, as a team running its own instance labels them.
fn cluster_of(value: &str, first: u8, endpoint: u8) -> String {
    let last = first + 4;
    format!(
        r##"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: {value}
  labels: {{{WATCH_FILTER_LABEL}: {value}}}
spec:
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: ProxmoxCluster
    name: {value}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: ProxmoxCluster
metadata:
  name: {value}
  labels: {{{WATCH_FILTER_LABEL}: {value}, cluster.x-k8s.io/cluster-name: {value}}}
spec:
  allowedNodes: [pve1]
  controlPlaneEndpoint: {{host: 192.168.1.{endpoint}, port: 6443}}
  dnsServers: [192.168.1.1]
  ipv4Config:
    addresses: ["192.168.1.{first}-192.168.1.{last}"]
    gateway: 192.168.1.1
    prefix: 24
  credentialsRef:
    name: pve-credentials
---
apiVersion: v1
kind: Secret
metadata:
  name: {value}-0-bootstrap
  labels: {{cluster.x-k8s.io/cluster-name: {value}}}
type: cluster.x-k8s.io/secret
stringData:
  value: "#cloud-config\n"
  format: cloud-config
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata:
  name: {value}-0
  labels: {{{WATCH_FILTER_LABEL}: {value}, cluster.x-k8s.io/cluster-name: {value}}}
spec:
  clusterName: {value}
  bootstrap:
    dataSecretName: {value}-0-bootstrap
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: ProxmoxMachine
    name: {value}-0
"##
    )
}

/// The ProxmoxMachine of `value`'s Machine (`uid`), labelled as the rest.
fn machine_of(value: &str, uid: &str) -> String {
    format!(
        r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: ProxmoxMachine
metadata:
  name: {value}-0
  labels: {{{WATCH_FILTER_LABEL}: {value}, cluster.x-k8s.io/cluster-name: {value}}}
  ownerReferences:
  - {{apiVersion: cluster.x-k8s.io/v1beta2, kind: Machine, name: {value}-0, uid: "{uid}", controller: true}}
spec:
  sourceNode: pve1
  templateID: 9000
  numCores: 2
  memoryMiB: 2048
  network:
    default:
      bridge: vmbr0
"#
    )
}

fn provisioned(o: &DynamicObject) -> bool {
    o.data["status"]["initialization"]["provisioned"] == true
}

#[tokio::test(flavor = "multi_thread")]
async fn two_managers_with_different_watch_filters_each_reconcile_only_their_own() {
    let world = World::start_audited_without_controllers(pve_sim::Config::fast()).await;
    world.plane.start_ipam().await.expect("IPAM provider");
    let (_runtime, plugin) =
        crate::support::load_with("proxmox", controllers::managed(&world)).await;
    let mut running = Vec::new();
    for value in ["blue", "green"] {
        let client = world
            .plane
            .client_as(&format!("manager-{value}"))
            .await
            .expect("a client of its own");
        let options = ManagerOptions {
            scope: Scope {
                namespace: None,
                watch_filter: Some(value.into()),
            },
            ..controllers::options()
        };
        running.push(controllers::start_as(client, plugin.clone(), options));
    }

    // An unlabelled cluster of the same kinds: neither instance's.
    let unlabelled = cluster_of("nobody", 210, 231)
        .replace(&format!("{WATCH_FILTER_LABEL}: nobody, "), "")
        .replace(
            &format!("labels: {{{WATCH_FILTER_LABEL}: nobody}}"),
            "labels: {}",
        );
    for (value, yaml) in [
        ("blue", cluster_of("blue", 220, 232)),
        ("green", cluster_of("green", 240, 233)),
        ("nobody", unlabelled),
    ] {
        world.apply(&yaml).await;
        let machines = world.api("cluster.x-k8s.io/v1beta2", "Machine").await;
        let uid = machines
            .get(&format!("{value}-0"))
            .await
            .unwrap()
            .uid()
            .unwrap();
        let mut machine = machine_of(value, &uid);
        if value == "nobody" {
            machine = machine.replace(&format!("{WATCH_FILTER_LABEL}: nobody, "), "");
        }
        world.apply(&machine).await;
    }

    let machines = world.api(V1ALPHA1, "ProxmoxMachine").await;
    for value in ["blue", "green"] {
        world
            .wait_for(&machines, &format!("{value}-0"), "provisioned", provisioned)
            .await;
    }
    // Both instances have long been through several resyncs (5 s) by now. (Its finalizer
    // comes from the test world's own webhook, which no instance runs.)
    let nobody = machines.get("nobody-0").await.unwrap();
    assert!(
        nobody.data["status"].is_null(),
        "an unlabelled machine is no instance's: {:?}",
        nobody.data
    );

    let ours = ["proxmoxclusters", "proxmoxmachines"];
    let mut wrote = std::collections::BTreeMap::<String, usize>::new();
    for w in world.writes() {
        let resource = w.resource.split('/').next().unwrap_or_default();
        let Some(value) = w.user.strip_prefix("manager-") else {
            continue;
        };
        // Every write of an instance to an object of the plugin's kinds is to its own.
        if ours.contains(&resource) {
            assert!(
                w.name.starts_with(value),
                "manager-{value} wrote {} {}: {w:?}",
                w.resource,
                w.name
            );
            *wrote.entry(value.to_string()).or_default() += 1;
        }
    }
    for value in ["blue", "green"] {
        assert!(
            wrote.get(value).is_some_and(|n| *n > 0),
            "manager-{value} provisioned its own: {wrote:?}"
        );
    }
    // Each made exactly its own VM; the unlabelled machine got none.
    let vms = world.sim.state().vms();
    let names: Vec<&str> = vms.iter().filter_map(|v| v["name"].as_str()).collect();
    for value in ["blue", "green"] {
        assert_eq!(
            names.iter().filter(|n| n.starts_with(value)).count(),
            1,
            "{names:?}"
        );
    }
    assert!(!names.iter().any(|n| n.starts_with("nobody")), "{names:?}");
    drop(running);
}
