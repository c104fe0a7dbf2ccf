//! The kit plays the host for the plugin: it keeps each object's request and state,
//! answers address and bootstrap needs, and calls again after the requeue hint, the way
//! the controllers do, but without Kubernetes.
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::addresses::Pools;
use crate::runtime::bindings::cluster::{ClusterRequest, ClusterStatus};
use crate::runtime::bindings::identity::{KindRole, PluginInfo};
use crate::runtime::bindings::machine::{BootstrapData, Drift, MachineRequest, MachineStatus};
use crate::runtime::bindings::types::Progress;
use crate::runtime::{CallError, Credentials, ObjectRef, Plugin, PluginError};

/// Consecutive transient errors a drive tolerates (the host would back off and retry).
const TRANSIENT_TRIES: u32 = 5;

/// How a call failed.
#[derive(Debug)]
pub enum Failure {
    Plugin(PluginError),
    Call(CallError),
}

impl Failure {
    pub fn is_transient(&self) -> bool {
        matches!(self, Failure::Plugin(PluginError::Transient(_)))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Plugin(PluginError::Transient(e)) => write!(f, "transient: {}", e.message),
            Failure::Plugin(PluginError::Terminal(e)) => {
                write!(f, "terminal ({}): {}", e.reason, e.message)
            }
            Failure::Plugin(PluginError::InvalidSpec(e)) => {
                write!(f, "invalid-spec at `{}`: {}", e.field, e.message)
            }
            Failure::Call(e) => write!(f, "call failed in the sandbox: {e}"),
        }
    }
}

/// A call's two layers of failure as one.
pub fn flatten<T>(r: Result<Result<T, PluginError>, CallError>) -> Result<T, Failure> {
    match r {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(Failure::Plugin(e)),
        Err(e) => Err(Failure::Call(e)),
    }
}

/// Whether a machine's resource is gone, by what describe reports.
pub fn gone(s: &MachineStatus) -> bool {
    matches!(s.drift, Some(Drift::Missing(_)))
        || (!s.ready && s.provider_id.is_none() && s.drift.is_none())
}

/// How a drive paces itself.
#[derive(Debug, Clone)]
pub struct Pacing {
    /// Cap on a requeue hint (for fast simulators); none follows hints as given.
    pub max_requeue: Option<Duration>,
    /// Wall-clock limit of one drive to ready or to gone.
    pub drive_timeout: Duration,
}

impl Pacing {
    pub fn wait(&self, hint_ms: Option<u64>, default_ms: u64) -> Duration {
        let d = Duration::from_millis(hint_ms.unwrap_or(default_ms).max(50));
        self.max_requeue.map_or(d, |cap| d.min(cap))
    }
}

/// One object the suite works with.
#[derive(Clone)]
pub struct Machine {
    pub req: MachineRequest,
    /// (device, pool) pairs already answered.
    answered: BTreeSet<(String, String)>,
    /// The state of the last ready answer.
    pub ready_state: Option<String>,
    pub deleted: bool,
    /// Pointed at a fixture, not the target: nothing of it can exist there.
    pub probe: bool,
}

/// What the main object's create drive established, for the cases after it.
pub struct MainRun {
    pub provider_id: String,
    pub calls: usize,
    pub asked_addresses: usize,
}

/// What a create drive saw.
#[derive(Default)]
pub struct Drive {
    pub calls: usize,
    pub phases: Vec<String>,
    pub transient: u32,
    pub asked_addresses: usize,
    pub asked_bootstrap: bool,
    pub last: Option<MachineStatus>,
    /// Describe after each create call, when asked for.
    pub describes: Vec<Result<MachineStatus, Failure>>,
}

impl Drive {
    pub fn phases(&self) -> String {
        self.phases.join(" → ")
    }
}

/// A unique object: names carry the run id so parallel runs do not collide; the UID is
/// random, as the API server's are.
pub fn object_ref(namespace: &str, run_id: &str, what: &str) -> ObjectRef {
    ObjectRef {
        namespace: namespace.to_string(),
        name: format!("conf-{run_id}-{what}"),
        uid: format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            rand::random::<u32>(),
            rand::random::<u16>(),
            rand::random::<u16>() & 0xfff,
            rand::random::<u16>() & 0xfff,
            rand::random::<u64>() & 0xffff_ffff_ffff
        ),
    }
}

