//! The Proxmox plugin's machine lifecycle through the host runtime, against pve-sim over
//! HTTPS with token auth and a pinned fingerprint.
//!
//! The conformance kit's driver plays the host: it persists `progress.state`, answers
//! `address-requests` from a test pool, hands over the bootstrap data when asked, and
//! calls again after the requeue hint (capped small).
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::time::Duration;

use hyperplug_conformance::drive::{Answers, Drive};
use hyperplug_runtime::bindings::machine::{
    AddressType, AllocatedAddress, BootstrapData, Drift, MachineRequest, MachineStatus,
};
use hyperplug_runtime::{Credentials, Limits, Plugin, PluginError};
use pve_sim::{Config, FaultRule, Faults};
use serde_json::{Value, json};

use crate::support::drive::{NoAddresses, create_until_ready, delete_until_gone, pacing};
use crate::support::{credentials, load, object, pinned, seed_cluster, sim_with};

const CLOUD_CONFIG: &str = "#cloud-config\nruncmd:\n  - [kubeadm, join, '--config', /run/kubeadm/kubeadm-join-config.yaml]\n";

fn dhcp_cluster() -> Value {
    json!({
        "allowedNodes": ["pve1"],
        "controlPlaneEndpoint": {"host": "10.10.0.5", "port": 6443},
    })
}

fn request(
    sim: &pve_sim::RunningSim,
    machine: &str,
    cluster: &str,
    spec: Value,
    cluster_spec: Value,
) -> MachineRequest {
    MachineRequest {
        machine: object(machine),
        cluster: object(cluster),
        spec: spec.to_string(),
        cluster_spec: cluster_spec.to_string(),
        state: None,
        bootstrap: None,
        failure_domain: None,
        addresses: vec![],
        credentials: pinned(sim),
        more_credentials: vec![],
        plugin_status: None,
    }
}

fn bootstrap() -> BootstrapData {
    BootstrapData {
        format: "cloud-config".into(),
        value: CLOUD_CONFIG.as_bytes().to_vec(),
    }
}

/// Drive create to ready as the host would, handing over the bootstrap data when asked.
async fn drive_create(
    plugin: &Plugin,
    req: &mut MachineRequest,
) -> Result<(MachineStatus, Drive), String> {
    create_until_ready(
        plugin,
        req,
        &mut NoAddresses(Some(bootstrap())),
        &pacing(50),
    )
    .await
}

/// A ready machine's NoCloud ISO removal, asked for once it booted, followed by describe
/// (the task is the machine's wait, so its end brings the host's describe) until the
/// ISO is gone; the last report.
async fn describe_until_the_iso_is_gone(
    plugin: &Plugin,
    req: &mut MachineRequest,
    sim: &pve_sim::RunningSim,
) -> MachineStatus {
    for _ in 0..40 {
        let s = plugin.describe_machine(req).await.unwrap().unwrap();
        req.state = Some(s.progress.state.clone());
        let removing = s.progress.waits.iter().any(|w| w.key.starts_with("task:"));
        if !removing && iso_volumes(sim).is_empty() {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "the ISO is still there after 40 describes: {:?}",
        iso_volumes(sim)
    );
}

/// Drive delete until the plugin confirms the VM gone; the phases it went through.
async fn drive_delete(plugin: &Plugin, req: &mut MachineRequest) -> Result<Vec<String>, String> {
    delete_until_gone(plugin, req, &pacing(50)).await
}

fn vmid_of(status: &MachineStatus) -> u32 {
    status
        .details
        .iter()
        .find(|(k, _)| k == "vmid")
        .map(|(_, v)| v.parse().unwrap())
        .expect("details carry the vmid")
}

fn non_templates(sim: &pve_sim::RunningSim) -> Vec<Value> {
    sim.state()
        .vms()
        .into_iter()
        .filter(|v| v["template"] != json!(true))
        .collect()
}

fn cfg<'a>(vm: &'a Value, key: &str) -> &'a str {
    vm["config"][key].as_str().unwrap_or_default()
}

/// The PVE property string `v` as key → value (the first bare item under its own key).
fn props(v: &str) -> BTreeMap<String, String> {
    v.split(',')
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (p.to_string(), String::new()),
        })
        .collect()
}

