//! The host killed with SIGKILL between the clone and the save of the plugin's state,
//! then restarted: exactly one VM, adopted.
use std::process::Child;
use std::time::Duration;

use crate::support::world::World;
use kube::api::Patch;
use serde_json::json;

/// The host as its own process, so it can be killed.
fn start_host(world: &World) -> Child {
    world
        .hyperplug_run(&["proxmox"])
        .args(["--resync-seconds", "5"])
        .spawn()
        .expect("start hyperplug run")
}

#[tokio::test]
async fn a_host_killed_between_clone_and_state_save_adopts_the_vm_after_restart() {
    let mut config = pve_sim::Config::fast();
    // A slow clone leaves a wide window between the clone request and its end.
    config.task_ms.insert("qmclone".into(), 4_000);
    let world = World::start_with(config, false).await;
    world.plane.start_ipam().await.expect("IPAM provider");
    let yaml = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/cluster-and-machine.yaml"
    ))
    .unwrap();
    world.apply_owned_by_machine(&yaml, "m-0").await;

    let mut host = start_host(&world);
    // Wait for the clone to start in the simulator, then kill the host at once.
    let mut cloned = false;
    for _ in 0..3_000 {
        let clones = world
            .sim
            .state()
            .counters()
            .get("POST /nodes/{node}/qemu/{vmid}/clone")
            .copied()
            .unwrap_or(0);
        if clones > 0 {
            cloned = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let log = world.plane.dir().join("hyperplug.log");
    assert!(cloned, "the host never cloned; see {}", log.display());
    host.kill().expect("SIGKILL");
    host.wait().unwrap();
    // Whatever the host managed to save, the worst case is that nothing was: drop it.
    let pms = world
        .api("infrastructure.cluster.x-k8s.io/v1alpha1", "ProxmoxMachine")
        .await;
    let lost = json!({"status": {"pluginState": null, "details": null, "phase": null}});
    pms.patch_status("m-0", &Default::default(), &Patch::Merge(lost))
        .await
        .unwrap();

    let mut host = start_host(&world);
    let pm = world
        .wait_for(&pms, "m-0", "provisioned", |o| {
            o.data["status"]["initialization"]["provisioned"] == true
        })
        .await;
    host.kill().ok();
    host.wait().ok();
    let vms: Vec<_> = world
        .sim
        .state()
        .vms()
        .into_iter()
        .filter(|vm| vm["config"]["template"] != 1 && vm["config"]["template"] != "1")
        .collect();
    assert_eq!(vms.len(), 1, "exactly one VM: {vms:?}");
    assert_eq!(
        world
            .sim
            .state()
            .counters()
            .get("POST /nodes/{node}/qemu/{vmid}/clone")
            .copied(),
        Some(1),
        "cloned once"
    );
    assert_eq!(
        pm.data["status"]["details"]["vmid"],
        vms[0]["vmid"].to_string().trim_matches('"')
    );
}
