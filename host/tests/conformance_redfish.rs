//! `hyperplug conformance`, the real binary, for the Redfish plugin against a real
//! sushy-tools BMC emulator: every case passes (or is skipped with its reason), the
//! emulator downloading each machine's boot media from the kit's blob server.
mod support;

use std::path::PathBuf;

use support::sushy::Bmc;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance/redfish")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redfish_plugin_passes_against_sushy_emulator() {
    // conf-0 ... conf-5, as tests/conformance/redfish/machine.yaml names them.
    let bmc = Bmc::start("conf", 6).await;
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("junit.xml");
    let plugin = support::plugin_path("redfish");
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
    assert!(xml.contains("<testsuite"), "{xml}");
    assert!(!xml.contains("<failure"), "{xml}");
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
