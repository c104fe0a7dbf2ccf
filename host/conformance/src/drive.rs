//! The host's side of the call protocol, played without Kubernetes: a machine's request
//! is kept between calls with the plugin's state, the plugin's address and bootstrap
//! needs are answered, and the call is made again after the requeue hint (a few
//! transient errors in a row are retried, as the host backs off and retries) until the
//! plugin reports the machine ready, or confirms it gone. The conformance kit drives
//! plugins with it, and so do the host's tests. A step that names waits is called
//! again as soon as the plugin's observer fires one of them (as the host's observer
//! loop does), or at its requeue hint.
use std::collections::BTreeSet;
use std::fmt;
use std::time::{Duration, Instant};

use hyperplug_runtime::bindings::cluster::{ClusterRequest, ClusterStatus};
use hyperplug_runtime::bindings::machine::{
    AllocatedAddress, BootstrapData, MachineRequest, MachineStatus,
};
use hyperplug_runtime::bindings::observer::ObserveRequest;
use hyperplug_runtime::bindings::types::Progress;
use hyperplug_runtime::{CallError, Plugin, PluginError};

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

/// How soon a call the runtime refused for its tenant's share of the plugin slots
/// (`CallError::TenantAtShare`) is made again: as the host's reconciler comes back after
/// such a refusal (its `requeue::TENANT_AT_SHARE`), not a failure.
pub const AT_SHARE_RETRY: Duration = Duration::from_millis(250);