pub struct Kit {
    pub plugin: Plugin,
    pub info: PluginInfo,
    pub creds: Credentials,
    pub spec: Value,
    pub cluster_spec: Value,
    pub bootstrap: BootstrapData,
    pub pools: Pools,
    pub pacing: Pacing,
    pub repeat: usize,
    pub run_id: String,
    pub namespace: String,
    pub cluster: ObjectRef,
    pub cluster_state: Option<String>,
    pub machines: BTreeMap<String, Machine>,
    pub main: Option<MainRun>,
    /// Describes made between the main object's create calls.
    pub describes_during: Vec<Result<MachineStatus, Failure>>,
}

impl Kit {
    pub fn has_role(&self, role: KindRole) -> bool {
        self.info.kinds.iter().any(|k| k.role == role)
    }

    pub fn has_capability(&self, cap: &str) -> bool {
        self.info.capabilities.iter().any(|c| c == cap)
    }

    pub fn object(&self, what: &str) -> ObjectRef {
        object_ref(&self.namespace, &self.run_id, what)
    }

    /// Register a new machine object `key` with the given spec and credentials.
    /// A key names one object for the whole run: the leak check walks them all.
    pub fn new_machine(&mut self, key: &str, spec: &Value, creds: &Credentials) {
        assert!(
            !self.machines.contains_key(key),
            "conformance object `{key}` registered twice"
        );
        let req = MachineRequest {
            machine: self.object(key),
            cluster: self.cluster.clone(),
            spec: spec.to_string(),
            cluster_spec: self.cluster_spec.to_string(),
            state: None,
            bootstrap: None,
            failure_domain: None,
            addresses: vec![],
            credentials: creds.clone(),
            more_credentials: vec![],
        };
        self.machines.insert(
            key.to_string(),
            Machine {
                req,
                answered: BTreeSet::new(),
                ready_state: None,
                deleted: false,
                probe: creds.endpoint != self.creds.endpoint,
            },
        );
    }

    pub fn machine(&self, key: &str) -> &Machine {
        &self.machines[key]
    }

    pub fn machine_mut(&mut self, key: &str) -> &mut Machine {
        self.machines.get_mut(key).expect("machine registered")
    }

    pub async fn create(&self, req: &MachineRequest) -> Result<MachineStatus, Failure> {
        flatten(self.plugin.create_machine(req).await)
    }

    pub async fn describe(&self, req: &MachineRequest) -> Result<MachineStatus, Failure> {
        flatten(self.plugin.describe_machine(req).await)
    }

    pub async fn delete(&self, req: &MachineRequest) -> Result<Option<Progress>, Failure> {
        flatten(self.plugin.delete_machine(req).await)
    }

    pub async fn reconcile_cluster(&self, req: &ClusterRequest) -> Result<ClusterStatus, Failure> {
        flatten(self.plugin.reconcile_cluster(req).await)
    }

    pub fn cluster_request(&self, creds: &Credentials) -> ClusterRequest {
        ClusterRequest {
            cluster: self.cluster.clone(),
            spec: self.cluster_spec.to_string(),
            state: self.cluster_state.clone(),
            credentials: creds.clone(),
            more_credentials: vec![],
        }
    }

    /// Hand the plugin what it asked for: addresses from the pools, bootstrap data.
    pub fn answer_needs(&mut self, key: &str, status: &MachineStatus) -> Result<(), String> {
        let Kit {
            machines,
            pools,
            bootstrap,
            ..
        } = self;
        let m = machines.get_mut(key).expect("machine registered");
        for r in &status.address_requests {
            let wanted = (r.device.clone(), r.pool.clone());
            if m.answered.contains(&wanted) {
                continue;
            }
            m.req.addresses.push(pools.allocate(&r.pool, &r.device)?);
            m.answered.insert(wanted);
        }
        if status.needs_bootstrap {
            m.req.bootstrap = Some(bootstrap.clone());
        }
        Ok(())
    }

