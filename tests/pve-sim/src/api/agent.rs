//! Guest agent endpoints. They answer only when the agent is configured, the VM runs and
//! the agent is up (boot delay + agent delay after start); otherwise PVE's errors.

use std::time::Instant;

use serde_json::{Value, json};

use super::{Call, vm_on};
use crate::envelope::{ApiError, ApiResult};
use crate::state::{RunState, Vm};

/// PVE's `assert_agent_available`: configured (any `agent` line), VM running, agent up.
fn check_agent(vm: &Vm) -> ApiResult<&RunState> {
    if !vm.config.contains_key("agent") {
        return Err(ApiError::die("No QEMU guest agent configured"));
    }
    let Some(run) = &vm.run else {
        return Err(ApiError::die(format!("VM {} is not running", vm.vmid)));
    };
    if !vm.agent_enabled() || Instant::now() < run.agent_at {
        return Err(ApiError::die("QEMU guest agent is not running"));
    }
    Ok(run)
}

fn agent_up(c: &Call) -> ApiResult<RunState> {
    let w = c.shared.lock();
    let vm = vm_on(&w, c.node(), c.vmid())?;
    check_agent(vm).cloned()
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

/// `POST .../agent/exec`: starts `command` (repeated `command` parameters: program, then
/// arguments) in the guest; `{"pid": N}`.
pub fn exec(c: &mut Call) -> ApiResult {
    let argv: Vec<String> = c
        .p("command")
        .map(|v| v.split('\0').map(String::from).collect())
        .unwrap_or_default();
    let input = c.p("input-data");
    if argv.is_empty() && input.is_none() {
        return Err(ApiError::die("command or input-data (or both) required"));
    }
    let mut w = c.shared.lock();
    let vmid = c.vmid();
    let vm = vm_on(&w, c.node(), vmid)?;
    let run = check_agent(vm)?;
    let process =
        crate::guest::run_command(&argv, &run.hostname, Instant::now(), run.cloud_init_at)
            .map_err(|e| ApiError::die(format!("Agent error: {e}")))?;
    let run = w
        .vms
        .get_mut(&vmid)
        .and_then(|vm| vm.run.as_mut())
        .ok_or_else(|| ApiError::die(format!("VM {vmid} is not running")))?;
    let pid = run.processes.keys().next_back().map_or(1000, |p| p + 1);
    run.processes.insert(pid, process);
    Ok(json!({ "pid": pid }))
}

/// `GET .../agent/exec-status?pid=N`: `exited` (0/1, as PVE converts qemu-ga's booleans),
/// then `exitcode` and the output.
pub fn exec_status(c: &mut Call) -> ApiResult {
    let run = agent_up(c)?;
    let pid: u32 = c.p("pid").and_then(|p| p.parse().ok()).unwrap_or(0);
    let Some(p) = run.processes.get(&pid) else {
        return Err(ApiError::die("Agent error: Invalid parameter 'pid'"));
    };
    if Instant::now() < p.exits_at {
        return Ok(json!({ "exited": 0 }));
    }
    let mut v = json!({ "exited": 1, "exitcode": p.exitcode });
    if !p.out.is_empty() {
        v["out-data"] = json!(p.out);
    }
    if !p.err.is_empty() {
        v["err-data"] = json!(p.err);
    }
    Ok(v)
}
