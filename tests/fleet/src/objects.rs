//! The objects a CAPI user (and CAPI's own controllers) create: per cluster a namespace,
//! the credentials Secret, a Cluster, its ProxmoxCluster and a ProxmoxMachineTemplate;
//! per machine a bootstrap Secret, a Machine referencing it, and a ProxmoxMachine owned
//! by the Machine, made from the template.
use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::world::{VM_MEMORY_MIB, node_name, template_id};

const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

pub fn ar(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}
pub fn capi_cluster() -> ApiResource {
    ar("cluster.x-k8s.io", "v1beta2", "Cluster", "clusters")
}
pub fn capi_machine() -> ApiResource {
    ar("cluster.x-k8s.io", "v1beta2", "Machine", "machines")
}
pub fn infra_cluster() -> ApiResource {
    ar(
        "infrastructure.cluster.x-k8s.io",
        "v1alpha1",
        "ProxmoxCluster",
        "proxmoxclusters",
    )
}
pub fn infra_machine() -> ApiResource {
    ar(
        "infrastructure.cluster.x-k8s.io",
        "v1alpha1",
        "ProxmoxMachine",
        "proxmoxmachines",
    )
}
/// The same kind in the version the API server stores: what machines are created in and
/// what an observer should watch and list, as the manager and Cluster API do. Reading
/// the served `v1alpha1` makes the API server call the manager's conversion webhook for
/// every object of every list and watch event.
pub fn infra_machine_stored() -> ApiResource {
    ar(
        "infrastructure.cluster.x-k8s.io",
        STORED_VERSION,
        "ProxmoxMachine",
        "proxmoxmachines",
    )
}
/// The version the API server stores the provider's kinds in, the last its CRDs' contract
/// label names.
pub const STORED_VERSION: &str = "v1alpha2";
fn infra_machine_template(version: &str) -> ApiResource {
    ar(
        "infrastructure.cluster.x-k8s.io",
        version,
        "ProxmoxMachineTemplate",
        "proxmoxmachinetemplates",
    )
}

/// Create `obj`, retrying while the API server cannot reach the conversion webhook (the
/// manager serves it; a run that kills the manager makes it away for a moment, and a
/// client such as CAPI's controllers retries too). Any other error is returned at once.
async fn create_converted(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
) -> kube::Result<DynamicObject> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match api.create(&PostParams::default(), obj).await {
            Err(kube::Error::Api(e))
                if e.code >= 500
                    && e.message.contains("conversion webhook")
                    && std::time::Instant::now() < until =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
            other => return other,
        }
    }
}

pub fn namespace(cluster: usize) -> String {
    format!("fleet-c{cluster}")
}
pub fn cluster_name(cluster: usize) -> String {
    format!("c{cluster}")
}
pub fn machine_name(cluster: usize, machine: usize) -> String {
    format!("c{cluster}-m{machine}")
}

fn object(v: Value) -> DynamicObject {
    serde_json::from_value(v).expect("a valid object")
}

/// PVE endpoint and token as the credentials Secret carries them.
pub struct Pve {
    pub url: String,
    pub token_id: String,
    pub secret: String,
    pub fingerprint: String,
}

impl Pve {
    /// The simulator's endpoint with `token` (`USER@REALM!TOKENID=SECRET`).
    pub fn of(sim: &pve_sim::RunningSim, token: &str) -> Result<Pve> {
        let (token_id, secret) = token
            .split_once('=')
            .with_context(|| format!("token {token:?} has no secret"))?;
        Ok(Pve {
            url: sim.base_url().to_string(),
            token_id: token_id.into(),
            secret: secret.into(),
            fingerprint: sim.fingerprint().to_string(),
        })
    }
}

/// Namespace, credentials, Cluster and ProxmoxCluster of cluster `c`, pinned to PVE node
/// `node` (1-based): its machines clone that node's template onto that node.
pub async fn create_cluster(client: &Client, c: usize, node: usize, pve: &Pve) -> Result<()> {
    create_cluster_with(client, c, node, pve, &json!({})).await
}

