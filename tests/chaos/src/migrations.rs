//! VMs moving under the manager: PVE 9.2's load balancer (a migration someone else has
//! finished, at once) and an administrator's live migrations through the API (a
//! `qmigrate` task that locks the VM meanwhile), one every second or so.
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use pve_sim::StateHandle;
use serde_json::Value;

use crate::pve::Admin;
use crate::verdict::marker_of;

#[derive(Debug, Default)]
pub struct Stats {
    /// Moved at once, as the load balancer does.
    pub balanced: AtomicU64,
    /// Migrations the API accepted (their task may still refuse).
    pub migrated: AtomicU64,
    /// Refused: locked, a local ISO attached, ...
    pub refused: AtomicU64,
}

pub struct Migrations {
    task: tokio::task::JoinHandle<()>,
    pub stats: Arc<Stats>,
}

impl Migrations {
    /// Moves random VMs of the run's machines (marked ones, but `spare`) among `nodes`
    /// until stopped.
    pub fn start(
        state: StateHandle,
        admin: Arc<Admin>,
        nodes: Vec<String>,
        spare: u32,
        seed: u64,
    ) -> Migrations {
        let stats = Arc::new(Stats::default());
        let task = {
            let stats = stats.clone();
            tokio::spawn(async move {
                let mut rng = fastrand::Rng::with_seed(seed);
                loop {
                    tokio::time::sleep(Duration::from_millis(rng.u64(500..1500))).await;
                    let ours: Vec<Value> = state
                        .vms()
                        .into_iter()
                        .filter(|v| marker_of(&v["config"]).is_some() && v["template"] != true)
                        .filter(|v| v["vmid"] != spare)
                        .collect();
                    if ours.is_empty() || nodes.len() < 2 {
                        continue;
                    }
                    let vm = &ours[rng.usize(..ours.len())];
                    let vmid = vm["vmid"].as_u64().unwrap_or_default() as u32;
                    let others: Vec<&String> =
                        nodes.iter().filter(|n| vm["node"] != n.as_str()).collect();
                    let target = others[rng.usize(..others.len())].clone();
                    let (counter, done) = if rng.bool() {
                        (&stats.balanced, state.migrate_vm(vmid, &target).is_ok())
                    } else {
                        (&stats.migrated, admin.migrate(vmid, &target).await.is_ok())
                    };
                    let counter = if done { counter } else { &stats.refused };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        Migrations { task, stats }
    }

    pub fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for Migrations {
    fn drop(&mut self) {
        self.stop();
    }
}
