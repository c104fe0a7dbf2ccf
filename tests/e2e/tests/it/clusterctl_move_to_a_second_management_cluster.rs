//! `clusterctl move` of a provisioned quickstart cluster to a second management cluster
//! (made by `clusterctl init` too, with its own hyperplug): nothing is created or
//! destroyed in pve-sim, the moved objects reconcile on the target (new UIDs, no status:
//! hyperplug rebuilds it from the VMs it can prove it made), and the target can then
//! delete the cluster, VMs included. The target's manager accepts the source's ownership
//! key first: without it, the moved ownership ids prove nothing there.
use std::collections::BTreeSet;
use std::time::Duration;

use e2e::capi;
use e2e::management::Management;
use e2e::progress::say;
use e2e::quickstart::{Options, Quickstart, proxmox_machines};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn move_changes_nothing_in_proxmox_and_the_target_takes_over() {
    let _flow = crate::FLOWS.acquire().await.unwrap();
    let hyperplug = capi::build_hyperplug().unwrap();
    let plugin = capi::bundled_plugin().unwrap();
    let mut qs = Quickstart::start(
        "source",
        Options {
            pve_listen: "127.0.0.1:0".into(),
            fast_tasks: true,
            namespace: "moving".into(),
        },
        hyperplug.clone(),
        plugin.clone(),
    )
    .await
    .unwrap();
    let yaml = qs.generate().unwrap();
    qs.cluster
        .apply(&qs.management, &qs.sim, &yaml)
        .await
        .unwrap();
    let before = qs
        .cluster
        .wait_provisioned(&qs.management, 2, Duration::from_secs(240))
        .await
        .unwrap();
    let provider_ids = provider_ids_of(&before);
    let vms = qs.vms();

    let target = Management::start("target", &qs.repo, &qs.pve, &hyperplug, &plugin)
        .await
        .unwrap();
    target
        .accept_ownership_key_of(&qs.management)
        .await
        .unwrap();
    qs.sim.state().reset_counters();
    let to = target.plane.kubeconfig_path().display().to_string();
    say(format!(
        "clusterctl move -n {} --to-kubeconfig <target>",
        qs.cluster.namespace
    ));
    let out = qs
        .management
        .clusterctl(&[
            "move",
            "--namespace",
            &qs.cluster.namespace,
            "--to-kubeconfig",
            &to,
        ])
        .unwrap();
    say(out.trim());

    // The target takes over: same Machines, same providerIDs, provisioned again.
    let after = qs
        .cluster
        .wait_provisioned(&target, 2, Duration::from_secs(240))
        .await
        .unwrap();
    assert_eq!(provider_ids_of(&after), provider_ids);
    let infra = proxmox_machines(&target.plane.client(), &qs.cluster.namespace)
        .await
        .unwrap();
    assert_eq!(infra.len(), 2, "{infra:?}");
    assert!(infra.iter().all(|(_, p)| *p), "{infra:?}");
    // Nothing was recreated or destroyed in Proxmox VE.
    assert_eq!(qs.vms(), vms);
    let counters = qs.sim.state().counters();
    let changes: Vec<_> = counters
        .iter()
        .filter(|(k, _)| {
            k.starts_with("POST") && (k.ends_with("/clone") || k.ends_with("/qemu"))
                || k.starts_with("DELETE")
        })
        .collect();
    assert!(
        changes.is_empty(),
        "VMs created or destroyed during the move: {changes:?}"
    );
    // The source has nothing left of the cluster.
    assert!(
        e2e::quickstart::leftovers(&qs.client(), &qs.cluster.namespace, &qs.cluster.name)
            .await
            .unwrap()
            .is_empty()
    );

    // The target owns the VMs: deleting the cluster there removes them.
    qs.cluster
        .delete(&target, Duration::from_secs(240))
        .await
        .unwrap();
    assert!(qs.vms().is_empty(), "VMs left in pve-sim: {:?}", qs.vms());
}

fn provider_ids_of(machines: &[kube::api::DynamicObject]) -> BTreeSet<String> {
    machines
        .iter()
        .filter_map(|m| {
            capi::field(m, "spec.providerID")?
                .as_str()
                .map(String::from)
        })
        .collect()
}
