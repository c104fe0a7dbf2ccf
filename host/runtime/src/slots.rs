//! The plugin slots (`--plugin-concurrency`), shared fairly between tenants.
//!
//! A call holds a slot for as long as it runs (up to `--plugin-timeout-ms`), so one
//! tenant whose endpoint answers slowly would hold every slot and make every other
//! tenant's creates and deletes wait. Two rules keep that from happening, keyed by the
//! call's tenant (its object's namespace; for calls about no object, its endpoint):
//!
//! * one key holds at most all slots but a quarter (12 of 16), so a tenant arriving
//!   while another holds the rest starts at once;
//! * a freed slot goes to the waiting key that holds the fewest, not to the longest
//!   waiting call: a tenant with a few calls is not queued behind one with hundreds.
//!
//! A third keeps the callers fair too. A call that waits here keeps its caller waiting
//! with it, and the controllers' callers are reconcile workers (`--reconcile-concurrency`
//! per kind): a tenant with more machines waiting than there are workers would hold all
//! of them while its calls queue, and another tenant's reconcile would never get as far
//! as asking for a slot. So a key's calls holding and waiting for slots together never
//! outnumber its share: a call past that is refused at once ([`AtShare`]) and its caller
//! comes back later, its worker free meanwhile ([`FairSlots::at_share`] lets a caller
//! find that out before doing any work for the call).
//!
//! Otherwise it is a plain semaphore: with one tenant, or room for all, nobody waits.
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// The slots, and who holds and waits for them.
pub struct FairSlots {
    state: Mutex<State>,
    /// Most slots one key holds.
    per_key: usize,
}

#[derive(Default)]
struct State {
    free: usize,
    held: HashMap<Arc<str>, usize>,
    /// In arrival order; a freed slot goes to the first of the keys holding the fewest.
    waiting: VecDeque<Waiter>,
    /// The next waiter's id.
    next_id: u64,
}

struct Waiter {
    /// Tells it from the key's other waiters when it gives up (see [`Pending`]).
    id: u64,
    key: Arc<str>,
    tx: oneshot::Sender<()>,
}

impl State {
    fn held(&self, key: &str) -> usize {
        self.held.get(key).copied().unwrap_or(0)
    }

    /// The key's calls holding or waiting for a slot.
    fn in_line(&self, key: &str) -> usize {
        self.held(key) + self.waiting.iter().filter(|w| &*w.key == key).count()
    }

    fn take(&mut self, key: &Arc<str>) {
        self.free -= 1;
        *self.held.entry(key.clone()).or_default() += 1;
    }

    fn give_back(&mut self, key: &str) {
        self.free += 1;
        if let Some(n) = self.held.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                self.held.remove(key);
            }
        }
    }
}

/// A slot held by a call: given back when dropped.
pub struct Slot {
    slots: Arc<FairSlots>,
    key: Arc<str>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.release(&self.key);
    }
}

/// A call waiting for a slot: if it is dropped after its slot was granted but before it
/// took it, the slot goes back; before, it leaves the queue (a waiter that gave up must
/// not count against its key's share).
struct Pending {
    rx: Option<oneshot::Receiver<()>>,
    id: u64,
    slots: Arc<FairSlots>,
    key: Arc<str>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else {
            return;
        };
        // Grants are sent under the lock: with it held, either this waiter's grant was
        // sent or it is still queued.
        let mut st = self.slots.lock();
        if rx.try_recv().is_ok() {
            st.give_back(&self.key);
            self.slots.dispatch(&mut st);
        } else {
            st.waiting.retain(|w| w.id != self.id);
        }
    }
}

/// A call refused a slot: its key's calls already hold or wait for its whole share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtShare {
    /// Slots the key held when it was refused.
    pub held: usize,
    /// Its share.
    pub share: usize,
}

