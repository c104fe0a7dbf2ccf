//! The walk of docs/migrate-from-capmox.md with the real CAPMOX v0.9.0 manager: CAPMOX
//! provisions the seed's cluster (one control-plane machine, one worker) from its own
//! cluster template against pve-sim; then CAPMOX is stopped and removed keeping its
//! objects, hyperplug is installed with `clusterctl init --infrastructure proxmox` and
//! adoption granted in the cluster's namespace, and it adopts every machine: the same VMs
//! (no clone, start, stop or destroy in pve-sim), the same IPAddressClaims and addresses,
//! CAPMOX's finalizers replaced by ours. Then hyperplug scales the workers up (a VM of its
//! own) and deletes the cluster, every VM with it.
use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use e2e::capi::{self, INFRA};
use e2e::management::Management;
use e2e::quickstart::{Options, Quickstart, start_pve};
use e2e::repo::Repo;
use kube::ResourceExt;
use packaging::Clusterctl;

const NAMESPACE: &str = "team-a";
const CLUSTER: &str = "capmox-cluster";
const OUR_FINALIZER: &str = "proxmox.infrastructure.hyperplug.dev";
/// The label hyperplug gives the IPAddressClaims it keeps for a machine.
const CLAIM_OWNER_LABEL: &str = "infrastructure.hyperplug.dev/owner";
const IPAM: &str = "ipam.cluster.x-k8s.io/v1beta2";
const IPAM_POOLS: &str = "ipam.cluster.x-k8s.io/v1alpha2";

