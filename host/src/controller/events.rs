//! Kubernetes events on our objects: milestones (provisioned, deleted, an InfraCluster's
//! phases), every terminal failure, one Warning when a drift starts and one Normal when
//! it is resolved.
use kube::Resource;
use kube::api::DynamicObject;
use kube::runtime::events::EventType;

use super::context::Context;

/// What a reconcile decided to write: the status, and the events to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct Report<S> {
    pub status: S,
    pub events: Vec<Event>,
}

/// An event a reconcile decided on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub reason: String,
    pub note: String,
    pub warning: bool,
}

impl Event {
    pub fn normal(reason: &str, note: &str) -> Event {
        Event {
            reason: reason.into(),
            note: note.into(),
            warning: false,
        }
    }

    pub fn warning(reason: &str, note: &str) -> Event {
        Event {
            reason: reason.into(),
            note: note.into(),
            warning: true,
        }
    }
}

pub async fn publish(ctx: &Context, obj: &DynamicObject, event: &Event) {
    let reference = obj.object_ref(&ctx.resource);
    let event = kube::runtime::events::Event {
        type_: if event.warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: event.reason.chars().take(128).collect(),
        note: (!event.note.is_empty()).then(|| event.note.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &reference).await {
        tracing::debug!(error = %e, "cannot publish event");
    }
}

pub async fn publish_all(ctx: &Context, obj: &DynamicObject, events: &[Event]) {
    for event in events {
        publish(ctx, obj, event).await;
    }
}
