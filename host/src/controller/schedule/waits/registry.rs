//! The registry behind [`Waits`](super::Waits): which object waits for which keys of
//! which endpoint, what a tick of an endpoint's loop asks, and whom a fired key wakes.
//! Plain data under the `Waits` lock, judged against a clock handed in, so every rule
//! is tested without a runtime.
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyperplug_runtime::bindings::observer::ObserveRequest;
use hyperplug_runtime::bindings::types::{Credentials, NamedCredentials, Wait};
use kube::api::DynamicObject;
use kube::runtime::reflector::ObjectRef;
use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use crate::controller::schedule::requeue::OBSERVED_LATELY;

/// Keys one object may wait for at once (more are dropped, with a warning).
pub const MAX_WAITS_PER_OBJECT: usize = 16;
/// Longest key.
pub const MAX_KEY_BYTES: usize = 512;

pub(super) type Obj = ObjectRef<DynamicObject>;

/// What the host saw of the step that named the waits.
#[derive(Debug, Clone, Copy)]
pub struct StepSeen {
    /// The object's generation the step was for.
    pub generation: Option<i64>,
    /// The step's requeue hint.
    pub requeue_ms: Option<u64>,
    /// The object was provisioned before the step (a describe): its waits watch for
    /// drift. The step that makes it ready still counts as provisioning (what it waits
    /// for, e.g. a task it just started, ends soon).
    pub watching: bool,
    /// The step was a delete step.
    pub deleting: bool,
}

/// Which endpoint: its URL, the identity that reads it and a digest of its secret
/// (never the secret itself). Clusters with the same credentials share one observer
/// loop; a tenant naming the same endpoint and token with another secret gets a loop
/// of its own, so nobody's keys are ever observed with someone else's credentials.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub(super) struct EndpointId {
    pub(super) endpoint: String,
    token: String,
    secret: [u8; 32],
}

impl EndpointId {
    fn of(c: &Credentials) -> EndpointId {
        EndpointId {
            endpoint: c.endpoint.clone(),
            token: c.token.clone(),
            secret: Sha256::digest(c.secret.as_bytes()).into(),
        }
    }
}

pub(super) struct Endpoint {
    /// The credentials last registered with (a rotated secret is picked up).
    credentials: Credentials,
    /// Pending keys and the objects waiting for each.
    pub(super) keys: HashMap<String, HashSet<Obj>>,
    /// Ends an idle loop's longer sleep: an object that is provisioning started waiting.
    pub(super) hurry: Arc<Notify>,
    /// When an observe call of this endpoint last succeeded.
    observed: Option<Instant>,
}

/// What one object waits for.
struct Waiting {
    keys: Vec<(EndpointId, String)>,
    /// The generation its step saw: a new spec is worth a call at once.
    generation: Option<i64>,
    /// When its step's requeue is due (the fallback should no key fire).
    due: Option<Instant>,
    /// The step's requeue period.
    period: Option<Duration>,
    /// Its keys watch for drift (see [`StepSeen::watching`]), which need not be seen
    /// within the second.
    watching: bool,
    /// Named by a delete step.
    deleting: bool,
}

#[derive(Default)]
pub(super) struct Registry {
    pub(super) endpoints: HashMap<EndpointId, Endpoint>,
    /// What each object waits for, to replace it on its next step.
    objects: HashMap<Obj, Waiting>,
}

/// One tick's observe call of an endpoint.
pub(super) struct Asked {
    pub(super) req: ObserveRequest,
    /// Some object that is provisioning waits on the endpoint.
    pub(super) busy: bool,
    /// Every key is asked about (not only those of objects that are provisioning).
    pub(super) all: bool,
}

impl Registry {
    /// What a tick of endpoint `id`'s loop asks: the keys of objects that are
    /// provisioning, and every key when `all_due` or when only watching objects wait.
    /// `None` when nothing waits on the endpoint any more (it is forgotten: its loop
    /// ends).
    pub(super) fn tick_request(&mut self, id: &EndpointId, all_due: bool) -> Option<Asked> {
        let Some(e) = self.endpoints.get(id).filter(|e| !e.keys.is_empty()) else {
            self.endpoints.remove(id);
            return None;
        };
        let provisioning = |objs: &HashSet<Obj>| {
            objs.iter()
                .any(|obj| self.objects.get(obj).is_some_and(|w| !w.watching))
        };
        let busy = e.keys.values().any(provisioning);
        let all = !busy || all_due;
        let keys = e
            .keys
            .iter()
            .filter(|(_, objs)| all || provisioning(objs))
            .map(|(key, _)| key.clone())
            .collect();
        Some(Asked {
            req: ObserveRequest {
                credentials: e.credentials.clone(),
                keys,
            },
            busy,
            all,
        })
    }

