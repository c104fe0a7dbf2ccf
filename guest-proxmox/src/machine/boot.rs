//! Powering on and waiting for the guest agent.

use std::collections::BTreeMap;

use guest_kit::machine::MachineStatus;
use guest_kit::types::PluginError;
use serde_json::Value;

use super::context::Ctx;
use super::nics::mac_of;
use super::properties::str_of;
use super::state::{State, Step};
use super::tasks::{poll, task_failed, upid_of};
use super::{BOOT_MS, RETRY_MS, SHORT_MS};
use crate::api::PveError;

/// Starts the VM. Its start task is not followed here: the guest agent answering is
/// what the next step waits for, and the task is asked about only when the agent does
/// not answer (see [`start_outcome`]). A VM started already (a call whose result was
/// lost) makes that task fail with "already running", which changes nothing.
pub(super) fn powering_on(cx: &Ctx, st: &mut State) -> Result<Option<MachineStatus>, PluginError> {
    // Ours, and where it is now (it may have migrated).
    cx.owned_config(st, "starting the VM")?;
    let v = cx
        .pve
        .post(&format!("{}/status/start", cx.config_path(st)), &[])
        .map_err(|e| e.classify("starting the VM"))?;
    st.upid = upid_of(v);
    st.step = Step::WaitingForGuestAgent;
    if st.upid.is_none() {
        return Ok(None);
    }
    // Not polled at once (a start takes seconds): the task's end wakes the machine.
    Ok(Some(cx.status(
        st,
        "PoweringOn",
        "start task running",
        Some(SHORT_MS),
    )))
}

/// What the start task in `st.upid` (if any) came to, asked only when the agent cannot
/// tell: `Some` while it runs or after it failed (started again), `None` once the VM
/// was started (by it, or before it: "already running").
fn start_outcome(cx: &Ctx, st: &mut State) -> Result<Option<MachineStatus>, PluginError> {
    let Some(upid) = st.upid.clone() else {
        return Ok(None);
    };
    match poll(&cx.pve, &upid, "following the start task")? {
        Ok(false) => Ok(Some(cx.status(
            st,
            "PoweringOn",
            "start task running",
            Some(SHORT_MS),
        ))),
        Ok(true) => {
            st.upid = None;
            Ok(None)
        }
        Err(msg) if msg.contains("already running") => {
            st.upid = None;
            Ok(None)
        }
        Err(msg) => {
            if let Some(e) = task_failed("starting the VM", &msg) {
                return Err(e);
            }
            st.upid = None;
            st.step = Step::PoweringOn;
            Ok(Some(cx.status(
                st,
                "PoweringOn",
                format!("start failed ({msg}); retrying"),
                Some(RETRY_MS),
            )))
        }
    }
}

