//! The rule of what a machine's status write may wait for (see [`super`]): what others
//! read is written at once, what only users see waits at most a bounded time, and the
//! plugin's state alone waits for the next write. Pure: judged against a clock handed in.
use std::time::{Duration, Instant};

use crate::controller::schedule::requeue::{DETAIL_HOLD_AT_MOST, HOLD_AT_MOST};
use crate::status::{ConditionStatus, InfraMachineStatus};

/// How long what is held has waited: since the first step held after the last write,
/// and since the held step (phase and condition reasons) first showed.
#[derive(Clone, Copy, Default)]
pub(super) struct Waited {
    pub(super) since: Option<Instant>,
    pub(super) step_since: Option<Instant>,
}

/// The rule: durable state, events, and what others read (readiness, provisioning,
/// addresses, failure domain, a changed spec's generation described, any condition
/// turning True or False, e.g. `Paused`) are written at once; a new phase or condition
/// reason once it has shown for [`HOLD_AT_MOST`] (`step_since`), anything else users
/// see (message, details) at most [`DETAIL_HOLD_AT_MOST`] after the first step held
/// (`since`); a change of the
/// plugin's state alone waits until one of those is written (it can be recomputed, and
/// nobody reads it).
///
/// While the object is `deleting`, only durable state and events are written at once,
/// and the rest at most [`DETAIL_HOLD_AT_MOST`] late: Cluster API waits for the object
/// to be gone, not for its status, and the finalizer's removal ends the held steps.
pub(super) fn must_write(
    stored: &InfraMachineStatus,
    next: &InfraMachineStatus,
    durable: bool,
    has_events: bool,
    deleting: bool,
    Waited { since, step_since }: Waited,
    now: Instant,
) -> bool {
    let held_for = |from: Option<Instant>, limit: Duration| {
        from.is_some_and(|s| now.duration_since(s) >= limit)
    };
    if durable || has_events || (held_for(since, DETAIL_HOLD_AT_MOST) && shows_more(stored, next)) {
        return true;
    }
    if deleting {
        return false;
    }
    // Cluster API copies addresses from a provisioned machine: before that they go with
    // the write that provisions it (a static address bound while the infrastructure is
    // being made is not a write of its own).
    let provisioned = |s: &InfraMachineStatus| {
        s.initialization
            .as_ref()
            .is_some_and(|i| i.provisioned == Some(true))
    };
    next.ready != stored.ready
        || next.initialization != stored.initialization
        || (next.addresses != stored.addresses && (provisioned(stored) || provisioned(next)))
        || next.failure_domain != stored.failure_domain
        || (stored.progress.observed_generation.is_some()
            && next.progress.observed_generation != stored.progress.observed_generation)
        || a_condition_turned(stored, next)
        || (held_for(step_since, HOLD_AT_MOST) && a_new_step(stored, next))
}

/// Whether `next` is in another phase than `stored`, or a condition's reason changed.
pub(super) fn a_new_step(stored: &InfraMachineStatus, next: &InfraMachineStatus) -> bool {
    let reasons = |s: &InfraMachineStatus| -> Vec<(String, String)> {
        let mut r: Vec<_> = s
            .progress
            .conditions
            .iter()
            .map(|c| (c.type_.clone(), c.reason.clone()))
            .collect();
        r.sort();
        r
    };
    next.progress.phase != stored.progress.phase || reasons(next) != reasons(stored)
}

/// Whether a condition of `next` turned True or False: it had another status in
/// `stored`, or it is new and True (a new condition that is not True, e.g. `Ready`
/// False while provisioning, says nothing that cannot wait). Reasons and messages move
/// with steps and are not looked at.
fn a_condition_turned(stored: &InfraMachineStatus, next: &InfraMachineStatus) -> bool {
    let before = |type_: &str| {
        stored
            .progress
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| c.status)
    };
    let gone = stored
        .progress
        .conditions
        .iter()
        .any(|c| !next.progress.conditions.iter().any(|n| n.type_ == c.type_));
    gone || next
        .progress
        .conditions
        .iter()
        .any(|c| match before(&c.type_) {
            Some(status) => status != c.status,
            None => c.status == ConditionStatus::True,
        })
}

