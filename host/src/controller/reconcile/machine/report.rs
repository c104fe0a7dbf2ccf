//! What an InfraMachine's status becomes from the plugin's report, and when to come
//! back: pure functions of the status the object has and what the plugin said, so every
//! case (provisioning, a drift starting, lasting and resolved, deletion, a fuzzer's odd
//! input) is decided without an API server.
//!
//! Drift tells the truth everywhere at once: `status.ready` false, the phase and both
//! `Ready` and `InfrastructureProvisioned` carry the drift's reason (the plugin's
//! CamelCase phase, e.g. `VMMissing`; else `Infrastructure{Missing,Foreign,Changed}`)
//! and its message, one Warning event when it starts, one Normal event when it is
//! resolved. `status.initialization.provisioned` stays true: Cluster API reads it once,
//! and nothing is provisioned again.

use crate::controller::write::conditions::{self, Condition, PROVISIONED, READY, reasons};
use crate::controller::write::events::{Event, Report};
use crate::status::{self, InfraMachineStatus, Initialization, MachineAddress};
use hyperplug_runtime::bindings::machine::{AddressType, Drift, MachineStatus};
use hyperplug_runtime::bindings::types::Progress;

/// A drift as the object shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriftView {
    pub reason: String,
    pub message: String,
    /// The infrastructure is there (changed), as opposed to gone or someone else's.
    pub exists: bool,
}

impl DriftView {
    /// The plugin names a drift by its phase (a CamelCase reason such as `VMMissing`);
    /// without a valid one, the host names it by its kind.
    pub fn of(drift: &Drift, phase: &str) -> DriftView {
        let (fallback, text, exists, default_message) = match drift {
            Drift::Missing(m) => (
                reasons::INFRASTRUCTURE_MISSING,
                m,
                false,
                "the machine's infrastructure no longer exists",
            ),
            Drift::Foreign(m) => (
                reasons::INFRASTRUCTURE_FOREIGN,
                m,
                false,
                "the infrastructure recorded for the machine belongs to someone else",
            ),
            Drift::Changed(m) => (
                reasons::INFRASTRUCTURE_CHANGED,
                m,
                true,
                "the machine's infrastructure differs from its spec",
            ),
        };
        DriftView {
            reason: conditions::reason_or(phase, fallback),
            message: if text.trim().is_empty() {
                default_message.to_string()
            } else {
                text.clone()
            },
            exists,
        }
    }
}

/// The status after a create or describe call reported `s`, on an object whose status
/// was `prev` and whose infrastructure was provisioned already (`was_provisioned`).
pub fn after_call(
    prev: &InfraMachineStatus,
    s: &MachineStatus,
    was_provisioned: bool,
    generation: i64,
    now: &str,
) -> Report<InfraMachineStatus> {
    let drift = s
        .drift
        .as_ref()
        .map(|d| DriftView::of(d, &s.progress.phase));
    let provisioned = s.ready || was_provisioned;
    let message = &s.progress.message;
    let step = conditions::reason_or(
        &s.progress.phase,
        if provisioned {
            reasons::PROVISIONED
        } else {
            reasons::PROVISIONING
        },
    );

    let mut next = prev.clone();
    let p = &mut next.progress;
    p.plugin_state = non_empty(&s.progress.state);
    p.phase = match &drift {
        Some(d) => Some(d.reason.clone()),
        None => non_empty(&s.progress.phase),
    };
    p.details = s.details.iter().cloned().collect();
    p.observed_generation = Some(generation);
    p.failed_generation = None;
    p.failed_credentials = None;
    if s.ready {
        next.initialization = Initialization::provisioned();
        next.addresses = s
            .addresses
            .iter()
            .map(|a| MachineAddress {
                type_: address_type(a.address_type),
                address: a.address.clone(),
            })
            .collect();
    }
    if provisioned {
        next.ready = Some(s.ready && drift.is_none());
    }
    if let Some(fd) = &s.failure_domain {
        next.failure_domain = Some(fd.clone());
    }
    let (ready, infrastructure) = match &drift {
        Some(d) => (
            Condition::new(READY, false, &d.reason, &d.message),
            Condition::new(PROVISIONED, provisioned && d.exists, &d.reason, &d.message),
        ),
        None => {
            let ready_reason = if s.ready {
                reasons::PROVISIONED
            } else if s.needs_bootstrap {
                reasons::WAITING_FOR_BOOTSTRAP_DATA
            } else {
                &step
            };
            (
                Condition::new(READY, s.ready, ready_reason, message),
                Condition::new(PROVISIONED, provisioned, &step, message),
            )
        }
    };
    next.progress.conditions = conditions::merge(
        &prev.progress.conditions,
        &[ready, infrastructure, conditions::not_paused()],
        generation,
        now,
    );

    let mut events = Vec::new();
    match &drift {
        // One Warning per drift: the phase holds its reason while it lasts.
        Some(d) if prev.progress.phase.as_deref() != Some(d.reason.as_str()) => {
            events.push(Event::warning(&d.reason, &d.message));
        }
        Some(_) => {}
        None if was_provisioned && prev.ready == Some(false) && next.ready == Some(true) => {
            events.push(Event::normal(
                reasons::DRIFT_RESOLVED,
                &format!("the infrastructure is as specified again: {message}"),
            ));
        }
        None => {}
    }
    // Events mark milestones (provisioned, deleted, failures, drift); the phases in
    // between are in status.phase and the Ready condition's reason, and an event per
    // phase would double the writes of every machine's lifecycle.
    if s.ready && !was_provisioned {
        events.push(Event::normal(&step, message));
    }
    Report {
        status: next,
        events,
    }
}

