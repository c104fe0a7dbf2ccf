//! The write path: how a reconcile writes to the objects of its kind and says what it
//! did. Patches of a status, a condition, a spec field or the finalizer (`patch`), the
//! conditions they carry (`conditions`), the events about an object (`events`), the
//! marks that tell the cache which versions hold our writes (`written`), and the
//! machine statuses held back to be written with a later step (`coalesce`).
//!
//! May import: `objects`, `error`, and `schedule` (the holds' delays). Never the rooms
//! above it (`cache`, `trust`, `call`, `reconcile`), nor a controller's context: what a
//! write needs is handed to it ([`Writes`]).
pub(crate) mod coalesce;
pub mod conditions;
pub(crate) mod events;
pub(crate) mod patch;
pub(crate) mod written;

use events::Events;
use written::WrittenAt;

/// What every write to one kind's objects goes with, besides the object's API: the
/// kind's events, and the marks of our writes that the cache reads to know whether a
/// cached object is current. One per controller, shared by all its reconciles.
pub(crate) struct Writes {
    pub events: Events,
    pub written: WrittenAt,
}