fn iso_volumes(sim: &pve_sim::RunningSim) -> Vec<Value> {
    let dump = sim.state().dump();
    dump["storages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["volumes"].as_array().cloned().unwrap_or_default())
        .filter(|v| v["content"] == "iso")
        .collect()
}

/// Reads an ISO 9660 image with the `iso9660` crate: root files by ISO name → bytes.
fn read_with_iso9660_crate(image: Vec<u8>) -> BTreeMap<String, Vec<u8>> {
    let iso = iso9660::ISO9660::new(std::io::Cursor::new(image)).expect("a valid ISO 9660 image");
    let mut files = BTreeMap::new();
    for entry in iso.root.contents() {
        if let iso9660::DirectoryEntry::File(f) = entry.expect("directory entry") {
            let mut data = vec![];
            f.read().read_to_end(&mut data).unwrap();
            files.insert(f.identifier.clone(), data);
        }
    }
    files
}

fn full_spec() -> Value {
    json!({
        "sourceNode": "pve1",
        "templateID": 9000,
        "full": true,
        "storage": "local-lvm",
        "format": "raw",
        "pool": "capi",
        "description": "worker of the lifecycle test",
        "tags": ["k8s", "worker"],
        "numSockets": 2,
        "numCores": 4,
        "memoryMiB": 8192,
        "disks": {
            "bootVolume": {"disk": "scsi0", "sizeGb": 30},
            "additionalVolumes": [{"disk": "scsi1", "sizeGb": 20}],
        },
        "network": {
            "default": {"bridge": "vmbr0", "model": "virtio", "vlan": 10, "mtu": 1500},
            "additionalDevices": [{"name": "net1", "bridge": "vmbr1", "model": "e1000", "dhcp4": true}],
        },
        "vmIDRange": {"start": 500, "end": 520},
    })
}

#[tokio::test]
async fn full_lifecycle_shapes_the_vm_field_by_field() {
    let mut config = Config::fast();
    // A guest that takes a moment to boot, so the attached ISO can be inspected.
    config.boot_delay_ms = 150;
    config.agent_delay_ms = 150;
    let sim = sim_with(config).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let mut req = request(&sim, "m1", "c1", full_spec(), seed_cluster());

    // 1. The address is asked for at once, and the clone goes on while it is allocated;
    //    nothing is booted before it exists (it goes into the ISO).
    let mut phases = vec![];
    let without_address = loop {
        let s = plugin.create_machine(&req).await.unwrap().unwrap();
        req.state = Some(s.progress.state.clone());
        if phases.last() != Some(&s.progress.phase) {
            phases.push(s.progress.phase.clone());
        }
        let wanted: Vec<(String, String)> = s
            .address_requests
            .iter()
            .map(|r| (r.device.clone(), r.pool.label()))
            .collect();
        assert_eq!(
            wanted,
            [("net0-00-inet".to_string(), "v4-icip".to_string())]
        );
        if s.progress.phase == "WaitingForAddresses" {
            break s;
        }
        assert!(phases.len() < 10 && !s.ready, "{phases:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        phases.first().map(String::as_str),
        Some("Cloning"),
        "{phases:?}"
    );
    assert!(!without_address.ready && !without_address.needs_bootstrap);
    assert!(iso_volumes(&sim).is_empty(), "no ISO before the address");
    assert_eq!(
        sim.state().vm(vmid_of(&without_address)).unwrap()["status"],
        "stopped"
    );
    req.addresses.push(AllocatedAddress {
        device: "net0-00-inet".into(),
        address: "192.168.1.221".into(),
        prefix: 24,
        gateway: Some("192.168.1.1".into()),
    });

    // 2. Without bootstrap data: wait for it.
    let waiting = loop {
        let s = plugin.create_machine(&req).await.unwrap().unwrap();
        req.state = Some(s.progress.state.clone());
        if phases.last() != Some(&s.progress.phase) {
            phases.push(s.progress.phase.clone());
        }
        if s.needs_bootstrap {
            break s;
        }
        assert!(phases.len() < 10 && !s.ready, "{phases:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(waiting.progress.phase, "WaitingForBootstrapData");
    assert_eq!(waiting.failure_domain.as_deref(), Some("pve1"));
    let vmid = vmid_of(&waiting);
    assert!((500..=520).contains(&vmid), "VMID {vmid} from vmIDRange");
    assert!(
        iso_volumes(&sim).is_empty(),
        "no ISO before the bootstrap data"
    );
    assert_eq!(sim.state().vm(vmid).unwrap()["status"], "stopped");

    // 3. With bootstrap data: ISO, start, guest agent, ready.
    req.bootstrap = Some(bootstrap());
    let mut saw_iso = false;
    let status = loop {
        let s = plugin.create_machine(&req).await.unwrap().unwrap();
        req.state = Some(s.progress.state.clone());
        if phases.last() != Some(&s.progress.phase) {
            phases.push(s.progress.phase.clone());
        }
        // Looked at once attached: the upload's task can end (the ISO on the storage)
        // between the call that follows it and the one that attaches it.
        let isos = iso_volumes(&sim);
        let attached = sim
            .state()
            .vm(vmid)
            .is_some_and(|vm| cfg(&vm, "ide2").contains("iso/hyperplug-"));
        if !isos.is_empty() && attached && !saw_iso {
            saw_iso = true;
            check_iso(&sim, vmid, &isos[0]);
        }
        if s.ready {
            break s;
        }
        assert!(phases.len() < 20, "{phases:?}");
        tokio::time::sleep(Duration::from_millis(
            s.progress.requeue_after_ms.unwrap_or(0).min(50),
        ))
        .await;
    };
    assert!(
        saw_iso,
        "the NoCloud ISO was seen on the storage: {phases:?}"
    );
    assert!(
        phases.contains(&"WaitingForGuestAgent".to_string()),
        "{phases:?}"
    );
    assert_eq!(phases.last().map(String::as_str), Some("Ready"));

    // 4. The VM in the simulator, field by field.
    let vm = sim.state().vm(vmid).unwrap();
    assert_eq!(vm["node"], "pve1");
    assert_eq!(vm["status"], "running");
    assert_eq!(vm["pool"], "capi");
    assert_eq!(vm["name"], "m1");
    assert_eq!(cfg(&vm, "sockets"), "2");
    assert_eq!(cfg(&vm, "cores"), "4");
    assert_eq!(cfg(&vm, "memory"), "8192");
    assert_eq!(cfg(&vm, "agent"), "1");
    let tags: BTreeSet<&str> = cfg(&vm, "tags").split(';').collect();
    assert_eq!(
        tags,
        BTreeSet::from(["hp-uid-m1", "hyperplug", "k8s", "worker"])
    );
    let description = cfg(&vm, "description");
    assert!(
        description.starts_with("worker of the lifecycle test"),
        "{description}"
    );
    assert!(
        description
            .lines()
            .any(|l| l == "hyperplug.machine-uid=uid-m1"),
        "{description}"
    );
    let net0 = props(cfg(&vm, "net0"));
    assert_eq!(net0.get("bridge").map(String::as_str), Some("vmbr0"));
    assert_eq!(net0.get("tag").map(String::as_str), Some("10"));
    assert_eq!(net0.get("mtu").map(String::as_str), Some("1500"));
    assert!(
        net0.get("virtio")
            .is_some_and(|m| m.starts_with("BC:24:11")),
        "{net0:?}"
    );
    let net1 = props(cfg(&vm, "net1"));
    assert_eq!(net1.get("bridge").map(String::as_str), Some("vmbr1"));
    assert!(net1.contains_key("e1000"), "{net1:?}");
    let scsi0 = props(cfg(&vm, "scsi0"));
    assert_eq!(scsi0.get("size").map(String::as_str), Some("30G"));
    assert!(
        cfg(&vm, "scsi0").starts_with(&format!("local-lvm:vm-{vmid}-disk-")),
        "full clone on local-lvm: {}",
        cfg(&vm, "scsi0")
    );
    let scsi1 = props(cfg(&vm, "scsi1"));
    assert_eq!(scsi1.get("size").map(String::as_str), Some("20G"));
    assert!(
        cfg(&vm, "scsi1").starts_with("local-lvm:"),
        "{}",
        cfg(&vm, "scsi1")
    );
    assert_eq!(
        cfg(&vm, "ide2"),
        "none,media=cdrom",
        "ISO ejected after boot"
    );
    assert!(
        !vm["config"]
            .as_object()
            .unwrap()
            .values()
            .any(|v| v.as_str().is_some_and(|s| s.contains("cloudinit"))),
        "PVE's own cloud-init drive is gone: {}",
        vm["config"]
    );
    assert!(
        status.ready
            && status
                .progress
                .waits
                .iter()
                .any(|w| w.key.starts_with("task:")),
        "ready once the ISO's removal is asked for, waiting on it: {:?}",
        status.progress.waits
    );
    let described = describe_until_the_iso_is_gone(&plugin, &mut req, &sim).await;
    assert!(described.ready, "ISO deleted once booted, still ready");

    // 5. What the guest got (the simulator boots from the ISO's network-config).
    assert_eq!(vm["guest"]["hostname"], "m1");
    let ipv4: Vec<&str> = vm["ipv4"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(ipv4.contains(&"192.168.1.221"), "{ipv4:?}");
    let dhcp_ip = ipv4
        .iter()
        .find(|a| a.starts_with("10.10.0."))
        .expect("net1 by DHCP")
        .to_string();

    // 6. The status: provider ID from SMBIOS, static and DHCP addresses.
    let uuid = props(cfg(&vm, "smbios1")).get("uuid").cloned().unwrap();
    assert_eq!(status.provider_id, Some(format!("proxmox://{uuid}")));
    let addrs: Vec<(AddressType, &str)> = status
        .addresses
        .iter()
        .map(|a| (a.address_type, a.address.as_str()))
        .collect();
    assert!(
        addrs.contains(&(AddressType::InternalIp, "192.168.1.221")),
        "{addrs:?}"
    );
    assert!(
        addrs.contains(&(AddressType::InternalIp, dhcp_ip.as_str())),
        "{addrs:?}"
    );
    assert!(addrs.contains(&(AddressType::Hostname, "m1")), "{addrs:?}");
    assert_eq!(status.failure_domain.as_deref(), Some("pve1"));
    let details: BTreeMap<_, _> = status.details.iter().cloned().collect();
    assert_eq!(details.get("node").map(String::as_str), Some("pve1"));
    assert_eq!(details.get("vmid"), Some(&vmid.to_string()));

    // 7. Describe: running, no drift.
    let d = plugin.describe_machine(&req).await.unwrap().unwrap();
    assert!(d.ready && d.drift.is_none(), "{:?}", d.drift);

    // 8. Delete: stop, wait, destroy with purge, confirm.
    sim.state().reset_counters();
    let delete_phases = drive_delete(&plugin, &mut req).await.unwrap();
    assert_eq!(
        delete_phases.first().map(String::as_str),
        Some("Stopping"),
        "{delete_phases:?}"
    );
    assert!(
        delete_phases.contains(&"Deleting".to_string()),
        "{delete_phases:?}"
    );
    assert!(sim.state().vm(vmid).is_none());
    let counters = sim.state().counters();
    assert_eq!(
        counters.get("POST /nodes/{node}/qemu/{vmid}/status/stop"),
        Some(&1),
        "{counters:?}"
    );
    assert_eq!(
        counters.get("DELETE /nodes/{node}/qemu/{vmid}"),
        Some(&1),
        "{counters:?}"
    );
    let dump = sim.state().dump();
    assert!(
        !dump["pools"]["capi"]
            .as_array()
            .unwrap()
            .contains(&json!(vmid)),
        "purged from the pool: {}",
        dump["pools"]
    );
    let leftovers: Vec<Value> = dump["storages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["volumes"].as_array().cloned().unwrap_or_default())
        .filter(|v| v["vmid"] == json!(vmid))
        .collect();
    assert!(leftovers.is_empty(), "disks destroyed: {leftovers:?}");

    // 9. Idempotent: again with the final state, and with no state at all.
    assert!(drive_delete(&plugin, &mut req).await.unwrap().is_empty());
    req.state = None;
    assert!(drive_delete(&plugin, &mut req).await.unwrap().is_empty());
    let d = plugin.describe_machine(&req).await.unwrap().unwrap();
    assert!(!d.ready);
}

/// The uploaded ISO while attached: a `cidata` volume with the expected files, as the
/// simulator's own ISO reader parsed it, and rebuilt byte-for-byte natively and read back
/// with the `iso9660` crate.
fn check_iso(sim: &pve_sim::RunningSim, vmid: u32, volume: &Value) {
    let volid = volume["volid"].as_str().unwrap();
    assert_eq!(volid, format!("local:iso/hyperplug-{vmid}-uid-m1.iso"));
    let vm = sim.state().vm(vmid).unwrap();
    assert_eq!(
        cfg(&vm, "ide2"),
        format!("{volid},media=cdrom"),
        "attached on the default CD slot"
    );
    let nc = &volume["nocloud"];
    assert_eq!(nc["volume_id"], "cidata", "{volume}");
    let user = nc["user_data"].as_str().unwrap();
    assert_eq!(user, CLOUD_CONFIG);
    let meta = nc["meta_data"].as_str().unwrap();
    let uuid = props(cfg(&vm, "smbios1")).get("uuid").cloned().unwrap();
    // Templates set the kubelet's provider ID from the instance ID: the SMBIOS UUID.
    assert_eq!(nc["instance_id"], uuid.as_str(), "{meta}");
    assert_eq!(nc["hostname"], "m1", "{meta}");
    assert!(
        meta.contains(&format!("provider-id: \"proxmox://{uuid}\"")),
        "{meta}"
    );
    let net = nc["network_config"].as_str().unwrap();
    let mac0 = props(cfg(&vm, "net0")).get("virtio").cloned().unwrap();
    let ifaces = nc["interfaces"].as_array().unwrap();
    assert_eq!(ifaces.len(), 2, "{net}");
    assert_eq!(ifaces[0]["mac"], mac0.to_uppercase());
    assert_eq!(
        ifaces[0]["addresses"],
        json!([["192.168.1.221", 24]]),
        "{net}"
    );
    assert_eq!(ifaces[0]["gateway4"], "192.168.1.1", "{net}");
    assert_eq!(ifaces[1]["dhcp4"], true, "{net}");
    assert!(
        net.contains("nameservers:\n        addresses:\n          - '192.168.1.1'"),
        "{net}"
    );

    // Byte-level: the same files make the same image (the writer is deterministic).
    let files: Vec<(&str, &[u8])> = vec![
        ("meta-data", meta.as_bytes()),
        ("user-data", user.as_bytes()),
        ("network-config", net.as_bytes()),
    ];
    let image = guest_nocloud::build_iso("cidata", &files).unwrap();
    assert_eq!(
        image.len() as u64,
        volume["size"].as_u64().unwrap(),
        "same size as the upload"
    );
    assert_eq!(&image[16 * 2048 + 40..16 * 2048 + 46], b"cidata");
    let read = read_with_iso9660_crate(image);
    let names: BTreeSet<&str> = read.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        BTreeSet::from(["META_DATA", "NETWORK_CONFIG", "USER_DATA"]),
        "ISO 9660 names (the Rock Ridge / Joliet names are the cloud-init ones)"
    );
    assert_eq!(read["USER_DATA"], CLOUD_CONFIG.as_bytes());
    assert_eq!(read["META_DATA"], meta.as_bytes());
}

/// `count` machines (`alpha-<prefix>0`, `beta-<prefix>1`, ...: of two clusters in turn)
/// created at once, each driven to ready: their UIDs and ready statuses.
async fn create_at_once(
    sim: &pve_sim::RunningSim,
    plugin: Plugin,
    spec: &Value,
    prefix: &str,
    count: usize,
) -> Vec<(String, MachineStatus)> {
    let mut handles = vec![];
    for i in 0..count {
        let cluster = if i % 2 == 0 { "alpha" } else { "beta" };
        let name = format!("{cluster}-{prefix}{i}");
        let mut req = request(sim, &name, cluster, spec.clone(), dhcp_cluster());
        req.bootstrap = Some(bootstrap());
        let plugin = plugin.clone();
        handles.push(tokio::spawn(async move {
            let (status, _) = drive_create(&plugin, &mut req)
                .await
                .unwrap_or_else(|e| panic!("{e:?}"));
            (req.machine.uid, status)
        }));
    }
    let mut done = vec![];
    for h in handles {
        done.push(h.await.unwrap());
    }
    done
}

#[tokio::test]
async fn twenty_concurrent_creates_from_two_clusters_share_no_vmid() {
    let sim = sim_with(Config::fast()).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let spec = json!({
        "sourceNode": "pve1",
        "templateID": 9000,
        "memoryMiB": 1024,
        "vmIDRange": {"start": 700, "end": 719},
        "checks": {"skipCloudInitStatus": true},
    });
    let mut vmids = BTreeSet::new();
    let mut owners = BTreeMap::new();
    for (uid, status) in create_at_once(&sim, plugin, &spec, "m", 20).await {
        let vmid = vmid_of(&status);
        assert!(status.ready);
        assert!((700..=719).contains(&vmid));
        assert!(vmids.insert(vmid), "VMID {vmid} handed out twice");
        owners.insert(vmid, uid);
    }
    assert_eq!(vmids.len(), 20, "every ID of the 20-ID range used once");
    let clones = sim.state().counters()["POST /nodes/{node}/qemu/{vmid}/clone"];
    assert!(clones >= 20, "{clones} clone calls");
    let vms = non_templates(&sim);
    assert_eq!(vms.len(), 20, "exactly one VM per machine");
    for vm in vms {
        let vmid = vm["vmid"].as_u64().unwrap() as u32;
        let owner = &owners[&vmid];
        assert!(
            cfg(&vm, "description")
                .lines()
                .any(|l| l == format!("hyperplug.machine-uid={owner}")),
            "VM {vmid} carries its machine's marker"
        );
        assert_eq!(vm["status"], "running");
    }
}

/// Calls create until the clone has been asked of PVE (the VMID is recorded one call
/// before); returns that call's status.
async fn create_until_cloning(plugin: &Plugin, req: &mut MachineRequest) -> MachineStatus {
    for _ in 0..5 {
        let s = plugin.create_machine(req).await.unwrap().unwrap();
        req.state = Some(s.progress.state.clone());
        if s.progress.state.contains("UPID:") {
            return s;
        }
    }
    panic!("no clone was started in 5 calls");
}

/// PVE writes a clone's config (name, description with the marker) only once its first
/// disk is copied; until then the VM holds a temporary `lock: clone` alone. A result lost
/// between the clone call and the host's save (the host replays the state before), and a
/// state lost entirely (`clusterctl move`), both end on the one VM.
#[tokio::test]
async fn a_state_lost_mid_clone_adopts_the_vm_instead_of_cloning_again() {
    let mut config = Config::fast();
    config.task_ms.insert("qmclone".into(), 300);
    let sim = sim_with(config).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let spec =
        json!({"sourceNode": "pve1", "templateID": 9000, "checks": {"skipCloudInitStatus": true}});
    let mut req = request(&sim, "m1", "c1", spec, dhcp_cluster());
    req.bootstrap = Some(bootstrap());

    // 1. The VMID is recorded before the clone is asked for.
    let intent = plugin.create_machine(&req).await.unwrap().unwrap();
    let vmid = vmid_of(&intent);
    assert!(
        non_templates(&sim).is_empty(),
        "no clone before the VMID is saved"
    );
    // 2. The clone is asked for, and the host loses the result: it replays the intent.
    let mut lost = req.clone();
    lost.state = Some(intent.progress.state.clone());
    let posted = plugin.create_machine(&lost).await.unwrap().unwrap();
    assert!(posted.progress.state.contains("UPID:"));
    let vm = sim.state().vm(vmid).expect("cloning");
    assert_eq!(vm["config"]["lock"], "clone");
    req.state = Some(intent.progress.state.clone());
    let again = plugin.create_machine(&req).await.unwrap().unwrap();
    assert_eq!(
        vmid_of(&again),
        vmid,
        "the recorded VMID is looked at first"
    );
    assert_eq!(again.progress.phase, "Cloning");
    req.state = Some(again.progress.state.clone());
    let (status, _) = drive_create(&plugin, &mut req).await.unwrap();
    assert_eq!(vmid_of(&status), vmid);

    // 3. A second machine loses its whole state while its clone shows no owner yet.
    let mut other = request(&sim, "m2", "c1", req_spec(&req), dhcp_cluster());
    other.bootstrap = Some(bootstrap());
    let cloning = create_until_cloning(&plugin, &mut other).await;
    let other_vmid = vmid_of(&cloning);
    assert!(
        sim.state().vm(other_vmid).unwrap()["config"]
            .get("name")
            .is_none(),
        "the temporary config shows no owner"
    );
    other.state = None;
    let wait = plugin.create_machine(&other).await.unwrap().unwrap();
    assert_eq!(wait.progress.phase, "Pending", "{}", wait.progress.message);
    // Counted, not named: such a clone may be another tenant's.
    assert!(
        wait.progress
            .message
            .contains("1 clone(s) on pve1 show no owner yet")
            && !wait.progress.message.contains(&other_vmid.to_string()),
        "{}",
        wait.progress.message
    );
    other.state = Some(wait.progress.state.clone());
    let (status, _) = drive_create(&plugin, &mut other).await.unwrap();
    assert_eq!(
        vmid_of(&status),
        other_vmid,
        "adopted once its owner showed"
    );

    // Lost again once ready: still the same VM, still one each.
    req.state = None;
    let (status, _) = drive_create(&plugin, &mut req).await.unwrap();
    assert_eq!(vmid_of(&status), vmid);
    assert_eq!(non_templates(&sim).len(), 2);
    let counters = sim.state().counters();
    // The replayed clone request is refused at once (the VMID holds the first clone's
    // config), which is how the plugin finds its own clone: one clone task each.
    let clone_tasks = sim
        .state()
        .tasks()
        .iter()
        .filter(|t| t["type"] == "qmclone")
        .count();
    assert_eq!(clone_tasks, 2, "one clone per machine: {counters:?}");
    assert_eq!(
        counters.get("POST /nodes/{node}/storage/{storage}/upload"),
        Some(&2),
        "a running adopted VM gets no second seed: {counters:?}"
    );
}

fn req_spec(req: &MachineRequest) -> Value {
    serde_json::from_str(&req.spec).unwrap()
}

#[tokio::test]
async fn delete_with_a_stale_vmid_leaves_the_other_machines_vm_alone() {
    let sim = sim_with(Config::fast()).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let spec = |range: u32| {
        json!({"sourceNode": "pve1", "templateID": 9000, "vmIDRange": {"start": range, "end": range},
               "checks": {"skipCloudInitStatus": true}})
    };
    let mut a = request(&sim, "a", "c1", spec(800), dhcp_cluster());
    a.bootstrap = Some(bootstrap());
    let (status, _) = drive_create(&plugin, &mut a).await.unwrap();
    assert_eq!(vmid_of(&status), 800);
    describe_until_the_iso_is_gone(&plugin, &mut a, &sim).await;
    let stale = a.clone();

    // A's VM goes away (here: A's own delete), and machine B gets VMID 800.
    drive_delete(&plugin, &mut a).await.unwrap();
    let mut b = request(&sim, "b", "c2", spec(800), dhcp_cluster());
    b.bootstrap = Some(bootstrap());
    let (status, _) = drive_create(&plugin, &mut b).await.unwrap();
    assert_eq!(vmid_of(&status), 800);
    describe_until_the_iso_is_gone(&plugin, &mut b, &sim).await;

    // A describes drift: VMID 800 is someone else's.
    let d = plugin.describe_machine(&stale).await.unwrap().unwrap();
    assert!(matches!(d.drift, Some(Drift::Foreign(_))), "{:?}", d.drift);
    assert!(!d.ready);

    // Deleting A with its stale state succeeds and touches nothing.
    sim.state().reset_counters();
    let mut stale_delete = stale.clone();
    drive_delete(&plugin, &mut stale_delete).await.unwrap();
    let counters = sim.state().counters();
    for k in counters.keys() {
        assert!(
            k.starts_with("GET "),
            "only reads while deleting a machine whose VM is gone: {counters:?}"
        );
    }
    let vm = sim.state().vm(800).expect("B's VM still exists");
    assert_eq!(vm["status"], "running");
    assert_eq!(vm["name"], "b");
}

#[tokio::test]
async fn errors_are_classified_and_keep_the_pve_message() {
    let sim = sim_with(Config::fast()).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    // Up to the clone call (the VMID is recorded one call before it).
    let call = async |spec: Value| {
        let mut req = request(&sim, "m1", "c1", spec, dhcp_cluster());
        let mut last = None;
        for _ in 0..3 {
            let r = plugin.create_machine(&req).await.expect("call completes");
            match &r {
                Ok(s) if !s.progress.state.contains("UPID:") => {
                    req.state = Some(s.progress.state.clone());
                    last = Some(r);
                }
                _ => return r,
            }
        }
        last.expect("a result")
    };
    let base = json!({"sourceNode": "pve1", "templateID": 9000});
    let with = |patch: Value| {
        let mut s = base.clone();
        for (k, v) in patch.as_object().unwrap() {
            s[k] = v.clone();
        }
        s
    };

    // Invalid specs name the field.
    for (spec, field) in [
        (json!({"templateID": 9000}), "spec.sourceNode"),
        (json!({"sourceNode": "pve1"}), "spec.templateID"),
        (
            with(json!({"vmIDRange": {"start": 200, "end": 100}})),
            "spec.vmIDRange.end",
        ),
        (with(json!({"numCores": "four"})), "spec.numCores"),
        (with(json!({"tags": ["Bad Tag"]})), "spec.tags[0]"),
        (
            with(json!({"full": false, "storage": "local-lvm"})),
            "spec.storage",
        ),
        (
            with(json!({"network": {"default": {"bridge": ""}}})),
            "spec.network.default.bridge",
        ),
        (
            with(json!({"cloudInit": {"cdSlot": "floppy0"}})),
            "spec.cloudInit.cdSlot",
        ),
    ] {
        match call(spec.clone()).await {
            Err(PluginError::InvalidSpec(e)) => assert_eq!(e.field, field, "{spec}: {}", e.message),
            other => panic!("{spec}: expected invalid spec {field}, got {other:?}"),
        }
    }

    // Terminal: the template does not exist, said as for any VMID that may not be
    // cloned (no oracle of what it holds).
    match call(json!({"sourceNode": "pve1", "templateID": 9999})).await {
        Err(PluginError::Terminal(e)) => {
            assert_eq!(e.reason, "TemplateNotFound");
            assert!(
                e.message
                    .contains("spec.templateID 9999 on spec.sourceNode pve1 is not a template"),
                "{}",
                e.message
            );
        }
        other => panic!("expected TemplateNotFound, got {other:?}"),
    }
    match call(json!({"templateSelector": {"matchTags": ["no-such-tag"]}})).await {
        Err(PluginError::Terminal(e)) => assert_eq!(e.reason, "TemplateNotFound"),
        other => panic!("expected TemplateNotFound, got {other:?}"),
    }
    // Terminal: invalid configuration (a storage PVE does not know).
    match call(with(json!({"storage": "nosuch"}))).await {
        Err(PluginError::Terminal(e)) => {
            assert_eq!(e.reason, "InvalidConfiguration");
            assert!(
                e.message.contains("storage 'nosuch' does not exist"),
                "{}",
                e.message
            );
        }
        other => panic!("expected InvalidConfiguration, got {other:?}"),
    }

    let inject = |status: u16, message: &str| Faults {
        rules: vec![FaultRule {
            endpoint: "POST /nodes/{node}/qemu/{vmid}/clone".into(),
            status,
            message: Some(message.into()),
            ..FaultRule::default()
        }],
        ..Faults::default()
    };
    // Terminal: permission denied.
    sim.state()
        .set_faults(inject(403, "Permission check failed (/vms/9000, VM.Clone)"));
    match call(base.clone()).await {
        Err(PluginError::Terminal(e)) => {
            assert_eq!(e.reason, "PermissionDenied");
            assert!(
                e.message
                    .contains("Permission check failed (/vms/9000, VM.Clone)"),
                "{}",
                e.message
            );
        }
        other => panic!("expected PermissionDenied, got {other:?}"),
    }
    // Transient: a 500.
    sim.state().set_faults(inject(
        500,
        "cfs-lock 'file-replication_cfg' error: got lock request timeout",
    ));
    match call(base.clone()).await {
        Err(PluginError::Transient(e)) => {
            assert!(
                e.message.contains("got lock request timeout"),
                "{}",
                e.message
            )
        }
        other => panic!("expected transient, got {other:?}"),
    }
    // Transient: 595, the node does not answer.
    sim.state().set_faults(inject(595, ""));
    match call(base.clone()).await {
        Err(PluginError::Transient(e)) => assert!(e.message.contains("595"), "{}", e.message),
        other => panic!("expected transient, got {other:?}"),
    }
    // Not terminal: a lock timeout on the template's config lock, inside the clone task
    // (where PVE's clone worker takes its locks).
    sim.state().set_faults(Faults {
        lock_timeout_rate: 1.0,
        ..Faults::default()
    });
    let mut req = request(&sim, "m1", "c1", base.clone(), dhcp_cluster());
    create_until_cloning(&plugin, &mut req).await;
    let s = plugin.create_machine(&req).await.unwrap().unwrap();
    assert_eq!(s.progress.phase, "Cloning");
    assert!(
        s.progress
            .message
            .contains("can't lock file '/var/lock/qemu-server/lock-9000.conf' - got timeout"),
        "{}",
        s.progress.message
    );
    sim.state().set_faults(Faults::default());
    // Transient: network (nothing listens).
    let mut req = request(&sim, "m1", "c1", base.clone(), dhcp_cluster());
    req.credentials = Credentials {
        insecure: true,
        ..credentials("https://127.0.0.1:1")
    };
    assert!(matches!(
        plugin.create_machine(&req).await.unwrap(),
        Err(PluginError::Transient(_))
    ));
    assert!(
        non_templates(&sim).is_empty(),
        "no VM was left by the failures"
    );
}

#[tokio::test]
async fn a_failed_clone_task_is_retried_and_a_missing_vm_is_drift() {
    let sim = sim_with(Config::fast()).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    sim.state().set_faults(Faults {
        task_failure_rate: 1.0,
        task_failure_message: Some("clone failed: storage full (simulated)".into()),
        ..Faults::default()
    });
    let spec =
        json!({"sourceNode": "pve1", "templateID": 9000, "checks": {"skipCloudInitStatus": true}});
    let mut req = request(&sim, "m1", "c1", spec, dhcp_cluster());
    req.bootstrap = Some(bootstrap());
    create_until_cloning(&plugin, &mut req).await;
    let s = plugin.create_machine(&req).await.unwrap().unwrap();
    assert_eq!(s.progress.phase, "Cloning");
    assert!(
        s.progress.message.contains("storage full (simulated)"),
        "{}",
        s.progress.message
    );
    assert!(non_templates(&sim).is_empty(), "PVE removes a failed clone");
    sim.state().set_faults(Faults::default());
    req.state = Some(s.progress.state.clone());
    let (status, _) = drive_create(&plugin, &mut req).await.unwrap();
    let vmid = vmid_of(&status);

    // Someone deletes the VM behind our back: describe reports it missing.
    let mut other = req.clone();
    drive_delete(&plugin, &mut other).await.unwrap();
    let d = plugin.describe_machine(&req).await.unwrap().unwrap();
    assert!(matches!(d.drift, Some(Drift::Missing(_))), "{:?}", d.drift);
    assert!(sim.state().vm(vmid).is_none());
}

#[tokio::test]
async fn template_selector_failure_domain_and_templates() {
    let sim = sim_with(Config::fast()).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let spec = json!({
        "templateSelector": {"matchTags": ["ubuntu", "cloudinit"]},
        "full": false,
        "numCores": 2,
        "memoryMiB": 4096,
        "network": {"default": {"bridge": "vmbr0", "dhcp4": true}},
        "checks": {"skipQemuGuestAgent": true},
    });
    let mut req = request(&sim, "m1", "c1", spec.clone(), dhcp_cluster());
    req.bootstrap = Some(bootstrap());
    req.failure_domain = Some("pve1".into());
    let (status, _) = drive_create(&plugin, &mut req).await.unwrap();
    let vmid = vmid_of(&status);
    let vm = sim.state().vm(vmid).unwrap();
    assert_eq!(vm["node"], "pve1");
    assert!(
        cfg(&vm, "scsi0").starts_with(&format!("local-lvm:base-9000-disk-0/vm-{vmid}-disk-")),
        "linked clone: {}",
        cfg(&vm, "scsi0")
    );
    // Without the guest agent, the ISO stays attached, describe included; delete
    // removes it.
    assert_eq!(iso_volumes(&sim).len(), 1);
    let d = plugin.describe_machine(&req).await.unwrap().unwrap();
    assert!(d.ready && d.drift.is_none(), "{}", d.progress.message);
    assert_eq!(iso_volumes(&sim).len(), 1, "describe left the attached ISO");
    drive_delete(&plugin, &mut req).await.unwrap();
    assert!(
        iso_volumes(&sim).is_empty(),
        "leftover ISO deleted with the machine"
    );

    // The template describes capacity for autoscaling from zero.
    let t = plugin
        .describe_template(&hyperplug_runtime::bindings::machine::TemplateRequest {
            template: object("tpl"),
            spec: spec.to_string(),
            credentials: None,
        })
        .await
        .unwrap()
        .unwrap();
    let cap: BTreeMap<_, _> = t.capacity.into_iter().collect();
    assert_eq!(cap.get("cpu").map(String::as_str), Some("2"));
    assert_eq!(cap.get("memory").map(String::as_str), Some("4096Mi"));
    // Unset values come from the template (9000: 2 cores, 2048 MiB) when it can be read.
    let t = plugin
        .describe_template(&hyperplug_runtime::bindings::machine::TemplateRequest {
            template: object("tpl"),
            spec: json!({"sourceNode": "pve1", "templateID": 9000, "numSockets": 2}).to_string(),
            credentials: Some(pinned(&sim)),
        })
        .await
        .unwrap()
        .unwrap();
    let cap: BTreeMap<_, _> = t.capacity.into_iter().collect();
    assert_eq!(cap.get("cpu").map(String::as_str), Some("4"));
    assert_eq!(cap.get("memory").map(String::as_str), Some("2048Mi"));
}

#[tokio::test]
async fn concurrent_creates_on_nextid_share_no_vmid() {
    let sim = sim_with(Config::fast()).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let spec = json!({"sourceNode": "pve1", "templateID": 9000, "memoryMiB": 1024,
                      "checks": {"skipCloudInitStatus": true}});
    let mut vmids = BTreeSet::new();
    for (_, status) in create_at_once(&sim, plugin, &spec, "n", 10).await {
        assert!(vmids.insert(vmid_of(&status)), "a VMID handed out twice");
    }
    assert_eq!(non_templates(&sim).len(), 10);
}

#[tokio::test]
async fn scheduling_checks_memory_with_the_adjustment_and_cpus() {
    let sim = sim_with(Config::fast()).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let cluster = |adjustment: u64| {
        json!({"allowedNodes": ["pve1"], "controlPlaneEndpoint": {"host": "10.0.0.1", "port": 6443},
               "schedulerHints": {"memoryAdjustment": adjustment}})
    };
    // 70000 MiB does not fit in pve1's 64 GiB at 100 %.
    let big = json!({"sourceNode": "pve1", "templateID": 9000, "memoryMiB": 70000});
    let req = request(&sim, "m1", "c1", big.clone(), cluster(100));
    match plugin.create_machine(&req).await.unwrap() {
        Err(PluginError::Transient(e)) => {
            assert!(
                e.message.contains("no node can take the VM"),
                "{}",
                e.message
            );
            assert!(e.message.contains("pve1"), "{}", e.message);
        }
        other => panic!("expected a transient scheduling error, got {other:?}"),
    }
    // ... fits at 200 % (overcommit).
    let mut req = request(&sim, "m2", "c1", big.clone(), cluster(200));
    let s = create_until_cloning(&plugin, &mut req).await;
    assert!(vmid_of(&s) >= 100);
    // ... and 0 disables the memory check.
    let mut req = request(&sim, "m3", "c1", big, cluster(0));
    create_until_cloning(&plugin, &mut req).await;
    // More vCPUs than the node has.
    let wide = json!({"sourceNode": "pve1", "templateID": 9000, "numSockets": 2, "numCores": 16});
    let req = request(&sim, "m4", "c1", wide, cluster(0));
    match plugin.create_machine(&req).await.unwrap() {
        Err(PluginError::Transient(e)) => assert!(e.message.contains("CPUs"), "{}", e.message),
        other => panic!("expected a transient scheduling error, got {other:?}"),
    }
    assert_eq!(non_templates(&sim).len(), 2);
}

/// Answers with the next address of 192.168.1.0/24 for net0 from the IPv4 pool, and
/// the bootstrap data.
struct FromRange {
    next: u8,
}

impl Answers for FromRange {
    fn address(&mut self, device: &str, pool: &str) -> Result<AllocatedAddress, String> {
        assert_eq!((device, pool), ("net0-00-inet", "v4-icip"));
        self.next += 1;
        Ok(AllocatedAddress {
            device: device.into(),
            address: format!("192.168.1.{}", self.next),
            prefix: 24,
            gateway: Some("192.168.1.1".into()),
        })
    }

    fn bootstrap(&mut self) -> Result<BootstrapData, String> {
        Ok(bootstrap())
    }
}

/// Real-ish durations (clone 300 ms, start 200 ms, boot and agent 500 ms each): every
/// wait is returned as progress, none is slept through inside a call.
#[tokio::test]
async fn with_pve_task_durations_every_wait_is_a_requeue() {
    let sim = sim_with(Config::default()).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let mut spec = full_spec();
    spec["network"]["additionalDevices"] = json!([]);
    let mut req = request(&sim, "m1", "c1", spec, seed_cluster());
    req.bootstrap = Some(bootstrap());
    let mut pool = FromRange { next: 220 };
    let (status, run) = create_until_ready(&plugin, &mut req, &mut pool, &pacing(50))
        .await
        .unwrap();
    assert!(status.ready);
    // The address is given while the clone runs: nothing waits for it.
    assert!(
        !run.phases.iter().any(|p| p == "WaitingForAddresses"),
        "{:?}",
        run.phases
    );
    for phase in [
        "Cloning",
        "Resizing",
        "PoweringOn",
        "WaitingForGuestAgent",
        "Ready",
    ] {
        assert!(
            run.phases.iter().any(|p| p == phase),
            "{phase} in {:?}",
            run.phases
        );
    }
    let vm = sim.state().vm(vmid_of(&status)).unwrap();
    assert!(
        vm["ipv4"]
            .as_array()
            .unwrap()
            .contains(&json!("192.168.1.221")),
        "{}",
        vm["ipv4"]
    );
    let phases = drive_delete(&plugin, &mut req).await.unwrap();
    assert_eq!(phases, ["Stopping", "Deleting"], "{phases:?}");
    assert!(non_templates(&sim).is_empty());
}

/// A delete that arrives while the clone still holds its lock waits for it, then
/// stops and destroys; nothing is left.
#[tokio::test]
async fn delete_during_the_clone_waits_for_the_lock() {
    let mut config = Config::fast();
    config.task_ms.insert("qmclone".into(), 300);
    let sim = sim_with(config).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let spec = json!({"sourceNode": "pve1", "templateID": 9000});
    let mut req = request(&sim, "m1", "c1", spec, dhcp_cluster());
    let first = create_until_cloning(&plugin, &mut req).await;
    assert_eq!(first.progress.phase, "Cloning");
    let vmid = vmid_of(&first);
    assert_eq!(
        sim.state().vm(vmid).unwrap()["config"]["lock"],
        "clone",
        "the clone has not written its config yet"
    );
    let phases = drive_delete(&plugin, &mut req).await.unwrap();
    assert_eq!(
        phases.first().map(String::as_str),
        Some("Stopping"),
        "{phases:?}"
    );
    assert!(sim.state().vm(vmid).is_none());
    assert!(non_templates(&sim).is_empty());
}

/// PVE accepts a clone and hands back its task before the task has written anything:
/// its worker first waits for the config locks of the template and of the new VMID. A
/// delete arriving in that window finds no VM with the recorded VMID; it must follow
/// the clone task to its end rather than take "no VM yet" for "gone", or the clone
/// finishes after the finalizer went, marked as the deleted machine's (the chaos run's
/// orphan).
#[tokio::test]
async fn a_delete_while_the_clone_waits_for_the_templates_lock_destroys_the_clone_it_asked_for() {
    let mut config = Config::fast();
    config.task_ms.insert("qmclone".into(), 200);
    // The template's lock must outlast the steps up to the clone request even on a
    // loaded machine (it failed once at 800 ms beside a 10,000-machine benchmark), and
    // end within the clone's lock wait.
    config.task_ms.insert("qmconfig".into(), 3_000);
    config.clone_lock_wait_ms = 5_000;
    let sim = sim_with(config).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let spec = json!({"sourceNode": "pve1", "templateID": 9000});
    let mut req = request(&sim, "m1", "c1", spec, dhcp_cluster());
    // Someone writes the template's config: the task holds its lock for a while.
    let writer = reqwest::Client::builder()
        .no_proxy()
        .add_root_certificate(reqwest::Certificate::from_pem(sim.ca_pem().as_bytes()).unwrap())
        .build()
        .unwrap();
    let reply = writer
        .post(format!(
            "{}/api2/json/nodes/pve1/qemu/9000/config",
            sim.base_url()
        ))
        .header(
            "Authorization",
            format!("PVEAPIToken={}", pve_sim::DEFAULT_TOKEN),
        )
        .form(&[("description", "golden image")])
        .send()
        .await
        .unwrap();
    assert!(reply.status().is_success(), "{:?}", reply.text().await);
    let cloning = create_until_cloning(&plugin, &mut req).await;
    let vmid = vmid_of(&cloning);
    assert!(
        sim.state().vm(vmid).is_none(),
        "the clone waits for the template's lock: no VM {vmid} yet"
    );
    drive_delete(&plugin, &mut req).await.unwrap();
    assert!(
        non_templates(&sim).is_empty(),
        "the clone is destroyed, not left behind: {:?}",
        non_templates(&sim)
    );
    let destroyed = sim.state().destroyed();
    assert_eq!(destroyed.len(), 1, "{destroyed:?}");
    assert_eq!(destroyed[0]["vmid"], vmid);
}

/// What PVE answers about VM `vmid` while it is on another node than pve1, for `times`
/// requests to `endpoint` after the first `skip`.
fn away(vmid: u32, endpoint: &str, skip: u64, times: u64) -> FaultRule {
    FaultRule {
        endpoint: endpoint.into(),
        status: 500,
        message: Some(format!(
            "Configuration file 'nodes/pve1/qemu-server/{vmid}.conf' does not exist"
        )),
        skip,
        max_count: Some(times),
        ..FaultRule::default()
    }
}

/// A VM that migrates away from its node and back while its machine is deleted (PVE
/// 9.2's load balancer, an administrator) is not at its node when one read looks and is
/// listed there again by the next: that is not "gone". The chaos run's orphan: its stop
/// found no VM on the recorded node, the confirming read found none either, the listing
/// showed it back on that node, and the delete ended with the VM left running.
#[tokio::test]
async fn a_vm_away_from_its_node_for_one_read_during_delete_is_still_destroyed() {
    let sim = sim_with(Config::fast()).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let spec =
        json!({"sourceNode": "pve1", "templateID": 9000, "checks": {"skipCloudInitStatus": true}});
    let mut req = request(&sim, "m1", "c1", spec, dhcp_cluster());
    req.bootstrap = Some(bootstrap());
    let (status, _) = drive_create(&plugin, &mut req).await.unwrap();
    let vmid = vmid_of(&status);
    // Away for the delete's first look, and again for the read before the destroy (a
    // rule that fires stops the request there: the second rule counts the re-read made
    // where the listing places the VM, then fires on the next).
    sim.state().set_faults(Faults {
        rules: vec![
            away(vmid, "GET /nodes/{node}/qemu/{vmid}/config", 0, 1),
            away(vmid, "GET /nodes/{node}/qemu/{vmid}/config", 1, 1),
        ],
        ..Faults::default()
    });
    drive_delete(&plugin, &mut req).await.unwrap();
    let hits = sim.state().fault_hits();
    assert!(
        hits.as_array().unwrap().iter().all(|r| r["fired"] == 1),
        "both reads found the VM away: {hits}"
    );
    assert!(
        non_templates(&sim).is_empty(),
        "the VM is destroyed, not left behind: {:?}",
        non_templates(&sim)
    );
    assert_eq!(sim.state().destroyed().len(), 1);
}

/// A VM that migrates twice while its machine is deleted: away from its recorded node for
/// the delete's first read, listed back there, and away again when read where it is listed.
/// A listed VM without its config on the listed node is moving, not gone: the delete
/// looks again and destroys it (the chaos run's second orphan, seed 12756192715809633597).
#[tokio::test]
async fn a_vm_listed_on_a_node_without_its_config_is_moving_not_gone() {
    let sim = sim_with(Config::fast()).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let spec =
        json!({"sourceNode": "pve1", "templateID": 9000, "checks": {"skipCloudInitStatus": true}});
    let mut req = request(&sim, "m1", "c1", spec, dhcp_cluster());
    req.bootstrap = Some(bootstrap());
    let (status, _) = drive_create(&plugin, &mut req).await.unwrap();
    let vmid = vmid_of(&status);
    sim.state().set_faults(Faults {
        rules: vec![
            // The delete's first look, then the read where the listing places the VM.
            away(vmid, "GET /nodes/{node}/qemu/{vmid}/config", 0, 2),
        ],
        ..Faults::default()
    });
    let moving = drive_delete(&plugin, &mut req).await.unwrap_err();
    assert!(
        moving.contains("transient") && moving.contains("moving between nodes"),
        "{moving}"
    );
    // The host retries a transient failure, with the state from before it.
    drive_delete(&plugin, &mut req).await.unwrap();
    let hits = sim.state().fault_hits();
    let fired: Vec<u64> = hits
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["fired"].as_u64().unwrap())
        .collect();
    assert_eq!(fired, vec![2], "the VM was away for every read: {hits}");
    assert!(
        non_templates(&sim).is_empty(),
        "the VM is destroyed, not left behind: {:?}",
        non_templates(&sim)
    );
    assert_eq!(sim.state().destroyed().len(), 1);
}

/// Ignition goes into `user-data` (Ignition's Proxmox VE platform reads the NoCloud
/// `user-data`) with the machine's hostname, `/etc/proxmox-env` and its network as
/// networkd units added; without the guest agent the ISO stays attached.
#[tokio::test]
async fn ignition_bootstrap_data_is_the_user_data_with_the_machines_files() {
    let sim = sim_with(Config::fast()).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let spec = json!({"sourceNode": "pve1", "templateID": 9000,
                      "cloudInit": {"isoStorage": "local", "cdSlot": "sata1"},
                      "checks": {"skipQemuGuestAgent": true}});
    let mut req = request(&sim, "m1", "c1", spec, dhcp_cluster());
    let ignition = r#"{"ignition":{"version":"3.4.0"},"storage":{"files":[]}}"#;
    req.bootstrap = Some(BootstrapData {
        format: "ignition".into(),
        value: ignition.as_bytes().to_vec(),
    });
    let (status, _) = drive_create(&plugin, &mut req).await.unwrap();
    let vm = sim.state().vm(vmid_of(&status)).unwrap();
    let isos = iso_volumes(&sim);
    assert_eq!(isos.len(), 1);
    let volid = isos[0]["volid"].as_str().unwrap();
    assert_eq!(
        cfg(&vm, "sata1"),
        format!("{volid},media=cdrom"),
        "the configured CD slot"
    );
    assert!(
        cfg(&vm, "ide2").is_empty(),
        "PVE's cloud-init drive removed: {}",
        vm["config"]
    );
    let user_data: Value =
        serde_json::from_str(isos[0]["nocloud"]["user_data"].as_str().unwrap()).unwrap();
    assert_eq!(user_data["ignition"]["version"], "3.4.0");
    let files: Vec<&str> = user_data["storage"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    assert_eq!(
        files,
        [
            "/etc/hostname",
            "/etc/proxmox-env",
            "/etc/systemd/network/00-eth0.network"
        ]
    );
    assert_eq!(
        isos[0]["nocloud"]["network_config"],
        "version: 1\nconfig: []\n"
    );
    // DHCP: the address comes from the DHCP lease the guest reports... without the
    // agent, only the hostname is known.
    assert!(status.provider_id.is_some());
}

/// CAPI's failure domain is the node: a template on shared storage is cloned there, and
/// the seed goes to that node's ISO storage.
#[tokio::test]
async fn the_failure_domain_is_the_node_the_vm_lands_on() {
    let mut config = Config::fast();
    config.storages.push(pve_sim::StorageConfig {
        id: "shared".into(),
        kind: pve_sim::StorageType::Dir,
        content: vec!["images".into()],
        shared: true,
        ..pve_sim::StorageConfig::default()
    });
    config.vms.push(pve_sim::VmSeed {
        vmid: 9100,
        node: "pve1".into(),
        config: [
            ("name", "shared-template"),
            ("template", "1"),
            ("scsi0", "shared:9100/base-9100-disk-0.raw,size=10G"),
            ("net0", "virtio,bridge=vmbr0"),
            ("agent", "1"),
            ("cores", "2"),
            ("memory", "2048"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        ..pve_sim::VmSeed::default()
    });
    let sim = sim_with(config).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let cluster = json!({"allowedNodes": ["pve1", "pve2", "pve3"],
                         "controlPlaneEndpoint": {"host": "10.10.0.5", "port": 6443}});
    let spec = json!({"sourceNode": "pve1", "templateID": 9100,
                      "checks": {"skipCloudInitStatus": true}});
    let mut req = request(&sim, "m1", "c1", spec, cluster);
    req.bootstrap = Some(bootstrap());
    req.failure_domain = Some("pve2".into());
    let (status, _) = drive_create(&plugin, &mut req).await.unwrap();
    assert_eq!(status.failure_domain.as_deref(), Some("pve2"));
    let vm = sim.state().vm(vmid_of(&status)).unwrap();
    assert_eq!(vm["node"], "pve2");
    assert_eq!(vm["status"], "running");
    assert!(
        cfg(&vm, "scsi0").starts_with("shared:"),
        "{}",
        cfg(&vm, "scsi0")
    );
    let details: BTreeMap<_, _> = status.details.iter().cloned().collect();
    assert_eq!(details.get("node").map(String::as_str), Some("pve2"));
    drive_delete(&plugin, &mut req).await.unwrap();
    assert!(non_templates(&sim).is_empty());
}

/// Plays the host through transient errors: create until ready, retrying what is
/// transient; returns the ready status and the transient messages seen.
async fn drive_create_through_transients(
    plugin: &Plugin,
    req: &mut MachineRequest,
    max: usize,
) -> (MachineStatus, Vec<String>) {
    let mut transients = vec![];
    for _ in 0..max {
        match plugin.create_machine(req).await.expect("call completes") {
            Ok(s) => {
                req.state = Some(s.progress.state.clone());
                if s.ready {
                    return (s, transients);
                }
                if s.needs_bootstrap {
                    req.bootstrap = Some(bootstrap());
                }
                let wait = s.progress.requeue_after_ms.unwrap_or(0).min(50);
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
            Err(PluginError::Transient(t)) => {
                transients.push(t.message);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("not transient: {e:?} (transient before: {transients:?})"),
        }
    }
    panic!("create did not converge in {max} calls; transient errors: {transients:?}");
}

/// Three nodes where pve1, the template's node, has the least free memory.
fn pve1_smallest() -> Config {
    let mut config = Config::fast();
    config.nodes[0].memory = 16 << 30;
    config
}

fn cluster_without_allowed_nodes() -> Value {
    json!({"controlPlaneEndpoint": {"host": "10.10.0.5", "port": 6443}})
}

/// PVE clones a template on local storage only on its own node ("can't clone VM to node
/// 'pve2' (VM uses local storage)"): without `allowedNodes`, the scheduler picks among
/// the nodes the template reaches, and a failure domain it cannot reach (CAPI spreads
/// machines over every node the cluster reports) gives way.
#[tokio::test]
async fn without_allowed_nodes_a_local_template_is_cloned_on_its_own_node() {
    let sim = sim_with(pve1_smallest()).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let spec =
        json!({"sourceNode": "pve1", "templateID": 9000, "checks": {"skipCloudInitStatus": true}});
    let mut a = request(
        &sim,
        "a",
        "c1",
        spec.clone(),
        cluster_without_allowed_nodes(),
    );
    a.bootstrap = Some(bootstrap());
    let (status, _) = drive_create(&plugin, &mut a).await.unwrap();
    let vm = sim.state().vm(vmid_of(&status)).unwrap();
    assert_eq!(vm["node"], "pve1", "pve2 and pve3 have more free memory");
    assert_eq!(vm["status"], "running");

    let mut b = request(
        &sim,
        "b",
        "c1",
        spec.clone(),
        cluster_without_allowed_nodes(),
    );
    b.bootstrap = Some(bootstrap());
    b.failure_domain = Some("pve3".into());
    let (status, _) = drive_create(&plugin, &mut b).await.unwrap();
    assert_eq!(status.failure_domain.as_deref(), Some("pve1"));
    assert_eq!(sim.state().vm(vmid_of(&status)).unwrap()["node"], "pve1");
    assert_eq!(
        sim.state().counters()["POST /nodes/{node}/qemu/{vmid}/clone"],
        2,
        "no clone was refused"
    );

    // Allowed nodes that leave the template's node out cannot work: say why, once.
    let mut spec_c = spec.clone();
    spec_c["allowedNodes"] = json!(["pve2", "pve3"]);
    let mut c = request(&sim, "c", "c1", spec_c, cluster_without_allowed_nodes());
    match plugin.create_machine(&c).await.unwrap() {
        Err(PluginError::Terminal(e)) => {
            assert_eq!(e.reason, "TemplateOnLocalStorage");
            for part in [
                "template 9000 on pve1",
                "local-lvm",
                "allowedNodes",
                "shared storage",
            ] {
                assert!(e.message.contains(part), "{part}: {}", e.message);
            }
        }
        other => panic!("expected TemplateOnLocalStorage, got {other:?}"),
    }
    c.state = None;
    assert_eq!(non_templates(&sim).len(), 2);
}

/// A template on shared storage reaches every node, but a full clone to a `storage` that
/// is not shared does not ("can't clone to non-shared storage 'local-lvm'"): such clones
/// stay on the template's node, whatever the failure domain.
#[tokio::test]
async fn a_full_clone_to_node_local_storage_stays_on_the_templates_node() {
    let mut config = pve1_smallest();
    config.storages.push(pve_sim::StorageConfig {
        id: "shared".into(),
        kind: pve_sim::StorageType::Dir,
        content: vec!["images".into()],
        shared: true,
        ..pve_sim::StorageConfig::default()
    });
    if let Some(t) = config.vms.iter_mut().find(|v| v.vmid == 9000) {
        t.config.insert(
            "scsi0".into(),
            "shared:9000/base-9000-disk-0.raw,size=10G".into(),
        );
        t.config.insert(
            "ide2".into(),
            "shared:9000/vm-9000-cloudinit.qcow2,media=cdrom".into(),
        );
    }
    let sim = sim_with(config).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let cluster = json!({"allowedNodes": ["pve1", "pve2"],
                         "controlPlaneEndpoint": {"host": "10.10.0.5", "port": 6443}});
    let spec = json!({"sourceNode": "pve1", "templateID": 9000, "full": true, "storage": "local-lvm",
                      "checks": {"skipCloudInitStatus": true}});
    let mut req = request(&sim, "w", "c1", spec.clone(), cluster.clone());
    req.bootstrap = Some(bootstrap());
    req.failure_domain = Some("pve2".into());
    let (status, _) = drive_create(&plugin, &mut req).await.unwrap();
    let vm = sim.state().vm(vmid_of(&status)).unwrap();
    assert_eq!(vm["node"], "pve1");
    assert!(
        cfg(&vm, "scsi0").starts_with("local-lvm:"),
        "{}",
        cfg(&vm, "scsi0")
    );
    // on shared storage, the failure domain is honoured
    let mut shared = spec;
    shared["storage"] = json!("shared");
    let mut req = request(&sim, "v", "c1", shared, cluster);
    req.bootstrap = Some(bootstrap());
    req.failure_domain = Some("pve2".into());
    let (status, _) = drive_create(&plugin, &mut req).await.unwrap();
    assert_eq!(sim.state().vm(vmid_of(&status)).unwrap()["node"], "pve2");
}

/// Two clones racing for one VMID can both be accepted; the loser's task fails with
/// "unable to create VM N: config file already exists". The machine clones again to
/// another VMID; the winner's VM is left as it is.
#[tokio::test]
async fn a_clone_that_loses_the_vmid_race_in_its_task_clones_again_elsewhere() {
    let sim = sim_with(Config::fast()).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    sim.state().set_faults(Faults {
        rules: vec![FaultRule {
            endpoint: "POST /nodes/{node}/qemu/{vmid}/clone".into(),
            kind: pve_sim::FaultKind::VmidRace,
            max_count: Some(1),
            ..FaultRule::default()
        }],
        ..Faults::default()
    });
    let spec = json!({"sourceNode": "pve1", "templateID": 9000, "vmIDRange": {"start": 600, "end": 601},
                      "checks": {"skipCloudInitStatus": true}});
    let mut req = request(&sim, "m1", "c1", spec, dhcp_cluster());
    req.bootstrap = Some(bootstrap());
    let first = create_until_cloning(&plugin, &mut req).await;
    let lost = vmid_of(&first);
    let winner = sim.state().vm(lost).expect("the other client's VM");
    let s = plugin.create_machine(&req).await.unwrap().unwrap();
    assert!(
        s.progress.message.contains(&format!(
            "unable to create VM {lost}: config file already exists"
        )),
        "{}",
        s.progress.message
    );
    req.state = Some(s.progress.state.clone());
    let (status, _) = drive_create(&plugin, &mut req).await.unwrap();
    let vmid = vmid_of(&status);
    assert_ne!(vmid, lost);
    assert!((600..=601).contains(&vmid));
    let ours = sim.state().vm(vmid).unwrap();
    assert!(cfg(&ours, "description").contains("hyperplug.machine-uid=uid-m1"));
    let after = sim.state().vm(lost).expect("the winner's VM stays");
    assert_eq!(after["digest"], winner["digest"], "and is not touched");
    assert_eq!(non_templates(&sim).len(), 2, "one VM each");
    assert_eq!(
        sim.state().counters()["POST /nodes/{node}/qemu/{vmid}/clone"],
        2
    );
    assert_eq!(sim.state().fault_hits()[0]["fired"], 1);
    drive_delete(&plugin, &mut req).await.unwrap();
    assert!(
        sim.state().vm(lost).is_some(),
        "delete leaves the other VM alone"
    );
}

/// PVE's lock timeouts ("can't lock file '/var/lock/qemu-server/lock-N.conf' - got
/// timeout") pass: in a config write (synchronous), in the clone, start, stop and destroy
/// tasks. Each is retried, none is terminal, and create and delete converge.
#[tokio::test]
async fn lock_timeouts_are_retried_until_create_and_delete_converge() {
    let sim = sim_with(Config::fast()).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let lock_timeout = |endpoint: &str, max: u64| FaultRule {
        endpoint: endpoint.into(),
        kind: pve_sim::FaultKind::LockTimeout,
        max_count: Some(max),
        ..FaultRule::default()
    };
    sim.state().set_faults(Faults {
        rules: vec![
            lock_timeout("POST /nodes/{node}/qemu/{vmid}/clone", 1),
            lock_timeout("PUT /nodes/{node}/qemu/{vmid}/config", 2),
            lock_timeout("POST /nodes/{node}/qemu/{vmid}/status/start", 1),
            lock_timeout("POST /nodes/{node}/qemu/{vmid}/status/stop", 1),
            lock_timeout("DELETE /nodes/{node}/qemu/{vmid}", 1),
        ],
        ..Faults::default()
    });
    let spec =
        json!({"sourceNode": "pve1", "templateID": 9000, "checks": {"skipCloudInitStatus": true}});
    let mut req = request(&sim, "m1", "c1", spec, dhcp_cluster());
    req.bootstrap = Some(bootstrap());
    let (status, transients) = drive_create_through_transients(&plugin, &mut req, 100).await;
    assert!(status.ready);
    assert_eq!(transients.len(), 2, "the two config writes: {transients:?}");
    for t in &transients {
        assert!(t.contains("got timeout"), "{t}");
    }
    let vmid = vmid_of(&status);
    drive_delete(&plugin, &mut req).await.unwrap();
    assert!(sim.state().vm(vmid).is_none());
    assert!(non_templates(&sim).is_empty());
    let hits = sim.state().fault_hits();
    for (i, rule) in hits.as_array().unwrap().iter().enumerate() {
        assert!(
            rule["fired"].as_u64().unwrap() >= 1,
            "rule {i} never fired: {hits}"
        );
    }
}

/// A VM migrated by someone else (PVE 9.2's load balancer, an admin) is followed to its
/// node by its marker: never reported missing, never cloned again, deleted where it is.
#[tokio::test]
async fn a_vm_that_migrated_is_followed_to_its_new_node() {
    let sim = sim_with(Config::fast()).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let spec =
        json!({"sourceNode": "pve1", "templateID": 9000, "checks": {"skipCloudInitStatus": true}});
    let cluster = json!({"allowedNodes": ["pve1", "pve2", "pve3"],
                         "controlPlaneEndpoint": {"host": "10.10.0.5", "port": 6443}});
    let mut a = request(&sim, "a", "c1", spec.clone(), cluster.clone());
    a.bootstrap = Some(bootstrap());
    let (status, _) = drive_create(&plugin, &mut a).await.unwrap();
    let vmid = vmid_of(&status);
    sim.state().migrate_vm(vmid, "pve2").unwrap();

    let d = plugin.describe_machine(&a).await.unwrap().unwrap();
    assert!(d.ready, "{}", d.progress.message);
    assert!(d.drift.is_none(), "{:?}", d.drift);
    let details: BTreeMap<_, _> = d.details.iter().cloned().collect();
    assert_eq!(details.get("node").map(String::as_str), Some("pve2"));
    assert_eq!(d.failure_domain.as_deref(), Some("pve2"));
    assert_eq!(d.provider_id, status.provider_id);
    // create with the state from before the move: the same VM, no clone
    let (again, _) = drive_create(&plugin, &mut a).await.unwrap();
    assert_eq!(vmid_of(&again), vmid);

    // Moved mid-create (cloned, configured, stopped, waiting for bootstrap data)
    let mut b = request(&sim, "b", "c1", spec, cluster);
    let waiting = loop {
        let s = plugin.create_machine(&b).await.unwrap().unwrap();
        b.state = Some(s.progress.state.clone());
        if s.needs_bootstrap {
            break s;
        }
    };
    let b_vmid = vmid_of(&waiting);
    sim.state().migrate_vm(b_vmid, "pve3").unwrap();
    b.bootstrap = Some(bootstrap());
    let (status, _) = drive_create(&plugin, &mut b).await.unwrap();
    assert_eq!(vmid_of(&status), b_vmid);
    assert_eq!(status.failure_domain.as_deref(), Some("pve3"));
    let vm = sim.state().vm(b_vmid).unwrap();
    assert_eq!(
        (&vm["node"], &vm["status"]),
        (&json!("pve3"), &json!("running"))
    );
    assert_eq!(
        sim.state().counters()["POST /nodes/{node}/qemu/{vmid}/clone"],
        2,
        "no VM was cloned twice"
    );

    // Moved again, then deleted with the state from before: found and destroyed.
    sim.state().migrate_vm(b_vmid, "pve1").unwrap();
    drive_delete(&plugin, &mut b).await.unwrap();
    drive_delete(&plugin, &mut a).await.unwrap();
    assert!(non_templates(&sim).is_empty());
    assert!(iso_volumes(&sim).is_empty());
}

/// A VM moved between its NoCloud ISO's upload and the ISO's attachment gets the ISO
/// again on its new node; the one on the node it left (it holds the bootstrap data) is
/// removed there, and its removal is tried again when PVE fails it. Found by the chaos
/// run (an ISO left behind when that removal's task failed).
#[tokio::test]
async fn an_iso_left_on_the_node_a_vm_moved_from_is_removed_even_when_removing_it_fails_once() {
    let mut config = Config::fast();
    // The upload takes long enough for a migration to land between upload and attach.
    config.task_ms.insert("imgcopy".into(), 1_000);
    let sim = sim_with(config).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let spec =
        json!({"sourceNode": "pve1", "templateID": 9000, "checks": {"skipCloudInitStatus": true}});
    let cluster = json!({"allowedNodes": ["pve1", "pve2"],
                         "controlPlaneEndpoint": {"host": "10.10.0.5", "port": 6443}});
    let mut req = request(&sim, "m", "c1", spec, cluster);
    req.bootstrap = Some(bootstrap());
    let uploading = loop {
        let s = plugin.create_machine(&req).await.unwrap().unwrap();
        req.state = Some(s.progress.state.clone());
        if s.progress.message == "uploading the NoCloud ISO" {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let vmid = vmid_of(&uploading);
    sim.state().migrate_vm(vmid, "pve2").unwrap();
    sim.state().set_faults(Faults {
        rules: vec![FaultRule {
            name: Some("the first ISO removal on pve1 fails".into()),
            endpoint: "DELETE /nodes/pve1/storage/**".into(),
            kind: pve_sim::FaultKind::TaskFailure,
            max_count: Some(1),
            ..FaultRule::default()
        }],
        ..Faults::default()
    });
    let (status, _) = drive_create(&plugin, &mut req).await.unwrap();
    assert_eq!(status.failure_domain.as_deref(), Some("pve2"));
    assert_eq!(
        sim.state().fault_hits()[0]["fired"],
        1,
        "the removal failed once"
    );
    describe_until_the_iso_is_gone(&plugin, &mut req, &sim).await;
    assert_eq!(
        iso_volumes(&sim),
        Vec::<Value>::new(),
        "no NoCloud ISO is left on either node once the VM runs"
    );
    drive_delete(&plugin, &mut req).await.unwrap();
    assert!(non_templates(&sim).is_empty());
}

/// Creates until the call that hands the NoCloud ISO to PVE; `lost` loses that call's
/// reply after PVE carried it out (595), as the chaos run's faults do.
async fn create_until_the_upload(
    sim: &pve_sim::RunningSim,
    plugin: &Plugin,
    lost: bool,
) -> MachineRequest {
    let spec =
        json!({"sourceNode": "pve1", "templateID": 9000, "checks": {"skipCloudInitStatus": true}});
    let mut req = request(sim, "m", "c1", spec, dhcp_cluster());
    req.bootstrap = Some(bootstrap());
    if lost {
        sim.state().set_faults(Faults {
            rules: vec![FaultRule {
                endpoint: "POST /nodes/{node}/storage/{storage}/upload".into(),
                status: 595,
                handled: true,
                max_count: Some(1),
                ..FaultRule::default()
            }],
            ..Faults::default()
        });
    }
    for _ in 0..40 {
        match plugin.create_machine(&req).await.unwrap() {
            Ok(s) => {
                req.state = Some(s.progress.state.clone());
                if s.progress.message == "uploading the NoCloud ISO" {
                    return req;
                }
            }
            // The lost reply: the host keeps the state from before the call.
            Err(e) if lost && format!("{e:?}").contains("uploading the NoCloud ISO") => {
                return req;
            }
            Err(e) => panic!("create failed: {e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no upload in 40 calls");
}

/// A machine deleted while its ISO is being uploaded: the ISO is written when the upload's
/// task ends, so the delete follows that task before it removes the ISO, and leaves none.
#[tokio::test]
async fn a_machine_deleted_while_its_iso_uploads_leaves_no_iso() {
    let mut config = Config::fast();
    config.task_ms.insert("imgcopy".into(), 1_000);
    let sim = sim_with(config).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let mut req = create_until_the_upload(&sim, &plugin, false).await;
    drive_delete(&plugin, &mut req).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert!(non_templates(&sim).is_empty());
    assert_eq!(iso_volumes(&sim), Vec::<Value>::new(), "no ISO is left");
}

/// An upload whose reply was lost after PVE carried it out leaves no record in the
/// plugin's state; a machine deleted right then still has its ISO removed.
#[tokio::test]
async fn a_machine_deleted_after_its_uploads_reply_was_lost_leaves_no_iso() {
    let sim = sim_with(Config::fast()).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let mut req = create_until_the_upload(&sim, &plugin, true).await;
    assert_eq!(
        sim.state().fault_hits()[0]["fired"],
        1,
        "the reply was lost"
    );
    // The upload's task has ended by now (fast tasks): its ISO is in storage.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(iso_volumes(&sim).len(), 1, "PVE wrote the ISO");
    drive_delete(&plugin, &mut req).await.unwrap();
    assert!(non_templates(&sim).is_empty());
    assert_eq!(iso_volumes(&sim), Vec::<Value>::new(), "no ISO is left");
}

/// An upload whose reply was lost wrote its ISO on the VM's node, and the VM moved before
/// the next call: no state records that ISO, and the next upload goes to the new node. The
/// move is seen, and the ISO of this machine's name on the other nodes is removed.
#[tokio::test]
async fn an_iso_uploaded_with_a_lost_reply_before_a_move_is_not_left_behind() {
    let sim = sim_with(Config::fast()).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let mut req = create_until_the_upload(&sim, &plugin, true).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(iso_volumes(&sim).len(), 1, "PVE wrote the ISO");
    let state: Value = serde_json::from_str(req.state.as_deref().unwrap()).unwrap();
    let vmid = state["vmid"].as_u64().unwrap() as u32;
    sim.state().migrate_vm(vmid, "pve2").unwrap();
    let (status, _) = drive_create(&plugin, &mut req).await.unwrap();
    assert_eq!(status.failure_domain.as_deref(), Some("pve2"));
    describe_until_the_iso_is_gone(&plugin, &mut req, &sim).await;
    assert_eq!(
        iso_volumes(&sim),
        Vec::<Value>::new(),
        "no NoCloud ISO is left on either node once the VM runs"
    );
}
