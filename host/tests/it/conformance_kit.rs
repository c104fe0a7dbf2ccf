//! `hyperplug conformance`, the real binary: the bundled Proxmox plugin passes against
//! pve-sim with the fixture specs of tests/conformance/proxmox; a plugin that breaks
//! the invariants (the hostile test plugin, behaving) makes it exit 1 and name the cases.
use std::path::PathBuf;
use std::process::Output;

use pve_sim::{Config, FaultKind, FaultRule, Faults, RunningSim};

use crate::support::{conformance, sim_with};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance/proxmox")
}

/// pve-sim, and a directory with the credentials for it and the kit's JUnit report.
pub(crate) struct Against {
    sim: RunningSim,
    dir: tempfile::TempDir,
    credentials: PathBuf,
    junit: PathBuf,
}

impl Against {
    pub(crate) async fn start(config: Config) -> Against {
        let sim = sim_with(config).await;
        let dir = tempfile::tempdir().unwrap();
        // The fixture credentials plus the simulator's CA (generated at its start).
        let base = std::fs::read_to_string(fixtures().join("credentials.yaml")).unwrap();
        let ca: String = sim.ca_pem().lines().map(|l| format!("  {l}\n")).collect();
        let credentials = dir.path().join("credentials.yaml");
        std::fs::write(&credentials, format!("{base}ca.crt: |\n{ca}")).unwrap();
        let junit = dir.path().join("junit.xml");
        Against {
            sim,
            dir,
            credentials,
            junit,
        }
    }

    /// `hyperplug conformance` for the plugin `plugin` (by name) against the simulator,
    /// writing the JUnit report, with `more` arguments.
    async fn conformance(&self, plugin: &str, more: &[&str]) -> (Output, String) {
        let plugin = crate::support::plugin_path(plugin);
        self.conformance_of(plugin.to_str().unwrap(), more).await
    }

    /// `hyperplug conformance --plugin SOURCE` (a file or an oci:// reference).
    pub(crate) async fn conformance_of(&self, source: &str, more: &[&str]) -> (Output, String) {
        let mut args = vec![
            "--plugin",
            source,
            "--target",
            self.sim.base_url(),
            "--credentials",
            self.credentials.to_str().unwrap(),
            "--junit",
            self.junit.to_str().unwrap(),
        ];
        args.extend(more);
        conformance::run(&args, 100).await
    }

    /// Where the kit writes its JUnit report.
    pub(crate) fn junit_path(&self) -> &std::path::Path {
        &self.junit
    }

    /// The cases of the last run's JUnit report.
    pub(crate) fn cases(&self) -> Vec<(String, &'static str, String)> {
        crate::support::junit::cases(&std::fs::read_to_string(&self.junit).unwrap())
    }
}

#[tokio::test]
async fn the_proxmox_plugin_passes_against_pve_sim() {
    passes_against(Config::fast()).await;
}

/// The Proxmox plugin as built against WIT 0.2 (before waits, observer and versions)
/// still loads, through the host's 0.2 bindings, and passes the same suite.
#[tokio::test]
async fn the_proxmox_plugin_built_against_wit_0_2_passes_against_pve_sim() {
    passes_with("proxmox-wit-0.2", Config::fast()).await;
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
    let (_, hits) = passes_against(failing_like_pve()).await;
    for rule in hits.as_array().unwrap() {
        assert!(rule["fired"].as_u64().unwrap() > 0, "never fired: {rule}");
    }
}

/// The Python plugin against the same failures.
#[tokio::test]
async fn the_python_proxmox_plugin_passes_against_a_pve_sim_failing_like_pve() {
    let (_, hits) = passes_with("proxmox-py", failing_like_pve()).await;
    for rule in hits.as_array().unwrap() {
        assert!(rule["fired"].as_u64().unwrap() > 0, "never fired: {rule}");
    }
}

/// pve-sim with PVE's task durations, failing the way PVE does at fixed points.
fn failing_like_pve() -> Config {
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
            // The 3rd to 5th polls, not by chance: at 5% of about 26 polls it fired in
            // none about one run in four.
            rule(
                "GET /nodes/{node}/tasks/{upid}/status",
                FaultKind::Http,
                2,
                3,
            ),
        ],
        ..Faults::default()
    };
    Config {
        seed: Some(15),
        faults,
        ..Config::default()
    }
}