/// [`create_cluster`] with `extra_spec` merged into the ProxmoxCluster's spec (e.g. an
/// `ipv4Config` pool, so its machines get static addresses through IPAM).
pub async fn create_cluster_with(
    client: &Client,
    c: usize,
    node: usize,
    pve: &Pve,
    extra_spec: &Value,
) -> Result<()> {
    let ns = namespace(c);
    let name = cluster_name(c);
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
        )
        .await
        .with_context(|| format!("creating namespace {ns}"))?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "pve-credentials"},
                "stringData": {
                    "url": pve.url, "token": pve.token_id, "secret": pve.secret,
                    "fingerprint": pve.fingerprint,
                },
            }))?,
        )
        .await?;
    Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &capi_cluster())
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": name},
                "spec": {
                    "clusterNetwork": {"pods": {"cidrBlocks": ["10.44.0.0/16"]}},
                    "infrastructureRef": {
                        "apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "ProxmoxCluster", "name": name,
                    },
                },
            })),
        )
        .await
        .with_context(|| format!("creating Cluster {ns}/{name}"))?;
    let mut spec = json!({
        "allowedNodes": [node_name(node)],
        "controlPlaneEndpoint": {"host": format!("192.168.{c}.1"), "port": 6443},
        "dnsServers": ["192.168.1.1"],
        "credentialsRef": {"name": "pve-credentials"},
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        spec.extend(extra.clone());
    }
    create_converted(
        &Api::namespaced_with(client.clone(), &ns, &infra_cluster()),
        &object(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "ProxmoxCluster",
            "metadata": {"name": name, "labels": {CLUSTER_NAME_LABEL: name}},
            "spec": spec,
        })),
    )
    .await
    .with_context(|| format!("creating ProxmoxCluster {ns}/{name}"))?;
    Ok(())
}

/// A ProxmoxMachine just created.
#[derive(Debug, Clone)]
pub struct Created {
    /// When (Unix ms) it was sent: where the machine's clock starts.
    pub at_ms: u64,
    /// Its UID (what the plugin marks its VM with).
    pub uid: String,
}

/// A cluster's ProxmoxMachineTemplate, as CAPI's MachineSet reads it: what it copies into
/// every ProxmoxMachine it creates.
#[derive(Debug, Clone)]
pub struct MachineTemplate {
    pub name: String,
    /// `spec.template.spec` in the version the API server stores.
    pub spec: Value,
}

/// Cluster `c`'s ProxmoxMachineTemplate, written in the served `v1alpha1` as
/// `clusterctl generate cluster` writes it: node `node`'s template, plus `extra_spec`'s
/// keys (e.g. `vmIDRange`). It is read back in the stored version, as CAPI reads it (the
/// version the CRD's contract label names last), so machines are created the way CAPI
/// creates them and not in a version every later write has to be converted to.
pub async fn create_machine_template(
    client: &Client,
    c: usize,
    node: usize,
    extra_spec: &Value,
) -> Result<MachineTemplate> {
    let ns = namespace(c);
    let name = format!("{}-workers", cluster_name(c));
    let mut spec = json!({
        "sourceNode": node_name(node),
        "templateID": template_id(node),
        "numCores": 2,
        "memoryMiB": VM_MEMORY_MIB,
        "network": {"default": {"bridge": "vmbr0"}},
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        spec.extend(extra.clone());
    }
    create_converted(
        &Api::namespaced_with(client.clone(), &ns, &infra_machine_template("v1alpha1")),
        &object(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
            "kind": "ProxmoxMachineTemplate",
            "metadata": {"name": name},
            "spec": {"template": {"spec": spec}},
        })),
    )
    .await
    .with_context(|| format!("creating ProxmoxMachineTemplate {ns}/{name}"))?;
    let stored = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &ns,
        &infra_machine_template(STORED_VERSION),
    )
    .get(&name)
    .await
    .with_context(|| format!("reading ProxmoxMachineTemplate {ns}/{name}"))?;
    let spec = stored
        .data
        .pointer("/spec/template/spec")
        .cloned()
        .with_context(|| {
            format!("ProxmoxMachineTemplate {ns}/{name} read back without its spec")
        })?;
    Ok(MachineTemplate { name, spec })
}

