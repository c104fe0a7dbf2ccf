//! Objects that name infrastructure this manager has no record of: another provider's
//! (a team switching to hyperplug keeps its clusters: an InfraMachine marked
//! provisioned, or with a provider ID), or anyone's, named by a tenant.
//!
//! Anyone who may edit an InfraMachine may write what such a machine carries (a provider
//! ID, a VM id), so a tenant could name someone else's infrastructure with it; an
//! ownership id the manager signed for the object proves only that the object is the
//! one it was signed for, not that anything it names is its own. The plugin is
//! therefore called for such a machine only where an administrator granted adoption
//! (`--adopt-namespace`, narrowed by `--adopt-created-before` and `--adopt-provider-id`:
//! manager flags no tenant can change), and told so through the `grants` import; even
//! there it adopts only what it proves to be the machine's from the infrastructure
//! itself (e.g. a VM's name and SMBIOS UUID). One exception needs no grant: an object
//! `clusterctl move` brought here (its ownership id verifies and is not its own UID),
//! whose plugin asks what was granted, is called with nothing granted, so it finds only
//! what carries its own marker. Once taken, the object carries our ownership id and
//! finalizer, and the previous provider's finalizer (named `<kind>.<group>` by the usual
//! convention) is dropped: two providers of the same CRDs never run side by side, so
//! nothing would ever remove it.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::controller::Action;

use crate::controller::error::Result;
use crate::controller::objects;
use crate::controller::schedule::requeue::RECHECK;
use crate::controller::write::Writes;
use crate::controller::write::conditions::{self, Condition, READY};
use crate::controller::write::events::Event;
use crate::status::{Progressing, Status};
use hyperplug_runtime::Grants;

/// Condition reason of a machine naming infrastructure without a grant.
pub const ADOPTION_NOT_GRANTED: &str = "AdoptionNotGranted";

/// The finalizer a provider of `kind` that ran before us left (`proxmoxmachine.` +
/// the group, as controller tooling names them).
pub fn previous_finalizer(kind: &ApiResource) -> String {
    format!("{}.{}", kind.kind.to_ascii_lowercase(), kind.group)
}

/// Whether `obj` is provisioned yet the manager has no record of it (`plugin_state`).
pub fn unrecorded(obj: &DynamicObject, plugin_state: Option<&str>) -> bool {
    objects::provisioned(obj) && plugin_state.is_none()
}

/// Whether `obj` names infrastructure the manager has no record of: marked provisioned
/// or carrying a provider ID (which we set only once we have a record), without plugin
/// state. The provider ID alone counts, as a user may write it on a new object: it is
/// a claim to someone's infrastructure all the same. Annotations change nothing.
pub fn names_unrecorded(obj: &DynamicObject, plugin_state: Option<&str>) -> bool {
    let claims = objects::provisioned(obj)
        || objects::str_field(obj, "spec.providerID").is_some_and(|id| !id.is_empty());
    claims && plugin_state.is_none()
}

/// Whether `clusterctl move` brought `obj` here: its verified ownership id (`id`) is
/// the UID it had where it was first taken, not its own.
pub fn moved(obj: &DynamicObject, id: &str) -> bool {
    obj.uid().is_some_and(|uid| uid != id)
}

/// An administrator's narrowing of adoption grants (`--adopt-created-before`,
/// `--adopt-provider-id`): every condition set must hold.
#[derive(Debug, Clone, Default)]
pub struct AdoptionLimits {
    /// Only objects created before this time.
    pub created_before: Option<Time>,
    /// Only objects whose `spec.providerID` is one of these (none: any).
    pub provider_ids: Vec<String>,
}

/// Whether an administrator granted adoption in namespace `ns` (`namespaces`: those of
/// `--adopt-namespace`, `*` for all).
pub fn may_adopt(namespaces: &[String], ns: &str) -> bool {
    namespaces.iter().any(|n| n == "*" || n == ns)
}

/// What is granted to `obj`: adoption where its namespace is granted (`namespaces`)
/// and the narrowing flags (`limits`) let it through.
pub fn grants_for(namespaces: &[String], limits: &AdoptionLimits, obj: &DynamicObject) -> Grants {
    let ns = obj.namespace().unwrap_or_default();
    let created = obj.metadata.creation_timestamp.as_ref();
    let in_time = match &limits.created_before {
        None => true,
        Some(before) => created.is_some_and(|c| c.0 < before.0),
    };
    let provider_id = objects::str_field(obj, "spec.providerID").unwrap_or_default();
    let listed =
        limits.provider_ids.is_empty() || limits.provider_ids.iter().any(|p| p == provider_id);
    Grants {
        adoption: may_adopt(namespaces, &ns) && in_time && listed,
    }
}

