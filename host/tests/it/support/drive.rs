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
    let mut machine = Machine::new(req.clone());
    let driven = drive::create(plugin, &mut machine, answers, pacing, Until::default()).await;
    *req = machine.req;
    let mut drive = driven.map_err(|(drive, why)| format!("{why} (phases {})", drive.phases()))?;
    let status = drive.last.take().expect("a ready drive has a status");
    Ok((status, drive))
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
