//! CustomResourceDefinitions for the kinds a plugin declares.
//!
//! The plugin supplies each kind's `spec` schema; the host adds what the Cluster API
//! contract requires (`spec.providerID`, `spec.controlPlaneEndpoint`, the whole
//! `status`), what it reads itself (an InfraCluster's `spec.credentialsRef` and
//! `spec.credentialsRefs`), the contract labels and the printer columns. This file makes
//! the documents (CRDs and the finalizer webhook's configuration); `schema` assembles
//! the schemas of each version.
mod schema;

use hyperplug_runtime::bindings::identity::{KindInfo, KindRole, KindVersion, PluginInfo};
use serde_json::{Value, json};

use self::schema::{check_structural, host_spec, merge_status, status_schema};

/// The label that tells Cluster API which contract our CRD versions follow.
pub const CONTRACT_LABEL: &str = "cluster.x-k8s.io/v1beta2";
/// The label clusterctl uses to find a provider's objects.
pub const PROVIDER_LABEL: &str = "cluster.x-k8s.io/provider";

/// `infrastructure-<name>`, the provider label value.
pub fn provider_label_value(info: &PluginInfo) -> String {
    format!("infrastructure-{}", info.name)
}

/// Lower-case plural of a kind, as CRD names use it (`ExampleMachine` → `examplemachines`).
/// The runtime's loader refuses two kinds with one plural, so the rule is written there.
pub use hyperplug_runtime::bindings::plural;

/// One CRD per declared kind.
pub fn crds(info: &PluginInfo) -> Result<Vec<Value>, String> {
    info.kinds.iter().map(|kind| crd(info, kind)).collect()
}

/// All CRDs as one multi-document YAML stream, then the finalizer webhook's
/// configuration where the manager serves one ([`finalizer_webhook`]).
pub fn crds_yaml(info: &PluginInfo) -> Result<String, String> {
    let mut out = String::new();
    for doc in crds(info)?.into_iter().chain(finalizer_webhook(info)) {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&doc).map_err(|e| e.to_string())?);
    }
    Ok(out)
}

/// The finalizer on every object of `info`'s kinds whose infrastructure the manager may
/// create.
pub fn finalizer(info: &PluginInfo) -> String {
    format!("{}.infrastructure.hyperplug.dev", info.name)
}

/// Whether the manager runs its webhook server for `info`'s kinds: when one of them has
/// several versions (the CRD conversion needs it). The finalizer webhook rides along.
pub fn serves_webhooks(info: &PluginInfo) -> bool {
    info.kinds.iter().any(|k| k.versions.len() > 1)
}

/// Where the API server asks the manager to add the finalizer to a new InfraMachine.
pub const FINALIZER_PATH: &str = "/finalizer";

/// A mutating admission webhook that puts the finalizer on every InfraMachine as it is
/// created, so the manager need not write it before the first plugin call (one write
/// fewer per machine, and the first call comes sooner). It never refuses: a manager that
/// is down or unreachable (`failurePolicy: Ignore`) only means the reconciler adds the
/// finalizer itself, as it does for objects created before the webhook was installed.
/// Only where the manager serves webhooks ([`serves_webhooks`]).
pub fn finalizer_webhook(info: &PluginInfo) -> Option<Value> {
    if !serves_webhooks(info) {
        return None;
    }
    let machines: Vec<String> = info
        .kinds
        .iter()
        .filter(|k| k.role == KindRole::InfraMachine)
        .map(|k| plural(&k.kind))
        .collect();
    if machines.is_empty() {
        return None;
    }
    let name = format!("hyperplug-{}-finalizer", info.name);
    Some(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {
            "name": name,
            "labels": {PROVIDER_LABEL: provider_label_value(info)},
            "annotations": {
                "cert-manager.io/inject-ca-from": format!("{WEBHOOK_NAMESPACE}/{SERVING_CERTIFICATE}"),
            },
        },
        "webhooks": [{
            "name": format!("finalizer.{}.infrastructure.hyperplug.dev", info.name),
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Ignore",
            "timeoutSeconds": 5,
            "matchPolicy": "Equivalent",
            "reinvocationPolicy": "Never",
            "rules": [{
                "apiGroups": [info.group],
                "apiVersions": ["*"],
                "operations": ["CREATE"],
                "resources": machines,
                "scope": "Namespaced",
            }],
            "clientConfig": {"service": {
                "namespace": WEBHOOK_NAMESPACE,
                "name": WEBHOOK_SERVICE,
                "path": FINALIZER_PATH,
            }},
        }],
    }))
}

