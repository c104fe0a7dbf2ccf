//! The engine every plugin shares: wasmtime's `Engine` with a pool of instance slots
//! sized by the limits, the `Linker` of the host's imports, the epoch ticker that
//! drives the CPU budget, and the stores behind the `blobs`, `claims` and
//! `reservations` imports. Loading is `load`, calling is `call`.
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::bindings::hyperplug::provider as ours;
use crate::blobs::BlobStore;
use crate::claims::{ClaimStore, MemoryClaims};
use crate::compat;
use crate::egress::{EndpointCache, HttpObserver};
use crate::limits::Limits;
use crate::memory;
use crate::reservations::Reservations;
use crate::slots::FairSlots;
use crate::state::CallState;

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
    pub(crate) inner: Arc<RuntimeInner>,
}

/// What every plugin and call of a [`Runtime`] shares; `load` and `call` read it.
pub(crate) struct RuntimeInner {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<CallState>,
    pub(crate) limits: Limits,
    pub(crate) cache_dir: Option<PathBuf>,
    pub(crate) endpoints: EndpointCache,
    pub(crate) observer: Option<HttpObserver>,
    pub(crate) blobs: Arc<BlobStore>,
    pub(crate) claims: Arc<dyn ClaimStore>,
    pub(crate) reservations: Arc<Reservations>,
    /// One permit per pooled instance slot (`--plugin-concurrency`): a call waits for
    /// one rather than fail because the pool is full.
    pub(crate) slots: Arc<FairSlots>,
    /// The slots of calls given no credentials: see [`OFFLINE_SLOTS`].
    pub(crate) offline_slots: Arc<Semaphore>,
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
        let linker = linker(&engine)?;
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
    /// now ([`CallError::TenantAtShare`](crate::CallError::TenantAtShare)): the
    /// namespace's calls hold or wait for its whole share of the plugin slots. A caller
    /// that would otherwise read the API server to prepare the call asks first, and
    /// comes back later instead.
    pub fn tenant_at_share(&self, namespace: &str) -> bool {
        self.inner.slots.at_share(namespace)
    }
}

/// The host's imports, current and 0.2's: WASI (which grants nothing, see `load`),
/// `wasi:http` (gated by `egress`), and ours, each served by the call's `CallState`.
fn linker(engine: &Engine) -> anyhow::Result<Linker<CallState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    // Every import of ours is served by the call's state itself.
    fn state(state: &mut CallState) -> &mut CallState {
        state
    }
    ours::log::add_to_linker::<_, HasSelf<_>>(&mut linker, state)?;
    ours::blobs::add_to_linker::<_, HasSelf<_>>(&mut linker, state)?;
    ours::claims::add_to_linker::<_, HasSelf<_>>(&mut linker, state)?;
    ours::reservations::add_to_linker::<_, HasSelf<_>>(&mut linker, state)?;
    ours::grants::add_to_linker::<_, HasSelf<_>>(&mut linker, state)?;
    compat::add_to_linker(&mut linker)?;
    Ok(linker)
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
