//! Status writes that may wait: a plugin step whose state is not `durable` (it can be
//! recomputed if lost, e.g. "task running") is kept in memory and written with a
//! later step, so a machine's lifecycle costs a few status patches rather than one per
//! step. What users and Cluster API read still moves at once: readiness, provisioning,
//! addresses, conditions turning True or False, events and a new generation are written
//! when they change; a step's phase and message at most `requeue::HOLD_AT_MOST` late (by the
//! next reconcile past it); see `rule::must_write`.
//!
//! A held status is only ever continued from while the API server still stores the
//! plugin state it was derived from; anyone else's status write (another replica, a
//! restore) makes it void, and a restart simply loses it: the plugin recomputes.
mod rule;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use crate::controller::objects::Uid;
use crate::status::InfraMachineStatus;
use rule::{Waited, a_new_step, must_write};

/// A status the API server does not have yet.
struct Held {
    /// The plugin state the API server stored when this was derived.
    stored_state: Option<String>,
    status: InfraMachineStatus,
    /// When the first step held since the last write was.
    since: Instant,
    /// When the held status's step (phase and condition reasons) first showed: a phase
    /// is written once it has lasted `requeue::HOLD_AT_MOST`, not as soon as the wait before
    /// it has (minutes in the infrastructure's queue, then quick steps to ready).
    step_since: Instant,
}

/// Unwritten machine statuses, by object UID. At most one per live object: an entry
/// goes when it is written, voided, or its object's deletion completes. What a write
/// made is for the cache's marks to know (`written::WrittenAt`), not for this.
#[derive(Default)]
pub struct Coalescer {
    held: Mutex<HashMap<Uid, Held>>,
}

impl Coalescer {
    /// The status to continue from for object `uid` whose stored status is `stored`:
    /// the held one if it continues what is stored, else the stored one (and a void
    /// entry is dropped).
    pub fn current(&self, uid: &Uid, stored: &InfraMachineStatus) -> InfraMachineStatus {
        let mut held = self.held.lock().expect("coalescer");
        match held.get(uid) {
            Some(h) if h.stored_state == stored.progress.plugin_state => h.status.clone(),
            Some(_) => {
                held.remove(uid);
                stored.clone()
            }
            None => stored.clone(),
        }
    }

    /// Whether `next` (derived from the stored status `stored`) must be written now;
    /// if not, it is held. The caller writes when told to, then calls [`Self::written`].
    pub fn write_now(
        &self,
        uid: &Uid,
        stored: &InfraMachineStatus,
        next: &InfraMachineStatus,
        durable: bool,
        has_events: bool,
        deleting: bool,
    ) -> bool {
        let now = Instant::now();
        let mut held = self.held.lock().expect("coalescer");
        let prev = held
            .get(uid)
            .filter(|h| h.stored_state == stored.progress.plugin_state);
        let since = prev.map(|h| h.since);
        let step_since = prev
            .filter(|h| !a_new_step(&h.status, next))
            .map(|h| h.step_since);
        let waited = Waited { since, step_since };
        if must_write(stored, next, durable, has_events, deleting, waited, now) {
            return true;
        }
        held.insert(
            uid.clone(),
            Held {
                stored_state: stored.progress.plugin_state.clone(),
                status: next.clone(),
                since: since.unwrap_or(now),
                step_since: step_since.unwrap_or(now),
            },
        );
        false
    }

    /// `uid`'s status was written: nothing is held for it any more.
    pub fn written(&self, uid: &Uid) {
        self.held.lock().expect("coalescer").remove(uid);
    }

    /// `uid`'s object is gone: nothing is kept for it.
    pub fn forget(&self, uid: &Uid) {
        self.held.lock().expect("coalescer").remove(uid);
    }

    /// How many statuses are held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.held.lock().expect("coalescer").len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::rule::tests::{held_since, step, stored};
    use super::*;
    use crate::controller::schedule::requeue::{DETAIL_HOLD_AT_MOST, HOLD_AT_MOST};