/// Where the API server reaches the conversion webhook of a kind with several versions:
/// the manager's webhook Service in the release's namespace (`deploy/webhook.yaml`;
/// clusterctl moves both to its target namespace), its serving certificate's CA injected
/// by cert-manager.
pub const WEBHOOK_NAMESPACE: &str = "hyperplug-system";
pub const WEBHOOK_SERVICE: &str = "hyperplug-webhook-service";
pub const CONVERSION_PATH: &str = "/convert";
/// The cert-manager Certificate whose CA cert-manager's CA injector puts in `caBundle`.
pub const SERVING_CERTIFICATE: &str = "hyperplug-serving-cert";

fn crd(info: &PluginInfo, kind: &KindInfo) -> Result<Value, String> {
    let plural = plural(&kind.kind);
    let mut columns = host_columns(kind.role);
    for c in &kind.columns {
        columns.insert(columns.len().saturating_sub(1), json!({
            "name": c.name, "type": c.column_type, "jsonPath": c.json_path, "description": c.description,
        }));
    }
    let versions = kind
        .versions
        .iter()
        .map(|v| version(info, kind, v, &columns))
        .collect::<Result<Vec<_>, _>>()?;
    // CAPI reads the contract label to learn which versions follow its contract, and
    // uses the newest of them.
    let served: Vec<&str> = kind
        .versions
        .iter()
        .filter(|v| v.served)
        .map(|v| v.name.as_str())
        .collect();
    let mut crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": format!("{plural}.{}", info.group),
            "labels": {
                CONTRACT_LABEL: served.join("_"),
                PROVIDER_LABEL: provider_label_value(info),
            },
        },
        "spec": {
            "group": info.group,
            "scope": "Namespaced",
            "names": {
                "kind": kind.kind,
                "listKind": format!("{}List", kind.kind),
                "plural": plural,
                "singular": kind.kind.to_ascii_lowercase(),
                "categories": ["cluster-api"],
            },
            "versions": versions,
        },
    });
    if kind.versions.len() > 1 {
        crd["metadata"]["annotations"] = json!({
            "cert-manager.io/inject-ca-from": format!("{WEBHOOK_NAMESPACE}/{SERVING_CERTIFICATE}"),
        });
        crd["spec"]["conversion"] = json!({
            "strategy": "Webhook",
            "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {"service": {
                    "namespace": WEBHOOK_NAMESPACE,
                    "name": WEBHOOK_SERVICE,
                    "path": CONVERSION_PATH,
                }},
            },
        });
    }
    Ok(crd)
}

