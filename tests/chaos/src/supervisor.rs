//! Kills the leading manager at moments the seed picks, and restarts replicas that
//! exit, in the background while the run goes on.
//!
//! A moment is a point of progress, not of time: the number of write requests PVE has
//! received (every machine's lifecycle makes about `WRITES_PER_MACHINE`), so a kill
//! lands in the middle of the work whatever the machine's speed.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use pve_sim::StateHandle;

use crate::replicas::{Kill, Replicas};

/// PVE writes of one machine's lifecycle without faults (clone, config writes, ISO
/// upload, start, stop, destroy, ISO removal), for placing the kills.
const WRITES_PER_MACHINE: u64 = 8;

pub struct Supervisor {
    replicas: Arc<tokio::sync::Mutex<Replicas>>,
    phase: Arc<Mutex<String>>,
    now: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    failed: Arc<Mutex<Option<String>>>,
    task: tokio::task::JoinHandle<()>,
}

/// Write requests PVE received so far.
fn writes(state: &StateHandle) -> u64 {
    state
        .counters()
        .iter()
        .filter(|(k, _)| !k.starts_with("GET "))
        .map(|(_, n)| n)
        .sum()
}

impl Supervisor {
    /// Kills at `kills` moments drawn from `rng` over the first 70 % of the writes
    /// `machines` machines make.
    pub fn start(
        replicas: Replicas,
        state: StateHandle,
        machines: usize,
        kills: usize,
        rng: &mut fastrand::Rng,
    ) -> Supervisor {
        let expected = machines as u64 * WRITES_PER_MACHINE;
        let mut at: Vec<u64> = (0..kills)
            .map(|_| expected * rng.u64(5..70) / 100)
            .collect();
        at.sort_unstable();
        let replicas = Arc::new(tokio::sync::Mutex::new(replicas));
        let phase = Arc::new(Mutex::new("setup".to_string()));
        let now = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let failed = Arc::new(Mutex::new(None));
        let task = {
            let (replicas, phase, now, stop, failed) = (
                replicas.clone(),
                phase.clone(),
                now.clone(),
                stop.clone(),
                failed.clone(),
            );
            tokio::spawn(async move {
                let mut next = 0;
                while !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    let mut r = replicas.lock().await;
                    let mut result = r.keep_running();
                    if result.is_ok()
                        && next < at.len()
                        && (now.load(Ordering::Relaxed) || writes(&state) >= at[next])
                    {
                        let during = phase.lock().unwrap().clone();
                        result = r.kill_leader(&during).await.map(drop);
                        next += 1;
                    }
                    if let Err(e) = result {
                        *failed.lock().unwrap() = Some(format!("{e:#}"));
                        return;
                    }
                }
            })
        };
        Supervisor {
            replicas,
            phase,
            now,
            stop,
            failed,
            task,
        }
    }

    /// What the run is doing, for the kill records.
    pub fn phase(&self, phase: impl Into<String>) {
        let phase = phase.into();
        eprintln!("[chaos] {phase}");
        *self.phase.lock().unwrap() = phase;
    }

    /// The kills not done yet happen now, one after the other.
    pub fn kill_the_rest_now(&self) {
        self.now.store(true, Ordering::Relaxed);
    }

    /// Fails if the supervisor did (a replica could not be restarted, no replica led).
    pub fn check(&self) -> Result<()> {
        match self.failed.lock().unwrap().as_ref() {
            Some(e) => anyhow::bail!("supervising the replicas: {e}"),
            None => Ok(()),
        }
    }

    /// Stops supervising; the replicas keep running until dropped.
    pub async fn finish(mut self) -> Result<(Replicas, Vec<Kill>)> {
        self.stop.store(true, Ordering::Relaxed);
        (&mut self.task).await?;
        self.check()?;
        let replicas = Arc::try_unwrap(self.replicas)
            .map_err(|_| anyhow::anyhow!("the replicas are still shared"))?
            .into_inner();
        let kills = replicas.kills.clone();
        Ok((replicas, kills))
    }
}
