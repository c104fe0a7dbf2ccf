//! The clone: a state lost while it runs adopts the VM instead of cloning again, a failed
//! clone task is retried, and a VM gone behind the plugin's back is drift.
use hyperplug_runtime::Limits;
use hyperplug_runtime::bindings::machine::{Drift, MachineRequest};
use pve_sim::{Config, Faults};
use serde_json::{Value, json};

use super::{
    bootstrap, create_until_cloning, dhcp_cluster, drive_create, drive_delete, non_templates,
    request, vmid_of,
};
use crate::support::{load, sim_with};

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
