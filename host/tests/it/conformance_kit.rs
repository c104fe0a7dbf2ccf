//! `hyperplug conformance`, the real binary: the bundled Proxmox plugin passes against
//! pve-sim with the fixture specs of tests/conformance/proxmox; a plugin that breaks
//! the invariants (the hostile test plugin, behaving) makes it exit 1 and name the cases.
use std::path::{Path, PathBuf};

use pve_sim::{Config, FaultKind, FaultRule, Faults, RunningSim};

use crate::support::{conformance, sim_with};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance/proxmox")
}

/// The fixture credentials plus the simulator's CA (generated at its start).
fn credentials(dir: &Path, sim: &RunningSim) -> PathBuf {
    let base = std::fs::read_to_string(fixtures().join("credentials.yaml")).unwrap();
    let ca: String = sim.ca_pem().lines().map(|l| format!("  {l}\n")).collect();
    let path = dir.join("credentials.yaml");
    std::fs::write(&path, format!("{base}ca.crt: |\n{ca}")).unwrap();
    path
}

#[tokio::test]
async fn the_proxmox_plugin_passes_against_pve_sim() {
    passes_against(Config::fast()).await;
}

/// With PVE-like task durations and boot delays, the state is dropped while the clone
/// task is still running, and the plugin must adopt a VM that is locked mid-clone.
#[tokio::test]
async fn the_proxmox_plugin_passes_with_pve_task_durations() {
    let (cases, _) = passes_against(Config::default()).await;
    let midway = cases.iter().find(|c| c.0 == "adoption-mid-way").unwrap();
    assert_eq!(midway.1, "pass");
}

/// Against a simulator failing the way PVE does, with its task durations: clones that lose
/// their VMID to another client inside the task, lock timeouts in config writes and in
/// the clone, start and destroy tasks, 503s while polling.
#[tokio::test]
async fn the_proxmox_plugin_passes_against_a_pve_sim_failing_like_pve() {
    // Fixed points (skip, then at most max) so every kind fires, whatever the timing.
    let rule = |endpoint: &str, kind: FaultKind, skip: u64, max: u64| FaultRule {
        endpoint: endpoint.into(),
        kind,
        skip,
        max_count: Some(max),
        status: 503,
        ..FaultRule::default()
    };
    let faults = Faults {
        rules: vec![
            rule(
                "POST /nodes/{node}/qemu/{vmid}/clone",
                FaultKind::VmidRace,
                1,
                2,
            ),
            rule(
                "PUT /nodes/{node}/qemu/{vmid}/config",
                FaultKind::LockTimeout,
                0,
                2,
            ),
            rule(
                "POST /nodes/{node}/qemu/{vmid}/status/start",
                FaultKind::LockTimeout,
                1,
                1,
            ),
            rule(
                "DELETE /nodes/{node}/qemu/{vmid}",
                FaultKind::LockTimeout,
                0,
                1,
            ),
            FaultRule {
                probability: 0.05,
                ..rule(
                    "GET /nodes/{node}/tasks/{upid}/status",
                    FaultKind::Http,
                    0,
                    10,
                )
            },
        ],
        ..Faults::default()
    };
    let config = Config {
        seed: Some(15),
        faults,
        ..Config::default()
    };
    let (_, hits) = passes_against(config).await;
    for rule in hits.as_array().unwrap() {
        assert!(rule["fired"].as_u64().unwrap() > 0, "never fired: {rule}");
    }
}

