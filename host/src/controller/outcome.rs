//! What a plugin call came to, in the controllers' terms.
use hyperplug_runtime::{CallError, PluginError};

use super::conditions::reasons;
use super::error::Error;

pub enum Outcome<T> {
    Done(T),
    Failed(Error),
}

/// Sandbox failures that are deterministic for the same input (a trap, a panic, a
/// limit) are terminal until the spec changes; a timeout may pass on its own.
pub fn of<T>(result: Result<Result<T, PluginError>, CallError>) -> Outcome<T> {
    match result {
        Ok(Ok(value)) => Outcome::Done(value),
        Ok(Err(PluginError::Transient(e))) => Outcome::Failed(Error::Transient(e.message)),
        Ok(Err(PluginError::Terminal(e))) => Outcome::Failed(Error::Terminal {
            reason: e.reason,
            message: e.message,
        }),
        Ok(Err(PluginError::InvalidSpec(e))) => Outcome::Failed(Error::Terminal {
            reason: reasons::INVALID_SPEC.into(),
            message: format!("{}: {}", e.field, e.message),
        }),
        Err(e @ CallError::Timeout { .. }) => Outcome::Failed(Error::Call(e)),
        Err(e @ CallError::Credentials { .. }) => Outcome::Failed(Error::Terminal {
            reason: reasons::CREDENTIALS_ERROR.into(),
            message: e.to_string(),
        }),
        Err(e) => Outcome::Failed(Error::Terminal {
            reason: reasons::PLUGIN_FAILURE.into(),
            message: e.to_string(),
        }),
    }
}
