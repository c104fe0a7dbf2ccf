//! The `pve-sim` binary: its help, its config file, and what it prints at start.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_pve-sim");

/// Stops the spawned simulator even when an assertion fails.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn pve_sim_help_documents_the_configuration() {
    let out = Command::new(BIN).arg("--help").output().expect("runs");
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--listen",
        "--token",
        "--config",
        "--http",
        "--fast",
        "task_ms",
        "[faults]",
        "node_task_concurrency",
        "boot_delay_ms",
        "/_sim/state",
        "REDACTED-SIM-SECRET",
    ] {
        assert!(help.contains(needle), "--help lacks {needle}:\n{help}");
    }
    let out = Command::new(BIN)
        .arg("--print-default-config")
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let cfg = pve_sim::Config::from_toml(&text).expect("the printed default config parses");
    assert_eq!(cfg.nodes.len(), 3);
}

#[tokio::test]
async fn the_binary_serves_https_with_a_config_file_and_prints_ca_and_fingerprint() {
    let dir = std::env::temp_dir().join(format!("pve-sim-bin-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg_path = dir.join("sim.toml");
    std::fs::write(
        &cfg_path,
        r#"
pve_version = "8.4.1"
pools = ["k8s"]

[[nodes]]
name = "alpha"
cpus = 8
memory = 17179869184

[[nodes]]
name = "beta"

[[storages]]
id = "local"
type = "dir"
content = ["iso", "snippets"]

[[storages]]
id = "ceph"
type = "lvmthin"
content = ["images"]
shared = true

[[vms]]
vmid = 9100
node = "alpha"
config = { name = "tpl", template = "1", scsi0 = "ceph:base-9100-disk-0,size=20G", net0 = "virtio,bridge=vmbr0" }

[task_ms]
qmclone = 0

[faults]
latency_ms = 1
"#,
    )
    .unwrap();
    let mut child = KillOnDrop(
        Command::new(BIN)
            .args([
                "--listen",
                "127.0.0.1:0",
                "--token",
                "bot@pve!t=S3CRET",
                "--seed",
                "7",
                "--config",
            ])
            .arg(&cfg_path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starts"),
    );
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    let (mut api, mut ca, mut fp) = (String::new(), String::new(), String::new());
    for line in lines.by_ref() {
        let line = line.unwrap();
        let value = line.split_whitespace().last().unwrap_or("").to_string();
        let label = line.split_whitespace().next().unwrap_or("");
        match label {
            "API:" => api = value,
            "CA:" => ca = value,
            "fingerprint:" => fp = value,
            "inspection:" => break,
            _ => {}
        }
    }
    assert!(
        api.starts_with("https://127.0.0.1:") && api.ends_with("/api2/json"),
        "{api}"
    );
    assert_eq!(fp.split(':').count(), 32, "{fp}");
    let pem = std::fs::read(&ca).expect("CA file");
    let http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
        .build()
        .unwrap();
    let get = |p: &str| {
        http.get(format!("{api}{p}"))
            .header("Authorization", "PVEAPIToken=bot@pve!t=S3CRET")
            .send()
    };
    let v: serde_json::Value = get("/version").await.unwrap().json().await.unwrap();
    assert_eq!(v["data"]["version"], "8.4.1");
    let nodes: serde_json::Value = get("/nodes").await.unwrap().json().await.unwrap();
    assert_eq!(nodes["data"][0]["node"], "alpha");
    assert_eq!(nodes["data"][0]["ssl_fingerprint"], fp);
    // the shared storage lets a clone target the other node
    let r = http
        .post(format!("{api}/nodes/alpha/qemu/9100/clone"))
        .header("Authorization", "PVEAPIToken=bot@pve!t=S3CRET")
        .form(&[("newid", "100"), ("target", "beta"), ("pool", "k8s")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    let old = http
        .get(format!("{api}/version"))
        .header(
            "Authorization",
            "PVEAPIToken=capmox@pve!capi=REDACTED-SIM-SECRET",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(old.status(), 401, "--token replaces the default token");
    drop(child);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_readme_config_example_parses() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let block = readme
        .split("```toml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a toml block in the README");
    let cfg = pve_sim::Config::from_toml(block).expect("README example parses");
    assert_eq!(cfg.vm_sets[0].count, 3000);
    assert_eq!(
        cfg.faults.rules[0].endpoint,
        "POST /nodes/{node}/qemu/{vmid}/clone"
    );
}