/// Runs the suite for the bundled Proxmox plugin; its cases, and the simulator's fault
/// rule hits.
async fn passes_against(
    config: Config,
) -> (Vec<(String, &'static str, String)>, serde_json::Value) {
    passes_with("proxmox", config).await
}

/// The Proxmox plugin written in Python (guest-proxmox-py, componentize-py, WIT 0.2)
/// passes the same suite with its own fixture specs.
#[tokio::test]
async fn the_python_proxmox_plugin_passes_against_pve_sim() {
    passes_with("proxmox-py", Config::fast()).await;
}

/// With PVE's task durations the Python plugin too meets a clone in its first phase
/// after losing its state, and waits for it rather than clone twice.
#[tokio::test]
async fn the_python_proxmox_plugin_passes_with_pve_task_durations() {
    let (cases, _) = passes_with("proxmox-py", Config::default()).await;
    let midway = cases.iter().find(|c| c.0 == "adoption-mid-way").unwrap();
    assert_eq!(midway.1, "pass");
}

/// Runs the suite for the Proxmox plugin `plugin` (by name, see `plugin_path`), with
/// the fixture specs of tests/conformance/<plugin>.
async fn passes_with(
    plugin: &str,
    config: Config,
) -> (Vec<(String, &'static str, String)>, serde_json::Value) {
    let target = Against::start(config).await;
    let dir = match plugin {
        "proxmox-py" => fixtures().join("../proxmox-py"),
        _ => fixtures(),
    };
    let (spec, cluster) = (dir.join("machine.yaml"), dir.join("cluster.yaml"));
    let (out, stdout) = target
        .conformance(
            plugin,
            &[
                "--spec",
                spec.to_str().unwrap(),
                "--cluster-spec",
                cluster.to_str().unwrap(),
            ],
        )
        .await;
    let sim = &target.sim;
    assert!(out.status.success(), "conformance failed:\n{stdout}");
    assert!(
        stdout.contains(" passed, 0 failed, "),
        "a summary line: {stdout}"
    );
    let cases = target.cases();
    let expected: Vec<&str> = hyperplug_conformance::cases()
        .iter()
        .map(|(n, _)| *n)
        .collect();
    let names: Vec<&str> = cases.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(names, expected, "every case reported, in order");
    // The cases the Proxmox plugin's declared capabilities and the fixtures enable run
    // (the Python plugin serves DHCP machines: it declares no `ip-pools`).
    let required: Vec<&str> = [
        "create-converges",
        "adoption-after-ready",
        "adoption-mid-way",
        "foreign-facts",
        "address-requests",
        "invalid-spec-missing-required",
        "invalid-spec-wrong-type",
        "transient-unreachable",
        "transient-5xx",
        "call-deadline",
        "no-leaks",
    ]
    .into_iter()
    .filter(|c| plugin != "proxmox-py" || *c != "address-requests")
    // Plugins of WIT 0.2 do not ask what is granted: the host calls them for no object
    // naming what it has no record of, so `foreign-facts` skips.
    .filter(|c| !plugin.ends_with("py") && !plugin.ends_with("0.2") || *c != "foreign-facts")
    .collect();
    conformance::all_pass_or_say_why_not(&cases, &required);
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
    let target = Against::start(Config::fast()).await;
    // The hostile test plugin, told to behave: it answers without ever calling its
    // endpoint and reports its machine ready whatever happened before.
    let spec = target.dir.path().join("spec.json");
    std::fs::write(&spec, r#"{"attack": "noop"}"#).unwrap();
    let (out, stdout) = target
        .conformance("hostile", &["--spec", spec.to_str().unwrap()])
        .await;
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let cases = target.cases();
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
    let target = Against::start(Config::fast()).await;
    let spec = fixtures().join("machine.yaml");
    let cluster = fixtures().join("cluster.yaml");
    let pools = fixtures().join("addresses.yaml");
    let mut args = vec![
        "--spec",
        spec.to_str().unwrap(),
        "--cluster-spec",
        cluster.to_str().unwrap(),
        "--skip",
        "cluster-reconcile",
        "--skip",
        "cluster-delete",
    ];
    let (out, stdout) = target.conformance("proxmox", &args).await;
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let cases = target.cases();
    let create = cases.iter().find(|c| c.0 == "create-converges").unwrap();
    assert_eq!(create.1, "fail");
    assert!(
        create.2.contains("pool `v4-icip`") && create.2.contains("--addresses"),
        "{}",
        create.2
    );

    args.extend(["--addresses", pools.to_str().unwrap()]);
    let (out, stdout) = target.conformance("proxmox", &args).await;
    assert!(out.status.success(), "{stdout}");
    let cases = target.cases();
    let skipped = cases.iter().find(|c| c.0 == "cluster-reconcile").unwrap();
    assert_eq!(
        (skipped.1, skipped.2.as_str()),
        ("skip", "skipped by --skip")
    );
    let vms = target.sim.state().vms();
    assert!(
        vms.iter().all(|v| v["template"] == serde_json::json!(true)),
        "nothing left: {vms:?}"
    );
}