/// One entry of a CRD's `spec.versions`: the plugin's schemas of this version with the
/// host's fields added.
fn version(
    info: &PluginInfo,
    kind: &KindInfo,
    version: &KindVersion,
    columns: &[Value],
) -> Result<Value, String> {
    let at = format!("{} {}", kind.kind, version.name);
    let mut spec: Value = serde_json::from_str(&version.spec_schema)
        .map_err(|e| format!("kind {at}: spec-schema is not JSON: {e}"))?;
    check_structural(&spec, &format!("{}.spec ({})", kind.kind, version.name))?;
    let spec = host_spec(kind.role, spec.take());
    let mut status = status_schema(kind.role);
    if let Some(own) = &version.status_schema {
        let own: Value = serde_json::from_str(own)
            .map_err(|e| format!("kind {at}: status-schema is not JSON: {e}"))?;
        check_structural(&own, &format!("{}.status ({})", kind.kind, version.name))?;
        merge_status(&mut status, own);
    }
    let mut v = json!({
        "name": version.name,
        "served": version.served,
        "storage": version.storage,
        "subresources": {"status": {}},
        "additionalPrinterColumns": columns,
        "schema": {"openAPIV3Schema": {
            "type": "object",
            "description": format!("{} of the {} infrastructure provider.", kind.kind, info.name),
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": spec,
                "status": status,
            },
        }},
    });
    if let Some(warning) = &version.deprecation_warning {
        v["deprecated"] = json!(true);
        v["deprecationWarning"] = json!(warning);
    }
    Ok(v)
}
/// `kubectl get` columns the host fills for every plugin; plugin columns go before Age.
fn host_columns(role: KindRole) -> Vec<Value> {
    let col = |name: &str, ty: &str, path: &str, desc: &str| json!({"name": name, "type": ty, "jsonPath": path, "description": desc});
    let cluster = col(
        "Cluster",
        "string",
        ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",
        "The Cluster this object belongs to",
    );
    let age = col(
        "Age",
        "date",
        ".metadata.creationTimestamp",
        "Time since creation",
    );
    let ready = col(
        "Ready",
        "string",
        ".status.conditions[?(@.type=='Ready')].status",
        "Ready condition",
    );
    let phase = col("Phase", "string", ".status.phase", "Current step");
    match role {
        KindRole::InfraMachine => vec![
            cluster,
            col(
                "Machine",
                "string",
                ".metadata.ownerReferences[?(@.kind=='Machine')].name",
                "The owning Machine",
            ),
            col("ProviderID", "string", ".spec.providerID", "Provider ID"),
            col(
                "Provisioned",
                "boolean",
                ".status.initialization.provisioned",
                "Infrastructure provisioned",
            ),
            phase,
            age,
        ],
        KindRole::InfraCluster => vec![
            cluster,
            col(
                "Provisioned",
                "boolean",
                ".status.initialization.provisioned",
                "Infrastructure provisioned",
            ),
            col(
                "Endpoint",
                "string",
                ".spec.controlPlaneEndpoint.host",
                "Control-plane endpoint",
            ),
            ready,
            age,
        ],
        KindRole::InfraMachineTemplate | KindRole::InfraClusterTemplate => vec![age],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plural_follows_crd_naming() {
        assert_eq!(plural("ExampleMachine"), "examplemachines");
        assert_eq!(plural("MetalHostClass"), "metalhostclasses");
    }

    fn info(kinds: Vec<KindInfo>) -> PluginInfo {
        PluginInfo {
            name: "example".into(),
            version: "0.1.0".into(),
            group: "infrastructure.cluster.x-k8s.io".into(),
            api_version: "v1alpha1".into(),
            kinds,
            capabilities: vec![],
        }
    }

    fn kind(name: &str, role: KindRole, spec_schema: Value) -> KindInfo {
        KindInfo {
            kind: name.into(),
            role,
            versions: vec![KindVersion {
                name: "v1alpha1".into(),
                spec_schema: spec_schema.to_string(),
                status_schema: None,
                served: true,
                storage: true,
                deprecation_warning: None,
            }],
            columns: vec![],
        }
    }

    #[test]
    fn every_infra_cluster_crd_takes_credentials_refs_whatever_the_plugin_declares() {
        let plain = json!({"type": "object", "properties": {"region": {"type": "string"}}});
        // A plugin's own idea of the field does not count: the host reads it.
        let own = json!({"type": "object", "properties": {"credentialsRef": {"type": "string"}}});
        let crds = crds(&info(vec![
            kind("ExampleCluster", KindRole::InfraCluster, plain.clone()),
            kind("OtherCluster", KindRole::InfraCluster, own),
            kind(
                "ExampleClusterTemplate",
                KindRole::InfraClusterTemplate,
                plain,
            ),
        ]))
        .unwrap();
        let specs = [
            &crds[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"],
            &crds[1]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"],
            &crds[2]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
                ["template"]["properties"]["spec"],
        ];
        for spec in specs {
            let one = &spec["properties"]["credentialsRef"];
            assert_eq!(one["type"], "object", "{spec}");
            assert_eq!(one["required"], json!(["name"]));
            assert_eq!(one["properties"]["namespace"]["type"], "string");
            let many = &spec["properties"]["credentialsRefs"];
            assert_eq!(many["type"], "array", "{spec}");
            assert_eq!(many["items"]["properties"]["name"]["type"], "string");
        }
        assert_eq!(specs[0]["properties"]["region"]["type"], "string");
    }

    #[test]
    fn machine_crds_take_no_credentials() {
        let spec = json!({"type": "object", "properties": {}});
        let crds = crds(&info(vec![
            kind("ExampleMachine", KindRole::InfraMachine, spec.clone()),
            kind(
                "ExampleMachineTemplate",
                KindRole::InfraMachineTemplate,
                spec,
            ),
        ]))
        .unwrap();
        for crd in &crds {
            let text = crd.to_string();
            assert!(!text.contains("credentialsRef"), "{text}");
        }
    }

    #[test]
    fn several_versions_make_one_crd_converted_by_the_webhook() {
        let mut k = kind(
            "ExampleMachine",
            KindRole::InfraMachine,
            json!({"type": "object", "properties": {"a": {"type": "string"}}}),
        );
        k.versions[0].storage = false;
        k.versions[0].deprecation_warning = Some("use v1alpha2".into());
        k.versions.push(KindVersion {
            name: "v1alpha2".into(),
            spec_schema: json!({"type": "object", "properties": {"b": {"type": "string"}}})
                .to_string(),
            status_schema: Some(
                json!({"type": "object", "properties": {
                    "node": {"type": "string"},
                    // The host's own field stays the host's.
                    "phase": {"type": "integer"},
                }})
                .to_string(),
            ),
            served: true,
            storage: true,
            deprecation_warning: None,
        });
        let crd = &crds(&info(vec![k])).unwrap()[0];
        assert_eq!(
            crd["metadata"]["labels"][CONTRACT_LABEL],
            "v1alpha1_v1alpha2"
        );
        let versions = crd["spec"]["versions"].as_array().unwrap();
        let schema = |i: usize| &versions[i]["schema"]["openAPIV3Schema"]["properties"];
        assert_eq!(versions[0]["name"], "v1alpha1");
        assert_eq!(versions[0]["storage"], false);
        assert_eq!(versions[0]["deprecationWarning"], "use v1alpha2");
        assert_eq!(schema(0)["spec"]["properties"]["a"]["type"], "string");
        assert_eq!(
            schema(0)["spec"]["properties"]["providerID"]["type"],
            "string"
        );
        assert_eq!(versions[1]["storage"], true);
        assert!(schema(1)["spec"]["properties"].get("a").is_none());
        assert_eq!(schema(1)["status"]["properties"]["node"]["type"], "string");
        assert_eq!(schema(1)["status"]["properties"]["phase"]["type"], "string");
        let hook = &crd["spec"]["conversion"]["webhook"];
        assert_eq!(crd["spec"]["conversion"]["strategy"], "Webhook");
        assert_eq!(hook["clientConfig"]["service"]["name"], WEBHOOK_SERVICE);
        assert_eq!(hook["clientConfig"]["service"]["path"], CONVERSION_PATH);
        assert_eq!(
            crd["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            format!("{WEBHOOK_NAMESPACE}/{SERVING_CERTIFICATE}")
        );
        // One version: nothing to convert.
        let one = &crds(&info(vec![kind(
            "ExampleMachine",
            KindRole::InfraMachine,
            json!({"type": "object"}),
        )]))
        .unwrap()[0];
        assert!(one["spec"].get("conversion").is_none());
        assert_eq!(one["metadata"]["labels"][CONTRACT_LABEL], "v1alpha1");
    }
}
