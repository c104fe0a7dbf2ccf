//! The listener (HTTPS or HTTP/1.1), the running simulator and its inspection handle.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::faults::Faults;
use crate::state::{Counters, World};

/// Where and how to listen.
#[derive(Debug, Clone)]
pub struct ListenOpts {
    /// `host:port`; port 0 picks a free port.
    pub addr: String,
    /// HTTPS with a generated CA (`true`) or plain HTTP.
    pub tls: bool,
}

impl Default for ListenOpts {
    fn default() -> Self {
        Self {
            addr: "127.0.0.1:8006".into(),
            tls: true,
        }
    }
}

/// State shared by the listener, the handlers and the tasks.
pub struct Shared {
    pub config: Config,
    pub world: Mutex<World>,
    /// One semaphore per node limiting concurrent tasks.
    pub node_slots: HashMap<String, Arc<Semaphore>>,
    pub shutdown: watch::Receiver<bool>,
    /// Leaf fingerprint (`ssl_fingerprint` of `/nodes`); empty without TLS.
    pub fingerprint: String,
    /// Woken whenever a config file lock is released (see `locks`).
    pub unlocked: tokio::sync::Notify,
    /// The API requests served, in order, for a run's post-mortem (see `journal`).
    pub journal: crate::journal::Journal,
    /// Roles, ACLs and tokens, resolved from the config (see `perms`).
    pub access: crate::perms::Access,
}

impl Shared {
    /// Locks the world (a poisoned lock is still usable: the world stays consistent
    /// between requests).
    pub fn lock(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Entry point of the library.
pub struct Simulator;

impl Simulator {
    /// Builds the world from `config`, binds `opts.addr` and serves until the returned
    /// handle is dropped or shut down.
    pub async fn start(config: Config, opts: ListenOpts) -> anyhow::Result<RunningSim> {
        let world = World::new(&config)?;
        let access = crate::perms::Access::new(&config)?;
        let listener = TcpListener::bind(&opts.addr).await?;
        let local = listener.local_addr()?;
        let (tx, rx) = watch::channel(false);
        let (tls, ca_pem, ca_path, fingerprint, ca_dir) = if opts.tls {
            let dir = std::env::temp_dir().join(format!(
                "pve-sim-{}-{}-{}",
                std::process::id(),
                local.port(),
                fastrand::u32(..)
            ));
            let mut names: Vec<String> = config.nodes.iter().map(|n| n.name.clone()).collect();
            names.push(local.ip().to_string());
            let m = crate::tls::generate(&names, &dir)?;
            (
                Some(tokio_rustls::TlsAcceptor::from(m.server_config.clone())),
                m.ca_pem,
                Some(m.ca_path),
                m.fingerprint,
                Some(dir),
            )
        } else {
            (None, String::new(), None, String::new(), None)
        };
        let concurrency = if config.node_task_concurrency == 0 {
            Semaphore::MAX_PERMITS
        } else {
            config.node_task_concurrency
        };
        let node_slots = config
            .nodes
            .iter()
            .map(|n| (n.name.clone(), Arc::new(Semaphore::new(concurrency))))
            .collect();
        let shared = Arc::new(Shared {
            config,
            world: Mutex::new(world),
            node_slots,
            shutdown: rx,
            fingerprint: fingerprint.clone(),
            unlocked: tokio::sync::Notify::new(),
            journal: crate::journal::Journal::default(),
            access,
        });
        let accept = tokio::spawn(accept_loop(listener, tls, shared.clone()));
        let scheme = if opts.tls { "https" } else { "http" };
        Ok(RunningSim {
            base_url: format!("{scheme}://{local}"),
            addr: local,
            ca_pem,
            ca_path,
            ca_dir,
            fingerprint,
            shared,
            stop: Some(tx),
            accept: Some(accept),
        })
    }
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shared: Arc<Shared>,
) {
    let mut stop = shared.shutdown.clone();
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            acc = listener.accept() => {
                let Ok((stream, _peer)) = acc else {
                    // e.g. out of file descriptors: back off instead of spinning
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let shared = shared.clone();
                let tls = tls.clone();
                conns.spawn(async move {
                    let svc = service_fn(move |req| {
                        let shared = shared.clone();
                        async move { Ok::<_, std::convert::Infallible>(handle(shared, req).await) }
                    });
                    let builder = hyper::server::conn::http1::Builder::new();
                    match tls {
                        Some(acceptor) => {
                            if let Ok(s) = acceptor.accept(stream).await {
                                let _ = builder.serve_connection(TokioIo::new(s), svc).await;
                            }
                        }
                        None => {
                            let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
                        }
                    }
                });
            }
        }
    }
    conns.shutdown().await;
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let limit = shared.config.max_body_bytes;
    let body = match Limited::new(body, limit).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return crate::envelope::error(
                &crate::envelope::ApiError::with_status(413, "request entity too large"),
                true,
            );
        }
    };
    if parts.uri.path().starts_with("/_sim/") || parts.uri.path() == "/_sim" {
        return crate::inspect::handle(&shared, &parts, body);
    }
    crate::api::handle(&shared, parts, body).await
}

