//! Waits: what each machine's last step waits for, and one observer loop per endpoint
//! that wakes exactly the machines whose waits are over.
//!
//! A step's progress names keys, in its plugin's own words (e.g. a task id), on one of
//! the call's endpoints. Rather than calling every waiting machine on a timer, the host
//! asks the plugin's observer about all pending keys of an endpoint at once, one call per
//! tick whatever the number of machines, and reconciles the machines whose keys fired
//! (through `Controller::reconcile_on`). The requeue a step asks for stays the fallback.
//!
//! Bounded: an object registers at most `registry::MAX_WAITS_PER_OBJECT` keys of at
//! most `registry::MAX_KEY_BYTES`; one loop per endpoint, never two observe calls of one
//! endpoint at once; each observe call runs in the plugin's sandbox under the same limits
//! as any call. What waits for what is kept in `registry`.
mod registry;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use hyperplug_runtime::Plugin;
use hyperplug_runtime::bindings::types::{Credentials, NamedCredentials, Wait};

use crate::controller::schedule::requeue;
use crate::metrics::Metrics;
pub use registry::StepSeen;
use registry::{Asked, EndpointId, Obj, Registry};

/// The waits of one plugin's machines.
pub struct Waits {
    plugin: Plugin,
    metrics: Arc<Metrics>,
    registry: Mutex<Registry>,
    wake: UnboundedSender<Obj>,
}

impl Waits {
    /// The registry and the stream of objects to reconcile because their wait is over.
    pub fn new(plugin: Plugin, metrics: Arc<Metrics>) -> (Arc<Waits>, UnboundedReceiver<Obj>) {
        let (wake, woken) = unbounded();
        let waits = Arc::new(Waits {
            plugin,
            metrics,
            registry: Mutex::default(),
            wake,
        });
        (waits, woken)
    }

    /// `obj` (at `step.generation`) now waits for `waits` (and nothing else), each on
    /// the credentials of the call whose endpoint it names, until `step.requeue` at the
    /// latest. Returns how many were registered; a wait on an endpoint the call had no
    /// credentials for is dropped.
    pub fn set(
        self: &Arc<Self>,
        obj: Obj,
        step: StepSeen,
        waits: &[Wait],
        credentials: (&Credentials, &[NamedCredentials]),
    ) -> usize {
        let (registered, start) = self.registry.lock().expect("waits registry").set(
            obj,
            step,
            waits,
            credentials,
            Instant::now(),
        );
        for id in start {
            tokio::spawn(self.clone().observe(id));
        }
        registered
    }

    /// `obj` waits for nothing (it is gone, or its step failed).
    pub fn clear(&self, obj: &Obj) {
        self.registry.lock().expect("waits registry").remove(obj);
    }

    /// How long `obj` (now at `generation`, `deleting` or not) still waits: some of
    /// its keys have not fired, its spec and its deletion are as its step saw them, and
    /// its requeue is not due. Such a reconcile (the echo of the host's own status write,
    /// a change elsewhere) needs no plugin call: nothing it waits for is over.
    pub fn still_waiting(
        &self,
        obj: &Obj,
        generation: Option<i64>,
        deleting: bool,
    ) -> Option<Duration> {
        let mut registry = self.registry.lock().expect("waits registry");
        registry.still_waiting(obj, generation, deleting, Instant::now())
    }

    /// One endpoint's loop: while keys are pending, one observe call per tick (every
    /// [`requeue::OBSERVE_EVERY`] while some object is provisioning, every
    /// [`requeue::OBSERVE_IDLE`] while only provisioned ones are watched); the objects of
    /// the keys it fires are woken. Ends when nothing waits on the endpoint. A fast tick
    /// asks only about the keys of objects that are provisioning: a provisioned one's
    /// keys watch for drift, asked about every [`requeue::OBSERVE_IDLE`] (so a plugin
    /// whose drift watch costs a call of its own makes it that often, not every tick).
    async fn observe(self: Arc<Self>, id: EndpointId) {
        let hurry = match self
            .registry
            .lock()
            .expect("waits registry")
            .endpoints
            .get(&id)
        {
            Some(e) => e.hurry.clone(),
            None => return,
        };
        // Past the tick every loop waits, how much longer: an idle loop's rest is cut
        // short when a machine starts waiting on the endpoint; a failure's is not.
        let (mut rest, mut can_hurry) = (Duration::ZERO, false);
        // When every key was last asked about.
        let mut all_asked: Option<Instant> = None;
        loop {
            tokio::time::sleep(requeue::OBSERVE_EVERY).await;
            if can_hurry {
                tokio::select! {
                    _ = tokio::time::sleep(rest) => {}
                    _ = hurry.notified() => {}
                }
            } else {
                tokio::time::sleep(rest).await;
            }
            let all_due = all_asked.is_none_or(|at| at.elapsed() >= requeue::OBSERVE_IDLE);
            let asked = self
                .registry
                .lock()
                .expect("waits registry")
                .tick_request(&id, all_due);
            let Some(Asked { req, busy, all }) = asked else {
                return;
            };
            let call = "observer.observe";
            let result = self
                .metrics
                .plugin_call(self.plugin.name(), call, self.plugin.observe(&req))
                .await;
            match result {
                Ok(Ok(observation)) => {
                    if all {
                        all_asked = Some(Instant::now());
                    }
                    (rest, can_hurry) = if busy {
                        (Duration::ZERO, false)
                    } else {
                        (requeue::OBSERVE_IDLE - requeue::OBSERVE_EVERY, true)
                    };
                    self.fire(&id, &observation.fired);
                }
                Ok(Err(e)) => {
                    (rest, can_hurry) = (
                        requeue::OBSERVE_AFTER_FAILURE - requeue::OBSERVE_EVERY,
                        false,
                    );
                    tracing::warn!(plugin = self.plugin.name(), endpoint = %id.endpoint,
                        error = ?e, "observing failed; its waits fall back to their requeue");
                }
                Err(e) => {
                    (rest, can_hurry) = (
                        requeue::OBSERVE_AFTER_FAILURE - requeue::OBSERVE_EVERY,
                        false,
                    );
                    tracing::warn!(plugin = self.plugin.name(), endpoint = %id.endpoint,
                        error = %e, "observer call failed; its waits fall back to their requeue");
                }
            }
        }
    }

    /// Wake the objects waiting for `fired` keys of endpoint `id`; those keys are no
    /// longer pending (the objects' next steps say what they wait for next).
    fn fire(&self, id: &EndpointId, fired: &[String]) {
        let woken = self
            .registry
            .lock()
            .expect("waits registry")
            .fire(id, fired);
        for obj in woken {
            // The controller is gone only when the manager stops.
            let _ = self.wake.unbounded_send(obj);
        }
    }
}