/// `call`, made again while the runtime refuses it because its tenant (namespace) holds
/// its share of the plugin slots: the kit and the tests drive many machines of one
/// namespace at once, as the host's reconciler may, and wait their turn as it does. Not
/// past the drive's `deadline`: then the refusal is the answer, and the drive fails on it
/// (a slot that is never given back must not hang a run).
pub async fn admitted<T, F, Fut>(
    deadline: Instant,
    mut call: F,
) -> Result<Result<T, PluginError>, CallError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Result<T, PluginError>, CallError>>,
{
    loop {
        match call().await {
            Err(CallError::TenantAtShare { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(AT_SHARE_RETRY).await
            }
            other => return other,
        }
    }
}

/// Consecutive transient errors the kit retries (the host would back off and retry).
pub const TRANSIENT_RETRIES: u32 = 5;

/// How a drive paces itself.
#[derive(Debug, Clone)]
pub struct Pacing {
    /// Cap on a requeue hint (for fast simulators); none follows hints as given.
    pub max_requeue: Option<Duration>,
    /// Wall-clock limit of one drive to ready or to gone.
    pub drive_timeout: Duration,
    /// Consecutive transient errors a drive retries; 0 stops at the first.
    pub transient_retries: u32,
}

impl Pacing {
    pub fn wait(&self, hint_ms: Option<u64>, default_ms: u64) -> Duration {
        let d = Duration::from_millis(hint_ms.unwrap_or(default_ms).max(50));
        self.max_requeue.map_or(d, |cap| d.min(cap))
    }
}

/// How often the drive asks the observer about a step's waits.
const OBSERVE_EVERY: Duration = Duration::from_millis(100);

/// Until the next call after step `p` of the machine `req`: its requeue hint (capped by
/// `pacing`), or sooner, as soon as the observer fires one of its waits.
async fn wait_after(
    plugin: &Plugin,
    req: &MachineRequest,
    p: &Progress,
    pacing: &Pacing,
    default_ms: u64,
) {
    let due = Instant::now() + pacing.wait(p.requeue_after_ms, default_ms);
    if p.waits.is_empty() {
        tokio::time::sleep_until(due.into()).await;
        return;
    }
    let observe = ObserveRequest {
        credentials: req.credentials.clone(),
        keys: p.waits.iter().map(|w| w.key.clone()).collect(),
    };
    loop {
        let now = Instant::now();
        if now >= due {
            return;
        }
        tokio::time::sleep(OBSERVE_EVERY.min(due - now)).await;
        // A failed observation only means waiting for the requeue.
        if let Ok(Ok(seen)) = plugin.observe(&observe).await
            && !seen.fired.is_empty()
        {
            return;
        }
    }
}

/// What the host hands a plugin that asks for it.
pub trait Answers {
    /// An address from `pool` for `device`; asked once per (device, pool) of a machine,
    /// as the host makes one IPAddressClaim each.
    fn address(&mut self, device: &str, pool: &str) -> Result<AllocatedAddress, String>;
    /// The bootstrap data, once the plugin says it needs it.
    fn bootstrap(&mut self) -> Result<BootstrapData, String>;
    /// The address from `pool` for `device` is not allocated yet: the call is made
    /// without it and the plugin asked again at the next, as the host does while an
    /// IPAddressClaim waits for its IPAM provider. Never, by default.
    fn pending(&mut self, _device: &str, _pool: &str) -> bool {
        false
    }
}

/// A machine as the host keeps it between calls.
#[derive(Debug, Clone)]
pub struct Machine {
    /// The request of the next call: the plugin's last state, the addresses and the
    /// bootstrap data handed over so far.
    pub req: MachineRequest,
    /// (device, pool) pairs already answered.
    answered: BTreeSet<(String, String)>,
    /// The state of the last ready answer.
    pub ready_state: Option<String>,
    /// The plugin confirmed the machine gone.
    pub deleted: bool,
}

impl Machine {
    pub fn new(req: MachineRequest) -> Machine {
        Machine {
            req,
            answered: BTreeSet::new(),
            ready_state: None,
            deleted: false,
        }
    }

    /// Hand the plugin what `status` says it needs: addresses not answered yet, and the
    /// bootstrap data.
    pub fn answer(
        &mut self,
        status: &MachineStatus,
        answers: &mut (impl Answers + ?Sized),
    ) -> Result<(), String> {
        for r in &status.address_requests {
            // A reported pool by its name, a referenced one as `<Kind>/<name>`.
            let wanted = (r.device.clone(), r.pool.label());
            if self.answered.contains(&wanted) || answers.pending(&wanted.0, &wanted.1) {
                continue;
            }
            self.req
                .addresses
                .push(answers.address(&r.device, &wanted.1)?);
            self.answered.insert(wanted);
        }
        if status.needs_bootstrap {
            self.req.bootstrap = Some(answers.bootstrap()?);
        }
        Ok(())
    }
}

/// When a create drive stops before the machine is ready.
#[derive(Debug, Clone, Copy, Default)]
pub struct Until {
    /// Stop after this many create calls (ready or not).
    pub calls: Option<usize>,
    /// Describe after each create call that is not ready yet.
    pub describe_each: bool,
}

/// What a create drive saw.
#[derive(Debug, Default)]
pub struct Drive {
    pub calls: usize,
    pub phases: Vec<String>,
    pub transient: u32,
    /// The messages of the transient errors retried, in order.
    pub transient_errors: Vec<String>,
    pub asked_addresses: usize,
    pub asked_bootstrap: bool,
    pub last: Option<MachineStatus>,
    /// Describe after each create call, when asked for.
    pub describes: Vec<Result<MachineStatus, Failure>>,
    /// The failure that stopped the drive, when a call failed (a caller that judges the
    /// error's class and fields reads it here).
    pub failure: Option<Failure>,
}

impl Drive {
    pub fn phases(&self) -> String {
        self.phases.join(" → ")
    }
}

/// Call create until the machine is ready (or `until` says stop), as the host would:
/// the state saved, needs answered, the requeue hint followed. An error is what the
/// drive saw and why it stopped.
pub async fn create(
    plugin: &Plugin,
    machine: &mut Machine,
    answers: &mut (impl Answers + ?Sized),
    pacing: &Pacing,
    until: Until,
) -> Result<Drive, (Drive, String)> {
    create_watched(plugin, machine, answers, pacing, until, |_| false).await
}

/// [`create`], with each call's status shown to `stop` once its state is saved; the
/// drive ends after a call `stop` says yes to, before its needs are answered. A test
/// awaits a step of the plugin's with it (and looks at each step on the way) instead of
/// calling the plugin in a loop of its own.
pub async fn create_watched(
    plugin: &Plugin,
    machine: &mut Machine,
    answers: &mut (impl Answers + ?Sized),
    pacing: &Pacing,
    until: Until,
    mut stop: impl FnMut(&MachineStatus) -> bool,
) -> Result<Drive, (Drive, String)> {
    let deadline = Instant::now() + pacing.drive_timeout;
    let mut drive = Drive::default();
    let mut transient_in_row = 0;
    loop {
        if Instant::now() > deadline {
            let last = drive.last.as_ref().map_or("none".to_string(), |s| {
                format!("{}: {}", s.progress.phase, s.progress.message)
            });
            let msg = format!(
                "not ready after {:?} and {} create calls (phases {}; last {last})",
                pacing.drive_timeout,
                drive.calls,
                drive.phases()
            );
            return Err((drive, msg));
        }
        let status = match flatten(admitted(deadline, || plugin.create_machine(&machine.req)).await)
        {
            Ok(s) => s,
            Err(Failure::Plugin(PluginError::Transient(t)))
                if transient_in_row < pacing.transient_retries =>
            {
                transient_in_row += 1;
                drive.transient += 1;
                drive.transient_errors.push(t.message.clone());
                tokio::time::sleep(pacing.wait(t.retry_after_ms, 1_000)).await;
                continue;
            }
            Err(e) => {
                let msg = format!("create call {} failed: {e}", drive.calls + 1);
                drive.failure = Some(e);
                return Err((drive, msg));
            }
        };
        transient_in_row = 0;
        drive.calls += 1;
        if drive.phases.last() != Some(&status.progress.phase) {
            drive.phases.push(status.progress.phase.clone());
        }
        machine.req.state = Some(status.progress.state.clone());
        let stopped = stop(&status);
        if status.ready {
            machine.ready_state = Some(status.progress.state.clone());
            drive.last = Some(status);
            return Ok(drive);
        }
        if stopped {
            drive.last = Some(status);
            return Ok(drive);
        }
        drive.asked_addresses += status.address_requests.len();
        drive.asked_bootstrap |= status.needs_bootstrap;
        if let Err(e) = machine.answer(&status, answers) {
            drive.last = Some(status);
            return Err((drive, e));
        }
        if until.describe_each {
            drive.describes.push(flatten(
                admitted(deadline, || plugin.describe_machine(&machine.req)).await,
            ));
        }
        let progress = status.progress.clone();
        drive.last = Some(status);
        if until.calls == Some(drive.calls) {
            return Ok(drive);
        }
        wait_after(plugin, &machine.req, &progress, pacing, 1_000).await;
    }
}

/// Call describe until `done` says yes to its status, the state saved after each, as
/// the host describes a machine again when the observer fires one of its waits (or at
/// its requeue hint); the status `done` accepted.
pub async fn describe_until(
    plugin: &Plugin,
    machine: &mut Machine,
    pacing: &Pacing,
    mut done: impl FnMut(&MachineStatus) -> bool,
) -> Result<MachineStatus, String> {
    let deadline = Instant::now() + pacing.drive_timeout;
    let mut calls = 0;
    loop {
        let status = flatten(admitted(deadline, || plugin.describe_machine(&machine.req)).await)
            .map_err(|e| format!("describe call {} failed: {e}", calls + 1))?;
        calls += 1;
        machine.req.state = Some(status.progress.state.clone());
        if done(&status) {
            return Ok(status);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "not done after {:?} and {calls} describe calls (last {}: {})",
                pacing.drive_timeout, status.progress.phase, status.progress.message
            ));
        }
        wait_after(plugin, &machine.req, &status.progress, pacing, 1_000).await;
    }
}

