//! Every cluster template flavor CAPMOX v0.9.0 ships, provisioned: one management
//! cluster from `clusterctl init --infrastructure proxmox --ipam in-cluster` (ClusterClass
//! and Ignition gates on, as the flavors' docs ask), then per flavor `clusterctl generate
//! cluster --from <CAPMOX's template>` with the seed's `capmox.env` plus the variables
//! CAPMOX's docs give it, `kubectl apply`, every Machine provisioned with its VM in
//! pve-sim, the Cluster deleted and its VMs gone. One flavor after another, each in a
//! namespace of its own. Prints the table of flavors.
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use e2e::capi;
use e2e::quickstart::{Options, Quickstart, loopback_endpoint};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use packaging::{Clusterctl, capmox};
use serde_json::json;

/// The flavor whose cluster brings its own credentials Secret.
const EXTERNAL_CREDS: &str = "external-creds";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_capmox_flavor_provisions_its_machines_and_deletes_them() {
    let _one = crate::FLOWS.lock().await;
    let hyperplug = capi::build_hyperplug().unwrap();
    let plugin = capi::bundled_plugin().unwrap();
    let mut qs = Quickstart::start(
        "flavors",
        Options {
            pve_listen: "127.0.0.1:0".into(),
            fast_tasks: true,
            namespace: "flavors".into(),
        },
        hyperplug,
        plugin,
    )
    .await
    .unwrap();
    let mut table = Vec::new();
    let mut failures = Vec::new();
    for flavor in capmox::FLAVORS {
        let file = capmox::template_file(flavor);
        match provision(&mut qs, flavor).await {
            Ok(what) => table.push((file, format!("yes: {what}"))),
            Err(e) => {
                table.push((file.clone(), "NO".into()));
                failures.push(format!("{file}: {e:#}"));
            }
        }
    }
    eprintln!("\nCAPMOX v0.9.0 flavors provisioned by hyperplug on pve-sim\n");
    for (file, verdict) in &table {
        eprintln!("| {file:<44} | {verdict} |");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// One flavor's cluster, from `clusterctl generate cluster` to deleted; what it made.
async fn provision(qs: &mut Quickstart, flavor: &str) -> Result<String> {
    if let Some(previous) = qs.workload.take() {
        previous.stop().await;
    }
    let name = capmox::flavor_name(flavor);
    qs.namespace = format!("flavor-{name}");
    qs.cluster = format!("capmox-{name}");
    qs.endpoint = loopback_endpoint();
    let namespaces: Api<Namespace> = Api::all(qs.client());
    let ns = serde_json::from_value(json!({"metadata": {"name": qs.namespace}}))?;
    namespaces.create(&PostParams::default(), &ns).await?;

    let mut clusterctl = Clusterctl::with_capmox_env()?
        .var("PROXMOX_URL", &qs.pve.url)
        .var("PROXMOX_TOKEN", &qs.pve.token)
        .var("PROXMOX_SECRET", &qs.pve.secret)
        .var("CONTROL_PLANE_ENDPOINT_IP", &qs.endpoint.ip().to_string());
    for (var, value) in capmox::FLAVOR_VARIABLES {
        clusterctl = clusterctl.var(var, value);
    }
    let template = kube_world::tools::Tools::get()?
        .capmox_dir()
        .join("templates")
        .join(capmox::template_file(flavor));
    let mut yaml = clusterctl.generate_seed_cluster(&qs.cluster, &template, &qs.namespace)?;
    if flavor == EXTERNAL_CREDS {
        // Its Secret has no way to trust pve-sim's self-signed certificate, which we
        // verify by default (docs/proxmox.md, Credentials): add its fingerprint, as the
        // TLSVerificationFailed condition tells users to.
        ensure!(yaml.contains("stringData:\n"), "no stringData in:\n{yaml}");
        yaml = yaml.replacen(
            "stringData:\n",
            &format!("stringData:\n  fingerprint: \"{}\"\n", qs.pve.fingerprint),
            1,
        );
    }
    let machines = machine_count(&yaml)?;
    qs.apply(&yaml).await?;

    let result = async {
        qs.wait_provisioned(&qs.management, machines, Duration::from_secs(180))
            .await?;
        let vms = cluster_vms(qs);
        ensure!(
            vms.len() == machines,
            "{machines} Machines provisioned but pve-sim holds {} VMs of the cluster: {vms:?}",
            vms.len()
        );
        Ok(())
    }
    .await;
    // Delete whatever came up, so the next flavor starts from an empty pve-sim.
    let deleted = qs
        .delete_cluster(&qs.management, Duration::from_secs(180))
        .await;
    result?;
    deleted?;
    let left = cluster_vms(qs);
    if !left.is_empty() {
        bail!("the cluster is deleted but its VMs are not: {left:?}");
    }
    Ok(format!(
        "{machines} machines provisioned, then deleted with their VMs"
    ))
}

/// The Machines a rendered flavor asks for: its control plane's and machine
/// deployments' replicas.
fn machine_count(yaml: &str) -> Result<usize> {
    let mut count = 0;
    for doc in packaging::documents(yaml)? {
        if doc["kind"] == "KubeadmControlPlane" || doc["kind"] == "MachineDeployment" {
            let replicas = doc["spec"]["replicas"]
                .as_u64()
                .with_context(|| format!("{} without spec.replicas", doc["kind"]))?;
            count += replicas as usize;
        }
    }
    Ok(count)
}

/// pve-sim's VMs named after the current cluster's machines.
fn cluster_vms(qs: &Quickstart) -> Vec<(u64, String)> {
    let prefix = format!("{}-", qs.cluster);
    qs.vms()
        .into_iter()
        .filter(|(_, name)| name.starts_with(&prefix))
        .collect()
}
