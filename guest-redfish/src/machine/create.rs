//! `machine.create`: claim a host, insert the bootstrap media, boot once from it,
//! power on.

use guest_kit::machine::{AddressPool, AddressRequest, MachineRequest, MachineStatus};
use guest_kit::types::PluginError;
use guest_kit::{blobs, claims, log, terminal, transient};
use serde_json::Value;

use super::claim::{Found, Ownership, client_for, find_or_claim, ownership};
use super::media::{insert, read_media, virtual_cd};
use super::power::{boot_once_from_cd, booted, power_state, reset};
use super::seed::seed_iso;
use super::state::{State, Step};
use super::{
    BOOTSTRAP_MS, NIC, NO_HOST_MS, POWER_MS, SEED_BLOB, SEED_TTL_SECONDS, addresses, host_details,
    inputs, pending, progress,
};
use crate::api::Redfish;
use crate::inventory::{Bmc, Host, bmcs, require_some};

pub(super) fn create(req: &MachineRequest) -> Result<MachineStatus, PluginError> {
    let inputs = inputs(req)?;
    let bmcs = bmcs(&req.credentials, &req.more_credentials);
    require_some(&bmcs)?;
    let mut state: State = guest_kit::state::load(req.state.as_deref())?;

    // A static address goes into the seed: wait for it before claiming anything.
    if inputs.cluster.ipv4_config.is_some() && !req.addresses.iter().any(|a| a.device == NIC) {
        let mut status = pending(progress(
            &state,
            "WaitingForAddresses",
            "waiting for an IPv4 address from the cluster's pool",
            None,
        ));
        status.address_requests = vec![AddressRequest {
            device: NIC.into(),
            pool: AddressPool::Reported("ipv4".into()),
            claim_suffix: None,
        }];
        return Ok(status);
    }

    let host = match state.host.clone() {
        Some(host) => {
            keep_claim(req, &host)?;
            host
        }
        None => match find_or_claim(req, &inputs.spec, &bmcs)? {
            Some(Found::Claimed(host)) => {
                state.host = Some(host.clone());
                state.step = Step::Claimed;
                host
            }
            Some(Found::Adopted(host)) => {
                state.host = Some(host.clone());
                resume(&bmcs, &host, &mut state)?;
                host
            }
            None => {
                return Ok(pending(progress(
                    &state,
                    "WaitingForHost",
                    "no free host in the inventory matches; waiting for one to be released",
                    Some(NO_HOST_MS),
                )));
            }
        },
    };
    state.step = state.step.max(Step::Claimed);
    if state.step == Step::Ready {
        blobs::withdraw(SEED_BLOB);
        return Ok(ready(req, &state, &host, "On"));
    }

    let Some(bootstrap) = &req.bootstrap else {
        let mut status = pending(progress(
            &state,
            "WaitingForBootstrapData",
            format!("host {} claimed; waiting for bootstrap data", host.name),
            Some(BOOTSTRAP_MS),
        ));
        status.needs_bootstrap = true;
        status.details = host_details(&host, None);
        return Ok(status);
    };

    let bmc = client_for(&bmcs, &host)?;
    let system = read_system(&bmc, &host)?;
    if state.step < Step::Ready {
        // Until the host has booted, the media must stay reachable: publishing again
        // returns the same URL (and the insert is then a no-op), or a new one if the
        // manager restarted and lost its blobs, which is inserted in its place.
        let iso = seed_iso(req, &host, &inputs.cluster, &bmc, &system, &bootstrap.value)?;
        let url = blobs::publish(SEED_BLOB, &iso, SEED_TTL_SECONDS)
            .map_err(|e| terminal("CannotPublishMedia", e))?;
        let cd = virtual_cd(&bmc, &system)?;
        insert(&bmc, &cd, &url)?;
        state.step = state.step.max(Step::MediaInserted);
    }
    if state.step < Step::BootOverrideSet {
        boot_once_from_cd(&bmc, &host)?;
        state.step = Step::BootOverrideSet;
    }
    if state.step < Step::Ready {
        let system = read_system(&bmc, &host)?;
        let power = power_state(&system);
        let just_reset = !state.reset_sent;
        if just_reset {
            // Already on (e.g. left on by its last user): restart it into the media.
            let kind = if power == "Off" { "On" } else { "ForceRestart" };
            reset(&bmc, &host, &system, kind)?;
            state.reset_sent = true;
            state.step = Step::PoweringOn;
        }
        // What was read before a reset says nothing about the boot after it.
        if just_reset || !booted(&system) {
            let mut status = pending(progress(
                &state,
                "PoweringOn",
                format!("host {} is powering on (power {power})", host.name),
                Some(POWER_MS),
            ));
            status.details = host_details(&host, Some(&power));
            return Ok(status);
        }
        state.step = Step::Ready;
        // Read by now: the media URL need not live on.
        blobs::withdraw(SEED_BLOB);
    }
    Ok(ready(req, &state, &host, "On"))
}

