//! Following PVE tasks by UPID: named as the wait of the step that started one
//! (`task:<UPID>`), so the host's observer (`crate::observer`) wakes the machine when
//! the task ends instead of the step being called again on a timer. The woken step
//! looks for the task's effect first (a written config, an answering agent, a VM gone
//! from the listing) and polls the task's status only when the effect is not there: to
//! tell "still running" (woken by the fallback timer) from "failed, and why".

use guest_kit::terminal;
use guest_kit::types::{PluginError, Wait};
use serde_json::Value;

use crate::api::{Pve, Task, classify_message};
use crate::observer::TASK_KEY_PREFIX;

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
        // PVE no longer knows the task (it keeps a node's recent ones): it has ended, and
        // the step judges by its effect.
        Err(e) if e.is_no_such_task() => Ok(Ok(true)),
        Err(e) => Err(e.classify(context)),
    }
}

/// A failed task: terminal when PVE's text says retrying will not help.
pub(super) fn task_failed(context: &str, msg: &str) -> Option<PluginError> {
    classify_message(msg).map(|reason| terminal(reason, format!("{context}: {msg}")))
}

/// How long a step that waits on a task may go uncalled: the observer wakes it when the
/// task ends; this is the fallback should no observation come (a host without the
/// observer, an endpoint the observer cannot read).
const TASK_FALLBACK_MS: u64 = 15_000;

/// The key of the wait for the task `upid` (`crate::observer` reads it back).
fn task_key(upid: &str) -> String {
    format!("{TASK_KEY_PREFIX}{upid}")
}

/// What a step waits for while the task `upid` (if any) runs, and when to call again at
/// the latest: the task's end on `endpoint`, with the requeue stretched to the fallback.
pub(super) fn waits_for(
    upid: Option<&str>,
    endpoint: &str,
    requeue: Option<u64>,
) -> (Vec<Wait>, Option<u64>) {
    match upid {
        Some(upid) => (
            vec![Wait {
                endpoint: endpoint.into(),
                key: task_key(upid),
            }],
            requeue.map(|ms| ms.max(TASK_FALLBACK_MS)),
        ),
        None => (vec![], requeue),
    }
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
    fn a_running_task_is_waited_for_with_a_fallback_requeue() {
        let upid = "UPID:pve1:000A1B2C:0001:65000000:qmclone:100:root@pam:";
        let (waits, requeue) = waits_for(Some(upid), "https://pve:8006", Some(1_000));
        assert_eq!(waits.len(), 1);
        assert_eq!(waits[0].endpoint, "https://pve:8006");
        assert_eq!(waits[0].key, format!("task:{upid}"));
        assert_eq!(requeue, Some(TASK_FALLBACK_MS));
        let (waits, requeue) = waits_for(None, "https://pve:8006", Some(1_000));
        assert!(waits.is_empty());
        assert_eq!(requeue, Some(1_000));
    }

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
