//! What one plugin call's `Store` holds: a sandbox with nothing granted but the
//! egress gate and the log, plus the limits that police it.
use std::sync::{Arc, Mutex};

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::bindings::hyperplug::provider::{blobs, claims, grants, log, reservations};
use super::bindings::types::ObjectRef;
use super::blobs::BlobStore;
use super::claims::ClaimStore;
use super::egress::Egress;
use super::limits::{Breach, Limits, size};
use super::memory::{CallLimiter, PluginBudget};
use super::meter::CallMeter;
use super::reservations::{self as holds, Refusal, Reservations};
use super::text::one_line;

/// Kept from the guest's stderr: enough for a panic message, no more.
const STDERR_CAPTURE: usize = 16 * 1024;

/// Host handles (WASI resources: HTTP requests and their fields, streams, pollables,
/// network handles) a call may hold at once. Each takes host memory outside the call's
/// linear memory; a plugin needs a few dozen (16 requests in flight with their bodies),
/// so a call that keeps making them without dropping any is stopped here (see
/// `failure`) rather than at wasmtime's default of a million.
pub(super) const HANDLES_PER_CALL: usize = 4_096;

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

/// What an administrator granted a call's object beyond what it made itself: the host
/// decides, a plugin asks through the `grants` import (WIT 0.3.1). Nothing by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Grants {
    /// The call may take over infrastructure another provider made for the object.
    pub adoption: bool,
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
    pub reservations: Arc<Reservations>,
    /// `reservations` calls this call may still make.
    pub reservation_calls_left: u32,
    /// The call was given no credentials: it reaches nothing outside its sandbox (no
    /// endpoint, no claims), so it runs in an offline slot (see `OFFLINE_SLOTS`).
    pub offline: bool,
    /// What an administrator granted the call's object (the `grants` import).
    pub grants: Grants,
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

    /// Count one call of the `reservations` import; past the limit the call fails.
    fn reservation_call(&mut self) -> wasmtime::Result<()> {
        if self.reservation_calls_left == 0 {
            return Err(wasmtime::Error::new(Breach::new(
                format!("{} reservations calls per call", holds::MAX_CALLS_PER_CALL),
                "a fixed limit",
            )));
        }
        self.reservation_calls_left -= 1;
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

impl CallState {
    pub fn new(
        limits: &Limits,
        egress: Egress,
        log: CallLog,
        services: Services,
        meter: Arc<CallMeter>,
        plugin_memory: Arc<PluginBudget>,
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
            table: {
                let mut table = ResourceTable::new();
                table.set_max_capacity(HANDLES_PER_CALL);
                table
            },
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
        if s.offline {
            return Ok(Err(
                "this call was given no credentials: it reaches no claims".into(),
            ));
        }
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

impl grants::Host for CallState {
    fn adoption_allowed(&mut self) -> wasmtime::Result<bool> {
        Ok(self.services.grants.adoption)
    }
}

impl reservations::Host for CallState {
    fn reserve(&mut self, key: String, ttl_ms: u32) -> wasmtime::Result<bool> {
        self.services.reservation_call()?;
        let s = &self.services;
        // A call about no object holds nothing (nothing would let it go).
        let Ok(subject) = s.subject() else {
            return Ok(false);
        };
        let ttl = std::time::Duration::from_millis(u64::from(ttl_ms));
        match s.reservations.reserve(&s.plugin, &key, &subject.uid, ttl) {
            Ok(held) => Ok(held),
            Err(Refusal::BadKey) => Err(wasmtime::Error::msg(format!(
                "reservation key must be 1-{} bytes",
                holds::MAX_KEY
            ))),
            Err(Refusal::Full) => Err(wasmtime::Error::new(Breach::new(
                format!(
                    "{} reservations held by one plugin",
                    holds::MAX_HELD_PER_PLUGIN
                ),
                "a fixed limit",
            ))),
        }
    }

    fn release(&mut self, key: String) -> wasmtime::Result<()> {
        self.services.reservation_call()?;
        let s = &self.services;
        if let Ok(subject) = s.subject() {
            s.reservations.release(&s.plugin, &key, &subject.uid);
        }
        Ok(())
    }
}
