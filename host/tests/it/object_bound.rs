//! Cached objects keep no oversized tenant fields (issue 40, item 6): 100 ProxmoxMachines
//! whose `spec.description` is 1 MB each get `Ready=False`, reason `ObjectTooLarge`,
//! naming the bound and its flag, with no plugin call; the manager stays under its
//! memory goal while they are created and when it lists them all again after a restart;
//! the one shrunk back provisions. `hyperplug run` runs as a process; its peak resident
//! memory is read from /proc and printed as a table.
use futures::StreamExt;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::controllers::{PROXMOX_SPEC, machine, proxmox_cluster, warnings_by_object};
use crate::support::manager::{Manager, rss_table};
use crate::support::world::{World, condition};

const V1ALPHA1: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
/// The stored version: listed without a conversion review per page.
const V1ALPHA2: &str = "infrastructure.cluster.x-k8s.io/v1alpha2";
/// Objects over the bound (the first one with its Machine and Cluster). 100 MB of specs
/// in all: 200 took minutes of the API server's and etcd's time on 2 cores, for no more
/// of a point (the manager caches none of it).
const OBJECTS: usize = 100;
/// Creates in flight.
const IN_FLIGHT: usize = 8;
/// Each one's `spec.description`: about the most a v1alpha1 write can carry (its
/// conversion's output is at most 1 MiB, `--plugin-output-kib`).
const BIG: usize = 1_000_000;

fn start_manager(world: &World) -> Manager {
    let child = world
        .hyperplug_run(&["proxmox"])
        .args(["--resync-seconds", "5"])
        .spawn()
        .expect("start hyperplug run");
    Manager(child)
}

/// `PROXMOX_SPEC` with a description of `bytes` bytes, as JSON.
fn spec(bytes: usize) -> serde_json::Value {
    let mut spec: serde_json::Value = serde_yaml::from_str(PROXMOX_SPEC).unwrap();
    spec["description"] = json!("d".repeat(bytes));
    spec
}

/// Waits until `count` objects have a Warning event `reason`.
async fn wait_warned(world: &World, reason: &str, count: usize) {
    let warned = async || warnings_by_object(world, reason).await.len();
    for _ in 0..600 {
        if warned().await >= count {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    panic!("{} of {count} objects warned {reason}", warned().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_over_the_bound_are_refused_and_leave_the_manager_under_its_memory_goal() {
    let world = World::start_with(pve_sim::Config::fast(), false).await;
    let pms = world.api(V1ALPHA1, "ProxmoxMachine").await;
    let stored = world.api(V1ALPHA2, "ProxmoxMachine").await;
    let mut rows: Vec<(&str, u64, String)> = Vec::new();
    world
        .apply(&proxmox_cluster("demo", Some("{name: pve-credentials}")))
        .await;
    let manager = start_manager(&world);

    // One with its Machine (to provision once shrunk), the others on their own: they
    // are refused before anything else is read.
    let big = serde_json::to_string(&spec(BIG)).unwrap();
    machine(&world, "demo", "ProxmoxMachine", "big-0", "{}", &big).await;
    let created: Vec<_> = futures::stream::iter(1..OBJECTS)
        .map(|i| {
            let pms = pms.clone();
            async move {
                let obj: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": V1ALPHA1,
                    "kind": "ProxmoxMachine",
                    "metadata": {"name": format!("big-{i}")},
                    "spec": spec(BIG),
                }))
                .unwrap();
                pms.create(&PostParams::default(), &obj).await
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    for c in created {
        c.expect("create");
    }
    wait_warned(&world, "ObjectTooLarge", OBJECTS).await;
    let refused = world
        .wait_for(&pms, "big-7", "ObjectTooLarge", |o| {
            condition(o, "Ready").is_some_and(|c| c["reason"] == "ObjectTooLarge")
        })
        .await;
    let ready = condition(&refused, "Ready").unwrap();
    let message = ready["message"].as_str().unwrap().to_string();
    assert_eq!(ready["status"], "False");
    assert!(
        message.contains("over the bound of 64 KiB per object (--object-max-kib)")
            && message.contains("without spec"),
        "{message}"
    );
    rows.push((
        "100 ProxmoxMachines of 1 MB, created while it runs",
        manager.peak_rss_mib(),
        message,
    ));
    drop(manager);

    // Restarted, it lists all 100 again (in pages); the one shrunk back reconciles as
    // any other.
    let manager = start_manager(&world);
    let small = json!({"spec": {"description": "back under the bound"}});
    pms.patch("big-0", &PatchParams::default(), &Patch::Merge(&small))
        .await
        .unwrap();
    world
        .wait_for(&pms, "big-0", "provisioned once shrunk", |o| {
            o.data["status"]["initialization"]["provisioned"] == true
        })
        .await;
    rows.push((
        "... after a restart (one shrunk back, provisioned)",
        manager.peak_rss_mib(),
        "the others stay ObjectTooLarge".into(),
    ));
    // No other machine reached the plugin: one clone in all.
    assert_eq!(
        world.requests("POST /nodes/{node}/qemu/{vmid}/clone"),
        1,
        "only the machine under the bound is cloned"
    );
    let still = stored.get("big-7").await.unwrap();
    assert_eq!(
        condition(&still, "Ready").unwrap()["reason"],
        "ObjectTooLarge"
    );

    rss_table(
        "Peak RSS of `hyperplug run` with objects over --object-max-kib",
        "objects",
        &rows,
    );
}
