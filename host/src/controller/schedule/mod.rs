//! Scheduling: when an object comes back. Every requeue and delay the controllers use
//! (`requeue`), the backoff after failures (`backoff`), the waits a plugin's step names
//! and the observer loops that end them (`waits`), which woken objects go first
//! (`priority`), and the controllers' tasks (`supervise`).
//!
//! May import: `ipam` (what a machine's claims came to decides its next look) and
//! `objects`. Never the rooms above it (`write`, `cache`, `trust`, `call`, `reconcile`).
pub(crate) mod backoff;
pub(crate) mod priority;
pub(crate) mod requeue;
pub(crate) mod supervise;
pub(crate) mod waits;
