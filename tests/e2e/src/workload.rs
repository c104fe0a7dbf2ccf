//! What kubeadm and the kubelet would do on the machines, for a cluster whose VMs are
//! simulated: no VM boots, yet Cluster API waits on two things that happen inside them.
//!
//! * `kubeadm init` on the first control-plane machine starts the workload API server
//!   on the control-plane endpoint and writes `kube-system/kubeadm-config`; the
//!   control-plane provider marks the control plane initialized when it can read that
//!   ConfigMap, and only then does the bootstrap provider produce worker join data.
//! * The kubelet registers a Node carrying the machine's providerID; the Machine
//!   controller links the two and the Machine becomes `Running`.
//!
//! [`WorkloadSim`] hands Cluster API the cluster CA first (the `<cluster>-ca` Secret,
//! as users who bring their own CA do), so that a real kube-apiserver started on the
//! endpoint with that CA is trusted by the kubeconfig Cluster API generates. It then
//! watches the cluster's Machines and pve-sim's VMs: a Machine whose VM (found by the
//! SMBIOS UUID in its providerID) is running gets its Node, once.
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret};
use kube::api::{Api, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use kube_world::certs::Ca;
use kube_world::{Plane, PlaneOpts};
use pve_sim::StateHandle;
use serde_json::{Value, json};

use crate::capi::{self, CAPI, CLUSTER_NAME_LABEL, field};
use crate::progress::say;

const CONTROL_PLANE_LABEL: &str = "cluster.x-k8s.io/control-plane";

/// The simulated insides of one workload cluster's machines.
pub struct WorkloadSim {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

struct Shared {
    cluster: String,
    namespace: String,
    endpoint: SocketAddr,
    ca: Arc<Ca>,
    plane: tokio::sync::Mutex<Option<Plane>>,
    nodes: Mutex<BTreeSet<String>>,
    error: Mutex<Option<String>>,
}

impl WorkloadSim {
    /// Creates the cluster CA Secret (before the cluster is applied) and starts
    /// watching. `endpoint` is the cluster's control-plane endpoint.
    pub async fn prepare(
        management: &Client,
        namespace: &str,
        cluster: &str,
        endpoint: SocketAddr,
        pve: StateHandle,
    ) -> Result<WorkloadSim> {
        let ca = Arc::new(Ca::new(&format!("{cluster}-ca"))?);
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(format!("{cluster}-ca")),
                labels: Some([(CLUSTER_NAME_LABEL.to_string(), cluster.to_string())].into()),
                ..Default::default()
            },
            type_: Some("cluster.x-k8s.io/secret".into()),
            data: Some(
                [
                    (
                        "tls.crt".to_string(),
                        ByteString(ca.cert_pem().as_bytes().to_vec()),
                    ),
                    (
                        "tls.key".to_string(),
                        ByteString(ca.key_pem().as_bytes().to_vec()),
                    ),
                ]
                .into(),
            ),
            ..Default::default()
        };
        Api::<Secret>::namespaced(management.clone(), namespace)
            .create(&PostParams::default(), &secret)
            .await
            .context("creating the cluster CA Secret")?;
        let shared = Arc::new(Shared {
            cluster: cluster.to_string(),
            namespace: namespace.to_string(),
            endpoint,
            ca,
            plane: tokio::sync::Mutex::new(None),
            nodes: Mutex::new(BTreeSet::new()),
            error: Mutex::new(None),
        });
        let task = tokio::spawn(run(shared.clone(), management.clone(), pve));
        Ok(WorkloadSim { shared, task })
    }

    /// Names of the Nodes registered so far.
    pub fn nodes(&self) -> Vec<String> {
        self.shared.nodes.lock().unwrap().iter().cloned().collect()
    }

    /// The last error of the watch loop, if any (it keeps retrying).
    pub fn last_error(&self) -> Option<String> {
        self.shared.error.lock().unwrap().clone()
    }

    /// The workload API server's admin kubeconfig, once it runs.
    pub async fn kubeconfig(&self) -> Option<std::path::PathBuf> {
        let plane = self.shared.plane.lock().await;
        plane.as_ref().map(|p| p.kubeconfig_path().to_path_buf())
    }

    /// Stops the workload API server and the watch loop.
    pub async fn stop(self) {
        self.task.abort();
        if let Some(p) = self.shared.plane.lock().await.take() {
            p.stop();
        }
    }
}

