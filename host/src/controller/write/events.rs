//! Kubernetes events on our objects: milestones (provisioned, deleted, an InfraCluster's
//! phases), every terminal failure, one Warning when a drift starts and one Normal when
//! it is resolved.
use kube::Resource;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::events::{EventType, Recorder};

use super::conditions;

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

/// Where one kind's events go: published as the manager (`recorder`), each naming its
/// object as one of `resource`.
pub struct Events {
    recorder: Recorder,
    resource: ApiResource,
}

impl Events {
    pub fn new(recorder: Recorder, resource: ApiResource) -> Events {
        Events { recorder, resource }
    }

    /// The kind whose objects the events are about (as messages and logs name it).
    pub fn kind(&self) -> &str {
        &self.resource.kind
    }

    pub async fn publish(&self, obj: &DynamicObject, event: &Event) {
        let reference = obj.object_ref(&self.resource);
        let event = kube::runtime::events::Event {
            type_: if event.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: event.reason.chars().take(128).collect(),
            note: note(&event.note),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &reference).await {
            tracing::debug!(error = %e, "cannot publish event");
        }
    }

    pub async fn publish_all(&self, obj: &DynamicObject, events: &[Event]) {
        for event in events {
            self.publish(obj, event).await;
        }
    }
}

/// Longest note the API server takes (events.k8s.io/v1 counts bytes).
const MAX_NOTE_BYTES: usize = 1024;

/// An event's note: none when empty, else cut to what the API server takes (with room
/// for the `…` that marks a cut). Cutting at 1000 characters let a note of
/// multibyte text past 1024 bytes, and the API server refused the event.
fn note(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| conditions::truncate(text, MAX_NOTE_BYTES - '…'.len_utf8()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_fits_in_what_the_api_server_takes_in_bytes() {
        assert_eq!(note(""), None);
        assert_eq!(note("short").as_deref(), Some("short"));
        for text in ["x".repeat(5000), "é".repeat(1000), "🙂".repeat(1000)] {
            let cut = note(&text).unwrap();
            assert!(cut.len() <= MAX_NOTE_BYTES, "{} bytes", cut.len());
            assert!(cut.ends_with('…'));
        }
    }
}
