//! `hyperplug conformance`, the real binary, for the Redfish plugin against a real
//! sushy-tools BMC emulator: every case passes (or is skipped with its reason), the
//! emulator downloading each machine's boot media from the kit's blob server.
use std::path::PathBuf;

use crate::support::sushy::Bmc;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance/redfish")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redfish_plugin_passes_against_sushy_emulator() {
    // conf-0 ... conf-5, as tests/conformance/redfish/machine.yaml names them.
    let bmc = Bmc::start("conf", 6).await;
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("junit.xml");
    let plugin = crate::support::plugin_path("redfish");
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache");
    let path = |p: PathBuf| p.to_str().unwrap().to_string();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_hyperplug"))
        .arg("conformance")
        .args(["--plugin", &path(plugin)])
        .args(["--target", &bmc.url])
        .args(["--credentials", &path(fixtures().join("credentials.yaml"))])
        .args(["--spec", &path(fixtures().join("machine.yaml"))])
        .args(["--cluster-spec", &path(fixtures().join("cluster.yaml"))])
        .args(["--junit", &path(junit.clone())])
        .args(["--plugin-cache", &path(cache)])
        .args(["--max-requeue-ms", "500", "--log", "warn"])
        .output()
        .await
        .expect("run hyperplug conformance");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "conformance failed:\n{stdout}");
    let xml = std::fs::read_to_string(&junit).expect("JUnit written");
    let cases = crate::support::junit::cases(&xml);
    assert_eq!(cases.len(), hyperplug::conformance::cases().len(), "{xml}");
    for (name, verdict, message) in &cases {
        match *verdict {
            "pass" => {}
            "skip" => assert!(!message.is_empty(), "{name} skipped without a reason"),
            _ => panic!("{name} failed: {message}"),
        }
    }
    // The cases the plugin's capabilities and these fixtures enable run and pass.
    for must_pass in [
        "create-converges",
        "adoption-after-ready",
        "adoption-mid-way",
        "invalid-spec-wrong-type",
        "transient-unreachable",
        "transient-5xx",
        "call-deadline",
        "no-leaks",
    ] {
        assert!(
            cases.iter().any(|c| c.0 == must_pass && c.1 == "pass"),
            "{must_pass} did not pass: {cases:?}"
        );
    }
    // Every host is powered off and free again, its media ejected.
    for system in &bmc.systems {
        assert_eq!(bmc.power(&system.uuid).await, "Off", "{}", system.name);
        assert_eq!(
            bmc.cd(&system.uuid).await["Inserted"],
            false,
            "{}",
            system.name
        );
    }
}
