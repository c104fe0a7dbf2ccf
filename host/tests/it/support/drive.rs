//! The host's call protocol in tests: the conformance kit's driver, with requeue hints
//! capped for fast endpoints, and no transient error tolerated (a test expects none).
use std::time::Duration;

use hyperplug_conformance::drive::{self, Answers, Drive, Machine, Pacing, Until};
use hyperplug_runtime::Plugin;
use hyperplug_runtime::bindings::machine::{
    AllocatedAddress, BootstrapData, MachineRequest, MachineStatus,
};

/// Requeue hints capped at `max_requeue_ms`; a drive may take two minutes.
pub fn pacing(max_requeue_ms: u64) -> Pacing {
    Pacing {
        max_requeue: Some(Duration::from_millis(max_requeue_ms)),
        drive_timeout: Duration::from_secs(120),
        transient_retries: 0,
    }
}

/// Call create until ready; `req` keeps what the host handed over (the plugin's state,
/// addresses, bootstrap data). Returns the ready status and what the drive saw.
pub async fn create_until_ready(
    plugin: &Plugin,
    req: &mut MachineRequest,
    answers: &mut (impl Answers + ?Sized),
    pacing: &Pacing,
) -> Result<(MachineStatus, Drive), String> {
    create_until(plugin, req, answers, pacing, |_| false)
        .await
        .map_err(|(drive, why)| format!("{why} (phases {})", drive.phases()))
}

/// Call create until `stop` says yes to a call's status (before that call's needs are
/// answered) or the machine is ready: a test awaits a step of the plugin's, and looks
/// at every status on the way in `stop`. `req` keeps what the host handed over, also
/// when a call fails (the host keeps the state from before a failed call). Returns the
/// last status and what the drive saw; a failure keeps the drive, whose `failure` is
/// the plugin's error.
pub async fn create_until(
    plugin: &Plugin,
    req: &mut MachineRequest,
    answers: &mut (impl Answers + ?Sized),
    pacing: &Pacing,
    stop: impl FnMut(&MachineStatus) -> bool,
) -> Result<(MachineStatus, Drive), (Drive, String)> {
    let mut machine = Machine::new(req.clone());
    let driven = drive::create_watched(
        plugin,
        &mut machine,
        answers,
        pacing,
        Until::default(),
        stop,
    )
    .await;
    *req = machine.req;
    let mut drive = driven?;
    let status = drive.last.take().expect("a drive that ended has a status");
    Ok((status, drive))
}

/// Call describe until `done` says yes to its status, as the host describes a machine
/// when one of its waits fires; `req` keeps the plugin's state. The status `done` took.
pub async fn describe_until(
    plugin: &Plugin,
    req: &mut MachineRequest,
    pacing: &Pacing,
    done: impl FnMut(&MachineStatus) -> bool,
) -> Result<MachineStatus, String> {
    let mut machine = Machine::new(req.clone());
    let described = drive::describe_until(plugin, &mut machine, pacing, done).await;
    *req = machine.req;
    described
}

/// Call delete until the plugin confirms the machine gone; returns the phases it went
/// through (none when the first call confirms it).
pub async fn delete_until_gone(
    plugin: &Plugin,
    req: &mut MachineRequest,
    pacing: &Pacing,
) -> Result<Vec<String>, String> {
    let mut machine = Machine::new(req.clone());
    let deleted = drive::delete(plugin, &mut machine, pacing).await;
    *req = machine.req;
    deleted.map(|(_, phases)| phases)
}

/// A test's answers: its bootstrap data (if it has any), and no address (asking for one
/// fails the drive).
pub struct NoAddresses(pub Option<BootstrapData>);

impl Answers for NoAddresses {
    fn address(&mut self, device: &str, pool: &str) -> Result<AllocatedAddress, String> {
        Err(format!(
            "unexpected address request for {device} from {pool}"
        ))
    }

    fn bootstrap(&mut self) -> Result<BootstrapData, String> {
        self.0
            .clone()
            .ok_or_else(|| "unexpected request for bootstrap data".into())
    }
}