    #[test]
    fn a_non_durable_step_is_held_and_continued_from() {
        let c = Coalescer::default();
        let at_rest = stored("id=100");
        let next = step(&at_rest, "id=100,task=T");
        assert!(!c.write_now(&"a".into(), &at_rest, &next, false, false, false));
        assert_eq!(c.current(&"a".into(), &at_rest), next);
        // A durable step is written, and nothing stays held once it is.
        let durable = step(&next, "id=101");
        assert!(c.write_now(&"a".into(), &at_rest, &durable, true, false, false));
        c.written(&"a".into());
        assert_eq!(c.len(), 0);
        assert_eq!(c.current(&"a".into(), &at_rest), at_rest);
    }

    #[test]
    fn a_held_status_is_void_once_someone_else_stored_another_state() {
        let c = Coalescer::default();
        let at_rest = stored("id=100");
        let next = step(&at_rest, "id=100,task=T");
        c.write_now(&"a".into(), &at_rest, &next, false, false, false);
        let elsewhere = stored("id=200");
        assert_eq!(c.current(&"a".into(), &elsewhere), elsewhere);
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn a_new_phase_waits_from_when_it_showed_not_from_the_first_step_held() {
        let c = Coalescer::default();
        let at_rest = stored("s");
        let mut waiting = step(&at_rest, "t1");
        waiting.progress.phase = Some("Waiting".into());
        let mut stored_waiting = at_rest.clone();
        stored_waiting.progress.phase = Some("Waiting".into());
        assert!(!c.write_now(&"a".into(), &stored_waiting, &waiting, false, false, false));
        std::thread::sleep(Duration::from_millis(2));
        let mut next_phase = step(&at_rest, "t2");
        next_phase.progress.phase = Some("Configuring".into());
        assert!(!c.write_now(
            &"a".into(),
            &stored_waiting,
            &next_phase,
            false,
            false,
            false
        ));
        let (since, step_since) = {
            let held = c.held.lock().unwrap();
            (held["a"].since, held["a"].step_since)
        };
        assert!(
            step_since > since,
            "the new phase's clock starts when it shows"
        );
        // Long after the first step held, but not after the new phase showed: held.
        let later = since + HOLD_AT_MOST;
        let waited = Waited {
            since: Some(since),
            step_since: None,
        };
        assert!(!must_write(
            &stored_waiting,
            &next_phase,
            false,
            false,
            false,
            waited,
            later
        ));
        let shown = Waited {
            since: Some(since),
            step_since: Some(step_since),
        };
        assert!(must_write(
            &stored_waiting,
            &next_phase,
            false,
            false,
            false,
            shown,
            step_since + HOLD_AT_MOST
        ));
    }

    #[test]
    fn nothing_users_see_is_held_longer_than_the_limit() {
        let c = Coalescer::default();
        let at_rest = stored("s");
        let first = step(&at_rest, "t1");
        assert!(!c.write_now(&"a".into(), &at_rest, &first, false, false, false));
        let now = Instant::now();
        let since = c.held.lock().unwrap()["a"].since;
        let mut shown = first.clone();
        shown.progress.phase = Some("PoweringOn".into());
        assert!(!must_write(
            &at_rest,
            &shown,
            false,
            false,
            false,
            held_since(since),
            now
        ));
        let later = since + HOLD_AT_MOST;
        assert!(must_write(
            &at_rest,
            &shown,
            false,
            false,
            false,
            held_since(since),
            later
        ));
        // A message alone (a long wait in the same phase) waits longer.
        let mut told = first.clone();
        told.progress
            .details
            .insert("task".into(), "running".into());
        assert!(!must_write(
            &at_rest,
            &told,
            false,
            false,
            false,
            held_since(since),
            later
        ));
        let much_later = since + DETAIL_HOLD_AT_MOST;
        assert!(must_write(
            &at_rest,
            &told,
            false,
            false,
            false,
            held_since(since),
            much_later
        ));
        // So does a deleting object's new phase.
        assert!(!must_write(
            &at_rest,
            &shown,
            false,
            false,
            true,
            held_since(since),
            later
        ));
        assert!(must_write(
            &at_rest,
            &shown,
            false,
            false,
            true,
            held_since(since),
            much_later
        ));
        // The plugin's state alone is not worth a write, however long it waits.
        assert!(!must_write(
            &at_rest,
            &first,
            false,
            false,
            false,
            held_since(since),
            much_later
        ));
    }
}