/// Whether `next` differs from `stored` in more than the plugin's state.
fn shows_more(stored: &InfraMachineStatus, next: &InfraMachineStatus) -> bool {
    let mut next = next.clone();
    next.progress.plugin_state = stored.progress.plugin_state.clone();
    next != *stored
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// What has been held since `at`, its step showing since then too.
    pub(crate) fn held_since(at: Instant) -> Waited {
        Waited {
            since: Some(at),
            step_since: Some(at),
        }
    }

    pub(crate) fn stored(state: &str) -> InfraMachineStatus {
        let mut s = InfraMachineStatus::default();
        s.progress.plugin_state = Some(state.into());
        s.progress.observed_generation = Some(1);
        s
    }

    pub(crate) fn step(from: &InfraMachineStatus, state: &str) -> InfraMachineStatus {
        let mut s = from.clone();
        s.progress.plugin_state = Some(state.into());
        s
    }

    #[test]
    fn what_others_read_is_written_at_once() {
        let at_rest = stored("s");
        let now = Instant::now();
        let mut ready = step(&at_rest, "t");
        ready.ready = Some(true);
        let mut generation = step(&at_rest, "t");
        generation.progress.observed_generation = Some(2);
        let mut domain = step(&at_rest, "t");
        domain.failure_domain = Some("pve2".into());
        for next in [ready, generation, domain] {
            assert!(must_write(
                &at_rest,
                &next,
                false,
                false,
                false,
                Waited::default(),
                now
            ));
        }
        let paused = |status| crate::status::Condition {
            type_: "Paused".into(),
            status,
            observed_generation: Some(1),
            reason: "Paused".into(),
            message: String::new(),
            last_transition_time: "2026-12-02T00:00:00Z".into(),
        };
        // Turning False from True, or appearing True: written.
        let mut was_paused = at_rest.clone();
        was_paused
            .progress
            .conditions
            .push(paused(ConditionStatus::True));
        let mut unpaused = step(&at_rest, "t");
        unpaused
            .progress
            .conditions
            .push(paused(ConditionStatus::False));
        assert!(must_write(
            &was_paused,
            &unpaused,
            false,
            false,
            false,
            Waited::default(),
            now
        ));
        let mut now_paused = step(&at_rest, "t");
        now_paused
            .progress
            .conditions
            .push(paused(ConditionStatus::True));
        assert!(must_write(
            &at_rest,
            &now_paused,
            false,
            false,
            false,
            Waited::default(),
            now
        ));
        // Appearing False (a first step's `Ready`): it can wait.
        assert!(!must_write(
            &at_rest,
            &unpaused,
            false,
            false,
            false,
            Waited::default(),
            now
        ));
        let plain = step(&at_rest, "t");
        assert!(must_write(
            &at_rest,
            &plain,
            false,
            true,
            false,
            Waited::default(),
            now
        ));
        assert!(!must_write(
            &at_rest,
            &plain,
            false,
            false,
            false,
            Waited::default(),
            now
        ));
    }

    #[test]
    fn addresses_are_written_at_once_only_for_a_provisioned_machine() {
        use crate::status::{AddressType, Initialization, MachineAddress};
        let now = Instant::now();
        let address = vec![MachineAddress {
            type_: AddressType::InternalIP,
            address: "10.0.0.11".into(),
        }];
        // Bound while the infrastructure is made: it waits for the write that provisions
        // the machine.
        let provisioning = stored("s");
        let mut bound = step(&provisioning, "t");
        bound.addresses = address.clone();
        let write = |stored: &InfraMachineStatus, next: &InfraMachineStatus| {
            must_write(stored, next, false, false, false, Waited::default(), now)
        };
        assert!(!write(&provisioning, &bound));
        // A provisioned machine's new address: Cluster API copies it, written at once.
        let mut provisioned = stored("s");
        provisioned.initialization = Some(Initialization {
            provisioned: Some(true),
        });
        let mut renewed = step(&provisioned, "t");
        renewed.initialization = provisioned.initialization.clone();
        renewed.addresses = address;
        assert!(write(&provisioned, &renewed));
    }

    #[test]
    fn a_deleting_object_writes_only_durable_state_and_events_at_once() {
        let now = Instant::now();
        let mut at_rest = stored("ready");
        at_rest.ready = Some(true);
        let mut deleting = step(&at_rest, "stopping");
        deleting.ready = Some(false);
        assert!(must_write(
            &at_rest,
            &deleting,
            false,
            false,
            false,
            Waited::default(),
            now
        ));
        assert!(!must_write(
            &at_rest,
            &deleting,
            false,
            false,
            true,
            Waited::default(),
            now
        ));
        assert!(must_write(
            &at_rest,
            &deleting,
            true,
            false,
            true,
            Waited::default(),
            now
        ));
        assert!(must_write(
            &at_rest,
            &deleting,
            false,
            true,
            true,
            Waited::default(),
            now
        ));
        let later = now + DETAIL_HOLD_AT_MOST;
        assert!(must_write(
            &at_rest,
            &deleting,
            false,
            false,
            true,
            held_since(now),
            later
        ));
    }
}