/// Bootstrap Secret, Machine and ProxmoxMachine (owned by the Machine), in that order.
/// The ProxmoxMachine is made from `template` as CAPI's MachineSet makes it: its spec,
/// the cloned-from annotations, in the stored version.
pub async fn create_machine(
    client: &Client,
    c: usize,
    m: usize,
    template: &MachineTemplate,
) -> Result<Created> {
    let ns = namespace(c);
    let cluster = cluster_name(c);
    let name = machine_name(c, m);
    let bootstrap = format!("{name}-bootstrap");
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": bootstrap, "labels": {CLUSTER_NAME_LABEL: cluster}},
                "type": "cluster.x-k8s.io/secret",
                "stringData": {"value": "#cloud-config\n", "format": "cloud-config"},
            }))?,
        )
        .await?;
    let machine = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &capi_machine())
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                "metadata": {"name": name, "labels": {CLUSTER_NAME_LABEL: cluster}},
                "spec": {
                    "clusterName": cluster,
                    "bootstrap": {"dataSecretName": bootstrap},
                    "infrastructureRef": {
                        "apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "ProxmoxMachine", "name": name,
                    },
                },
            })),
        )
        .await
        .with_context(|| format!("creating Machine {ns}/{name}"))?;
    let at_ms = crate::now_ms();
    // In the stored version no conversion is asked for: a plain create.
    let infra = Api::namespaced_with(client.clone(), &ns, &infra_machine_stored())
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": format!("infrastructure.cluster.x-k8s.io/{STORED_VERSION}"),
                "kind": "ProxmoxMachine",
                "metadata": {
                    "name": name,
                    "labels": {CLUSTER_NAME_LABEL: cluster},
                    "annotations": {
                        "cluster.x-k8s.io/cloned-from-name": template.name,
                        "cluster.x-k8s.io/cloned-from-groupkind":
                            "ProxmoxMachineTemplate.infrastructure.cluster.x-k8s.io",
                    },
                    "ownerReferences": [{
                        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                        "name": name, "uid": machine.uid().unwrap_or_default(),
                    }],
                },
                "spec": template.spec,
            })),
        )
        .await
        .with_context(|| format!("creating ProxmoxMachine {ns}/{name}"))?;
    Ok(Created {
        at_ms,
        uid: infra.uid().unwrap_or_default(),
    })
}

/// Deletes a Machine the way a scale-down does; CAPI deletes its ProxmoxMachine.
pub async fn delete_machine(client: &Client, c: usize, m: usize) -> Result<()> {
    let ns = namespace(c);
    let name = machine_name(c, m);
    Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &capi_machine())
        .delete(&name, &DeleteParams::background())
        .await
        .with_context(|| format!("deleting Machine {ns}/{name}"))?;
    Api::<Secret>::namespaced(client.clone(), &ns)
        .delete(&format!("{name}-bootstrap"), &DeleteParams::default())
        .await?;
    Ok(())
}

/// Deletes the Cluster (CAPI deletes its ProxmoxCluster) and then the namespace.
pub async fn delete_cluster(client: &Client, c: usize) -> Result<()> {
    let ns = namespace(c);
    Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &capi_cluster())
        .delete(&cluster_name(c), &DeleteParams::background())
        .await
        .with_context(|| format!("deleting Cluster {ns}"))?;
    Ok(())
}

/// How many objects of a kind exist in all namespaces.
pub async fn count(client: &Client, ar: &ApiResource) -> Result<usize> {
    Ok(Api::<DynamicObject>::all_with(client.clone(), ar)
        .list_metadata(&Default::default())
        .await?
        .items
        .len())
}

/// Whether all `want` ProxmoxMachineTemplates have been described (`status.capacity`
/// set): the manager's one write per template is then behind us, not in a measurement.
pub async fn all_templates_described(client: &Client, want: usize) -> Result<bool> {
    let list =
        Api::<DynamicObject>::all_with(client.clone(), &infra_machine_template(STORED_VERSION))
            .list(&Default::default())
            .await?;
    Ok(list.items.len() == want
        && list
            .items
            .iter()
            .all(|o| o.data.pointer("/status/capacity").is_some()))
}

/// Whether every object of a kind has `status.initialization.provisioned`.
pub async fn all_provisioned(client: &Client, ar: &ApiResource, want: usize) -> Result<bool> {
    let list = Api::<DynamicObject>::all_with(client.clone(), ar)
        .list(&Default::default())
        .await?;
    Ok(list.items.len() == want
        && list.items.iter().all(|o| {
            o.data
                .pointer("/status/initialization/provisioned")
                .and_then(Value::as_bool)
                == Some(true)
        }))
}
