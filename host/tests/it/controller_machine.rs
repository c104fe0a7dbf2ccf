//! The InfraMachine controller against a real kube-apiserver, the real in-cluster IPAM
//! provider and pve-sim: objects created the way CAPI creates them.
use std::time::Duration;

use crate::support::world::{World, condition, ready_reason};
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
    world_with_cluster_on(pve_sim::Config::fast()).await
}

async fn world_with_cluster_on(sim: pve_sim::Config) -> World {
    with_cluster(World::start(sim).await).await
}

/// `world` with the IPAM provider and the fixture's Cluster, provisioned.
async fn with_cluster(world: World) -> World {
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
    // The claim goes with its owner: kube-controller-manager's garbage collector
    // deletes it, once it watches these CRDs (it looks for new ones every 30 s).
    for _ in 0..300 {
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

/// A machine whose step waits on a PVE task is woken when the observer sees the task
/// end (one `GET /cluster/tasks` per tick for every machine of the endpoint), not
/// called every second to poll its task: a slow clone costs no more status reads than a
/// fast one.
#[tokio::test]
async fn a_machine_waiting_on_a_task_is_woken_by_the_observer_not_polled() {
    const CLONE_MS: u64 = 6_000;
    let mut sim = pve_sim::Config::fast();
    sim.task_ms.insert("qmclone".into(), CLONE_MS);
    let world = world_with_cluster_on(sim).await;
    world.sim.state().reset_counters();
    create_machine(&world, "waits", 9000).await;
    let pms = world
        .api("infrastructure.cluster.x-k8s.io/v1alpha1", "ProxmoxMachine")
        .await;
    world
        .wait_for(&pms, "waits", "provisioned", provisioned)
        .await;
    let counters = world.sim.state().counters();
    let count = |endpoint: &str| counters.get(endpoint).copied().unwrap_or(0);
    let status_reads = count("GET /nodes/{node}/tasks/{upid}/status");
    let observations = count("GET /cluster/tasks");
    let tasks = world.sim.state().tasks().len() as u64;
    eprintln!(
        "{tasks} tasks (the clone {CLONE_MS} ms): {status_reads} task status reads, {observations} cluster task lists"
    );
    assert!(observations > 0, "the observer watched the tasks");
    // Polling every second would read the clone's status about six times on its own.
    assert!(
        status_reads <= 2 * tasks,
        "{status_reads} status reads for {tasks} tasks"
    );
}

/// At the default resync (300 s), a VM stopped out of band shows as drift within
/// seconds: every ready machine's VM is watched by the observer, one cluster listing for
/// all of them, not found at the next describe.
#[tokio::test]
async fn a_vm_stopped_out_of_band_shows_as_drift_long_before_the_resync() {
    let world = with_cluster(World::start_default_resync(pve_sim::Config::fast()).await).await;
    create_machine(&world, "watched", 9000).await;
    let pms = world
        .api("infrastructure.cluster.x-k8s.io/v1alpha1", "ProxmoxMachine")
        .await;
    let pm = world
        .wait_for(&pms, "watched", "provisioned", provisioned)
        .await;
    let vm = format!("/nodes/pve1/qemu/{}", vmid_of(&pm));
    out_of_band(&world, reqwest::Method::POST, &format!("{vm}/status/stop")).await;
    let stopped = std::time::Instant::now();
    // wait_for gives up after a minute, long before the 300 s resync.
    let pm = world
        .wait_for(&pms, "watched", "powered off", |o| {
            o.data["status"]["phase"] == "VMPoweredOff"
        })
        .await;
    eprintln!("drift shown {:?} after the VM stopped", stopped.elapsed());
    shows_drift(&pm, "VMPoweredOff", true);
}

/// A call to the Proxmox API behind the host's back, as a user with the token would make.
async fn out_of_band(world: &World, method: reqwest::Method, path: &str) -> reqwest::StatusCode {
    world.out_of_band(method, path, &[]).await.0
}

/// Events about `name` with `reason`: (type, how many times each was reported).
async fn events_of(world: &World, name: &str, reason: &str) -> Vec<(String, i32)> {
    let events: kube::Api<k8s_openapi::api::core::v1::Event> =
        kube::Api::namespaced(world.plane.client(), &world.ns);
    events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.name.as_deref() == Some(name) && e.reason.as_deref() == Some(reason)
        })
        .map(|e| {
            let times = e
                .series
                .as_ref()
                .and_then(|s| s.count)
                .map_or(e.count.unwrap_or(1), i32::from)
                .max(1);
            (e.type_.unwrap_or_default(), times)
        })
        .collect()
}

