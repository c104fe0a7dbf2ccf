//! Waiting for the benchmark's world, and the moment each ProxmoxMachine was first seen provisioned.
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::Value;

use fleet::{Host, objects};

/// Waits until `check` is true; fails if the host or a plane process died, or after
/// `timeout`.
pub async fn wait<F, Fut>(
    host: &mut Host,
    plane: &kube_world::Plane,
    timeout: Duration,
    what: &str,
    check: F,
) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    let log = host.log.clone();
    let alive = || {
        host.check_running()?;
        plane.check_processes()
    };
    fleet::wait::until(timeout, what, alive, check)
        .await
        .with_context(|| {
            format!(
                "host log {}, plane {}",
                log.display(),
                plane.dir().display()
            )
        })
}

/// When (Unix ms) a machine was first seen provisioned, and its VMID.
#[derive(Debug, Clone, Copy)]
pub struct Seen {
    pub at_ms: u64,
    pub vmid: Option<u32>,
}

/// Watches every ProxmoxMachine and records the first event showing it provisioned.
#[derive(Clone)]
pub struct Provisioned {
    seen: Arc<Mutex<HashMap<String, Seen>>>,
    task: Arc<tokio::task::JoinHandle<()>>,
}

impl Provisioned {
    pub fn start(client: Client) -> Provisioned {
        let seen: Arc<Mutex<HashMap<String, Seen>>> = Arc::default();
        let map = seen.clone();
        let api = Api::<DynamicObject>::all_with(client, &objects::infra_machine_stored());
        let task = tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(ev) = events.next().await {
                let obj = match ev {
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => o,
                    _ => continue,
                };
                let provisioned = obj
                    .data
                    .pointer("/status/initialization/provisioned")
                    .and_then(Value::as_bool)
                    == Some(true);
                if !provisioned {
                    continue;
                }
                let key = format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any());
                let vmid = obj
                    .data
                    .pointer("/status/details/vmid")
                    .and_then(Value::as_str)
                    .and_then(|v| v.parse().ok());
                map.lock().unwrap().entry(key).or_insert(Seen {
                    at_ms: fleet::now_ms(),
                    vmid,
                });
            }
        });
        Provisioned {
            seen,
            task: Arc::new(task),
        }
    }

    pub fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// How many of `keys` (`namespace/name`) were seen provisioned.
    pub fn count_of(&self, keys: &[String]) -> usize {
        let seen = self.seen.lock().unwrap();
        keys.iter().filter(|k| seen.contains_key(*k)).count()
    }

    /// What was seen so far; the watch stops.
    pub fn finish(&self) -> HashMap<String, Seen> {
        self.task.abort();
        self.seen.lock().unwrap().clone()
    }
}