/// pve-sim requests that change a VM's existence or power.
const LIFECYCLE: &[&str] = &[
    "POST /nodes/{node}/qemu/{vmid}/clone",
    "DELETE /nodes/{node}/qemu/{vmid}",
    "POST /nodes/{node}/qemu/{vmid}/status/start",
    "POST /nodes/{node}/qemu/{vmid}/status/stop",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_capmox_management_cluster_is_taken_over_without_touching_a_vm() {
    let _flow = crate::FLOWS.acquire().await.unwrap();
    if kube_world::tools::Tools::get()
        .unwrap()
        .capmox_manager()
        .is_none()
    {
        // scripts/setup.sh builds it; a bare `cargo test` on a fresh machine may not have.
        let built = std::process::Command::new("bash")
            .arg(packaging::repo_root().join("scripts/build-tools.sh"))
            .arg("capmox-manager")
            .status()
            .unwrap();
        assert!(
            built.success(),
            "scripts/build-tools.sh capmox-manager failed"
        );
    }
    walk().await.unwrap();
}

async fn walk() -> Result<()> {
    let hyperplug = capi::build_hyperplug()?;
    let plugin = capi::bundled_plugin()?;
    let (sim, pve) = start_pve(&Options {
        pve_listen: "127.0.0.1:0".into(),
        fast_tasks: true,
        namespace: NAMESPACE.into(),
    })
    .await?;
    let repo = Repo::render(&hyperplug, &plugin)?;
    let management = Management::start_capmox("capmox", &repo, &pve).await?;
    let mut qs = Quickstart::around(
        sim,
        pve,
        repo,
        management,
        NAMESPACE,
        hyperplug.clone(),
        plugin.clone(),
    )
    .await?;
    qs.cluster.name = CLUSTER.into();

    // CAPMOX provisions the seed's cluster from its own template.
    let template = kube_world::tools::Tools::get()?
        .capmox_dir()
        .join("templates/cluster-template.yaml");
    let yaml = Clusterctl::with_capmox_env()?
        .var(
            "CONTROL_PLANE_ENDPOINT_IP",
            &qs.cluster.endpoint.ip().to_string(),
        )
        // Sizes other than the template's: CAPMOX v0.9.0 marks a machine that needs no
        // config change provisioned without starting its VM.
        .var("NUM_CORES", "4")
        .generate_seed_cluster(CLUSTER, &template, NAMESPACE)?;
    qs.cluster.apply(&qs.management, &qs.sim, &yaml).await?;
    let machines = qs
        .cluster
        .wait_provisioned(&qs.management, 2, Duration::from_secs(240))
        .await
        .context("CAPMOX provisioning the cluster")?;
    let before = vms_of(&qs);
    ensure!(before.len() == 2, "CAPMOX made {before:?}");
    let claims_before = claims(&qs).await?;
    ensure!(!claims_before.is_empty(), "CAPMOX made no IPAddressClaims");
    let pools_before = pools(&qs).await?;
    ensure!(!pools_before.is_empty(), "CAPMOX made no InClusterIPPools");
    let provider_ids: Vec<String> = machines
        .iter()
        .filter_map(|m| {
            capi::field(m, "spec.providerID")?
                .as_str()
                .map(String::from)
        })
        .collect();

    // The switch.
    let counted = lifecycle_requests(&qs);
    qs.management
        .switch_from_capmox(&hyperplug, &plugin, NAMESPACE)
        .await?;
    let client = qs.client();
    // Adopted: every ProxmoxMachine ready with hyperplug's finalizer only, every claim
    // labelled as hyperplug's.
    qs.management
        .plane
        .wait_for(
            "every ProxmoxMachine and IPAddressClaim taken over",
            Duration::from_secs(120),
            || {
                let client = client.clone();
                async move {
                    let pms = capi::list(&client, INFRA, "ProxmoxMachine", NAMESPACE).await?;
                    let claims = capi::list(&client, IPAM, "IPAddressClaim", NAMESPACE).await?;
                    Ok(pms.len() == 2
                        && pms.iter().all(|m| {
                            m.finalizers() == [OUR_FINALIZER]
                                && m.data["status"]["conditions"]
                                    .as_array()
                                    .into_iter()
                                    .flatten()
                                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
                        })
                        && claims
                            .iter()
                            .all(|c| c.labels().contains_key(CLAIM_OWNER_LABEL)))
                }
            },
        )
        .await
        .with_context(|| format!("hyperplug log: {}", qs.management.hyperplug_log.display()))?;
    ensure!(vms_of(&qs) == before, "the VMs changed: {:?}", vms_of(&qs));
    ensure!(
        lifecycle_requests(&qs) == counted,
        "VMs were cloned, started, stopped or destroyed during the takeover: {:?} -> {:?}",
        counted,
        lifecycle_requests(&qs)
    );
    ensure!(claims(&qs).await? == claims_before, "the claims changed");
    ensure!(
        pools(&qs).await? == pools_before,
        "CAPMOX's pools were replaced"
    );
    let machines = capi::list(&client, capi::CAPI, "Machine", NAMESPACE).await?;
    for m in &machines {
        let id = capi::field(m, "spec.providerID").and_then(|v| v.as_str());
        ensure!(
            id.is_some_and(|id| provider_ids.iter().any(|p| p == id)),
            "Machine {} changed its providerID to {id:?}",
            m.name_any()
        );
    }

    // hyperplug's from now on: a worker more, then the cluster deleted.
    qs.scale_workers(2).await?;
    qs.cluster
        .wait_provisioned(&qs.management, 3, Duration::from_secs(180))
        .await?;
    ensure!(vms_of(&qs).len() == 3, "{:?}", vms_of(&qs));
    qs.cluster
        .delete(&qs.management, Duration::from_secs(180))
        .await?;
    ensure!(vms_of(&qs).is_empty(), "left: {:?}", vms_of(&qs));
    eprintln!(
        "\nCAPMOX's cluster taken over: {} VMs adopted as they were, {} claims kept, CAPMOX's finalizers replaced; scaled and deleted by hyperplug",
        before.len(),
        claims_before.len()
    );
    Ok(())
}

/// The cluster's VMs in pve-sim: VMID → (name, SMBIOS line).
fn vms_of(qs: &Quickstart) -> BTreeMap<u64, (String, String)> {
    let prefix = format!("{CLUSTER}-");
    qs.sim
        .state()
        .vms()
        .iter()
        .filter(|vm| vm["template"] != true)
        .filter(|vm| vm["name"].as_str().is_some_and(|n| n.starts_with(&prefix)))
        .map(|vm| {
            (
                vm["vmid"].as_u64().unwrap_or_default(),
                (
                    vm["name"].as_str().unwrap_or_default().to_string(),
                    vm["config"]["smbios1"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                ),
            )
        })
        .collect()
}

/// The namespace's IPAddressClaims: name → (UID, bound address name).
async fn claims(qs: &Quickstart) -> Result<BTreeMap<String, (String, String)>> {
    Ok(capi::list(&qs.client(), IPAM, "IPAddressClaim", NAMESPACE)
        .await?
        .iter()
        .map(|c| {
            (
                c.name_any(),
                (
                    c.uid().unwrap_or_default(),
                    c.data["status"]["addressRef"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                ),
            )
        })
        .collect())
}

/// The namespace's InClusterIPPools: name → UID.
async fn pools(qs: &Quickstart) -> Result<BTreeMap<String, String>> {
    Ok(
        capi::list(&qs.client(), IPAM_POOLS, "InClusterIPPool", NAMESPACE)
            .await?
            .iter()
            .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
            .collect(),
    )
}

fn lifecycle_requests(qs: &Quickstart) -> Vec<u64> {
    let counters = qs.sim.state().counters();
    LIFECYCLE
        .iter()
        .map(|e| counters.get(*e).copied().unwrap_or(0))
        .collect()
}
