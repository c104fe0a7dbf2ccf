//! Which woken objects go first: those still being provisioned (or deleted) before
//! provisioned ones.
//!
//! The observer wakes every object whose wait is over at once. When many waits end
//! together (an endpoint drains a long task queue, a whole site drifts), hundreds of
//! provisioned objects are woken for housekeeping (a finished cleanup task, a drift
//! report), and an object still being provisioned, whose next look was due, queued
//! behind all of them: at 1,000 machines, 850 cleanup tasks ended within two seconds
//! and the last machine of each cluster waited 1.3 s more for its last step.
//! Here a provisioned object's wake is held while [`HOUSEKEEPING_AT_ONCE`] reconciles
//! of provisioned objects are in flight, and goes on as soon as one of them ends, or
//! after [`RELEASE_EVERY`] at the latest (one per tick, so a held wake never waits for
//! ever behind reconciles that hang on a slow endpoint). Objects being provisioned or
//! deleted are neither held nor counted: their reconciles never wait for housekeeping's
//! turn, and a burst of housekeeping reaches its endpoint a few calls at a time.
use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use futures::channel::mpsc::{UnboundedReceiver, unbounded};
use kube::api::DynamicObject;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::Notify;

use crate::controller::objects;
use crate::controller::schedule::requeue::RELEASE_EVERY;

type Obj = ObjectRef<DynamicObject>;

/// Reconciles of provisioned objects in flight at once, past which their wakes are held.
pub const HOUSEKEEPING_AT_ONCE: usize = 4;

/// Reconciles of provisioned objects in flight, and a signal each time one ends.
#[derive(Clone, Default)]
pub struct InFlight(Arc<Counter>);

#[derive(Default)]
struct Counter {
    count: AtomicUsize,
    ended: Notify,
}

/// One reconcile in flight, until dropped (a cancelled reconcile counts out too).
pub struct Entered(Arc<Counter>);

impl InFlight {
    pub fn enter(&self) -> Entered {
        self.0.count.fetch_add(1, Ordering::Relaxed);
        Entered(self.0.clone())
    }

    pub fn get(&self) -> usize {
        self.0.count.load(Ordering::Relaxed)
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Ordering::Relaxed);
        self.0.ended.notify_one();
    }
}

/// Whether `obj`'s reconcile is urgent: it is being deleted or not provisioned yet.
pub fn is_urgent(obj: &DynamicObject) -> bool {
    obj.metadata.deletion_timestamp.is_some() || !objects::provisioned(obj)
}

/// The wakes of `woken`, those `urgent` says are urgent at once, the others held as
/// the module says. Each object is held once however often it is woken (the
/// controller would merge the wakes anyway), so what is held is bounded by the objects.
pub fn prioritised(
    mut woken: UnboundedReceiver<Obj>,
    urgent: impl Fn(&Obj) -> bool + Send + 'static,
    in_flight: InFlight,
) -> UnboundedReceiver<Obj> {
    let (tx, out) = unbounded();
    tokio::spawn(async move {
        let mut held: VecDeque<Obj> = VecDeque::new();
        let mut holding: HashSet<Obj> = HashSet::new();
        let mut tick = tokio::time::interval(RELEASE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let room = |at_least| {
                HOUSEKEEPING_AT_ONCE
                    .saturating_sub(in_flight.get())
                    .max(at_least)
            };
            let release = tokio::select! {
                // Every wake that came is sorted before any held one goes on.
                biased;
                next = woken.next() => {
                    let Some(obj) = next else { break };
                    if urgent(&obj) {
                        if tx.unbounded_send(obj).is_err() {
                            return;
                        }
                    } else if holding.insert(obj.clone()) {
                        held.push_back(obj);
                    }
                    0
                }
                // At least one per tick, however busy.
                _ = tick.tick(), if !held.is_empty() => room(1),
                // A reconcile ended: as many as there is room for.
                _ = in_flight.0.ended.notified(), if !held.is_empty() => room(0),
            };
            for obj in held.drain(..release.min(held.len())) {
                holding.remove(&obj);
                if tx.unbounded_send(obj).is_err() {
                    return;
                }
            }
        }
        // The waits are gone (the manager stops): what is held goes on, for what it is
        // worth.
        for obj in held {
            let _ = tx.unbounded_send(obj);
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use kube::api::ApiResource;

    fn obj(name: &str) -> Obj {
        let ar = ApiResource {
            group: "g".into(),
            version: "v1".into(),
            api_version: "g/v1".into(),
            kind: "K".into(),
            plural: "ks".into(),
        };
        ObjectRef::new_with(name, ar).within("n")
    }

    #[tokio::test]
    async fn urgent_wakes_go_first_and_held_ones_go_as_room_allows() {
        let (tx, rx) = unbounded();
        let busy = InFlight::default();
        let many: Vec<_> = (0..HOUSEKEEPING_AT_ONCE + 2)
            .map(|_| busy.enter())
            .collect();
        let mut out = prioritised(rx, |o: &Obj| o.name.starts_with("new"), busy.clone());
        for i in 0..3 {
            tx.unbounded_send(obj(&format!("old-{i}"))).unwrap();
        }
        tx.unbounded_send(obj("old-0")).unwrap();
        tx.unbounded_send(obj("new-0")).unwrap();
        assert_eq!(
            out.next().await.unwrap().name,
            "new-0",
            "urgent goes at once"
        );
        // Busy: one held wake per tick, in the order they came, each once.
        assert_eq!(out.next().await.unwrap().name, "old-0");
        assert_eq!(out.next().await.unwrap().name, "old-1");
        drop(many);
        assert_eq!(out.next().await.unwrap().name, "old-2");
        drop(tx);
        assert!(out.next().await.is_none(), "nothing else, old-0 not twice");
    }
}
