//! `machine.describe`: observe the claimed host, report drift, change nothing.

use guest_kit::drift;
use guest_kit::machine::{Drift, MachineRequest, MachineStatus};
use guest_kit::types::PluginError;

use super::claim::{Ownership, client_for, held_host, ownership};
use super::create::ready;
use super::power::power_state;
use super::state::{State, Step};
use super::{host_details, pending, progress};
use crate::inventory::bmcs;

pub(super) fn describe(req: &MachineRequest) -> Result<MachineStatus, PluginError> {
    let bmcs = bmcs(&req.credentials, &req.more_credentials);
    let mut state: State = guest_kit::state::load(req.state.as_deref())?;
    let host = match state.host.clone() {
        Some(h) => h,
        None => match held_host(&bmcs)? {
            Some(h) => {
                state.host = Some(h.clone());
                h
            }
            None => {
                let status = pending(progress(&state, "NoHost", "", None));
                let text = "this machine holds no host".to_string();
                return Ok(drift::report(status, "HostMissing", Drift::Missing(text)));
            }
        },
    };
    let drift_status = |reason: &str, drift: Drift, power: Option<&str>| {
        let status = if state.step == Step::Ready {
            ready(req, &state, &host, power.unwrap_or("Unknown"))
        } else {
            pending(progress(
                &state,
                "Provisioning",
                "not provisioned yet",
                None,
            ))
        };
        drift::report(status, reason, drift)
    };
    match ownership(req, &host)? {
        Ownership::Ours => {}
        // The claim is the ownership marker: without it the host is not this machine's
        // (it was released by delete, or by hand).
        Ownership::Free => {
            return Ok(drift_status(
                "HostMissing",
                Drift::Missing(format!("this machine no longer holds host {}", host.name)),
                None,
            ));
        }
        Ownership::Foreign(_) => {
            return Ok(drift_status(
                "HostForeign",
                Drift::Foreign(format!("host {} is held by another object", host.name)),
                None,
            ));
        }
    }
    let bmc = client_for(&bmcs, &host)?;
    let system = match bmc.get(&host.path) {
        Err(e) if e.is_not_found() => {
            return Ok(drift_status(
                "HostMissing",
                Drift::Missing(format!(
                    "host {} is no longer served by {}",
                    host.name, host.endpoint
                )),
                None,
            ));
        }
        other => other.map_err(|e| e.classify(&format!("reading host {}", host.name)))?,
    };
    let power = power_state(&system);
    if state.step == Step::Ready && power != "On" {
        // Not powered on again: whoever powered it off may have meant it.
        let reason = if power == "Off" {
            "HostPoweredOff"
        } else {
            "HostNotPoweredOn"
        };
        return Ok(drift_status(
            reason,
            Drift::Changed(format!("host {} is powered {power}", host.name)),
            Some(&power),
        ));
    }
    if state.step == Step::Ready {
        return Ok(ready(req, &state, &host, &power));
    }
    let mut status = pending(progress(
        &state,
        "Provisioning",
        "not provisioned yet",
        None,
    ));
    status.details = host_details(&host, Some(&power));
    Ok(status)
}
