//! Following PVE tasks by UPID.

use guest_kit::terminal;
use guest_kit::types::PluginError;
use serde_json::Value;

use crate::api::{Pve, Task, classify_message};

/// A task poll: `Ok(true)` done, `Ok(false)` still running, `Err(text)` failed.
pub(super) fn poll(
    pve: &Pve,
    upid: &str,
    context: &str,
) -> Result<Result<bool, String>, PluginError> {
    match pve.task(upid) {
        Ok(Task::Running) => Ok(Ok(false)),
        Ok(Task::Done) => Ok(Ok(true)),
        Ok(Task::Failed(msg)) => Ok(Err(msg)),
        Err(e) => Err(e.classify(context)),
    }
}

/// A failed task: terminal when PVE's text says retrying will not help.
pub(super) fn task_failed(context: &str, msg: &str) -> Option<PluginError> {
    classify_message(msg).map(|reason| terminal(reason, format!("{context}: {msg}")))
}

pub(super) fn upid_of(v: Value) -> Option<String> {
    v.as_str()
        .map(str::to_string)
        .filter(|s| s.starts_with("UPID:"))
}
