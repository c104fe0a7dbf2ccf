//! Cluster API and IPAM managers as child processes, their webhooks served on loopback.
//!
//! Like controller-runtime's envtest: each manager gets a serving certificate from the
//! plane's CA; the webhook configurations from the module's `config/webhook/manifests.yaml`
//! are rewritten from `service:` references to `url: https://127.0.0.1:<port><path>` with
//! that CA as `caBundle` (and renamed per manager so they do not collide); the CRDs the
//! manager owns get their conversion webhook pointed at the same server.

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, WebhookClientConfig,
};
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::apply;
use crate::plane::{Plane, b64, http_status, yaml_files};
use crate::ports::free_port;
use crate::process::Proc;

/// The webhook port CAPMOX's manager hard-codes.
pub const CAPMOX_WEBHOOK_PORT: u16 = 9443;

/// How a manager is told where its webhook server listens and finds its certificate.
#[derive(Debug, Clone, Default)]
pub enum WebhookServer {
    /// `--webhook-port`, `--webhook-cert-dir`, `--webhook-cert-name`, `--webhook-key-name`
    /// (Cluster API's managers and the in-cluster IPAM provider).
    #[default]
    Flags,
    /// A port it hard-codes, and controller-runtime's default certificate directory,
    /// `$TMPDIR/k8s-webhook-server/serving-certs` (CAPMOX).
    FixedPortUnderTmpdir(u16),
}

/// A manager the plane can start.
#[derive(Debug, Clone, Default)]
pub struct ManagerSpec {
    /// Process name (log file `<name>.log`, prefix of the webhook configuration names).
    pub name: String,
    pub binary: PathBuf,
    /// Directories of the CRDs this manager serves conversion for.
    pub crd_dirs: Vec<PathBuf>,
    /// `config/webhook/manifests.yaml` of the manager, if it has webhooks.
    pub webhook_manifests: Option<PathBuf>,
    /// Flag name of the health probe address (`--health-addr` for CAPI).
    pub health_flag: String,
    /// More arguments (e.g. `--feature-gates=...`).
    pub extra_args: Vec<String>,
    pub webhook_server: WebhookServer,
    /// Environment of the process (e.g. credentials a provider reads from it).
    pub env: Vec<(String, String)>,
    /// Labels added to its CRDs (e.g. the contract labels a release's kustomization adds
    /// and the module's `config/crd/bases` lacks).
    pub crd_labels: Vec<(String, String)>,
}

/// A started manager.
#[derive(Debug, Clone)]
pub struct Manager {
    pub name: String,
    pub webhook_port: u16,
    pub health_port: u16,
    pub log: PathBuf,
}

impl Plane {
    /// Starts the Cluster API core manager (`sigs.k8s.io/cluster-api/core`) with its
    /// webhooks. Installs Cluster API's CRDs first if they are not there.
    pub async fn start_capi_core(&self) -> Result<Manager> {
        self.start_capi_core_with(&[]).await
    }
    /// [`Plane::start_capi_core`] with more arguments, e.g. `--feature-gates=...`.
    pub async fn start_capi_core_with(&self, extra_args: &[&str]) -> Result<Manager> {
        let capi = self.tools.capi_dir();
        self.start_manager(ManagerSpec {
            name: "capi-core".into(),
            binary: self.tools.capi_manager(),
            crd_dirs: vec![capi.join("core/config/crd/bases")],
            webhook_manifests: Some(capi.join("core/config/webhook/manifests.yaml")),
            health_flag: "--health-addr".into(),
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            ..ManagerSpec::default()
        })
        .await
    }
    /// Starts the kubeadm bootstrap provider manager with its webhooks.
    pub async fn start_kubeadm_bootstrap(&self) -> Result<Manager> {
        self.start_kubeadm_bootstrap_with(&[]).await
    }
    /// [`Plane::start_kubeadm_bootstrap`] with more arguments, e.g. `--feature-gates=...`.
    pub async fn start_kubeadm_bootstrap_with(&self, extra_args: &[&str]) -> Result<Manager> {
        let capi = self.tools.capi_dir();
        self.start_manager(ManagerSpec {
            name: "kubeadm-bootstrap".into(),
            binary: self.tools.kubeadm_bootstrap_manager(),
            crd_dirs: vec![capi.join("bootstrap/kubeadm/config/crd/bases")],
            webhook_manifests: Some(capi.join("bootstrap/kubeadm/config/webhook/manifests.yaml")),
            health_flag: "--health-addr".into(),
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            ..ManagerSpec::default()
        })
        .await
    }
    /// Starts the kubeadm control plane provider manager with its webhooks.
    pub async fn start_kubeadm_control_plane(&self) -> Result<Manager> {
        self.start_kubeadm_control_plane_with(&[]).await
    }
    /// [`Plane::start_kubeadm_control_plane`] with more arguments, e.g. `--feature-gates=...`.
    pub async fn start_kubeadm_control_plane_with(&self, extra_args: &[&str]) -> Result<Manager> {
        let capi = self.tools.capi_dir();
        self.start_manager(ManagerSpec {
            name: "kubeadm-control-plane".into(),
            binary: self.tools.kubeadm_control_plane_manager(),
            crd_dirs: vec![capi.join("controlplane/kubeadm/config/crd/bases")],
            webhook_manifests: Some(
                capi.join("controlplane/kubeadm/config/webhook/manifests.yaml"),
            ),
            health_flag: "--health-addr".into(),
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            ..ManagerSpec::default()
        })
        .await
    }
    /// Starts the in-cluster IPAM provider with its webhooks (installs its CRDs too).
    pub async fn start_ipam(&self) -> Result<Manager> {
        let ipam = self.tools.ipam_dir();
        self.start_manager(ManagerSpec {
            name: "ipam-in-cluster".into(),
            binary: self.tools.ipam_manager(),
            crd_dirs: vec![ipam.join("config/crd/bases")],
            webhook_manifests: Some(ipam.join("config/webhook/manifests.yaml")),
            health_flag: "--health-probe-bind-address".into(),
            ..ManagerSpec::default()
        })
        .await
    }

