//! A plugin upgraded in flight. Twenty machines provision under the Proxmox plugin's
//! previous release (its WIT 0.2 build, whose states carry no layout version), pulled
//! from a registry by tag; mid-way the manager is replaced by one running the current
//! release, pulled by its new digest, as a Deployment rollout does. Every machine
//! finishes from the state the old release wrote (one VM each: nothing cloned twice),
//! the new release writes its own layout, and deleting them all leaves no VM and no
//! address claim.
use std::collections::BTreeSet;
use std::process::Child;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams};
use kube_world::OciRegistry;

use crate::support::plugin_path;
use crate::support::world::World;

const MACHINES: usize = 20;

fn fixture() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/cluster-and-machine.yaml"
    ))
    .unwrap()
    // Room for twenty static addresses.
    .replace("192.168.1.220-192.168.1.229", "192.168.1.100-192.168.1.199")
}

/// The fixture's cluster, and its machine repeated as `m-0` … `m-19`.
async fn apply_machines(world: &World) {
    let text = fixture();
    let docs: Vec<&str> = text.split("---\n").collect();
    assert_eq!(
        docs.len(),
        5,
        "cluster, infra cluster, secret, machine, infra machine"
    );
    world.apply(&docs[..2].join("---\n")).await;
    let per_machine = docs[2..4].join("---\n");
    let all: Vec<String> = (0..MACHINES)
        .map(|i| per_machine.replace("m-0", &format!("m-{i}")))
        .collect();
    world.apply(&all.join("---\n")).await;
    let machines = world.api("cluster.x-k8s.io/v1beta2", "Machine").await;
    let mut infra = Vec::new();
    for i in 0..MACHINES {
        let uid = machines
            .get(&format!("m-{i}"))
            .await
            .unwrap()
            .uid()
            .unwrap();
        infra.push(
            docs[4]
                .replace("m-0", &format!("m-{i}"))
                .replace("MACHINE_UID", &uid),
        );
    }
    world.apply(&infra.join("---\n")).await;
}

/// Every machine's `status.pluginState`, where it has one.
async fn plugin_states(pms: &kube::Api<kube::api::DynamicObject>) -> Vec<String> {
    pms.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|o| o.data["status"]["pluginState"].as_str().map(String::from))
        .collect()
}

fn provisioned(o: &kube::api::DynamicObject) -> bool {
    o.data["status"]["initialization"]["provisioned"] == true
}

fn vms(world: &World) -> Vec<serde_json::Value> {
    world
        .sim
        .state()
        .vms()
        .into_iter()
        .filter(|vm| vm["config"]["template"] != 1 && vm["config"]["template"] != "1")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_machines_mid_provisioning_finish_under_the_upgraded_plugin_and_leave_nothing() {
    // PVE's task durations: clones queue on the node, so the run is long enough to
    // upgrade in the middle of it.
    let world = World::start_with(pve_sim::Config::default(), false).await;
    world.plane.start_ipam().await.expect("IPAM provider");
    let registry = OciRegistry::start().unwrap();
    let old = registry
        .push(&plugin_path("proxmox-wit-0.2"), "hyperplug/proxmox:0.2.0")
        .unwrap();
    let new = registry
        .push(&plugin_path("proxmox"), "hyperplug/proxmox:0.3.0")
        .unwrap();
    assert_ne!(old, new);
    let cache = tempfile::tempdir().unwrap();
    let run = |reference: String| -> Child {
        world
            .hyperplug_run(&[])
            .arg("--plugin")
            .arg(reference)
            .args(["--plugin-plain-http", &registry.host()])
            .arg("--plugin-oci-cache")
            .arg(cache.path())
            .args(["--resync-seconds", "5"])
            .spawn()
            .expect("start hyperplug run")
    };
    let log = world.plane.dir().join("hyperplug.log");

    apply_machines(&world).await;
    let mut host = run(format!("oci://{}/hyperplug/proxmox:0.2.0", registry.host()));
    let pms = world
        .api("infrastructure.cluster.x-k8s.io/v1alpha1", "ProxmoxMachine")
        .await;
    // Mid-way: some machines done, several with a VM on its way.
    let deadline = Instant::now() + Duration::from_secs(300);
    let (mut done, mut in_flight) = (0, 0);
    while !(done >= 1 && in_flight >= 5) {
        assert!(
            Instant::now() < deadline,
            "never mid-way under the old release ({done} done, {in_flight} in flight); see {}",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        let list = pms.list(&ListParams::default()).await.unwrap().items;
        done = list.iter().filter(|o| provisioned(o)).count();
        in_flight = list
            .iter()
            .filter(|o| !provisioned(o) && o.data["status"]["pluginState"].is_string())
            .count();
    }
    host.kill().expect("stop the old release");
    host.wait().unwrap();
    let states_of_old = plugin_states(&pms).await;
    assert!(
        states_of_old.iter().all(|s| !s.contains("stateVersion")),
        "the old release writes unversioned states: {states_of_old:?}"
    );
    println!("upgrading with {done} of {MACHINES} machines provisioned and {in_flight} in flight");

    // The rollout: the new release, named by its digest.
    let mut host = run(format!("oci://{}/hyperplug/proxmox@{new}", registry.host()));
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let list = pms.list(&ListParams::default()).await.unwrap().items;
        let stuck: Vec<String> = list
            .iter()
            .filter(|o| !provisioned(o))
            .map(|o| format!("{}: {}", o.name_any(), o.data["status"]["conditions"]))
            .collect();
        if stuck.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not provisioned after the upgrade: {stuck:#?}; see {}",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let states = plugin_states(&pms).await;
    assert!(
        states.iter().any(|s| s.contains(r#""stateVersion":2"#)),
        "the new release writes its layout: {states:?}"
    );
    let vms_now = vms(&world);
    let names: BTreeSet<String> = vms_now
        .iter()
        .map(|vm| {
            vm["config"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(
        (vms_now.len(), names.len()),
        (MACHINES, MACHINES),
        "one VM per machine: {names:?}"
    );

    for i in 0..MACHINES {
        pms.delete(&format!("m-{i}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    for i in 0..MACHINES {
        world.wait_gone(&pms, &format!("m-{i}")).await;
    }
    host.kill().ok();
    host.wait().ok();
    assert_eq!(vms(&world), Vec::<serde_json::Value>::new(), "no VM left");
    // Claims go with their machine, through the garbage collector (owner references).
    let claims = world
        .api("ipam.cluster.x-k8s.io/v1beta2", "IPAddressClaim")
        .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left: Vec<String> = claims
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(|c| c.name_any())
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "address claims left: {left:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
