//! `clusterctl generate provider --infrastructure proxmox`, with a local `clusterctl.yaml`
//! provider override pointing at the folder `scripts/release.sh` renders, reads our
//! metadata.yaml and components and yields what clusterctl's contract asks for: one
//! Namespace holding every namespaced object, the provider label everywhere, the CRDs
//! with the contract label, a `manager` container, the credentials Secret from the
//! seed's `capmox.env`.
use std::collections::BTreeSet;

use packaging::{Clusterctl, Release, capmox_var, documents, the_one};
use serde_json::Value;

const PROVIDER_LABEL: &str = "cluster.x-k8s.io/provider";
const CONTRACT_LABEL: &str = "cluster.x-k8s.io/v1beta2";

fn is_cluster_scoped(kind: &str) -> bool {
    matches!(
        kind,
        "Namespace"
            | "CustomResourceDefinition"
            | "ClusterRole"
            | "ClusterRoleBinding"
            | "MutatingWebhookConfiguration"
    )
}

fn generate_provider(release: &Release, clusterctl: &Clusterctl, extra: &[&str]) -> Vec<Value> {
    let config = release.clusterctl_config().unwrap();
    let config = config.display().to_string();
    let mut args = vec![
        "generate",
        "provider",
        "--infrastructure",
        "proxmox",
        "--config",
        &config,
    ];
    args.extend_from_slice(extra);
    documents(&clusterctl.run(&args).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_generate_provider_reads_the_release_folder_into_a_valid_component_set() {
    let release = Release::render().await.unwrap();
    let clusterctl = Clusterctl::with_capmox_env().unwrap();
    let docs = generate_provider(&release, &clusterctl, &[]);

    // Exactly one Namespace, holding every namespaced object.
    let ns = the_one(&docs, "Namespace")["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(ns, "hyperplug-system");
    for d in &docs {
        let kind = d["kind"].as_str().unwrap();
        let name = d["metadata"]["name"].as_str().unwrap();
        assert_eq!(
            d["metadata"]["labels"][PROVIDER_LABEL], "infrastructure-proxmox",
            "{kind} {name} lacks the provider label"
        );
        if is_cluster_scoped(kind) {
            assert!(
                d["metadata"]["namespace"].is_null(),
                "{kind} {name} is cluster-scoped"
            );
        } else {
            assert_eq!(d["metadata"]["namespace"], ns.as_str(), "{kind} {name}");
        }
    }

    // The CRDs of the bundled plugin, with the contract label naming their versions.
    let crds: BTreeSet<&str> = docs
        .iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .map(|d| d["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        crds,
        BTreeSet::from([
            "proxmoxclusters.infrastructure.cluster.x-k8s.io",
            "proxmoxclustertemplates.infrastructure.cluster.x-k8s.io",
            "proxmoxmachines.infrastructure.cluster.x-k8s.io",
            "proxmoxmachinetemplates.infrastructure.cluster.x-k8s.io",
        ])
    );
    for crd in docs
        .iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
    {
        let versions: Vec<&str> = crd["spec"]["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            crd["metadata"]["labels"][CONTRACT_LABEL],
            versions.join("_")
        );
    }

    // The finalizer webhook calls the manager through the webhook Service, its CA
    // injected by cert-manager, and never refuses a create.
    let hook = the_one(&docs, "MutatingWebhookConfiguration");
    let webhook = &hook["webhooks"][0];
    assert_eq!(webhook["clientConfig"]["service"]["namespace"], ns.as_str());
    assert_eq!(
        webhook["clientConfig"]["service"]["name"],
        "hyperplug-webhook-service"
    );
    assert_eq!(webhook["clientConfig"]["service"]["path"], "/finalizer");
    assert_eq!(webhook["failurePolicy"], "Ignore");
    assert_eq!(
        hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        format!("{ns}/hyperplug-serving-cert").as_str()
    );

    // The manager: container `manager`, the release image, the bundled plugin, the flags.
    let deployment = the_one(&docs, "Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let manager = &containers[0];
    assert_eq!(manager["name"], "manager");
    assert_eq!(
        manager["image"],
        format!("ghcr.io/hyperplug/hyperplug:{}", release.version).as_str()
    );
    let args: Vec<&str> = manager["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    for want in [
        "run",
        "--plugin=/plugins/proxmox.wasm",
        "--plugin-oci-cache=/var/cache/hyperplug/oci",
        "--default-credentials-secret=proxmox=$(POD_NAMESPACE)/hyperplug-proxmox-credentials",
        "--ownership-key-secret=$(POD_NAMESPACE)/hyperplug-ownership-key",
        "--plugin-pins-configmap=$(POD_NAMESPACE)/hyperplug-plugin-pins",
        "--metrics-addr=0.0.0.0:8080",
        "--health-addr=0.0.0.0:8081",
        "--leader-elect",
    ] {
        assert!(args.contains(&want), "manager args {args:?} lack {want}");
    }
    let env = |name: &str| -> Value {
        manager["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no env {name}"))
    };
    // Unset variable: an empty value (clusterctl drops `value: ""`, the kubelet then sets
    // the variable to ""), which the manager reads as "all namespaces".
    let watch = &env("HYPERPLUG_NAMESPACE")["value"];
    assert!(
        watch.is_null() || *watch == "",
        "HYPERPLUG_NAMESPACE {watch}"
    );
    assert_eq!(
        env("POD_NAMESPACE")["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    assert_eq!(manager["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(manager["readinessProbe"]["httpGet"]["path"], "/readyz");
    let ports: BTreeSet<(&str, i64)> = manager["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap(),
                p["containerPort"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ports,
        BTreeSet::from([
            ("metrics", 8080),
            ("healthz", 8081),
            ("webhook-server", 9443)
        ])
    );
    // The conversion webhook's certificate, mounted where --webhook-cert-dir reads it.
    let mount = manager["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "webhook-cert")
        .expect("the webhook certificate is mounted");
    assert!(
        args.contains(
            &format!(
                "--webhook-cert-dir={}",
                mount["mountPath"].as_str().unwrap()
            )
            .as_str()
        )
    );
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "webhook-cert")
        .unwrap();
    assert_eq!(
        volume["secret"]["secretName"],
        the_one(&docs, "Certificate")["spec"]["secretName"]
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(manager["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        manager["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert_eq!(pod["serviceAccountName"], "hyperplug-manager");

    // The default credentials, from capmox.env.
    let secret = the_one(&docs, "Secret");
    assert_eq!(secret["metadata"]["name"], "hyperplug-proxmox-credentials");
    let data = &secret["stringData"];
    assert_eq!(data["url"], capmox_var("PROXMOX_URL").as_str());
    assert_eq!(data["token"], capmox_var("PROXMOX_TOKEN").as_str());
    assert_eq!(data["secret"], capmox_var("PROXMOX_SECRET").as_str());
    assert_eq!(data["insecure"], "false");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_describes_the_provider_variables_and_image() {
    let release = Release::render().await.unwrap();
    let config = release.clusterctl_config().unwrap().display().to_string();
    let out = Clusterctl::with_capmox_env()
        .unwrap()
        .run(&[
            "generate",
            "provider",
            "--infrastructure",
            "proxmox",
            "--config",
            &config,
            "--describe",
        ])
        .unwrap();
    let vars: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("Variables:"))
        .skip(1)
        .take_while(|l| l.starts_with("  - "))
        .map(|l| l.trim_start_matches("  - "))
        .collect();
    assert_eq!(
        vars,
        [
            "HYPERPLUG_LOG",
            "HYPERPLUG_PLUGIN",
            "HYPERPLUG_WATCH_FILTER",
            "HYPERPLUG_WATCH_NAMESPACE",
            "PROXMOX_FINGERPRINT",
            "PROXMOX_INSECURE",
            "PROXMOX_SECRET",
            "PROXMOX_TOKEN",
            "PROXMOX_URL"
        ],
        "{out}"
    );
    assert!(
        out.contains(&format!("Version:            {}", release.version)),
        "{out}"
    );
    assert!(
        out.contains("TargetNamespace:    hyperplug-system"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_namespace_and_a_watch_namespace_reach_every_object_and_the_manager() {
    let release = Release::render().await.unwrap();
    let clusterctl = Clusterctl::with_capmox_env()
        .unwrap()
        .var("HYPERPLUG_WATCH_NAMESPACE", "tenants")
        .var("PROXMOX_INSECURE", "true");
    let docs = generate_provider(
        &release,
        &clusterctl,
        &["--target-namespace", "capmox-system"],
    );
    assert_eq!(
        the_one(&docs, "Namespace")["metadata"]["name"],
        "capmox-system"
    );
    for d in docs
        .iter()
        .filter(|d| !is_cluster_scoped(d["kind"].as_str().unwrap()))
    {
        assert_eq!(d["metadata"]["namespace"], "capmox-system", "{}", d["kind"]);
    }
    for binding in docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRoleBinding" || d["kind"] == "RoleBinding")
    {
        assert_eq!(binding["subjects"][0]["namespace"], "capmox-system");
    }
    // The conversion webhook follows: the CRDs call the Service there, with the CA of the
    // certificate there, issued for the Service's name there.
    for crd in docs
        .iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
    {
        let service = &crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"];
        assert_eq!(service["namespace"], "capmox-system", "{crd}");
        assert_eq!(
            crd["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            "capmox-system/hyperplug-serving-cert"
        );
    }
    let dns_names = &the_one(&docs, "Certificate")["spec"]["dnsNames"];
    assert_eq!(
        dns_names[0], "hyperplug-webhook-service.capmox-system.svc",
        "{dns_names}"
    );
    let manager = &the_one(&docs, "Deployment")["spec"]["template"]["spec"]["containers"][0];
    let ns_env = manager["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "HYPERPLUG_NAMESPACE")
        .unwrap();
    assert_eq!(ns_env["value"], "tenants");
    assert_eq!(the_one(&docs, "Secret")["stringData"]["insecure"], "true");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manager_role_grants_what_the_controllers_need_and_no_wildcards() {
    let release = Release::render().await.unwrap();
    let docs = generate_provider(&release, &Clusterctl::with_capmox_env().unwrap(), &[]);
    let role = the_one(&docs, "ClusterRole");
    let rules = role["rules"].as_array().unwrap();
    let grants = |group: &str, resource: &str, verb: &str| {
        rules.iter().any(|r| {
            let has = |key: &str, want: &str| r[key].as_array().unwrap().iter().any(|v| v == want);
            has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
        })
    };
    for r in rules {
        for key in ["apiGroups", "resources", "verbs"] {
            assert!(
                !r[key].as_array().unwrap().iter().any(|v| v == "*"),
                "wildcard in {r}"
            );
        }
    }
    let infra = "infrastructure.cluster.x-k8s.io";
    for kind in ["proxmoxclusters", "proxmoxmachines"] {
        for verb in ["get", "list", "watch", "patch"] {
            assert!(grants(infra, kind, verb), "{kind} {verb}");
        }
        // The manager never makes, replaces or deletes them.
        for verb in ["create", "update", "delete"] {
            assert!(!grants(infra, kind, verb), "{kind} {verb}");
        }
        assert!(grants(infra, &format!("{kind}/status"), "patch"));
        assert!(grants(infra, &format!("{kind}/finalizers"), "update"));
    }
    for (group, resource, verbs) in [
        (
            "cluster.x-k8s.io",
            "clusters",
            &["get", "list", "watch"][..],
        ),
        ("cluster.x-k8s.io", "machines", &["get", "list", "watch"]),
        ("", "secrets", &["get", "list", "watch"]),
        ("", "events", &["create", "patch"]),
        (
            "ipam.cluster.x-k8s.io",
            "ipaddressclaims",
            &["create", "delete", "get", "list", "watch", "patch"],
        ),
        (
            "ipam.cluster.x-k8s.io",
            "ipaddresses",
            &["get", "list", "watch"],
        ),
        (
            "ipam.cluster.x-k8s.io",
            "inclusterippools",
            &["create", "get", "list", "watch", "patch", "delete"],
        ),
    ] {
        for verb in verbs {
            assert!(grants(group, resource, verb), "{group}/{resource} {verb}");
        }
    }
    // Secrets are read-only cluster-wide; leases and the ownership key only in the
    // provider namespace.
    assert!(!grants("", "secrets", "create") && !grants("", "secrets", "update"));
    assert!(!grants("coordination.k8s.io", "leases", "get"));
    let own = the_one(&docs, "Role");
    assert_eq!(own["metadata"]["namespace"], "hyperplug-system");
    assert_eq!(own["rules"][0]["resources"][0], "leases");
    assert_eq!(own["rules"][1]["resources"][0], "secrets");
    assert_eq!(own["rules"][1]["verbs"], serde_json::json!(["create"]));
    // The tag pins' ConfigMap: created, then read and written by its name only.
    assert!(!grants("", "configmaps", "get"));
    assert_eq!(own["rules"][2]["resources"][0], "configmaps");
    assert_eq!(own["rules"][2]["verbs"], serde_json::json!(["create"]));
    assert_eq!(
        own["rules"][3]["resourceNames"],
        serde_json::json!(["hyperplug-plugin-pins"])
    );
    assert_eq!(
        own["rules"][3]["verbs"],
        serde_json::json!(["get", "update"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_refuses_a_release_folder_whose_metadata_lacks_the_release_series() {
    let release = Release::render().await.unwrap();
    std::fs::write(
        release.file("metadata.yaml"),
        "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n  - major: 9\n    minor: 9\n    contract: v1beta2\n",
    )
    .unwrap();
    let config = release.clusterctl_config().unwrap().display().to_string();
    let err = Clusterctl::with_capmox_env()
        .unwrap()
        .run(&[
            "generate",
            "provider",
            "--infrastructure",
            "proxmox",
            "--config",
            &config,
        ])
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("does not match any release series"),
        "{err:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_adds_the_cluster_class_when_it_generates_the_topology_flavor_from_the_release()
{
    let release = Release::render().await.unwrap();
    let config = release.clusterctl_config().unwrap().display().to_string();
    let provider = format!("proxmox:{}", release.version);
    let out = Clusterctl::with_capmox_env()
        .unwrap()
        .run(&[
            "generate",
            "cluster",
            "capi-quickstart",
            "--infrastructure",
            &provider,
            "--flavor",
            "topology",
            "--config",
            &config,
            "--target-namespace",
            "default",
            "--kubernetes-version",
            packaging::SEED_KUBERNETES_VERSION,
            "--control-plane-machine-count=1",
            "--worker-machine-count=1",
        ])
        .unwrap();
    let docs = documents(&out).unwrap();
    let class = the_one(&docs, "ClusterClass");
    assert_eq!(class["metadata"]["name"], packaging::CLUSTER_CLASS.0);
    let cluster = the_one(&docs, "Cluster");
    assert_eq!(
        cluster["spec"]["topology"]["classRef"]["name"],
        packaging::CLUSTER_CLASS.0
    );
    assert_eq!(
        docs.iter()
            .filter(|d| d["kind"] == "ProxmoxMachineTemplate")
            .count(),
        2
    );
}
