//! Which cached versions of an object hold every write of ours, so a reconcile can
//! start from the cache instead of a fresh read.
//!
//! Resource versions are opaque: a version other than the one our write made says
//! nothing about whether it holds that write. The watch stream does: it shows one
//! object's versions in order, so once it has shown the version our write made, every
//! version it shows after holds that write too. A machine whose status we wrote before
//! Cluster API patched it (its owner references, during its first step) is then reconciled from
//! the cache, not read again at its next step.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::api::DynamicObject;

use crate::controller::objects::Uid;

/// What [`WrittenAt::unsure`] records: no resource version is empty, so no cached
/// object is current at it.
const UNSURE: &str = "";

/// How long the mark of an object shown deleted is kept at least: longer than a
/// reconcile that took the object from the cache just before its deletion can run on (a
/// plugin call's limit is 30 s), so such a reconcile still reads afresh. The marks are
/// swept at most once per this period, on a watch event or a deletion: a mark goes
/// between one and two periods after its object.
const KEEP_GONE: Duration = Duration::from_secs(120);

/// By object UID, the newest version known to hold every write of ours. Shared by the
/// reconciler (which records its writes and fresh reads) and the watch of the object's
/// kind (which moves the version on as it shows newer ones, see [`Self::watched`]).
///
/// An entry goes when its deletion completes or a fresh read finds it gone. One the
/// watch shows deleted is made unsure and kept for [`KEEP_GONE`] (see [`Self::gone`]),
/// as is a write answered after its object went: so the marks are those of the objects
/// the watch holds, plus those deleted within the last two periods of [`KEEP_GONE`].
#[derive(Clone, Default)]
pub struct WrittenAt(Arc<Mutex<Marks>>);

#[derive(Default)]
struct Marks {
    by_uid: HashMap<Uid, Mark>,
    /// When marks of deleted objects were last swept.
    swept: Option<Instant>,
}

#[derive(Default)]
struct Mark {
    /// The version our last write made or a fresh read showed; none: nothing of ours
    /// for the cache to lag behind.
    version: Option<String>,
    /// The watch has shown `version` (after its cache took it): every version it shows
    /// from now on holds our writes.
    shown: bool,
    /// The last version the watch showed. Under load its event can come before our
    /// write's answer: the write's version is then shown already.
    latest: String,
    /// When the watch showed the object deleted (or a relist stopped listing it).
    gone: Option<Instant>,
}

impl Marks {
    /// Drop the marks of objects deleted [`KEEP_GONE`] ago or more. At most one pass
    /// over the marks per period, so a burst of events or deletions costs one pass.
    fn sweep(&mut self, now: Instant) {
        if self
            .swept
            .is_some_and(|at| now.duration_since(at) < KEEP_GONE)
        {
            return;
        }
        self.swept = Some(now);
        self.by_uid
            .retain(|_, m| m.gone.is_none_or(|at| now.duration_since(at) < KEEP_GONE));
    }
}

