//! Every cluster template flavor CAPMOX v0.9.0 ships, provisioned: one management
//! cluster from `clusterctl init --infrastructure proxmox --ipam in-cluster` (ClusterClass
//! and Ignition gates on, as the flavors' docs ask), then per flavor `clusterctl generate
//! cluster --from <CAPMOX's template>` with the seed's `capmox.env` plus the variables
//! CAPMOX's docs give it, `kubectl apply`, every Machine provisioned with its VM in
//! pve-sim, the Cluster deleted and its VMs gone. The flavors run side by side, each in a
//! namespace of its own ([`SIDE_BY_SIDE`] at a time): most of a flavor's minute is Cluster
//! API waiting on its own requeues, which overlap. Beside them, one after another, the
//! three ClusterClasses, each with CAPMOX's example Cluster of it (a topology of one
//! control-plane machine, three workers and no load balancer) in the `default` namespace
//! they share. Prints the table of flavors.
use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use e2e::capi;
use e2e::quickstart::{Options, Quickstart, WorkloadCluster, proxmox_machines};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use packaging::{Clusterctl, capmox};
use serde_json::json;

/// `(ClusterClass file, CAPMOX's example Cluster of it in examples/)`.
const CLASSES: &[(&str, &str)] = &[
    ("cluster-class.yaml", "cluster.yaml"),
    ("cluster-class-calico.yaml", "cluster-calico.yaml"),
    ("cluster-class-cilium.yaml", "cluster-cilium.yaml"),
];

/// Flavors provisioning at once: each also runs its workload's API server (etcd and
/// kube-apiserver), which is what bounds this on a 2-core machine.
const SIDE_BY_SIDE: usize = 4;

