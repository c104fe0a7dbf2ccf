//! A whole management world for controller tests: a real kube-apiserver with the
//! Cluster API and IPAM CRDs and ours, pve-sim, and the hyperplug controllers running
//! in this process against them.
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use hyperplug::controller::{self, ManagerOptions};
use hyperplug::metrics::Metrics;
use hyperplug::runtime::{Limits, Plugin};
use kube::api::{Api, DynamicObject};
use kube_world::{Plane, PlaneOpts};
use pve_sim::{Config, ListenOpts, RunningSim, Simulator};

/// The API token secret of these tests: unique, so a scan can prove it never leaks.
pub const TOKEN_ID: &str = "capmox@pve!capi";
pub const TOKEN_SECRET: &str = "7f1c2d9e-hyperplug-test-secret-5b3a";

pub struct World {
    pub plane: Plane,
    pub sim: RunningSim,
    pub ns: String,
    pub plugin: Plugin,
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

impl World {
    /// The world with the controllers running in this process.
    pub async fn start(sim_config: Config) -> World {
        World::start_with(sim_config, true).await
    }

    /// The world without controllers (a test runs `hyperplug run` as a process).
    pub async fn start_with(mut sim_config: Config, in_process: bool) -> World {
        logs();
        let plane = Plane::start(PlaneOpts {
            controller_manager: true,
            ..PlaneOpts::default()
        })
        .await
        .expect("plane");
        plane.install_capi_crds().await.expect("CAPI CRDs");
        plane.install_ipam_crds().await.expect("IPAM CRDs");
        let (_rt, plugin) = super::load("proxmox", Limits::default()).await;
        let crds = hyperplug::crds::crds_yaml(plugin.info()).expect("our CRDs");
        plane
            .install_crds_yaml(&crds)
            .await
            .expect("install our CRDs");
        sim_config.tokens = vec![format!("{TOKEN_ID}={TOKEN_SECRET}")];
        let sim = Simulator::start(
            sim_config,
            ListenOpts {
                addr: "127.0.0.1:0".into(),
                tls: true,
            },
        )
        .await
        .expect("sim");
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
            resync: Duration::from_secs(5),
            ..ManagerOptions::default()
        };
        let metrics = Arc::new(Metrics::default());
        let observed = metrics.clone();
        plugin
            .runtime()
            .observe_http(Arc::new(move |p, method, path| {
                observed.infrastructure_request(p, method, path)
            }));
        let controllers = in_process.then(|| {
            let (client, plugins, metrics) =
                (plane.client(), vec![plugin.clone()], metrics.clone());
            tokio::spawn(async move {
                controller::run(client, plugins, options, metrics)
                    .await
                    .expect("controllers")
            })
        });
        World {
            plane,
            sim,
            ns,
            plugin,
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

    pub async fn api(&self, api_version: &str, kind: &str) -> Api<DynamicObject> {
        self.plane
            .dynamic_api(api_version, kind, Some(&self.ns))
            .await
            .expect("api")
    }

    /// Poll until `pred` holds (at most a minute), returning the object.
    pub async fn wait_for(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
        what: &str,
        pred: impl Fn(&DynamicObject) -> bool,
    ) -> DynamicObject {
        let mut last = None;
        for _ in 0..300 {
            if let Ok(Some(obj)) = api.get_opt(name).await {
                if pred(&obj) {
                    return obj;
                }
                last = Some(obj);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!(
            "timed out waiting for {name}: {what}; last seen: {:?}",
            last.map(|o| o.data)
        );
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

/// The condition `type_` of an object's status.
pub fn condition(obj: &DynamicObject, type_: &str) -> Option<serde_json::Value> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}
