//! A byte bound on what the caches keep of each object (`--object-max-kib`).
//!
//! The controllers cache every object of their kinds and of the Cluster API kinds they
//! read, for as long as the object exists. A tenant writes those objects, and the API
//! server takes up to about 1.5 MiB each (a free-text spec field, a large annotation,
//! thousands of labels): a few hundred of them would hold the manager past its memory
//! limit, and it would restart and list them again. So an object whose tenant-written
//! parts (every field but `status`, which is the manager's own output, and the
//! annotations, labels, owner references and finalizers) are over the bound is cached
//! without its largest parts, and marked ([`Oversized`]):
//!
//! - one of our kinds gets no plugin call: `Ready=False`, reason `ObjectTooLarge`,
//!   naming the bound and its flag, and a Warning event ([`refuse`]; a template, which
//!   has no conditions, gets the event). A tenant who shrinks it wakes it through the
//!   watch and it reconciles as before.
//! - a Cluster API object (a Machine, a Cluster) is read from the API server whenever a
//!   reconcile needs it whole (`watch::cached_or_read`): it is not ours to refuse.
use std::sync::atomic::{AtomicUsize, Ordering};

use hyperplug_runtime::bindings::identity::KindRole;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};

use crate::controller::error::Result;
use crate::controller::objects;
use crate::controller::write::Writes;
use crate::controller::write::conditions::{self, Condition, READY};
use crate::controller::write::events::Event;
use crate::status::{Progressing, Status};

/// Default of `--object-max-kib`. The largest objects of the release's templates and
/// tests are under 7 KiB (the ClusterClass; a machine template is under 1 KiB):
/// ten times that leaves room for long SSH key lists, conversion data and Cluster
/// API's annotations, and 1,000 objects at the bound are 64 MiB.
pub const DEFAULT_OBJECT_MAX_KIB: u64 = 64;
/// Condition and event reason of an object over the bound.
pub const OBJECT_TOO_LARGE: &str = "ObjectTooLarge";
/// The flag that sets the bound, as messages name it.
const FLAG: &str = "--object-max-kib";
/// Parts named in a message (the rest are counted).
const NAMED_PARTS: usize = 3;

/// The bound in bytes. Process-wide: objects are packed as the watches deserialize
/// them, where nothing else can be handed in; one manager runs per process, and
/// `controller::run` sets it from its options before any watch starts.
static MAX_BYTES: AtomicUsize = AtomicUsize::new((DEFAULT_OBJECT_MAX_KIB as usize) << 10);

pub fn set_bound(bytes: usize) {
    MAX_BYTES.store(bytes, Ordering::Relaxed);
}

pub fn bound() -> usize {
    MAX_BYTES.load(Ordering::Relaxed)
}

/// What an object over the bound was cached without.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Oversized {
    /// The bytes of its tenant-written parts, as listed or watched.
    pub bytes: usize,
    /// The bound then.
    pub max: usize,
    /// The parts left out, e.g. `spec, annotation a and 2 more` (bounded, whatever the
    /// object).
    pub dropped: Box<str>,
}

impl Oversized {
    /// The condition's message, for an object being deleted or not.
    pub fn message(&self, deleting: bool) -> String {
        let deleting = if deleting {
            " It is being deleted: its infrastructure is deleted once it is under the bound again."
        } else {
            ""
        };
        format!(
            "this object's fields, annotations and labels take {} bytes, over the bound of {} KiB per object ({FLAG}): the manager keeps it without {} and calls no plugin for it. Make it smaller (or raise {FLAG}).{deleting}",
            self.bytes,
            self.max >> 10,
            self.dropped
        )
    }
}

/// A part of an object the bound counts.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    /// A top-level field other than `apiVersion`, `kind`, `metadata` and `status`.
    Field(String),
    Annotation(String),
    Labels,
    Owners,
    Finalizers,
}

