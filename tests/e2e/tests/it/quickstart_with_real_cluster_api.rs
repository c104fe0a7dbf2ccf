//! The seed article's flow with our provider, against real Cluster API: `clusterctl
//! init --infrastructure proxmox --ipam in-cluster`, `clusterctl generate cluster` from
//! `capmox.env`, apply; CAPI creates the Machines and bootstrap Secrets, hyperplug
//! provisions the VMs in pve-sim; scaling the workers adds VMs; deleting the Cluster
//! removes every VM and leaves no object behind.
use std::time::Duration;

use e2e::capi;
use e2e::quickstart::{Options, Quickstart, cluster_machines, proxmox_machines};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn quickstart_provisions_scales_and_deletes_with_nothing_left_behind() {
    let _flow = crate::FLOWS.acquire().await.unwrap();
    let hyperplug = capi::build_hyperplug().unwrap();
    let plugin = capi::bundled_plugin().unwrap();
    let mut qs = Quickstart::start(
        "management",
        Options {
            pve_listen: "127.0.0.1:0".into(),
            fast_tasks: true,
            namespace: "quickstart".into(),
        },
        hyperplug,
        plugin,
    )
    .await
    .unwrap();

    let yaml = qs.generate().unwrap();
    qs.cluster
        .apply(&qs.management, &qs.sim, &yaml)
        .await
        .unwrap();

    // One control-plane machine and one worker: both provisioned, both with a VM.
    let machines = qs
        .cluster
        .wait_provisioned(&qs.management, 2, Duration::from_secs(240))
        .await
        .unwrap();
    let client = qs.client();
    for m in &machines {
        let data = capi::field(m, "spec.bootstrap.dataSecretName").and_then(|v| v.as_str());
        assert!(data.is_some(), "CAPI made the bootstrap Secret of {m:?}");
    }
    assert_eq!(qs.vms().len(), 2, "{:?}", qs.vms());
    let infra = proxmox_machines(&client, &qs.cluster.namespace)
        .await
        .unwrap();
    assert_eq!(infra.len(), 2, "{infra:?}");
    assert!(infra.iter().all(|(_, p)| *p), "{infra:?}");

    // Scale the workers to 3: two more VMs.
    qs.scale_workers(3).await.unwrap();
    qs.cluster
        .wait_provisioned(&qs.management, 4, Duration::from_secs(240))
        .await
        .unwrap();
    assert_eq!(qs.vms().len(), 4, "{:?}", qs.vms());

    // Delete: every VM goes, every object goes.
    qs.cluster
        .delete(&qs.management, Duration::from_secs(240))
        .await
        .unwrap();
    assert!(qs.vms().is_empty(), "VMs left in pve-sim: {:?}", qs.vms());
    assert!(
        cluster_machines(&client, &qs.cluster.namespace, &qs.cluster.name)
            .await
            .unwrap()
            .is_empty()
    );
}
