//! What one call works with: the parsed specs, the planned NICs and the PVE client.

use guest_kit::machine::{MachineRequest, MachineStatus};
use guest_kit::transient;
use guest_kit::types::{PluginError, Progress, Wait};
use serde_json::Value;

use super::nics::{Nic, plan_nics};
use super::ownership::uid_tag;
use super::state::{State, Step};
use super::tasks::waits_for;
use super::validate::validate;
use crate::api::{Pve, PveError, percent_encode};
use crate::observer::vm_key;
use crate::resources::{self, Resource};
use crate::spec::{ClusterSpec, MachineSpec, cluster_spec, machine_spec};

/// What a call works with.
pub(super) struct Ctx<'a> {
    pub(super) req: &'a MachineRequest,
    pub(super) spec: MachineSpec,
    pub(super) cluster: ClusterSpec,
    pub(super) nics: Vec<Nic>,
    pub(super) pve: Pve,
    /// `GET /cluster/resources`, read at most once per call.
    pub(super) resources: std::cell::OnceCell<Vec<Resource>>,
}

impl<'a> Ctx<'a> {
    pub(super) fn new(req: &'a MachineRequest) -> Result<Ctx<'a>, PluginError> {
        let spec = machine_spec(&req.spec, "spec")?;
        let cluster = if req.cluster_spec.trim().is_empty() {
            ClusterSpec::default()
        } else {
            cluster_spec(&req.cluster_spec, "cluster.spec")?
        };
        let nics = plan_nics(&spec, &cluster)?;
        validate(&spec, &cluster, &nics)?;
        Ok(Ctx {
            req,
            spec,
            cluster,
            nics,
            pve: Pve::new(&req.credentials),
            resources: Default::default(),
        })
    }

    /// Every node, VM and storage of the cluster (`GET /cluster/resources`), read once
    /// per call.
    pub(super) fn resources(&self) -> Result<&[Resource], PluginError> {
        if let Some(r) = self.resources.get() {
            return Ok(r);
        }
        let list = resources::list(&self.pve, "/cluster/resources")
            .map_err(|e| e.classify("reading cluster resources"))?;
        Ok(self.resources.get_or_init(|| list))
    }

    /// The storages of `node` as `GET /nodes/{node}/storage` lists them (`storage`,
    /// `type`, `content`, `shared`, `active`, `enabled`): taken from the cluster's
    /// resources when this call has read them (one request fewer), else asked for. A
    /// listing without the node's storages (a token that may not audit them there)
    /// asks too.
    pub(super) fn node_storages(&self, node: &str) -> Result<Vec<Value>, PluginError> {
        if let Some(all) = self.resources.get() {
            let listed: Vec<Value> = all
                .iter()
                .filter(|r| r.is("storage") && r.node.as_deref() == Some(node))
                .map(|r| {
                    let available = r.status.as_deref() == Some("available");
                    serde_json::json!({
                        "storage": r.storage,
                        "type": r.plugintype,
                        "content": r.content,
                        "shared": r.shared,
                        "active": u64::from(available),
                        "enabled": 1,
                    })
                })
                .collect();
            if !listed.is_empty() {
                return Ok(listed);
            }
        }
        match self
            .pve
            .get(&format!("/nodes/{}/storage", percent_encode(node)))
            .map_err(|e| e.classify(&format!("listing the storages of {node}")))?
        {
            Value::Array(list) => Ok(list),
            other => Err(transient(
                format!("unreadable storage list of {node}: {other}"),
                None,
            )),
        }
    }

    /// The cluster's VMs (not containers), templates included.
    pub(super) fn qemu_vms(&self) -> Result<impl Iterator<Item = &Resource>, PluginError> {
        Ok(self.resources()?.iter().filter(|v| v.is("qemu")))
    }

    pub(super) fn uid(&self) -> &str {
        &self.req.machine.uid
    }

    pub(super) fn config_path(&self, st: &State) -> String {
        format!(
            "/nodes/{}/qemu/{}",
            percent_encode(st.node.as_deref().unwrap_or_default()),
            st.vmid.unwrap_or_default()
        )
    }

    pub(super) fn get_config(&self, st: &State) -> Result<Value, PveError> {
        self.pve.get(&format!("{}/config", self.config_path(st)))
    }

    pub(super) fn details(&self, st: &State) -> Vec<(String, String)> {
        let mut d = vec![];
        if let Some(n) = &st.node {
            d.push(("node".into(), n.clone()));
        }
        if let Some(v) = st.vmid {
            d.push(("vmid".into(), v.to_string()));
        }
        d
    }

    pub(super) fn status(
        &self,
        st: &State,
        phase: &str,
        message: impl Into<String>,
        requeue: Option<u64>,
    ) -> MachineStatus {
        let ready = st.step == Step::Ready;
        let endpoint = &self.req.credentials.endpoint;
        let (mut waits, requeue) = waits_for(st.upid.as_deref(), endpoint, requeue);
        // A ready machine's VM is watched for drift by the observer, once no task of its
        // own is followed (the ISO removal after Ready): the describe at that task's end
        // names the watch. Until then only the task is asked after (a cheaper look, every
        // tick); the VM was seen running the moment before, and the task ends within
        // seconds unless PVE's queue for the node holds it.
        if let (true, None, Some(vmid), Some(node)) = (ready, &st.upid, st.vmid, &st.node) {
            waits.push(Wait {
                endpoint: endpoint.clone(),
                key: vm_key(vmid, node, &uid_tag(self.uid())),
            });
        }
        MachineStatus {
            progress: Progress {
                state: guest_kit::state::save(st),
                phase: phase.into(),
                message: message.into(),
                requeue_after_ms: requeue,
                waits,
                durable: st.is_durable(),
            },
            ready,
            provider_id: if ready {
                st.uuid.as_ref().map(|u| format!("proxmox://{u}"))
            } else {
                None
            },
            addresses: if ready { self.addresses(st) } else { vec![] },
            failure_domain: st.node.clone(),
            address_requests: self.address_requests(),
            needs_bootstrap: false,
            drift: None,
            details: self.details(st),
            plugin_status: None,
        }
    }
}
