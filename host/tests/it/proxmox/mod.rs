//! The Proxmox plugin's machines through the host runtime, against pve-sim over HTTPS
//! with token auth and a pinned fingerprint: a module per subject, helpers here.
//!
//! The conformance kit's driver plays the host (`support::drive`): it persists
//! `progress.state`, answers `address-requests`, hands over the bootstrap data when
//! asked, and calls again when a wait fires or after the requeue hint (capped small). A
//! test that looks at a step on the way awaits it with `create_until`, never with a
//! call loop of its own.
mod clone;
mod delete;
mod errors;
mod lifecycle;
mod migration;
mod nocloud;
mod placement;
mod vmids;

use std::collections::BTreeMap;

use hyperplug_conformance::drive::Drive;
use hyperplug_runtime::Plugin;
use hyperplug_runtime::bindings::machine::{BootstrapData, MachineRequest, MachineStatus};
use serde_json::{Value, json};

use crate::support::drive::{
    NoAddresses, create_until, create_until_ready, delete_until_gone, describe_until, pacing,
};
use crate::support::{machine_request, object, pinned};

const CLOUD_CONFIG: &str = "#cloud-config\nruncmd:\n  - [kubeadm, join, '--config', /run/kubeadm/kubeadm-join-config.yaml]\n";

fn dhcp_cluster() -> Value {
    json!({
        "allowedNodes": ["pve1"],
        "controlPlaneEndpoint": {"host": "10.10.0.5", "port": 6443},
    })
}

/// Machine `machine` of cluster `cluster` on `sim`: the host tests' request, named, with
/// the cluster's spec and the simulator's pinned credentials.
fn request(
    sim: &pve_sim::RunningSim,
    machine: &str,
    cluster: &str,
    spec: Value,
    cluster_spec: Value,
) -> MachineRequest {
    MachineRequest {
        machine: object(machine),
        cluster: object(cluster),
        cluster_spec: cluster_spec.to_string(),
        ..machine_request(spec, pinned(sim))
    }
}

fn bootstrap() -> BootstrapData {
    BootstrapData {
        format: "cloud-config".into(),
        value: CLOUD_CONFIG.as_bytes().to_vec(),
    }
}

/// Drive create to ready as the host would, handing over the bootstrap data when asked.
async fn drive_create(
    plugin: &Plugin,
    req: &mut MachineRequest,
) -> Result<(MachineStatus, Drive), String> {
    create_until_ready(
        plugin,
        req,
        &mut NoAddresses(Some(bootstrap())),
        &pacing(50),
    )
    .await
}

/// A ready machine's NoCloud ISO removal, asked for once it booted, followed by describe
/// (the task is the machine's wait, so its end brings the host's describe) until the
/// ISO is gone; the last report.
async fn describe_until_the_iso_is_gone(
    plugin: &Plugin,
    req: &mut MachineRequest,
    sim: &pve_sim::RunningSim,
) -> MachineStatus {
    describe_until(plugin, req, &pacing(50), |s| {
        let removing = s.progress.waits.iter().any(|w| w.key.starts_with("task:"));
        !removing && iso_volumes(sim).is_empty()
    })
    .await
    .unwrap_or_else(|e| panic!("the ISO is still there: {:?} ({e})", iso_volumes(sim)))
}

/// Drive delete until the plugin confirms the VM gone; the phases it went through.
async fn drive_delete(plugin: &Plugin, req: &mut MachineRequest) -> Result<Vec<String>, String> {
    delete_until_gone(plugin, req, &pacing(50)).await
}

/// Calls create until the clone has been asked of PVE (the VMID is recorded one call
/// before); returns that call's status.
async fn create_until_cloning(plugin: &Plugin, req: &mut MachineRequest) -> MachineStatus {
    let (status, _) = create_until(
        plugin,
        req,
        &mut NoAddresses(Some(bootstrap())),
        &pacing(50),
        |s| s.progress.state.contains("UPID:"),
    )
    .await
    .unwrap_or_else(|(_, e)| panic!("no clone was started: {e}"));
    assert!(
        status.progress.state.contains("UPID:"),
        "no clone was started: ready at once"
    );
    status
}

fn vmid_of(status: &MachineStatus) -> u32 {
    status
        .details
        .iter()
        .find(|(k, _)| k == "vmid")
        .map(|(_, v)| v.parse().unwrap())
        .expect("details carry the vmid")
}

fn non_templates(sim: &pve_sim::RunningSim) -> Vec<Value> {
    sim.state()
        .vms()
        .into_iter()
        .filter(|v| v["template"] != json!(true))
        .collect()
}

fn cfg<'a>(vm: &'a Value, key: &str) -> &'a str {
    vm["config"][key].as_str().unwrap_or_default()
}

/// The PVE property string `v` as key → value (the first bare item under its own key).
fn props(v: &str) -> BTreeMap<String, String> {
    v.split(',')
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (p.to_string(), String::new()),
        })
        .collect()
}

fn iso_volumes(sim: &pve_sim::RunningSim) -> Vec<Value> {
    let dump = sim.state().dump();
    dump["storages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["volumes"].as_array().cloned().unwrap_or_default())
        .filter(|v| v["content"] == "iso")
        .collect()
}