    /// Starts CAPMOX's manager (built only on request: `scripts/build-tools.sh
    /// capmox-manager`) with its webhooks, as its release installs it: its CRDs carry the
    /// contract labels its kustomization adds; it reads the Proxmox credentials from
    /// `env` (`PROXMOX_URL`, `PROXMOX_TOKEN`, `PROXMOX_SECRET`, `PROXMOX_INSECURE`); its
    /// webhook server is on the port it hard-codes, 9443.
    pub async fn start_capmox(&self, env: &[(&str, &str)]) -> Result<Manager> {
        let dir = self.tools.capmox_dir();
        let binary = self
            .tools
            .capmox_manager()
            .context("CAPMOX's manager is not built: run scripts/build-tools.sh capmox-manager")?;
        self.start_manager(ManagerSpec {
            name: "capmox".into(),
            binary,
            crd_dirs: vec![dir.join("config/crd/bases")],
            webhook_manifests: Some(dir.join("config/webhook/manifests.yaml")),
            health_flag: "--health-probe-bind-address".into(),
            webhook_server: WebhookServer::FixedPortUnderTmpdir(CAPMOX_WEBHOOK_PORT),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            crd_labels: ["cluster.x-k8s.io/v1beta1", "cluster.x-k8s.io/v1beta2"]
                .into_iter()
                .map(|k| (k.to_string(), "v1alpha2".to_string()))
                .collect(),
            ..ManagerSpec::default()
        })
        .await
    }

    /// Starts any controller-runtime manager per `spec`: installs (or re-applies) its CRDs
    /// with conversion pointed at its webhook server, starts it, waits for its readiness
    /// endpoint and webhook port, then installs its rewritten webhook configurations.
    pub async fn start_manager(&self, spec: ManagerSpec) -> Result<Manager> {
        let webhook_port = match spec.webhook_server {
            WebhookServer::Flags => free_port()?,
            WebhookServer::FixedPortUnderTmpdir(port) => port,
        };
        let health_port = free_port()?;
        let diag_port = free_port()?;
        let webhook_base = format!("https://127.0.0.1:{webhook_port}");
        let ca_bundle = b64(self.ca.cert_pem().as_bytes());

        // Serving certificate.
        let tmpdir = self.path.join(format!("{}-tmp", spec.name));
        let cert_dir = match spec.webhook_server {
            WebhookServer::Flags => self.path.join(format!("{}-certs", spec.name)),
            WebhookServer::FixedPortUnderTmpdir(_) => {
                tmpdir.join("k8s-webhook-server/serving-certs")
            }
        };
        std::fs::create_dir_all(&cert_dir)?;
        let serving = self.ca.server(&["127.0.0.1", "localhost"])?;
        std::fs::write(cert_dir.join("tls.crt"), &serving.cert)?;
        std::fs::write(cert_dir.join("tls.key"), &serving.key)?;

        // CRDs with conversion through this manager.
        let mut crd_names = Vec::new();
        for dir in &spec.crd_dirs {
            for file in yaml_files(dir)? {
                let yaml = std::fs::read_to_string(&file)?;
                for mut doc in apply::parse_documents(&yaml)? {
                    if doc.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition") {
                        for (k, v) in &spec.crd_labels {
                            doc["metadata"]["labels"][k] = json!(v);
                        }
                        let multi_version = doc
                            .pointer("/spec/versions")
                            .and_then(Value::as_array)
                            .is_some_and(|v| v.len() > 1);
                        let conversion = if multi_version {
                            json!({
                                "strategy": "Webhook",
                                "webhook": {
                                    "clientConfig": {
                                        "url": format!("{webhook_base}/convert"),
                                        "caBundle": ca_bundle,
                                    },
                                    "conversionReviewVersions": ["v1", "v1beta1"],
                                },
                            })
                        } else {
                            json!({ "strategy": "None" })
                        };
                        if let Some(s) = doc.get_mut("spec").and_then(Value::as_object_mut) {
                            s.insert("conversion".into(), conversion);
                        }
                    }
                    let obj = apply::apply_object(&self.client, None, doc)
                        .await
                        .with_context(|| format!("installing {}", file.display()))?;
                    crd_names.push(obj.metadata.name.unwrap_or_default());
                }
            }
        }
        self.wait_crds_established(&crd_names).await?;