/// Where to go on with a host this machine already had when its state was lost: the
/// BMC remembers how far provisioning got. Booted with media inserted: provisioned
/// (never restarted again); media inserted but not booted: the power-on was sent or
/// is next; otherwise from the start.
fn resume(bmcs: &[Bmc], host: &Host, state: &mut State) -> Result<(), PluginError> {
    let bmc = client_for(bmcs, host)?;
    let system = read_system(&bmc, host)?;
    let media = read_media(&bmc, &virtual_cd(&bmc, &system)?)?;
    (state.step, state.reset_sent) =
        resume_point(media.inserted, booted(&system), &power_state(&system));
    log::info(
        "adopted host",
        &[
            ("host", host.name.clone()),
            ("step", format!("{:?}", state.step)),
        ],
    );
    Ok(())
}

/// The step to go on from, and whether the power-on (or restart) was sent, for a host
/// whose virtual CD holds media or not, that has booted or not, in this power state.
fn resume_point(media_inserted: bool, booted: bool, power: &str) -> (Step, bool) {
    match (media_inserted, booted, power) {
        (true, true, _) => (Step::Ready, true),
        (true, false, "Off") => (Step::MediaInserted, false),
        (true, false, _) => (Step::PoweringOn, true),
        (false, _, _) => (Step::Claimed, false),
    }
}

/// The host this machine recorded must still be claimed by it.
fn keep_claim(req: &MachineRequest, host: &Host) -> Result<(), PluginError> {
    match ownership(req, host)? {
        Ownership::Ours => Ok(()),
        // Claim lost (e.g. removed by hand): take it back, unless someone was faster.
        Ownership::Free => match claims::acquire(&host.claim_key()) {
            Ok(None) => Ok(()),
            Ok(Some(uid)) => Err(claimed_by_another(host, &uid)),
            Err(e) => Err(transient(format!("claiming host {}: {e}", host.name), None)),
        },
        Ownership::Foreign(uid) => Err(claimed_by_another(host, &uid)),
    }
}

/// The holder is another object's business: the manager's log names it, the machine's
/// message does not.
fn claimed_by_another(host: &Host, uid: &str) -> PluginError {
    log::warn(
        "the host this machine recorded is held by another object",
        &[("host", host.name.clone()), ("holder", uid.to_string())],
    );
    terminal(
        "HostClaimedByAnother",
        format!(
            "host {} ({}) is held by another object; this machine will not touch it",
            host.name, host.uuid
        ),
    )
}

pub(super) fn read_system(bmc: &Redfish, host: &Host) -> Result<Value, PluginError> {
    bmc.get(&host.path).map_err(|e| {
        if e.is_not_found() {
            terminal(
                "HostGone",
                format!(
                    "host {} ({}) is no longer served by {}",
                    host.name, host.path, host.endpoint
                ),
            )
        } else {
            e.classify(&format!("reading host {}", host.name))
        }
    })
}

pub(super) fn ready(
    req: &MachineRequest,
    state: &State,
    host: &Host,
    power: &str,
) -> MachineStatus {
    MachineStatus {
        progress: progress(
            state,
            "Ready",
            format!("host {} is running", host.name),
            None,
        ),
        ready: true,
        provider_id: Some(host.provider_id()),
        addresses: addresses(req),
        failure_domain: None,
        address_requests: vec![],
        needs_bootstrap: false,
        drift: None,
        details: host_details(host, Some(power)),
        plugin_status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_found_again_resumes_where_its_bmc_says_provisioning_got() {
        // Booted from our media: provisioned, never restarted again.
        assert_eq!(resume_point(true, true, "On"), (Step::Ready, true));
        // Media in, still off: the power-on is next.
        assert_eq!(
            resume_point(true, false, "Off"),
            (Step::MediaInserted, false)
        );
        // Media in, powering on or on but not booted yet: the power-on was sent.
        assert_eq!(resume_point(true, false, "On"), (Step::PoweringOn, true));
        assert_eq!(
            resume_point(true, false, "PoweringOn"),
            (Step::PoweringOn, true)
        );
        // No media: from the start, whatever the host is doing.
        assert_eq!(resume_point(false, true, "On"), (Step::Claimed, false));
        assert_eq!(resume_point(false, false, "Off"), (Step::Claimed, false));
    }
}
