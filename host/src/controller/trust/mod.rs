//! Trust: what an object may name as its own. Ownership ids only the manager can sign
//! (`ownership`), what a reconcile does with an object whose id does not verify
//! (`unverified`), and objects that name infrastructure the manager has no record of,
//! called only where an administrator granted adoption (`adoption`).
//!
//! May import: `write` (a refusal's condition and event), `schedule` (when to look
//! again), `objects`, `error`. Never `call` or `reconcile`.
pub mod adoption;
pub mod ownership;
pub(crate) mod unverified;
