//! Someone else at the Proxmox API: an administrator (or PVE's own load balancer) who
//! deletes, stops, creates and migrates VMs out of band, with a token of their own so
//! the simulator's records tell their actions from the manager's. Their requests meet
//! the same injected faults, so every action is retried until the simulator's state
//! shows it done.
use std::time::Duration;

use anyhow::{Context, Result, bail};
use pve_sim::{RunningSim, StateHandle};
use serde_json::Value;

/// The administrator's token (the simulator accepts it besides the manager's).
pub const ADMIN_TOKEN: &str = "root@pam!chaos=CHAOS-ADMIN-SECRET";
/// The principal a token authenticates as (`USER@REALM!TOKENID`), as PVE records it.
pub fn principal(token: &str) -> &str {
    token.split_once('=').map_or(token, |(id, _)| id)
}

/// How long an out-of-band action keeps trying.
const PATIENCE: Duration = Duration::from_secs(120);

pub struct Admin {
    http: reqwest::Client,
    base: String,
    auth: String,
    state: StateHandle,
}

impl Admin {
    pub fn new(sim: &RunningSim) -> Result<Admin> {
        let ca = reqwest::Certificate::from_pem(sim.ca_pem().as_bytes())?;
        Ok(Admin {
            http: reqwest::Client::builder()
                .add_root_certificate(ca)
                .timeout(Duration::from_secs(30))
                .build()?,
            base: format!("{}/api2/json", sim.base_url()),
            auth: format!("PVEAPIToken={ADMIN_TOKEN}"),
            state: sim.state(),
        })
    }

    /// One API call; the reply's `data`, or the error PVE gave.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        form: &[(&str, &str)],
    ) -> Result<Value> {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .header("Authorization", &self.auth);
        req = if method == reqwest::Method::GET || method == reqwest::Method::DELETE {
            req.query(form)
        } else {
            req.form(form)
        };
        let reply = req.send().await?;
        let status = reply.status();
        let reason = status.canonical_reason().unwrap_or_default().to_string();
        let body: Value = reply.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            let message = body["message"]
                .as_str()
                .unwrap_or(&reason)
                .trim()
                .to_string();
            bail!("{method} {path}: {} {message}", status.as_u16());
        }
        Ok(body["data"].clone())
    }

    /// The VM as the simulator has it now.
    pub fn vm(&self, vmid: u32) -> Option<Value> {
        self.state.vm(vmid)
    }

    /// Repeats `attempt` until `done` holds (or gives up after a while): a request may
    /// fail, or be carried out with its reply lost, so the world decides, not the reply.
    async fn until<F, Fut>(
        &self,
        what: &str,
        mut done: impl FnMut(&Self) -> bool,
        mut attempt: F,
    ) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<Value>>,
    {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        let mut last = String::new();
        while tokio::time::Instant::now() < deadline {
            if done(self) {
                return Ok(());
            }
            if let Err(e) = attempt().await {
                last = e.to_string();
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        bail!("{what}: not done after {PATIENCE:?} (last error: {last})")
    }

    fn node_of(&self, vmid: u32) -> Result<String> {
        self.vm(vmid)
            .and_then(|v| v["node"].as_str().map(String::from))
            .with_context(|| format!("VM {vmid} does not exist"))
    }

    /// Stops the VM through the API and waits until it is stopped.
    pub async fn power_off(&self, vmid: u32) -> Result<()> {
        self.until(
            &format!("stopping VM {vmid}"),
            |a| a.vm(vmid).is_some_and(|v| v["status"] == "stopped"),
            || async {
                let node = self.node_of(vmid)?;
                self.call(
                    reqwest::Method::POST,
                    &format!("/nodes/{node}/qemu/{vmid}/status/stop"),
                    &[],
                )
                .await
            },
        )
        .await
    }

    /// Stops and destroys the VM through the API, as an administrator cleaning up would.
    pub async fn destroy(&self, vmid: u32) -> Result<()> {
        self.power_off(vmid).await?;
        self.until(
            &format!("destroying VM {vmid}"),
            |a| a.vm(vmid).is_none(),
            || async {
                let node = self.node_of(vmid)?;
                self.call(
                    reqwest::Method::DELETE,
                    &format!("/nodes/{node}/qemu/{vmid}"),
                    &[("purge", "1"), ("destroy-unreferenced-disks", "1")],
                )
                .await
            },
        )
        .await
    }

    /// Creates a VM on `node` with `vmid`, named `name`, tagged and described like a
    /// machine's VM of another manager: the marker names `foreign_uid`.
    pub async fn create_foreign(
        &self,
        node: &str,
        vmid: u32,
        name: &str,
        foreign_uid: &str,
    ) -> Result<()> {
        let vmid_s = vmid.to_string();
        let description = format!(
            "Managed by hyperplug for machine elsewhere/{name} of another management cluster\nhyperplug.machine-uid={foreign_uid}"
        );
        let tag = format!("hp-{foreign_uid}");
        let tags = format!("hyperplug;{tag}");
        self.until(
            &format!("creating VM {vmid}"),
            |a| {
                a.vm(vmid)
                    .is_some_and(|v| v["lock"].is_null() && v["name"] == name)
            },
            || async {
                self.call(
                    reqwest::Method::POST,
                    &format!("/nodes/{node}/qemu"),
                    &[
                        ("vmid", &vmid_s),
                        ("name", name),
                        ("description", &description),
                        ("tags", &tags),
                        ("memory", "1024"),
                        ("cores", "1"),
                        ("scsi0", "local-lvm:4"),
                        ("net0", "virtio,bridge=vmbr0"),
                    ],
                )
                .await
            },
        )
        .await
    }

    /// Migrates the VM through the API (a `qmigrate` task that locks it meanwhile), live
    /// when it runs. Returns once PVE accepted it; the task may still refuse.
    pub async fn migrate(&self, vmid: u32, target: &str) -> Result<()> {
        let vm = self
            .vm(vmid)
            .with_context(|| format!("VM {vmid} does not exist"))?;
        let node = vm["node"].as_str().unwrap_or_default();
        let mut form = vec![("target", target)];
        if vm["status"] == "running" {
            form.extend([("online", "1"), ("with-local-disks", "1")]);
        }
        self.call(
            reqwest::Method::POST,
            &format!("/nodes/{node}/qemu/{vmid}/migrate"),
            &form,
        )
        .await
        .map(drop)
    }
}
