//! Guest agent endpoints. They answer only when the agent is configured, the VM runs and
//! the agent is up (boot delay + agent delay after start); otherwise PVE's errors.

use std::time::Instant;

use serde_json::{Value, json};

use super::{Call, vm_on};
use crate::envelope::{ApiError, ApiResult};
use crate::state::RunState;

fn agent_up(c: &Call) -> ApiResult<RunState> {
    let w = c.shared.lock();
    let vmid = c.vmid();
    let vm = vm_on(&w, c.node(), vmid)?;
    if !vm.agent_enabled() {
        return Err(ApiError::die("No QEMU guest agent configured"));
    }
    let Some(run) = &vm.run else {
        return Err(ApiError::die(format!("VM {vmid} is not running")));
    };
    if Instant::now() < run.agent_at {
        return Err(ApiError::die("QEMU guest agent is not running"));
    }
    Ok(run.clone())
}

/// `GET .../agent/network-get-interfaces`.
pub fn network_get_interfaces(c: &mut Call) -> ApiResult {
    let run = agent_up(c)?;
    let result: Vec<Value> =
        run.interfaces
            .iter()
            .map(|i| {
                let mut addrs: Vec<Value> = i
                    .ipv4
                    .iter()
                    .map(|(a, p)| json!({"ip-address": a, "ip-address-type": "ipv4", "prefix": p}))
                    .collect();
                addrs.extend(i.ipv6.iter().map(
                    |(a, p)| json!({"ip-address": a, "ip-address-type": "ipv6", "prefix": p}),
                ));
                json!({
                    "name": i.name,
                    "hardware-address": i.mac,
                    "ip-addresses": addrs,
                    "statistics": {"rx-bytes": 0, "rx-dropped": 0, "rx-errs": 0, "rx-packets": 0,
                                   "tx-bytes": 0, "tx-dropped": 0, "tx-errs": 0, "tx-packets": 0},
                })
            })
            .collect();
    Ok(json!({ "result": result }))
}

/// `GET .../agent/get-osinfo`.
pub fn get_osinfo(c: &mut Call) -> ApiResult {
    agent_up(c)?;
    Ok(json!({"result": {
        "id": "ubuntu",
        "name": "Ubuntu",
        "pretty-name": "Ubuntu 24.04.3 LTS",
        "version": "24.04.3 LTS (Noble Numbat)",
        "version-id": "24.04",
        "kernel-release": "6.8.0-88-generic",
        "kernel-version": "#89-Ubuntu SMP PREEMPT_DYNAMIC",
        "machine": "x86_64",
    }}))
}

/// `GET .../agent/get-host-name`.
pub fn get_host_name(c: &mut Call) -> ApiResult {
    let run = agent_up(c)?;
    Ok(json!({"result": {"host-name": run.hostname}}))
}

/// `POST .../agent/ping`.
pub fn ping(c: &mut Call) -> ApiResult {
    agent_up(c)?;
    Ok(json!({"result": {}}))
}
