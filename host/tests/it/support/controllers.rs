//! Controllers of a loaded plugin against a test world, and the objects CAPI would
//! create for them: what tests that run one plugin's controllers share.
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hyperplug::controller::{self, ManagerOptions};
use hyperplug::lease_claims::LeaseClaims;
use hyperplug::metrics::Metrics;
use hyperplug_runtime::{BlobStore, Limits, Plugin, Runtime, RuntimeBuilder};
use k8s_openapi::api::core::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use super::world::World;

/// Controllers for `plugin` against `world`, with `options`, until dropped.
pub struct Controllers(tokio::task::JoinHandle<()>);

impl Drop for Controllers {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub fn start(world: &World, plugin: Plugin, options: ManagerOptions) -> Controllers {
    start_as(world.plane.client(), plugin, options)
}

/// [`start`] with `client` (e.g. another user's, [`kube_world::Plane::client_as`]).
pub fn start_as(client: kube::Client, plugin: Plugin, options: ManagerOptions) -> Controllers {
    Controllers(tokio::spawn(async move {
        controller::run(client, vec![plugin], options, Arc::new(Metrics::default()))
            .await
            .expect("controllers")
    }))
}

pub fn options() -> ManagerOptions {
    ManagerOptions {
        resync: Duration::from_secs(5),
        ..ManagerOptions::default()
    }
}

/// A runtime as `hyperplug run --claims-namespace <the world's>` builds it: claims are
/// Leases there.
pub fn managed(world: &World) -> RuntimeBuilder {
    Runtime::builder(Limits::default())
        .claims(Arc::new(LeaseClaims::new(world.plane.client(), &world.ns)))
}

/// A Machine of cluster `cluster` and its infrastructure machine of `kind` (owned as
/// CAPI owns it), with `annotations` and `spec` (YAML flow maps).
pub async fn machine(
    world: &World,
    cluster: &str,
    kind: &str,
    name: &str,
    annotations: &str,
    spec: &str,
) {
    let metadata = format!("annotations: {annotations}");
    machine_with(world, cluster, kind, name, &metadata, spec).await;
}

/// [`machine`] with `metadata`: lines of the infrastructure machine's metadata (e.g.
/// `finalizers: [...]`), indented by the caller's first line only.
pub async fn machine_with(
    world: &World,
    cluster: &str,
    kind: &str,
    name: &str,
    metadata: &str,
    spec: &str,
) {
    world
        .apply(&format!(
            r##"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata:
  name: {name}
  labels:
    cluster.x-k8s.io/cluster-name: {cluster}
spec:
  clusterName: {cluster}
  bootstrap:
    dataSecretName: {name}-bootstrap
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: {kind}
    name: {name}
---
apiVersion: v1
kind: Secret
metadata:
  name: {name}-bootstrap
  labels:
    cluster.x-k8s.io/cluster-name: {cluster}
type: cluster.x-k8s.io/secret
stringData:
  value: "#cloud-config\n"
  format: cloud-config
"##
        ))
        .await;
    let machines = world.api("cluster.x-k8s.io/v1beta2", "Machine").await;
    let uid = machines.get(name).await.unwrap().uid().unwrap();
    world
        .apply(&format!(
            r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: {kind}
metadata:
  name: {name}
  {metadata}
  labels:
    cluster.x-k8s.io/cluster-name: {cluster}
  ownerReferences:
  - apiVersion: cluster.x-k8s.io/v1beta2
    kind: Machine
    name: {name}
    uid: {uid}
spec: {spec}
"#
        ))
        .await;
}

/// Warning events with `reason`, counted per object they are about.
pub async fn warnings_by_object(world: &World, reason: &str) -> BTreeMap<String, usize> {
    let events: Api<Event> = Api::namespaced(world.plane.client(), &world.ns);
    let mut by_object = BTreeMap::new();
    for e in events.list(&ListParams::default()).await.unwrap().items {
        if e.reason.as_deref() == Some(reason)
            && e.type_.as_deref() == Some("Warning")
            && let Some(name) = e.involved_object.name
        {
            *by_object.entry(name).or_default() += 1;
        }
    }
    by_object
}

/// Warning events about `name` with `reason`.
pub async fn warning_events(world: &World, name: &str, reason: &str) -> usize {
    let by_object = warnings_by_object(world, reason).await;
    by_object.get(name).copied().unwrap_or_default()
}

/// A Cluster and its infrastructure cluster of `kind` (v1alpha1) named `name`, whose
/// `spec:` is `spec` (the rest of the document, as YAML after `spec:`).
fn cluster_pair(name: &str, kind: &str, spec: &str) -> String {
    format!(
        r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: {name}
spec:
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: {kind}
    name: {name}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: {kind}
metadata:
  name: {name}
  labels:
    cluster.x-k8s.io/cluster-name: {name}
spec:{spec}"#
    )
}

/// A Cluster and its HostileCluster with `spec` (a YAML flow map).
pub fn hostile_cluster(name: &str, spec: &str) -> String {
    cluster_pair(name, "HostileCluster", &format!(" {spec}\n"))
}

/// The hostile plugin's kinds on `world` (their CRDs, a credentials Secret
/// `hostile-credentials`), served by controllers of their own, with blobs served.
pub async fn hostile_world() -> (World, Controllers, Runtime, Arc<BlobStore>) {
    let world = World::start_with(pve_sim::Config::fast(), false).await;
    let store = super::blob_store();
    let (runtime, plugin) = super::load_with("hostile", managed(&world).blobs(store.clone())).await;
    let crds = hyperplug_kinds::crds::crds_yaml(plugin.info()).unwrap();
    world.plane.install_crds_yaml(&crds).await.unwrap();
    world
        .apply(
            r#"
apiVersion: v1
kind: Secret
metadata:
  name: hostile-credentials
stringData: {url: "http://127.0.0.1:1", token: t, secret: s}
"#,
        )
        .await;
    let controllers = start(&world, plugin, options());
    (world, controllers, runtime, store)
}

/// A Cluster and its ProxmoxCluster (DHCP: no IPAM needed), with `credentials` as
/// its `credentialsRef` (a YAML flow map) or none.
pub fn proxmox_cluster(name: &str, credentials: Option<&str>) -> String {
    let credentials = credentials
        .map(|c| format!("  credentialsRef: {c}\n"))
        .unwrap_or_default();
    let spec = format!(
        "\n  allowedNodes: [pve1]\n  controlPlaneEndpoint:\n    host: 192.168.1.230\n    port: 6443\n  dnsServers: [192.168.1.1]\n{credentials}"
    );
    cluster_pair(name, "ProxmoxCluster", &spec)
}

/// A small valid ProxmoxMachine spec (v1alpha1) cloning template 9000 on pve1.
pub const PROXMOX_SPEC: &str = "{sourceNode: pve1, templateID: 9000, numCores: 1, memoryMiB: 1024, network: {default: {bridge: vmbr0}}}";