    /// Call create until ready (or `stop_after` calls), as the host would.
    pub async fn drive_create(
        &mut self,
        key: &str,
        stop_after: Option<usize>,
        describe_each: bool,
    ) -> Result<Drive, (Drive, String)> {
        let deadline = Instant::now() + self.pacing.drive_timeout;
        let mut drive = Drive::default();
        let mut transient_in_row = 0;
        loop {
            if Instant::now() > deadline {
                let last = drive.last.as_ref().map_or("none".to_string(), |s| {
                    format!("{}: {}", s.progress.phase, s.progress.message)
                });
                let msg = format!(
                    "not ready after {:?} and {} create calls (phases {}; last {last})",
                    self.pacing.drive_timeout,
                    drive.calls,
                    drive.phases()
                );
                return Err((drive, msg));
            }
            let req = self.machine(key).req.clone();
            let status = match self.create(&req).await {
                Ok(s) => s,
                Err(Failure::Plugin(PluginError::Transient(t)))
                    if transient_in_row < TRANSIENT_TRIES =>
                {
                    transient_in_row += 1;
                    drive.transient += 1;
                    tokio::time::sleep(self.pacing.wait(t.retry_after_ms, 1_000)).await;
                    continue;
                }
                Err(e) => {
                    let msg = format!("create call {} failed: {e}", drive.calls + 1);
                    return Err((drive, msg));
                }
            };
            transient_in_row = 0;
            drive.calls += 1;
            if drive.phases.last() != Some(&status.progress.phase) {
                drive.phases.push(status.progress.phase.clone());
            }
            self.machine_mut(key).req.state = Some(status.progress.state.clone());
            if status.ready {
                self.machine_mut(key).ready_state = Some(status.progress.state.clone());
                drive.last = Some(status);
                return Ok(drive);
            }
            drive.asked_addresses += status.address_requests.len();
            drive.asked_bootstrap |= status.needs_bootstrap;
            if let Err(e) = self.answer_needs(key, &status) {
                drive.last = Some(status);
                return Err((drive, e));
            }
            if describe_each {
                let req = self.machine(key).req.clone();
                drive.describes.push(self.describe(&req).await);
            }
            let wait = self.pacing.wait(status.progress.requeue_after_ms, 1_000);
            drive.last = Some(status);
            if stop_after == Some(drive.calls) {
                return Ok(drive);
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// Call delete until the plugin confirms the resource gone; returns the call count.
    pub async fn drive_delete(&mut self, key: &str) -> Result<(usize, Vec<String>), String> {
        let deadline = Instant::now() + self.pacing.drive_timeout;
        let (mut calls, mut phases, mut transient_in_row) = (0, Vec::<String>::new(), 0);
        loop {
            if Instant::now() > deadline {
                return Err(format!(
                    "not confirmed gone after {:?} and {calls} delete calls (phases {})",
                    self.pacing.drive_timeout,
                    phases.join(" → ")
                ));
            }
            let req = self.machine(key).req.clone();
            match self.delete(&req).await {
                Ok(None) => {
                    calls += 1;
                    self.machine_mut(key).deleted = true;
                    return Ok((calls, phases));
                }
                Ok(Some(p)) => {
                    calls += 1;
                    transient_in_row = 0;
                    if phases.last() != Some(&p.phase) {
                        phases.push(p.phase.clone());
                    }
                    self.machine_mut(key).req.state = Some(p.state.clone());
                    tokio::time::sleep(self.pacing.wait(p.requeue_after_ms, 2_000)).await;
                }
                Err(Failure::Plugin(PluginError::Transient(t)))
                    if transient_in_row < TRANSIENT_TRIES =>
                {
                    transient_in_row += 1;
                    tokio::time::sleep(self.pacing.wait(t.retry_after_ms, 1_000)).await;
                }
                Err(e) => return Err(format!("delete call {} failed: {e}", calls + 1)),
            }
        }
    }

    /// Drive cluster.reconcile until ready.
    pub async fn drive_cluster(&mut self) -> Result<(ClusterStatus, usize), String> {
        let deadline = Instant::now() + self.pacing.drive_timeout;
        let (mut calls, mut transient_in_row) = (0, 0);
        loop {
            let req = self.cluster_request(&self.creds);
            match self.reconcile_cluster(&req).await {
                Ok(status) => {
                    calls += 1;
                    transient_in_row = 0;
                    self.cluster_state = Some(status.progress.state.clone());
                    if status.ready {
                        return Ok((status, calls));
                    }
                    if Instant::now() > deadline {
                        return Err(format!(
                            "not ready after {calls} reconcile calls: {}: {}",
                            status.progress.phase, status.progress.message
                        ));
                    }
                    let wait = self.pacing.wait(status.progress.requeue_after_ms, 1_000);
                    tokio::time::sleep(wait).await;
                }
                Err(Failure::Plugin(PluginError::Transient(t)))
                    if transient_in_row < TRANSIENT_TRIES && Instant::now() < deadline =>
                {
                    transient_in_row += 1;
                    tokio::time::sleep(self.pacing.wait(t.retry_after_ms, 1_000)).await;
                }
                Err(e) => return Err(format!("reconcile call {} failed: {e}", calls + 1)),
            }
        }
    }
}
