//! The write path: how a reconcile writes to the objects of its kind and says what it
//! did. Every write goes through [`Writes`], which patches (`patch`: a status, a
//! condition, a spec field, the finalizer) and records what the patch made in the same
//! call, so no write can leave the cache's marks (`written`) behind; the conditions
//! they carry (`conditions`), the events about an object (`events`), and the machine
//! statuses held back to be written with a later step (`coalesce`).
//!
//! May import: `objects`, `error`, and `schedule` (the holds' delays). Never the rooms
//! above it (`cache`, `trust`, `call`, `reconcile`), nor a controller's context: what a
//! write needs is handed to it ([`Writes`]).
pub(crate) mod coalesce;
pub mod conditions;
pub(crate) mod events;
mod patch;
pub(crate) mod written;

use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use serde_json::Value;

use crate::controller::error::Result;
use crate::status::Status;
use conditions::Condition;
use events::Events;
use written::WrittenAt;

/// What every write to one kind's objects goes with, besides the object's API: the
/// kind's events, and the marks of our writes that the cache reads to know whether a
/// cached object is current. One per controller, shared by all its reconciles.
pub(crate) struct Writes {
    pub events: Events,
    pub written: WrittenAt,
}

/// The one write path: each write to an object of ours, with what it came to recorded
/// in the marks (the version it made; a failed one leaves the object unsure, as its
/// answer may be lost after it was applied).
impl Writes {
    /// `new` as `obj`'s status: a merge patch of what differs (`patch::status`).
    pub async fn status<T: Status>(
        &self,
        own: &Api<DynamicObject>,
        obj: &DynamicObject,
        new: &T,
    ) -> Result<()> {
        self.record(obj, patch::status(own, obj, new).await)
    }

    /// `updates` merged into `obj`'s conditions (one status write, none when unchanged).
    pub async fn conditions(
        &self,
        own: &Api<DynamicObject>,
        obj: &DynamicObject,
        updates: &[Condition],
    ) -> Result<()> {
        self.record(obj, patch::conditions(own, obj, updates).await)
    }

    /// Our finalizer (in place of `replaces`, a former provider's) and the ownership id
    /// `signed_id` when not stored yet, in one write (`patch::take_ownership`).
    pub async fn take_ownership(
        &self,
        own: &Api<DynamicObject>,
        obj: &DynamicObject,
        finalizer: &str,
        replaces: &str,
        signed_id: Option<&str>,
    ) -> Result<()> {
        let written = patch::take_ownership(own, obj, finalizer, replaces, signed_id).await;
        self.record(obj, written)
    }

    /// One spec field, with `annotation` in the same write (`patch::spec_field`); the
    /// object as the API server answered (`None`: nothing differed, nothing written).
    pub async fn spec_field(
        &self,
        own: &Api<DynamicObject>,
        obj: &DynamicObject,
        key: &str,
        value: Value,
        annotation: Option<(&str, &str)>,
    ) -> Result<Option<DynamicObject>> {
        let patched = patch::spec_field(own, obj, key, value, annotation).await;
        let version = patched
            .as_ref()
            .map(|p| p.as_ref().and_then(|p| p.resource_version()));
        self.written.record(obj, &version);
        patched
    }

    /// Our finalizer off `obj`, when it is there.
    pub async fn remove_finalizer(
        &self,
        own: &Api<DynamicObject>,
        obj: &DynamicObject,
        finalizer: &str,
    ) -> Result<()> {
        self.record(obj, patch::remove_finalizer(own, obj, finalizer).await)
    }

    /// Tell the marks what a write of `obj` came to, and hand back whether it failed.
    fn record(&self, obj: &DynamicObject, written: Result<Option<String>>) -> Result<()> {
        self.written.record(obj, &written);
        written.map(drop)
    }
}