/// A running simulator. Dropping it stops the listener and all tasks.
pub struct RunningSim {
    base_url: String,
    addr: SocketAddr,
    ca_pem: String,
    ca_path: Option<PathBuf>,
    ca_dir: Option<PathBuf>,
    fingerprint: String,
    shared: Arc<Shared>,
    stop: Option<watch::Sender<bool>>,
    accept: Option<JoinHandle<()>>,
}

impl RunningSim {
    /// `https://127.0.0.1:PORT` (or `http://...`); the API is under `/api2/json`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// The CA certificate (PEM); empty without TLS.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }
    /// Where the CA certificate was written (`None` without TLS).
    pub fn ca_path(&self) -> Option<&std::path::Path> {
        self.ca_path.as_deref()
    }
    /// SHA-256 fingerprint of the leaf certificate, `AA:BB:...`; empty without TLS.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
    /// Inspection and runtime control.
    pub fn state(&self) -> StateHandle {
        StateHandle(self.shared.clone())
    }
    /// Stops serving and waits for the listener to finish.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(true);
        }
        if let Some(h) = self.accept.take() {
            let _ = h.await;
        }
    }
}

impl Drop for RunningSim {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(true);
        }
        if let Some(dir) = &self.ca_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Inspection and control of a running simulator (cheap to clone).
#[derive(Clone)]
pub struct StateHandle(pub(crate) Arc<Shared>);

impl StateHandle {
    /// Every VM with its node, status, config (digest included) and guest addresses.
    pub fn vms(&self) -> Vec<Value> {
        crate::inspect::vms_json(&self.0.lock())
    }
    /// One VM, as in `vms()`.
    pub fn vm(&self, vmid: u32) -> Option<Value> {
        let w = self.0.lock();
        w.vms.get(&vmid).map(|vm| crate::inspect::vm_json(&w, vm))
    }
    /// Requests per endpoint, keyed `"METHOD /path/template"`.
    pub fn counters(&self) -> Counters {
        self.0.lock().counters.clone()
    }
    /// Zeroes the request counters.
    pub fn reset_counters(&self) {
        self.0.lock().counters.clear();
    }
    /// Current faults.
    pub fn faults(&self) -> Faults {
        self.0.lock().faults.clone()
    }
    /// Replaces the faults (and zeroes the rules' hit counters).
    pub fn set_faults(&self, faults: Faults) {
        self.0.lock().set_faults(faults);
    }
    /// Per fault rule: its pattern and how many requests it matched, skipped and faulted.
    pub fn fault_hits(&self) -> Value {
        self.0.lock().fault_hits_json()
    }
    /// Everything: nodes, storages, VMs, pools, tasks, counters, faults.
    pub fn dump(&self) -> Value {
        crate::inspect::dump(&self.0.lock())
    }
    /// Stops a running VM at once, without a task (a guest crash); `false` if it was not
    /// running or does not exist.
    pub fn crash_vm(&self, vmid: u32) -> bool {
        let mut w = self.0.lock();
        match w.vms.get_mut(&vmid) {
            Some(vm) if vm.run.is_some() => {
                vm.run = None;
                true
            }
            _ => false,
        }
    }
    /// Removes a VM at once, as an administrator destroying it behind the manager's back
    /// would; `false` if there is none.
    pub fn destroy_vm(&self, vmid: u32) -> bool {
        self.0.lock().vms.remove(&vmid).is_some()
    }
    /// Moves a VM to `target` at once, as a migration done by someone else (see
    /// `POST /_sim/vms/{vmid}/migrate`); the error says why it cannot move now.
    pub fn migrate_vm(&self, vmid: u32, target: &str) -> Result<(), String> {
        crate::inspect::migrate_now(&mut self.0.lock(), vmid, target)
            .map(|_| ())
            .map_err(|(_, e)| e)
    }
    /// Every VM a `qmdestroy` task removed, oldest first, as `/_sim/destroyed` shows it:
    /// VMID, node, the principal whose request destroyed it, `at_ms`, its last config.
    pub fn destroyed(&self) -> Vec<Value> {
        self.0
            .lock()
            .destroyed
            .iter()
            .filter_map(|d| serde_json::to_value(d).ok())
            .collect()
    }
    /// The last API requests served (at most `journal::CAPACITY`), oldest first: when,
    /// who (`user`), method, path, a prefix of the parameters, and the status with the
    /// data's or the error's first characters.
    pub fn requests(&self) -> Vec<Value> {
        self.0.journal.entries()
    }
    /// All tasks as `/_sim/tasks` shows them (status, queued, log, millisecond timeline),
    /// oldest first.
    pub fn tasks(&self) -> Vec<Value> {
        let w = self.0.lock();
        w.task_order
            .iter()
            .filter_map(|u| w.tasks.get(u).map(|t| t.inspect_json()))
            .collect()
    }
}
