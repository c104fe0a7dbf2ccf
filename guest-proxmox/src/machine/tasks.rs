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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_upid_is_taken_from_a_reply_only_when_it_is_one() {
        let upid = "UPID:pve1:000A1B2C:0001:65000000:qmclone:100:root@pam:";
        assert_eq!(upid_of(json!(upid)).as_deref(), Some(upid));
        assert_eq!(upid_of(json!(null)), None);
        assert_eq!(upid_of(json!("OK")), None);
    }

    #[test]
    fn a_failed_task_is_terminal_only_when_its_text_says_retrying_cannot_help() {
        match task_failed("resizing scsi0", "shrinking disks is not supported") {
            Some(PluginError::Terminal(t)) => {
                assert_eq!(t.reason, "InvalidConfiguration");
                assert_eq!(
                    t.message,
                    "resizing scsi0: shrinking disks is not supported"
                );
            }
            other => panic!("expected a terminal error, got {other:?}"),
        }
        assert!(task_failed("starting the VM", "got timeout").is_none());
    }
}
