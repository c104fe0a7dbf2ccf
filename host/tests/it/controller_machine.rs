//! The InfraMachine controller against a real kube-apiserver, the real in-cluster IPAM
//! provider and pve-sim: objects created the way CAPI creates them.
use std::time::Duration;

use crate::support::world::{World, condition};
use kube::ResourceExt;
use kube::api::{DynamicObject, Patch};
use serde_json::{Value, json};

/// The Cluster and ProxmoxCluster of the shared fixture (its first two documents).
fn cluster_yaml() -> String {
    let fixture = include_str!("../fixtures/cluster-and-machine.yaml");
    fixture
        .split("---\n")
        .take(2)
        .collect::<Vec<_>>()
        .join("---\n")
}

async fn world_with_cluster() -> World {
    let world = World::start(pve_sim::Config::fast()).await;
    world.plane.start_ipam().await.expect("IPAM provider");
    world.apply(&cluster_yaml()).await;
    let clusters = world
        .api("infrastructure.cluster.x-k8s.io/v1alpha1", "ProxmoxCluster")
        .await;
    world
        .wait_for(&clusters, "demo", "provisioned", |o| {
            o.data["status"]["initialization"]["provisioned"] == true
        })
        .await;
    world
}

/// A Machine, its bootstrap Secret and its ProxmoxMachine, owned as CAPI owns them.
async fn create_machine(world: &World, name: &str, template_id: u32) -> DynamicObject {
    apply_bootstrap_secret(world, name).await;
    create_machine_without_secret(world, name, template_id).await
}

async fn apply_bootstrap_secret(world: &World, name: &str) {
    world
        .apply(&format!(
            r##"
apiVersion: v1
kind: Secret
metadata:
  name: {name}-bootstrap
  labels:
    cluster.x-k8s.io/cluster-name: demo
type: cluster.x-k8s.io/secret
stringData:
  value: "#cloud-config\nruncmd: [echo hello]\n"
  format: cloud-config
"##
        ))
        .await;
}

/// The Machine and ProxmoxMachine before the bootstrap provider has written its Secret.
async fn create_machine_without_secret(
    world: &World,
    name: &str,
    template_id: u32,
) -> DynamicObject {
    world
        .apply(&format!(
            r##"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata:
  name: {name}
  labels:
    cluster.x-k8s.io/cluster-name: demo
spec:
  clusterName: demo
  bootstrap:
    dataSecretName: {name}-bootstrap
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: ProxmoxMachine
    name: {name}
"##
        ))
        .await;
    let machines = world.api("cluster.x-k8s.io/v1beta2", "Machine").await;
    let machine = machines.get(name).await.unwrap();
    let uid = machine.uid().unwrap();
    world
        .apply(&format!(
            r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: ProxmoxMachine
metadata:
  name: {name}
  labels:
    cluster.x-k8s.io/cluster-name: demo
  ownerReferences:
  - apiVersion: cluster.x-k8s.io/v1beta2
    kind: Machine
    name: {name}
    uid: {uid}
    controller: true
    blockOwnerDeletion: true
spec:
  sourceNode: pve1
  templateID: {template_id}
  full: true
  format: raw
  storage: local-lvm
  numSockets: 1
  numCores: 2
  memoryMiB: 2048
  disks:
    bootVolume:
      disk: scsi0
      sizeGb: 20
  network:
    default:
      bridge: vmbr0
      model: virtio
"#
        ))
        .await
        .remove(0)
}

fn provisioned(o: &DynamicObject) -> bool {
    o.data["status"]["initialization"]["provisioned"] == true
}

fn vm_of(world: &World, pm: &DynamicObject) -> Option<Value> {
    let vmid: u32 = pm.data["status"]["details"]["vmid"]
        .as_str()?
        .parse()
        .ok()?;
    world.sim.state().vm(vmid)
}