        // The process.
        let log = self.path.join(format!("{}.log", spec.name));
        let mut cmd = Command::new(&spec.binary);
        cmd.arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg("--leader-elect=false");
        match spec.webhook_server {
            WebhookServer::Flags => {
                cmd.arg(format!("--webhook-port={webhook_port}"))
                    .arg(format!("--webhook-cert-dir={}", cert_dir.display()))
                    .arg("--webhook-cert-name=tls.crt")
                    .arg("--webhook-key-name=tls.key");
            }
            WebhookServer::FixedPortUnderTmpdir(_) => {
                cmd.env("TMPDIR", &tmpdir);
            }
        }
        cmd.envs(spec.env.iter().map(|(k, v)| (k, v)))
            .arg(format!("{}=127.0.0.1:{health_port}", spec.health_flag))
            .arg(format!("--diagnostics-address=127.0.0.1:{diag_port}"))
            .arg("--insecure-diagnostics=true")
            .args(&spec.extra_args);
        self.add_proc(Proc::spawn(&spec.name, cmd, &log)?);

        let health: SocketAddr = format!("127.0.0.1:{health_port}").parse()?;
        let webhook: SocketAddr = format!("127.0.0.1:{webhook_port}").parse()?;
        self.wait_for(
            &format!("{} to be ready (log {})", spec.name, log.display()),
            Duration::from_secs(120),
            move || {
                let ready = http_status(health, "/readyz").is_ok_and(|c| c == 200)
                    && TcpStream::connect_timeout(&webhook, Duration::from_millis(200)).is_ok();
                async move { Ok(ready) }
            },
        )
        .await?;

        if let Some(manifests) = &spec.webhook_manifests {
            let yaml = std::fs::read_to_string(manifests)
                .with_context(|| format!("reading {}", manifests.display()))?;
            for doc in rewrite_webhooks(&yaml, &spec.name, &webhook_base, &ca_bundle)? {
                apply::apply_object(&self.client, None, doc).await?;
            }
            // The API server picks webhook configurations up through an informer.
            tokio::time::sleep(Duration::from_millis(500)).await;
        }

        Ok(Manager {
            name: spec.name,
            webhook_port,
            health_port,
            log,
        })
    }
}

/// Rewrites webhook configurations to call `base` directly (envtest style).
pub fn rewrite_webhooks(
    yaml: &str,
    name_prefix: &str,
    base: &str,
    ca_bundle: &str,
) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for mut doc in apply::parse_documents(yaml)? {
        let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
        if kind != "MutatingWebhookConfiguration" && kind != "ValidatingWebhookConfiguration" {
            continue;
        }
        let name = doc
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("webhook-configuration")
            .to_string();
        doc["metadata"] = json!({ "name": format!("{name_prefix}-{name}") });
        point_webhooks(&mut doc, base, ca_bundle);
        out.push(doc);
    }
    Ok(out)
}

/// Every webhook of the admission configuration `doc` called at its Service path on
/// `base` (`https://HOST:PORT`), trusting `ca_bundle`, instead of through the Service.
pub fn point_webhooks(doc: &mut Value, base: &str, ca_bundle: &str) {
    if let Some(hooks) = doc.get_mut("webhooks").and_then(Value::as_array_mut) {
        for hook in hooks {
            let path = hook
                .pointer("/clientConfig/service/path")
                .and_then(Value::as_str)
                .unwrap_or("/")
                .to_string();
            hook["clientConfig"] = json!({ "url": format!("{base}{path}"), "caBundle": ca_bundle });
        }
    }
}

impl Plane {
    /// Removes every webhook that reaches its server through a Service: admission
    /// webhook configurations are deleted, CRD conversion webhooks reset to `None`.
    /// Without kube-proxy and pods behind them (as after `clusterctl init`, whose
    /// Deployments cannot run here) such webhooks only fail every request they match; the
    /// managers started by this crate register their own, pointed at loopback. Returns
    /// the names of the objects changed.
    pub async fn remove_service_webhooks(&self) -> Result<Vec<String>> {
        self.remove_webhooks(
            |cfg| {
                cfg.data["webhooks"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|w| w["clientConfig"].get("service").is_some())
            },
            |client| client.service.is_some(),
        )
        .await
    }