impl Part {
    fn name(&self) -> String {
        match self {
            Part::Field(f) => f.clone(),
            Part::Annotation(a) => format!("annotation {a}"),
            Part::Labels => "its labels".into(),
            Part::Owners => "its owner references".into(),
            Part::Finalizers => "its finalizers".into(),
        }
    }
}

/// Drop `obj`'s largest parts until what is left is within `max` bytes; what was left
/// out, if anything. `managedFields` and the last-applied annotation are gone already
/// (`packed::strip`).
pub fn trim(obj: &mut DynamicObject, max: usize) -> Option<Oversized> {
    let mut parts = parts(obj);
    let bytes: usize = parts.iter().map(|(n, _)| n).sum();
    if bytes <= max {
        return None;
    }
    // Largest first: the fewest parts go, and what a reconcile reads that is small (a
    // Machine's infrastructureRef, an ownership id) most likely stays.
    parts.sort_by_key(|p| std::cmp::Reverse(p.0));
    let (mut left, mut dropped) = (bytes, Vec::new());
    for (size, part) in parts {
        if left <= max {
            break;
        }
        left -= size;
        remove(obj, &part);
        dropped.push(part);
    }
    let mut names: Vec<String> = dropped.iter().take(NAMED_PARTS).map(Part::name).collect();
    if dropped.len() > NAMED_PARTS {
        names.push(format!("{} more", dropped.len() - NAMED_PARTS));
    }
    let dropped = match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, first)) => format!("{} and {last}", first.join(", ")),
        None => String::new(),
    };
    Some(Oversized {
        bytes,
        max,
        dropped: dropped.into(),
    })
}

/// Every part the bound counts, with its bytes (as JSON, near enough).
fn parts(obj: &DynamicObject) -> Vec<(usize, Part)> {
    let mut parts = Vec::new();
    if let Some(fields) = obj.data.as_object() {
        for (k, v) in fields.iter().filter(|(k, _)| *k != "status") {
            parts.push((k.len() + json_len(v), Part::Field(k.clone())));
        }
    }
    for (k, v) in obj.annotations() {
        parts.push((k.len() + v.len(), Part::Annotation(k.clone())));
    }
    let m = &obj.metadata;
    let labels: usize = obj.labels().iter().map(|(k, v)| k.len() + v.len()).sum();
    let owners = m.owner_references.as_ref().map_or(0, json_len);
    let finalizers: usize = obj.finalizers().iter().map(String::len).sum();
    for (size, part) in [
        (labels, Part::Labels),
        (owners, Part::Owners),
        (finalizers, Part::Finalizers),
    ] {
        if size > 0 {
            parts.push((size, part));
        }
    }
    parts
}

fn remove(obj: &mut DynamicObject, part: &Part) {
    let m = &mut obj.metadata;
    match part {
        Part::Field(f) => {
            if let Some(fields) = obj.data.as_object_mut() {
                fields.remove(f);
            }
        }
        Part::Annotation(a) => {
            if let Some(annotations) = m.annotations.as_mut() {
                annotations.remove(a);
            }
        }
        Part::Labels => m.labels = None,
        Part::Owners => m.owner_references = None,
        Part::Finalizers => m.finalizers = None,
    }
}

