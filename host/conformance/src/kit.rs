//! The kit plays the host for the plugin: it keeps each object's request and state,
//! answers address and bootstrap needs, and calls again after the requeue hint, the way
//! the controllers do, but without Kubernetes.
use std::collections::{BTreeMap, BTreeSet};

use hyperplug_runtime::bindings::cluster::{ClusterRequest, ClusterStatus};
use hyperplug_runtime::bindings::identity::{KindRole, PluginInfo};
use hyperplug_runtime::bindings::machine::{
    AllocatedAddress, BootstrapData, Drift, MachineRequest, MachineStatus,
};
use hyperplug_runtime::bindings::types::Progress;
use hyperplug_runtime::{Credentials, ObjectRef, Plugin};
use serde_json::Value;

use super::addresses::Pools;
use super::drive::{self, Answers, Drive, Failure, Machine, Pacing, Until, flatten};

/// Whether a machine's resource is gone, by what describe reports.
pub fn gone(s: &MachineStatus) -> bool {
    matches!(s.drift, Some(Drift::Missing(_)))
        || (!s.ready && s.provider_id.is_none() && s.drift.is_none())
}

/// What the main object's create drive established, for the cases after it.
pub struct MainRun {
    pub provider_id: String,
    pub calls: usize,
    pub asked_addresses: usize,
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
    /// Keys of the machines pointed at a fixture, not the target.
    pub probes: BTreeSet<String>,
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
        self.machines.insert(key.to_string(), Machine::new(req));
        if creds.endpoint != self.creds.endpoint {
            self.probes.insert(key.to_string());
        }
    }

    /// Pointed at a fixture, not the target: nothing of it can exist there.
    pub fn is_probe(&self, key: &str) -> bool {
        self.probes.contains(key)
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
        m.answer(status, &mut FromPools { pools, bootstrap })
    }

    /// Call create until ready (or `stop_after` calls), as the host would.
    pub async fn drive_create(
        &mut self,
        key: &str,
        stop_after: Option<usize>,
        describe_each: bool,
    ) -> Result<Drive, (Drive, String)> {
        let Kit {
            plugin,
            machines,
            pools,
            bootstrap,
            pacing,
            ..
        } = self;
        let m = machines.get_mut(key).expect("machine registered");
        let until = Until {
            calls: stop_after,
            describe_each,
        };
        drive::create(
            plugin,
            m,
            &mut FromPools { pools, bootstrap },
            pacing,
            until,
        )
        .await
    }

    /// Call delete until the plugin confirms the resource gone; returns the call count.
    pub async fn drive_delete(&mut self, key: &str) -> Result<(usize, Vec<String>), String> {
        let m = self.machines.get_mut(key).expect("machine registered");
        drive::delete(&self.plugin, m, &self.pacing).await
    }

    /// Drive cluster.reconcile until ready, keeping the cluster's state.
    pub async fn drive_cluster(&mut self) -> Result<(ClusterStatus, usize), String> {
        let mut req = self.cluster_request(&self.creds);
        let driven = drive::cluster(&self.plugin, &mut req, &self.pacing).await;
        self.cluster_state = req.state;
        driven
    }
}

/// The kit's answers: addresses from the `--addresses` pools, the bootstrap data given.
struct FromPools<'a> {
    pools: &'a mut Pools,
    bootstrap: &'a BootstrapData,
}

impl Answers for FromPools<'_> {
    fn address(&mut self, device: &str, pool: &str) -> Result<AllocatedAddress, String> {
        self.pools.allocate(pool, device)
    }

    fn bootstrap(&mut self) -> Result<BootstrapData, String> {
        Ok(self.bootstrap.clone())
    }
}