/// The flavor whose cluster brings its own credentials Secret.
const EXTERNAL_CREDS: &str = "external-creds";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_capmox_flavor_provisions_its_machines_and_deletes_them() {
    let _flow = crate::LongestFlow;
    let hyperplug = capi::build_hyperplug().unwrap();
    let plugin = capi::bundled_plugin().unwrap();
    let qs = Quickstart::start(
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
    // `E2E_FLAVOR=<part of a file name>` runs only the flavors and classes it names.
    let chosen = |file: &str| std::env::var("E2E_FLAVOR").map_or(true, |f| file.contains(&f));
    let qs = &qs;
    // The next flavor starts as soon as any is done; the table keeps their order.
    let flavors = async {
        let mut done = stream::iter(capmox::FLAVORS.iter().copied().enumerate())
            .map(|(i, flavor)| (i, capmox::template_file(flavor), flavor))
            .filter(|(_, file, _)| std::future::ready(chosen(file)))
            .map(|(i, file, flavor)| async move { (i, file, provision(qs, flavor).await) })
            .buffer_unordered(SIDE_BY_SIDE)
            .collect::<Vec<_>>()
            .await;
        done.sort_by_key(|(i, _, _)| *i);
        done.into_iter()
            .map(|(_, file, verdict)| (file, verdict))
            .collect::<Vec<_>>()
    };
    let classes = async {
        let mut verdicts = Vec::new();
        for (class, example) in CLASSES.iter().filter(|(class, _)| chosen(class)) {
            verdicts.push((class.to_string(), provision_class(qs, class, example).await));
        }
        verdicts
    };
    let (mut verdicts, classes) = futures::join!(flavors, classes);
    verdicts.extend(classes);
    let mut table = Vec::new();
    let mut failures = Vec::new();
    for (file, verdict) in verdicts {
        match verdict {
            Ok(what) => table.push((file, format!("yes: {what}"))),
            Err(e) => {
                failures.push(format!("{file}: {e:#}"));
                table.push((file, "NO".into()));
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
async fn provision(qs: &Quickstart, flavor: &str) -> Result<String> {
    let name = capmox::flavor_name(flavor);
    let mut side = WorkloadCluster::new(&format!("flavor-{name}"), &format!("capmox-{name}"));
    let namespaces: Api<Namespace> = Api::all(qs.client());
    let ns = serde_json::from_value(json!({"metadata": {"name": side.namespace}}))?;
    namespaces.create(&PostParams::default(), &ns).await?;

    let mut clusterctl = Clusterctl::with_capmox_env()?
        .var("PROXMOX_URL", &qs.pve.url)
        .var("PROXMOX_TOKEN", &qs.pve.token)
        .var("PROXMOX_SECRET", &qs.pve.secret)
        .var("CONTROL_PLANE_ENDPOINT_IP", &side.endpoint.ip().to_string());
    for (var, value) in capmox::FLAVOR_VARIABLES {
        clusterctl = clusterctl.var(var, value);
    }
    let template = kube_world::tools::Tools::get()?
        .capmox_dir()
        .join("templates")
        .join(capmox::template_file(flavor));
    let mut yaml = clusterctl.generate_seed_cluster(&side.name, &template, &side.namespace)?;
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
    let result = match side.apply(&qs.management, &qs.sim, &yaml).await {
        Ok(()) => provisioned_then_deleted(qs, &side, machines).await,
        Err(e) => Err(e),
    };
    side.stop().await;
    result
}

/// As CAPMOX's docs say: `kubectl apply -f templates/<class>`, then its example Cluster of
/// the class (in kubectl's default namespace: the calico and cilium classes name `default`
/// for their ClusterResourceSets) with this world's values where the example has its
/// own (endpoint, addresses, DNS, template VMID, source and allowed nodes), every Machine
/// of the topology provisioned, then the Cluster deleted with its VMs.
async fn provision_class(qs: &Quickstart, class: &str, example: &str) -> Result<String> {
    let capmox = kube_world::tools::Tools::get()?.capmox_dir();
    let example_yaml = std::fs::read_to_string(capmox.join("examples").join(example))?;
    let mut cluster = packaging::documents(&example_yaml)?
        .into_iter()
        .find(|d| d["kind"] == "Cluster")
        .context("no Cluster in the example")?;
    let name = cluster["metadata"]["name"]
        .as_str()
        .context("the example Cluster has no name")?
        .to_string();
    let mut side = WorkloadCluster::new("default", &name);
    let class_yaml = Clusterctl::with_capmox_env()?.run(&[
        "generate",
        "yaml",
        "--from",
        &capmox.join("templates").join(class).display().to_string(),
    ])?;
    packaging::kubectl_apply(&qs.management.plane, "default", &class_yaml)
        .context("applying the ClusterClass")?;
    let class_name = cluster["spec"]["topology"]["classRef"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    packaging::wait_class_reconciled(&qs.management.plane, "default", &class_name).await?;
    let machines = in_this_world(&mut cluster, &side)?;
    let result = match side
        .apply(&qs.management, &qs.sim, &serde_json::to_string(&cluster)?)
        .await
    {
        Ok(()) => provisioned_then_deleted(qs, &side, machines).await,
        Err(e) => Err(e),
    };
    side.stop().await;
    Ok(format!("class {class_name}, Cluster {name}: {}", result?))
}

/// Gives CAPMOX's example Cluster this world's endpoint and the seed's `capmox.env`
/// values for its addresses, DNS servers, template and nodes; the Machines it asks for.
fn in_this_world(cluster: &mut serde_json::Value, side: &WorkloadCluster) -> Result<usize> {
    let var = packaging::capmox_var;
    let list = |v: &str| -> Vec<String> {
        v.trim_matches(['[', ']'])
            .split(',')
            .map(|s| s.trim().to_string())
            .collect()
    };
    let topology = &mut cluster["spec"]["topology"];
    for v in topology["variables"]
        .as_array_mut()
        .context("the example has no variables")?
    {
        let name = v["name"].as_str().unwrap_or_default().to_string();
        let value = &mut v["value"];
        match name.as_str() {
            "allowedNodes" => *value = json!(list(&var("ALLOWED_NODES"))),
            "controlPlaneEndpoint" => value["host"] = json!(side.endpoint.ip().to_string()),
            "dnsServers" => *value = json!(list(&var("DNS_SERVERS"))),
            "ipv4Config" => {
                *value = json!({
                    "addresses": list(&var("NODE_IP_RANGES")),
                    "gateway": var("GATEWAY"),
                    "prefix": var("IP_PREFIX").parse::<u32>()?,
                })
            }
            "cloneSpec" => {
                for m in value["machineSpec"].as_array_mut().into_iter().flatten() {
                    m["sourceNode"] = json!(var("PROXMOX_SOURCENODE"));
                    m["templateID"] = json!(var("TEMPLATE_VMID").parse::<u64>()?);
                }
            }
            _ => {}
        }
    }
    let replicas = |v: &serde_json::Value| v["replicas"].as_u64().unwrap_or(1) as usize;
    Ok(replicas(&topology["controlPlane"])
        + topology["workers"]["machineDeployments"]
            .as_array()
            .into_iter()
            .flatten()
            .map(replicas)
            .sum::<usize>())
}

/// Waits for `machines` provisioned Machines with their VMs, then deletes the cluster
/// (whatever came up, so that nothing is left in pve-sim); what it made.
async fn provisioned_then_deleted(
    qs: &Quickstart,
    side: &WorkloadCluster,
    machines: usize,
) -> Result<String> {
    // The names its VMs may carry (its Machines' and ProxmoxMachines'), gathered while
    // the cluster stands: other clusters beside it share pve-sim, and a name prefix is
    // not enough (`capmox-cilium-` is also the start of `capmox-cilium-load-balancer-`).
    let mut names = BTreeSet::new();
    let result = async {
        let provisioned = side
            .wait_provisioned(&qs.management, machines, Duration::from_secs(180))
            .await?;
        names.extend(provisioned.iter().map(|m| m.name_any()));
        let infra = proxmox_machines(&qs.client(), &side.namespace).await?;
        names.extend(infra.into_iter().map(|(name, _)| name));
        let vms = cluster_vms(qs, &names);
        ensure!(
            vms.len() == machines,
            "{machines} Machines provisioned but pve-sim holds {} VMs of the cluster: {vms:?}",
            vms.len()
        );
        Ok(())
    }
    .await;
    let deleted = side.delete(&qs.management, Duration::from_secs(180)).await;
    result?;
    deleted?;
    let left = cluster_vms(qs, &names);
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

/// pve-sim's VMs named after one of `names` (a cluster's machines).
fn cluster_vms(qs: &Quickstart, names: &BTreeSet<String>) -> Vec<(u64, String)> {
    qs.vms()
        .into_iter()
        .filter(|(_, name)| names.contains(name))
        .collect()
}
