//! A loaded plugin and the calls the host makes of it, one method per export. Each
//! call is written once for every contract (`exports::with_exports!`); how a call
//! runs (slot, sandbox, limits, checks) is `call`.
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::bindings::types::{Credentials, NamedCredentials, ObjectRef, PluginError, Progress};
use crate::bindings::{cluster, conversion, identity, machine, observer};
use crate::compat;
use crate::engine::Runtime;
use crate::error::CallError;
use crate::exports::{Exports as _, Pre, with_exports};
use crate::memory::PluginBudget;
use crate::state::Grants;
use crate::wit::{WIT_PACKAGE, WitMajor};

/// A loaded plugin: cheap to clone, safe to call from many tasks at once.
#[derive(Clone)]
pub struct Plugin {
    pub(crate) runtime: Runtime,
    pub(crate) pre: Pre,
    pub(crate) path: PathBuf,
    pub(crate) digest: String,
    pub(crate) name: Arc<str>,
    pub(crate) info: Option<Arc<identity::PluginInfo>>,
    /// HTTP requests all calls of this plugin may have in flight.
    pub(crate) in_flight: Arc<Semaphore>,
    /// Linear memory all calls of this plugin hold.
    pub(crate) memory: Arc<PluginBudget>,
    /// Request body bytes buffered for all calls of this plugin.
    pub(crate) request_bodies: Arc<PluginBudget>,
    /// It imports `grants` (see [`Plugin::asks_grants`]).
    pub(crate) asks_grants: bool,
}

