pub mod oversized;
pub(crate) mod packed;
pub(crate) mod triggers;
pub(crate) mod watch;
