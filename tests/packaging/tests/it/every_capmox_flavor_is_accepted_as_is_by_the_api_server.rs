//! Every flavor CAPMOX v0.9.0 ships (`templates/` of its Go module, its `v1alpha2`
//! manifests) against our CRDs: rendered by `clusterctl generate cluster` from the seed's
//! `capmox.env` plus the variables CAPMOX's docs give for the flavor, applied with
//! `kubectl apply --server-side --validate=strict` (warnings are failures) with the
//! Cluster API managers' webhooks (ClusterClass and Ignition gates on, as the flavors'
//! docs ask), read back in both versions. The ClusterClass flavors: the class, then
//! CAPMOX's example Cluster of it, whose ProxmoxCluster the topology controller must
//! render. Prints the table of flavors.
use anyhow::{Context, Result, ensure};
use kube::api::ListParams;
use kube_world::{Plane, PlaneOpts};
use packaging::{Clusterctl, capmox, get, kubectl_apply, start_managers, wait_class_reconciled};

const V1: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
const V2: &str = "infrastructure.cluster.x-k8s.io/v1alpha2";

/// `(ClusterClass file, CAPMOX's example Cluster of it)`.
const CLASSES: &[(&str, &str)] = &[
    ("cluster-class.yaml", "cluster.yaml"),
    ("cluster-class-calico.yaml", "cluster-calico.yaml"),
    ("cluster-class-cilium.yaml", "cluster-cilium.yaml"),
];

fn clusterctl() -> Result<Clusterctl> {
    let mut clusterctl = Clusterctl::with_capmox_env()?;
    for (name, value) in capmox::FLAVOR_VARIABLES {
        clusterctl = clusterctl.var(name, value);
    }
    Ok(clusterctl)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_capmox_flavor_is_accepted_as_is_by_the_api_server() {
    let plane = Plane::start(PlaneOpts::default())
        .await
        .expect("starting the plane");
    start_managers(&plane).await.expect("starting the managers");
    // The multiple-vlans and load-balancer flavors bring GlobalInClusterIPPools.
    plane.install_ipam_crds().await.expect("IPAM CRDs");
    let capmox = plane.tools().capmox_dir().join("templates");
    let mut table = vec![("flavor".to_string(), "accepted as is".to_string())];
    let mut failures = Vec::new();
    for flavor in capmox::FLAVORS {
        let file = capmox::template_file(flavor);
        let name = capmox::flavor_name(flavor);
        let verdict = template_is_accepted(&plane, name, &capmox.join(&file)).await;
        record(&mut table, &mut failures, &file, verdict);
    }
    for (class, example) in CLASSES {
        let verdict = class_is_accepted(&plane, class, example).await;
        record(&mut table, &mut failures, class, verdict);
    }
    eprintln!("\nCAPMOX v0.9.0 flavors against hyperplug's CRDs\n");
    for (flavor, verdict) in &table {
        eprintln!("| {flavor:<44} | {verdict} |");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

fn record(
    table: &mut Vec<(String, String)>,
    failures: &mut Vec<String>,
    file: &str,
    verdict: Result<String>,
) {
    match verdict {
        Ok(what) => table.push((file.to_string(), format!("yes: {what}"))),
        Err(e) => {
            table.push((file.to_string(), "NO".into()));
            failures.push(format!("{file}: {e:#}"));
        }
    }
}

async fn template_is_accepted(plane: &Plane, name: &str, file: &std::path::Path) -> Result<String> {
    let ns = plane.namespace(&format!("capmox-{name}")).await?;
    let yaml = clusterctl()?.generate_seed_cluster("capmox", file, &ns)?;
    kubectl_apply(plane, &ns, &yaml).context("applying the generated cluster")?;
    let cluster = get(plane, &ns, V2, "ProxmoxCluster", "capmox").await?;
    ensure!(
        cluster["spec"]["controlPlaneEndpoint"]["host"].is_string(),
        "the ProxmoxCluster lost its endpoint: {}",
        cluster["spec"]
    );
    // Every ProxmoxMachineTemplate reads in both versions.
    let templates = plane
        .dynamic_api(V2, "ProxmoxMachineTemplate", Some(&ns))
        .await?
        .list(&Default::default())
        .await?;
    let old = plane
        .dynamic_api(V1, "ProxmoxMachineTemplate", Some(&ns))
        .await?;
    for t in &templates {
        let name = t.metadata.name.as_deref().unwrap_or_default();
        old.get(name)
            .await
            .with_context(|| format!("reading ProxmoxMachineTemplate {name} as v1alpha1"))?;
    }
    Ok(format!(
        "{} objects, {} machine templates",
        packaging::documents(&yaml)?.len(),
        templates.items.len()
    ))
}

/// As CAPMOX's docs say: `kubectl apply -f templates/<class>` and then the example
/// Cluster, both in kubectl's default namespace (the calico and cilium class files name
/// `default` for their ClusterResourceSets).
async fn class_is_accepted(plane: &Plane, class: &str, example: &str) -> Result<String> {
    let ns = "default";
    let capmox = plane.tools().capmox_dir();
    let clusterctl = clusterctl()?;
    let class_yaml = clusterctl.run(&[
        "generate",
        "yaml",
        "--from",
        &capmox.join("templates").join(class).display().to_string(),
    ])?;
    kubectl_apply(plane, ns, &class_yaml).context("applying the ClusterClass")?;
    let class_name = packaging::documents(&class_yaml)?
        .into_iter()
        .find(|d| d["kind"] == "ClusterClass")
        .and_then(|d| d["metadata"]["name"].as_str().map(str::to_string))
        .context("no ClusterClass in the file")?;
    wait_class_reconciled(plane, ns, &class_name).await?;
    let cluster_yaml = std::fs::read_to_string(capmox.join("examples").join(example))?;
    kubectl_apply(plane, ns, &cluster_yaml).context("applying CAPMOX's example Cluster")?;
    let cluster = packaging::documents(&cluster_yaml)?
        .into_iter()
        .find(|d| d["kind"] == "Cluster")
        .and_then(|d| d["metadata"]["name"].as_str().map(str::to_string))
        .context("no Cluster in the example")?;
    // The topology controller renders the ProxmoxCluster from the class's template.
    let rendered =
        ListParams::default().labels(&format!("cluster.x-k8s.io/cluster-name={cluster}"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let infra = plane
            .dynamic_api(V2, "ProxmoxCluster", Some(ns))
            .await?
            .list(&rendered)
            .await?;
        if let Some(pc) = infra.items.first() {
            return Ok(format!(
                "class {class_name}, Cluster {cluster} rendered ProxmoxCluster {}",
                pc.metadata.name.as_deref().unwrap_or_default()
            ));
        }
        if std::time::Instant::now() > deadline {
            let c = get(plane, ns, "cluster.x-k8s.io/v1beta2", "Cluster", &cluster).await?;
            anyhow::bail!(
                "no ProxmoxCluster rendered within 60 s; Cluster status: {}",
                c["status"]
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}
