//! The plugin runtime: loads WebAssembly components and calls them, each call in a
//! fresh sandbox with memory, CPU and wall-clock limits and one gated egress; serves
//! what plugins publish (`blob_server`) and gives the CRDs of the kinds a plugin
//! declares (`crds`). It knows no controller and no command line.
//!
//! Compile once (cached on disk), one `InstancePre` per plugin, a fresh `Store` per
//! call: no state survives a call, so nothing leaks between calls or clusters.
pub mod bindings;
pub mod blob_server;
pub mod blobs;
pub mod claims;
mod compat;
pub mod crds;
pub mod credentials;
mod egress;
pub mod error;
mod failure;
pub mod limits;
mod loader;
mod memory;
mod meter;
pub mod overhead;
mod reservations;
mod slots;
mod state;
pub mod status;
mod text;
pub mod tls;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use wasmtime::component::Linker;
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, UpdateDeadline,
};

pub use bindings::types::{Credentials, NamedCredentials, ObjectRef, PluginError};
pub use blobs::{BlobLimits, BlobStore};
pub use claims::{ClaimStore, MemoryClaims};
pub use error::{CallError, LoadError};
pub use limits::{Breach, Limits};
pub use loader::{WIT_COMPAT_VERSION, WIT_PACKAGE, WIT_VERSION, WitMajor, private};

use bindings::{Plugin as Bindings, PluginPre};
use compat::v0_2::{Plugin as Bindings0_2, PluginPre as PluginPre0_2};
pub use egress::HttpObserver;
use egress::{Egress, EndpointCache};
use memory::PluginBudget;
use meter::{CallMeter, Metered, Stop};
use reservations::Reservations;
use slots::FairSlots;
use state::{CallLog, CallState, Services};

/// Pooled memories and tables per call in flight (see `build`).
const MEMORIES_PER_CALL: u32 = 2;
const TABLES_PER_CALL: u32 = 4;

/// Bytes of each pooled memory, table and stack slot kept resident between calls. A
/// call touches about 1 MiB: keeping 512 KiB of each slot held 7.5 MiB more at 1,000
/// machines than 64 KiB does, for 18 µs more per call (p50 27 → 45 µs) and the same CPU
/// per machine.
const KEEP_RESIDENT: usize = 64 << 10;

/// How often the engine's epoch advances: the resolution of the CPU budget.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// The shared engine, linker and HTTP endpoints (with their clients) of every loaded
/// plugin.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<RuntimeInner>,
}

struct RuntimeInner {
    engine: Engine,
    linker: Linker<CallState>,
    limits: Limits,
    cache_dir: Option<PathBuf>,
    endpoints: EndpointCache,
    observer: Option<HttpObserver>,
    blobs: Arc<BlobStore>,
    claims: Arc<dyn ClaimStore>,
    reservations: Arc<Reservations>,
    /// One permit per pooled instance slot (`--plugin-concurrency`): a call waits for
    /// one rather than fail because the pool is full.
    slots: Arc<FairSlots>,
    /// The slots of calls given no credentials: see [`OFFLINE_SLOTS`].
    offline_slots: Arc<Semaphore>,
}

/// Pooled instance slots, besides `--plugin-concurrency`'s, for calls given no
/// credentials (conversions, template descriptions, identity). Such a call reaches no
/// endpoint and no claims, and its wall-clock limit is [`OFFLINE_WALL_PER_CPU`] CPU
/// budgets: it only computes, usually for well under a millisecond. Queued behind
/// calls that wait on an endpoint, it would wait as long as they do, and the conversion
/// webhook answers the API server's writes of every object with such calls: at 1,000
/// machines, one in twenty conversions waited 50 to 200 ms for a slot.
pub const OFFLINE_SLOTS: u32 = 4;

/// An offline call's wall-clock limit, in CPU budgets (`--plugin-cpu-ms`): room for
/// waiting on a busy CPU, none for waiting on anything else.
pub const OFFLINE_WALL_PER_CPU: u64 = 4;

