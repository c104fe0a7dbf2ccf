//! What one plugin call may use, and what one plugin may use across its calls. Every
//! figure has a flag in the host's CLI (`host/src/cli/limits.rs`: the runtime itself
//! knows no command line); the defaults keep a manager serving several plugins inside
//! the shipped 512 MiB memory limit whatever a plugin does.
use std::time::Duration;

/// The default of every limit, written once: the host's flags (their `default_value_t`)
/// and [`Limits::default`] (what tests and embedders start from) both read these, so
/// the two cannot drift apart.
pub mod defaults {
    /// `--plugin-memory-mib`.
    pub const MEMORY_MIB: u64 = 64;
    /// `--plugin-memory-per-plugin-mib`.
    pub const MEMORY_PER_PLUGIN_MIB: u64 = 128;
    /// `--plugin-cpu-ms`.
    pub const CPU_MS: u64 = 2_000;
    /// `--plugin-timeout-ms`.
    pub const TIMEOUT_MS: u64 = 30_000;
    /// `--plugin-output-kib`.
    pub const OUTPUT_KIB: u64 = 1_024;
    /// `--plugin-http-body-mib`.
    pub const HTTP_BODY_MIB: u64 = 16;
    /// `--plugin-request-body-mib`.
    pub const REQUEST_BODY_MIB: u64 = 16;
    /// `--plugin-request-body-per-plugin-mib`.
    pub const REQUEST_BODY_PER_PLUGIN_MIB: u64 = 48;
    /// `--plugin-http-in-flight`.
    pub const HTTP_IN_FLIGHT: u32 = 16;
    /// `--plugin-http-in-flight-per-plugin`.
    pub const HTTP_IN_FLIGHT_PER_PLUGIN: u32 = 128;
    /// `--plugin-egress-denials`.
    pub const EGRESS_DENIALS: u32 = 16;
    /// `--plugin-log-lines`.
    pub const LOG_LINES: u32 = 200;
    /// `--plugin-log-kib`.
    pub const LOG_KIB: u64 = 64;
    /// `--plugin-claims-per-object`.
    pub const CLAIMS_PER_OBJECT: u32 = 8;
    /// `--plugin-claim-calls`.
    pub const CLAIM_CALLS: u32 = 1_000;
    /// `--plugin-concurrency`.
    pub const CONCURRENCY: u32 = 16;
}

/// Per-call and per-plugin resource limits (each field's flag: `defaults`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Linear memory one call may grow to, all its memories together, MiB.
    pub memory_mib: u64,
    /// Linear memory all calls of one plugin in flight may hold together, MiB (at
    /// least `memory_mib`; see [`Limits::memory_per_plugin_bytes`]).
    pub memory_per_plugin_mib: u64,
    /// CPU time one call may spend, Wasm and the host's work on its behalf, ms.
    pub cpu_ms: u64,
    /// Wall-clock time one call may take, ms (a call given no credentials: at most
    /// `OFFLINE_WALL_PER_CPU` × `cpu_ms`).
    pub timeout_ms: u64,
    /// Largest result a call may return, as JSON, KiB.
    pub output_kib: u64,
    /// Largest HTTP response body handed to a plugin, MiB.
    pub http_body_mib: u64,
    /// HTTP request body bytes one call may send, all its requests together, MiB.
    pub request_body_mib: u64,
    /// HTTP request body bytes all calls of one plugin may have buffered at once, MiB.
    pub request_body_per_plugin_mib: u64,
    /// HTTP requests one call may have in flight at once.
    pub http_in_flight: u32,
    /// HTTP requests all calls of one plugin may have in flight at once (more wait).
    pub http_in_flight_per_plugin: u32,
    /// Requests outside its endpoints one call may try; one more fails the call.
    pub egress_denials: u32,
    /// Log lines one call may emit; more are dropped.
    pub log_lines: u32,
    /// Log bytes one call may emit, KiB.
    pub log_kib: u64,
    /// Claims one object may hold at once.
    pub claims_per_object: u32,
    /// Calls of the `claims` import one plugin call may make.
    pub claim_calls: u32,
    /// Plugin calls in flight at once, all plugins together (the pooled instances),
    /// shared fairly by namespace (`slots`); offline calls have `OFFLINE_SLOTS` besides.
    pub concurrency: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_mib: defaults::MEMORY_MIB,
            memory_per_plugin_mib: defaults::MEMORY_PER_PLUGIN_MIB,
            cpu_ms: defaults::CPU_MS,
            timeout_ms: defaults::TIMEOUT_MS,
            output_kib: defaults::OUTPUT_KIB,
            http_body_mib: defaults::HTTP_BODY_MIB,
            request_body_mib: defaults::REQUEST_BODY_MIB,
            request_body_per_plugin_mib: defaults::REQUEST_BODY_PER_PLUGIN_MIB,
            http_in_flight: defaults::HTTP_IN_FLIGHT,
            http_in_flight_per_plugin: defaults::HTTP_IN_FLIGHT_PER_PLUGIN,
            egress_denials: defaults::EGRESS_DENIALS,
            log_lines: defaults::LOG_LINES,
            log_kib: defaults::LOG_KIB,
            claims_per_object: defaults::CLAIMS_PER_OBJECT,
            claim_calls: defaults::CLAIM_CALLS,
            concurrency: defaults::CONCURRENCY,
        }
    }
}

impl Limits {
    pub fn memory_bytes(&self) -> usize {
        (self.memory_mib as usize) << 20
    }
    /// Never below one call's limit: a call alone always fits, so only calls at once
    /// reach it (and a call refused by it is retried, see `CallError::Crowded`).
    pub fn memory_per_plugin_bytes(&self) -> usize {
        (self.memory_per_plugin_mib.max(self.memory_mib) as usize) << 20
    }
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
    /// The CPU budget of one call.
    pub fn cpu(&self) -> Duration {
        Duration::from_millis(self.cpu_ms)
    }
    pub fn output_bytes(&self) -> usize {
        (self.output_kib as usize) << 10
    }
    pub fn http_body_bytes(&self) -> usize {
        (self.http_body_mib as usize) << 20
    }
    pub fn request_body_bytes(&self) -> usize {
        (self.request_body_mib as usize) << 20
    }
    pub fn request_body_per_plugin_bytes(&self) -> usize {
        (self.request_body_per_plugin_mib as usize) << 20
    }
    pub fn log_bytes(&self) -> usize {
        (self.log_kib as usize) << 10
    }
}

/// A limit a call broke: what it is and the flag that sets it. The call fails with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{limit} ({flag})")]
pub struct Breach {
    /// The limit as a person reads it, e.g. `64 KiB of log per call`.
    pub limit: String,
    /// The `hyperplug run` flag that sets it.
    pub flag: &'static str,
}

impl Breach {
    pub fn new(limit: impl Into<String>, flag: &'static str) -> Breach {
        Breach {
            limit: limit.into(),
            flag,
        }
    }
}

/// `1 MiB`, `64 KiB`, `300 bytes`: sizes in limit messages.
pub fn size(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    }
}