async fn run(shared: Arc<Shared>, management: Client, pve: StateHandle) {
    loop {
        let result = step(&shared, &management, &pve).await;
        *shared.error.lock().unwrap() = result.err().map(|e| format!("{e:#}"));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The SMBIOS UUIDs of pve-sim's running VMs.
fn running_vm_uuids(pve: &StateHandle) -> BTreeSet<String> {
    pve.vms()
        .iter()
        .filter(|vm| vm["status"] == "running")
        .filter_map(|vm| vm["config"]["smbios1"].as_str().map(str::to_string))
        .filter_map(|s| {
            s.split(',')
                .find_map(|kv| kv.strip_prefix("uuid=").map(|u| u.to_ascii_lowercase()))
        })
        .collect()
}

async fn step(shared: &Shared, management: &Client, pve: &StateHandle) -> Result<()> {
    let machines = capi::api(management, CAPI, "Machine", &shared.namespace)
        .await?
        .list(
            &kube::api::ListParams::default()
                .labels(&format!("{CLUSTER_NAME_LABEL}={}", shared.cluster)),
        )
        .await?
        .items;
    let running = running_vm_uuids(pve);
    let booted: Vec<&DynamicObject> = machines
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .filter(|m| {
            field(m, "spec.providerID")
                .and_then(Value::as_str)
                .and_then(|p| p.strip_prefix("proxmox://"))
                .is_some_and(|uuid| running.contains(&uuid.to_ascii_lowercase()))
        })
        .collect();
    let mut plane = shared.plane.lock().await;
    if plane.is_none() {
        let Some(first) = booted
            .iter()
            .find(|m| m.labels().contains_key(CONTROL_PLANE_LABEL))
        else {
            return Ok(());
        };
        say(format!(
            "{}: control-plane VM of {} is running; starting the workload API server on {} (what kubeadm init does)",
            shared.cluster,
            first.name_any(),
            shared.endpoint
        ));
        let p = Plane::start(PlaneOpts {
            ca: Some(shared.ca.clone()),
            address: Some(shared.endpoint),
            ..PlaneOpts::default()
        })
        .await
        .context("starting the workload API server")?;
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some("kubeadm-config".into()),
                ..Default::default()
            },
            data: Some(
                [(
                    "ClusterConfiguration".to_string(),
                    format!(
                        "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nclusterName: {}\ncontrolPlaneEndpoint: {}\n",
                        shared.cluster, shared.endpoint
                    ),
                )]
                .into(),
            ),
            ..Default::default()
        };
        Api::<ConfigMap>::namespaced(p.client(), "kube-system")
            .create(&PostParams::default(), &cm)
            .await
            .context("writing kube-system/kubeadm-config")?;
        *plane = Some(p);
    }
    let Some(p) = plane.as_ref() else {
        return Ok(());
    };
    let nodes: Api<Node> = Api::all(p.client());
    for m in booted {
        let name = m.name_any();
        if shared.nodes.lock().unwrap().contains(&name) {
            continue;
        }
        let provider_id = field(m, "spec.providerID")
            .and_then(Value::as_str)
            .unwrap_or_default();
        // What kubeadm adds to a control-plane node: its role label and taint.
        let control_plane = m.labels().contains_key(CONTROL_PLANE_LABEL);
        let mut labels = json!({"kubernetes.io/hostname": name});
        let mut taints = json!([]);
        if control_plane {
            labels["node-role.kubernetes.io/control-plane"] = json!("");
            taints =
                json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]);
        }
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"providerID": provider_id, "taints": taints},
        }))?;
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e).context("registering a Node"),
        }
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        nodes
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": node_conditions(&now)}})),
            )
            .await
            .context("marking the Node Ready")?;
        say(format!(
            "{}: Node {name} joined with providerID {provider_id} (what the kubelet does)",
            shared.cluster
        ));
        shared.nodes.lock().unwrap().insert(name);
    }
    Ok(())
}

/// The conditions a healthy kubelet posts (Cluster API's NodeHealthy reads all four).
fn node_conditions(now: &str) -> Value {
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({
            "type": kind, "status": status, "reason": reason,
            "message": format!("{message} (simulated)"),
            "lastHeartbeatTime": now, "lastTransitionTime": now,
        })
    };
    json!([
        condition(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available"
        ),
        condition(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure"
        ),
        condition(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available"
        ),
        condition(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status"
        ),
    ])
}