/// How a [`Runtime`] is made: its limits, where compiled plugins are cached, who hears
/// of plugins' HTTP requests, and the stores behind the `blobs` and `claims` imports.
pub struct RuntimeBuilder {
    limits: Limits,
    cache_dir: Option<PathBuf>,
    observer: Option<HttpObserver>,
    blobs: Arc<BlobStore>,
    claims: Arc<dyn ClaimStore>,
}

impl RuntimeBuilder {
    /// Keep compiled plugins between runs in `dir` (none: compile in memory only).
    pub fn cache_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.cache_dir = dir;
        self
    }

    /// Be told of every HTTP request any plugin sends (for metrics).
    pub fn observe_http(mut self, observer: HttpObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Serve the `blobs` import from `store` (without it every publish fails saying the
    /// host serves no blobs).
    pub fn blobs(mut self, store: Arc<BlobStore>) -> Self {
        self.blobs = store;
        self
    }

    /// Keep the `claims` import's claims in `store` (without it claims live in this
    /// process's memory).
    pub fn claims(mut self, store: Arc<dyn ClaimStore>) -> Self {
        self.claims = store;
        self
    }

    /// Build the engine.
    pub fn build(self) -> anyhow::Result<Runtime> {
        let limits = self.limits;
        let mut config = Config::new();
        config.epoch_interruption(true);
        // A pool of pre-reserved instance slots makes a fresh instance per call cheap.
        let mut pool = PoolingAllocationConfig::default();
        let calls = limits.concurrency + OFFLINE_SLOTS + 8;
        pool.total_component_instances(calls)
            .total_core_instances(calls * memory::CORE_INSTANCES_PER_CALL as u32)
            // One call's component instance holds several core instances, each with its
            // own tables (the adapter shims' and the module's) and maybe a memory: sized
            // per call, or a call the concurrency limit admits could find no slot.
            .total_memories(calls * MEMORIES_PER_CALL)
            .total_tables(calls * TABLES_PER_CALL)
            .max_memory_size(limits.memory_bytes())
            // Keep the first pages of each slot mapped between calls: resetting them with
            // memset is cheaper than unmapping and faulting them back in every call (the
            // rest is given back: see `KEEP_RESIDENT`).
            .linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(KEEP_RESIDENT)
            .async_stack_keep_resident(KEEP_RESIDENT)
            // A slot used before is taken again before a fresh one: the slots that hold
            // memory between calls are as many as calls ever ran at once, not the whole
            // pool (at 1,000 machines, before the offline slots, all 24 slots kept about
            // 800 KiB each).
            .max_unused_warm_slots(0);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
        bindings::hyperplug::provider::log::add_to_linker::<_, wasmtime::component::HasSelf<_>>(
            &mut linker,
            |state: &mut CallState| state,
        )?;
        bindings::hyperplug::provider::blobs::add_to_linker::<_, wasmtime::component::HasSelf<_>>(
            &mut linker,
            |state: &mut CallState| state,
        )?;
        bindings::hyperplug::provider::claims::add_to_linker::<_, wasmtime::component::HasSelf<_>>(
            &mut linker,
            |state: &mut CallState| state,
        )?;
        bindings::hyperplug::provider::reservations::add_to_linker::<
            _,
            wasmtime::component::HasSelf<_>,
        >(&mut linker, |state: &mut CallState| state)?;
        bindings::hyperplug::provider::grants::add_to_linker::<_, wasmtime::component::HasSelf<_>>(
            &mut linker,
            |state: &mut CallState| state,
        )?;
        compat::add_to_linker(&mut linker)?;
        start_epoch_ticker(&engine);
        Ok(Runtime {
            inner: Arc::new(RuntimeInner {
                engine,
                linker,
                cache_dir: self.cache_dir,
                endpoints: EndpointCache::default(),
                observer: self.observer,
                blobs: self.blobs,
                claims: self.claims,
                reservations: Arc::default(),
                slots: FairSlots::new(limits.concurrency as usize),
                offline_slots: Arc::new(Semaphore::new(OFFLINE_SLOTS as usize)),
                limits,
            }),
        })
    }
}

impl Runtime {
    /// A runtime with these limits: set the rest on the builder, then `build()`.
    pub fn builder(limits: Limits) -> RuntimeBuilder {
        RuntimeBuilder {
            limits,
            cache_dir: None,
            observer: None,
            blobs: Arc::new(BlobStore::disabled()),
            claims: Arc::new(MemoryClaims::default()),
        }
    }

    /// A runtime that serves no blobs and keeps claims in memory. `cache_dir` keeps
    /// compiled plugins between runs.
    pub fn new(limits: Limits, cache_dir: Option<PathBuf>) -> anyhow::Result<Runtime> {
        Runtime::builder(limits).cache_dir(cache_dir).build()
    }

    /// The store behind the `blobs` import.
    pub fn blobs(&self) -> Arc<BlobStore> {
        self.inner.blobs.clone()
    }

    /// The store behind the `claims` import.
    pub fn claims(&self) -> Arc<dyn ClaimStore> {
        self.inner.claims.clone()
    }

    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// Whether a call with credentials about an object of `namespace` would be refused
    /// now ([`CallError::TenantAtShare`]): the namespace's calls hold or wait for its
    /// whole share of the plugin slots. A caller that would otherwise read the API
    /// server to prepare the call asks first, and comes back later instead.
    pub fn tenant_at_share(&self, namespace: &str) -> bool {
        self.inner.slots.at_share(namespace)
    }

    /// Load, check, compile and describe a plugin.
    pub async fn load(&self, path: &Path) -> Result<Plugin, LoadError> {
        let inner = &self.inner;
        let (component, digest, major) = {
            let (engine, file, cache) = (
                inner.engine.clone(),
                path.to_path_buf(),
                inner.cache_dir.clone(),
            );
            // Compiling takes seconds of CPU: keep it off the async workers.
            tokio::task::spawn_blocking(move || {
                loader::load_component(&engine, &file, cache.as_deref())
            })
            .await
            .map_err(|e| LoadError::Other {
                path: path.into(),
                detail: e.to_string(),
            })??
        };
        let other = |detail: String| LoadError::Other {
            path: path.into(),
            detail,
        };
        let pre = inner
            .linker
            .instantiate_pre(&component)
            .map_err(|e| LoadError::Invalid {
                path: path.into(),
                detail: format!("{e:#}"),
            })?;
        let pre = match major {
            WitMajor::Current => {
                Pre::Current(PluginPre::new(pre).map_err(|e| other(format!("{e:#}")))?)
            }
            WitMajor::V0_2 => {
                Pre::V0_2(PluginPre0_2::new(pre).map_err(|e| other(format!("{e:#}")))?)
            }
        };
        let mut plugin = Plugin {
            runtime: self.clone(),
            pre,
            path: path.to_path_buf(),
            digest,
            name: Arc::from("(loading)"),
            info: None,
            in_flight: Arc::new(Semaphore::new(
                inner.limits.http_in_flight_per_plugin.max(1) as usize,
            )),
            memory: PluginBudget::new(inner.limits.memory_per_plugin_bytes()),
            request_bodies: PluginBudget::new(inner.limits.request_body_per_plugin_bytes()),
            asks_grants: false,
        };
        let grants = format!("{WIT_PACKAGE}/grants@");
        plugin.asks_grants = plugin.imports().iter().any(|i| i.starts_with(&grants));
        let info = plugin
            .identity()
            .await
            .map_err(|e| other(format!("calling identity.info: {e}")))?;
        validate_info(&info).map_err(other)?;
        plugin.name = Arc::from(info.name.as_str());
        plugin.info = Some(Arc::new(info));
        Ok(plugin)
    }
}

/// Advance the epoch from a plain thread, so the CPU budget keeps counting even when
/// every tokio worker is busy. The thread ends when the engine is dropped.
fn start_epoch_ticker(engine: &Engine) {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("hyperplug-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .expect("spawn epoch thread");
}

fn validate_info(info: &bindings::identity::PluginInfo) -> Result<(), String> {
    let name_ok = !info.name.is_empty()
        && info
            .name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !name_ok {
        return Err(format!(
            "plugin name `{}` must be lower-case letters, digits and dashes",
            info.name
        ));
    }
    if info.kinds.is_empty() {
        return Err("plugin declares no kinds".into());
    }
    for (i, kind) in info.kinds.iter().enumerate() {
        let plural = crate::crds::plural(&kind.kind);
        if info.kinds[..i]
            .iter()
            .any(|k| crate::crds::plural(&k.kind) == plural)
        {
            return Err(format!("plugin declares kind {} twice", kind.kind));
        }
    }
    for kind in &info.kinds {
        validate_versions(info, kind)?;
    }
    Ok(())
}

/// A kind's versions: each named once with object schemas, exactly one stored, and the
/// plugin's `api-version` among the served ones.
fn validate_versions(
    info: &bindings::identity::PluginInfo,
    kind: &bindings::identity::KindInfo,
) -> Result<(), String> {
    let object_schema = |what: &str, version: &str, json: &str| {
        let schema: serde_json::Value = serde_json::from_str(json).map_err(|e| {
            format!(
                "kind {} version {version}: {what} is not JSON: {e}",
                kind.kind
            )
        })?;
        if schema.get("type").and_then(|t| t.as_str()) != Some("object") {
            return Err(format!(
                "kind {} version {version}: {what} must be an object schema",
                kind.kind
            ));
        }
        Ok(())
    };
    for (i, v) in kind.versions.iter().enumerate() {
        if kind.versions[..i].iter().any(|o| o.name == v.name) {
            return Err(format!(
                "kind {} declares version {} twice",
                kind.kind, v.name
            ));
        }
        object_schema("spec-schema", &v.name, &v.spec_schema)?;
        if let Some(status) = &v.status_schema {
            object_schema("status-schema", &v.name, status)?;
        }
    }
    let stored = kind.versions.iter().filter(|v| v.storage).count();
    if stored != 1 {
        return Err(format!(
            "kind {} must store exactly one version (it marks {stored} as storage)",
            kind.kind
        ));
    }
    if !kind.version(&info.api_version).is_some_and(|v| v.served) {
        return Err(format!(
            "kind {} does not serve the plugin's api-version {}",
            kind.kind, info.api_version
        ));
    }
    Ok(())
}

/// A plugin's compiled, linked component, by the contract it speaks.
#[derive(Clone)]
enum Pre {
    Current(PluginPre<CallState>),
    V0_2(PluginPre0_2<CallState>),
}

/// One instance of a plugin, by the contract it speaks.
enum Instance {
    Current(Bindings),
    V0_2(Bindings0_2),
}

/// A loaded plugin: cheap to clone, safe to call from many tasks at once.
#[derive(Clone)]
pub struct Plugin {
    runtime: Runtime,
    pre: Pre,
    path: PathBuf,
    digest: String,
    name: Arc<str>,
    info: Option<Arc<bindings::identity::PluginInfo>>,
    /// HTTP requests all calls of this plugin may have in flight.
    in_flight: Arc<Semaphore>,
    /// Linear memory all calls of this plugin hold.
    memory: Arc<PluginBudget>,
    /// Request body bytes buffered for all calls of this plugin.
    request_bodies: Arc<PluginBudget>,
    /// It imports `grants` (see [`Plugin::asks_grants`]).
    asks_grants: bool,
}

/// What an administrator granted a call's object beyond what it made itself: the host
/// decides, a plugin asks through the `grants` import (WIT 0.3.1). Nothing by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Grants {
    /// The call may take over infrastructure another provider made for the object.
    pub adoption: bool,
}

/// Whom a call is about: the object it names (for logs), and whether the blobs and
/// claims it takes belong to that object (released with it) or cannot be taken.
enum Subject<'a> {
    None,
    /// The object owns what the call publishes or claims.
    Owner(&'a ObjectRef),
    /// Named in logs, but owns nothing: nothing would release what it took.
    Named(&'a ObjectRef),
}

impl Plugin {
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
    pub fn info(&self) -> &bindings::identity::PluginInfo {
        self.info.as_ref().expect("plugin info is read at load")
    }

    /// The contract the plugin speaks (`WIT_VERSION`'s, or 0.2's through `compat`).
    pub fn wit(&self) -> WitMajor {
        match self.pre {
            Pre::Current(_) => WitMajor::Current,
            Pre::V0_2(_) => WitMajor::V0_2,
        }
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
        let component = match &self.pre {
            Pre::Current(p) => p.instance_pre().component(),
            Pre::V0_2(p) => p.instance_pre().component(),
        };
        let ty = component.component_type();
        ty.imports(engine).map(|(n, _)| n.to_string()).collect()
    }

    async fn identity(&self) -> Result<bindings::identity::PluginInfo, CallError> {
        self.invoke(
            "identity.info",
            &[],
            Subject::None,
            async |store, plugin| match plugin {
                Instance::Current(p) => p.hyperplug_provider_identity().call_info(store).await,
                Instance::V0_2(p) => Ok(compat::plugin_info(
                    p.hyperplug_provider_identity().call_info(store).await?,
                )),
            },
        )
        .await
    }

    pub async fn reconcile_cluster(
        &self,
        req: &bindings::cluster::ClusterRequest,
    ) -> Result<Result<bindings::cluster::ClusterStatus, PluginError>, CallError> {
        self.invoke(
            "cluster.reconcile",
            &credential_list(&req.credentials, &req.more_credentials),
            Subject::Owner(&req.cluster),
            async |store, plugin| match plugin {
                Instance::Current(p) => {
                    p.hyperplug_provider_cluster()
                        .call_reconcile(store, req)
                        .await
                }
                Instance::V0_2(p) => {
                    let old = compat::cluster_request(req);
                    let r = p.hyperplug_provider_cluster().call_reconcile(store, &old);
                    Ok(compat::result(r.await?, compat::cluster_status))
                }
            },
        )
        .await
    }

    pub async fn delete_cluster(
        &self,
        req: &bindings::cluster::ClusterRequest,
    ) -> Result<Result<Option<bindings::types::Progress>, PluginError>, CallError> {
        self.invoke(
            "cluster.delete",
            &credential_list(&req.credentials, &req.more_credentials),
            Subject::Owner(&req.cluster),
            async |store, plugin| match plugin {
                Instance::Current(p) => {
                    p.hyperplug_provider_cluster().call_delete(store, req).await
                }
                Instance::V0_2(p) => {
                    let old = compat::cluster_request(req);
                    let r = p.hyperplug_provider_cluster().call_delete(store, &old);
                    Ok(compat::result(r.await?, |p| p.map(compat::progress)))
                }
            },
        )
        .await
    }

    /// `create` with nothing granted (see [`Plugin::create_machine_with`]).
    pub async fn create_machine(
        &self,
        req: &bindings::machine::MachineRequest,
    ) -> Result<Result<bindings::machine::MachineStatus, PluginError>, CallError> {
        self.create_machine_with(req, Grants::default()).await
    }

    /// `create`, the call's object granted `grants` (what the `grants` import answers).
    pub async fn create_machine_with(
        &self,
        req: &bindings::machine::MachineRequest,
        grants: Grants,
    ) -> Result<Result<bindings::machine::MachineStatus, PluginError>, CallError> {
        self.invoke_granted(
            "machine.create",
            &credential_list(&req.credentials, &req.more_credentials),
            Subject::Owner(&req.machine),
            grants,
            async |store, plugin| match plugin {
                Instance::Current(p) => {
                    p.hyperplug_provider_machine().call_create(store, req).await
                }
                Instance::V0_2(p) => {
                    let old = compat::machine_request(req);
                    let r = p.hyperplug_provider_machine().call_create(store, &old);
                    Ok(compat::result(r.await?, compat::machine_status))
                }
            },
        )
        .await
    }

    pub async fn describe_machine(
        &self,
        req: &bindings::machine::MachineRequest,
    ) -> Result<Result<bindings::machine::MachineStatus, PluginError>, CallError> {
        self.invoke(
            "machine.describe",
            &credential_list(&req.credentials, &req.more_credentials),
            Subject::Owner(&req.machine),
            async |store, plugin| match plugin {
                Instance::Current(p) => {
                    p.hyperplug_provider_machine()
                        .call_describe(store, req)
                        .await
                }
                Instance::V0_2(p) => {
                    let old = compat::machine_request(req);
                    let r = p.hyperplug_provider_machine().call_describe(store, &old);
                    Ok(compat::result(r.await?, compat::machine_status))
                }
            },
        )
        .await
    }

    pub async fn delete_machine(
        &self,
        req: &bindings::machine::MachineRequest,
    ) -> Result<Result<Option<bindings::types::Progress>, PluginError>, CallError> {
        self.invoke(
            "machine.delete",
            &credential_list(&req.credentials, &req.more_credentials),
            Subject::Owner(&req.machine),
            async |store, plugin| match plugin {
                Instance::Current(p) => {
                    p.hyperplug_provider_machine().call_delete(store, req).await
                }
                Instance::V0_2(p) => {
                    let old = compat::machine_request(req);
                    let r = p.hyperplug_provider_machine().call_delete(store, &old);
                    Ok(compat::result(r.await?, |p| p.map(compat::progress)))
                }
            },
        )
        .await
    }

    pub async fn describe_template(
        &self,
        req: &bindings::machine::TemplateRequest,
    ) -> Result<Result<bindings::machine::TemplateStatus, PluginError>, CallError> {
        self.invoke(
            "machine.describe-template",
            &req.credentials.iter().collect::<Vec<_>>(),
            Subject::Named(&req.template),
            async |store, plugin| match plugin {
                Instance::Current(p) => {
                    p.hyperplug_provider_machine()
                        .call_describe_template(store, req)
                        .await
                }
                Instance::V0_2(p) => {
                    let old = compat::template_request(req);
                    let r = p
                        .hyperplug_provider_machine()
                        .call_describe_template(store, &old);
                    Ok(compat::result(r.await?, compat::template_status))
                }
            },
        )
        .await
    }

    /// Convert an object between two API versions of a kind. Reaches nothing (no
    /// credentials: no egress) and owns nothing (no object: no blobs, claims or
    /// reservations). A 0.2 plugin's kinds have one version: answered here.
    pub async fn convert(
        &self,
        req: &bindings::conversion::ConversionRequest,
    ) -> Result<Result<bindings::conversion::Converted, PluginError>, CallError> {
        if self.wit() == WitMajor::V0_2 {
            return Ok(compat::convert(self.info(), req));
        }
        self.invoke(
            "conversion.convert",
            &[],
            Subject::None,
            async |store, plugin| match plugin {
                Instance::Current(p) => {
                    p.hyperplug_provider_conversion()
                        .call_convert(store, req)
                        .await
                }
                Instance::V0_2(_) => Ok(compat::convert(self.info(), req)),
            },
        )
        .await
    }

    /// One look at an endpoint for the pending wait keys registered for it. A 0.2
    /// plugin names no waits: nothing fires, and it is not called.
    pub async fn observe(
        &self,
        req: &bindings::observer::ObserveRequest,
    ) -> Result<Result<bindings::observer::Observation, PluginError>, CallError> {
        if self.wit() == WitMajor::V0_2 {
            return Ok(Ok(compat::observation()));
        }
        self.invoke(
            "observer.observe",
            &[&req.credentials],
            Subject::None,
            async |store, plugin| match plugin {
                Instance::Current(p) => {
                    p.hyperplug_provider_observer()
                        .call_observe(store, req)
                        .await
                }
                Instance::V0_2(_) => Ok(Ok(compat::observation())),
            },
        )
        .await
    }

    /// One call with nothing granted (see [`Plugin::invoke_granted`]).
    async fn invoke<R: serde::Serialize>(
        &self,
        call: &'static str,
        credentials: &[&Credentials],
        subject: Subject<'_>,
        f: impl AsyncFnOnce(&mut Store<CallState>, &Instance) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        self.invoke_granted(call, credentials, subject, Grants::default(), f)
            .await
    }

    /// One call: a fresh store and instance, the limits armed, the result checked.
    async fn invoke_granted<R: serde::Serialize>(
        &self,
        call: &'static str,
        credentials: &[&Credentials],
        subject: Subject<'_>,
        grants: Grants,
        f: impl AsyncFnOnce(&mut Store<CallState>, &Instance) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let inner = &self.runtime.inner;
        let limits = &inner.limits;
        let plugin = self.name.to_string();
        // A call given no credentials reaches nothing outside its sandbox: it only
        // computes, in a slot of its own, within a wall-clock limit of a few times its
        // CPU budget (it has nothing to wait for but the CPU, which other work shares),
        // so it cannot hold an offline slot for long.
        let offline = credentials.is_empty();
        let timeout_ms = if offline {
            limits
                .timeout_ms
                .min(limits.cpu_ms.saturating_mul(OFFLINE_WALL_PER_CPU))
        } else {
            limits.timeout_ms
        };
        // Held until the call's store is dropped, at the end of this function. A call
        // with credentials waits its tenant's turn (`slots`): its object's namespace,
        // else its endpoint.
        let (_fair, _offline) = if offline {
            let permit = inner.offline_slots.clone().acquire_owned().await;
            (
                None,
                Some(permit.expect("the slot semaphore is never closed")),
            )
        } else {
            let tenant = match &subject {
                Subject::Owner(o) | Subject::Named(o) => o.namespace.as_str(),
                Subject::None => credentials.first().map_or("", |c| c.endpoint.as_str()),
            };
            match inner.slots.acquire(tenant).await {
                Ok(slot) => (Some(slot), None),
                Err(refused) => {
                    return Err(CallError::TenantAtShare {
                        plugin,
                        call,
                        tenant: tenant.to_string(),
                        held: refused.held,
                        share: refused.share,
                    });
                }
            }
        };
        let meter = CallMeter::new(limits.cpu());
        let egress = self.egress_for(credentials, &meter)?;
        let denied = egress.denied.clone();
        let (named, owner) = match subject {
            Subject::None => (None, None),
            Subject::Owner(o) => (Some(o), Some(o)),
            Subject::Named(o) => (Some(o), None),
        };
        let log = CallLog {
            plugin: self.name.clone(),
            call,
            object: named.map(object_name).unwrap_or_default(),
            remaining: limits.log_lines,
            bytes_left: limits.log_bytes(),
            bytes_limit: limits.log_bytes(),
            lines: None,
        };
        let blobs = self.runtime.blobs();
        // Every transfer out of the sandbox (an import's arguments, the result) is
        // copied within this budget, so aliased strings cannot make the host allocate
        // more than the plugin could legitimately send.
        let transfer = limits.output_bytes().max(blobs.max_blob_bytes()) + TRANSFER_SLACK;
        let services = Services {
            plugin: self.name.clone(),
            subject: owner.cloned(),
            blobs,
            claims: self.runtime.claims(),
            claims_per_object: limits.claims_per_object,
            claim_calls_left: limits.claim_calls,
            claim_calls: limits.claim_calls,
            reservations: inner.reservations.clone(),
            reservation_calls_left: reservations::MAX_CALLS_PER_CALL,
            offline,
            grants,
        };
        let state = CallState::new(
            limits,
            egress,
            log,
            services,
            meter.clone(),
            self.memory.clone(),
        );
        let mut store = Store::new(&inner.engine, state);
        store.limiter(|state| &mut state.limiter);
        store.set_hostcall_fuel(transfer);
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |ctx| {
            // Give the tokio worker back every tick: a busy plugin never starves others.
            failure::at_epoch(&ctx.data().meter).map(|()| UpdateDeadline::Yield(1))
        });

        let run = async {
            // Marked, so a failure here is told from the call's by type (`failure`).
            let instance = match &self.pre {
                Pre::Current(p) => Instance::Current(
                    p.instantiate_async(&mut store)
                        .await
                        .map_err(failure::instantiating)?,
                ),
                Pre::V0_2(p) => Instance::V0_2(
                    p.instantiate_async(&mut store)
                        .await
                        .map_err(failure::instantiating)?,
                ),
            };
            f(&mut store, &instance).await
        };
        let outcome =
            tokio::time::timeout(Duration::from_millis(timeout_ms), Metered::call(run, meter))
                .await;
        let result = match outcome {
            Err(_) => {
                return Err(CallError::Timeout {
                    plugin,
                    call,
                    limit_ms: timeout_ms,
                });
            }
            Ok(Err(Stop::Cpu)) => {
                return Err(CallError::CpuBudget {
                    plugin,
                    call,
                    limit_ms: limits.cpu_ms,
                });
            }
            Ok(Err(Stop::Breach(breach))) => {
                return Err(CallError::Limit {
                    plugin,
                    call,
                    breach,
                });
            }
            Ok(Ok(Err(e))) => {
                return Err(failure::classify(&self.name, limits, call, e, &store));
            }
            Ok(Ok(Ok(r))) => r,
        };
        if let Err(size) = failure::json_size_within(&result, limits.output_bytes()) {
            return Err(CallError::OutputTooLarge {
                plugin,
                call,
                size,
                limit: limits.output_bytes(),
            });
        }
        let refused = denied.lock().expect("denied list").clone();
        if !refused.is_empty() {
            tracing::warn!(plugin = %self.name, call, refused = ?refused, "plugin tried to reach hosts outside its endpoint");
        }
        Ok(result)
    }

    fn egress_for(
        &self,
        credentials: &[&Credentials],
        meter: &Arc<CallMeter>,
    ) -> Result<Egress, CallError> {
        let inner = &self.runtime.inner;
        let limits = &inner.limits;
        let allowed = credentials
            .iter()
            .map(|c| {
                inner
                    .endpoints
                    .endpoint(c)
                    .map_err(|message| CallError::Credentials {
                        plugin: self.name.to_string(),
                        message,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Egress {
            allowed,
            max_body: limits.http_body_bytes(),
            request_bodies: egress::RequestBodies::new(
                limits.request_body_bytes(),
                self.request_bodies.clone(),
            ),
            in_flight: Arc::new(Semaphore::new(limits.http_in_flight as usize)),
            in_flight_limit: limits.http_in_flight,
            plugin_in_flight: self.in_flight.clone(),
            denials_left: limits.egress_denials,
            denials_limit: limits.egress_denials,
            denied: Arc::new(Mutex::new(Vec::new())),
            observer: inner.observer.clone(),
            plugin: self.name.clone(),
            meter: meter.clone(),
        })
    }
}

/// Room in a transfer for what comes with the largest blob or result (a blob's name,
/// a result's other fields).
const TRANSFER_SLACK: usize = 64 << 10;

/// Every credentials of a call: the primary ones first.
fn credential_list<'a>(
    primary: &'a Credentials,
    more: &'a [NamedCredentials],
) -> Vec<&'a Credentials> {
    std::iter::once(primary)
        .chain(more.iter().map(|n| &n.credentials))
        .collect()
}

fn object_name(r: &ObjectRef) -> String {
    format!("{}/{}", r.namespace, r.name)
}
