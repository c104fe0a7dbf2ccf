//! A machine's whole life on PVE: cloned, shaped field by field, seeded with its NoCloud
//! ISO, booted, reported and deleted, one step awaited at a time; and with PVE's own
//! task durations, every wait a requeue.
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;

use hyperplug_conformance::drive::{Answers, Drive};
use hyperplug_runtime::Limits;
use hyperplug_runtime::bindings::machine::{AddressType, AllocatedAddress, BootstrapData};
use pve_sim::Config;
use serde_json::{Value, json};

use super::{
    CLOUD_CONFIG, bootstrap, cfg, describe_until_the_iso_is_gone, drive_delete, iso_volumes,
    non_templates, props, request, vmid_of,
};
use crate::support::drive::{create_until, create_until_ready, pacing};
use crate::support::{load, seed_cluster, sim_with};

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
    let (without_address, drive) = create_until(
        &plugin,
        &mut req,
        &mut AddressByHand(None),
        &pacing(50),
        |s| {
            let wanted: Vec<(String, String)> = s
                .address_requests
                .iter()
                .map(|r| (r.device.clone(), r.pool.label()))
                .collect();
            assert_eq!(
                wanted,
                [("net0-00-inet".to_string(), "v4-icip".to_string())]
            );
            s.progress.phase == "WaitingForAddresses"
        },
    )
    .await
    .unwrap_or_else(|(_, e)| panic!("{e}"));
    seen(&mut phases, drive);
    assert!(phases.len() < 10 && !without_address.ready, "{phases:?}");
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
    let (waiting, drive) = create_until(
        &plugin,
        &mut req,
        &mut AddressByHand(None),
        &pacing(50),
        |s| s.needs_bootstrap,
    )
    .await
    .unwrap_or_else(|(_, e)| panic!("{e}"));
    seen(&mut phases, drive);
    assert!(phases.len() < 10 && !waiting.ready, "{phases:?}");
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
    let (status, drive) = create_until(
        &plugin,
        &mut req,
        &mut AddressByHand(Some(bootstrap())),
        &pacing(50),
        |_| {
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
            false
        },
    )
    .await
    .unwrap_or_else(|(_, e)| panic!("{e}"));
    seen(&mut phases, drive);
    assert!(phases.len() < 20 && status.ready, "{phases:?}");
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

/// The address is handed over by the test itself, when it chooses (`req.addresses`): the
/// drive answers no address request, as a host whose claim is not fulfilled yet; the
/// bootstrap data when asked, if there is any.
struct AddressByHand(Option<BootstrapData>);

impl Answers for AddressByHand {
    fn pending(&mut self, _device: &str, _pool: &str) -> bool {
        true
    }

    fn address(&mut self, device: &str, pool: &str) -> Result<AllocatedAddress, String> {
        Err(format!("{device} from {pool} is handed over by the test"))
    }

    fn bootstrap(&mut self) -> Result<BootstrapData, String> {
        self.0.clone().ok_or_else(|| "no bootstrap data yet".into())
    }
}

/// Adds the phases a drive went through to those seen before (a phase that goes on
/// from one drive to the next counted once).
fn seen(phases: &mut Vec<String>, drive: Drive) {
    for p in drive.phases {
        if phases.last() != Some(&p) {
            phases.push(p);
        }
    }
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
