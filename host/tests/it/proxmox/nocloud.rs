//! The NoCloud ISO that seeds a guest: Ignition as its user-data, and no ISO left behind
//! when the VM moves, its removal fails, or the machine is deleted mid-upload.
use hyperplug_runtime::bindings::machine::{BootstrapData, MachineRequest};
use hyperplug_runtime::{Limits, Plugin};
use pve_sim::{Config, FaultRule, Faults};
use serde_json::{Value, json};

use super::{
    bootstrap, cfg, describe_until_the_iso_is_gone, dhcp_cluster, drive_create, drive_delete,
    iso_volumes, non_templates, request, vmid_of,
};
use crate::support::drive::{NoAddresses, create_until, pacing};
use crate::support::{load, sim_with, until};

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
    let (uploading, _) = create_until(
        &plugin,
        &mut req,
        &mut NoAddresses(Some(bootstrap())),
        &pacing(50),
        |s| s.progress.message == UPLOADING,
    )
    .await
    .unwrap_or_else(|(_, e)| panic!("{e}"));
    assert_eq!(
        uploading.progress.message, UPLOADING,
        "no upload before ready"
    );
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
    let upload = create_until(
        plugin,
        &mut req,
        &mut NoAddresses(Some(bootstrap())),
        &pacing(50),
        |s| s.progress.message == UPLOADING,
    )
    .await;
    match upload {
        Ok((s, _)) => assert_eq!(s.progress.message, UPLOADING, "no upload before ready"),
        // The lost reply: the host keeps the state from before the call (and so does
        // the drive).
        Err((drive, _)) if lost && format!("{:?}", drive.failure).contains(UPLOADING) => {}
        Err((_, e)) => panic!("create failed: {e}"),
    }
    req
}

/// What the plugin says of the call that hands the NoCloud ISO to PVE.
const UPLOADING: &str = "uploading the NoCloud ISO";

/// Until every ISO upload PVE took on has ended (the ISO is written when its task
/// ends), at least one.
async fn uploads_ended(sim: &pve_sim::RunningSim) {
    until("the ISO upload's task ends", || {
        let tasks = sim.state().tasks();
        let uploads: Vec<&Value> = tasks.iter().filter(|t| t["type"] == "imgcopy").collect();
        !uploads.is_empty() && uploads.iter().all(|t| t["status"] == "stopped")
    })
    .await;
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
    uploads_ended(&sim).await;
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
    // Once the upload's task has ended, its ISO is in storage.
    uploads_ended(&sim).await;
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
    uploads_ended(&sim).await;
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