/// Runs the suite; its cases, and the simulator's fault rule hits.
async fn passes_against(
    config: Config,
) -> (Vec<(String, &'static str, String)>, serde_json::Value) {
    let sim = sim_with(config).await;
    let dir = tempfile::tempdir().unwrap();
    let creds = credentials(dir.path(), &sim);
    let junit = dir.path().join("junit.xml");
    let plugin = crate::support::plugin_path("proxmox");
    let (out, stdout) = conformance::run(
        &[
            "--plugin",
            plugin.to_str().unwrap(),
            "--target",
            sim.base_url(),
            "--credentials",
            creds.to_str().unwrap(),
            "--spec",
            fixtures().join("machine.yaml").to_str().unwrap(),
            "--cluster-spec",
            fixtures().join("cluster.yaml").to_str().unwrap(),
            "--junit",
            junit.to_str().unwrap(),
        ],
        100,
    )
    .await;
    assert!(out.status.success(), "conformance failed:\n{stdout}");
    assert!(
        stdout.contains(" passed, 0 failed, "),
        "a summary line: {stdout}"
    );
    let cases = crate::support::junit::cases(&std::fs::read_to_string(&junit).unwrap());
    let expected: Vec<&str> = hyperplug::conformance::cases()
        .iter()
        .map(|(n, _)| *n)
        .collect();
    let names: Vec<&str> = cases.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(names, expected, "every case reported, in order");
    // The cases the Proxmox plugin's declared capabilities and the fixtures enable run.
    conformance::all_pass_or_say_why_not(
        &cases,
        &[
            "create-converges",
            "adoption-after-ready",
            "adoption-mid-way",
            "address-requests",
            "invalid-spec-missing-required",
            "invalid-spec-wrong-type",
            "transient-unreachable",
            "transient-5xx",
            "call-deadline",
            "no-leaks",
        ],
    );
    // Nothing the suite made is left on the simulator; the VMs other clients made when
    // they won a VMID race stay, untouched.
    let (others, left): (Vec<_>, Vec<_>) = sim
        .state()
        .vms()
        .into_iter()
        .filter(|v| v["template"] != serde_json::json!(true))
        .partition(|v| {
            v["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("vmid-race-"))
        });
    assert!(left.is_empty(), "VMs left behind: {left:?}");
    let raced = sim.state().fault_hits().as_array().map_or(0, |rules| {
        rules
            .iter()
            .filter(|r| r["kind"] == "vmid_race")
            .map(|r| r["fired"].as_u64().unwrap_or(0))
            .sum::<u64>()
    });
    assert_eq!(
        others.len() as u64,
        raced,
        "every race's winner is still there"
    );
    (cases, sim.state().fault_hits())
}

#[tokio::test]
async fn a_plugin_that_breaks_the_invariants_fails_by_name() {
    let sim = sim_with(Config::fast()).await;
    let dir = tempfile::tempdir().unwrap();
    let creds = credentials(dir.path(), &sim);
    let junit = dir.path().join("junit.xml");
    // The hostile test plugin, told to behave: it answers without ever calling its
    // endpoint and reports its machine ready whatever happened before.
    let spec = dir.path().join("spec.json");
    std::fs::write(&spec, r#"{"attack": "noop"}"#).unwrap();
    let plugin = crate::support::plugin_path("hostile");
    let (out, stdout) = conformance::run(
        &[
            "--plugin",
            plugin.to_str().unwrap(),
            "--target",
            sim.base_url(),
            "--credentials",
            creds.to_str().unwrap(),
            "--spec",
            spec.to_str().unwrap(),
            "--junit",
            junit.to_str().unwrap(),
        ],
        100,
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let cases = crate::support::junit::cases(&std::fs::read_to_string(&junit).unwrap());
    let failed: Vec<&str> = cases
        .iter()
        .filter(|c| c.1 == "fail")
        .map(|c| c.0.as_str())
        .collect();
    for name in [
        "identity",
        "describe-after-delete",
        "transient-unreachable",
        "transient-5xx",
        "no-leaks",
    ] {
        assert!(failed.contains(&name), "{name} not failed: {failed:?}");
        assert!(stderr.contains(name), "stderr names {name}: {stderr}");
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(name) && l.contains("FAIL")),
            "the table shows {name} failed"
        );
    }
    let leaks = cases.iter().find(|c| c.0 == "no-leaks").unwrap();
    assert!(
        leaks.2.contains("hostile://1"),
        "leaks name the provider-id: {}",
        leaks.2
    );
    // Cases gated on capabilities the plugin does not declare say so.
    let adoption = cases.iter().find(|c| c.0 == "adoption-mid-way").unwrap();
    assert_eq!(adoption.1, "skip");
    assert!(adoption.2.contains("adoption"), "{}", adoption.2);
}

/// Without the cluster reconcile (which reports the pools) the plugin's address
/// requests have nowhere to go: the kit fails saying how to give them; with
/// `--addresses` it answers them from the file.
#[tokio::test]
async fn addresses_come_from_a_file_or_the_failure_says_how_to_give_them() {
    let sim = sim_with(Config::fast()).await;
    let dir = tempfile::tempdir().unwrap();
    let creds = credentials(dir.path(), &sim);
    let junit = dir.path().join("junit.xml");
    let plugin = crate::support::plugin_path("proxmox");
    let spec = fixtures().join("machine.yaml");
    let cluster = fixtures().join("cluster.yaml");
    let pools = fixtures().join("addresses.yaml");
    let mut args = vec![
        "--plugin",
        plugin.to_str().unwrap(),
        "--target",
        sim.base_url(),
        "--credentials",
        creds.to_str().unwrap(),
        "--spec",
        spec.to_str().unwrap(),
        "--cluster-spec",
        cluster.to_str().unwrap(),
        "--skip",
        "cluster-reconcile",
        "--skip",
        "cluster-delete",
        "--junit",
        junit.to_str().unwrap(),
    ];
    let (out, stdout) = conformance::run(&args, 100).await;
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let cases = crate::support::junit::cases(&std::fs::read_to_string(&junit).unwrap());
    let create = cases.iter().find(|c| c.0 == "create-converges").unwrap();
    assert_eq!(create.1, "fail");
    assert!(
        create.2.contains("pool `ipv4`") && create.2.contains("--addresses"),
        "{}",
        create.2
    );

    args.extend(["--addresses", pools.to_str().unwrap()]);
    let (out, stdout) = conformance::run(&args, 100).await;
    assert!(out.status.success(), "{stdout}");
    let cases = crate::support::junit::cases(&std::fs::read_to_string(&junit).unwrap());
    let skipped = cases.iter().find(|c| c.0 == "cluster-reconcile").unwrap();
    assert_eq!(
        (skipped.1, skipped.2.as_str()),
        ("skip", "skipped by --skip")
    );
    let vms = sim.state().vms();
    assert!(
        vms.iter().all(|v| v["template"] == serde_json::json!(true)),
        "nothing left: {vms:?}"
    );
}
