pub(crate) mod backoff;
pub(crate) mod priority;
pub(crate) mod requeue;
pub(crate) mod supervise;
pub(crate) mod waits;
