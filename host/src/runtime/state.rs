//! What one plugin call's `Store` holds: a sandbox with nothing granted but the
//! egress gate and the log, plus the limits that police it.
use std::sync::{Arc, Mutex};

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::ObjectRef;
use super::bindings::hyperplug::provider::{blobs, claims, log};
use super::blobs::BlobStore;
use super::claims::ClaimStore;
use super::egress::Egress;
use super::limits::{Breach, Limits, size};
use super::meter::CallMeter;

/// Kept from the guest's stderr: enough for a panic message, no more.
const STDERR_CAPTURE: usize = 16 * 1024;

pub struct CallState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    table: ResourceTable,
    pub(super) limiter: CallLimiter,
    pub(super) egress: Egress,
    pub(super) stderr: MemoryOutputPipe,
    pub(super) meter: Arc<CallMeter>,
    pub(super) log: CallLog,
    services: Services,
}

/// The host services of a call beyond HTTP and logs: blobs and claims, on behalf of
/// the call's object.
pub struct Services {
    pub plugin: Arc<str>,
    /// The object whose blobs and claims the call works with; none for calls that
    /// must not take any (identity, templates: nothing would ever release them).
    pub subject: Option<ObjectRef>,
    pub blobs: Arc<BlobStore>,
    pub claims: Arc<dyn ClaimStore>,
    /// Claims one object may hold.
    pub claims_per_object: u32,
    /// `claims` calls this call may still make.
    pub claim_calls_left: u32,
    pub claim_calls: u32,
}

impl Services {
    fn subject(&self) -> Result<&ObjectRef, String> {
        self.subject
            .as_ref()
            .filter(|s| !s.uid.is_empty())
            .ok_or_else(|| {
                "this call is about no object that could own them: nothing can be published or claimed".into()
            })
    }

    /// Count one call of the `claims` import; past the limit the call fails.
    fn claim_call(&mut self) -> wasmtime::Result<()> {
        if self.claim_calls_left == 0 {
            return Err(wasmtime::Error::new(Breach::new(
                format!("{} claims calls per call", self.claim_calls),
                "--plugin-claim-calls",
            )));
        }
        self.claim_calls_left -= 1;
        Ok(())
    }
}

/// Where a plugin's log lines go, and how much it may still write.
pub struct CallLog {
    pub plugin: Arc<str>,
    pub call: &'static str,
    pub object: String,
    pub remaining: u32,
    /// Log bytes this call may still write, and its limit.
    pub bytes_left: usize,
    pub bytes_limit: usize,
    pub lines: Option<Arc<Mutex<Vec<String>>>>,
}

/// Memory and tables of one call's instances, counted together: a component may have
/// several memories, and all of them share the call's memory limit. What the call
/// holds is also drawn from its plugin's budget, shared by its calls in flight, and
/// given back when the call's store is dropped.
pub struct CallLimiter {
    memory_limit: usize,
    memory_used: usize,
    plugin_memory: Arc<PluginMemory>,
    table_elements_limit: usize,
    table_elements_used: usize,
}

/// Linear memory held by all calls of one plugin in flight.
pub struct PluginMemory {
    pub limit: usize,
    pub used: std::sync::atomic::AtomicUsize,
}

impl PluginMemory {
    pub fn new(limit: usize) -> Arc<PluginMemory> {
        Arc::new(PluginMemory {
            limit,
            used: Default::default(),
        })
    }

    /// Take `bytes` more from the budget, if it has them.
    fn take(&self, bytes: usize) -> bool {
        use std::sync::atomic::Ordering;
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|total| *total <= self.limit)
            })
            .is_ok()
    }

    fn give_back(&self, bytes: usize) {
        self.used
            .fetch_sub(bytes, std::sync::atomic::Ordering::AcqRel);
    }
}

/// A call's memories tried to grow past a limit; the call fails.
#[derive(Debug, thiserror::Error)]
pub enum MemoryCapReached {
    #[error("plugin memory limit reached growing to {0} bytes")]
    Call(usize),
    #[error("the plugin's calls together hold {0} bytes of memory, all they may")]
    Plugin(usize),
}

/// Table elements all of a call's tables may hold (a pointer each).
const TABLE_ELEMENTS: usize = 1 << 20;

impl CallLimiter {
    pub fn new(memory_limit: usize, plugin_memory: Arc<PluginMemory>) -> CallLimiter {
        CallLimiter {
            memory_limit,
            memory_used: 0,
            plugin_memory,
            table_elements_limit: TABLE_ELEMENTS,
            table_elements_used: 0,
        }
    }
}

impl Drop for CallLimiter {
    fn drop(&mut self) {
        self.plugin_memory.give_back(self.memory_used);
    }
}

