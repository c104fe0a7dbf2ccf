//! A whole management world for controller tests: a real kube-apiserver with the CRDs
//! of the Cluster API and IPAM kinds the host uses and ours, pve-sim, and the hyperplug
//! controllers running in this process against them.
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use hyperplug::admission::Finalizers;
use hyperplug::controller::trust::ownership::OwnershipKeys;
use hyperplug::controller::{self, ManagerOptions};
use hyperplug::conversion::Conversions;
use hyperplug::lease_claims::LeaseClaims;
use hyperplug::metrics::Metrics;
use hyperplug::webhook::{self, CertDir};
use hyperplug_runtime::{Limits, Runtime};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch};
use kube_world::{Plane, PlaneOpts};
use pve_sim::{Config, RunningSim};
use serde_json::json;

/// The API token secret of these tests: unique, so a scan can prove it never leaks.
pub const TOKEN_ID: &str = "capmox@pve!capi";
pub const TOKEN_SECRET: &str = "7f1c2d9e-hyperplug-test-secret-5b3a";

pub struct World {
    pub plane: Plane,
    pub sim: RunningSim,
    pub ns: String,
    pub metrics: Arc<Metrics>,
    controllers: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for World {
    fn drop(&mut self) {
        if let Some(c) = &self.controllers {
            c.abort();
        }
    }
}

/// Everything the host logged in this test binary, for leak scans.
pub fn logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = buffer.clone();
        let _ = tracing_subscriber::fmt()
            .with_env_filter("debug,kube=info,tower=info,hyper=info,h2=info,rustls=info")
            .with_writer(move || LogWriter(sink.clone()))
            .try_init();
        buffer
    })
    .clone()
}

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The conversion webhook of `plugins`' kinds on a free loopback port, as `hyperplug
/// run` serves it, with a certificate from `plane`'s CA; its URL. It signs conversion
/// data with the key the in-process controllers use (`ManagerOptions::default()`'s), so
/// they trust what it keeps.
pub async fn serve_conversion(plane: &Plane, plugins: &[hyperplug_runtime::Plugin]) -> String {
    let (key_ns, key_name) = ManagerOptions::default().ownership_key_secret;
    let keys = OwnershipKeys::load_or_create(plane.client(), &key_ns, &key_name)
        .await
        .expect("ownership key");
    let certs = CertDir {
        dir: plane
            .webhook_cert_dir("conversion")
            .expect("webhook certificate"),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = webhook::Server::on(
        listener,
        certs,
        Conversions::new(plugins, Arc::new(keys)),
        Finalizers::new(plugins, Default::default()),
    )
    .expect("webhook");
    let url = server.url().unwrap();
    tokio::spawn(server.serve());
    url
}

/// The Cluster API CRDs of the kinds the host reads and writes (in Cluster API's module):
/// its Clusters and Machines, and the IP address claims and addresses the IPAM provider
/// binds. Cluster API's other kinds (ClusterClass, MachineSet, the kubeadm providers',
/// ...) are 2 MB of schemas that no test here writes and the host never reads: each
/// world installing them cost the API server about 3 s of CPU.
const CAPI_CRDS: &[&str] = &[
    "core/config/crd/bases/cluster.x-k8s.io_clusters.yaml",
    "core/config/crd/bases/cluster.x-k8s.io_machines.yaml",
    "core/config/crd/bases/ipam.cluster.x-k8s.io_ipaddressclaims.yaml",
    "core/config/crd/bases/ipam.cluster.x-k8s.io_ipaddresses.yaml",
];

/// [`CAPI_CRDS`] and the in-cluster IPAM provider's CRDs (its pools), established.
async fn install_capi_and_ipam_crds(plane: &Plane) {
    let capi = plane.tools().capi_dir();
    let ipam = plane.tools().ipam_dir().join("config/crd/bases");
    let mut pools: Vec<_> = std::fs::read_dir(&ipam)
        .expect("the IPAM provider's CRDs")
        .map(|entry| entry.expect("a CRD file").path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    pools.sort();
    let mut files: Vec<_> = CAPI_CRDS.iter().map(|f| capi.join(f)).collect();
    files.extend(pools);
    plane
        .install_crds_files(&files)
        .await
        .expect("Cluster API and IPAM CRDs");
}

/// The resync of the tests' manager: drift and recoveries show within seconds.
const FAST_RESYNC: Duration = Duration::from_secs(5);

impl World {
    /// The world with the controllers running in this process.
    pub async fn start(sim_config: Config) -> World {
        World::start_with(sim_config, true).await
    }

    /// The world without controllers (a test runs `hyperplug run` as a process).
    pub async fn start_with(sim_config: Config, in_process: bool) -> World {
        World::start_full(sim_config, in_process, false, FAST_RESYNC).await
    }

    /// The world with the controllers in this process at the manager's default resync
    /// (300 s): what a provisioned machine shows then comes from the observer.
    pub async fn start_default_resync(sim_config: Config) -> World {
        let resync = ManagerOptions::default().resync;
        World::start_full(sim_config, true, false, resync).await
    }

    /// The world with the controllers running in this process and the API server
    /// writing an audit log of every write ([`World::writes`]).
    pub async fn start_audited(sim_config: Config) -> World {
        World::start_full(sim_config, true, true, FAST_RESYNC).await
    }

    /// The audited world without controllers: a test starts its own, each as a user of
    /// its own that the audit log tells apart.
    pub async fn start_audited_without_controllers(sim_config: Config) -> World {
        World::start_full(sim_config, false, true, FAST_RESYNC).await
    }

    async fn start_full(
        mut sim_config: Config,
        in_process: bool,
        audit: bool,
        resync: Duration,
    ) -> World {
        logs();
        let plane = Plane::start(PlaneOpts {
            controller_manager: true,
            audit_policy: audit.then(|| kube_world::AUDIT_WRITES_POLICY.to_string()),
            ..PlaneOpts::default()
        })
        .await
        .expect("plane");
        install_capi_and_ipam_crds(&plane).await;
        let metrics = Arc::new(Metrics::default());
        let observed = metrics.clone();
        // The runtime as `hyperplug run` builds it: metrics hear the plugin's requests,
        // claims are Leases.
        let runtime = Runtime::builder(Limits::default())
            .observe_http(Arc::new(move |p, method, path| {
                observed.infrastructure_request(p, method, path)
            }))
            .claims(Arc::new(LeaseClaims::new(plane.client(), "default")));
        let (_rt, plugin) = super::load_with("proxmox", runtime).await;
        let crds = hyperplug_kinds::crds::crds_yaml(plugin.info()).expect("our CRDs");
        // The kinds' conversion webhook, served in this process for the whole world (a
        // manager started as a process serves its own too, unused).
        let webhook = serve_conversion(&plane, std::slice::from_ref(&plugin)).await;
        plane
            .install_crds_yaml_converted_at(&crds, &webhook)
            .await
            .expect("install our CRDs");
        sim_config.tokens = vec![format!("{TOKEN_ID}={TOKEN_SECRET}")];
        let sim = super::sim_with(sim_config).await;
        let ns = plane.namespace("hp").await.expect("namespace");
        let secret = format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: pve-credentials\nstringData:\n  url: {}\n  token: \"{TOKEN_ID}\"\n  secret: {TOKEN_SECRET}\n  fingerprint: \"{}\"\n",
            sim.base_url(),
            sim.fingerprint()
        );
        plane
            .apply_yaml_in(&ns, &secret)
            .await
            .expect("credentials secret");
        let options = ManagerOptions {
            resync,
            ..ManagerOptions::default()
        };
        let controllers = in_process.then(|| {
            let (client, metrics) = (plane.client(), metrics.clone());
            tokio::spawn(async move {
                controller::run(client, vec![plugin], options, metrics)
                    .await
                    .expect("controllers")
            })
        });
        World {
            plane,
            sim,
            ns,
            metrics,
            controllers,
        }
    }

    pub async fn apply(&self, yaml: &str) -> Vec<DynamicObject> {
        self.plane
            .apply_yaml_in(&self.ns, yaml)
            .await
            .expect("apply")
    }

    /// Apply a fixture whose last document is an InfraMachine owned by the Machine
    /// `machine`, as CAPI owns it: its `MACHINE_UID` is filled in once the Machine exists.
    pub async fn apply_owned_by_machine(&self, yaml: &str, machine: &str) {
        let (objects, infra_machine) = yaml.rsplit_once("---\n").expect("several documents");
        self.apply(objects).await;
        let machines = self.api("cluster.x-k8s.io/v1beta2", "Machine").await;
        let uid = machines.get(machine).await.unwrap().uid().unwrap();
        self.apply(&infra_machine.replace("MACHINE_UID", &uid))
            .await;
    }

    pub async fn api(&self, api_version: &str, kind: &str) -> Api<DynamicObject> {
        self.plane
            .dynamic_api(api_version, kind, Some(&self.ns))
            .await
            .expect("api")
    }

    /// Poll until `pred` holds (at most three minutes), returning the object.
    pub async fn wait_for(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
        what: &str,
        pred: impl Fn(&DynamicObject) -> bool,
    ) -> DynamicObject {
        // Long enough for the test world on a loaded 2-core CI machine (every suite at
        // once, the fuzz run beside): a wait only ends this early when the test fails.
        let deadline = std::time::Instant::now() + Duration::from_secs(180);
        let mut last = None;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(obj)) = api.get_opt(name).await {
                if pred(&obj) {
                    return obj;
                }
                last = Some(obj);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!(
            "timed out after 180 s waiting for {name}: {what}; last seen: {:?}",
            last.map(|o| o.data)
        );
    }

    /// A call to the Proxmox API behind the host's back, as anyone holding the world's
    /// token may make: `method path` with `form` (none when empty); its status and body.
    pub async fn out_of_band(
        &self,
        method: reqwest::Method,
        path: &str,
        form: &[(&str, &str)],
    ) -> (reqwest::StatusCode, String) {
        let http = reqwest::Client::builder()
            .no_proxy()
            .danger_accept_invalid_certs(true)
            .build()
            .unwrap();
        let mut request = http
            .request(method, format!("{}/api2/json{path}", self.sim.base_url()))
            .header(
                "Authorization",
                format!("PVEAPIToken={TOKEN_ID}={TOKEN_SECRET}"),
            );
        if !form.is_empty() {
            request = request.form(form);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        (status, response.text().await.unwrap_or_default())
    }

    /// How many requests pve-sim served to `endpoint` (`"METHOD /path/{template}"`).
    pub fn requests(&self, endpoint: &str) -> u64 {
        self.sim
            .state()
            .counters()
            .get(endpoint)
            .copied()
            .unwrap_or(0)
    }

    /// Wait until `name`'s `Ready` reason is `reason`; its message.
    pub async fn wait_reason(&self, api: &Api<DynamicObject>, name: &str, reason: &str) -> String {
        let o = self
            .wait_for(api, name, reason, |o| {
                ready_reason(o).as_deref() == Some(reason)
            })
            .await;
        condition(&o, "Ready").unwrap()["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// `hyperplug run` with these plugins (bundled or test plugins, by name) against this
    /// world's API server, health and metrics on free ports, its log appended to
    /// `hyperplug.log` in the plane's directory. Add flags, then spawn it.
    pub fn hyperplug_run(&self, plugins: &[&str]) -> Command {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.plane.dir().join("hyperplug.log"))
            .expect("log file");
        let mut run = Command::new(env!("CARGO_BIN_EXE_hyperplug"));
        run.arg("run");
        for plugin in plugins {
            run.arg("--plugin").arg(super::plugin_path(plugin));
        }
        let certs = self.plane.webhook_cert_dir("hyperplug-run").expect("certs");
        run.args(["--health-addr", "127.0.0.1:0"])
            .args(["--metrics-addr", "127.0.0.1:0"])
            .args(["--webhook-addr", "127.0.0.1:0"])
            .arg("--webhook-cert-dir")
            .arg(certs)
            .env("KUBECONFIG", self.plane.kubeconfig_path())
            .env("POD_NAMESPACE", &self.ns)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log));
        run
    }

    /// Wait until `name` (of `objects`) fails terminally (`status.failedGeneration` set,
    /// Ready False), then check that nothing is retried while its spec stays, not even
    /// at the 5 s resync. PVE requests in `others` are not counted: other objects'
    /// reconciles make them. Its Ready condition.
    pub async fn failed_terminally(
        &self,
        objects: &Api<DynamicObject>,
        name: &str,
        others: &[&str],
    ) -> serde_json::Value {
        let failed = self
            .wait_for(objects, name, "terminal failure", |o| {
                o.data["status"]["failedGeneration"].is_i64()
            })
            .await;
        let ready = condition(&failed, "Ready").expect("a Ready condition");
        assert_eq!(ready["status"], "False");
        let counters = || {
            let mut c = self.sim.state().counters();
            c.retain(|endpoint, _| !others.contains(&endpoint.as_str()));
            c
        };
        let before = counters();
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(
            counters(),
            before,
            "a terminal error must stop retries while the spec is unchanged"
        );
        ready
    }

    /// With `name` (of `objects`) provisioned under the Cluster `demo`: pausing the
    /// Cluster stops every plugin call for it, even when it changes and past the resync,
    /// and unpausing resumes them.
    pub async fn pausing_the_cluster_stops_plugin_calls(
        &self,
        objects: &Api<DynamicObject>,
        name: &str,
    ) {
        let capi = self.api("cluster.x-k8s.io/v1beta2", "Cluster").await;
        let pause = |on: bool| Patch::Merge(json!({"spec": {"paused": on}}));
        capi.patch("demo", &Default::default(), &pause(true))
            .await
            .unwrap();
        self.wait_for(objects, name, "Paused", |o| {
            condition(o, "Paused").is_some_and(|c| c["status"] == "True")
        })
        .await;
        self.sim.state().reset_counters();
        // A change to the object would normally reconcile it (and call the plugin); the
        // resync period (5 s here) passes too.
        let poke = json!({"metadata": {"annotations": {"poke": "1"}}});
        objects
            .patch(name, &Default::default(), &Patch::Merge(poke))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(7)).await;
        assert!(
            self.sim.state().counters().is_empty(),
            "paused: {:?}",
            self.sim.state().counters()
        );
        capi.patch("demo", &Default::default(), &pause(false))
            .await
            .unwrap();
        self.wait_for(objects, name, "unpaused", |o| {
            condition(o, "Paused").is_some_and(|c| c["status"] == "False")
        })
        .await;
        for _ in 0..100 {
            if !self.sim.state().counters().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(
            !self.sim.state().counters().is_empty(),
            "unpausing must resume plugin calls"
        );
    }

    /// The writes the API server's audit log holds (a world from
    /// [`World::start_audited`]): each write's user, verb, `resource[/subresource]`,
    /// object name and request URI.
    pub fn writes(&self) -> Vec<Write> {
        let log = self.plane.audit_log_path().expect("an audited world");
        let text = std::fs::read_to_string(log).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|e| e["stage"] == "ResponseComplete")
            .map(|e| {
                let r = &e["objectRef"];
                let mut resource = r["resource"].as_str().unwrap_or_default().to_string();
                if let Some(sub) = r["subresource"].as_str() {
                    resource = format!("{resource}/{sub}");
                }
                let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
                Write {
                    user: text(&e["user"]["username"]),
                    verb: text(&e["verb"]),
                    resource,
                    name: text(&r["name"]),
                    uri: text(&e["requestURI"]),
                }
            })
            .collect()
    }

    /// Poll until the object is gone.
    pub async fn wait_gone(&self, api: &Api<DynamicObject>, name: &str) {
        for _ in 0..300 {
            if api.get_opt(name).await.expect("get").is_none() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!(
            "{name} was never deleted: {:?}",
            api.get_opt(name).await.ok().flatten().map(|o| o.data)
        );
    }
}

/// One write to the API server, from its audit log.
#[derive(Debug, Clone)]
pub struct Write {
    /// Who wrote: the request's user name.
    pub user: String,
    pub verb: String,
    /// `resource` or `resource/subresource`.
    pub resource: String,
    pub name: String,
    pub uri: String,
}

/// The reason of an object's `Ready` condition.
pub fn ready_reason(obj: &DynamicObject) -> Option<String> {
    condition(obj, "Ready").and_then(|c| c["reason"].as_str().map(str::to_string))
}

/// The condition `type_` of an object's status.
pub fn condition(obj: &DynamicObject, type_: &str) -> Option<serde_json::Value> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}