fn vmid_of(pm: &DynamicObject) -> u32 {
    pm.data["status"]["details"]["vmid"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// What a drifting machine shows: not ready, the drift's reason as the phase and on
/// both conditions (`InfrastructureProvisioned` True only if the VM `exists`), a human
/// message, and still provisioned for Cluster API.
fn shows_drift(pm: &DynamicObject, reason: &str, exists: bool) {
    let status = &pm.data["status"];
    assert_eq!(status["ready"], false, "{status}");
    assert_eq!(status["phase"], reason);
    assert_eq!(status["initialization"]["provisioned"], true);
    let ready = condition(pm, "Ready").unwrap();
    let infra = condition(pm, "InfrastructureProvisioned").unwrap();
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["reason"], reason);
    assert_eq!(infra["status"], if exists { "True" } else { "False" });
    assert_eq!(infra["reason"], reason);
    let message = ready["message"].as_str().unwrap();
    assert_eq!(infra["message"], message);
    assert!(message.starts_with("VM "), "{message}");
    assert!(!status.to_string().contains("Drift::"), "{status}");
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
    assert_eq!(pm.data["status"]["details"]["power"], "running");
    let vmid = vmid_of(&pm);
    let vm = format!("/nodes/pve1/qemu/{vmid}");

    // Stopped out of band: drift, shown everywhere, once.
    out_of_band(&world, reqwest::Method::POST, &format!("{vm}/status/stop")).await;
    let pm = world
        .wait_for(&pms, "w-0", "powered off", |o| {
            o.data["status"]["phase"] == "VMPoweredOff"
        })
        .await;
    shows_drift(&pm, "VMPoweredOff", true);
    assert_eq!(pm.data["status"]["details"]["power"], "stopped");
    assert_eq!(
        condition(&pm, "Ready").unwrap()["message"],
        format!("VM {vmid} is stopped, not running")
    );
    // Past a resync (5 s here): still one Warning, reported once.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        events_of(&world, "w-0", "VMPoweredOff").await,
        [("Warning".to_string(), 1)]
    );
    // Nothing starts it again behind the user's back.
    assert_eq!(world.sim.state().vm(vmid).unwrap()["status"], "stopped");

    // Started again: the drift clears everywhere, with one Normal event.
    out_of_band(&world, reqwest::Method::POST, &format!("{vm}/status/start")).await;
    let pm = world
        .wait_for(&pms, "w-0", "repaired", |o| {
            o.data["status"]["ready"] == true
        })
        .await;
    assert_eq!(pm.data["status"]["phase"], "Ready");
    assert_eq!(pm.data["status"]["details"]["power"], "running");
    assert_eq!(condition(&pm, "Ready").unwrap()["status"], "True");
    assert_eq!(
        condition(&pm, "InfrastructureProvisioned").unwrap()["status"],
        "True"
    );
    assert_eq!(
        events_of(&world, "w-0", "DriftResolved").await,
        [("Normal".to_string(), 1)]
    );

    // Out of band: stop and destroy the VM straight through the Proxmox API.
    out_of_band(&world, reqwest::Method::POST, &format!("{vm}/status/stop")).await;
    for _ in 0..50 {
        if out_of_band(&world, reqwest::Method::DELETE, &vm)
            .await
            .is_success()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    world.sim.state().reset_counters();
    let pm = world
        .wait_for(&pms, "w-0", "drift reported", |o| {
            ready_reason(o).as_deref() == Some("VMMissing")
        })
        .await;
    assert_eq!(condition(&pm, "Ready").unwrap()["status"], "False");
    shows_drift(&pm, "VMMissing", false);
    assert!(
        pm.data["status"]["details"].get("power").is_none(),
        "no power state for a VM that is gone: {}",
        pm.data["status"]["details"]
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        events_of(&world, "w-0", "VMMissing").await,
        [("Warning".to_string(), 1)]
    );
    // No silent re-creation: no clone, no VM.
    let counters = world.sim.state().counters();
    assert!(
        !counters
            .keys()
            .any(|k| k.starts_with("POST") && k.ends_with("/clone")),
        "{counters:?}"
    );
    assert!(world.sim.state().vms().iter().all(|v| v["vmid"] != vmid));
    let events = world
        .plane
        .dynamic_api("v1", "Event", Some(&world.ns))
        .await
        .unwrap();
    let events =
        serde_json::to_string(&events.list(&Default::default()).await.unwrap().items).unwrap();
    assert!(events.contains("Drift"), "a Drift event is published");
    // A machine whose VM is gone deletes at once.
    pms.delete("w-0", &Default::default()).await.unwrap();
    world.wait_gone(&pms, "w-0").await;
}

#[tokio::test]
async fn a_missing_template_is_terminal_until_the_spec_is_fixed() {
    let world = world_with_cluster().await;
    create_machine(&world, "bad", 4242).await;
    let pms = world
        .api("infrastructure.cluster.x-k8s.io/v1alpha1", "ProxmoxMachine")
        .await;
    // Longer than the 5 s resync: a resync must not retry either.
    // The cluster's reconcile checks the API and its token's privileges (`GET /version`,
    // `GET /access/permissions`, which no machine call makes) whenever something wakes
    // it, e.g. its own status write's echo.
    let ready = world
        .failed_terminally(&pms, "bad", &["GET /version", "GET /access/permissions"])
        .await;
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

/// The writes of `name`'s `resource` (and its subresources) in the audit log.
fn writes_to(world: &World, resource: &str, name: &str) -> usize {
    world
        .writes()
        .iter()
        .filter(|w| w.resource.split('/').next() == Some(resource) && w.name == name)
        .count()
}

#[tokio::test]
async fn a_dual_stack_nic_gets_a_claim_per_pool_each_written_once() {
    let world = World::start_audited(pve_sim::Config::fast()).await;
    world.plane.start_ipam().await.expect("IPAM provider");
    // The demo cluster with an IPv6 pool besides its IPv4 one.
    let dual_stack = cluster_yaml().replace(
        "    prefix: 24\n",
        "    prefix: 24\n  ipv6Config:\n    addresses: [\"fd00::10-fd00::20\"]\n    gateway: \"fd00::1\"\n    prefix: 64\n",
    );
    assert!(dual_stack.contains("ipv6Config"));
    world.apply(&dual_stack).await;
    let clusters = world
        .api("infrastructure.cluster.x-k8s.io/v1alpha1", "ProxmoxCluster")
        .await;
    world
        .wait_for(&clusters, "demo", "provisioned", provisioned)
        .await;
    create_machine(&world, "ds-0", 9000).await;
    let pms = world
        .api("infrastructure.cluster.x-k8s.io/v1alpha1", "ProxmoxMachine")
        .await;
    let pm = world
        .wait_for(&pms, "ds-0", "provisioned, its provider ID set", |o| {
            provisioned(o) && o.data["spec"]["providerID"].is_string()
        })
        .await;
    // Both addresses, from the real in-cluster IPAM provider, each through its own claim.
    let addresses = pm.data["status"]["addresses"].as_array().unwrap();
    for address in ["192.168.1.220", "fd00::10"] {
        assert!(
            addresses.contains(&json!({"type": "InternalIP", "address": address})),
            "{address} in {addresses:?}"
        );
    }
    let claims = world
        .api("ipam.cluster.x-k8s.io/v1beta2", "IPAddressClaim")
        .await;
    for (name, pool) in [
        ("ds-0-net0-00-inet", "demo-v4-icip"),
        ("ds-0-net0-01-inet", "demo-v6-icip"),
    ] {
        let claim = claims.get(name).await.unwrap();
        assert_eq!(claim.owner_references()[0].kind, "ProxmoxMachine");
        assert_eq!(claim.data["spec"]["poolRef"]["name"], pool);
    }
    // Each claim was written once, however many reconciles provisioning took; past two
    // resyncs (5 s here) a healthy machine writes nothing at all.
    let claim_writes = || {
        world
            .writes()
            .iter()
            .filter(|w| {
                w.verb == "patch"
                    && w.resource == "ipaddressclaims"
                    && w.uri.contains("fieldManager=hyperplug")
            })
            .count()
    };
    assert_eq!(claim_writes(), 2);
    let before = writes_to(&world, "proxmoxmachines", "ds-0");
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert_eq!(claim_writes(), 2);
    assert_eq!(
        writes_to(&world, "proxmoxmachines", "ds-0"),
        before,
        "a resync of a healthy machine writes nothing"
    );
}

/// The patches a client of no field manager (the in-process controllers) made to
/// `name`'s ProxmoxMachine itself, not its status (the test's own applies name theirs).
fn controller_patches(world: &World, name: &str) -> usize {
    world
        .writes()
        .iter()
        .filter(|w| {
            w.verb == "patch"
                && w.resource == "proxmoxmachines"
                && w.name == name
                && !w.uri.contains("fieldManager")
        })
        .count()
}

#[tokio::test]
async fn a_machine_is_created_with_the_finalizer_and_written_once_until_it_is_deleted() {
    let world = with_cluster(World::start_audited(pve_sim::Config::fast()).await).await;
    // The finalizer webhook put it on as the object was created: no reconcile has written
    // it (and none needs to before the first plugin call).
    let created = create_machine(&world, "fw-0", 9000).await;
    assert_eq!(
        created.finalizers(),
        ["proxmox.infrastructure.hyperplug.dev"]
    );
    let pms = world
        .api("infrastructure.cluster.x-k8s.io/v1alpha1", "ProxmoxMachine")
        .await;
    let pm = world
        .wait_for(&pms, "fw-0", "provisioned, its provider ID set", |o| {
            provisioned(o) && o.data["spec"]["providerID"].is_string()
        })
        .await;
    // Its ownership id came with the provider ID: one write to the object itself.
    let id = &pm.annotations()["infrastructure.hyperplug.dev/ownership-id"];
    assert!(
        id.starts_with(&format!("{}.", pm.uid().unwrap())),
        "signed own UID: {id}"
    );
    assert_eq!(controller_patches(&world, "fw-0"), 1);
    // Deleted: the VM goes, then the finalizer (the second and last write to it).
    pms.delete("fw-0", &Default::default()).await.unwrap();
    world.wait_gone(&pms, "fw-0").await;
    assert_eq!(controller_patches(&world, "fw-0"), 2);
    assert!(
        world
            .sim
            .state()
            .vms()
            .iter()
            .all(|v| v["config"]["template"] == "1")
    );
}