/// No call for a machine another provider made in a namespace without a grant: a
/// `Ready` condition and a Warning event say why and what the administrator can do.
pub(crate) async fn not_granted(
    writes: &Writes,
    own: &Api<DynamicObject>,
    obj: &DynamicObject,
) -> Result<Action> {
    let ns = obj.namespace().unwrap_or_default();
    let message = format!(
        "{} {ns}/{} names infrastructure this manager has no record of (it is marked provisioned or has a spec.providerID): nothing is done for it until an administrator grants adoption for it (hyperplug run --adopt-namespace={ns}, which --adopt-created-before and --adopt-provider-id narrow). The plugin then adopts what it proves to be this machine's, and only that.",
        writes.events.kind(),
        obj.name_any()
    );
    let before =
        conditions::find(&Progressing::of(obj).conditions, READY).map(|c| c.reason.clone());
    let not_granted = Condition::new(READY, false, ADOPTION_NOT_GRANTED, &message);
    writes.conditions(own, obj, &[not_granted]).await?;
    if before.as_deref() != Some(ADOPTION_NOT_GRANTED) {
        tracing::warn!(kind = %writes.events.kind(), object = %format!("{ns}/{}", obj.name_any()), "made by another provider; adoption not granted in its namespace");
        writes
            .events
            .publish(obj, &Event::warning(ADOPTION_NOT_GRANTED, &message))
            .await;
    }
    Ok(Action::requeue(RECHECK))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_previous_providers_finalizer_is_named_by_kind_and_group() {
        let kind = ApiResource {
            group: "infrastructure.cluster.x-k8s.io".into(),
            version: "v1alpha2".into(),
            api_version: "infrastructure.cluster.x-k8s.io/v1alpha2".into(),
            kind: "ProxmoxMachine".into(),
            plural: "proxmoxmachines".into(),
        };
        assert_eq!(
            previous_finalizer(&kind),
            "proxmoxmachine.infrastructure.cluster.x-k8s.io"
        );
    }

    fn machine(created: &str, provider_id: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha2",
            "kind": "ProxmoxMachine",
            "metadata": {"name": "m", "namespace": "team-a", "uid": "u-1",
                         "creationTimestamp": created},
            "spec": {"providerID": provider_id},
        }))
        .unwrap()
    }

    #[test]
    fn a_grant_is_narrowed_by_creation_time_and_provider_id() {
        let old = machine("2026-11-01T00:00:00Z", "proxmox://a");
        let new = machine("2026-12-06T00:00:00Z", "proxmox://b");
        let (mut namespaces, mut limits) = (Vec::new(), AdoptionLimits::default());
        let granted = |namespaces: &[String], limits: &AdoptionLimits, obj| {
            grants_for(namespaces, limits, obj).adoption
        };
        assert!(
            !granted(&namespaces, &limits, &old),
            "nothing without a namespace grant"
        );
        namespaces = vec!["team-a".into()];
        assert!(granted(&namespaces, &limits, &old) && granted(&namespaces, &limits, &new));
        limits.created_before =
            Some(serde_json::from_value(serde_json::json!("2026-12-01T00:00:00Z")).unwrap());
        assert!(granted(&namespaces, &limits, &old) && !granted(&namespaces, &limits, &new));
        limits.created_before = None;
        limits.provider_ids = vec!["proxmox://b".into()];
        assert!(!granted(&namespaces, &limits, &old) && granted(&namespaces, &limits, &new));
    }

    #[test]
    fn an_object_names_unrecorded_infrastructure_whatever_its_annotations() {
        let mut m = machine("2026-11-01T00:00:00Z", "proxmox://a");
        m.annotations_mut()
            .insert(objects::OWNERSHIP_ID_ANNOTATION.into(), "u-1.signed".into());
        assert!(names_unrecorded(&m, None));
        assert!(!names_unrecorded(&m, Some("state")));
        assert!(!moved(&m, "u-1") && moved(&m, "u-0"));
        m.data["spec"] = serde_json::json!({});
        assert!(!names_unrecorded(&m, None));
    }

    #[test]
    fn adoption_is_granted_per_namespace_or_everywhere() {
        let mut namespaces: Vec<String> = Vec::new();
        assert!(!may_adopt(&namespaces, "team-a"));
        namespaces = vec!["team-a".into()];
        assert!(may_adopt(&namespaces, "team-a") && !may_adopt(&namespaces, "team-b"));
        namespaces = vec!["*".into()];
        assert!(may_adopt(&namespaces, "team-b"));
    }
}
