//! Objects another provider of the same kinds made (a team switching to hyperplug keeps
//! its clusters): an InfraMachine marked provisioned, or with a provider ID, of which the
//! manager has no record (no plugin state) and that carries no ownership id of ours.
//!
//! Anyone who may edit an InfraMachine may write what such a machine carries (a provider
//! ID, a VM id), so a tenant could name someone else's infrastructure with it. The plugin
//! is therefore called for such a machine only in namespaces an administrator granted
//! adoption in (`--adopt-namespace`, a manager flag no tenant can change), and even there
//! it adopts only what it proves to be the machine's from the infrastructure itself
//! (e.g. a VM's name and SMBIOS UUID); what it cannot prove it reports and leaves alone.
//! Once taken, the object carries our ownership id and finalizer, and the previous
//! provider's finalizer (named `<kind>.<group>` by the usual convention) is dropped: two
//! providers of the same CRDs never run side by side, so nothing would ever remove it.
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::controller::Action;

use super::conditions::{self, Condition, READY};
use super::context::{Context, ManagerOptions};
use super::error::Result;
use super::events::{self, Event};
use super::objects::{self, OWNERSHIP_ID_ANNOTATION};
use super::ownership::RECHECK;
use super::patch;
use crate::status::{Progressing, Status};

/// Condition reason of a machine another provider made, in a namespace without a grant.
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

/// Whether `obj` claims infrastructure made elsewhere: marked provisioned or carrying a
/// provider ID (which we set only once we have a record), without a record of ours and
/// never touched by us (no ownership id). The provider ID alone counts, as a user may
/// write it on a new object: it is a claim to someone's infrastructure all the same.
pub fn made_elsewhere(obj: &DynamicObject, plugin_state: Option<&str>) -> bool {
    let claims = objects::provisioned(obj)
        || objects::str_field(obj, "spec.providerID").is_some_and(|id| !id.is_empty());
    claims && plugin_state.is_none() && !objects::has_annotation(obj, OWNERSHIP_ID_ANNOTATION)
}

impl ManagerOptions {
    /// Whether an administrator granted adoption in namespace `ns`.
    pub fn may_adopt(&self, ns: &str) -> bool {
        self.adopt_namespaces.iter().any(|n| n == "*" || n == ns)
    }
}

/// No call for a machine another provider made in a namespace without a grant: a
/// `Ready` condition and a Warning event say why and what the administrator can do.
pub async fn not_granted(
    ctx: &Context,
    own: &Api<DynamicObject>,
    obj: &DynamicObject,
) -> Result<Action> {
    let ns = obj.namespace().unwrap_or_default();
    let message = format!(
        "{} {ns}/{} names infrastructure another provider made (it is marked provisioned or has a spec.providerID, and this manager has no record of it): nothing is done for it until an administrator grants adoption in namespace {ns} by starting the manager with --adopt-namespace={ns}. The plugin then adopts what it proves to be this machine's, and only that.",
        ctx.kind.kind,
        obj.name_any()
    );
    let before =
        conditions::find(&Progressing::of(obj).conditions, READY).map(|c| c.reason.clone());
    let written = patch::conditions(
        own,
        obj,
        &[Condition::new(READY, false, ADOPTION_NOT_GRANTED, &message)],
    )
    .await;
    ctx.coalescer.record(obj, &written);
    written?;
    if before.as_deref() != Some(ADOPTION_NOT_GRANTED) {
        tracing::warn!(kind = %ctx.kind.kind, object = %format!("{ns}/{}", obj.name_any()), "made by another provider; adoption not granted in its namespace");
        events::publish(ctx, obj, &Event::warning(ADOPTION_NOT_GRANTED, &message)).await;
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

    #[test]
    fn adoption_is_granted_per_namespace_or_everywhere() {
        let mut o = ManagerOptions::default();
        assert!(!o.may_adopt("team-a"));
        o.adopt_namespaces = vec!["team-a".into()];
        assert!(o.may_adopt("team-a") && !o.may_adopt("team-b"));
        o.adopt_namespaces = vec!["*".into()];
        assert!(o.may_adopt("team-b"));
    }
}
