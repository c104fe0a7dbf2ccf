//! Machine lifecycle: one RedfishMachine is one bare-metal host of the inventory.
//!
//! # The state machine
//!
//! Create walks `WaitingForAddresses` (only with an IP pool) → `WaitingForHost` (the
//! claim) → `WaitingForBootstrapData` → `InsertingMedia` → `SettingBootOverride` →
//! `PoweringOn` → `Ready`; delete walks `PoweringOff` → `EjectingMedia` → `Released`.
//! BMC calls are short and synchronous; waits (power transitions) are returned as
//! progress with a requeue hint. Every step checks what is there before acting, so a
//! step retried after an error or a lost state converges.
//!
//! # Claims: no host is given twice
//!
//! Redfish offers no atomic "take this host" (a BMC has no free field to write an
//! owner into with compare-and-swap on every implementation), so a host is claimed
//! through the host's generic `claims` import under the key `host/<system UUID>`: of
//! many machines claiming one key at once, exactly one is granted. The claim is also
//! the proof of ownership: nothing (media, boot order, power) is touched on a host whose
//! claim this machine does not hold. A machine that lost its state finds its host again
//! through `claims.held`, never claiming a second one.
//!
//! # Bootstrap media
//!
//! The NoCloud ISO (user-data, meta-data, network-config) is published through the
//! host's `blobs` import; the BMC downloads it from that URL as virtual media. The URL
//! is a secret: it is never logged or kept in state (publishing again returns it).
//! The blob is withdrawn once the machine is ready or deleted.
//!
//! # Layout
//!
//! `create`, `describe` and `delete` are the three calls; `claim` finds and claims a
//! host, `media` drives virtual media, `power` the power state, `seed` builds the ISO,
//! `state` is what the host hands back.
use guest_kit::machine::{
    AddressType, Guest, MachineAddress, MachineRequest, MachineStatus, TemplateRequest,
    TemplateStatus,
};
use guest_kit::parse_spec;
use guest_kit::types::{PluginError, Progress};

use crate::Plugin;
use crate::inventory::Host;
use crate::spec::{ClusterSpec, MachineSpec};
use state::State;

mod claim;
mod create;
mod delete;
mod describe;
mod media;
mod power;
mod seed;
mod state;
#[cfg(test)]
pub(crate) mod testing;

/// Requeue hints, in milliseconds.
const POWER_MS: u64 = 2_000;
const NO_HOST_MS: u64 = 15_000;
const BOOTSTRAP_MS: u64 = 10_000;
/// The ISO's blob name, and how long its URL lives.
const SEED_BLOB: &str = "cidata.iso";
const SEED_TTL_SECONDS: u32 = 3600;
/// The device the IPAM address is requested for.
const NIC: &str = "nic0";

impl Guest for Plugin {
    fn create(req: MachineRequest) -> Result<MachineStatus, PluginError> {
        create::create(&req)
    }

    fn describe(req: MachineRequest) -> Result<MachineStatus, PluginError> {
        describe::describe(&req)
    }

    fn delete(req: MachineRequest) -> Result<Option<Progress>, PluginError> {
        delete::delete(&req)
    }

    fn describe_template(req: TemplateRequest) -> Result<TemplateStatus, PluginError> {
        let _: MachineSpec = parse_spec(&req.spec, "spec.template.spec")?;
        // A bare-metal host's size is known only once one is claimed.
        Ok(TemplateStatus {
            capacity: vec![],
            node_info: vec![
                ("architecture".into(), "amd64".into()),
                ("operatingSystem".into(), "linux".into()),
            ],
        })
    }
}

/// The parsed inputs of a machine call.
struct Inputs {
    spec: MachineSpec,
    cluster: ClusterSpec,
}

fn inputs(req: &MachineRequest) -> Result<Inputs, PluginError> {
    Ok(Inputs {
        spec: parse_spec(&req.spec, "spec")?,
        cluster: parse_spec(&req.cluster_spec, "cluster.spec")?,
    })
}

fn progress(
    state: &State,
    phase: &str,
    message: impl Into<String>,
    requeue: Option<u64>,
) -> Progress {
    Progress {
        state: guest_kit::state::save(state),
        phase: phase.into(),
        message: message.into(),
        requeue_after_ms: requeue,
    }
}

/// A status that is not ready yet.
fn pending(progress: Progress) -> MachineStatus {
    MachineStatus {
        progress,
        ready: false,
        provider_id: None,
        addresses: vec![],
        failure_domain: None,
        address_requests: vec![],
        needs_bootstrap: false,
        drift: None,
        details: vec![],
    }
}

fn host_details(host: &Host, power: Option<&str>) -> Vec<(String, String)> {
    let mut details = vec![
        ("bmc".into(), host.endpoint.clone()),
        ("host".into(), host.name.clone()),
        ("uuid".into(), host.uuid.clone()),
    ];
    if let Some(p) = power {
        details.push(("power".into(), p.to_string()));
    }
    details
}

/// The machine's addresses: its hostname and the address IPAM gave it, if any.
fn addresses(req: &MachineRequest) -> Vec<MachineAddress> {
    let mut out = vec![MachineAddress {
        address_type: AddressType::Hostname,
        address: req.machine.name.clone(),
    }];
    for a in req.addresses.iter().filter(|a| a.device == NIC) {
        out.push(MachineAddress {
            address_type: AddressType::InternalIp,
            address: a.address.clone(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use guest_kit::testing::allocated;

    use crate::machine::testing::{host, request};

    #[test]
    fn a_machine_reports_its_hostname_and_the_address_ipam_gave_its_nic() {
        let mut req = request(json!({}), json!({}));
        req.addresses = vec![
            allocated(NIC, "10.0.0.21", 24, None),
            allocated("nic9", "10.9.9.9", 24, None),
        ];
        let reported: Vec<(String, String)> = addresses(&req)
            .into_iter()
            .map(|a| (format!("{:?}", a.address_type), a.address))
            .collect();
        assert_eq!(
            reported,
            [
                ("AddressType::Hostname".to_string(), "m1".to_string()),
                (
                    "AddressType::InternalIp".to_string(),
                    "10.0.0.21".to_string()
                )
            ]
        );
    }

    #[test]
    fn details_name_the_bmc_the_host_and_its_power_when_known() {
        let h = host("https://bmc1.test", "node-1", "uuid-1");
        let keys = |d: Vec<(String, String)>| d.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        assert_eq!(keys(host_details(&h, None)), ["bmc", "host", "uuid"]);
        assert_eq!(
            host_details(&h, Some("On")).last(),
            Some(&("power".to_string(), "On".to_string()))
        );
    }

    #[test]
    fn the_state_of_a_call_is_handed_back_in_its_progress() {
        let state = State {
            host: Some(host("https://bmc1.test", "node-1", "uuid-1")),
            ..State::default()
        };
        let p = progress(
            &state,
            "WaitingForBootstrapData",
            "waiting",
            Some(BOOTSTRAP_MS),
        );
        let back: State = guest_kit::state::load(Some(&p.state)).unwrap();
        assert_eq!(back, state);
        assert_eq!(p.requeue_after_ms, Some(BOOTSTRAP_MS));
    }
}
