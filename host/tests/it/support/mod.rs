//! What the host's integration tests share: the built plugins and request builders.
pub mod conformance;
pub mod controllers;
pub mod drive;
pub mod junit;
pub mod manager;
pub mod sushy;
pub mod world;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use hyperplug_runtime::bindings::{cluster, machine};
use hyperplug_runtime::{
    BlobLimits, BlobStore, Credentials, Limits, ObjectRef, Plugin, Runtime, RuntimeBuilder,
};
use pve_sim::{Config, ListenOpts, RunningSim, Simulator};
use serde_json::json;

/// Build every plugin once per test binary (a no-op when they are up to date).
fn built() -> &'static PathBuf {
    static OUT: OnceLock<PathBuf> = OnceLock::new();
    OUT.get_or_init(|| {
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("test-plugins");
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let status = std::process::Command::new("bash")
            .arg(root.join("scripts/build-plugins.sh"))
            .arg("--test-out")
            .arg(&out)
            .status()
            .expect("run scripts/build-plugins.sh");
        assert!(status.success(), "scripts/build-plugins.sh failed");
        out
    })
}

/// `proxmox` or `redfish` (the bundled plugins), `proxmox-py` (the Python one), a test plugin: `hostile`, `wrong-wit`,
/// `sockets`, or `proxmox-wit-0.2` (the Proxmox plugin as built against WIT 0.2, kept
/// in tests/fixtures/).
pub fn plugin_path(name: &str) -> PathBuf {
    if name == "proxmox-wit-0.2" {
        return PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/proxmox-wit-0.2.wasm");
    }
    let out = built();
    if name == "proxmox" || name == "redfish" || name == "proxmox-py" {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../plugins/{name}.wasm"))
    } else {
        out.join(format!("{name}.wasm"))
    }
}

/// The plugin `name` in a runtime of its own with these limits.
pub async fn load(name: &str, limits: Limits) -> (Runtime, Plugin) {
    load_with(name, Runtime::builder(limits)).await
}

/// The plugin `name` in a runtime built from `runtime` (compiled code cached for the
/// whole test binary).
pub async fn load_with(name: &str, runtime: RuntimeBuilder) -> (Runtime, Plugin) {
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache");
    let runtime = runtime.cache_dir(Some(cache)).build().expect("runtime");
    let plugin = runtime.load(&plugin_path(name)).await.expect("load plugin");
    (runtime, plugin)
}

pub fn object(name: &str) -> ObjectRef {
    ObjectRef {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
    }
}

pub fn credentials(endpoint: &str) -> Credentials {
    let (token, secret) = pve_sim::DEFAULT_TOKEN
        .rsplit_once('=')
        .expect("token=secret");
    Credentials {
        endpoint: endpoint.into(),
        token: token.into(),
        secret: secret.into(),
        ca_bundle: None,
        fingerprint: None,
        insecure: false,
    }
}

/// pve-sim over HTTPS on a free loopback port.
pub async fn sim_with(config: Config) -> RunningSim {
    Simulator::start(
        config,
        ListenOpts {
            addr: "127.0.0.1:0".into(),
            tls: true,
        },
    )
    .await
    .expect("start pve-sim")
}

/// The simulator's credentials, its certificate pinned by fingerprint.
pub fn pinned(sim: &RunningSim) -> Credentials {
    Credentials {
        fingerprint: Some(sim.fingerprint().to_string()),
        ..credentials(sim.base_url())
    }
}

/// The seed's ProxmoxCluster spec, unchanged but for the simulator's node names.
pub fn seed_cluster() -> serde_json::Value {
    json!({
        "allowedNodes": ["pve1"],
        "controlPlaneEndpoint": {"host": "192.168.1.230", "port": 6443},
        "dnsServers": ["192.168.1.1"],
        "ipv4Config": {"addresses": ["192.168.1.220-192.168.1.229"], "gateway": "192.168.1.1", "prefix": 24},
        "schedulerHints": {"memoryAdjustment": 0},
    })
}

pub fn machine_request(
    spec: serde_json::Value,
    credentials: Credentials,
) -> machine::MachineRequest {
    machine::MachineRequest {
        machine: object("m1"),
        cluster: object("c1"),
        spec: spec.to_string(),
        cluster_spec: "{}".into(),
        state: None,
        bootstrap: None,
        failure_domain: None,
        addresses: vec![],
        credentials,
        more_credentials: vec![],
        plugin_status: None,
    }
}

pub fn cluster_request(
    spec: serde_json::Value,
    credentials: Credentials,
) -> cluster::ClusterRequest {
    cluster::ClusterRequest {
        cluster: object("c1"),
        spec: spec.to_string(),
        state: None,
        credentials,
        more_credentials: vec![],
        plugin_status: None,
    }
}

/// Until `holds` is true, looked at every 10 ms: a test awaits what it then asserts on
/// (a simulator's task ending, say) instead of sleeping for a time it guessed. Panics
/// naming `what` after 30 s.
pub async fn until(what: &str, mut holds: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !holds() {
        assert!(
            std::time::Instant::now() < deadline,
            "not so after 30 s: {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Serve blobs for `runtime` with the default limits (on a port nothing reads).
pub fn blob_store() -> Arc<BlobStore> {
    Arc::new(BlobStore::new(
        url::Url::parse("http://127.0.0.1:9").unwrap(),
        BlobLimits::default(),
    ))
}
