//! The observer: one look at a PVE cluster for every machine waiting on it, instead of
//! each machine polling its own task every second.
//!
//! A step that started a task names it as its wait (`task:<UPID>`,
//! `machine::tasks::waits_for`). `GET /cluster/tasks` lists every node's running tasks
//! and its newest finished ones in one call; a waited-for task that is not listed as
//! running has ended (or left the list's window of finished tasks): its key fires and
//! the machine's next call reads the task's status and goes on. Keys of any other shape
//! are not judged (their machines come back on their requeue).
use std::collections::HashSet;

use guest_kit::observer::{Observation, ObserveRequest};
use guest_kit::transient;
use guest_kit::types::PluginError;
use serde_json::Value;

use crate::api::Pve;

/// What the key of a wait on a task starts with (then the UPID).
pub const TASK_KEY_PREFIX: &str = "task:";

pub fn observe(req: ObserveRequest) -> Result<Observation, PluginError> {
    if !req.keys.iter().any(|k| k.starts_with(TASK_KEY_PREFIX)) {
        return Ok(Observation { fired: vec![] });
    }
    let tasks = Pve::new(&req.credentials)
        .get("/cluster/tasks")
        .map_err(|e| e.classify("listing the cluster's tasks"))?;
    let Value::Array(tasks) = tasks else {
        return Err(transient(
            format!("unreadable cluster task list: {tasks}"),
            None,
        ));
    };
    Ok(Observation {
        fired: ended(&req.keys, &tasks),
    })
}

/// The task keys among `keys` whose task `tasks` (a `/cluster/tasks` reply) does not
/// show running: finished (it has an `endtime`) or no longer listed.
fn ended(keys: &[String], tasks: &[Value]) -> Vec<String> {
    let running: HashSet<&str> = tasks
        .iter()
        .filter(|t| t.get("endtime").is_none_or(Value::is_null))
        .filter_map(|t| t.get("upid").and_then(Value::as_str))
        .collect();
    keys.iter()
        .filter(|k| {
            k.strip_prefix(TASK_KEY_PREFIX)
                .is_some_and(|upid| !running.contains(upid))
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const RUNNING: &str = "UPID:pve1:00001234:00000001:65000000:qmclone:9000:root@pam:";
    const FINISHED: &str = "UPID:pve2:00001235:00000001:65000001:qmstart:101:root@pam:";
    const GONE: &str = "UPID:pve1:00001236:00000001:64000000:qmdestroy:102:root@pam:";

    fn keys(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn finished_and_unlisted_tasks_fire_running_ones_do_not() {
        let tasks = vec![
            json!({"upid": RUNNING, "node": "pve1", "starttime": 1}),
            json!({"upid": FINISHED, "node": "pve2", "starttime": 1, "endtime": 2, "status": "OK"}),
        ];
        let fired = ended(
            &keys(&[
                &format!("task:{RUNNING}"),
                &format!("task:{FINISHED}"),
                &format!("task:{GONE}"),
            ]),
            &tasks,
        );
        assert_eq!(
            fired,
            keys(&[&format!("task:{FINISHED}"), &format!("task:{GONE}")])
        );
    }

    #[test]
    fn keys_of_another_shape_are_not_judged() {
        assert!(ended(&keys(&["vm:101", "task"]), &[]).is_empty());
    }
}
