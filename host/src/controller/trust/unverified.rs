//! What the controllers do with an object whose ownership id does not verify.
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::Action;

use hyperplug_runtime::Plugin;

use super::ownership::OWNERSHIP_UNVERIFIED;
use crate::controller::error::Result;
use crate::controller::objects::finalizer;
use crate::controller::schedule::requeue::RECHECK;
use crate::controller::write::Writes;
use crate::controller::write::conditions::{self, Condition, READY};
use crate::controller::write::events::Event;
use crate::status::{Progressing, Status};

/// React to an object whose ownership does not verify: no plugin call; a `Ready`
/// condition and a Warning event that say why and what to do. A deleting object keeps
/// our finalizer (nothing is deleted for an unproven owner) until its ownership
/// verifies again or someone removes the finalizer to abandon what it made.
pub async fn refuse(
    writes: &Writes,
    plugin: &Plugin,
    own: &Api<DynamicObject>,
    obj: &DynamicObject,
    message: String,
    recheck: Duration,
) -> Result<Action> {
    let fin = finalizer(plugin);
    let message = if obj.metadata.deletion_timestamp.is_some() && obj.finalizers().contains(&fin) {
        format!(
            "{message} It is being deleted: nothing is deleted in the infrastructure until its ownership verifies again; to abandon what it made instead (left as it is), remove the finalizer {fin}."
        )
    } else {
        message
    };
    let before =
        conditions::find(&Progressing::of(obj).conditions, READY).map(|c| c.reason.clone());
    let unverified = Condition::new(READY, false, OWNERSHIP_UNVERIFIED, &message);
    writes.conditions(own, obj, &[unverified]).await?;
    if before.as_deref() != Some(OWNERSHIP_UNVERIFIED) {
        tracing::warn!(kind = %writes.events.kind(), object = %format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any()), "ownership id does not verify; not calling the plugin");
        writes
            .events
            .publish(obj, &Event::warning(OWNERSHIP_UNVERIFIED, &message))
            .await;
    }
    // The sooner look (keys read moments ago) only on the first refusal: an object
    // refused before is not worth a reconcile every few seconds.
    if before.as_deref() == Some(OWNERSHIP_UNVERIFIED) {
        return Ok(Action::requeue(recheck.max(RECHECK)));
    }
    Ok(Action::requeue(recheck))
}