    /// Removes the webhooks of a stopped `manager`, as uninstalling it does: the admission
    /// webhook configurations named `<manager>-...` are deleted and the CRDs converting
    /// through its server get conversion `None` (its CRDs and objects stay). Returns the
    /// names of the objects changed.
    pub async fn remove_manager_webhooks(&self, manager: &Manager) -> Result<Vec<String>> {
        let prefix = format!("{}-", manager.name);
        let server = format!("https://127.0.0.1:{}/", manager.webhook_port);
        self.remove_webhooks(
            |cfg| cfg.name_any().starts_with(&prefix),
            |client| {
                client
                    .url
                    .as_deref()
                    .is_some_and(|u| u.starts_with(&server))
            },
        )
        .await
    }

    /// Deletes the admission webhook configurations `config` selects and resets to `None`
    /// the CRD conversions whose webhook `conversion` selects; the names changed.
    async fn remove_webhooks(
        &self,
        config: impl Fn(&DynamicObject) -> bool,
        conversion: impl Fn(&WebhookClientConfig) -> bool,
    ) -> Result<Vec<String>> {
        let mut removed = Vec::new();
        for kind in [
            "ValidatingWebhookConfiguration",
            "MutatingWebhookConfiguration",
        ] {
            let api = self
                .dynamic_api("admissionregistration.k8s.io/v1", kind, None)
                .await?;
            for cfg in api.list(&Default::default()).await? {
                if config(&cfg) {
                    api.delete(&cfg.name_any(), &Default::default()).await?;
                    removed.push(cfg.name_any());
                }
            }
        }
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        for crd in crds.list(&Default::default()).await? {
            let selected = crd
                .spec
                .conversion
                .as_ref()
                .and_then(|c| c.webhook.as_ref())
                .and_then(|w| w.client_config.as_ref())
                .is_some_and(&conversion);
            if selected {
                let patch = json!({"spec": {"conversion": {"strategy": "None", "webhook": null}}});
                crds.patch(
                    &crd.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await?;
                removed.push(crd.name_any());
            }
        }
        Ok(removed)
    }

    /// Installs cert-manager's CRDs (from the pinned module's `deploy/crds`) and starts its
    /// certificate controllers as a process (SelfSigned and CA issuers; no webhook, no
    /// cainjector, no kubelet). ClusterIssuer secrets live in namespace `cert-manager`.
    pub async fn start_cert_manager(&self) -> Result<Manager> {
        let binary = self.tools.cert_manager_controller().ok_or_else(|| {
            anyhow::anyhow!("cert-manager-controller was not built (see scripts/build-tools.sh)")
        })?;
        self.install_crds_dir(self.tools.cert_manager_dir().join("deploy/crds"))
            .await?;
        self.apply_yaml("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: cert-manager\n")
            .await?;
        let log = self.path.join("cert-manager.log");
        let mut cmd = Command::new(binary);
        cmd.arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg("--cluster-resource-namespace=cert-manager");
        self.add_proc(Proc::spawn("cert-manager", cmd, &log)?);
        let logc = log.clone();
        self.wait_for(
            &format!("cert-manager to start (log {})", log.display()),
            Duration::from_secs(60),
            move || {
                let started =
                    crate::process::log_tail(&logc, 1 << 20).contains("controllers starting");
                async move { Ok(started) }
            },
        )
        .await?;
        Ok(Manager {
            name: "cert-manager".into(),
            webhook_port: 0,
            health_port: 0,
            log,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_configurations_are_renamed_and_pointed_at_loopback() {
        let yaml = r#"
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- name: default.cluster.cluster.x-k8s.io
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate-cluster}
---
apiVersion: v1
kind: Service
metadata: {name: webhook-service}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- name: a
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /validate-a}
- name: b
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /validate-b}
"#;
        let docs = rewrite_webhooks(yaml, "capi-core", "https://127.0.0.1:9443", "Q0E=").unwrap();
        assert_eq!(docs.len(), 2, "only webhook configurations are kept");
        assert_eq!(
            docs[0]["metadata"]["name"],
            "capi-core-mutating-webhook-configuration"
        );
        assert_eq!(
            docs[0]["webhooks"][0]["clientConfig"],
            json!({"url": "https://127.0.0.1:9443/mutate-cluster", "caBundle": "Q0E="})
        );
        assert_eq!(
            docs[1]["webhooks"][1]["clientConfig"]["url"],
            "https://127.0.0.1:9443/validate-b"
        );
        assert!(
            docs[1]["webhooks"][1]["clientConfig"]
                .get("service")
                .is_none()
        );
    }
}