impl FairSlots {
    pub fn new(total: usize) -> Arc<FairSlots> {
        let total = total.max(1);
        Arc::new(FairSlots {
            state: Mutex::new(State {
                free: total,
                ..State::default()
            }),
            per_key: tenant_share(total),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a call of `key` would be refused now ([`AtShare`]): its calls hold or wait
    /// for its whole share. A caller asks before it does the work a call needs (reads of
    /// the API server), and a key under its share may still wait its turn.
    pub fn at_share(&self, key: &str) -> bool {
        self.lock().in_line(key) >= self.per_key
    }

    /// A slot for a call of `key`, once the rules above give it one; refused at once
    /// when the key's calls already hold or wait for its whole share.
    pub async fn acquire(self: &Arc<Self>, key: &str) -> Result<Slot, AtShare> {
        let key: Arc<str> = Arc::from(key);
        let (rx, id) = {
            let mut st = self.lock();
            // Taken at once only when nobody waits who would come first.
            if st.free > 0 && st.held(&key) < self.per_key && st.waiting.is_empty() {
                st.take(&key);
                return Ok(Slot {
                    slots: self.clone(),
                    key,
                });
            }
            if st.in_line(&key) >= self.per_key {
                return Err(AtShare {
                    held: st.held(&key),
                    share: self.per_key,
                });
            }
            let (tx, rx) = oneshot::channel();
            let id = st.next_id;
            st.next_id += 1;
            st.waiting.push_back(Waiter {
                id,
                key: key.clone(),
                tx,
            });
            // Room may be free for this key though others wait at their cap.
            self.dispatch(&mut st);
            (rx, id)
        };
        let mut pending = Pending {
            rx: Some(rx),
            id,
            slots: self.clone(),
            key: key.clone(),
        };
        let granted = pending.rx.as_mut().expect("set above").await;
        pending.rx = None;
        granted.expect("a waiter's sender is kept until it is granted");
        Ok(Slot {
            slots: self.clone(),
            key,
        })
    }

    fn release(&self, key: &str) {
        let mut st = self.lock();
        st.give_back(key);
        self.dispatch(&mut st);
    }

    /// Hand free slots to waiting calls: each to the first waiter of the key holding the
    /// fewest, among keys under their cap. A waiter that gave up is skipped.
    fn dispatch(&self, st: &mut State) {
        while st.free > 0 {
            let pick = st
                .waiting
                .iter()
                .enumerate()
                .filter(|(_, w)| st.held(&w.key) < self.per_key)
                .min_by_key(|(i, w)| (st.held(&w.key), *i))
                .map(|(i, _)| i);
            let Some(i) = pick else { return };
            let w = st.waiting.remove(i).expect("picked from the queue");
            st.take(&w.key);
            if w.tx.send(()).is_err() {
                st.give_back(&w.key);
            }
        }
    }

    #[cfg(test)]
    fn held(&self, key: &str) -> usize {
        self.lock().held(key)
    }
}

/// Most of `total` slots one key (tenant) holds: all but a quarter, at least one. Public
/// so that what measures the sharing (the benchmark's tenants run) reads it from here.
pub fn tenant_share(total: usize) -> usize {
    (total - total / 4).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_key_keeps_a_quarter_of_the_slots_for_others() {
        assert_eq!(tenant_share(16), 12);
        assert_eq!(tenant_share(4), 3);
        assert_eq!(tenant_share(1), 1);
    }

    #[tokio::test]
    async fn a_slow_tenant_leaves_room_and_a_freed_slot_goes_to_the_one_holding_fewest() {
        let slots = FairSlots::new(4);
        // The slow tenant takes what it may (3 of 4); a fourth call is refused at once,
        // not queued: its caller is free to do other work meanwhile.
        let mut slow = Vec::new();
        for _ in 0..3 {
            slow.push(slots.acquire("slow").await.unwrap());
        }
        assert!(slots.at_share("slow"));
        assert_eq!(
            slots.acquire("slow").await.err(),
            Some(AtShare { held: 3, share: 3 })
        );
        // Another tenant starts at once on the slot kept free.
        assert!(!slots.at_share("fast"));
        let fast = slots.acquire("fast").await.unwrap();
        assert_eq!((slots.held("slow"), slots.held("fast")), (3, 1));
        // A second call of the fast tenant, under its share, waits; when a slow call ends
        // the freed slot goes to it.
        let fast_again = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire("fast").await.unwrap() }
        });
        tokio::task::yield_now().await;
        drop(slow.pop());
        let fast_again = fast_again.await.unwrap();
        assert_eq!((slots.held("slow"), slots.held("fast")), (2, 2));
        // Under its share again, the slow tenant may wait; a tenant holding fewer that
        // comes later is served first.
        assert!(!slots.at_share("slow"));
        let queued = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire("slow").await.unwrap() }
        });
        tokio::task::yield_now().await;
        let other = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire("other").await.unwrap() }
        });
        tokio::task::yield_now().await;
        drop(fast);
        let other = other.await.unwrap();
        assert_eq!(slots.held("other"), 1);
        assert!(!queued.is_finished());
        drop((fast_again, other));
        let last = queued.await.unwrap();
        assert_eq!(slots.held("slow"), 3);
        drop((last, slow));
        assert_eq!(slots.lock().free, 4);
    }

    #[tokio::test]
    async fn calls_waiting_count_against_their_keys_share() {
        let slots = FairSlots::new(4);
        let a = [
            slots.acquire("a").await.unwrap(),
            slots.acquire("a").await.unwrap(),
        ];
        let b = [
            slots.acquire("b").await.unwrap(),
            slots.acquire("b").await.unwrap(),
        ];
        // Every slot is taken: a third call of `a` waits, and with it `a` is at its share
        // of 3 though it holds 2, so a fourth is refused rather than queued.
        let waiting = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire("a").await.unwrap() }
        });
        tokio::task::yield_now().await;
        assert!(slots.at_share("a"));
        assert_eq!(
            slots.acquire("a").await.err(),
            Some(AtShare { held: 2, share: 3 })
        );
        drop(b);
        let third = waiting.await.unwrap();
        assert_eq!(slots.held("a"), 3);
        drop((a, third));
        assert_eq!(slots.lock().free, 4);
    }

    #[tokio::test]
    async fn a_caller_that_gives_up_leaves_no_slot_behind() {
        let slots = FairSlots::new(1);
        let held = slots.acquire("a").await.unwrap();
        let waiting = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire("b").await.unwrap() }
        });
        tokio::task::yield_now().await;
        assert!(slots.at_share("b"));
        waiting.abort();
        let _ = waiting.await;
        // Nor a place in the queue that would count against its key's share.
        assert!(slots.lock().waiting.is_empty());
        assert!(!slots.at_share("b"));
        drop(held);
        assert_eq!(slots.lock().free, 1);
        let _again = slots.acquire("c").await.unwrap();
        assert_eq!(slots.held("c"), 1);
    }
}
