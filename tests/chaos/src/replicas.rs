//! Two replicas of the manager with `--leader-elect`, as a Deployment with two pods runs
//! them: the leader is killed with SIGKILL and its pod restarts under a new name; a
//! replica that exits on its own (it lost the lease) is restarted too, as the kubelet
//! would.
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use fleet::{Host, HostSpec};
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};

/// Where the replicas' Lease is.
pub const LEASE_NAMESPACE: &str = "default";
pub const LEASE_NAME: &str = "hyperplug-leader";

struct Replica {
    slot: char,
    generation: u32,
    host: Host,
}

impl Replica {
    fn identity(&self) -> String {
        identity(self.slot, self.generation)
    }
}

fn identity(slot: char, generation: u32) -> String {
    format!("hyperplug-{slot}-{generation}")
}

/// One SIGKILL of the leader.
#[derive(Debug, Clone)]
pub struct Kill {
    /// Since the run started.
    pub at: Duration,
    pub identity: String,
    /// What the run was doing.
    pub during: String,
}

pub struct Replicas {
    spec: HostSpec,
    dir: PathBuf,
    replicas: Vec<Replica>,
    leases: Api<Lease>,
    started: Instant,
    pub kills: Vec<Kill>,
    /// Replicas that exited by themselves (and were restarted), with their status.
    pub exits: Vec<String>,
}

impl Replicas {
    /// Starts replicas `a` and `b` with `spec` plus leader election; logs in `dir`.
    pub fn start(
        spec: &HostSpec,
        dir: PathBuf,
        client: Client,
        started: Instant,
    ) -> Result<Replicas> {
        let mut spec = spec.clone();
        spec.args.extend([
            "--leader-elect".to_string(),
            format!("--leader-election-namespace={LEASE_NAMESPACE}"),
            format!("--leader-election-id={LEASE_NAME}"),
        ]);
        let mut r = Replicas {
            spec,
            dir,
            replicas: vec![],
            leases: Api::namespaced(client, LEASE_NAMESPACE),
            started,
            kills: vec![],
            exits: vec![],
        };
        for slot in ['a', 'b'] {
            let host = r.launch(slot, 1)?;
            r.replicas.push(Replica {
                slot,
                generation: 1,
                host,
            });
        }
        Ok(r)
    }

    fn launch(&self, slot: char, generation: u32) -> Result<Host> {
        let mut spec = self.spec.clone();
        spec.env
            .push(("HOSTNAME".into(), identity(slot, generation)));
        spec.start(&self.dir.join(format!("hyperplug-{slot}.log")))
    }

    /// The Lease's holder, if any.
    pub async fn leader(&self) -> Option<String> {
        self.leases
            .get_opt(LEASE_NAME)
            .await
            .ok()
            .flatten()?
            .spec?
            .holder_identity
    }

    /// Restarts any replica that exited by itself. Never fails the run: a replica that
    /// loses its lease exits by design.
    pub fn keep_running(&mut self) -> Result<()> {
        for i in 0..self.replicas.len() {
            if let Err(e) = self.replicas[i].host.check_running() {
                let first = e.to_string().lines().next().unwrap_or_default().to_string();
                self.exits
                    .push(format!("{}: {first}", self.replicas[i].identity()));
                self.restart(i)?;
            }
        }
        Ok(())
    }

    fn restart(&mut self, i: usize) -> Result<()> {
        let (slot, generation) = (self.replicas[i].slot, self.replicas[i].generation + 1);
        let host = self.launch(slot, generation)?;
        self.replicas[i] = Replica {
            slot,
            generation,
            host,
        };
        Ok(())
    }

    /// Waits (up to a minute) for a replica of this run to hold the Lease, SIGKILLs it
    /// and starts its replacement at once.
    pub async fn kill_leader(&mut self, during: &str) -> Result<Kill> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            self.keep_running()?;
            let holder = self.leader().await;
            if let Some(i) = self
                .replicas
                .iter()
                .position(|r| Some(r.identity()) == holder)
            {
                let identity = self.replicas[i].identity();
                self.replicas[i].host.kill()?;
                let kill = Kill {
                    at: self.started.elapsed(),
                    identity,
                    during: during.to_string(),
                };
                eprintln!(
                    "[chaos] SIGKILL {} (the leader) during {during}; restarting it",
                    kill.identity
                );
                self.restart(i)?;
                self.kills.push(kill.clone());
                return Ok(kill);
            }
            if Instant::now() > deadline {
                bail!("no replica held the lease for a minute (holder {holder:?})");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The replicas' logs.
    pub fn logs(&self) -> Vec<PathBuf> {
        self.replicas.iter().map(|r| r.host.log.clone()).collect()
    }
}
