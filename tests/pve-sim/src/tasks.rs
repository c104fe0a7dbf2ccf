//! Asynchronous tasks: UPIDs, durations per task type, per-node concurrency, injected
//! failures and slowness, logs and exit statuses.
//!
//! A task is accepted synchronously (the handler returns its UPID) and its `Work` runs
//! against the world when its duration has elapsed and a slot on its node is free. Locks a
//! task holds (`lock: clone`, ...) are config entries the work removes at its end.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::server::Shared;
use crate::state::{World, unix_now, unix_now_ms};

/// What a task does when it runs: gets the world and the injected failure (if the fault
/// dice decided one; the work must then undo what the request did and return it as its
/// error). Returns log lines, or the error that becomes the exit status.
pub type Work = Box<dyn FnOnce(&mut World, Option<String>) -> Result<Vec<String>, String> + Send>;

/// A task as `GET /nodes/{node}/tasks/{upid}/status` shows it.
#[derive(Debug, Clone)]
pub struct Task {
    pub upid: String,
    pub node: String,
    pub kind: String,
    pub id: String,
    pub user: String,
    pub pid: u32,
    pub pstart: u32,
    pub starttime: u64,
    pub endtime: Option<u64>,
    pub exitstatus: Option<String>,
    pub log: Vec<String>,
    /// Waiting for a slot on its node (`node_task_concurrency`).
    pub queued: bool,
    /// Unix milliseconds: accepted, given a node slot, ended (benchmarks need better than
    /// the API's whole seconds).
    pub timing: Timing,
    /// The VM the task works on (a clone's is the new VM, not the template in `id`).
    pub vm: Option<u32>,
}

/// A task's timeline in Unix milliseconds, shown by the inspection routes only.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timing {
    pub submitted_ms: u64,
    pub started_ms: Option<u64>,
    pub ended_ms: Option<u64>,
}

impl Task {
    pub fn running(&self) -> bool {
        self.exitstatus.is_none()
    }

    /// The status object plus what only the simulator knows: whether the task waits for
    /// a node slot, its log, the VM it works on, and its millisecond timeline (for `/_sim/tasks`).
    pub fn inspect_json(&self) -> Value {
        let mut s = self.status_json();
        s["queued"] = json!(self.queued && self.running());
        s["log"] = json!(self.log);
        s["vm"] = json!(self.vm);
        s["submitted_ms"] = json!(self.timing.submitted_ms);
        s["started_ms"] = json!(self.timing.started_ms);
        s["ended_ms"] = json!(self.timing.ended_ms);
        s
    }

    /// The status object.
    pub fn status_json(&self) -> Value {
        let mut v = json!({
            "upid": self.upid,
            "node": self.node,
            "pid": self.pid,
            "pstart": self.pstart,
            "starttime": self.starttime,
            "type": self.kind,
            "id": self.id,
            "user": self.user,
            "status": if self.running() { "running" } else { "stopped" },
        });
        if let Some(e) = &self.exitstatus {
            v["exitstatus"] = json!(e);
        }
        v
    }

    /// The entry in `GET /nodes/{node}/tasks`.
    pub fn list_json(&self) -> Value {
        let mut v = self.status_json();
        if let Some(e) = self.endtime {
            v["endtime"] = json!(e);
            v["status"] = json!(self.exitstatus);
        } else {
            v.as_object_mut().map(|o| o.remove("status"));
        }
        v
    }
}

/// Formats a UPID: `UPID:node:PID:PSTART:STARTTIME:type:id:user:`.
pub fn upid(
    node: &str,
    pid: u32,
    pstart: u32,
    starttime: u64,
    kind: &str,
    id: &str,
    user: &str,
) -> String {
    format!("UPID:{node}:{pid:08X}:{pstart:08X}:{starttime:08X}:{kind}:{id}:{user}:")
}

/// Parsed UPID fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Upid {
    pub node: String,
    pub pid: u32,
    pub pstart: u32,
    pub starttime: u64,
    pub kind: String,
    pub id: String,
    pub user: String,
}

/// Parses a UPID; `None` when malformed.
pub fn parse_upid(s: &str) -> Option<Upid> {
    let rest = s.strip_prefix("UPID:")?.strip_suffix(':')?;
    let mut it = rest.splitn(7, ':');
    let node = it.next()?.to_string();
    let pid = u32::from_str_radix(it.next()?, 16).ok()?;
    let pstart = u32::from_str_radix(it.next()?, 16).ok()?;
    let starttime = u64::from_str_radix(it.next()?, 16).ok()?;
    let kind = it.next()?.to_string();
    let id = it.next()?.to_string();
    let user = it.next()?.to_string();
    Some(Upid {
        node,
        pid,
        pstart,
        starttime,
        kind,
        id,
        user,
    })
}

const MAX_TASKS: usize = 100_000;

/// Task types whose worker holds the VM's config file lock while it runs.
pub const FLOCK_TASKS: &[&str] = &[
    "qmstart",
    "qmstop",
    "qmshutdown",
    "qmreboot",
    "resize",
    "qmdestroy",
    "qmconfig",
    "qmcreate",
];

/// PVE's message when the config file lock cannot be had in time.
pub fn lock_timeout_message(vmid: u32) -> String {
    format!("can't lock file '/var/lock/qemu-server/lock-{vmid}.conf' - got timeout")
}

