//! Other clients writing the same objects as the manager (a GitOps tool relabelling, a
//! user annotating): read, change a label, write back with the version read (a conflict
//! when someone wrote in between), or merge-patch an annotation blind. Each of their
//! writes changes the objects' resourceVersion under the manager's feet.
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use fleet::objects;

/// What the writers did.
#[derive(Debug, Default)]
pub struct Stats {
    pub writes: AtomicU64,
    pub conflicts: AtomicU64,
    pub errors: AtomicU64,
}

pub struct Writers {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    pub stats: Arc<Stats>,
}

impl Writers {
    /// `count` writers over the objects in `namespaces`, each with its own dice.
    pub fn start(client: &Client, namespaces: Vec<String>, count: usize, seed: u64) -> Writers {
        let stats = Arc::new(Stats::default());
        let tasks = (0..count)
            .map(|i| {
                let (client, namespaces, stats) =
                    (client.clone(), namespaces.clone(), stats.clone());
                tokio::spawn(write_forever(
                    client,
                    namespaces,
                    stats,
                    seed.wrapping_add(i as u64),
                    i,
                ))
            })
            .collect();
        Writers { tasks, stats }
    }

    pub fn stop(&self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Drop for Writers {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn write_forever(
    client: Client,
    namespaces: Vec<String>,
    stats: Arc<Stats>,
    seed: u64,
    me: usize,
) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let kinds: [ApiResource; 2] = [objects::infra_machine(), objects::capi_machine()];
    let mut n: u64 = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(rng.u64(10..60))).await;
        if namespaces.is_empty() {
            continue;
        }
        let ns = &namespaces[rng.usize(..namespaces.len())];
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns, &kinds[rng.usize(..kinds.len())]);
        let Ok(list) = api.list(&ListParams::default()).await else {
            stats.errors.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        if list.items.is_empty() {
            continue;
        }
        let mut obj = list.items[rng.usize(..list.items.len())].clone();
        let name = obj.name_any();
        n += 1;
        let result = if rng.bool() {
            obj.labels_mut()
                .insert(format!("chaos.hyperplug.dev/writer-{me}"), n.to_string());
            api.replace(&name, &PostParams::default(), &obj)
                .await
                .map(drop)
        } else {
            let patch = json!({"metadata": {"annotations": {format!("chaos.hyperplug.dev/note-{me}"): n.to_string()}}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(drop)
        };
        match result {
            Ok(()) => stats.writes.fetch_add(1, Ordering::Relaxed),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                stats.conflicts.fetch_add(1, Ordering::Relaxed)
            }
            Err(kube::Error::Api(s)) if s.code == 404 => 0,
            Err(_) => stats.errors.fetch_add(1, Ordering::Relaxed),
        };
    }
}