/// The length of `value` as compact JSON, counted without building the text.
fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// React to one of our objects over the bound: no plugin call (nothing it waited for is
/// watched: the caller forgets that first); `Ready=False` (`ObjectTooLarge`) saying why
/// and what to do, and a Warning event when that starts. A template, which has no
/// conditions, gets the event (and a log line) only. Deleting it waits too: what the
/// plugin would delete is known only from the spec the bound left out.
pub(crate) async fn refuse(
    writes: &Writes,
    client: &Client,
    kind: &ApiResource,
    role: KindRole,
    obj: &DynamicObject,
    over: &Oversized,
) -> Result<Action> {
    let message = over.message(obj.metadata.deletion_timestamp.is_some());
    let starts = if role == KindRole::InfraMachineTemplate {
        // No condition remembers it: an event each time it changes (and stays over).
        true
    } else {
        let before =
            conditions::find(&Progressing::of(obj).conditions, READY).map(|c| c.reason.clone());
        let own = objects::api(client, kind, &obj.namespace().unwrap_or_default());
        let too_large = Condition::new(READY, false, OBJECT_TOO_LARGE, &message);
        writes.conditions(&own, obj, &[too_large]).await?;
        before.as_deref() != Some(OBJECT_TOO_LARGE)
    };
    if starts {
        tracing::warn!(kind = %kind.kind, object = %objects::key(obj), bytes = over.bytes, max_bytes = over.max, "object over --object-max-kib; not calling the plugin");
        writes
            .events
            .publish(obj, &Event::warning(OBJECT_TOO_LARGE, &message))
            .await;
    }
    // A change of the object wakes it (what was left out comes back under the bound).
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::{ApiResource, GroupVersionKind};
    use serde_json::json;

    fn machine(description: usize, annotation: usize) -> DynamicObject {
        let gvk = GroupVersionKind::gvk("infrastructure.cluster.x-k8s.io", "v1alpha1", "M");
        let mut o = DynamicObject::new("m", &ApiResource::from_gvk(&gvk));
        o.metadata.annotations = Some(
            [
                ("big".to_string(), "a".repeat(annotation)),
                ("small".to_string(), "s".into()),
            ]
            .into(),
        );
        o.metadata.labels = Some([("cluster.x-k8s.io/cluster-name".into(), "c".into())].into());
        o.data = json!({
            "spec": {"templateID": 9000, "description": "d".repeat(description)},
            "status": {"ready": true, "pluginState": "x".repeat(200_000)},
        });
        o
    }

    #[test]
    fn an_object_within_the_bound_is_kept_whole_and_status_does_not_count() {
        let mut o = machine(1000, 1000);
        let before = o.clone();
        assert_eq!(trim(&mut o, 4096), None);
        assert_eq!(o.data, before.data);
        assert_eq!(o.metadata, before.metadata);
    }

    #[test]
    fn the_largest_parts_go_first_until_the_rest_fits() {
        let mut o = machine(1 << 20, 1000);
        let over = trim(&mut o, 64 << 10).expect("over");
        assert!(over.bytes > 1 << 20, "{over:?}");
        assert_eq!(&*over.dropped, "spec");
        assert!(o.data.get("spec").is_none());
        assert_eq!(
            o.data["status"]["ready"], true,
            "the manager's own output stays"
        );
        assert_eq!(o.annotations().len(), 2);
        assert_eq!(o.labels().len(), 1);

        // Over with a large annotation as well: both go, the small ones stay.
        let mut o = machine(100 << 10, 100 << 10);
        let over = trim(&mut o, 64 << 10).unwrap();
        assert!(
            &*over.dropped == "spec and annotation big"
                || &*over.dropped == "annotation big and spec",
            "{over:?}"
        );
        assert_eq!(o.annotations().keys().collect::<Vec<_>>(), ["small"]);
    }

    #[test]
    fn the_message_names_the_bound_the_flag_and_what_was_left_out_in_bounded_words() {
        let mut o = machine(10, 10);
        let many: std::collections::BTreeMap<String, String> = (0..1000)
            .map(|i| (format!("a{i:04}"), "v".repeat(100)))
            .collect();
        o.metadata.annotations = Some(many);
        let over = trim(&mut o, 1024).unwrap();
        assert!(over.dropped.ends_with("more"), "{}", over.dropped);
        assert!(over.dropped.len() < 200, "{}", over.dropped);
        let message = over.message(false);
        assert!(
            message.contains("over the bound of 1 KiB per object (--object-max-kib)"),
            "{message}"
        );
        assert!(over.message(true).contains("being deleted"));
    }
}