/// The status while the plugin tears the machine down (`progress` from its delete).
pub fn deleting(
    prev: &InfraMachineStatus,
    progress: &Progress,
    generation: i64,
    now: &str,
) -> InfraMachineStatus {
    let mut next = prev.clone();
    next.progress.plugin_state = non_empty(&progress.state);
    next.progress.phase = non_empty(&progress.phase);
    next.progress.conditions = conditions::merge(
        &prev.progress.conditions,
        &[Condition::new(
            READY,
            false,
            conditions::reason_or(&progress.phase, "Deleting"),
            &progress.message,
        )],
        generation,
        now,
    );
    next
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

fn address_type(t: AddressType) -> status::AddressType {
    match t {
        AddressType::InternalIp => status::AddressType::InternalIP,
        AddressType::ExternalIp => status::AddressType::ExternalIP,
        AddressType::Hostname => status::AddressType::Hostname,
        AddressType::InternalDns => status::AddressType::InternalDNS,
        AddressType::ExternalDns => status::AddressType::ExternalDNS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::ConditionStatus;
    use hyperplug_runtime::bindings::machine::MachineAddress as PluginAddress;

    fn report(phase: &str, message: &str, ready: bool, drift: Option<Drift>) -> MachineStatus {
        MachineStatus {
            progress: Progress {
                state: r#"{"vmid":103}"#.into(),
                phase: phase.into(),
                message: message.into(),
                requeue_after_ms: None,
                waits: vec![],
                durable: true,
            },
            ready,
            provider_id: Some("proxmox://u".into()),
            addresses: vec![PluginAddress {
                address_type: AddressType::InternalIp,
                address: "10.0.0.5".into(),
            }],
            failure_domain: Some("pve2".into()),
            address_requests: vec![],
            needs_bootstrap: false,
            drift,
            details: vec![("vmid".into(), "103".into())],
            plugin_status: None,
        }
    }

    fn running() -> MachineStatus {
        let mut s = report("Ready", "VM 103 is running", true, None);
        s.details.push(("power".into(), "running".into()));
        s
    }

    fn condition<'a>(s: &'a InfraMachineStatus, t: &str) -> &'a status::Condition {
        conditions::find(&s.progress.conditions, t).unwrap()
    }

    #[test]
    fn provisioning_ends_ready_with_one_normal_event() {
        let first = after_call(&Default::default(), &running(), false, 1, "t0");
        let s = &first.status;
        assert_eq!(s.ready, Some(true));
        assert_eq!(s.initialization, Initialization::provisioned());
        assert_eq!(condition(s, READY).reason, "Provisioned");
        assert_eq!(condition(s, PROVISIONED).reason, "Ready");
        assert_eq!(
            first.events,
            vec![Event::normal("Ready", "VM 103 is running")]
        );
        let again = after_call(s, &running(), true, 1, "t1");
        assert_eq!(&again.status, s, "ten reconciles = one");
        assert!(again.events.is_empty());
    }

    #[test]
    fn a_missing_vm_shows_everywhere_once_and_clears_when_repaired() {
        let ready = after_call(&Default::default(), &running(), false, 1, "t0").status;
        let missing = report(
            "VMMissing",
            "VM 103 does not exist",
            false,
            Some(Drift::Missing("VM 103 no longer exists on pve2".into())),
        );
        let first = after_call(&ready, &missing, true, 1, "t1");
        let s = &first.status;
        assert_eq!(s.ready, Some(false));
        assert_eq!(s.progress.phase.as_deref(), Some("VMMissing"));
        assert!(
            !s.progress.details.contains_key("power"),
            "{:?}",
            s.progress.details
        );
        assert_eq!(s.initialization, Initialization::provisioned());
        for t in [READY, PROVISIONED] {
            let c = condition(s, t);
            assert_eq!(c.status, ConditionStatus::False, "{t}");
            assert_eq!(c.reason, "VMMissing", "{t}");
            assert_eq!(c.message, "VM 103 no longer exists on pve2", "{t}");
        }
        assert_eq!(
            first.events,
            vec![Event::warning(
                "VMMissing",
                "VM 103 no longer exists on pve2"
            )]
        );
        let second = after_call(s, &missing, true, 1, "t2");
        assert!(second.events.is_empty(), "one Warning per drift");
        assert_eq!(&second.status, s);
        let repaired = after_call(s, &running(), true, 1, "t3");
        assert_eq!(repaired.status.ready, Some(true));
        assert_eq!(repaired.status.progress.phase.as_deref(), Some("Ready"));
        assert_eq!(
            condition(&repaired.status, READY).status,
            ConditionStatus::True
        );
        assert_eq!(repaired.events.len(), 1);
        assert_eq!(repaired.events[0].reason, "DriftResolved");
    }

    #[test]
    fn a_powered_off_vm_is_still_provisioned_but_not_ready() {
        let ready = after_call(&Default::default(), &running(), false, 1, "t0").status;
        let mut off = report(
            "VMPoweredOff",
            "VM 103 is stopped",
            true,
            Some(Drift::Changed("VM 103 is stopped, not running".into())),
        );
        off.details.push(("power".into(), "stopped".into()));
        let s = after_call(&ready, &off, true, 1, "t1").status;
        assert_eq!(s.ready, Some(false));
        assert_eq!(s.progress.details["power"], "stopped");
        assert_eq!(condition(&s, READY).reason, "VMPoweredOff");
        assert_eq!(condition(&s, PROVISIONED).status, ConditionStatus::True);
        assert_eq!(condition(&s, PROVISIONED).reason, "VMPoweredOff");
    }

    #[test]
    fn a_drift_without_a_valid_reason_or_message_is_named_by_its_kind() {
        let foreign = report("", "", false, Some(Drift::Foreign(" ".into())));
        let s = after_call(&Default::default(), &foreign, true, 1, "t").status;
        let ready = condition(&s, READY);
        assert_eq!(ready.reason, "InfrastructureForeign");
        assert_eq!(
            ready.message,
            "the infrastructure recorded for the machine belongs to someone else"
        );
        let changed = DriftView::of(&Drift::Changed("x".into()), "Ready now");
        assert_eq!(changed.reason, "InfrastructureChanged");
    }

    #[test]
    fn odd_phases_never_make_invalid_reasons() {
        let s = after_call(
            &Default::default(),
            &report("", "", false, None),
            false,
            1,
            "t",
        );
        assert_eq!(condition(&s.status, READY).reason, "Provisioning");
        assert_eq!(s.status.progress.phase, None);
        let s = after_call(
            &Default::default(),
            &report("cloning vm!", "", false, None),
            false,
            1,
            "t",
        );
        assert_eq!(condition(&s.status, PROVISIONED).reason, "Provisioning");
        assert_eq!(s.status.progress.phase.as_deref(), Some("cloning vm!"));
    }
}