    /// See [`Waits::set`]: how many waits were registered, and the endpoints that got
    /// their first key (their observer loops are to be started).
    pub(super) fn set(
        &mut self,
        obj: Obj,
        step: StepSeen,
        waits: &[Wait],
        (primary, more): (&Credentials, &[NamedCredentials]),
        now: Instant,
    ) -> (usize, Vec<EndpointId>) {
        if waits.len() > MAX_WAITS_PER_OBJECT {
            tracing::warn!(object = %obj, waits = waits.len(), max = MAX_WAITS_PER_OBJECT,
                "plugin named more waits than an object may have; the rest are dropped");
        }
        self.remove(&obj);
        let mut start = Vec::new();
        let mut mine = Vec::new();
        for wait in waits.iter().take(MAX_WAITS_PER_OBJECT) {
            if wait.key.is_empty() || wait.key.len() > MAX_KEY_BYTES {
                tracing::warn!(object = %obj, "plugin named a wait with an empty or over-long key; dropped");
                continue;
            }
            let Some(credentials) = std::iter::once(primary)
                .chain(more.iter().map(|m| &m.credentials))
                .find(|c| c.endpoint == wait.endpoint)
            else {
                tracing::warn!(object = %obj, endpoint = %wait.endpoint,
                    "plugin named a wait on an endpoint the call had no credentials for; dropped");
                continue;
            };
            let id = EndpointId::of(credentials);
            let endpoint = self.endpoints.entry(id.clone()).or_insert_with(|| {
                start.push(id.clone());
                Endpoint {
                    credentials: credentials.clone(),
                    keys: HashMap::new(),
                    hurry: Arc::default(),
                    observed: None,
                }
            });
            if !step.watching {
                endpoint.hurry.notify_one();
            }
            endpoint.credentials = credentials.clone();
            endpoint
                .keys
                .entry(wait.key.clone())
                .or_default()
                .insert(obj.clone());
            mine.push((id, wait.key.clone()));
        }
        let registered = mine.len();
        if !mine.is_empty() {
            let period = step.requeue_ms.map(Duration::from_millis);
            let due = period.map(|p| now + p);
            self.objects.insert(
                obj,
                Waiting {
                    keys: mine,
                    generation: step.generation,
                    due,
                    period,
                    watching: step.watching,
                    deleting: step.deleting,
                },
            );
        }
        (registered, start)
    }

    /// After a successful observation of endpoint `id`: the objects waiting for its
    /// `fired` keys, which wait no longer (their next steps say what they wait for next).
    pub(super) fn fire(&mut self, id: &EndpointId, fired: &[String]) -> HashSet<Obj> {
        let mut woken = HashSet::new();
        let Some(endpoint) = self.endpoints.get_mut(id) else {
            return woken;
        };
        // A successful observation of the endpoint (see `still_waiting`).
        endpoint.observed = Some(Instant::now());
        for key in fired {
            if let Some(objects) = endpoint.keys.remove(key) {
                woken.extend(objects);
            }
        }
        for obj in &woken {
            self.remove(obj);
        }
        woken
    }

    /// See [`Waits::still_waiting`]; `now` is the time to judge the requeue against.
    /// A requeue that comes due while every endpoint of the object's keys was observed
    /// lately (so none of its keys is over) is put off by its period: the fallback is for
    /// an observer that fails, not one that has nothing to report.
    pub(super) fn still_waiting(
        &mut self,
        obj: &Obj,
        generation: Option<i64>,
        deleting: bool,
        now: Instant,
    ) -> Option<Duration> {
        let waiting = self.objects.get(obj)?;
        if waiting.generation != generation || waiting.deleting != deleting {
            return None;
        }
        let due = waiting.due?;
        if let Some(left) = due.checked_duration_since(now).filter(|l| !l.is_zero()) {
            return Some(left);
        }
        let period = waiting.period?;
        let observed_lately = waiting.keys.iter().all(|(id, _)| {
            self.endpoints
                .get(id)
                .and_then(|e| e.observed)
                .is_some_and(|at| now.saturating_duration_since(at) <= OBSERVED_LATELY)
        });
        if !observed_lately {
            return None;
        }
        let waiting = self.objects.get_mut(obj)?;
        waiting.due = Some(now + period);
        Some(period)
    }

