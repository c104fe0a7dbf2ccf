//! A real control plane: etcd + kube-apiserver (+ kube-controller-manager) on loopback.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::version::Info;
use kube::api::{Api, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::GroupVersionKind;
use kube::{Client, Config};
use serde_json::Value;

use crate::apply;
use crate::certs::{self, Ca};
use crate::ports::free_port;
use crate::process::{Proc, log_tail};
use crate::tools::Tools;

/// What to start besides etcd and kube-apiserver.
#[derive(Debug, Clone, Default)]
pub struct PlaneOpts {
    /// Start kube-controller-manager (garbage collector and namespace controller) right
    /// away. Tests that install CRDs and need their objects garbage-collected should rather
    /// install the CRDs first and then call [`Plane::start_controller_manager`], so the
    /// garbage collector sees the new kinds without waiting for its 30 s rediscovery.
    pub controller_manager: bool,
    /// Sign the plane's certificates with this CA instead of a fresh one (a workload
    /// cluster whose CA Cluster API was handed in its `<cluster>-ca` Secret).
    pub ca: Option<Arc<Ca>>,
    /// Serve the API on this address instead of a free port on 127.0.0.1 (a workload
    /// cluster's control plane endpoint, e.g. `127.0.42.7:6443`).
    pub address: Option<SocketAddr>,
    /// An audit policy (YAML, `audit.k8s.io/v1` `Policy`): the API server then writes
    /// JSON audit events to `audit.log` in the plane's directory ([`Plane::audit_log_path`]).
    /// Benchmarks count a client's writes this way.
    pub audit_policy: Option<String>,
}

/// The user of the plane's admin kubeconfig (tests, and the controllers it runs).
pub const ADMIN_USER: &str = "kube-world-admin";

/// The rules of [`AUDIT_WRITES_POLICY`] before its last, which records nothing more.
macro_rules! audit_writes_rules {
    () => {
        "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
"
    };
}

/// An audit policy recording every write (request metadata only) and nothing else.
pub const AUDIT_WRITES_POLICY: &str = concat!(audit_writes_rules!(), "- level: None\n");

/// [`AUDIT_WRITES_POLICY`], and every read of one object (`get`) by `user`.
pub fn audit_writes_and_gets_by(user: &str) -> String {
    format!(
        "{}- level: Metadata\n  users: [{user}]\n  verbs: [get]\n- level: None\n",
        audit_writes_rules!()
    )
}

/// A running test control plane. Dropping it kills every process it started; if the
/// thread is panicking (a failed test), its directory with all logs is kept and printed.
pub struct Plane {
    pub(crate) dir: Option<tempfile::TempDir>,
    pub(crate) path: PathBuf,
    pub(crate) tools: &'static Tools,
    pub(crate) ca: Arc<Ca>,
    pub(crate) procs: Mutex<Vec<Proc>>,
    pub(crate) kubeconfig: PathBuf,
    pub(crate) client: Client,
    pub(crate) url: String,
    version: Info,
    sa_key: PathBuf,
    started_in: Duration,
    audit_log: Option<PathBuf>,
}

pub(crate) fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn write(path: &Path, content: &str) -> Result<()> {
    std::fs::write(path, content).with_context(|| format!("writing {}", path.display()))
}

/// Waits until `check` returns `Ok(true)`, failing early if a watched process died.
pub(crate) async fn wait_for<F, Fut>(
    what: &str,
    timeout: Duration,
    mut alive: impl FnMut() -> Result<()>,
    mut check: F,
) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_err = None;
    loop {
        alive()?;
        match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last_err = Some(e),
        }
        if Instant::now() > deadline {
            let detail = last_err.map(|e| format!(": {e:#}")).unwrap_or_default();
            bail!("timed out after {timeout:?} waiting for {what}{detail}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Plain-HTTP GET status code (for health endpoints on loopback).
pub(crate) fn http_status(addr: SocketAddr, path: &str) -> Result<u16> {
    use std::io::{Read, Write};
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    let code = buf
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow!("no HTTP status from {addr}{path}"))?;
    Ok(code)
}

impl Plane {
    /// Starts etcd and kube-apiserver on free loopback ports (and kube-controller-manager
    /// if asked), writes an admin kubeconfig and waits until `/readyz` is ok. Builds the
    /// tools first if needed.
    pub async fn start(opts: PlaneOpts) -> Result<Plane> {
        let t0 = Instant::now();
        let tools = Tools::get()?;
        let dir = tempfile::Builder::new()
            .prefix("kube-world-")
            .tempdir()
            .context("creating the plane directory")?;
        let path = dir.path().to_path_buf();
        let pki = path.join("pki");
        std::fs::create_dir_all(&pki)?;

        // Certificates and keys.
        let ca = match &opts.ca {
            Some(ca) => ca.clone(),
            None => Arc::new(Ca::new("kube-world-ca")?),
        };
        let address = match opts.address {
            Some(a) => a,
            None => SocketAddr::from(([127, 0, 0, 1], free_port()?)),
        };
        let ip = address.ip().to_string();
        let serving = ca.server(&[
            &ip,
            "127.0.0.1",
            "localhost",
            "kubernetes",
            "kubernetes.default",
        ])?;
        let admin = ca.client(ADMIN_USER, &["system:masters"])?;
        write(&pki.join("ca.crt"), ca.cert_pem())?;
        write(&pki.join("apiserver.crt"), &serving.cert)?;
        write(&pki.join("apiserver.key"), &serving.key)?;
        let sa_key = pki.join("sa.key");
        let sa_pub = pki.join("sa.pub");
        let (sa_private, sa_public) = certs::signing_key_pem()?;
        write(&sa_key, &sa_private)?;
        write(&sa_pub, &sa_public)?;

        // etcd.
        let etcd_port = free_port()?;
        let peer_port = free_port()?;
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let mut etcd = Command::new(tools.etcd());
        etcd.arg("--name=kube-world")
            .arg(format!("--data-dir={}", path.join("etcd").display()))
            .arg(format!("--listen-client-urls={etcd_url}"))
            .arg(format!("--advertise-client-urls={etcd_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=kube-world={peer_url}"))
            .arg("--listen-metrics-urls=")
            .arg("--unsafe-no-fsync=true")
            .arg("--log-level=warn");
        let etcd = Proc::spawn("etcd", etcd, &path.join("etcd.log"))?;
        let procs = Mutex::new(vec![etcd]);

        // kube-apiserver.
        let url = format!("https://{address}");
        let mut api = Command::new(tools.kube_apiserver());
        api.arg(format!("--etcd-servers={etcd_url}"))
            .arg(format!("--bind-address={ip}"))
            .arg(format!("--advertise-address={ip}"))
            .arg(format!("--secure-port={}", address.port()))
            .arg(format!("--cert-dir={}", pki.display()))
            .arg(format!(
                "--tls-cert-file={}",
                pki.join("apiserver.crt").display()
            ))
            .arg(format!(
                "--tls-private-key-file={}",
                pki.join("apiserver.key").display()
            ))
            .arg(format!("--client-ca-file={}", pki.join("ca.crt").display()))
            .arg(format!("--service-account-key-file={}", sa_pub.display()))
            .arg(format!(
                "--service-account-signing-key-file={}",
                sa_key.display()
            ))
            .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
            .arg("--service-cluster-ip-range=10.0.0.0/24")
            .arg("--authorization-mode=AlwaysAllow")
            .arg("--allow-privileged=true")
            .arg("--disable-admission-plugins=ServiceAccount")
            .arg("--enable-priority-and-fairness=false")
            .arg("--profiling=false")
            .arg("--v=1");
        let audit_log = match &opts.audit_policy {
            Some(policy) => {
                let policy_file = path.join("audit-policy.yaml");
                write(&policy_file, policy)?;
                let log = path.join("audit.log");
                api.arg(format!("--audit-policy-file={}", policy_file.display()))
                    .arg(format!("--audit-log-path={}", log.display()))
                    .arg("--audit-log-format=json")
                    .arg("--audit-log-maxsize=0");
                Some(log)
            }
            None => None,
        };
        let apiserver = Proc::spawn("kube-apiserver", api, &path.join("kube-apiserver.log"))?;
        procs.lock().unwrap().push(apiserver);

        // Admin kubeconfig (embedded credentials, so it can be copied around).
        let kubeconfig = path.join("kubeconfig");
        write(
            &kubeconfig,
            &format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-world\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\nusers:\n- name: admin\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\ncontexts:\n- name: kube-world\n  context:\n    cluster: kube-world\n    user: admin\n    namespace: default\ncurrent-context: kube-world\n",
                ca = b64(ca.cert_pem().as_bytes()),
                cert = b64(admin.cert.as_bytes()),
                key = b64(admin.key.as_bytes()),
            ),
        )?;
        let config = Config::from_custom_kubeconfig(
            Kubeconfig::read_from(&kubeconfig)?,
            &KubeConfigOptions::default(),
        )
        .await
        .context("loading the generated kubeconfig")?;
        let client = Client::try_from(config)?;

        let mut plane = Plane {
            dir: Some(dir),
            path,
            tools,
            ca,
            procs,
            kubeconfig,
            client,
            url,
            version: Info::default(),
            sa_key,
            started_in: Duration::ZERO,
            audit_log,
        };

        let c = plane.client.clone();
        plane
            .wait_for(
                "kube-apiserver /readyz",
                Duration::from_secs(90),
                move || {
                    let c = c.clone();
                    async move {
                        let req = http::Request::get("/readyz").body(Vec::new())?;
                        Ok(c.request_text(req).await? == "ok")
                    }
                },
            )
            .await?;
        plane.version = plane.client.apiserver_version().await?;
        // The default namespace and service account are created asynchronously.
        let ns: Api<Namespace> = Api::all(plane.client.clone());
        let nsc = ns.clone();
        plane
            .wait_for("namespace default", Duration::from_secs(30), move || {
                let ns = nsc.clone();
                async move { Ok(ns.get_opt("default").await?.is_some()) }
            })
            .await?;

        if opts.controller_manager {
            plane.start_controller_manager().await?;
        }
        plane.started_in = t0.elapsed();
        Ok(plane)
    }

    /// Waits for `check` (polled every 100 ms), failing early (with the log) if any
    /// plane process died; on timeout the error carries `check`'s last error.
    pub async fn wait_for<F, Fut>(&self, what: &str, timeout: Duration, check: F) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<bool>>,
    {
        wait_for(what, timeout, || self.check_processes(), check).await
    }

    /// `Err` naming the first plane process that has exited (with its log tail).
    pub fn check_processes(&self) -> Result<()> {
        let mut procs = self.procs.lock().unwrap();
        for p in procs.iter_mut() {
            p.check_running()?;
        }
        Ok(())
    }

    /// Ties a process to the plane: it is checked with the plane's own and killed when
    /// the plane drops.
    pub fn add_proc(&self, p: Proc) {
        self.procs.lock().unwrap().push(p);
    }

    /// Kills the plane's processes named `name` (e.g. a manager being replaced) and
    /// forgets them; whether there was one.
    pub fn stop_proc(&self, name: &str) -> bool {
        let mut procs = self.procs.lock().unwrap();
        let before = procs.len();
        procs.retain_mut(|p| {
            if p.name() == name {
                p.kill();
                false
            } else {
                true
            }
        });
        procs.len() != before
    }

    /// Starts kube-controller-manager with the garbage collector and namespace controllers.
    pub async fn start_controller_manager(&self) -> Result<()> {
        let health = free_port()?;
        let mut kcm = Command::new(self.tools.kube_controller_manager());
        kcm.arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg("--controllers=garbagecollector,namespace")
            .arg("--leader-elect=false")
            .arg("--use-service-account-credentials=false")
            .arg(format!(
                "--service-account-private-key-file={}",
                self.sa_key.display()
            ))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={health}"))
            .arg(format!(
                "--cert-dir={}",
                self.path.join("kcm-certs").display()
            ))
            .arg(format!(
                "--authentication-kubeconfig={}",
                self.kubeconfig.display()
            ))
            .arg(format!(
                "--authorization-kubeconfig={}",
                self.kubeconfig.display()
            ))
            .arg("--authorization-always-allow-paths=/healthz,/readyz,/livez")
            .arg("--concurrent-gc-syncs=5")
            .arg("--v=1");
        let log = self.path.join("kube-controller-manager.log");
        self.add_proc(Proc::spawn("kube-controller-manager", kcm, &log)?);
        // Ready once its health endpoint answers (served over self-signed TLS; the port
        // accepting connections and the log announcing started controllers is enough).
        let addr: SocketAddr = format!("127.0.0.1:{health}").parse()?;
        let logc = log.clone();
        self.wait_for(
            "kube-controller-manager to start its controllers",
            Duration::from_secs(60),
            move || {
                let ok = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
                    && log_tail(&logc, 1 << 20).contains("garbage");
                async move { Ok(ok) }
            },
        )
        .await
    }

    /// A client with admin rights.
    pub fn client(&self) -> Client {
        self.client.clone()
    }
    /// The generated admin kubeconfig (credentials embedded; usable by kubectl).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }
    /// The API server's audit log (JSON lines), when [`PlaneOpts::audit_policy`] was set.
    pub fn audit_log_path(&self) -> Option<&Path> {
        self.audit_log.as_deref()
    }
    /// Writes a kubeconfig authenticating as `user` (client certificate, member of
    /// `system:masters` so it may do anything) to `<plane dir>/kubeconfig-<user>`: a
    /// second identity whose requests the audit log tells apart from the admin's.
    pub fn kubeconfig_for(&self, user: &str) -> Result<PathBuf> {
        let cert = self.ca.client(user, &["system:masters"])?;
        let path = self.path.join(format!("kubeconfig-{user}"));
        write(
            &path,
            &format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-world\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\nusers:\n- name: {user}\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\ncontexts:\n- name: kube-world\n  context:\n    cluster: kube-world\n    user: {user}\n    namespace: default\ncurrent-context: kube-world\n",
                url = self.url,
                ca = b64(self.ca.cert_pem().as_bytes()),
                cert = b64(cert.cert.as_bytes()),
                key = b64(cert.key.as_bytes()),
            ),
        )?;
        Ok(path)
    }
    /// A client authenticating as `user` ([`Plane::kubeconfig_for`]).
    pub async fn client_as(&self, user: &str) -> Result<Client> {
        let path = self.kubeconfig_for(user)?;
        let config = Config::from_custom_kubeconfig(
            Kubeconfig::read_from(&path)?,
            &KubeConfigOptions::default(),
        )
        .await
        .with_context(|| format!("loading {}", path.display()))?;
        Ok(Client::try_from(config)?)
    }
    /// `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> &str {
        &self.url
    }
    /// The API server's `/version`.
    pub fn server_version(&self) -> &Info {
        &self.version
    }
    /// The plane's directory: logs (`<process>.log`), certificates, etcd data.
    pub fn dir(&self) -> &Path {
        &self.path
    }
    /// Process ids of every process the plane started (etcd first).
    pub fn pids(&self) -> Vec<u32> {
        self.named_pids().into_iter().map(|(_, pid)| pid).collect()
    }
    /// Every process the plane started, by name (etcd first).
    pub fn named_pids(&self) -> Vec<(String, u32)> {
        self.procs
            .lock()
            .unwrap()
            .iter()
            .map(|p| (p.name().to_string(), p.pid()))
            .collect()
    }
    /// Paths of all process logs so far.
    pub fn log_paths(&self) -> Vec<PathBuf> {
        self.procs
            .lock()
            .unwrap()
            .iter()
            .map(|p| p.log_path().to_path_buf())
            .collect()
    }
    /// The plane's CA certificate (PEM); it signs every serving certificate of the plane.
    pub fn ca_pem(&self) -> &str {
        self.ca.cert_pem()
    }
    /// The tool paths in use.
    pub fn tools(&self) -> &'static Tools {
        self.tools
    }
    /// How long [`Plane::start`] took.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// Creates a fresh namespace `<prefix>-<unique suffix>` and returns its name.
    pub async fn namespace(&self, prefix: &str) -> Result<String> {
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let suffix = format!(
            "{:x}{:x}",
            (nanos ^ std::process::id()) & 0xfffff,
            N.fetch_add(1, Ordering::Relaxed)
        );
        let prefix: String = prefix
            .to_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .take(40)
            .collect();
        let name = format!("{}-{suffix}", prefix.trim_matches('-'));
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        Ok(name)
    }

    /// Server-side applies multi-document YAML; namespaced objects without a namespace go
    /// to `default`.
    pub async fn apply_yaml(&self, yaml: &str) -> Result<Vec<DynamicObject>> {
        apply::apply_yaml(&self.client, None, yaml).await
    }
    /// Like [`Plane::apply_yaml`], defaulting namespaced objects to `namespace`.
    pub async fn apply_yaml_in(&self, namespace: &str, yaml: &str) -> Result<Vec<DynamicObject>> {
        apply::apply_yaml(&self.client, Some(namespace), yaml).await
    }
    /// [`Plane::apply_yaml`] on a file.
    pub async fn apply_yaml_file(&self, path: impl AsRef<Path>) -> Result<Vec<DynamicObject>> {
        let path = path.as_ref();
        let yaml =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        self.apply_yaml(&yaml)
            .await
            .with_context(|| format!("applying {}", path.display()))
    }
    /// A dynamic API for `apiVersion`/`kind` (found by discovery), namespaced to
    /// `namespace` if the kind is namespaced.
    pub async fn dynamic_api(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Result<Api<DynamicObject>> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        apply::dynamic_api(
            &self.client,
            &GroupVersionKind::gvk(group, version, kind),
            namespace,
        )
        .await
    }

    /// Installs the CRDs in a YAML string (other kinds are applied too) and waits until
    /// they are established. Conversion webhooks are dropped (`strategy: None`) until a
    /// manager serving them is started. Returns the CRD names.
    pub async fn install_crds_yaml(&self, yaml: &str) -> Result<Vec<String>> {
        let names = self.apply_crds_yaml(yaml, None).await?;
        self.wait_crds_established(&names).await?;
        Ok(names)
    }
    /// [`Plane::install_crds_yaml`], the conversion webhook of every CRD with several
    /// versions pointed at `url` (a server with a certificate from
    /// [`Plane::webhook_cert_dir`]) instead of dropped.
    pub async fn install_crds_yaml_converted_at(
        &self,
        yaml: &str,
        url: &str,
    ) -> Result<Vec<String>> {
        let names = self.apply_crds_yaml(yaml, Some(url)).await?;
        self.wait_crds_established(&names).await?;
        Ok(names)
    }
    async fn apply_crds_yaml(
        &self,
        yaml: &str,
        conversion_url: Option<&str>,
    ) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for mut doc in apply::parse_documents(yaml)? {
            if doc.get("kind").and_then(|k| k.as_str()) == Some("CustomResourceDefinition") {
                let conversion = match conversion_url {
                    Some(url) => self.conversion_at(&doc, url),
                    None => serde_json::json!({ "strategy": "None" }),
                };
                if let Some(spec) = doc.get_mut("spec").and_then(|s| s.as_object_mut()) {
                    spec.insert("conversion".into(), conversion);
                }
                let obj = apply::apply_object(&self.client, None, doc).await?;
                names.push(obj.metadata.name.unwrap_or_default());
            } else if doc.get("kind").and_then(|k| k.as_str())
                == Some("MutatingWebhookConfiguration")
            {
                // The manager's admission webhook rides on the same server as the
                // conversion webhook: pointed at it, or left out without one.
                if let Some(url) = conversion_url {
                    self.point_admission(&mut doc, url);
                    apply::apply_object(&self.client, None, doc).await?;
                }
            } else {
                apply::apply_object(&self.client, None, doc).await?;
            }
        }
        Ok(names)
    }
    /// The admission webhook configurations in `yaml` (other documents are skipped),
    /// each webhook called at its Service path on `url`'s server instead; e.g. after
    /// [`Plane::remove_service_webhooks`] took the ones `clusterctl init` installed. Waits
    /// a moment for the API server to take them up. Returns their names.
    pub async fn install_admission_at(&self, yaml: &str, url: &str) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for mut doc in apply::parse_documents(yaml)? {
            if doc.get("kind").and_then(|k| k.as_str()) != Some("MutatingWebhookConfiguration") {
                continue;
            }
            self.point_admission(&mut doc, url);
            let obj = apply::apply_object(&self.client, None, doc).await?;
            names.push(obj.metadata.name.unwrap_or_default());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok(names)
    }
    /// Every webhook of an admission configuration `doc` naming a Service path called at
    /// that path on `url`'s server (trusting the plane's CA) instead.
    fn point_admission(&self, doc: &mut Value, url: &str) {
        // `https://HOST:PORT`, the server's origin.
        let origin = url.splitn(4, '/').take(3).collect::<Vec<_>>().join("/");
        crate::managers::point_webhooks(doc, &origin, &b64(self.ca.cert_pem().as_bytes()));
    }
    /// A CRD's `spec.conversion` calling `url` (trusting the plane's CA) when it has
    /// several versions, else `None`.
    fn conversion_at(&self, crd: &Value, url: &str) -> Value {
        let versions = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        if versions < 2 {
            return serde_json::json!({ "strategy": "None" });
        }
        serde_json::json!({
            "strategy": "Webhook",
            "webhook": {
                "clientConfig": {"url": url, "caBundle": b64(self.ca.cert_pem().as_bytes())},
                "conversionReviewVersions": ["v1"],
            },
        })
    }
    /// Points the conversion webhook of every installed CRD matching `selector` (a label
    /// selector) with several versions at `url`, as [`Plane::install_crds_yaml_converted_at`]
    /// does, e.g. after `clusterctl init` installed them pointing at a Service. Waits a
    /// moment for the API server to take the change up. Returns the CRDs changed.
    pub async fn point_conversion(&self, selector: &str, url: &str) -> Result<Vec<String>> {
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let mut changed = Vec::new();
        for crd in api.list(&ListParams::default().labels(selector)).await? {
            let value = serde_json::to_value(&crd)?;
            let conversion = self.conversion_at(&value, url);
            if conversion["strategy"] != "Webhook" {
                continue;
            }
            let name = crd.metadata.name.clone().unwrap_or_default();
            let patch = serde_json::json!({"spec": {"conversion": conversion}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .with_context(|| format!("pointing the conversion of CRD {name} at {url}"))?;
            changed.push(name);
        }
        // The API server rebuilds a CRD's handler from an informer.
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok(changed)
    }
    /// A serving certificate for `127.0.0.1`/`localhost` from the plane's CA, as
    /// `tls.crt` and `tls.key` in a directory of the plane's (what webhook servers read).
    pub fn webhook_cert_dir(&self, name: &str) -> Result<PathBuf> {
        let dir = self.path.join(format!("{name}-certs"));
        std::fs::create_dir_all(&dir)?;
        let serving = self.ca.server(&["127.0.0.1", "localhost"])?;
        std::fs::write(dir.join("tls.crt"), &serving.cert)?;
        std::fs::write(dir.join("tls.key"), &serving.key)?;
        Ok(dir)
    }
    /// [`Plane::install_crds_yaml`] on a file.
    pub async fn install_crds_file(&self, path: impl AsRef<Path>) -> Result<Vec<String>> {
        self.install_crds_files(&[path.as_ref().to_path_buf()])
            .await
    }
    /// [`Plane::install_crds_yaml`] on several files, waiting for all CRDs at the end.
    pub async fn install_crds_files(&self, files: &[PathBuf]) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for path in files {
            let yaml = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            names.extend(
                self.apply_crds_yaml(&yaml, None)
                    .await
                    .with_context(|| format!("installing CRDs from {}", path.display()))?,
            );
        }
        self.wait_crds_established(&names).await?;
        Ok(names)
    }
    /// [`Plane::install_crds_yaml`] on every `*.yaml` file of a directory (sorted).
    pub async fn install_crds_dir(&self, dir: impl AsRef<Path>) -> Result<Vec<String>> {
        self.install_crds_files(&yaml_files(dir.as_ref())?).await
    }
    /// Installs Cluster API's CRDs (core, kubeadm bootstrap, kubeadm control plane) from
    /// the pinned module release.
    pub async fn install_capi_crds(&self) -> Result<Vec<String>> {
        let capi = self.tools.capi_dir();
        let mut files = Vec::new();
        for sub in CAPI_CRD_DIRS {
            files.extend(yaml_files(&capi.join(sub))?);
        }
        self.install_crds_files(&files).await
    }
    /// Installs the in-cluster IPAM provider's CRDs.
    pub async fn install_ipam_crds(&self) -> Result<Vec<String>> {
        self.install_crds_dir(self.tools.ipam_dir().join("config/crd/bases"))
            .await
    }

    /// Waits until every named CRD has `Established=True`.
    pub async fn wait_crds_established(&self, names: &[String]) -> Result<()> {
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        for name in names {
            let api = api.clone();
            let n = name.clone();
            self.wait_for(
                &format!("CRD {name} to be established"),
                Duration::from_secs(30),
                move || {
                    let api = api.clone();
                    let n = n.clone();
                    async move {
                        let crd = api.get(&n).await?;
                        Ok(crd
                            .status
                            .and_then(|s| s.conditions)
                            .unwrap_or_default()
                            .iter()
                            .any(|c| c.type_ == "Established" && c.status == "True"))
                    }
                },
            )
            .await?;
        }
        Ok(())
    }

    /// Stops the plane and keeps its directory (logs, kubeconfig) for a post-mortem, as
    /// `KUBE_WORLD_KEEP=1` would; returns where it is.
    pub fn keep(mut self) -> Option<PathBuf> {
        self.stop();
        self.dir.take().map(|d| d.keep())
    }

    /// Kills every process (managers first, etcd last). Also done on drop.
    pub fn stop(&self) {
        let mut procs = self.procs.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(mut p) = procs.pop() {
            p.kill();
        }
    }
}

/// Where Cluster API keeps its CRDs inside the module.
pub(crate) const CAPI_CRD_DIRS: &[&str] = &[
    "core/config/crd/bases",
    "bootstrap/kubeadm/config/crd/bases",
    "controlplane/kubeadm/config/crd/bases",
];

pub(crate) fn yaml_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    Ok(files)
}

impl Drop for Plane {
    fn drop(&mut self) {
        let failed = std::thread::panicking();
        let logs = self.log_paths();
        self.stop();
        if (failed || std::env::var_os("KUBE_WORLD_KEEP").is_some())
            && let Some(dir) = self.dir.take()
        {
            let kept = dir.keep();
            eprintln!("kube-world: plane kept in {}; logs:", kept.display());
            for l in logs {
                eprintln!("  {}", l.display());
            }
        }
    }
}