impl ResourceLimiter for CallLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.memory_used - current.min(self.memory_used) + desired;
        if total > self.memory_limit {
            return Err(wasmtime::Error::new(MemoryCapReached::Call(total)));
        }
        if maximum.is_some_and(|max| desired > max) {
            return Ok(false);
        }
        let more = total.saturating_sub(self.memory_used);
        if !self.plugin_memory.take(more) {
            return Err(wasmtime::Error::new(MemoryCapReached::Plugin(
                self.plugin_memory.limit,
            )));
        }
        self.memory_used = total;
        Ok(true)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        Err(error.context("forcing a memory growth failure to be a trap"))
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.table_elements_used - current.min(self.table_elements_used) + desired;
        if total > self.table_elements_limit || maximum.is_some_and(|max| desired > max) {
            return Ok(false);
        }
        self.table_elements_used = total;
        Ok(true)
    }

    fn instances(&self) -> usize {
        16
    }

    fn tables(&self) -> usize {
        16
    }

    fn memories(&self) -> usize {
        4
    }
}

impl CallState {
    pub fn new(
        limits: &Limits,
        egress: Egress,
        log: CallLog,
        services: Services,
        meter: Arc<CallMeter>,
        plugin_memory: Arc<PluginMemory>,
    ) -> Self {
        let stderr = MemoryOutputPipe::new(STDERR_CAPTURE);
        // Nothing is granted: no preopened directories, no environment variables, no
        // arguments, and no socket address passes the check. Only stderr is captured,
        // so a panic message can be reported.
        let wasi = WasiCtx::builder()
            .stderr(stderr.clone())
            .allow_ip_name_lookup(false)
            .allow_tcp(false)
            .allow_udp(false)
            .socket_addr_check(|_, _| Box::pin(async { false }))
            .build();
        CallState {
            wasi,
            http: WasiHttpCtx::new(),
            table: ResourceTable::new(),
            limiter: CallLimiter::new(limits.memory_bytes(), plugin_memory),
            egress,
            stderr,
            meter,
            log,
            services,
        }
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for CallState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.egress,
        }
    }
}

/// Longest log message kept; the rest is cut so a plugin cannot flood the logs.
const MAX_LOG_MESSAGE: usize = 4096;
/// Fields kept per line, and the longest key and value kept.
const MAX_LOG_FIELDS: usize = 16;
const MAX_LOG_KEY: usize = 64;
const MAX_LOG_VALUE: usize = 1024;

