//! The seed article's quickstart, end to end: pve-sim with its default world, a
//! management cluster from `clusterctl init`, then `clusterctl generate cluster
//! capi-quickstart --kubernetes-version v1.33.0 --control-plane-machine-count=1
//! --worker-machine-count=1` from `capmox.env` and `kubectl apply`.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use std::sync::Mutex;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use pve_sim::{Config, ListenOpts, RunningSim, Simulator};
use serde_json::{Value, json};

use crate::capi::{self, CAPI, CLUSTER_NAME_LABEL, INFRA};
use crate::management::{Management, ProxmoxEndpoint};
use crate::progress::say;
use crate::repo::Repo;
use crate::workload::WorkloadSim;

/// The cluster name of the seed's commands.
pub const CLUSTER: &str = "capi-quickstart";

/// How to run it.
#[derive(Debug, Clone)]
pub struct Options {
    /// pve-sim's listen address (`127.0.0.1:0` picks a free port).
    pub pve_listen: String,
    /// pve-sim's task durations: `true` zero, `false` its defaults (hundreds of ms).
    pub fast_tasks: bool,
    /// The namespace the cluster goes to (created if missing).
    pub namespace: String,
}

/// Kinds whose objects a deleted cluster must not leave behind: (apiVersion, kind).
pub const CLUSTER_KINDS: &[(&str, &str)] = &[
    (CAPI, "Cluster"),
    (CAPI, "MachineDeployment"),
    (CAPI, "MachineSet"),
    (CAPI, "Machine"),
    (
        "controlplane.cluster.x-k8s.io/v1beta2",
        "KubeadmControlPlane",
    ),
    ("bootstrap.cluster.x-k8s.io/v1beta2", "KubeadmConfig"),
    (
        "bootstrap.cluster.x-k8s.io/v1beta2",
        "KubeadmConfigTemplate",
    ),
    (INFRA, "ProxmoxCluster"),
    (INFRA, "ProxmoxMachine"),
    (INFRA, "ProxmoxMachineTemplate"),
    ("ipam.cluster.x-k8s.io/v1beta2", "IPAddressClaim"),
    ("ipam.cluster.x-k8s.io/v1beta2", "IPAddress"),
    ("ipam.cluster.x-k8s.io/v1alpha2", "InClusterIPPool"),
];

/// A running quickstart: the simulator, the management cluster and its workload cluster.
pub struct Quickstart {
    pub sim: RunningSim,
    pub pve: ProxmoxEndpoint,
    pub repo: Repo,
    pub management: Management,
    /// Its own workload cluster: [`CLUSTER`] (unless a test renames it) in the namespace
    /// of [`Options`].
    pub cluster: WorkloadCluster,
    pub hyperplug: PathBuf,
    pub plugin: PathBuf,
}

impl Quickstart {
    /// Starts pve-sim and a management cluster named `name`.
    pub async fn start(
        name: &str,
        opts: Options,
        hyperplug: PathBuf,
        plugin: PathBuf,
    ) -> Result<Quickstart> {
        let (sim, pve) = start_pve(&opts).await?;
        let repo = Repo::render(&hyperplug, &plugin)?;
        let management = Management::start(name, &repo, &pve, &hyperplug, &plugin).await?;
        Quickstart::around(
            sim,
            pve,
            repo,
            management,
            &opts.namespace,
            hyperplug,
            plugin,
        )
        .await
    }

    /// A quickstart of a simulator and a management cluster already running (e.g. one
    /// running another provider first), its cluster in `namespace`, created if missing.
    pub async fn around(
        sim: RunningSim,
        pve: ProxmoxEndpoint,
        repo: Repo,
        management: Management,
        namespace: &str,
        hyperplug: PathBuf,
        plugin: PathBuf,
    ) -> Result<Quickstart> {
        let ns: Api<Namespace> = Api::all(management.plane.client());
        if ns.get_opt(namespace).await?.is_none() {
            let obj: Namespace = serde_json::from_value(json!({"metadata": {"name": namespace}}))?;
            ns.create(&PostParams::default(), &obj).await?;
        }
        Ok(Quickstart {
            sim,
            pve,
            repo,
            management,
            cluster: WorkloadCluster::new(namespace, CLUSTER),
            hyperplug,
            plugin,
        })
    }

