//! The seed's flow, up to `kubectl apply -f capi-quickstart.yaml`: with the seed's
//! `capmox.env` (pointed at pve-sim) in the environment,
//!
//!     clusterctl generate cluster capi-quickstart --from <template> \
//!       --kubernetes-version v1.33.0 --control-plane-machine-count=1 --worker-machine-count=1
//!
//! yields YAML that a real API server accepts as is (`kubectl apply --server-side
//! --validate=strict`, warnings are failures), with the Cluster API core and kubeadm
//! managers serving their admission webhooks and our CRDs installed. Every flavor, each
//! in its own namespace; the topology flavor after its ClusterClass, whose patches the
//! topology controller must then apply to the ProxmoxCluster it creates.
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use kube_world::{Plane, PlaneOpts};
use packaging::{
    CLUSTER_CLASS, Clusterctl, FLAVORS, capmox_var, get, kubectl_apply, repo_root, start_managers,
    wait_class_reconciled,
};
use serde_json::{Value, json};

const INFRA: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_flavor_generated_from_capmox_env_is_accepted_as_is_by_the_api_server() {
    let plane = Plane::start(PlaneOpts::default())
        .await
        .expect("starting the plane");
    start_managers(&plane).await.expect("starting the managers");
    let mut failures = Vec::new();
    for (flavor, file) in FLAVORS {
        let name = if flavor.is_empty() { "default" } else { flavor };
        if let Err(e) = flavor_is_accepted(&plane, name, file).await {
            failures.push(format!("flavor {name} ({file}): {e:#}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

async fn flavor_is_accepted(plane: &Plane, name: &str, file: &str) -> Result<()> {
    let ns = plane.namespace(&format!("flavor-{name}")).await?;
    let templates = repo_root().join("templates");
    let clusterctl = Clusterctl::with_capmox_env()?;
    if name == "topology" {
        let class = clusterctl.run(&[
            "generate",
            "yaml",
            "--from",
            &templates.join(CLUSTER_CLASS.1).display().to_string(),
        ])?;
        kubectl_apply(plane, &ns, &class).context("applying the ClusterClass")?;
        wait_class_reconciled(plane, &ns, CLUSTER_CLASS.0).await?;
    }
    let yaml = clusterctl.generate_seed_cluster("capi-quickstart", &templates.join(file), &ns)?;
    kubectl_apply(plane, &ns, &yaml).context("applying the generated cluster")?;

    let cluster = get(
        plane,
        &ns,
        "cluster.x-k8s.io/v1beta2",
        "Cluster",
        "capi-quickstart",
    )
    .await?;
    ensure!(cluster["metadata"]["namespace"] == ns.as_str());
    if name == "topology" {
        topology_rendered_the_proxmox_cluster(plane, &ns).await
    } else {
        objects_carry_the_capmox_values(plane, &ns, name == "dhcp").await
    }
}

fn list(vars: &str) -> Value {
    json!(
        vars.trim_matches(['[', ']'])
            .split(',')
            .map(str::trim)
            .collect::<Vec<_>>()
    )
}

async fn objects_carry_the_capmox_values(plane: &Plane, ns: &str, dhcp: bool) -> Result<()> {
    let pc = get(plane, ns, INFRA, "ProxmoxCluster", "capi-quickstart").await?;
    let spec = &pc["spec"];
    ensure!(
        spec["allowedNodes"] == list(&capmox_var("ALLOWED_NODES")),
        "allowedNodes: {spec}"
    );
    ensure!(
        spec["dnsServers"] == list(&capmox_var("DNS_SERVERS")),
        "dnsServers: {spec}"
    );
    ensure!(
        spec["controlPlaneEndpoint"]
            == json!({"host": capmox_var("CONTROL_PLANE_ENDPOINT_IP"), "port": 6443}),
        "controlPlaneEndpoint: {spec}"
    );
    ensure!(
        spec["schedulerHints"]["memoryAdjustment"] == 0,
        "schedulerHints: {spec}"
    );
    if dhcp {
        ensure!(
            spec["ipv4Config"].is_null(),
            "DHCP flavor with ipv4Config: {spec}"
        );
    } else {
        ensure!(
            spec["ipv4Config"]
                == json!({
                    "addresses": list(&capmox_var("NODE_IP_RANGES")),
                    "prefix": capmox_var("IP_PREFIX").parse::<u8>()?,
                    "gateway": capmox_var("GATEWAY"),
                    // Stored as v1alpha2, whose schema defaults the route metric.
                    "metric": 100,
                }),
            "ipv4Config: {spec}"
        );
    }
    for template in ["capi-quickstart-control-plane", "capi-quickstart-workers"] {
        let pmt = get(plane, ns, INFRA, "ProxmoxMachineTemplate", template).await?;
        let m = &pmt["spec"]["template"]["spec"];
        let mut want = json!({
            "sourceNode": capmox_var("PROXMOX_SOURCENODE"),
            "templateID": capmox_var("TEMPLATE_VMID").parse::<u32>()?,
            "full": true,
            "format": capmox_var("FILE_STORAGE_FORMAT"),
            "storage": capmox_var("STORAGE_NODE"),
            "numSockets": capmox_var("NUM_SOCKETS").parse::<u32>()?,
            "numCores": capmox_var("NUM_CORES").parse::<u32>()?,
            "memoryMiB": capmox_var("MEMORY_MIB").parse::<u32>()?,
            "disks": {"bootVolume": {
                "disk": capmox_var("BOOT_VOLUME_DEVICE"),
                "sizeGb": capmox_var("BOOT_VOLUME_SIZE").parse::<u32>()?,
            }},
            "network": {"default": {"bridge": capmox_var("BRIDGE"), "model": capmox_var("NETWORK_MODEL")}},
        });
        if dhcp {
            want["network"]["default"]["dhcp4"] = json!(true);
        }
        ensure!(*m == want, "{template}: {m}\nwant {want}");
    }
    let kcp = get(
        plane,
        ns,
        "controlplane.cluster.x-k8s.io/v1beta2",
        "KubeadmControlPlane",
        "capi-quickstart-control-plane",
    )
    .await?;
    ensure!(kcp["spec"]["version"] == packaging::SEED_KUBERNETES_VERSION);
    ensure!(kcp["spec"]["replicas"] == 1);
    let config = &kcp["spec"]["kubeadmConfigSpec"];
    let kube_vip = config["files"]
        .as_array()
        .and_then(|f| {
            f.iter()
                .find(|f| f["path"] == "/etc/kubernetes/manifests/kube-vip.yaml")
        })
        .context("no kube-vip manifest in the control plane files")?;
    let manifest: Value = serde_yaml::from_str(kube_vip["content"].as_str().unwrap_or_default())?;
    let address = manifest["spec"]["containers"][0]["env"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["name"] == "address"))
        .context("kube-vip without address")?;
    ensure!(address["value"] == capmox_var("CONTROL_PLANE_ENDPOINT_IP").as_str());
    ensure!(config["users"][0]["sshAuthorizedKeys"] == json!([capmox_var("VM_SSH_KEYS")]));
    let md = get(
        plane,
        ns,
        "cluster.x-k8s.io/v1beta2",
        "MachineDeployment",
        "capi-quickstart-workers",
    )
    .await?;
    ensure!(
        md["spec"]["replicas"] == 1,
        "worker replicas: {}",
        md["spec"]
    );
    let kct = get(
        plane,
        ns,
        "bootstrap.cluster.x-k8s.io/v1beta2",
        "KubeadmConfigTemplate",
        "capi-quickstart-workers",
    )
    .await?;
    ensure!(
        kct["spec"]["template"]["spec"]["users"][0]["sshAuthorizedKeys"]
            == json!([capmox_var("VM_SSH_KEYS")])
    );
    Ok(())
}

/// The topology controller (nothing of ours runs) creates the ProxmoxCluster from the
/// ClusterClass's template with the Cluster's variables patched in.
async fn topology_rendered_the_proxmox_cluster(plane: &Plane, ns: &str) -> Result<()> {
    let api = plane.dynamic_api(INFRA, "ProxmoxCluster", Some(ns)).await?;
    let deadline = Instant::now() + Duration::from_secs(90);
    let pc = loop {
        let list = api.list(&Default::default()).await?;
        if let Some(pc) = list.items.into_iter().next() {
            break serde_json::to_value(pc)?;
        }
        if Instant::now() > deadline {
            let cluster = get(
                plane,
                ns,
                "cluster.x-k8s.io/v1beta2",
                "Cluster",
                "capi-quickstart",
            )
            .await?;
            bail!(
                "no ProxmoxCluster from the topology within 90 s; Cluster status: {}",
                cluster["status"]
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let spec = &pc["spec"];
    ensure!(
        spec["controlPlaneEndpoint"]
            == json!({"host": capmox_var("CONTROL_PLANE_ENDPOINT_IP"), "port": 6443}),
        "controlPlaneEndpoint: {spec}"
    );
    ensure!(
        spec["allowedNodes"] == list(&capmox_var("ALLOWED_NODES")),
        "allowedNodes: {spec}"
    );
    ensure!(
        spec["dnsServers"] == list(&capmox_var("DNS_SERVERS")),
        "dnsServers: {spec}"
    );
    ensure!(
        spec["ipv4Config"]["addresses"] == list(&capmox_var("NODE_IP_RANGES")),
        "ipv4Config: {spec}"
    );
    ensure!(
        spec["ipv4Config"]["gateway"] == capmox_var("GATEWAY").as_str(),
        "ipv4Config: {spec}"
    );
    ensure!(
        spec["schedulerHints"]["memoryAdjustment"] == 0,
        "schedulerHints: {spec}"
    );

    // The control plane: kube-vip at the endpoint, root's SSH keys.
    let api = plane
        .dynamic_api(
            "controlplane.cluster.x-k8s.io/v1beta2",
            "KubeadmControlPlane",
            Some(ns),
        )
        .await?;
    let kcp = loop {
        if let Some(kcp) = api
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .next()
        {
            break serde_json::to_value(kcp)?;
        }
        if Instant::now() > deadline {
            bail!("no KubeadmControlPlane from the topology within 90 s");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let config = &kcp["spec"]["kubeadmConfigSpec"];
    ensure!(
        kcp["spec"]["version"] == packaging::SEED_KUBERNETES_VERSION,
        "{}",
        kcp["spec"]
    );
    ensure!(
        config["users"][0]["sshAuthorizedKeys"] == json!([capmox_var("VM_SSH_KEYS")]),
        "users: {config}"
    );
    let content = config["files"][0]["content"].as_str().unwrap_or_default();
    let manifest: Value = serde_yaml::from_str(content).context("kube-vip manifest")?;
    let env = &manifest["spec"]["containers"][0]["env"];
    ensure!(
        env.as_array()
            .is_some_and(|e| e.iter().any(|e| e["name"] == "address"
                && e["value"] == capmox_var("CONTROL_PLANE_ENDPOINT_IP").as_str())),
        "kube-vip env: {env}"
    );
    Ok(())
}
