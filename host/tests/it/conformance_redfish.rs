//! `hyperplug conformance`, the real binary, for the Redfish plugin against a real
//! sushy-tools BMC emulator: every case passes (or is skipped with its reason), the
//! emulator downloading each machine's boot media from the kit's blob server.
use std::path::PathBuf;

use crate::support::conformance;
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
    let path = |p: PathBuf| p.to_str().unwrap().to_string();
    let (plugin, junit_path) = (path(plugin), path(junit.clone()));
    let (credentials, spec, cluster) = (
        path(fixtures().join("credentials.yaml")),
        path(fixtures().join("machine.yaml")),
        path(fixtures().join("cluster.yaml")),
    );
    let (out, stdout) = conformance::run(
        &[
            "--plugin",
            &plugin,
            "--target",
            &bmc.url,
            "--credentials",
            &credentials,
            "--spec",
            &spec,
            "--cluster-spec",
            &cluster,
            "--junit",
            &junit_path,
        ],
        500,
    )
    .await;
    assert!(out.status.success(), "conformance failed:\n{stdout}");
    let xml = std::fs::read_to_string(&junit).expect("JUnit written");
    let cases = crate::support::junit::cases(&xml);
    assert_eq!(cases.len(), hyperplug_conformance::cases().len(), "{xml}");
    // The cases the plugin's capabilities and these fixtures enable run and pass.
    conformance::all_pass_or_say_why_not(
        &cases,
        &[
            "create-converges",
            "adoption-after-ready",
            "adoption-mid-way",
            "foreign-facts",
            "invalid-spec-wrong-type",
            "transient-unreachable",
            "transient-5xx",
            "call-deadline",
            "no-leaks",
        ],
    );
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