pub(super) fn waiting_for_agent(
    cx: &Ctx,
    st: &mut State,
) -> Result<Option<MachineStatus>, PluginError> {
    let checks = cx.spec.checks.clone().unwrap_or_default();
    if checks.skip_qemu_guest_agent == Some(true) {
        if let Some(s) = start_outcome(cx, st)? {
            return Ok(Some(s));
        }
        // Without the agent nothing tells when the guest has read the ISO: keep it
        // attached (delete removes it).
        st.step = Step::Ready;
        return Ok(None);
    }
    // The start task recorded and no look yet (woken by the task's end, as a rule): no
    // guest agent answers the moment its VM starts (the guest has still to boot), so the
    // first look comes `boot_wait(0)` later, and the task is not waited for again. A
    // start that failed or still runs shows then: the agent says the VM is not running,
    // and the task is asked.
    if st.upid.is_some() && st.agent_tries == 0 {
        st.agent_tries = 1;
        let mut s = cx.status(
            st,
            "WaitingForGuestAgent",
            "start requested; waiting for the guest to boot",
            None,
        );
        s.progress.waits.clear();
        s.progress.requeue_after_ms = Some(boot_wait(0));
        return Ok(Some(s));
    }
    // The agent is asked first, its VM's config only once it answers: while the guest
    // boots, each look is one request. A VM no longer at its node (migrated) is followed.
    let base = cx.config_path(st);
    let tries = st.agent_tries;
    let wait = |st: &mut State, msg: String| {
        st.agent_tries = tries.saturating_add(1);
        Ok(Some(cx.status(
            st,
            "WaitingForGuestAgent",
            msg,
            Some(boot_wait(tries)),
        )))
    };
    let ifaces = match cx.pve.get(&format!("{base}/agent/network-get-interfaces")) {
        Ok(v) => v,
        Err(e) if e.is_not_found() => {
            cx.owned_config(st, "finding the VM")?;
            return wait(
                st,
                format!("VM moved to {}", st.node.as_deref().unwrap_or_default()),
            );
        }
        Err(PveError::Status {
            status: 500,
            message,
            ..
        }) => {
            // "VM N is not running": what came of the start is asked, and a VM that is
            // not running once its start is over (stopped since, or a replayed state
            // that lost the task) is started again. "QEMU guest agent is not running":
            // the VM runs, so the start worked. Anything else tells neither.
            if message.starts_with("VM ") && message.contains("not running") {
                if let Some(s) = start_outcome(cx, st)? {
                    return Ok(Some(s));
                }
                st.step = Step::PoweringOn;
                return Ok(Some(cx.status(
                    st,
                    "PoweringOn",
                    format!("{message}; starting it"),
                    Some(SHORT_MS),
                )));
            }
            if message.contains("agent is not running") {
                st.upid = None;
            }
            return wait(st, format!("guest agent not answering yet: {message}"));
        }
        Err(e) => return Err(e.classify("asking the guest agent")),
    };
    // The agent answers: the VM runs, whatever its start task came to. Ours, and where
    // it is now: its NICs' MACs say which of the guest's interfaces are whose.
    st.upid = None;
    let config = cx.owned_config(st, "reading the VM's NICs")?;
    let dhcp = match dhcp_addresses(cx, &config, &ifaces) {
        Ok(dhcp) => dhcp,
        Err(device) => return wait(st, format!("waiting for a DHCP address on {device}")),
    };
    if checks.skip_cloud_init_status != Some(true) {
        // cloud-init applied our meta-data once the guest carries its hostname.
        let host = cx
            .pve
            .get(&format!("{base}/agent/get-host-name"))
            .ok()
            .and_then(|v| v.get("result").and_then(|r| str_of(r, "host-name")));
        let want = &cx.req.machine.name;
        if host.as_deref().map(|h| h.split('.').next().unwrap_or(h)) != Some(want.as_str()) {
            return wait(
                st,
                format!(
                    "waiting for cloud-init to apply the hostname {want} (guest says {})",
                    host.as_deref().unwrap_or("nothing")
                ),
            );
        }
    }
    st.dhcp = dhcp;
    st.agent_tries = 0;
    st.step = Step::Ejecting;
    Ok(None)
}

/// The addresses the guest agent reports (`ifaces`) on each NIC that takes DHCP, matched
/// by the MAC in the VM's `config`; the device of the first NIC that has none yet.
fn dhcp_addresses<'a>(
    cx: &'a Ctx,
    config: &Value,
    ifaces: &Value,
) -> Result<BTreeMap<String, Vec<String>>, &'a str> {
    let list: Vec<Value> = ifaces
        .get("result")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut dhcp = BTreeMap::new();
    for nic in cx.nics.iter().filter(|n| n.dhcp4 || n.dhcp6) {
        let Some(mac) = str_of(config, &nic.device).and_then(|n| mac_of(&n)) else {
            continue;
        };
        let addrs: Vec<String> = list
            .iter()
            .filter(|i| str_of(i, "hardware-address").is_some_and(|m| m.eq_ignore_ascii_case(&mac)))
            .flat_map(|i| {
                i.get("ip-addresses")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|a| {
                let ip = str_of(&a, "ip-address")?;
                let v6 = str_of(&a, "ip-address-type").as_deref() == Some("ipv6");
                let wanted = if v6 { nic.dhcp6 } else { nic.dhcp4 };
                (wanted && !ip.starts_with("fe80") && !ip.starts_with("127.") && ip != "::1")
                    .then_some(ip)
            })
            .collect();
        if addrs.is_empty() {
            return Err(&nic.device);
        }
        dhcp.insert(nic.device.clone(), addrs);
    }
    Ok(dhcp)
}

/// How long to wait before asking a booting guest's agent again after `tries` looks
/// (none yet: the wait from its start task's end, as a rule): no guest boots and starts
/// its agent within a second of its start, so the first look is [`BOOT_MS`] / 2 after
/// it; then evenly and often (a cloud image answers within seconds; a doubling wait
/// would overshoot its answer by as much as it waited), then doubling to at most every
/// [`BOOT_MS`] × 2 for guests that boot for minutes.
fn boot_wait(tries: u8) -> u64 {
    const EVEN_LOOKS: u8 = 3;
    match tries {
        0 => BOOT_MS / 2,
        n if n <= EVEN_LOOKS => BOOT_MS / 4,
        n => ((BOOT_MS / 2) << (n - EVEN_LOOKS - 1).min(3)).min(BOOT_MS * 2),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_booting_guest_is_asked_evenly_then_less_and_less_often() {
        let waits: Vec<u64> = (0..10).map(boot_wait).collect();
        assert_eq!(
            waits,
            [
                1_000, 500, 500, 500, 1_000, 2_000, 4_000, 4_000, 4_000, 4_000
            ]
        );
        assert_eq!(boot_wait(u8::MAX), BOOT_MS * 2);
    }
}