    pub fn client(&self) -> Client {
        self.management.plane.client()
    }

    /// `clusterctl generate cluster capi-quickstart --from templates/cluster-template.yaml
    /// ...` with `capmox.env`, the endpoint pointed at this quickstart's own address.
    pub fn generate(&self) -> Result<String> {
        let template = packaging::repo_root().join("templates/cluster-template.yaml");
        say(format!(
            "clusterctl generate cluster {CLUSTER} --from templates/cluster-template.yaml --kubernetes-version {} --control-plane-machine-count=1 --worker-machine-count=1",
            packaging::SEED_KUBERNETES_VERSION
        ));
        let clusterctl = packaging::Clusterctl::with_capmox_env()?.var(
            "CONTROL_PLANE_ENDPOINT_IP",
            &self.cluster.endpoint.ip().to_string(),
        );
        clusterctl.generate_seed_cluster(CLUSTER, &template, &self.cluster.namespace)
    }

    /// Scales the workers' MachineDeployment.
    pub async fn scale_workers(&self, replicas: u32) -> Result<()> {
        let WorkloadCluster {
            namespace, name, ..
        } = &self.cluster;
        say(format!(
            "kubectl scale machinedeployment {name}-workers --replicas={replicas}"
        ));
        capi::api(&self.client(), CAPI, "MachineDeployment", namespace)
            .await?
            .patch(
                &format!("{name}-workers"),
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await?;
        Ok(())
    }

    /// VMs in pve-sim other than templates: (vmid, name).
    pub fn vms(&self) -> Vec<(u64, String)> {
        self.sim
            .state()
            .vms()
            .iter()
            .filter(|vm| vm["template"] != true)
            .map(|vm| {
                (
                    vm["vmid"].as_u64().unwrap_or_default(),
                    vm["name"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }
}

/// A workload cluster on a management cluster: where it goes and, once applied, its
/// simulated insides. A quickstart has one; the flavors make more beside it, each in a
/// namespace of its own, so that Cluster API's waits (a control plane's initialization,
/// a deletion's requeues) overlap instead of adding up.
pub struct WorkloadCluster {
    pub namespace: String,
    pub name: String,
    /// Its control-plane endpoint (`CONTROL_PLANE_ENDPOINT_IP`:6443), a loopback address
    /// of its own so that several clusters can run side by side.
    pub endpoint: SocketAddr,
    workload: Option<WorkloadSim>,
}

impl WorkloadCluster {
    pub fn new(namespace: &str, name: &str) -> WorkloadCluster {
        WorkloadCluster {
            namespace: namespace.into(),
            name: name.into(),
            endpoint: loopback_endpoint(),
            workload: None,
        }
    }

    /// Prepares the simulated workload side, then applies `yaml` on `management` as
    /// `kubectl apply` does.
    pub async fn apply(
        &mut self,
        management: &Management,
        sim: &RunningSim,
        yaml: &str,
    ) -> Result<()> {
        let workload = apply_cluster(management, sim, self, yaml);
        self.workload = Some(workload.await?);
        Ok(())
    }

    /// Waits until `count` Machines of the cluster are provisioned on `management`,
    /// printing each change; returns them.
    pub async fn wait_provisioned(
        &self,
        management: &Management,
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<DynamicObject>> {
        let at = (self.namespace.as_str(), self.name.as_str());
        wait_provisioned(management, at, self.workload.as_ref(), count, timeout).await
    }

    /// Deletes the Cluster on `management` and waits until every object of
    /// [`CLUSTER_KINDS`] and every Secret of the cluster is gone.
    pub async fn delete(&self, management: &Management, timeout: Duration) -> Result<()> {
        delete_cluster(management, &self.namespace, &self.name, timeout).await
    }

    /// The simulated workload API server's admin kubeconfig, once it runs.
    pub async fn kubeconfig(&self) -> Option<PathBuf> {
        self.workload.as_ref()?.kubeconfig().await
    }

    /// Stops the simulated insides (the workload API server).
    pub async fn stop(self) {
        if let Some(workload) = self.workload {
            workload.stop().await;
        }
    }
}

/// Prepares the simulated workload side of `cluster` (its CA, then its API server once
/// its control-plane VM runs), then applies `yaml` in its namespace as `kubectl apply`
/// does.
async fn apply_cluster(
    management: &Management,
    sim: &RunningSim,
    cluster: &WorkloadCluster,
    yaml: &str,
) -> Result<WorkloadSim> {
    let WorkloadCluster {
        namespace,
        name,
        endpoint,
        ..
    } = cluster;
    let client = management.plane.client();
    let workload = WorkloadSim::prepare(&client, namespace, name, *endpoint, sim.state()).await?;
    say(format!("kubectl apply -n {namespace} -f {name}.yaml"));
    let out = packaging::kubectl_apply(&management.plane, namespace, yaml)?;
    for line in out.lines() {
        say(format!("  {line}"));
    }
    Ok(workload)
}

/// Waits until `count` Machines of `(namespace, cluster)` are provisioned on
/// `management`, printing each change; returns them.
async fn wait_provisioned(
    management: &Management,
    (ns, cluster): (&str, &str),
    workload: Option<&WorkloadSim>,
    count: usize,
    timeout: Duration,
) -> Result<Vec<DynamicObject>> {
    let client = &management.plane.client();
    let (last, found) = (&Mutex::new(String::new()), &Mutex::new(Vec::new()));
    let waited = management
        .plane
        .wait_for(
            &format!("{count} provisioned Machines"),
            timeout,
            || async move {
                let machines = cluster_machines(client, ns, cluster).await?;
                let table = capi::describe_machines(&machines);
                let mut last = last.lock().unwrap();
                if table != *last {
                    say(format!("Machines:\n{table}"));
                    *last = table;
                }
                let done =
                    machines.len() == count && machines.iter().all(capi::machine_provisioned);
                *found.lock().unwrap() = machines;
                Ok(done)
            },
        )
        .await;
    if let Err(e) = waited {
        let hint = workload
            .and_then(|w| w.last_error())
            .map(|e| format!("\nworkload simulation: {e}"))
            .unwrap_or_default();
        bail!(
            "{e:#}{hint}\nhyperplug log: {}",
            management.hyperplug_log.display()
        );
    }
    Ok(std::mem::take(&mut *found.lock().unwrap()))
}

/// Deletes the Cluster `cluster` on `management` and waits until every object of
/// [`CLUSTER_KINDS`] in `ns` and every Secret of the cluster is gone.
async fn delete_cluster(
    management: &Management,
    ns: &str,
    cluster: &str,
    timeout: Duration,
) -> Result<()> {
    say(format!("kubectl delete cluster {cluster}"));
    let client = management.plane.client();
    capi::api(&client, CAPI, "Cluster", ns)
        .await?
        .delete(cluster, &Default::default())
        .await?;
    let client = &client;
    let left = &Mutex::new(Vec::new());
    let waited = management
        .plane
        .wait_for(
            "every object of the cluster to be gone",
            timeout,
            || async move {
                let now = leftovers(client, ns, cluster).await?;
                let done = now.is_empty();
                *left.lock().unwrap() = now;
                Ok(done)
            },
        )
        .await;
    waited.with_context(|| format!("left behind: {:?}", left.lock().unwrap()))
}

/// pve-sim as `opts` ask, with the seed's `capmox.env` token, and how to reach it.
pub async fn start_pve(opts: &Options) -> Result<(RunningSim, ProxmoxEndpoint)> {
    let token = packaging::capmox_var("PROXMOX_TOKEN");
    let secret = packaging::capmox_var("PROXMOX_SECRET");
    let config = pve_world(opts.fast_tasks, format!("{token}={secret}"));
    let sim = Simulator::start(
        config,
        ListenOpts {
            addr: opts.pve_listen.clone(),
            tls: true,
        },
    )
    .await?;
    say(format!(
        "pve-sim serves the Proxmox VE API on {} (template VM 9000 on pve1)",
        sim.base_url()
    ));
    let pve = ProxmoxEndpoint {
        url: format!("https://{}", sim.addr()),
        token,
        secret,
        fingerprint: sim.fingerprint().to_string(),
    };
    Ok((sim, pve))
}

/// A control-plane endpoint on a loopback address of its own (`127.x.y.z:6443`).
pub fn loopback_endpoint() -> SocketAddr {
    let b: [u8; 3] = rand::random();
    SocketAddr::from(([127, b[0].max(1), b[1], b[2].max(1)], 6443))
}

/// pve-sim's default world (three nodes, template 9000 on pve1) with the template's
/// disks on a storage shared by every node: `ALLOWED_NODES=[pve1,pve2]` only works
/// when the template can be cloned to either node, and PVE refuses to clone a template
/// on node-local storage to another node.
pub fn pve_world(fast_tasks: bool, token: String) -> Config {
    let mut config = if fast_tasks {
        Config::fast()
    } else {
        Config::default()
    };
    config.tokens = vec![token];
    config.storages.push(pve_sim::StorageConfig {
        id: "shared".into(),
        kind: pve_sim::StorageType::Dir,
        content: ["images", "iso"].map(String::from).to_vec(),
        total: 1 << 40,
        nodes: vec![],
        shared: true,
    });
    if let Some(t) = config.vms.iter_mut().find(|v| v.vmid == 9000) {
        t.config.insert(
            "scsi0".into(),
            "shared:9000/base-9000-disk-0.raw,size=10G".into(),
        );
        // The tags CAPMOX's docs give its auto-image flavor (`TEMPLATE_TAGS=tag1,tag2`),
        // which finds its template by them.
        t.config.insert("tags".into(), "tag1;tag2".into());
        t.config.insert(
            "ide2".into(),
            "shared:9000/vm-9000-cloudinit.qcow2,media=cdrom".into(),
        );
    }
    config
}

/// The Machines of `cluster` in `namespace`.
pub async fn cluster_machines(
    client: &Client,
    namespace: &str,
    cluster: &str,
) -> Result<Vec<DynamicObject>> {
    Ok(capi::api(client, CAPI, "Machine", namespace)
        .await?
        .list(&ListParams::default().labels(&format!("{CLUSTER_NAME_LABEL}={cluster}")))
        .await?
        .items)
}

/// `Kind/name` of every object of [`CLUSTER_KINDS`] in `namespace` but a ClusterClass's
/// templates (the class owns them, and they stay with it), and of the Secrets of
/// `cluster`.
pub async fn leftovers(client: &Client, namespace: &str, cluster: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for (api_version, kind) in CLUSTER_KINDS {
        for o in capi::list(client, api_version, kind, namespace).await? {
            if o.owner_references()
                .iter()
                .any(|r| r.kind == "ClusterClass")
            {
                continue;
            }
            out.push(format!("{kind}/{}", o.name_any()));
        }
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for s in secrets
        .list(&ListParams::default().labels(&format!("{CLUSTER_NAME_LABEL}={cluster}")))
        .await?
    {
        out.push(format!("Secret/{}", s.name_any()));
    }
    Ok(out)
}

/// The InfraMachines of the cluster with their `status.initialization.provisioned`.
pub async fn proxmox_machines(client: &Client, namespace: &str) -> Result<Vec<(String, bool)>> {
    Ok(capi::list(client, INFRA, "ProxmoxMachine", namespace)
        .await?
        .iter()
        .map(|m| {
            (
                m.name_any(),
                capi::field(m, "status.initialization.provisioned") == Some(&Value::Bool(true)),
            )
        })
        .collect())
}
