//! The observer: one look at a PVE cluster for every machine waiting on it, instead of
//! each machine polling its own task every second.
//!
//! - A step that started a task names it as its wait (`task:<UPID>`,
//!   `machine::tasks::waits_for`). `GET /cluster/tasks` lists every node's running tasks
//!   and its newest finished ones in one call; a waited-for task that is not listed as
//!   running has ended (or left the list's window of finished tasks): its key fires and
//!   the machine's next call looks for the task's effect, reading the task's status only
//!   when the effect is missing.
//! - A ready machine is watched for drift (`vm:<VMID>@<node>#<tag>`, [`vm_key`]): one
//!   `GET /cluster/resources?type=vm` shows every VM's node, power and tags; a VM that is
//!   not listed, not running, on another node, or without the machine's own tag (another
//!   VM under its VMID) fires, and the machine's describe says what happened (drift, or a
//!   migration it follows). So a ready machine needs no periodic describe.
//!
//! Keys of any other shape are not judged (their machines come back on their requeue).
use std::collections::{HashMap, HashSet};

use guest_kit::observer::{Observation, ObserveRequest};
use guest_kit::transient;
use guest_kit::types::PluginError;
use serde_json::Value;

use crate::api::Pve;
use crate::resources::{self, Resource};

/// What the key of a wait on a task starts with (then the UPID).
pub const TASK_KEY_PREFIX: &str = "task:";
/// What the key of a ready VM's watch starts with.
const VM_KEY_PREFIX: &str = "vm:";

/// The watch of a ready machine's VM: `vmid` running on `node`, tagged `tag` (the
/// machine's own tag, see `machine::ownership::uid_tag`).
pub fn vm_key(vmid: u32, node: &str, tag: &str) -> String {
    format!("{VM_KEY_PREFIX}{vmid}@{node}#{tag}")
}

pub fn observe(req: ObserveRequest) -> Result<Observation, PluginError> {
    let pve = Pve::new(&req.credentials);
    let mut fired = vec![];
    if req.keys.iter().any(|k| k.starts_with(TASK_KEY_PREFIX)) {
        let tasks = list(&pve, "/cluster/tasks", "the cluster's tasks")?;
        fired.extend(ended(&req.keys, &tasks));
    }
    if req.keys.iter().any(|k| k.starts_with(VM_KEY_PREFIX)) {
        let vms = resources::list(&pve, "/cluster/resources?type=vm")
            .map_err(|e| e.classify("listing the cluster's VMs"))?;
        fired.extend(changed(&req.keys, &vms));
    }
    Ok(Observation { fired })
}

/// A list reply of `path`.
fn list(pve: &Pve, path: &str, what: &str) -> Result<Vec<Value>, PluginError> {
    match pve
        .get(path)
        .map_err(|e| e.classify(&format!("listing {what}")))?
    {
        Value::Array(items) => Ok(items),
        other => Err(transient(
            format!("unreadable list of {what}: {other}"),
            None,
        )),
    }
}

/// The VM keys among `keys` whose VM `vms` (a `/cluster/resources?type=vm` reply) does
/// not show running on the watched node with the watched tag (a key without `#<tag>`
/// checks no tag).
fn changed(keys: &[String], vms: &[Resource]) -> Vec<String> {
    // By VMID once: every key looks its VM up (10,000 keys against 10,000 VMs would
    // otherwise be 10^8 comparisons, past a call's CPU budget).
    let by_vmid: HashMap<u64, &Resource> = vms
        .iter()
        .filter(|v| v.is("qemu"))
        .filter_map(|v| Some((v.vmid?, v)))
        .collect();
    keys.iter()
        .filter(|k| {
            let Some((vmid, place)) = k
                .strip_prefix(VM_KEY_PREFIX)
                .and_then(|rest| rest.split_once('@'))
            else {
                return false;
            };
            let (node, tag) = match place.split_once('#') {
                Some((node, tag)) => (node, Some(tag)),
                None => (place, None),
            };
            let Ok(vmid) = vmid.parse::<u64>() else {
                return false;
            };
            let listed = by_vmid.get(&vmid);
            !listed.is_some_and(|v| {
                v.node.as_deref() == Some(node)
                    && v.status.as_deref() == Some("running")
                    && tag.is_none_or(|tag| v.has_tag(tag))
            })
        })
        .cloned()
        .collect()
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
    use crate::resources::parsed;

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
        assert!(changed(&keys(&["vm:101", "vm:x@pve1", "task:u"]), &[]).is_empty());
    }

    #[test]
    fn a_watched_vm_fires_when_gone_stopped_moved_or_someone_elses() {
        let vms = vec![
            json!({"type": "qemu", "vmid": 101, "node": "pve1", "status": "running", "tags": "hp-a;hyperplug"}),
            json!({"type": "qemu", "vmid": 106, "node": "pve1", "status": "running", "tags": "hyperplug;hp-other"}),
            json!({"type": "qemu", "vmid": 102, "node": "pve1", "status": "stopped"}),
            json!({"type": "qemu", "vmid": 103, "node": "pve2", "status": "running"}),
            json!({"type": "lxc", "vmid": 105, "node": "pve1", "status": "running"}),
        ];
        let watched = keys(&[
            &vm_key(101, "pve1", "hp-a"),
            &vm_key(102, "pve1", "hp-b"),
            &vm_key(103, "pve1", "hp-c"),
            &vm_key(104, "pve1", "hp-d"),
            &vm_key(105, "pve1", "hp-e"),
            &vm_key(106, "pve1", "hp-f"),
        ]);
        assert_eq!(
            changed(&watched, &parsed(Value::Array(vms))),
            keys(&[
                &vm_key(102, "pve1", "hp-b"),
                &vm_key(103, "pve1", "hp-c"),
                &vm_key(104, "pve1", "hp-d"),
                &vm_key(105, "pve1", "hp-e"),
                &vm_key(106, "pve1", "hp-f"),
            ])
        );
    }
}
