//! Describe: what the VM looks like now.

use guest_kit::machine::{Drift, MachineRequest, MachineStatus};
use guest_kit::types::PluginError;
use guest_kit::{drift, log};

use super::cloudinit::{iso_attached, removing_iso};
use super::context::Ctx;
use super::create::ready_message;
use super::ownership::{Located, marker};
use super::properties::{str_of, uuid_of};
use super::state::{State, Step};

// ---------------------------------------------------------------------------------
// describe
// ---------------------------------------------------------------------------------

pub(super) fn describe(req: &MachineRequest) -> Result<MachineStatus, PluginError> {
    let cx = Ctx::new(req)?;
    let mut st: State = guest_kit::state::load(req.state.as_deref())?;
    let phase = phase_of(st.step);
    let Some(vmid) = st.vmid else {
        return match cx.find_owned()? {
            Some((node, vmid, config)) => {
                let probe = State {
                    node: Some(node),
                    vmid: Some(vmid),
                    ..State::default()
                };
                let mut s = cx.status(
                    &probe,
                    "Pending",
                    "this machine's VM exists but is not recorded: create adopts it",
                    None,
                );
                // Name what was found, so a caller without state can tell "ours, not
                // recorded" from "nothing" (the conformance kit's leak check relies on it).
                s.provider_id = uuid_of(&config).map(|u| format!("proxmox://{u}"));
                // Describe changes nothing: the state handed back is the one given.
                s.progress.state = guest_kit::state::save(&st);
                Ok(s)
            }
            None => Ok(cx.status(&st, phase, "no VM yet", None)),
        };
    };
    // Woken by the end of the ISO's removal (the wait a ready machine starts with): the
    // VM was ours a moment ago and the observer checks its tag from now on, so its power
    // state is read without its config; anything but running is looked into in full.
    let mut removal_followed = false;
    if st.step == Step::Ready && st.upid.is_some() {
        follow_iso_removal(&cx, &mut st);
        removal_followed = true;
        // Only once this look saw the removal end: a removal that keeps failing, or one
        // still queued when something else woke describe, leaves the full look below.
        if st.upid.is_none()
            && st.iso.is_none()
            && power(&cx, &st).ok().as_deref() == Some("running")
        {
            let mut s = cx.status(&st, phase, ready_message(&st), None);
            s.details.push(("power".into(), "running".into()));
            return Ok(s);
        }
    }
    let config = match cx.locate(&mut st)? {
        Located::Ours(config) => config,
        // The VMID is chosen before the clone starts: until it has, no VM is missing.
        _ if st.step == Step::Cloning => {
            let mut s = cx.status(&st, phase, format!("VM {vmid} is not cloned yet"), None);
            s.ready = false;
            return Ok(s);
        }
        Located::Gone => {
            let s = cx.status(&st, phase, String::new(), None);
            let text = format!(
                "VM {vmid} no longer exists on {} nor on another node",
                st.node.as_deref().unwrap_or_default()
            );
            return Ok(drift::report(s, "VMMissing", Drift::Missing(text)));
        }
        // Mid-clone, before PVE writes the clone's config: nothing to judge yet.
        Located::Cloning => {
            let mut s = cx.status(&st, phase, format!("VM {vmid} is being cloned"), None);
            s.ready = false;
            return Ok(s);
        }
        Located::Foreign(config) => {
            let mut s = cx.status(&st, phase, String::new(), None);
            s.provider_id = None;
            s.addresses = vec![];
            let text = format!(
                "VM {vmid} belongs to someone else: it does not carry {}, its name is {}",
                marker(cx.uid()),
                str_of(&config, "name").unwrap_or_default()
            );
            return Ok(drift::report(s, "VMForeign", Drift::Foreign(text)));
        }
    };
    // An ISO still attached stays: a machine without the guest agent check keeps it
    // (nothing tells when its guest has read it), and delete removes it.
    if st.step == Step::Ready && !removal_followed && !iso_attached(&config, &st) {
        follow_iso_removal(&cx, &mut st);
    }
    let power = power(&cx, &st).map_err(|e| e.classify("reading the VM status"))?;
    // The same words as create's Ready report, so a describe of a healthy VM rewrites
    // nothing.
    let message = match (st.step, power.as_str()) {
        (Step::Ready, "running") => ready_message(&st),
        _ => format!("VM {vmid} is {power}"),
    };
    let mut s = cx.status(&st, phase, message, None);
    s.details.push(("power".into(), power.clone()));
    if st.step == Step::Ready && power != "running" {
        // Not started again: whoever stopped it may have meant it (the machine shows the
        // drift until someone starts the VM or Cluster API remediates the machine).
        let reason = if power == "stopped" {
            "VMPoweredOff"
        } else {
            "VMNotRunning"
        };
        let text = format!("VM {vmid} is {power}, not running");
        return Ok(drift::report(s, reason, Drift::Changed(text)));
    }
    Ok(s)
}

/// The ISO's removal is followed by describe, but does not make it fail: what the VM
/// looks like is still told, and the removal is looked at again by the next describe.
fn follow_iso_removal(cx: &Ctx, st: &mut State) {
    let before = st.clone();
    if let Err(e) = removing_iso(cx, st) {
        log::warn(
            "following the NoCloud ISO's removal failed; looking again later",
            &[("error", format!("{e:?}"))],
        );
        *st = before;
    }
}

/// The VM's power state (`status` of `status/current`: running, stopped, ...).
fn power(cx: &Ctx, st: &State) -> Result<String, crate::api::PveError> {
    let current = cx
        .pve
        .get(&format!("{}/status/current", cx.config_path(st)))?;
    Ok(str_of(&current, "status").unwrap_or_else(|| "unknown".into()))
}

pub(super) fn phase_of(step: Step) -> &'static str {
    match step {
        Step::Start => "Pending",
        Step::Cloning => "Cloning",
        Step::Configuring => "Configuring",
        Step::Resizing => "Resizing",
        Step::UploadingCloudInit | Step::Attaching => "UploadingCloudInit",
        Step::PoweringOn => "PoweringOn",
        Step::WaitingForGuestAgent | Step::Ejecting => "WaitingForGuestAgent",
        Step::Ready => "Ready",
    }
}
