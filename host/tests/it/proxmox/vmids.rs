//! VMIDs: machines created at once never share one, from a range or from PVE's `nextid`,
//! and a clone that loses its VMID to another client's clones again elsewhere.
use std::collections::{BTreeMap, BTreeSet};

use hyperplug_runtime::bindings::machine::MachineStatus;
use hyperplug_runtime::{Limits, Plugin};
use pve_sim::{Config, FaultRule, Faults};
use serde_json::{Value, json};

use super::{
    bootstrap, cfg, create_until_cloning, dhcp_cluster, drive_create, drive_delete, non_templates,
    request, vmid_of,
};
use crate::support::{load, sim_with};

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