/// Call delete until the plugin confirms the machine gone; returns the calls made and
/// the phases seen.
pub async fn delete(
    plugin: &Plugin,
    machine: &mut Machine,
    pacing: &Pacing,
) -> Result<(usize, Vec<String>), String> {
    let deadline = Instant::now() + pacing.drive_timeout;
    let (mut calls, mut phases, mut transient_in_row) = (0, Vec::<String>::new(), 0);
    loop {
        if Instant::now() > deadline {
            return Err(format!(
                "not confirmed gone after {:?} and {calls} delete calls (phases {})",
                pacing.drive_timeout,
                phases.join(" → ")
            ));
        }
        match flatten(admitted(deadline, || plugin.delete_machine(&machine.req)).await) {
            Ok(None) => {
                calls += 1;
                machine.deleted = true;
                return Ok((calls, phases));
            }
            Ok(Some(p)) => {
                calls += 1;
                transient_in_row = 0;
                if phases.last() != Some(&p.phase) {
                    phases.push(p.phase.clone());
                }
                machine.req.state = Some(p.state.clone());
                wait_after(plugin, &machine.req, &p, pacing, 2_000).await;
            }
            Err(Failure::Plugin(PluginError::Transient(t)))
                if transient_in_row < pacing.transient_retries =>
            {
                transient_in_row += 1;
                tokio::time::sleep(pacing.wait(t.retry_after_ms, 1_000)).await;
            }
            Err(e) => return Err(format!("delete call {} failed: {e}", calls + 1)),
        }
    }
}

/// Call cluster reconcile until the plugin reports the cluster ready, the state saved in
/// `req`; returns the ready status and the calls made.
pub async fn cluster(
    plugin: &Plugin,
    req: &mut ClusterRequest,
    pacing: &Pacing,
) -> Result<(ClusterStatus, usize), String> {
    let deadline = Instant::now() + pacing.drive_timeout;
    let (mut calls, mut transient_in_row) = (0, 0);
    loop {
        match flatten(admitted(deadline, || plugin.reconcile_cluster(req)).await) {
            Ok(status) => {
                calls += 1;
                transient_in_row = 0;
                req.state = Some(status.progress.state.clone());
                if status.ready {
                    return Ok((status, calls));
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "not ready after {calls} reconcile calls: {}: {}",
                        status.progress.phase, status.progress.message
                    ));
                }
                tokio::time::sleep(pacing.wait(status.progress.requeue_after_ms, 1_000)).await;
            }
            Err(Failure::Plugin(PluginError::Transient(t)))
                if transient_in_row < pacing.transient_retries && Instant::now() < deadline =>
            {
                transient_in_row += 1;
                tokio::time::sleep(pacing.wait(t.retry_after_ms, 1_000)).await;
            }
            Err(e) => return Err(format!("reconcile call {} failed: {e}", calls + 1)),
        }
    }
}
