//! The `observer` export of a plugin whose progress names no waits: with no keys of its
//! own there is nothing to fire, and its objects come back on `requeue-after-ms`.
use crate::observer::{Observation, ObserveRequest};
use crate::types::PluginError;

/// An observation that fires nothing.
pub fn nothing(_req: ObserveRequest) -> Result<Observation, PluginError> {
    Ok(Observation { fired: vec![] })
}
