//! What one plugin call's `Store` holds: a sandbox with nothing granted but the
//! egress gate and the log, plus the limits that police it.
use std::sync::{Arc, Mutex};

use wasmtime::component::ResourceTable;
use wasmtime::{StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::ObjectRef;
use super::bindings::hyperplug::provider::{blobs, claims, log};
use super::blobs::BlobStore;
use super::claims::ClaimStore;
use super::egress::Egress;
use super::limits::Limits;

/// Kept from the guest's stderr: enough for a panic message, no more.
const STDERR_CAPTURE: usize = 16 * 1024;

pub struct CallState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    table: ResourceTable,
    pub(super) limits: StoreLimits,
    pub(super) egress: Egress,
    pub(super) stderr: MemoryOutputPipe,
    pub(super) cpu_ticks: u64,
    pub(super) log: CallLog,
    services: Services,
}

/// The host services of a call beyond HTTP and logs: blobs and claims, on behalf of
/// the call's object.
pub struct Services {
    pub plugin: Arc<str>,
    /// The object the call is about; calls about none (identity) get no blobs or claims.
    pub subject: Option<ObjectRef>,
    pub blobs: Arc<BlobStore>,
    pub claims: Arc<dyn ClaimStore>,
}

impl Services {
    fn subject(&self) -> Result<&ObjectRef, String> {
        self.subject
            .as_ref()
            .filter(|s| !s.uid.is_empty())
            .ok_or_else(|| {
                "this call is about no object: nothing can be published or claimed".into()
            })
    }
}

/// Where a plugin's log lines go, and how many it may still write.
pub struct CallLog {
    pub plugin: Arc<str>,
    pub call: &'static str,
    pub object: String,
    pub remaining: u32,
    pub lines: Option<Arc<Mutex<Vec<String>>>>,
}

impl CallState {
    pub fn new(limits: &Limits, egress: Egress, log: CallLog, services: Services) -> Self {
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
        let limits = StoreLimitsBuilder::new()
            .memory_size(limits.memory_bytes())
            .instances(16)
            .tables(16)
            .memories(4)
            .trap_on_grow_failure(true)
            .build();
        CallState {
            wasi,
            http: WasiHttpCtx::new(),
            table: ResourceTable::new(),
            limits,
            egress,
            stderr,
            cpu_ticks: 0,
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
        let mut message = message;
        if message.len() > MAX_LOG_MESSAGE {
            let mut cut = MAX_LOG_MESSAGE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push('…');
        }
        let fields: String = fields
            .iter()
            .take(16)
            .map(|(k, v)| format!(" {k}={v}"))
            .collect();
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
        let s = &self.services;
        let result = match (s.subject(), check_key(&key)) {
            (Ok(subject), Ok(())) => s.claims.acquire(&s.plugin, &key, subject).await,
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        Ok(result)
    }

    async fn holder(&mut self, key: String) -> wasmtime::Result<Result<Option<String>, String>> {
        let s = &self.services;
        Ok(match check_key(&key) {
            Ok(()) => s.claims.holder(&s.plugin, &key).await,
            Err(e) => Err(e),
        })
    }

    async fn held(&mut self) -> wasmtime::Result<Result<Vec<String>, String>> {
        let s = &self.services;
        Ok(match s.subject() {
            Ok(subject) => s.claims.held(&s.plugin, &subject.uid).await,
            Err(e) => Err(e),
        })
    }

    async fn release(&mut self, key: String) -> wasmtime::Result<Result<(), String>> {
        let s = &self.services;
        Ok(match (s.subject(), check_key(&key)) {
            (Ok(subject), Ok(())) => s.claims.release(&s.plugin, &key, &subject.uid).await,
            (Err(e), _) | (_, Err(e)) => Err(e),
        })
    }
}
