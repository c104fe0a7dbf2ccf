//! Which changes of a watched object are worth a reconcile of ours.
//!
//! CAPI's controllers rewrite a Cluster's and a Machine's status on every change of
//! every machine (replica counts, aggregated conditions). A reconcile reads none of it,
//! so mapping each of those events to reconciles (of all machines of a cluster!) costs
//! plugin calls, infrastructure API calls and queue time for nothing: quadratic in the
//! machines per cluster. A [`Relevant`] filter lets an event through only when the part
//! of the object a reconcile reads changed (its spec, through `metadata.generation`, and
//! what each watch adds), or when the object is being deleted.
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};

use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::reflector::ObjectRef;

use crate::controller::objects::Uid;

/// The last relevant fingerprint seen per object (by UID).
#[derive(Clone, Default)]
pub struct Relevant {
    seen: Arc<Mutex<HashMap<Uid, u64>>>,
}

impl Relevant {
    /// Whether `obj` changed in a way that matters since the last call: its generation
    /// or `extra` (what else a reconcile reads of it) differ, or it is being deleted
    /// (always passed, and forgotten: objects leave through deletion, so the map only
    /// holds live objects). Of an object without a UID nothing is remembered: every
    /// change of it is one.
    pub fn changed(&self, obj: &DynamicObject, extra: impl Hash) -> bool {
        let Some(uid) = Uid::of(obj) else {
            return true;
        };
        let mut seen = self.seen.lock().expect("trigger cache poisoned");
        if obj.metadata.deletion_timestamp.is_some() {
            seen.remove(&uid);
            return true;
        }
        let mut h = DefaultHasher::new();
        obj.metadata.generation.hash(&mut h);
        extra.hash(&mut h);
        let fingerprint = h.finish();
        seen.insert(uid, fingerprint) != Some(fingerprint)
    }
}

/// Which InfraMachines wait for which bootstrap Secret, learnt from the Machines (a
/// Machine names its Secret in `spec.bootstrap.dataSecretName`), so a new Secret wakes
/// its machine instead of every machine of its cluster.
#[derive(Clone, Default)]
pub struct BootstrapWaiters {
    by_secret: Arc<Mutex<HashMap<SecretKey, ObjectRef<DynamicObject>>>>,
}

/// `(namespace, name)` of a Secret.
type SecretKey = (String, String);

impl BootstrapWaiters {
    /// Records (or, for a Machine being deleted, forgets) the Secret `machine` names.
    pub fn record(
        &self,
        machine: &DynamicObject,
        secret: Option<&str>,
        infra: &ObjectRef<DynamicObject>,
    ) {
        let Some(secret) = secret else { return };
        let key = (machine.namespace().unwrap_or_default(), secret.to_string());
        let mut map = self.by_secret.lock().expect("bootstrap map poisoned");
        if machine.metadata.deletion_timestamp.is_some() {
            map.remove(&key);
        } else {
            map.insert(key, infra.clone());
        }
    }

    /// The InfraMachine waiting for `secret` in `namespace`, if a Machine named it.
    pub fn waiting_for(&self, namespace: &str, secret: &str) -> Option<ObjectRef<DynamicObject>> {
        self.by_secret
            .lock()
            .expect("bootstrap map poisoned")
            .get(&(namespace.to_string(), secret.to_string()))
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(generation: i64, status: &str, deleting: bool) -> DynamicObject {
        let mut o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c", "namespace": "n", "uid": "u1", "generation": generation},
            "status": {"phase": status},
        }))
        .unwrap();
        if deleting {
            o.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
            );
        }
        o
    }

    #[test]
    fn status_churn_is_filtered_and_spec_changes_and_deletion_pass() {
        let r = Relevant::default();
        assert!(r.changed(&obj(1, "Provisioning", false), ()), "first sight");
        assert!(!r.changed(&obj(1, "Provisioned", false), ()), "status only");
        assert!(r.changed(&obj(2, "Provisioned", false), ()), "spec change");
        assert!(
            r.changed(&obj(2, "Provisioned", false), true),
            "extra changed"
        );
        assert!(r.changed(&obj(2, "Deleting", true), true), "deletion");
        assert!(
            r.changed(&obj(2, "Deleting", true), true),
            "deletion, again"
        );
    }
}