/// Waits (up to `lock_wait_ms`) for the VM's config file lock and takes it; `false` on
/// timeout.
pub async fn acquire_flock(shared: &Shared, vmid: u32) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(shared.config.lock_wait_ms);
    loop {
        {
            let mut w = shared.lock();
            if !w.flocks.contains(&vmid) {
                w.flocks.insert(vmid);
                return true;
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits (up to `lock_wait_ms`) until nobody holds the VM's config file lock, for
/// synchronous writes; `false` on timeout.
pub async fn wait_flock_free(shared: &Shared, vmid: u32) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(shared.config.lock_wait_ms);
    loop {
        if !shared.lock().flocks.contains(&vmid) {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Registers a task and schedules its work. Returns the UPID.
#[allow(clippy::too_many_arguments)]
pub fn start(
    shared: &Arc<Shared>,
    w: &mut World,
    node: &str,
    kind: &str,
    id: &str,
    user: &str,
    first_log: Vec<String>,
    work: Work,
) -> String {
    let pid = w.pid();
    let pstart = (w.boot.elapsed().as_millis() / 10) as u32 + 1_000_000;
    let starttime = unix_now();
    let upid = upid(node, pid, pstart, starttime, kind, id, user);
    let mut ms = shared.config.task_duration_ms(kind);
    let faults = w.faults.clone();
    if faults.slow_task_rate > 0.0 && w.roll() < faults.slow_task_rate {
        let f = faults.slow_task_factor.unwrap_or(10.0).max(1.0);
        ms = ((ms.max(100)) as f64 * f) as u64;
    }
    let injected =
        (faults.task_failure_rate > 0.0 && w.roll() < faults.task_failure_rate).then(|| {
            faults
                .task_failure_message
                .clone()
                .unwrap_or_else(|| "simulated task failure".into())
        });
    w.tasks.insert(
        upid.clone(),
        Task {
            upid: upid.clone(),
            node: node.into(),
            kind: kind.into(),
            id: id.into(),
            user: user.into(),
            pid,
            pstart,
            starttime,
            endtime: None,
            exitstatus: None,
            log: first_log,
            queued: true,
            timing: Timing {
                submitted_ms: unix_now_ms(),
                ..Timing::default()
            },
            vm: id.parse().ok(),
        },
    );
    w.task_order.push(upid.clone());
    if w.task_order.len() > MAX_TASKS {
        prune(w);
    }
    let flock_vmid = FLOCK_TASKS
        .contains(&kind)
        .then(|| id.parse::<u32>().ok())
        .flatten();
    let sem = shared.node_slots.get(node).cloned();
    let shared2 = shared.clone();
    let mut stop = shared.shutdown.clone();
    let upid2 = upid.clone();
    tokio::spawn(async move {
        let run = async {
            let _permit = match sem {
                Some(s) => s.acquire_owned().await.ok(),
                None => None,
            };
            if let Some(t) = shared2.lock().tasks.get_mut(&upid2) {
                t.queued = false;
                t.timing.started_ms = Some(unix_now_ms());
            }
            // the VM's config file lock (flock), held for the task's life
            let mut injected = injected;
            let mut holds = false;
            if let Some(vmid) = flock_vmid {
                if acquire_flock(&shared2, vmid).await {
                    holds = true;
                } else if injected.is_none() {
                    injected = Some(lock_timeout_message(vmid));
                }
            }
            if ms > 0 {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            } else {
                tokio::task::yield_now().await;
            }
            finish(&shared2, &upid2, work, injected);
            if holds && let Some(vmid) = flock_vmid {
                shared2.lock().flocks.remove(&vmid);
            }
        };
        tokio::select! {
            _ = run => {}
            _ = stop.changed() => {}
        }
    });
    upid
}

fn finish(shared: &Shared, upid: &str, work: Work, injected: Option<String>) {
    let mut w = shared.lock();
    if !w.tasks.get(upid).is_some_and(Task::running) {
        return; // interrupted
    }
    let res = work(&mut w, injected);
    if let Some(t) = w.tasks.get_mut(upid) {
        t.endtime = Some(unix_now());
        t.timing.ended_ms = Some(unix_now_ms());
        match res {
            Ok(lines) => {
                t.log.extend(lines);
                t.log.push("TASK OK".into());
                t.exitstatus = Some("OK".into());
            }
            Err(e) => {
                let e = e.trim_end().to_string();
                t.log.push(format!("TASK ERROR: {e}"));
                t.exitstatus = Some(e);
            }
        }
    }
}

/// Stops a running task (`DELETE /nodes/{node}/tasks/{upid}`): it ends as interrupted;
/// its work no longer runs.
pub fn interrupt(w: &mut World, upid: &str) -> bool {
    match w.tasks.get_mut(upid) {
        Some(t) if t.running() => {
            t.endtime = Some(unix_now());
            t.timing.ended_ms = Some(unix_now_ms());
            t.exitstatus = Some("interrupted by signal".into());
            t.log.push("received interrupt".into());
            t.log.push("TASK ERROR: interrupted by signal".into());
            true
        }
        _ => false,
    }
}

fn prune(w: &mut World) {
    let excess = w.task_order.len() - MAX_TASKS / 2;
    let mut removed = 0;
    w.task_order.retain(|u| {
        if removed < excess && w.tasks.get(u).is_some_and(|t| !t.running()) {
            w.tasks.remove(u);
            removed += 1;
            false
        } else {
            true
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upid_round_trips() {
        let u = upid(
            "pve1",
            0xF1FD,
            0x10F9374C,
            0x630D702C,
            "qmclone",
            "9000",
            "capmox@pve!capi",
        );
        assert_eq!(
            u,
            "UPID:pve1:0000F1FD:10F9374C:630D702C:qmclone:9000:capmox@pve!capi:"
        );
        let p = parse_upid(&u).unwrap();
        assert_eq!(p.user, "capmox@pve!capi");
        assert_eq!(p.id, "9000");
        assert!(parse_upid("UPID:node:0017C594:0ADB2769:63EC5455:imgcopy::root@pam:").is_some());
    }
}
