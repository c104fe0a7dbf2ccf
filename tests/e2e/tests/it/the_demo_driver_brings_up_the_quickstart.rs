//! The README's first command runs the `quickstart` binary (scripts/demo.sh builds it
//! and execs it): from nothing to a provisioned quickstart cluster, then the lines to
//! look around with.
use std::process::Command;

use e2e::capi;

#[test]
fn quickstart_reaches_provisioned_machines_and_prints_how_to_look_around() {
    let _flow = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(crate::FLOWS.acquire())
        .unwrap();
    let hyperplug = capi::build_hyperplug().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_quickstart"))
        .args([
            "--fast",
            "--pve-listen",
            "127.0.0.1:0",
            "--exit-when-provisioned",
        ])
        .env("HYPERPLUG_BIN", hyperplug)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    assert!(
        stderr.contains("clusterctl init --infrastructure proxmox --ipam in-cluster"),
        "{stderr}"
    );
    assert!(stderr.contains("every Machine is provisioned"), "{stderr}");
    for line in [
        "export KUBECONFIG=",
        "clusterctl describe cluster capi-quickstart",
        "kubectl get clusters,machines,proxmoxmachines -o wide",
        "/_sim/vms",
        "Stop: Ctrl-C",
    ] {
        assert!(stdout.contains(line), "{line:?} missing from:\n{stdout}");
    }
}
