//! `machine.delete`: power the host off, eject the media, release the claim. A host
//! this machine does not hold is never touched.

use guest_kit::machine::MachineRequest;
use guest_kit::types::{PluginError, Progress};
use guest_kit::{blobs, claims, log, transient};

use super::claim::{Ownership, client_for, held_host, ownership};
use super::media::{eject, read_media, virtual_cd};
use super::power::{power_state, reset};
use super::state::{DeleteStep, State};
use super::{POWER_MS, SEED_BLOB, progress};
use crate::inventory::{Host, bmcs};

pub(super) fn delete(req: &MachineRequest) -> Result<Option<Progress>, PluginError> {
    let bmcs = bmcs(&req.credentials, &req.more_credentials);
    let mut state: State = guest_kit::state::load(req.state.as_deref())?;
    let host = match state.host.clone() {
        Some(h) => h,
        // Lost state: the claim finds the host again.
        None => match held_host(&bmcs)? {
            Some(h) => h,
            None => {
                blobs::withdraw(SEED_BLOB);
                return Ok(None);
            }
        },
    };
    state.host = Some(host.clone());
    match ownership(req, &host)? {
        Ownership::Ours => {}
        // Released already (a repeated delete): nothing left to do.
        Ownership::Free => {
            blobs::withdraw(SEED_BLOB);
            return Ok(None);
        }
        Ownership::Foreign(_) => {
            log::warn(
                "not touching a host this machine does not hold",
                &[("host", host.name.clone())],
            );
            blobs::withdraw(SEED_BLOB);
            return Ok(None);
        }
    }
    let bmc = client_for(&bmcs, &host)?;
    let system = match bmc.get(&host.path) {
        Err(e) if e.is_not_found() => return release(&host),
        other => other.map_err(|e| e.classify(&format!("reading host {}", host.name)))?,
    };
    if state.delete != Some(DeleteStep::EjectingMedia) {
        let power = power_state(&system);
        if power != "Off" {
            if state.delete.is_none() {
                reset(&bmc, &host, &system, "ForceOff")?;
                state.delete = Some(DeleteStep::PoweringOff);
            }
            return Ok(Some(progress(
                &state,
                "PoweringOff",
                format!("host {} is powering off (power {power})", host.name),
                Some(POWER_MS),
            )));
        }
        state.delete = Some(DeleteStep::EjectingMedia);
    }
    let cd = virtual_cd(&bmc, &system)?;
    let media = read_media(&bmc, &cd)?;
    if media.inserted {
        eject(&bmc, &media)?;
        if read_media(&bmc, &cd)?.inserted {
            return Ok(Some(progress(
                &state,
                "EjectingMedia",
                format!("host {}: waiting for the media to be ejected", host.name),
                Some(POWER_MS),
            )));
        }
    }
    release(&host)
}

fn release(host: &Host) -> Result<Option<Progress>, PluginError> {
    blobs::withdraw(SEED_BLOB);
    claims::release(&host.claim_key())
        .map_err(|e| transient(format!("releasing host {}: {e}", host.name), None))?;
    log::info("released host", &[("host", host.name.clone())]);
    Ok(None)
}