/// Whom a call is about: the object it names (for logs), and whether the blobs and
/// claims it takes belong to that object (released with it) or cannot be taken.
pub(crate) enum Subject<'a> {
    None,
    /// The object owns what the call publishes or claims.
    Owner(&'a ObjectRef),
    /// Named in logs, but owns nothing: nothing would release what it took.
    Named(&'a ObjectRef),
}

impl Plugin {
    /// A plugin of `runtime` not yet asked who it is (`load` does, then names it).
    pub(crate) fn new(runtime: Runtime, pre: Pre, path: PathBuf, digest: String) -> Plugin {
        let limits = runtime.limits();
        let in_flight = limits.http_in_flight_per_plugin.max(1) as usize;
        let memory = PluginBudget::new(limits.memory_per_plugin_bytes());
        let request_bodies = PluginBudget::new(limits.request_body_per_plugin_bytes());
        let mut plugin = Plugin {
            pre,
            path,
            digest,
            name: Arc::from("(loading)"),
            info: None,
            in_flight: Arc::new(Semaphore::new(in_flight)),
            memory,
            request_bodies,
            asks_grants: false,
            runtime,
        };
        let grants = format!("{WIT_PACKAGE}/grants@");
        plugin.asks_grants = plugin.imports().iter().any(|i| i.starts_with(&grants));
        plugin
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    /// The runtime this plugin was loaded into.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// SHA-256 of the plugin file.
    pub fn digest(&self) -> &str {
        &self.digest
    }
    pub fn info(&self) -> &identity::PluginInfo {
        self.info.as_ref().expect("plugin info is read at load")
    }

    /// The contract the plugin speaks (`WIT_VERSION`'s, or 0.2's through `compat`).
    pub fn wit(&self) -> WitMajor {
        self.pre.wit()
    }

    /// Whether the plugin asks what its calls were granted (it imports `grants`, WIT
    /// 0.3.1): one that does not cannot be told, so the host must not call it where
    /// the answer would matter.
    pub fn asks_grants(&self) -> bool {
        self.asks_grants
    }

    /// Interfaces the component imports (for `hyperplug inspect`).
    pub fn imports(&self) -> Vec<String> {
        let engine = &self.runtime.inner.engine;
        let ty = self.pre.component().component_type();
        ty.imports(engine).map(|(n, _)| n.to_string()).collect()
    }

    pub(crate) async fn identity(&self) -> Result<identity::PluginInfo, CallError> {
        let (call, subject) = ("identity.info", Subject::None);
        self.invoke(
            call,
            &[],
            subject,
            async |store, instance| with_exports!(instance, e => e.info(store).await),
        )
        .await
    }

    pub async fn reconcile_cluster(
        &self,
        req: &cluster::ClusterRequest,
    ) -> Result<Result<cluster::ClusterStatus, PluginError>, CallError> {
        let credentials = credential_list(&req.credentials, &req.more_credentials);
        let (call, subject) = ("cluster.reconcile", Subject::Owner(&req.cluster));
        self.invoke(call, &credentials, subject, async |store, instance| {
            with_exports!(instance, e => e.reconcile_cluster(store, req).await)
        })
        .await
    }

    pub async fn delete_cluster(
        &self,
        req: &cluster::ClusterRequest,
    ) -> Result<Result<Option<Progress>, PluginError>, CallError> {
        let credentials = credential_list(&req.credentials, &req.more_credentials);
        let (call, subject) = ("cluster.delete", Subject::Owner(&req.cluster));
        self.invoke(call, &credentials, subject, async |store, instance| {
            with_exports!(instance, e => e.delete_cluster(store, req).await)
        })
        .await
    }

    /// `create` with nothing granted (see [`Plugin::create_machine_with`]).
    pub async fn create_machine(
        &self,
        req: &machine::MachineRequest,
    ) -> Result<Result<machine::MachineStatus, PluginError>, CallError> {
        self.create_machine_with(req, Grants::default()).await
    }

    /// `create`, the call's object granted `grants` (what the `grants` import answers).
    pub async fn create_machine_with(
        &self,
        req: &machine::MachineRequest,
        grants: Grants,
    ) -> Result<Result<machine::MachineStatus, PluginError>, CallError> {
        let credentials = credential_list(&req.credentials, &req.more_credentials);
        let (call, subject) = ("machine.create", Subject::Owner(&req.machine));
        self.invoke_granted(call, &credentials, subject, grants, async |store, instance| {
            with_exports!(instance, e => e.create_machine(store, req).await)
        })
        .await
    }

    pub async fn describe_machine(
        &self,
        req: &machine::MachineRequest,
    ) -> Result<Result<machine::MachineStatus, PluginError>, CallError> {
        let credentials = credential_list(&req.credentials, &req.more_credentials);
        let (call, subject) = ("machine.describe", Subject::Owner(&req.machine));
        self.invoke(call, &credentials, subject, async |store, instance| {
            with_exports!(instance, e => e.describe_machine(store, req).await)
        })
        .await
    }

    pub async fn delete_machine(
        &self,
        req: &machine::MachineRequest,
    ) -> Result<Result<Option<Progress>, PluginError>, CallError> {
        let credentials = credential_list(&req.credentials, &req.more_credentials);
        let (call, subject) = ("machine.delete", Subject::Owner(&req.machine));
        self.invoke(call, &credentials, subject, async |store, instance| {
            with_exports!(instance, e => e.delete_machine(store, req).await)
        })
        .await
    }

    pub async fn describe_template(
        &self,
        req: &machine::TemplateRequest,
    ) -> Result<Result<machine::TemplateStatus, PluginError>, CallError> {
        let credentials = req.credentials.iter().collect::<Vec<_>>();
        let (call, subject) = ("machine.describe-template", Subject::Named(&req.template));
        self.invoke(call, &credentials, subject, async |store, instance| {
            with_exports!(instance, e => e.describe_template(store, req).await)
        })
        .await
    }

    /// Convert an object between two API versions of a kind. Reaches nothing (no
    /// credentials: no egress) and owns nothing (no object: no blobs, claims or
    /// reservations). A 0.2 plugin's kinds have one version: answered here, in no
    /// sandbox and no slot.
    pub async fn convert(
        &self,
        req: &conversion::ConversionRequest,
    ) -> Result<Result<conversion::Converted, PluginError>, CallError> {
        if self.wit() == WitMajor::V0_2 {
            return Ok(compat::convert(self.info(), req));
        }
        let (call, subject) = ("conversion.convert", Subject::None);
        self.invoke(
            call,
            &[],
            subject,
            async |store, instance| with_exports!(instance, e => e.convert(store, req).await),
        )
        .await
    }

    /// One look at an endpoint for the pending wait keys registered for it. A 0.2
    /// plugin names no waits: nothing fires, and it is not called.
    pub async fn observe(
        &self,
        req: &observer::ObserveRequest,
    ) -> Result<Result<observer::Observation, PluginError>, CallError> {
        if self.wit() == WitMajor::V0_2 {
            return Ok(Ok(compat::observation()));
        }
        let (call, subject) = ("observer.observe", Subject::None);
        self.invoke(
            call,
            &[&req.credentials],
            subject,
            async |store, instance| with_exports!(instance, e => e.observe(store, req).await),
        )
        .await
    }
}

/// Every credentials of a call: the primary ones first.
fn credential_list<'a>(
    primary: &'a Credentials,
    more: &'a [NamedCredentials],
) -> Vec<&'a Credentials> {
    std::iter::once(primary)
        .chain(more.iter().map(|n| &n.credentials))
        .collect()
}
