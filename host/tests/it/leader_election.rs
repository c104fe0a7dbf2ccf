//! Two replicas with `--leader-elect`: one holds the Lease, the other waits, and takes
//! over when the leader dies.
use std::process::Child;
use std::time::Duration;

use crate::support::world::World;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

fn replica(world: &World, identity: &str) -> Child {
    world
        .hyperplug_run(&["proxmox"])
        .arg("--leader-elect")
        .args(["--leader-election-namespace", &world.ns])
        .env("HOSTNAME", identity)
        .spawn()
        .expect("start a replica")
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("hyperplug-leader")
        .await
        .ok()
        .flatten()?
        .spec?
        .holder_identity
}

#[tokio::test]
async fn a_standby_replica_takes_over_when_the_leader_dies() {
    let world = World::start_with(pve_sim::Config::fast(), false).await;
    let leases: Api<Lease> = Api::namespaced(world.plane.client(), &world.ns);
    let mut a = replica(&world, "replica-a");
    let mut first = None;
    for _ in 0..300 {
        first = holder(&leases).await;
        if first.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(first.as_deref(), Some("replica-a"));
    let mut b = replica(&world, "replica-b");
    // The standby does not take a live lease.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(holder(&leases).await.as_deref(), Some("replica-a"));
    a.kill().unwrap();
    a.wait().unwrap();
    let mut taken = false;
    for _ in 0..600 {
        if holder(&leases).await.as_deref() == Some("replica-b") {
            taken = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.kill().ok();
    b.wait().ok();
    assert!(taken, "replica-b never took over the lease");
}
