//! Real Redfish BMCs for tests: sushy-tools' emulator (`sushy-emulator --fake`, from
//! the virtualenv scripts/setup.sh installs), one process per BMC on a free port, each
//! serving its own systems. It really downloads inserted virtual media.
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyperplug_runtime::{BlobLimits, BlobStore, Credentials};
use serde_json::Value;

pub struct System {
    pub uuid: String,
    pub name: String,
    pub mac: String,
}

pub struct Bmc {
    child: Child,
    pub url: String,
    pub systems: Vec<System>,
    _dir: tempfile::TempDir,
}

fn emulator() -> PathBuf {
    if let Some(p) = std::env::var_os("HYPERPLUG_SUSHY_EMULATOR") {
        return p.into();
    }
    let home = std::env::var_os("HOME").expect("HOME");
    let p = PathBuf::from(home).join(".cache/hyperplug/sushy-venv/bin/sushy-emulator");
    assert!(
        p.is_file(),
        "{} is missing: run scripts/setup.sh",
        p.display()
    );
    p
}

impl Bmc {
    /// A BMC serving `count` powered-off systems named `<prefix>-<i>`.
    pub async fn start(prefix: &str, count: usize) -> Bmc {
        let dir = tempfile::tempdir().expect("tempdir");
        let tag: u32 = rand::random();
        let systems: Vec<System> = (0..count)
            .map(|i| System {
                uuid: format!("{tag:08x}-0000-4000-8000-{:012x}", i + 1),
                name: format!("{prefix}-{i}"),
                mac: format!(
                    "52:54:00:{:02x}:{:02x}:{:02x}",
                    tag as u8,
                    (tag >> 8) as u8,
                    i + 1
                ),
            })
            .collect();
        let entries: Vec<String> = systems
            .iter()
            .map(|s| {
                format!(
                    "{{'uuid': '{}', 'name': '{}', 'power_state': 'Off', 'nics': [{{'mac': '{}', 'ip': '192.0.2.1'}}]}}",
                    s.uuid, s.name, s.mac
                )
            })
            .collect();
        let config = dir.path().join("emulator.conf");
        std::fs::write(
            &config,
            format!(
                // Each emulator keeps its state in its own directory: by default they all
                // share one SQLite file, and so one set of systems.
                "SUSHY_EMULATOR_FAKE_DRIVER = True\nSUSHY_EMULATOR_STATE_DIR = '{}'\nSUSHY_EMULATOR_FAKE_SYSTEMS = [{}]\n",
                dir.path().join("state").display(),
                entries.join(", ")
            ),
        )
        .expect("write config");
        let log = dir.path().join("emulator.log");
        for _ in 0..5 {
            let port = kube_world::free_port().expect("free port");
            let url = format!("http://127.0.0.1:{port}");
            let mut child = Command::new(emulator())
                .arg("--config")
                .arg(&config)
                .args(["--fake", "-i", "127.0.0.1", "-p", &port.to_string()])
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).expect("log"))
                .spawn()
                .expect("start sushy-emulator");
            if wait_ready(&mut child, &url).await {
                return Bmc {
                    child,
                    url,
                    systems,
                    _dir: dir,
                };
            }
            // Lost the port to someone else (or a slow start): try another.
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!(
            "sushy-emulator did not start: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// Credentials of this BMC (the fake driver checks none, the plugin sends them).
    pub fn credentials(&self) -> Credentials {
        Credentials {
            endpoint: self.url.clone(),
            token: "admin".into(),
            secret: "password".into(),
            ca_bundle: None,
            fingerprint: None,
            insecure: false,
        }
    }

    pub fn system_path(&self, uuid: &str) -> String {
        format!("/redfish/v1/Systems/{uuid}")
    }

    pub async fn get(&self, path: &str) -> Value {
        let text = client()
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .expect("GET")
            .text()
            .await
            .expect("body");
        serde_json::from_str(&text).expect("JSON")
    }

    pub async fn system(&self, uuid: &str) -> Value {
        self.get(&self.system_path(uuid)).await
    }

    pub async fn power(&self, uuid: &str) -> String {
        self.system(uuid).await["PowerState"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    pub async fn cd(&self, uuid: &str) -> Value {
        self.get(&format!("{}/VirtualMedia/Cd", self.system_path(uuid)))
            .await
    }

    /// Whether this BMC serves the system `uuid`.
    pub fn serves(&self, uuid: &str) -> bool {
        self.systems.iter().any(|s| s.uuid == uuid)
    }
}

impl Drop for Bmc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn wait_ready(child: &mut Child, url: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if let Ok(r) = client()
            .get(format!("{url}/redfish/v1/Systems"))
            .send()
            .await
            && r.status().is_success()
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
}

/// A blob store served on a free loopback port, as `hyperplug run --blob-advertise-url`
/// serves it.
pub async fn serve_blobs() -> Arc<BlobStore> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let advertise = url::Url::parse(&format!("http://{addr}")).expect("url");
    let store = Arc::new(BlobStore::new(advertise, BlobLimits::default()));
    let app = hyperplug_runtime::blob_server::router(store.clone());
    let bounds = hyperplug::listen::Bounds::blobs(&Default::default());
    tokio::spawn(hyperplug::listen::serve(
        listener,
        hyperplug::listen::Transport::Plain,
        app,
        bounds,
    ));
    store
}
