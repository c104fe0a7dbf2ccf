//! Kubernetes events on our objects: milestones (provisioned, deleted, an InfraCluster's
//! phases), every failure, every drift.
use kube::Resource;
use kube::api::DynamicObject;
use kube::runtime::events::{Event, EventType};

use super::context::Context;

pub async fn publish(ctx: &Context, obj: &DynamicObject, reason: &str, note: &str, warning: bool) {
    let reference = obj.object_ref(&ctx.resource);
    let event = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.chars().take(128).collect(),
        note: (!note.is_empty()).then(|| note.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &reference).await {
        tracing::debug!(error = %e, "cannot publish event");
    }
}
