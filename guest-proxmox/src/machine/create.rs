//! The create step machine: one step per call.

use guest_kit::machine::{MachineRequest, MachineStatus};
use guest_kit::types::PluginError;

use super::SHORT_MS;
use super::boot::{powering_on, waiting_for_agent};
use super::clone::{cloning, start};
use super::cloudinit::{attaching, ejecting, uploading};
use super::configure::configuring;
use super::context::Ctx;
use super::disks::resizing;
use super::state::{State, Step};

// ---------------------------------------------------------------------------------
// create
// ---------------------------------------------------------------------------------

pub(super) fn create(req: &MachineRequest) -> Result<MachineStatus, PluginError> {
    let cx = Ctx::new(req)?;
    let mut st: State = guest_kit::state::load(req.state.as_deref())?;
    // Bounded: every arm either advances the step or returns.
    for _ in 0..12 {
        match st.step {
            Step::Start => {
                if let Some(s) = start(&cx, &mut st)? {
                    return Ok(s);
                }
            }
            Step::Cloning => {
                if let Some(s) = cloning(&cx, &mut st)? {
                    return Ok(s);
                }
            }
            Step::Configuring => configuring(&cx, &mut st)?,
            Step::Resizing => {
                if let Some(s) = resizing(&cx, &mut st)? {
                    return Ok(s);
                }
            }
            Step::UploadingCloudInit => {
                if let Some(s) = uploading(&cx, &mut st)? {
                    return Ok(s);
                }
            }
            Step::Attaching => {
                if let Some(s) = attaching(&cx, &mut st)? {
                    return Ok(s);
                }
            }
            Step::PoweringOn => {
                if let Some(s) = powering_on(&cx, &mut st)? {
                    return Ok(s);
                }
            }
            Step::WaitingForGuestAgent => {
                if let Some(s) = waiting_for_agent(&cx, &mut st)? {
                    return Ok(s);
                }
            }
            Step::Ejecting => {
                if let Some(s) = ejecting(&cx, &mut st)? {
                    return Ok(s);
                }
            }
            Step::Ready => {
                let mut s = cx.status(&st, "Ready", ready_message(&st), None);
                // What describe reports of a running VM, so the first describe after
                // Ready finds nothing to rewrite.
                s.details.push(("power".into(), "running".into()));
                return Ok(s);
            }
        }
    }
    Ok(cx.status(&st, "Configuring", "continuing", Some(SHORT_MS)))
}

/// How a provisioned, running VM is reported (by create and by describe).
pub(super) fn ready_message(st: &State) -> String {
    format!(
        "VM {} running on {}",
        st.vmid.unwrap_or_default(),
        st.node.as_deref().unwrap_or_default()
    )
}
