//! Asynchronous tasks: UPIDs, durations per task type, per-node concurrency, injected
//! failures and slowness, logs and exit statuses.
//!
//! A task is accepted synchronously (the handler returns its UPID); its worker starts at
//! once, takes its config file locks (`locks`), waits for a slot on its node, and its
//! `Work` runs against the world when its duration has elapsed. Config `lock:` entries a
//! task sets (`lock: clone`, `lock: migrate`) are removed by its work.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{Notify, Semaphore};

use crate::api::Call;
use crate::faults::TaskFault;
use crate::locks::LockMode;
use crate::server::Shared;
use crate::state::{World, unix_now, unix_now_ms};

/// What a task does at its end: gets the world and the failure injected or caused by an
/// interruption, if any (the work must then undo what the task did and return it as its
/// error). Returns log lines, or the error whose last line becomes the exit status (the
/// lines before it go to the log).
pub type Work = Box<dyn FnOnce(&mut World, Option<String>) -> Result<Vec<String>, String> + Send>;

/// Finished tasks per node that `GET /cluster/tasks` still shows (PVE keeps the newest
/// ones of each node's task list there; older ones need a status call on their node).
pub const CLUSTER_TASKS_FINISHED_PER_NODE: usize = 25;

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
    /// Config file locks the worker holds.
    pub held: Vec<(u32, LockMode)>,
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
        if let Some(o) = v.as_object_mut() {
            o.remove("exitstatus");
            o.remove("status");
        }
        if let Some(e) = self.endtime {
            v["endtime"] = json!(e);
            v["status"] = json!(self.exitstatus);
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

/// Task types whose worker holds the config file lock of the VM in its `id` while it runs.
pub const FLOCK_TASKS: &[&str] = &[
    "qmstart",
    "qmstop",
    "qmshutdown",
    "qmreboot",
    "resize",
    "qmdestroy",
    "qmconfig",
    "qmcreate",
    "qmigrate",
];

pub use crate::locks::lock_timeout_message;

/// A step a task runs against the world: log lines, or the error that ends the task.
pub type Step = Box<dyn FnOnce(&mut World) -> Result<Vec<String>, String> + Send>;

/// What a task is and does.
pub struct TaskSpec {
    pub node: String,
    pub kind: String,
    pub id: String,
    pub user: String,
    pub log: Vec<String>,
    /// The VM the task works on (default: `id` as a VMID).
    pub vm: Option<u32>,
    /// Config file locks the worker takes first, in order, each waiting up to `lock_wait`.
    pub locks: Vec<(u32, LockMode)>,
    pub lock_wait: Duration,
    /// Runs once the locks are held, before the task waits for a node slot; an error ends
    /// the task (its `work` does not run).
    pub begin: Option<Step>,
    /// Runs after this fraction of the task's duration (a clone's first disk).
    pub midway: Option<(f64, Step)>,
    /// Runs at the end.
    pub work: Work,
    /// A fault a rule decided for the request.
    pub fault: Option<TaskFault>,
}

impl TaskSpec {
    /// A task of `kind` on `id` for the call's node and user, with the call's fault; tasks
    /// of `FLOCK_TASKS` lock the VM `id`.
    pub fn new(c: &mut Call, kind: &str, id: &str, work: Work) -> Self {
        let vm: Option<u32> = id.parse().ok();
        let locks = match vm {
            Some(v) if FLOCK_TASKS.contains(&kind) => vec![(v, LockMode::Exclusive)],
            _ => vec![],
        };
        TaskSpec {
            node: c.node().to_string(),
            kind: kind.into(),
            id: id.into(),
            user: c.user.clone(),
            log: vec![],
            vm,
            locks,
            lock_wait: c.shared.config.lock_wait(),
            begin: None,
            midway: None,
            work,
            fault: c.fault.take(),
        }
    }
}

/// Registers a task and starts its worker. Returns the UPID.
///
/// The worker takes its locks (failing with PVE's lock timeout when they stay taken),
/// runs `begin`, waits for a slot on its node (`node_task_concurrency`; the task shows
/// `queued` meanwhile), runs for its duration (`midway` part-way), then runs `work`
/// and releases its locks, all at once under the world lock. `DELETE .../tasks/{upid}`
/// interrupts it at any point: `work` then gets "interrupted by signal" as its failure.
pub fn start(shared: &Arc<Shared>, w: &mut World, spec: TaskSpec) -> String {
    let pid = w.pid();
    let pstart = (w.boot.elapsed().as_millis() / 10) as u32 + 1_000_000;
    let starttime = unix_now();
    let upid = upid(
        &spec.node, pid, pstart, starttime, &spec.kind, &spec.id, &spec.user,
    );
    let (rolled, slow) = w.roll_task_faults();
    let ms = match shared.config.task_duration_ms(&spec.kind) {
        ms if slow > 1.0 => (ms.max(100) as f64 * slow) as u64,
        ms => ms,
    };
    let mut injected = rolled;
    let mut lock_timeout = false;
    match spec.fault {
        Some(TaskFault::Fail(m)) => injected = Some(m),
        Some(TaskFault::LockTimeout) => lock_timeout = true,
        _ => {}
    }
    w.tasks.insert(
        upid.clone(),
        Task {
            upid: upid.clone(),
            node: spec.node.clone(),
            kind: spec.kind.clone(),
            id: spec.id.clone(),
            user: spec.user.clone(),
            pid,
            pstart,
            starttime,
            endtime: None,
            exitstatus: None,
            log: spec.log,
            queued: true,
            timing: Timing {
                submitted_ms: unix_now_ms(),
                ..Timing::default()
            },
            vm: spec.vm,
            held: vec![],
        },
    );
    w.task_order.push(upid.clone());
    if w.task_order.len() > MAX_TASKS {
        prune(w);
    }
    let cancel = Arc::new(Notify::new());
    w.task_cancel.insert(upid.clone(), cancel.clone());
    let worker = Worker {
        shared: shared.clone(),
        upid: upid.clone(),
        slots: shared.node_slots.get(&spec.node).cloned(),
        locks: spec.locks,
        lock_wait: spec.lock_wait,
        lock_timeout,
        begin: spec.begin,
        midway: spec.midway,
        ms,
    };
    let mut stop = shared.shutdown.clone();
    let work = spec.work;
    let mut worker = worker;
    tokio::spawn(async move {
        let end = tokio::select! {
            end = worker.run(&cancel) => Some(end),
            _ = stop.changed() => None,
        };
        if let Some(end) = end {
            worker.end(end, work, injected);
        }
    });
    upid
}

/// How a worker's run ended before its work.
enum RunEnd {
    /// The duration elapsed: run the work.
    Done,
    /// Failed before the work could run (locks, `begin`).
    Failed(String),
    /// Interrupted; `true` once `begin` had run (the work cleans up).
    Interrupted(bool),
}

struct Worker {
    shared: Arc<Shared>,
    upid: String,
    slots: Option<Arc<Semaphore>>,
    locks: Vec<(u32, LockMode)>,
    lock_wait: Duration,
    lock_timeout: bool,
    begin: Option<Step>,
    midway: Option<(f64, Step)>,
    ms: u64,
}

impl Worker {
    async fn run(&mut self, cancel: &Notify) -> RunEnd {
        let cancelled = cancel.notified();
        tokio::pin!(cancelled);
        // 1. the config file locks
        for (vmid, mode) in self.locks.clone() {
            if self.lock_timeout {
                return RunEnd::Failed(lock_timeout_message(vmid));
            }
            let got = tokio::select! {
                got = crate::locks::flock(&self.shared, vmid, mode, self.lock_wait) => got,
                _ = &mut cancelled => return RunEnd::Interrupted(false),
            };
            if !got {
                return RunEnd::Failed(lock_timeout_message(vmid));
            }
            let mut w = self.shared.lock();
            match w.tasks.get_mut(&self.upid) {
                Some(t) => t.held.push((vmid, mode)),
                None => w.release_flock(vmid, mode),
            }
        }
        // 2. what the worker does once it holds them
        if let Some(begin) = self.begin.take() {
            let mut w = self.shared.lock();
            match begin(&mut w) {
                Ok(lines) => {
                    if let Some(t) = w.tasks.get_mut(&self.upid) {
                        t.log.extend(lines);
                    }
                }
                Err(e) => return RunEnd::Failed(e),
            }
        }
        // 3. a node slot, then the duration
        let _permit = match self.slots.clone() {
            Some(s) => tokio::select! {
                p = s.acquire_owned() => p.ok(),
                _ = &mut cancelled => return RunEnd::Interrupted(true),
            },
            None => None,
        };
        if let Some(t) = self.shared.lock().tasks.get_mut(&self.upid) {
            t.queued = false;
            t.timing.started_ms = Some(unix_now_ms());
        }
        let (first, rest) = match &self.midway {
            Some((f, _)) => {
                let first = (self.ms as f64 * f.clamp(0.0, 1.0)) as u64;
                (first, self.ms - first.min(self.ms))
            }
            None => (self.ms, 0),
        };
        tokio::select! {
            _ = pause(first) => {}
            _ = &mut cancelled => return RunEnd::Interrupted(true),
        }
        if let Some((_, step)) = self.midway.take() {
            let mut w = self.shared.lock();
            match step(&mut w) {
                Ok(lines) => {
                    if let Some(t) = w.tasks.get_mut(&self.upid) {
                        t.log.extend(lines);
                    }
                }
                Err(e) => return RunEnd::Failed(e),
            }
        }
        tokio::select! {
            _ = pause(rest) => {}
            _ = &mut cancelled => return RunEnd::Interrupted(true),
        }
        RunEnd::Done
    }

    /// Ends the task: runs its work (or not), records the exit status, frees its locks.
    fn end(&self, end: RunEnd, work: Work, injected: Option<String>) {
        let interrupted = "interrupted by signal".to_string();
        let res = {
            let mut w = self.shared.lock();
            let res = match end {
                RunEnd::Done => work(&mut w, injected),
                RunEnd::Interrupted(true) => work(&mut w, Some(interrupted)),
                RunEnd::Interrupted(false) => Err(interrupted),
                RunEnd::Failed(e) => Err(e),
            };
            let held = match w.tasks.get_mut(&self.upid) {
                Some(t) => {
                    t.endtime = Some(unix_now());
                    t.timing.ended_ms = Some(unix_now_ms());
                    match &res {
                        Ok(lines) => {
                            t.log.extend(lines.iter().cloned());
                            t.log.push("TASK OK".into());
                            t.exitstatus = Some("OK".into());
                        }
                        Err(e) => {
                            // earlier lines of a multi-line error are log lines
                            let e = e.trim_end();
                            let (lines, status) = e.rsplit_once('\n').unwrap_or(("", e));
                            t.log.extend(lines.lines().map(String::from));
                            t.log.push(format!("TASK ERROR: {status}"));
                            t.exitstatus = Some(status.to_string());
                        }
                    }
                    std::mem::take(&mut t.held)
                }
                None => vec![],
            };
            for (vmid, mode) in held {
                w.release_flock(vmid, mode);
            }
            w.task_cancel.remove(&self.upid);
            res
        };
        drop(res);
        self.shared.unlocked.notify_waiters();
    }
}

async fn pause(ms: u64) {
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    } else {
        tokio::task::yield_now().await;
    }
}

/// Interrupts a running task (`DELETE /nodes/{node}/tasks/{upid}`); `false` if it is not
/// running.
pub fn interrupt(w: &mut World, upid: &str) -> bool {
    if !w.tasks.get(upid).is_some_and(Task::running) {
        return false;
    }
    if let Some(t) = w.tasks.get_mut(upid) {
        t.log.push("received interrupt".into());
    }
    if let Some(c) = w.task_cancel.get(upid) {
        c.notify_one();
    }
    true
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