#[tokio::test]
async fn a_proxmox_machine_is_provisioned_with_an_ipam_address_and_deleted_vm_first() {
    let world = world_with_cluster().await;
    create_machine(&world, "cp-0", 9000).await;
    let pms = world
        .api("infrastructure.cluster.x-k8s.io/v1alpha1", "ProxmoxMachine")
        .await;
    let pm = world
        .wait_for(&pms, "cp-0", "provisioned", provisioned)
        .await;
    let provider_id = pm.data["spec"]["providerID"].as_str().unwrap();
    assert!(provider_id.starts_with("proxmox://"), "{provider_id}");
    assert_eq!(condition(&pm, "Ready").unwrap()["status"], "True");
    assert_eq!(pm.data["status"]["failureDomain"], "pve1");
    let addresses = pm.data["status"]["addresses"].as_array().unwrap();
    assert!(
        addresses.contains(&json!({"type": "InternalIP", "address": "192.168.1.220"})),
        "{addresses:?}"
    );
    // The address came from the real IPAM provider through a claim owned by the machine.
    let claims = world
        .api("ipam.cluster.x-k8s.io/v1beta2", "IPAddressClaim")
        .await;
    let claim = claims.get("cp-0-net0-00-inet").await.unwrap();
    assert_eq!(claim.owner_references()[0].kind, "ProxmoxMachine");
    // The VM exists with the requested shape.
    let vm = vm_of(&world, &pm).expect("VM in pve-sim");
    let config = &vm["config"];
    assert_eq!(config["cores"].to_string().trim_matches('"'), "2");
    assert_eq!(config["memory"].to_string().trim_matches('"'), "2048");
    assert!(
        config["smbios1"]
            .as_str()
            .unwrap()
            .contains(provider_id.trim_start_matches("proxmox://"))
    );
    // Deleting the ProxmoxMachine removes the VM before the finalizer goes.
    let vmid: u32 = pm.data["status"]["details"]["vmid"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    pms.delete("cp-0", &Default::default()).await.unwrap();
    world.wait_gone(&pms, "cp-0").await;
    assert!(
        world.sim.state().vm(vmid).is_none(),
        "the VM must be gone before the object"
    );
    for _ in 0..50 {
        if claims.get_opt("cp-0-net0-00-inet").await.unwrap().is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        claims.get_opt("cp-0-net0-00-inet").await.unwrap().is_none(),
        "the address claim is released"
    );
}

#[tokio::test]
async fn a_vm_deleted_out_of_band_is_reported_as_drift() {
    let world = world_with_cluster().await;
    create_machine(&world, "w-0", 9000).await;
    let pms = world
        .api("infrastructure.cluster.x-k8s.io/v1alpha1", "ProxmoxMachine")
        .await;
    let pm = world
        .wait_for(&pms, "w-0", "provisioned", provisioned)
        .await;
    let vmid: u32 = pm.data["status"]["details"]["vmid"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    // Out of band: stop and destroy the VM straight through the Proxmox API.
    let http = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    let auth = format!(
        "PVEAPIToken={}={}",
        crate::support::world::TOKEN_ID,
        crate::support::world::TOKEN_SECRET
    );
    let base = format!("{}/api2/json/nodes/pve1/qemu/{vmid}", world.sim.base_url());
    http.post(format!("{base}/status/stop"))
        .header("Authorization", &auth)
        .send()
        .await
        .unwrap();
    for _ in 0..50 {
        let r = http
            .delete(&base)
            .header("Authorization", &auth)
            .send()
            .await
            .unwrap();
        if r.status().is_success() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let pm = world
        .wait_for(&pms, "w-0", "drift reported", |o| {
            condition(o, "Ready").is_some_and(|c| c["reason"] == "Drift")
        })
        .await;
    assert_eq!(condition(&pm, "Ready").unwrap()["status"], "False");
    let events = world
        .plane
        .dynamic_api("v1", "Event", Some(&world.ns))
        .await
        .unwrap();
    let events =
        serde_json::to_string(&events.list(&Default::default()).await.unwrap().items).unwrap();
    assert!(events.contains("Drift"), "a Drift event is published");
}

#[tokio::test]
async fn a_missing_template_is_terminal_until_the_spec_is_fixed() {
    let world = world_with_cluster().await;
    create_machine(&world, "bad", 4242).await;
    let pms = world
        .api("infrastructure.cluster.x-k8s.io/v1alpha1", "ProxmoxMachine")
        .await;
    // Longer than the 5 s resync: a resync must not retry either.
    let ready = world.failed_terminally(&pms, "bad").await;
    assert!(
        ready["message"].as_str().unwrap().contains("4242"),
        "{ready}"
    );
    pms.patch(
        "bad",
        &Default::default(),
        &Patch::Merge(json!({"spec": {"templateID": 9000}})),
    )
    .await
    .unwrap();
    world.wait_for(&pms, "bad", "recovered", provisioned).await;
}

#[tokio::test]
async fn a_machine_waits_for_its_bootstrap_secret_and_goes_on_when_it_appears() {
    let world = world_with_cluster().await;
    create_machine_without_secret(&world, "late", 9000).await;
    let pms = world
        .api("infrastructure.cluster.x-k8s.io/v1alpha1", "ProxmoxMachine")
        .await;
    let pm = world
        .wait_for(&pms, "late", "waiting for bootstrap data", |o| {
            o.data["status"]["phase"] == "WaitingForBootstrapData"
        })
        .await;
    assert_eq!(
        condition(&pm, "Ready").unwrap()["reason"],
        "WaitingForBootstrapData"
    );
    apply_bootstrap_secret(&world, "late").await;
    world
        .wait_for(&pms, "late", "provisioned", provisioned)
        .await;
}

#[tokio::test]
async fn pausing_the_cluster_stops_machine_plugin_calls_and_unpausing_resumes() {
    let world = world_with_cluster().await;
    create_machine(&world, "p-0", 9000).await;
    let pms = world
        .api("infrastructure.cluster.x-k8s.io/v1alpha1", "ProxmoxMachine")
        .await;
    world
        .wait_for(&pms, "p-0", "provisioned", provisioned)
        .await;
    world
        .pausing_the_cluster_stops_plugin_calls(&pms, "p-0")
        .await;
}
