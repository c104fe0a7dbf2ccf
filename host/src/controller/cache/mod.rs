//! The cache: the watches the controllers are woken by and read from, kept lean
//! (`watch`; objects packed as JSON text, `packed`; which changes of other kinds'
//! objects are worth a reconcile, `triggers`), and the byte bound on what they keep of
//! each object, with the refusal of one of ours over it (`oversized`). Whether a cached
//! object holds our last write is told by the write path's marks (`write::written`).
//! What every watch covers (a namespace, a `--watch-filter` value) is the `scope`.
//!
//! May import: `write`, `objects`, `error`. Never `trust`, `call` or `reconcile`.
pub mod oversized;
pub(crate) mod packed;
pub mod scope;
pub(crate) mod triggers;
pub(crate) mod watch;