    /// Forget what `obj` waited for.
    pub(super) fn remove(&mut self, obj: &Obj) {
        let keys = self.objects.remove(obj).map(|w| w.keys).unwrap_or_default();
        for (id, key) in keys {
            if let Some(endpoint) = self.endpoints.get_mut(&id)
                && let Some(objects) = endpoint.keys.get_mut(&key)
            {
                objects.remove(obj);
                if objects.is_empty() {
                    endpoint.keys.remove(&key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::api::{ApiResource, GroupVersionKind};

    use super::*;

    fn obj(name: &str) -> Obj {
        let gvk = GroupVersionKind::gvk(
            "infrastructure.cluster.x-k8s.io",
            "v1alpha1",
            "ExampleMachine",
        );
        ObjectRef::new_with(name, ApiResource::from_gvk(&gvk)).within("ns")
    }

    fn credentials(secret: &str) -> Credentials {
        Credentials {
            endpoint: "https://e".into(),
            token: "t".into(),
            secret: secret.into(),
            ca_bundle: None,
            fingerprint: None,
            insecure: false,
        }
    }

    fn wait(key: &str) -> Wait {
        Wait {
            endpoint: "https://e".into(),
            key: key.into(),
        }
    }

    /// A step at generation 1 (`requeue_ms`, watching for drift or not, a delete's or not).
    fn step(requeue_ms: Option<u64>, watching: bool, deleting: bool) -> StepSeen {
        StepSeen {
            generation: Some(1),
            requeue_ms,
            watching,
            deleting,
        }
    }

    /// `o` (generation 1) waits for `key`, its requeue 15 s after `now`.
    fn waiting_on(registry: &mut Registry, o: &Obj, key: &str, now: Instant, deleting: bool) {
        let step = step(Some(15_000), false, deleting);
        let c = credentials("s");
        registry.set(o.clone(), step, &[wait(key)], (&c, &[]), now);
    }

    #[test]
    fn a_due_fallback_is_put_off_while_the_endpoint_is_observed_and_not_when_it_fails() {
        let now = Instant::now();
        let due = now + Duration::from_secs(15);
        let a = obj("a");
        let mut registry = Registry::default();
        waiting_on(&mut registry, &a, "task:1", now, false);
        for e in registry.endpoints.values_mut() {
            e.observed = Some(due - Duration::from_secs(1));
        }
        assert_eq!(
            registry.still_waiting(&a, Some(1), false, due),
            Some(Duration::from_secs(15)),
            "observed a second ago and not fired: the task still runs"
        );
        let later = due + Duration::from_secs(15) + OBSERVED_LATELY;
        assert_eq!(
            registry.still_waiting(&a, Some(1), false, later),
            None,
            "the observer has not succeeded lately: the fallback call is made"
        );
    }

    #[test]
    fn a_reconcile_before_the_wait_is_over_needs_no_call_unless_spec_or_deletion_changed() {
        let now = Instant::now();
        let due = now + Duration::from_secs(15);
        let (a, b) = (obj("a"), obj("b"));
        let mut registry = Registry::default();
        waiting_on(&mut registry, &a, "task:1", now, false);
        assert_eq!(
            registry.still_waiting(&a, Some(1), false, now),
            Some(Duration::from_secs(15))
        );
        assert_eq!(
            registry.still_waiting(&a, Some(2), false, now),
            None,
            "new spec"
        );
        assert_eq!(
            registry.still_waiting(&a, Some(1), true, now),
            None,
            "deletion began"
        );
        assert_eq!(
            registry.still_waiting(&a, Some(1), false, due),
            None,
            "requeue due, and nothing observed"
        );
        assert_eq!(
            registry.still_waiting(&b, Some(1), false, now),
            None,
            "waits for nothing"
        );
        // A delete step's wait holds the deleting object back the same way.
        waiting_on(&mut registry, &b, "task:2", now, true);
        assert!(registry.still_waiting(&b, Some(1), true, now).is_some());
    }

    #[test]
    fn the_same_endpoint_and_token_with_another_secret_is_another_endpoint() {
        let (a, b) = (obj("a"), obj("b"));
        let step = step(None, false, false);
        let (mine, theirs) = (credentials("mine"), credentials("theirs"));
        let mut registry = Registry::default();
        let now = Instant::now();
        let (_, started) = registry.set(a, step, &[wait("k")], (&mine, &[]), now);
        assert_eq!(started.len(), 1);
        let (_, started) = registry.set(b.clone(), step, &[wait("k")], (&theirs, &[]), now);
        assert_eq!(started.len(), 1, "another secret gets a loop of its own");
        // Each endpoint is observed with its own credentials, and fires only its objects.
        let theirs_id = EndpointId::of(&theirs);
        assert_eq!(registry.endpoints[&theirs_id].credentials.secret, "theirs");
        assert_eq!(registry.fire(&theirs_id, &["k".into()]), HashSet::from([b]));
        assert_eq!(registry.endpoints[&EndpointId::of(&mine)].keys.len(), 1);
    }

    #[test]
    fn waits_a_call_cannot_name_or_that_exceed_the_bounds_are_dropped() {
        let o = obj("a");
        let step = step(None, false, false);
        let c = credentials("s");
        let mut waits: Vec<Wait> = (0..MAX_WAITS_PER_OBJECT + 4)
            .map(|i| wait(&format!("k{i}")))
            .collect();
        waits.insert(0, wait(""));
        waits.insert(0, wait(&"x".repeat(MAX_KEY_BYTES + 1)));
        waits.insert(
            0,
            Wait {
                endpoint: "https://elsewhere".into(),
                key: "stolen".into(),
            },
        );
        let mut registry = Registry::default();
        let (registered, _) = registry.set(o, step, &waits, (&c, &[]), Instant::now());
        assert_eq!(registered, MAX_WAITS_PER_OBJECT - 3);
        assert_eq!(
            registry.endpoints.len(),
            1,
            "no endpoint the call had no credentials for"
        );
    }

    #[test]
    fn a_fired_key_wakes_each_of_its_objects_once_and_unknown_keys_nothing() {
        let now = Instant::now();
        let (a, b, c) = (obj("a"), obj("b"), obj("c"));
        let mut registry = Registry::default();
        waiting_on(&mut registry, &a, "task:1", now, false);
        waiting_on(&mut registry, &b, "task:1", now, false);
        waiting_on(&mut registry, &c, "task:2", now, false);
        let id = EndpointId::of(&credentials("s"));
        let woken = registry.fire(&id, &["task:1".into(), "task:9".into()]);
        assert_eq!(woken, HashSet::from([a.clone(), b]));
        assert_eq!(registry.still_waiting(&a, Some(1), false, now), None);
        assert!(registry.still_waiting(&c, Some(1), false, now).is_some());
        assert!(
            registry.fire(&id, &["task:1".into()]).is_empty(),
            "fired once"
        );
    }

    #[test]
    fn a_fast_tick_asks_about_the_keys_of_objects_provisioning_and_every_key_when_due() {
        let mut registry = Registry::default();
        let now = Instant::now();
        let (busy, watching) = (obj("busy"), obj("watching"));
        waiting_on(&mut registry, &busy, "task:1", now, false);
        let c = credentials("s");
        let step = step(None, true, false);
        registry.set(watching.clone(), step, &[wait("vm:2")], (&c, &[]), now);
        let id = EndpointId::of(&c);
        let asked = |r: &mut Registry, all_due| {
            let a = r.tick_request(&id, all_due).expect("keys pending");
            let mut keys = a.req.keys.clone();
            keys.sort();
            (keys, a.busy, a.all)
        };
        assert_eq!(
            asked(&mut registry, false),
            (vec!["task:1".to_string()], true, false)
        );
        assert_eq!(
            asked(&mut registry, true),
            (vec!["task:1".to_string(), "vm:2".to_string()], true, true)
        );
        // Only a watching object waits: every key, every (idle) tick.
        registry.remove(&busy);
        assert_eq!(
            asked(&mut registry, false),
            (vec!["vm:2".to_string()], false, true)
        );
        registry.remove(&watching);
        assert!(registry.tick_request(&id, false).is_none());
        assert!(
            registry.endpoints.is_empty(),
            "an endpoint nothing waits on is forgotten"
        );
    }

    #[test]
    fn forgetting_an_object_drops_its_keys_but_not_another_objects() {
        let now = Instant::now();
        let (a, b) = (obj("a"), obj("b"));
        let mut registry = Registry::default();
        waiting_on(&mut registry, &a, "task:1", now, false);
        waiting_on(&mut registry, &b, "task:1", now, false);
        registry.remove(&a);
        let keys = &registry.endpoints.values().next().unwrap().keys;
        assert_eq!(keys["task:1"], HashSet::from([b.clone()]));
        registry.remove(&b);
        assert!(registry.endpoints.values().next().unwrap().keys.is_empty());
        assert!(registry.objects.is_empty());
    }
}
