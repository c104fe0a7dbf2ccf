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
    waiting: VecDeque<(Arc<str>, oneshot::Sender<()>)>,
}

impl State {
    fn held(&self, key: &str) -> usize {
        self.held.get(key).copied().unwrap_or(0)
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
/// took it, the slot goes back.
struct Pending {
    rx: Option<oneshot::Receiver<()>>,
    slots: Arc<FairSlots>,
    key: Arc<str>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take()
            && rx.try_recv().is_ok()
        {
            self.slots.release(&self.key);
        }
    }
}

impl FairSlots {
    pub fn new(total: usize) -> Arc<FairSlots> {
        let total = total.max(1);
        Arc::new(FairSlots {
            state: Mutex::new(State {
                free: total,
                ..State::default()
            }),
            per_key: per_key(total),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for a call of `key`, once the rules above give it one.
    pub async fn acquire(self: &Arc<Self>, key: &str) -> Slot {
        let key: Arc<str> = Arc::from(key);
        let rx = {
            let mut st = self.lock();
            // Taken at once only when nobody waits who would come first.
            if st.free > 0 && st.held(&key) < self.per_key && st.waiting.is_empty() {
                st.take(&key);
                return Slot {
                    slots: self.clone(),
                    key,
                };
            }
            let (tx, rx) = oneshot::channel();
            st.waiting.push_back((key.clone(), tx));
            // Room may be free for this key though others wait at their cap.
            self.dispatch(&mut st);
            rx
        };
        let mut pending = Pending {
            rx: Some(rx),
            slots: self.clone(),
            key: key.clone(),
        };
        let granted = pending.rx.as_mut().expect("set above").await;
        pending.rx = None;
        granted.expect("a waiter's sender is kept until it is granted");
        Slot {
            slots: self.clone(),
            key,
        }
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
                .filter(|(_, (k, _))| st.held(k) < self.per_key)
                .min_by_key(|(i, (k, _))| (st.held(k), *i))
                .map(|(i, _)| i);
            let Some(i) = pick else { return };
            let (key, tx) = st.waiting.remove(i).expect("picked from the queue");
            st.take(&key);
            if tx.send(()).is_err() {
                st.give_back(&key);
            }
        }
    }

    #[cfg(test)]
    fn held(&self, key: &str) -> usize {
        self.lock().held(key)
    }
}

/// Most slots one key holds: all but a quarter, at least one.
fn per_key(total: usize) -> usize {
    (total - total / 4).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_key_keeps_a_quarter_of_the_slots_for_others() {
        assert_eq!(per_key(16), 12);
        assert_eq!(per_key(4), 3);
        assert_eq!(per_key(1), 1);
    }

    #[tokio::test]
    async fn a_slow_tenant_leaves_room_and_a_freed_slot_goes_to_the_one_holding_fewest() {
        let slots = FairSlots::new(4);
        // The slow tenant takes what it may (3 of 4) and queues a fourth call.
        let mut slow = Vec::new();
        for _ in 0..3 {
            slow.push(slots.acquire("slow").await);
        }
        let queued = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire("slow").await }
        });
        tokio::task::yield_now().await;
        // Another tenant starts at once on the slot kept free.
        let fast = slots.acquire("fast").await;
        assert_eq!((slots.held("slow"), slots.held("fast")), (3, 1));
        // A second call of the fast tenant waits; when a slow call ends, the freed slot
        // goes to the fast tenant (holding fewer), not to the slow call queued first.
        let fast_again = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire("fast").await }
        });
        tokio::task::yield_now().await;
        drop(slow.pop());
        let fast_again = fast_again.await.unwrap();
        assert_eq!((slots.held("slow"), slots.held("fast")), (2, 2));
        assert!(!queued.is_finished());
        drop((fast, fast_again));
        let last = queued.await.unwrap();
        assert_eq!(slots.held("slow"), 3);
        drop((last, slow));
        assert_eq!(slots.lock().free, 4);
    }

    #[tokio::test]
    async fn a_caller_that_gives_up_leaves_no_slot_behind() {
        let slots = FairSlots::new(1);
        let held = slots.acquire("a").await;
        let waiting = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire("b").await }
        });
        tokio::task::yield_now().await;
        waiting.abort();
        let _ = waiting.await;
        drop(held);
        assert_eq!(slots.lock().free, 1);
        let _again = slots.acquire("c").await;
        assert_eq!(slots.held("c"), 1);
    }
}