/// `text` cut to `max` bytes, with control characters escaped: a plugin's line stays
/// one line (no forged lines after a newline, no terminal escapes).
pub fn one_line(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max) + 3);
    for c in text.chars() {
        if out.len() >= max {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

impl log::Host for CallState {
    fn log(
        &mut self,
        level: log::Level,
        message: String,
        fields: Vec<(String, String)>,
    ) -> wasmtime::Result<()> {
        let log = &mut self.log;
        if log.remaining == 0 {
            return Ok(());
        }
        log.remaining -= 1;
        let message = one_line(&message, MAX_LOG_MESSAGE);
        let fields: String = fields
            .iter()
            .take(MAX_LOG_FIELDS)
            .map(|(k, v)| {
                format!(
                    " {}={}",
                    one_line(k, MAX_LOG_KEY),
                    one_line(v, MAX_LOG_VALUE)
                )
            })
            .collect();
        let bytes = message.len() + fields.len();
        if bytes > log.bytes_left {
            log.remaining = 0;
            return Err(wasmtime::Error::new(Breach::new(
                format!("{} of log per call", size(log.bytes_limit)),
                "--plugin-log-kib",
            )));
        }
        log.bytes_left -= bytes;
        if let Some(lines) = &log.lines {
            lines
                .lock()
                .expect("log lines")
                .push(format!("{level:?}: {message}{fields}"));
        }
        let (plugin, call, object) = (&*log.plugin, log.call, &log.object);
        match level {
            log::Level::Trace => tracing::trace!(plugin, call, object, "{message}{fields}"),
            log::Level::Debug => tracing::debug!(plugin, call, object, "{message}{fields}"),
            log::Level::Info => tracing::info!(plugin, call, object, "{message}{fields}"),
            log::Level::Warn => tracing::warn!(plugin, call, object, "{message}{fields}"),
            log::Level::Error => tracing::error!(plugin, call, object, "{message}{fields}"),
        }
        Ok(())
    }
}

impl super::bindings::hyperplug::provider::types::Host for CallState {}

impl blobs::Host for CallState {
    fn publish(
        &mut self,
        name: String,
        content: Vec<u8>,
        ttl_seconds: u32,
    ) -> wasmtime::Result<Result<String, String>> {
        let s = &self.services;
        Ok(s.subject().and_then(|subject| {
            s.blobs
                .publish(&s.plugin, subject, &name, content, ttl_seconds)
        }))
    }

    fn withdraw(&mut self, name: String) -> wasmtime::Result<()> {
        let s = &self.services;
        if let Ok(subject) = s.subject() {
            s.blobs.withdraw(&s.plugin, &subject.uid, &name);
        }
        Ok(())
    }
}

/// Longest claim key a plugin may use.
const MAX_CLAIM_KEY: usize = 253;

fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_CLAIM_KEY {
        return Err(format!("claim key must be 1-{MAX_CLAIM_KEY} bytes"));
    }
    Ok(())
}

impl claims::Host for CallState {
    async fn acquire(&mut self, key: String) -> wasmtime::Result<Result<Option<String>, String>> {
        self.services.claim_call()?;
        let s = &self.services;
        let subject = match (s.subject(), check_key(&key)) {
            (Ok(subject), Ok(())) => subject,
            (Err(e), _) | (_, Err(e)) => return Ok(Err(e)),
        };
        // One object holds a bounded number of claims (each is an object in the API).
        let held = match s.claims.held(&s.plugin, &subject.uid).await {
            Ok(held) => held,
            Err(e) => return Ok(Err(e)),
        };
        if !held.contains(&key) && held.len() >= s.claims_per_object as usize {
            return Ok(Err(format!(
                "this object already holds {} claims, the most the host allows (--plugin-claims-per-object)",
                held.len()
            )));
        }
        Ok(s.claims.acquire(&s.plugin, &key, subject).await)
    }

    async fn holder(&mut self, key: String) -> wasmtime::Result<Result<Option<String>, String>> {
        self.services.claim_call()?;
        let s = &self.services;
        Ok(match check_key(&key) {
            Ok(()) => s.claims.holder(&s.plugin, &key).await,
            Err(e) => Err(e),
        })
    }

    async fn held(&mut self) -> wasmtime::Result<Result<Vec<String>, String>> {
        self.services.claim_call()?;
        let s = &self.services;
        Ok(match s.subject() {
            Ok(subject) => s.claims.held(&s.plugin, &subject.uid).await,
            Err(e) => Err(e),
        })
    }

    async fn release(&mut self, key: String) -> wasmtime::Result<Result<(), String>> {
        self.services.claim_call()?;
        let s = &self.services;
        Ok(match (s.subject(), check_key(&key)) {
            (Ok(subject), Ok(())) => s.claims.release(&s.plugin, &key, &subject.uid).await,
            (Err(e), _) | (_, Err(e)) => Err(e),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::{Engine, Instance, Module, Store};

    /// A module with four memories, each of which grows by 16 pages (1 MiB) per call.
    const FOUR_MEMORIES: &str = r#"(module
        (memory $a 0) (memory $b 0) (memory $c 0) (memory $d 0)
        (func (export "grow") (result i32)
            (drop (memory.grow $a (i32.const 16)))
            (drop (memory.grow $b (i32.const 16)))
            (drop (memory.grow $c (i32.const 16)))
            (memory.grow $d (i32.const 16))))"#;

    fn store(call_mib: usize, plugin: &Arc<PluginMemory>) -> (Store<CallLimiter>, Instance) {
        let engine = Engine::default();
        let module = Module::new(&engine, wat::parse_str(FOUR_MEMORIES).unwrap()).unwrap();
        let mut store = Store::new(&engine, CallLimiter::new(call_mib << 20, plugin.clone()));
        store.limiter(|l| l);
        let instance = Instance::new(&mut store, &module, &[]).unwrap();
        (store, instance)
    }

    fn grow(store: &mut Store<CallLimiter>, instance: &Instance) -> wasmtime::Result<i32> {
        let f = instance.get_typed_func::<(), i32>(&mut *store, "grow")?;
        f.call(&mut *store, ())
    }

    #[test]
    fn all_memories_of_a_call_share_its_limit() {
        let plugin = PluginMemory::new(1 << 30);
        let (mut store, instance) = store(6, &plugin);
        // Four memories of 1 MiB: 4 MiB of the call's 6.
        assert!(grow(&mut store, &instance).is_ok());
        // Four more would make 8 MiB: each memory alone is under 6, together they are not.
        let err = grow(&mut store, &instance).unwrap_err();
        assert!(err.downcast_ref::<MemoryCapReached>().is_some(), "{err:?}");
        assert_eq!(
            plugin.used.load(std::sync::atomic::Ordering::Relaxed),
            6 << 20
        );
        drop(store);
        assert_eq!(plugin.used.load(std::sync::atomic::Ordering::Relaxed), 0);
    }

    #[test]
    fn calls_of_one_plugin_share_its_budget() {
        let plugin = PluginMemory::new(6 << 20);
        let (mut first, a) = store(64, &plugin);
        let (mut second, b) = store(64, &plugin);
        assert!(grow(&mut first, &a).is_ok());
        let err = grow(&mut second, &b).unwrap_err();
        assert!(
            matches!(
                err.downcast_ref::<MemoryCapReached>(),
                Some(MemoryCapReached::Plugin(_))
            ),
            "{err:?}"
        );
        drop(first);
        let (mut third, c) = store(64, &plugin);
        assert!(grow(&mut third, &c).is_ok());
    }
}
