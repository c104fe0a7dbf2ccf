//! When a reconcile comes back: every delay the controllers use, in one place.
//!
//! A plugin's step says when to call again (`requeue-after-ms`) and what it waits for
//! (`waits`, see `waits`); the host adds what only it knows (claims binding, the
//! resync of provisioned objects, backoff after failures) and floors what plugins ask.
use std::time::Duration;

use kube::runtime::controller::Action;

use crate::controller::ipam::Claimed;
use hyperplug_runtime::bindings::machine::MachineStatus;
use hyperplug_runtime::bindings::types::Progress;

/// The soonest a plugin's hint brings an object back (`requeue-after-ms: 0` included).
pub const FLOOR: Duration = Duration::from_millis(50);
/// After claims were written: the IPAM provider binds them in a moment, and claims are
/// not watched.
pub const CLAIMS_WRITTEN: Duration = Duration::from_millis(250);
/// While a claim waits for its address.
pub const CLAIMS_PENDING: Duration = Duration::from_secs(1);
/// A delete step that named no time.
pub const DELETE_STEP: Duration = Duration::from_secs(2);
/// A deleting InfraCluster whose pools still hold addresses (`ipam::addresses_left`):
/// looked at this often, for at most [`POOLS_DRAIN_AT_MOST`] after its deletion began
/// (addresses of machines outside the cluster must not hold its deletion forever).
pub const POOLS_DRAIN: Duration = Duration::from_secs(1);
pub const POOLS_DRAIN_AT_MOST: Duration = Duration::from_secs(60);
/// A reconcile whose tenant (namespace) already has its whole share of the plugin slots
/// in use or waited for (`CallError::TenantAtShare`): it gives its worker back rather
/// than wait for a slot holding it, and looks again this soon. Short, as a slot of the
/// tenant frees as soon as one of its calls ends and nothing wakes the object then; a
/// tenant whose calls hang costs a cheap look per waiting object per period meanwhile
/// (no API read, no status write).
pub const TENANT_AT_SHARE: Duration = Duration::from_millis(250);
/// A machine whose cluster infrastructure is not there yet.
pub const CLUSTER_INFRASTRUCTURE: Duration = Duration::from_secs(10);
/// A template whose description failed.
pub const TEMPLATE_RETRY: Duration = Duration::from_secs(60);
/// Backoff after a failed call: from this, doubling, up to [`BACKOFF_MAX`].
pub const BACKOFF_BASE: Duration = Duration::from_millis(500);
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// How often an endpoint's observer looks while objects still provisioning wait on it
/// (see `waits::StepSeen::watching`): a task's end is noticed an eighth of a second late
/// on average, for one call per tick per endpoint (however many machines wait on it).
pub const OBSERVE_EVERY: Duration = Duration::from_millis(250);
/// How often while only provisioned objects are watched, and how often their keys are
/// asked about meanwhile (drift shows within this and a reconcile).
pub const OBSERVE_IDLE: Duration = Duration::from_secs(5);
/// How often a provisioned object nothing watches is checked for drift, and a call that
/// failed for good looks whether its credentials changed (`--resync-seconds`).
pub const RESYNC: Duration = Duration::from_secs(300);
/// A ready machine whose infrastructure the observer watches (it named waits) is
/// described when the observer reports a change, not every resync period; this is the
/// fallback should the observer fail for that long.
pub const WATCHED_RESYNC: Duration = Duration::from_secs(3600);
/// After an observe call failed (its waits also have their requeue as fallback).
pub const OBSERVE_AFTER_FAILURE: Duration = Duration::from_secs(5);
/// How recent an endpoint's last successful observation must be for a due requeue of
/// its waits to be put off (twice [`OBSERVE_IDLE`]; see `waits`).
pub const OBSERVED_LATELY: Duration = Duration::from_secs(10);
/// How often held wakes of provisioned objects are looked at; one goes on each time
/// even when busy (see `priority`).
pub const RELEASE_EVERY: Duration = Duration::from_millis(50);
/// How often an object whose ownership does not verify, or that names infrastructure
/// without an adoption grant, is looked at again (a key may be copied in, the
/// annotation fixed or a grant given without the object changing).
pub const RECHECK: Duration = Duration::from_secs(60);
/// Past the time the ownership keys may be re-read, when an unverified object's sooner
/// look is due (see `ownership::Ownership::Unproven`).
pub const RECHECK_AFTER_KEYS_REFRESH: Duration = Duration::from_millis(200);
/// The longest a machine's new phase or condition reason stays unwritten, counted from
/// the first step held (see `coalesce`).
pub const HOLD_AT_MOST: Duration = Duration::from_secs(30);
/// The longest anything else users see of a machine (a step's message, its details)
/// stays unwritten: a machine waiting minutes in its infrastructure's queue shows the
/// phase it waits in, and a wait that does not end (the infrastructure refusing a step
/// for hours) shows why within this.
pub const DETAIL_HOLD_AT_MOST: Duration = Duration::from_secs(300);

