//! The finalizer webhook: the API server asks it, as an InfraMachine is created, which
//! finalizer to add (`hyperplug_kinds::crds::finalizer_webhook` registers it). With
//! the finalizer there from the start, the reconciler's first step writes nothing before
//! the first plugin call. It never refuses anything: a request it does not recognise is
//! allowed unchanged, and the reconciler adds a missing finalizer as before.
use std::collections::BTreeMap;

use kube::api::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde_json::json;

use crate::controller::cache::scope::Scope;
use crate::controller::objects::{MANAGED_BY_ANNOTATION, OWNERSHIP_ID_ANNOTATION};
use hyperplug_runtime::Plugin;
use hyperplug_runtime::bindings::identity::KindRole;

/// Which finalizer each machine kind gets, for the namespaces the manager watches.
#[derive(Debug, Clone, Default)]
pub struct Finalizers {
    /// `(group, kind)` → finalizer.
    by_kind: BTreeMap<(String, String), String>,
    /// What the manager watches (`--namespace`, `--watch-filter`): an object outside
    /// gets no finalizer, as no reconciler of this instance would ever remove it.
    scope: Scope,
}

impl Finalizers {
    /// For the machine kinds of `plugins` whose manager serves webhooks.
    pub fn new(plugins: &[Plugin], scope: Scope) -> Self {
        let mut by_kind = BTreeMap::new();
        for plugin in plugins {
            let info = plugin.info();
            if !hyperplug_kinds::crds::serves_webhooks(info) {
                continue;
            }
            for kind in info
                .kinds
                .iter()
                .filter(|k| k.role == KindRole::InfraMachine)
            {
                by_kind.insert(
                    (info.group.clone(), kind.kind.clone()),
                    hyperplug_kinds::crds::finalizer(info),
                );
            }
        }
        Self { by_kind, scope }
    }

    /// The answer to `review`: allowed, with a JSON patch adding the finalizer where it
    /// belongs; `None` when the body is no admission request.
    pub fn review(
        &self,
        review: AdmissionReview<DynamicObject>,
    ) -> Option<AdmissionReview<DynamicObject>> {
        let request: AdmissionRequest<DynamicObject> = review.try_into().ok()?;
        let allowed = AdmissionResponse::from(&request);
        let response = match self.patch(&request) {
            Some(patch) => allowed.clone().with_patch(patch).unwrap_or(allowed),
            None => allowed,
        };
        Some(response.into_review())
    }

