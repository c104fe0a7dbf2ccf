//! Power and boot order of a host.

use guest_kit::types::PluginError;
use guest_kit::{log, transient};
use serde_json::{Value, json};

use super::POWER_MS;
use crate::api::{Redfish, action_target};
use crate::inventory::Host;

/// `On`, `Off`, `PoweringOn`, `PoweringOff`, or `Unknown`.
pub(super) fn power_state(system: &Value) -> String {
    system
        .get("PowerState")
        .and_then(Value::as_str)
        .unwrap_or("Unknown")
        .to_string()
}

/// `ComputerSystem.Reset` with `kind` (`On`, `ForceOff`, `ForceRestart`).
pub(super) fn reset(
    bmc: &Redfish,
    host: &Host,
    system: &Value,
    kind: &str,
) -> Result<(), PluginError> {
    let target = action_target(system, &host.path, "ComputerSystem.Reset");
    bmc.post(&target, &json!({"ResetType": kind}))
        .map_err(|e| e.classify(&format!("powering host {} ({kind})", host.name)))?;
    log::info(
        "reset requested",
        &[("host", host.name.clone()), ("reset", kind.into())],
    );
    Ok(())
}

/// Boot once from the virtual CD.
pub(super) fn boot_once_from_cd(bmc: &Redfish, host: &Host) -> Result<(), PluginError> {
    let doing = format!("setting host {} to boot once from CD", host.name);
    let body =
        json!({"Boot": {"BootSourceOverrideTarget": "Cd", "BootSourceOverrideEnabled": "Once"}});
    bmc.patch(&host.path, &body)
        .map_err(|e| e.classify(&doing))?;
    let system = bmc.get(&host.path).map_err(|e| e.classify(&doing))?;
    let target = system
        .pointer("/Boot/BootSourceOverrideTarget")
        .and_then(Value::as_str);
    if target != Some("Cd") {
        return Err(transient(
            format!(
                "{doing}: the BMC reports boot target {}",
                target.unwrap_or("none")
            ),
            Some(POWER_MS),
        ));
    }
    Ok(())
}

/// Booted far enough that the media has been read: powered on and, where the BMC
/// reports boot progress, the OS has started booting.
pub(super) fn booted(system: &Value) -> bool {
    if power_state(system) != "On" {
        return false;
    }
    match system
        .pointer("/BootProgress/LastState")
        .and_then(Value::as_str)
    {
        None | Some("None") => true,
        Some(state) => matches!(state, "OSBootStarted" | "OSRunning"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_power_state_is_unknown_when_the_bmc_does_not_say() {
        assert_eq!(power_state(&json!({"PowerState": "On"})), "On");
        assert_eq!(power_state(&json!({})), "Unknown");
    }

    #[test]
    fn a_host_has_booted_when_it_is_on_and_its_os_started_if_the_bmc_tells() {
        assert!(booted(&json!({"PowerState": "On"})));
        assert!(booted(
            &json!({"PowerState": "On", "BootProgress": {"LastState": "None"}})
        ));
        assert!(booted(
            &json!({"PowerState": "On", "BootProgress": {"LastState": "OSRunning"}})
        ));
        assert!(booted(
            &json!({"PowerState": "On", "BootProgress": {"LastState": "OSBootStarted"}})
        ));
        assert!(!booted(
            &json!({"PowerState": "On", "BootProgress": {"LastState": "MemoryInitializationStarted"}})
        ));
        assert!(!booted(&json!({"PowerState": "PoweringOn"})));
        assert!(!booted(
            &json!({"PowerState": "Off", "BootProgress": {"LastState": "OSRunning"}})
        ));
    }
}