/// A plugin's hint, floored.
pub fn hinted(ms: u64) -> Action {
    Action::requeue(Duration::from_millis(ms).max(FLOOR))
}

/// After a machine's create or describe: the plugin's hint first (with waits, a
/// fallback: the observer wakes it sooner); soon while claims bind; once provisioned,
/// at the resync period (drift), or at [`WATCHED_RESYNC`] when ready and watched; else
/// on the next change or when a wait is over.
pub fn after_machine_step(
    s: &MachineStatus,
    claimed: Claimed,
    provisioned: bool,
    resync: Duration,
) -> Action {
    match s.progress.requeue_after_ms {
        Some(ms) => hinted(ms),
        None if claimed.written => Action::requeue(CLAIMS_WRITTEN),
        None if claimed.pending => Action::requeue(CLAIMS_PENDING),
        None if s.ready && !s.progress.waits.is_empty() => {
            Action::requeue(WATCHED_RESYNC.max(resync))
        }
        None if provisioned => Action::requeue(resync),
        None => Action::await_change(),
    }
}

/// After a delete step that is not done yet.
pub fn after_delete_step(p: &Progress) -> Action {
    match p.requeue_after_ms {
        Some(ms) => hinted(ms),
        None if !p.waits.is_empty() => Action::await_change(),
        None => Action::requeue(DELETE_STEP),
    }
}

/// After an InfraCluster's reconcile: the plugin's hint, else the resync.
pub fn after_cluster_step(p: &Progress, resync: Duration) -> Action {
    match p.requeue_after_ms {
        Some(ms) => hinted(ms),
        None => Action::requeue(resync),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyperplug_runtime::bindings::types::Wait;

    fn running() -> MachineStatus {
        MachineStatus {
            progress: Progress {
                state: "{}".into(),
                phase: "Ready".into(),
                message: "running".into(),
                requeue_after_ms: None,
                waits: vec![],
                durable: true,
            },
            ready: true,
            provider_id: None,
            addresses: vec![],
            failure_domain: None,
            address_requests: vec![],
            needs_bootstrap: false,
            drift: None,
            details: vec![],
            plugin_status: None,
        }
    }

    #[test]
    fn the_next_reconcile_follows_hints_then_claims_then_the_resync() {
        let resync = Duration::from_secs(300);
        let mut s = running();
        s.progress.requeue_after_ms = Some(0);
        assert_eq!(
            after_machine_step(&s, Claimed::default(), false, resync),
            Action::requeue(FLOOR)
        );
        s.progress.requeue_after_ms = None;
        let written = Claimed {
            written: true,
            pending: true,
        };
        assert_eq!(
            after_machine_step(&s, written, false, resync),
            Action::requeue(CLAIMS_WRITTEN)
        );
        assert_eq!(
            after_machine_step(&s, Claimed::default(), true, resync),
            Action::requeue(resync)
        );
        assert_eq!(
            after_machine_step(&s, Claimed::default(), false, resync),
            Action::await_change()
        );
    }

    #[test]
    fn a_ready_machine_the_observer_watches_is_not_described_every_resync() {
        let resync = Duration::from_secs(300);
        let mut s = running();
        s.ready = true;
        assert_eq!(
            after_machine_step(&s, Claimed::default(), true, resync),
            Action::requeue(resync)
        );
        s.progress.waits.push(Wait {
            endpoint: "https://e".into(),
            key: "vm:101@pve1#hp-u".into(),
        });
        assert_eq!(
            after_machine_step(&s, Claimed::default(), true, resync),
            Action::requeue(WATCHED_RESYNC)
        );
    }

    #[test]
    fn a_delete_step_waiting_on_its_observer_needs_no_timer() {
        let mut p = running().progress;
        assert_eq!(after_delete_step(&p), Action::requeue(DELETE_STEP));
        p.waits.push(Wait {
            endpoint: "https://e".into(),
            key: "k".into(),
        });
        assert_eq!(after_delete_step(&p), Action::await_change());
        p.requeue_after_ms = Some(15_000);
        assert_eq!(
            after_delete_step(&p),
            Action::requeue(Duration::from_secs(15))
        );
    }
}