    fn patch(&self, request: &AdmissionRequest<DynamicObject>) -> Option<json_patch::Patch> {
        if request.operation != Operation::Create {
            return None;
        }
        let finalizer = self
            .by_kind
            .get(&(request.kind.group.clone(), request.kind.kind.clone()))?;
        let object = request.object.as_ref()?;
        if !self.scope.includes(
            request.namespace.as_deref(),
            object.metadata.labels.as_ref(),
        ) {
            return None;
        }
        // Only a plain new machine: one that arrives with an ownership id (moved,
        // restored, or copied by a tenant), a provider ID (a claim to infrastructure made
        // elsewhere) or finalizers (another provider's) is left to the reconciler, which
        // adds ours once it has verified the id or been granted the adoption. Until then
        // such an object stays deletable without us, as nothing was made for it.
        let carries_id = object
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(OWNERSHIP_ID_ANNOTATION));
        let claims = object
            .data
            .pointer("/spec/providerID")
            .and_then(|v| v.as_str())
            .is_some_and(|id| !id.is_empty());
        let finalized = object
            .metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| !f.is_empty());
        // Managed by someone else: the reconciler never acts on it, so nothing would ever
        // remove the finalizer.
        let managed_elsewhere = object
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(MANAGED_BY_ANNOTATION));
        if carries_id || claims || finalized || managed_elsewhere {
            return None;
        }
        let op = json!({"op": "add", "path": "/metadata/finalizers", "value": [finalizer]});
        serde_json::from_value(json!([op])).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finalizers(namespace: Option<&str>) -> Finalizers {
        Finalizers {
            by_kind: [(
                (
                    "infrastructure.cluster.x-k8s.io".into(),
                    "ProxmoxMachine".into(),
                ),
                "proxmox.infrastructure.hyperplug.dev".into(),
            )]
            .into(),
            scope: Scope {
                namespace: namespace.map(String::from),
                watch_filter: None,
            },
        }
    }

    fn review(
        operation: &str,
        kind: &str,
        namespace: &str,
        finalizers: serde_json::Value,
    ) -> AdmissionReview<DynamicObject> {
        serde_json::from_value(json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "r-1",
                "kind": {"group": "infrastructure.cluster.x-k8s.io", "version": "v1alpha1", "kind": kind},
                "resource": {"group": "infrastructure.cluster.x-k8s.io", "version": "v1alpha1", "resource": "proxmoxmachines"},
                "name": "m-0",
                "namespace": namespace,
                "operation": operation,
                "userInfo": {"username": "tenant"},
                "object": {
                    "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                    "kind": kind,
                    "metadata": {"name": "m-0", "namespace": namespace, "finalizers": finalizers},
                    "spec": {},
                },
            },
        }))
        .unwrap()
    }

    /// The response's JSON patch, decoded; `None` without one. Always allowed.
    fn patch_of(answer: AdmissionReview<DynamicObject>) -> Option<serde_json::Value> {
        let response = serde_json::to_value(answer).unwrap()["response"].clone();
        assert_eq!(response["allowed"], true, "{response}");
        assert_eq!(response["uid"], "r-1");
        // kube writes the patch's bytes as a JSON array, which the API server reads.
        let bytes: Vec<u8> = serde_json::from_value(response.get("patch")?.clone()).unwrap();
        Some(serde_json::from_slice(&bytes).unwrap())
    }

    #[test]
    fn a_new_machine_gets_the_finalizer() {
        let f = finalizers(None);
        let fresh = f.review(review("CREATE", "ProxmoxMachine", "team-a", json!(null)));
        assert_eq!(
            patch_of(fresh.unwrap()),
            Some(
                json!([{"op": "add", "path": "/metadata/finalizers", "value": ["proxmox.infrastructure.hyperplug.dev"]}])
            )
        );
    }

    #[test]
    fn a_machine_without_the_watch_filter_value_gets_none() {
        let mut f = finalizers(None);
        f.scope.watch_filter = Some("blue".into());
        let labelled = |value: &str| {
            let mut r = review("CREATE", "ProxmoxMachine", "team-a", json!(null));
            let object = r.request.as_mut().unwrap().object.as_mut().unwrap();
            object.metadata.labels = Some(
                [(
                    crate::controller::cache::scope::WATCH_FILTER_LABEL.to_string(),
                    value.to_string(),
                )]
                .into(),
            );
            r
        };
        assert!(patch_of(f.review(labelled("blue")).unwrap()).is_some());
        assert_eq!(patch_of(f.review(labelled("green")).unwrap()), None);
        let unlabelled = review("CREATE", "ProxmoxMachine", "team-a", json!(null));
        assert_eq!(patch_of(f.review(unlabelled).unwrap()), None);
    }

    /// What a test does to a new object before it is reviewed.
    type Change = Box<dyn Fn(&mut DynamicObject)>;

    #[test]
    fn anything_else_is_allowed_unchanged() {
        let f = finalizers(Some("team-a"));
        for (operation, kind, namespace) in [
            ("UPDATE", "ProxmoxMachine", "team-a"),
            ("CREATE", "ProxmoxCluster", "team-a"),
            ("CREATE", "ProxmoxMachine", "team-b"),
        ] {
            let answer = f.review(review(operation, kind, namespace, json!(null)));
            assert_eq!(
                patch_of(answer.unwrap()),
                None,
                "{operation} {kind} in {namespace}"
            );
        }
        let finalized = review("CREATE", "ProxmoxMachine", "team-a", json!(["x.example/y"]));
        assert_eq!(
            patch_of(f.review(finalized).unwrap()),
            None,
            "finalizers of another"
        );
        let annotated = |key: &'static str| {
            move |o: &mut DynamicObject| {
                o.metadata.annotations = Some([(key.to_string(), "x".to_string())].into())
            }
        };
        let cases: [(&str, Change); 3] = [
            (
                "managed elsewhere",
                Box::new(annotated(MANAGED_BY_ANNOTATION)),
            ),
            (
                "an ownership id carried in",
                Box::new(annotated(OWNERSHIP_ID_ANNOTATION)),
            ),
            (
                "a provider ID claimed",
                Box::new(|o: &mut DynamicObject| {
                    o.data["spec"]["providerID"] = json!("proxmox://someone-elses")
                }),
            ),
        ];
        for (why, change) in cases {
            let mut r = review("CREATE", "ProxmoxMachine", "team-a", json!(null));
            change(r.request.as_mut().unwrap().object.as_mut().unwrap());
            assert_eq!(patch_of(f.review(r).unwrap()), None, "{why}");
        }
        let empty: AdmissionReview<DynamicObject> = serde_json::from_value(json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        }))
        .unwrap();
        assert!(f.review(empty).is_none());
    }
}
