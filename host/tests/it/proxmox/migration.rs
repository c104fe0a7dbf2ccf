//! VMs moved by someone else (PVE 9.2's load balancer, an administrator): followed to
//! their node, and never taken for gone while they move during a delete.
use std::collections::BTreeMap;

use hyperplug_runtime::Limits;
use pve_sim::{Config, FaultRule, Faults};
use serde_json::json;

use super::{
    bootstrap, dhcp_cluster, drive_create, drive_delete, iso_volumes, non_templates, request,
    vmid_of,
};
use crate::support::drive::{NoAddresses, create_until, pacing};
use crate::support::{load, sim_with};

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
    let (waiting, _) = create_until(&plugin, &mut b, &mut NoAddresses(None), &pacing(50), |s| {
        s.needs_bootstrap
    })
    .await
    .unwrap_or_else(|(_, e)| panic!("{e}"));
    assert!(waiting.needs_bootstrap, "ready without bootstrap data");
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