impl WrittenAt {
    fn lock(&self) -> std::sync::MutexGuard<'_, Marks> {
        self.0.lock().expect("written versions")
    }

    /// Our write of `uid`'s object made `version`, or a fresh read showed it (a read
    /// that follows our writes' answers holds them all).
    pub fn at(&self, uid: &Uid, version: String) {
        let mut marks = self.lock();
        let mark = marks.by_uid.entry(uid.clone()).or_default();
        mark.shown = !version.is_empty() && mark.latest == version;
        mark.version = Some(version);
    }

    /// A write of `uid`'s object failed, and may still have been applied: no cached
    /// object is current until the next fresh read.
    pub fn unsure(&self, uid: &Uid) {
        self.at(uid, UNSURE.to_string());
    }

    /// The watch showed `uid`'s object deleted (or a relist no longer lists it). A
    /// reconcile may already hold its last cached version: where we wrote, that version
    /// is no longer current (its fresh read finds the object gone and forgets it). The
    /// mark stays for [`KEEP_GONE`], also where we never wrote, so a write of ours
    /// answered after the deletion is swept with it.
    pub fn gone(&self, uid: &Uid) {
        self.gone_at(uid, Instant::now());
    }

    fn gone_at(&self, uid: &Uid, now: Instant) {
        let mut marks = self.lock();
        let mark = marks.by_uid.entry(uid.clone()).or_default();
        if mark.version.is_some() {
            mark.version = Some(UNSURE.to_string());
        }
        mark.shown = false;
        mark.latest.clear();
        mark.gone.get_or_insert(now);
        marks.sweep(now);
    }

    pub fn forget(&self, uid: &Uid) {
        self.lock().by_uid.remove(uid);
    }

    /// The watch of the object's kind showed a change of `uid` to `version`, its cache
    /// holding it already. Call it for every change, in the stream's order, and never
    /// for a relist's objects (a relist may be served from a cache that lags).
    pub fn watched(&self, uid: &Uid, version: &str) {
        self.watched_at(uid, version, Instant::now());
    }

    fn watched_at(&self, uid: &Uid, version: &str, now: Instant) {
        let mut marks = self.lock();
        marks.sweep(now);
        // Most events are of objects already marked: no new key for those.
        if !marks.by_uid.contains_key(uid) {
            marks.by_uid.insert(uid.clone(), Mark::default());
        }
        let mark = marks.by_uid.get_mut(uid).expect("inserted above");
        mark.latest = version.to_string();
        mark.gone = None;
        if let Some(ours) = &mut mark.version
            && (mark.shown || (ours == version && !version.is_empty()))
        {
            *ours = version.to_string();
            mark.shown = true;
        }
    }

    /// `uid`'s object was written, making `version` (none: nothing differed, nothing
    /// was sent): a cached object is current from that version on (see
    /// [`Self::is_current`]).
    pub fn wrote(&self, uid: &Uid, version: Option<String>) {
        if let Some(v) = version {
            self.at(uid, v);
        }
    }

    /// A fresh read of `uid`'s object showed `version`. A read that follows our writes'
    /// answers holds them all, so a cached object at that version is current too: after
    /// another writer's change (Cluster API's owner patch, a deletion) one read is
    /// enough, not one per reconcile until our next write. So every write of the object
    /// is recorded ([`Self::wrote`], [`Self::record`]), and a failed one marked
    /// [`Self::unsure`].
    pub fn read_at(&self, uid: &Uid, version: Option<String>) {
        self.wrote(uid, version);
    }

    /// What a write of `obj` came to: the version it made (none: nothing differed,
    /// nothing was sent), or, when it failed, [`Self::unsure`] (a write whose answer was
    /// lost may still have been applied). Of an object without a UID nothing is kept.
    pub fn record<E>(&self, obj: &DynamicObject, write: &Result<Option<String>, E>) {
        if let Some(uid) = Uid::of(obj) {
            self.record_uid(&uid, write);
        }
    }

    fn record_uid<E>(&self, uid: &Uid, write: &Result<Option<String>, E>) {
        match write {
            Ok(version) => self.wrote(uid, version.clone()),
            Err(_) => self.unsure(uid),
        }
    }

    /// Whether a cached object at `version` holds every write of ours: it is at the
    /// version recorded (or moved on to by the watch), or we have not written it at all
    /// (nothing of ours for the cache to lag behind).
    pub fn is_current(&self, uid: &Uid, version: Option<&str>) -> bool {
        version.is_some()
            && match self
                .lock()
                .by_uid
                .get(uid)
                .and_then(|m| m.version.as_deref())
            {
                Some(ours) => !ours.is_empty() && Some(ours) == version,
                None => true,
            }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_the_watch_shows_our_write_every_later_version_is_current() {
        let w = WrittenAt::default();
        w.at(&"a".into(), "7".into());
        // Someone else's write, before the watch showed ours: it may not hold ours.
        w.watched(&"a".into(), "6");
        w.watched(&"a".into(), "8");
        assert!(!w.is_current(&"a".into(), Some("8")));
        w.at(&"a".into(), "9".into());
        w.watched(&"a".into(), "9");
        assert!(w.is_current(&"a".into(), Some("9")));
        // Cluster API patches after our write: the cache's next version holds it.
        w.watched(&"a".into(), "12");
        assert!(w.is_current(&"a".into(), Some("12")));
        // A reconcile holding the version before the newest reads afresh.
        assert!(!w.is_current(&"a".into(), Some("9")));
        // Our next write starts over until the watch shows it.
        w.at(&"a".into(), "13".into());
        w.watched(&"a".into(), "14");
        assert!(!w.is_current(&"a".into(), Some("14")));
        // A failed write is never shown: nothing is current until a fresh read.
        w.unsure(&"a".into());
        w.watched(&"a".into(), "");
        w.watched(&"a".into(), "15");
        assert!(!w.is_current(&"a".into(), Some("15")));
        assert!(!w.is_current(&"a".into(), Some("")));
        // Objects we never wrote are current as cached.
        w.watched(&"b".into(), "3");
        assert!(w.is_current(&"b".into(), Some("3")));
    }

    #[test]
    fn a_write_whose_event_came_before_its_answer_is_shown_already() {
        let w = WrittenAt::default();
        w.watched(&"a".into(), "4");
        w.at(&"a".into(), "4".into());
        w.watched(&"a".into(), "5");
        assert!(w.is_current(&"a".into(), Some("5")));
        // A fresh read of the version the watch showed last: shown too.
        w.at(&"a".into(), "6".into());
        w.watched(&"a".into(), "7");
        w.at(&"a".into(), "7".into());
        w.watched(&"a".into(), "8");
        assert!(w.is_current(&"a".into(), Some("8")));
        // Not when the watch has shown a newer one since: a write answered late says
        // only that 9 holds it, and 10 is not known to come after 9.
        w.at(&"a".into(), "9".into());
        w.watched(&"a".into(), "10");
        w.at(&"a".into(), "9".into());
        assert!(!w.is_current(&"a".into(), Some("10")));
    }

    #[test]
    fn a_deleted_object_we_wrote_is_not_current_and_its_mark_goes_in_time() {
        let w = WrittenAt::default();
        let t0 = Instant::now();
        let keys = |w: &WrittenAt| {
            let mut k: Vec<Uid> = w.lock().by_uid.keys().cloned().collect();
            k.sort();
            k
        };
        w.at(&"a".into(), "4".into());
        w.watched_at(&"a".into(), "4", t0);
        w.watched_at(&"a".into(), "5", t0);
        w.gone_at(&"a".into(), t0);
        // A reconcile that took version 5 from the cache before the delete reads fresh.
        assert!(!w.is_current(&"a".into(), Some("5")));
        // Never written: still current as cached, marked only to be swept.
        w.watched_at(&"b".into(), "3", t0);
        w.gone_at(&"b".into(), t0);
        assert!(w.is_current(&"b".into(), Some("3")));
        // A write of ours answered after the deletion keeps the deletion's time.
        w.gone_at(&"c".into(), t0);
        w.at(&"c".into(), "9".into());
        // Shown again after a relist called it gone: alive, never swept.
        w.gone_at(&"d".into(), t0);
        w.watched_at(&"d".into(), "1", t0);
        // Gone a moment later: younger than the period at the next sweep.
        let soon = t0 + Duration::from_secs(1);
        w.gone_at(&"e".into(), soon);
        // One sweep per period: just before it is up, nothing goes.
        w.watched_at(&"d".into(), "2", t0 + KEEP_GONE - Duration::from_millis(1));
        assert_eq!(keys(&w), ["a", "b", "c", "d", "e"]);
        let later = t0 + KEEP_GONE;
        w.watched_at(&"d".into(), "3", later);
        assert_eq!(keys(&w), ["d", "e"]);
        // Gone again later does not move its time on; the next sweep is a period on.
        w.gone_at(&"e".into(), soon + KEEP_GONE);
        assert_eq!(keys(&w), ["d", "e"]);
        w.gone_at(&"f".into(), later + KEEP_GONE);
        assert_eq!(keys(&w), ["d", "f"]);
    }

    #[test]
    fn a_cache_is_current_unless_it_lags_behind_our_last_write() {
        let w = WrittenAt::default();
        // Never written by us: nothing of ours to lag behind.
        assert!(w.is_current(&"a".into(), Some("5")));
        assert!(!w.is_current(&"a".into(), None));
        w.wrote(&"a".into(), Some("7".into()));
        assert!(!w.is_current(&"a".into(), Some("5")));
        assert!(w.is_current(&"a".into(), Some("7")));
        w.wrote(&"a".into(), Some("9".into()));
        assert!(!w.is_current(&"a".into(), Some("7")));
        w.forget(&"a".into());
        assert!(w.is_current(&"a".into(), Some("7")));
    }

    #[test]
    fn a_fresh_read_makes_its_version_current() {
        let w = WrittenAt::default();
        w.wrote(&"a".into(), Some("7".into()));
        // Someone else wrote after us: the cache at 8 may or may not hold our write.
        assert!(!w.is_current(&"a".into(), Some("8")));
        w.read_at(&"a".into(), Some("8".into()));
        assert!(w.is_current(&"a".into(), Some("8")));
        assert!(!w.is_current(&"a".into(), Some("7")));
        // A write that sent nothing changes nothing; one that made 9 makes 9 current.
        w.record_uid(&"a".into(), &Ok::<_, ()>(None));
        assert!(w.is_current(&"a".into(), Some("8")));
        w.record_uid(&"a".into(), &Ok::<_, ()>(Some("9".into())));
        assert!(w.is_current(&"a".into(), Some("9")));
        // A write whose answer was lost: the cache at 9 may lack it, and so may the
        // cache of an object we never wrote before.
        w.record_uid(&"a".into(), &Err::<Option<String>, _>(()));
        assert!(!w.is_current(&"a".into(), Some("9")));
        w.record_uid(&"b".into(), &Err::<Option<String>, _>(()));
        assert!(!w.is_current(&"b".into(), Some("1")));
        w.read_at(&"a".into(), Some("10".into()));
        assert!(w.is_current(&"a".into(), Some("10")));
    }
}
