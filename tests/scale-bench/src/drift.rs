//! How soon drift shows: one provisioned machine's VM is destroyed behind the manager's
//! back, and the time until its ProxmoxMachine reports it (`status.ready: false`) is the
//! row "drift shown after a VM is destroyed out of band".
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kube::Client;
use kube::api::{Api, DynamicObject};
use pve_sim::RunningSim;

use fleet::objects;

/// Destroys the VM of the ProxmoxMachine `namespace/name` in the simulator and waits
/// (at most `timeout`) for the object to show it no longer ready.
pub async fn after_destroy(
    client: &Client,
    sim: &RunningSim,
    machine: &str,
    timeout: Duration,
) -> Result<Duration> {
    let (ns, name) = machine
        .split_once('/')
        .context("a machine as namespace/name")?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &objects::infra_machine_stored());
    let pm = api.get(name).await?;
    let vmid: u32 = pm.data["status"]["details"]["vmid"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("{machine} reports no vmid"))?;
    if !sim.state().destroy_vm(vmid) {
        bail!("VM {vmid} of {machine} is not in the simulator");
    }
    let destroyed = Instant::now();
    while destroyed.elapsed() < timeout {
        let pm = api.get(name).await?;
        if pm.data["status"]["ready"] == false {
            return Ok(destroyed.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("{machine} did not show its VM gone within {timeout:?}")
}
