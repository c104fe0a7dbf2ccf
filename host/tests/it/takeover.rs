//! Machines another provider made (as CAPMOX leaves them: provisioned, its finalizer,
//! `spec.virtualMachineID`, `spec.providerID`, `status.proxmoxNode`, an IPAddressClaim
//! from the cluster's `<cluster>-v4-icip` pool) are adopted only in a namespace the
//! administrator granted (`hyperplug run --adopt-namespace`), and only when the VM proves
//! to be the machine's; no VM is cloned, restarted or destroyed for the takeover, the
//! machine's address stays, and deleting an adopted machine deletes its VM and ISO.
use std::collections::BTreeMap;
use std::process::Child;

use crate::support::world::{World, ready_reason};
use kube::ResourceExt;
use kube::api::{DynamicObject, Patch, PatchParams};
use pve_sim::VmSeed;
use serde_json::json;

const LEGACY_UUID: &str = "6c3fa683-bef9-4425-b413-eaa45a9d6191";
const OTHER_UUID: &str = "0b7e2f1c-4d3a-4c5b-9e8f-1a2b3c4d5e6f";
const CAPMOX_MACHINE_FINALIZER: &str = "proxmoxmachine.infrastructure.cluster.x-k8s.io";

/// A running VM as CAPMOX leaves it: named like its machine, its SMBIOS UUID in the
/// machine's provider ID, its NoCloud ISO on `ide0`, its address tag.
fn capmox_vm(vmid: u32, name: &str, uuid: &str) -> VmSeed {
    let config: BTreeMap<String, String> = [
        ("name", name.to_string()),
        ("smbios1", format!("uuid={uuid}")),
        ("cores", "2".into()),
        ("memory", "2048".into()),
        ("scsi0", format!("local-lvm:vm-{vmid}-disk-0,size=20G")),
        ("net0", "virtio=BC:24:11:00:01:50,bridge=vmbr0".into()),
        (
            "ide0",
            format!("local:iso/user-data-{vmid}.iso,media=cdrom"),
        ),
        ("tags", "ip_net0_192.168.1.221".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    VmSeed {
        vmid,
        node: "pve1".into(),
        config,
        running: true,
        pool: None,
    }
}

fn start_host(world: &World, grant: Option<&str>) -> Child {
    let mut run = world.hyperplug_run(&["proxmox"]);
    run.args(["--resync-seconds", "5"]);
    if let Some(ns) = grant {
        run.arg(format!("--adopt-namespace={ns}"));
    }
    run.spawn().expect("start hyperplug run")
}

/// The Machine and the ProxmoxMachine `name` as CAPMOX left them, pointing at VM `vmid`
/// with provider ID `uuid`, provisioned on pve1.
async fn capmox_machine(world: &World, name: &str, vmid: u32, uuid: &str) -> DynamicObject {
    world
        .apply(&format!(
            r##"
apiVersion: v1
kind: Secret
metadata:
  name: {name}-bootstrap
type: cluster.x-k8s.io/secret
stringData:
  value: "#cloud-config\n"
  format: cloud-config
---
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
    let uid = machines.get(name).await.unwrap().uid().unwrap();
    world
        .apply(&format!(
            r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha2
kind: ProxmoxMachine
metadata:
  name: {name}
  labels:
    cluster.x-k8s.io/cluster-name: demo
  finalizers: [{CAPMOX_MACHINE_FINALIZER}]
  ownerReferences:
  - apiVersion: cluster.x-k8s.io/v1beta2
    kind: Machine
    name: {name}
    uid: {uid}
    controller: true
    blockOwnerDeletion: true
spec:
  sourceNode: pve1
  templateID: 9000
  format: raw
  full: true
  storage: local-lvm
  numSockets: 1
  numCores: 2
  memoryMiB: 2048
  disks:
    bootVolume:
      disk: scsi0
      sizeGb: 20
  network:
    networkDevices:
    - name: net0
      bridge: vmbr0
      model: virtio
      defaultIPv4: true
  virtualMachineID: {vmid}
  providerID: proxmox://{uuid}
"#
        ))
        .await;
    let pms = world
        .api("infrastructure.cluster.x-k8s.io/v1alpha2", "ProxmoxMachine")
        .await;
    let status = json!({"status": {
        "initialization": {"provisioned": true},
        "proxmoxNode": "pve1",
        "vmStatus": "ready",
    }});
    pms.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .expect("CAPMOX's status")
}

/// The IPAddressClaim CAPMOX made for the machine's first NIC, bound by the IPAM
/// provider: its UID and bound address.
async fn capmox_claim(world: &World, machine: &DynamicObject) -> (Option<String>, String) {
    let name = machine.name_any();
    let uid = machine.uid().unwrap();
    world
        .apply(&format!(
            r#"
apiVersion: ipam.cluster.x-k8s.io/v1beta2
kind: IPAddressClaim
metadata:
  name: {name}-net0-00-inet
  labels:
    cluster.x-k8s.io/cluster-name: demo
  annotations:
    ipam.capmox.cluster.x-k8s.io/pool-ref-counter: "0"
    ipam.capmox.cluster.x-k8s.io/default-gateway: "true"
  ownerReferences:
  - apiVersion: infrastructure.cluster.x-k8s.io/v1alpha2
    kind: ProxmoxMachine
    name: {name}
    uid: {uid}
    controller: true
    blockOwnerDeletion: true
spec:
  poolRef:
    apiGroup: ipam.cluster.x-k8s.io
    kind: InClusterIPPool
    name: demo-v4-icip
"#
        ))
        .await;
    let claims = world
        .api("ipam.cluster.x-k8s.io/v1beta2", "IPAddressClaim")
        .await;
    let claim = world
        .wait_for(&claims, &format!("{name}-net0-00-inet"), "bound", |c| {
            c.data["status"]["addressRef"]["name"].is_string()
        })
        .await;
    let addresses = world
        .api("ipam.cluster.x-k8s.io/v1beta2", "IPAddress")
        .await;
    let address = addresses
        .get(claim.data["status"]["addressRef"]["name"].as_str().unwrap())
        .await
        .unwrap();
    let ip = address.data["spec"]["address"]
        .as_str()
        .unwrap()
        .to_string();
    (claim.uid(), ip)
}

/// Whether the volume `volid` is in a storage (None: no storage named so).
fn iso_exists(world: &World, volid: &str) -> Option<bool> {
    let (storage, _) = volid.split_once(':')?;
    let dump = world.sim.state().dump();
    let mut found = None;
    for s in dump["storages"].as_array()? {
        if s["storage"] == storage {
            let here = s["volumes"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|v| v["volid"] == volid);
            found = Some(found.unwrap_or(false) || here);
        }
    }
    found
}

fn description(world: &World, vmid: u32) -> String {
    world.sim.state().vm(vmid).expect("the VM")["config"]["description"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn machines_another_provider_made_are_adopted_only_with_a_grant_and_a_proof() {
    let mut sim = pve_sim::Config::fast();
    sim.vms.push(capmox_vm(150, "legacy-0", LEGACY_UUID));
    // A VM someone else made, named otherwise: a machine naming it proves nothing.
    sim.vms.push(capmox_vm(151, "someone-elses", OTHER_UUID));
    let world = World::start_with(sim, false).await;
    world.plane.start_ipam().await.expect("IPAM provider");
    let fixture = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/cluster-and-machine.yaml"
    ))
    .unwrap();
    let cluster: String = fixture
        .split("---\n")
        .take(2)
        .collect::<Vec<_>>()
        .join("---\n");

    // Without a grant: the cluster is served, the machines another provider made are not.
    let mut host = start_host(&world, None);
    world.apply(&cluster).await;
    let clusters = world
        .api("infrastructure.cluster.x-k8s.io/v1alpha2", "ProxmoxCluster")
        .await;
    world
        .wait_for(&clusters, "demo", "provisioned", |o| {
            o.data["status"]["initialization"]["provisioned"] == true
        })
        .await;
    let legacy = capmox_machine(&world, "legacy-0", 150, LEGACY_UUID).await;
    let (claim_uid, address) = capmox_claim(&world, &legacy).await;
    capmox_machine(&world, "impostor", 151, OTHER_UUID).await;
    let pms = world
        .api("infrastructure.cluster.x-k8s.io/v1alpha2", "ProxmoxMachine")
        .await;
    for name in ["legacy-0", "impostor"] {
        let pm = world
            .wait_for(&pms, name, "AdoptionNotGranted", |o| {
                ready_reason(o).as_deref() == Some("AdoptionNotGranted")
            })
            .await;
        assert_eq!(pm.finalizers(), [CAPMOX_MACHINE_FINALIZER], "untouched");
    }
    host.kill().unwrap();
    host.wait().unwrap();
    let before = description(&world, 150);
    assert_eq!(
        iso_exists(&world, "local:iso/user-data-150.iso"),
        Some(true)
    );

    // Granted: the VM that proves to be legacy-0's is adopted, the other is refused.
    let mut host = start_host(&world, Some(&world.ns));
    let pm = world
        .wait_for(&pms, "legacy-0", "adopted and ready", |o| {
            o.data["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
                && o.data["status"]["addresses"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|a| a["address"] == address.as_str())
        })
        .await;
    assert_eq!(
        pm.data["spec"]["providerID"],
        format!("proxmox://{LEGACY_UUID}")
    );
    assert_eq!(
        pm.finalizers(),
        ["proxmox.infrastructure.hyperplug.dev"],
        "CAPMOX's finalizer replaced by ours"
    );
    let adopted = description(&world, 150);
    assert!(adopted.starts_with(&before), "{adopted}");
    assert!(
        adopted.ends_with(&format!("hyperplug.machine-uid={}", pm.uid().unwrap())),
        "{adopted}"
    );
    // Its address is CAPMOX's claim's, the claim itself kept.
    let claims = world
        .api("ipam.cluster.x-k8s.io/v1beta2", "IPAddressClaim")
        .await;
    let claim = claims.get("legacy-0-net0-00-inet").await.unwrap();
    assert_eq!(
        claim.uid(),
        claim_uid,
        "the claim is CAPMOX's, not a new one"
    );
    let impostor = world
        .wait_for(&pms, "impostor", "AdoptionRefused", |o| {
            ready_reason(o).as_deref() == Some("AdoptionRefused")
        })
        .await;
    // Refused in one message that tells nothing of the VM (its name, its UUID).
    let ready = crate::support::world::condition(&impostor, "Ready").unwrap();
    let message = ready["message"].as_str().unwrap();
    assert!(
        message.contains("do not prove to be this machine's VM"),
        "{ready}"
    );
    for fact in ["someone-elses", OTHER_UUID, "pve1"] {
        assert!(!message.contains(fact), "{fact} told: {message}");
    }
    assert!(!description(&world, 151).contains("hyperplug"), "untouched");
    for endpoint in [
        "POST /nodes/{node}/qemu/{vmid}/clone",
        "DELETE /nodes/{node}/qemu/{vmid}",
        "POST /nodes/{node}/qemu/{vmid}/status/stop",
        "POST /nodes/{node}/qemu/{vmid}/status/start",
    ] {
        assert_eq!(
            world.requests(endpoint),
            0,
            "{endpoint} during the takeover"
        );
    }

    // Deleting the adopted machine deletes its VM and CAPMOX's ISO; the refused one
    // leaves its VM as it is.
    pms.delete("legacy-0", &Default::default()).await.unwrap();
    world.wait_gone(&pms, "legacy-0").await;
    assert!(
        world.sim.state().vm(150).is_none(),
        "the adopted VM is deleted"
    );
    assert!(
        iso_exists(&world, "local:iso/user-data-150.iso") == Some(false),
        "CAPMOX's ISO is deleted with the VM"
    );
    assert!(world.sim.state().vm(151).is_some());
    host.kill().unwrap();
    host.wait().unwrap();
}

/// A call to the Proxmox API with the world's token, as anyone holding it may make:
/// `POST path` with `form`.
async fn pve_post(world: &World, path: &str, form: &[(&str, &str)]) {
    let (status, body) = world.out_of_band(reqwest::Method::POST, path, form).await;
    assert!(status.is_success(), "{status}: {body}");
}

/// Issue 40, item 4: a provisioned machine loses its status (a restore, a move without
/// it) in a namespace granted adoption, and meanwhile its marker (the description line
/// and the `hp-` tag) was planted on another VM. The plugin finds two VMs carrying the
/// machine's marker: that is `AmbiguousOwnership`, terminal, with a count and no VMID
/// or name of either VM; neither VM is adopted, written, powered or destroyed, not even
/// when the machine is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marker_on_two_vms_is_an_ambiguity_that_touches_neither() {
    use crate::support::controllers::{self, PROXMOX_SPEC, machine, proxmox_cluster};

    const FOREIGN: u32 = 150;
    const FOREIGN_NAME: &str = "team-b-db";
    let mut sim = pve_sim::Config::fast();
    sim.vms.push(capmox_vm(FOREIGN, FOREIGN_NAME, OTHER_UUID));
    let world = World::start_with(sim, false).await;
    let granted = hyperplug::controller::ManagerOptions {
        adopt_namespaces: vec![world.ns.clone()],
        ..controllers::options()
    };
    let (_rt, plugin) = crate::support::load_with("proxmox", controllers::managed(&world)).await;
    let manager = controllers::start(&world, plugin, granted.clone());
    world
        .apply(&proxmox_cluster("demo", Some("{name: pve-credentials}")))
        .await;
    machine(&world, "demo", "ProxmoxMachine", "m-0", "{}", PROXMOX_SPEC).await;
    let pms = world
        .api("infrastructure.cluster.x-k8s.io/v1alpha1", "ProxmoxMachine")
        .await;
    let pm = world
        .wait_for(&pms, "m-0", "provisioned", |o| {
            o.data["status"]["initialization"]["provisioned"] == true
        })
        .await;
    let ours: u32 = pm.data["status"]["details"]["vmid"]
        .as_str()
        .expect("the VMID in the status")
        .parse()
        .unwrap();
    let uid = pm.uid().unwrap();
    drop(manager);

    // The machine's marker, copied onto the other VM: its description's marker line
    // and its `hp-` tag.
    let marker_line = description(&world, ours)
        .lines()
        .find(|l| l.ends_with(&uid) && l.starts_with("hyperplug.machine-uid="))
        .expect("the machine's marker line")
        .to_string();
    let config = &world.sim.state().vm(ours).unwrap()["config"];
    let tag = config["tags"]
        .as_str()
        .unwrap_or_default()
        .split(';')
        .find(|t| t.starts_with("hp-"))
        .expect("the machine's tag")
        .to_string();
    let planted = format!("team b's database\n{marker_line}\n");
    pve_post(
        &world,
        &format!("/nodes/pve1/qemu/{FOREIGN}/config"),
        &[("description", &planted), ("tags", &tag)],
    )
    .await;

    // The status is lost: spec.providerID names a VM the manager has no record of.
    pms.patch_status(
        "m-0",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": null})),
    )
    .await
    .unwrap();
    let vm = |vmid| world.sim.state().vm(vmid).expect("the VM");
    let before = [vm(ours), vm(FOREIGN)];
    world.sim.state().reset_counters();
    let (_rt, plugin) = crate::support::load_with("proxmox", controllers::managed(&world)).await;
    let _manager = controllers::start(&world, plugin, granted);
    let message = world.wait_reason(&pms, "m-0", "AmbiguousOwnership").await;

    // A count, the machine's own marker, and nothing of the VMs.
    assert!(
        message.starts_with("2 VMs carry this machine's marker"),
        "{message}"
    );
    let without_uid = message.replace(&uid, "");
    for fact in [
        ours.to_string(),
        FOREIGN.to_string(),
        FOREIGN_NAME.to_string(),
        OTHER_UUID.to_string(),
        "pve1".to_string(),
    ] {
        assert!(!without_uid.contains(&fact), "{fact} in {message}");
    }
    let pm = pms.get("m-0").await.unwrap();
    assert_ne!(
        pm.data["status"]["initialization"]["provisioned"], true,
        "neither VM is adopted: {:?}",
        pm.data["status"]
    );

    // Deleting the machine destroys neither: the delete finds the same ambiguity.
    let looked = || world.requests("GET /nodes/{node}/qemu/{vmid}/config");
    let seen = looked();
    pms.delete("m-0", &Default::default()).await.unwrap();
    world
        .wait_for(&pms, "m-0", "its delete refused, both VMs looked at", |o| {
            let refused = crate::support::world::condition(o, "Ready").is_some_and(|c| {
                c["reason"] == "AmbiguousOwnership"
                    && c["observedGeneration"].as_i64() == o.metadata.generation
            });
            o.metadata.deletion_timestamp.is_some() && refused && looked() >= seen + 2
        })
        .await;

    // No request changed either VM; nothing was destroyed.
    let writes: Vec<(String, u64)> = world
        .sim
        .state()
        .counters()
        .into_iter()
        .filter(|(endpoint, _)| !endpoint.starts_with("GET "))
        .collect();
    assert!(writes.is_empty(), "{writes:?}");
    for (was, vmid) in before.iter().zip([ours, FOREIGN]) {
        let now = vm(vmid);
        assert_eq!(
            now["config"]["digest"], was["config"]["digest"],
            "VM {vmid}"
        );
        assert_eq!(now["status"], was["status"], "VM {vmid}");
    }
    assert_eq!(description(&world, FOREIGN), planted);
    assert!(world.sim.state().destroyed().is_empty());
}
