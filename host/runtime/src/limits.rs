//! What one plugin call may use, and what one plugin may use across its calls. Every
//! figure is configurable from the CLI; the defaults keep a manager serving several
//! plugins inside the shipped 512 MiB memory limit whatever a plugin does.
use std::time::Duration;

/// The default of every limit, written once: the flags' `default_value_t` and
/// [`Limits::default`] (what tests and embedders start from) both read these, so the
/// two cannot drift apart.
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

/// Per-call and per-plugin resource limits.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct Limits {
    /// Largest linear memory a plugin may grow to during one call, in MiB (all its
    /// memories together).
    #[arg(
        long = "plugin-memory-mib",
        default_value_t = defaults::MEMORY_MIB,
        env = "HYPERPLUG_PLUGIN_MEMORY_MIB"
    )]
    pub memory_mib: u64,
    /// Linear memory all calls of one plugin in flight at once may hold together, in
    /// MiB (at least --plugin-memory-mib): a plugin's concurrent calls cannot add up past
    /// it (a call that would grow past it fails, and is retried later).
    #[arg(
        long = "plugin-memory-per-plugin-mib",
        default_value_t = defaults::MEMORY_PER_PLUGIN_MIB,
        env = "HYPERPLUG_PLUGIN_MEMORY_PER_PLUGIN_MIB"
    )]
    pub memory_per_plugin_mib: u64,
    /// CPU time one call may spend, in milliseconds: executing Wasm and the host's
    /// own work on the call's behalf (host imports, copying data in and out, sending
    /// its HTTP requests).
    #[arg(
        long = "plugin-cpu-ms",
        default_value_t = defaults::CPU_MS,
        env = "HYPERPLUG_PLUGIN_CPU_MS"
    )]
    pub cpu_ms: u64,
    /// Wall-clock time one call may take, including time the plugin waits on HTTP
    /// through the host, in milliseconds. A call given no credentials (a conversion)
    /// waits on nothing: it may take no longer than 4 × --plugin-cpu-ms.
    #[arg(
        long = "plugin-timeout-ms",
        default_value_t = defaults::TIMEOUT_MS,
        env = "HYPERPLUG_PLUGIN_TIMEOUT_MS"
    )]
    pub timeout_ms: u64,
    /// Largest result a call may return (as JSON), in KiB. The result is copied out of
    /// the sandbox within the larger of this and --blob-max-mib, then measured.
    #[arg(
        long = "plugin-output-kib",
        default_value_t = defaults::OUTPUT_KIB,
        env = "HYPERPLUG_PLUGIN_OUTPUT_KIB"
    )]
    pub output_kib: u64,
    /// Largest HTTP response body the host hands to a plugin, in MiB.
    #[arg(
        long = "plugin-http-body-mib",
        default_value_t = defaults::HTTP_BODY_MIB,
        env = "HYPERPLUG_PLUGIN_HTTP_BODY_MIB"
    )]
    pub http_body_mib: u64,
    /// HTTP request body bytes one call may send, all its requests together, in MiB
    /// (the host buffers them).
    #[arg(
        long = "plugin-request-body-mib",
        default_value_t = defaults::REQUEST_BODY_MIB,
        env = "HYPERPLUG_PLUGIN_REQUEST_BODY_MIB"
    )]
    pub request_body_mib: u64,
    /// HTTP request body bytes all calls of one plugin may have the host buffer at once,
    /// in MiB (a call past it fails).
    #[arg(
        long = "plugin-request-body-per-plugin-mib",
        default_value_t = defaults::REQUEST_BODY_PER_PLUGIN_MIB,
        env = "HYPERPLUG_PLUGIN_REQUEST_BODY_PER_PLUGIN_MIB"
    )]
    pub request_body_per_plugin_mib: u64,
    /// Most HTTP requests one call may have in flight at once (sent, response body not
    /// yet dropped).
    #[arg(
        long = "plugin-http-in-flight",
        default_value_t = defaults::HTTP_IN_FLIGHT,
        env = "HYPERPLUG_PLUGIN_HTTP_IN_FLIGHT"
    )]
    pub http_in_flight: u32,
    /// Most HTTP requests all calls of one plugin may have in flight at once; further
    /// requests wait for a slot.
    #[arg(
        long = "plugin-http-in-flight-per-plugin",
        default_value_t = defaults::HTTP_IN_FLIGHT_PER_PLUGIN,
        env = "HYPERPLUG_PLUGIN_HTTP_IN_FLIGHT_PER_PLUGIN"
    )]
    pub http_in_flight_per_plugin: u32,
    /// Most requests to hosts outside its endpoints one call may try; each is refused
    /// and logged, and one more fails the call.
    #[arg(
        long = "plugin-egress-denials",
        default_value_t = defaults::EGRESS_DENIALS,
        env = "HYPERPLUG_PLUGIN_EGRESS_DENIALS"
    )]
    pub egress_denials: u32,
    /// Most log lines a plugin may emit in one call; further lines are dropped.
    #[arg(
        long = "plugin-log-lines",
        default_value_t = defaults::LOG_LINES,
        env = "HYPERPLUG_PLUGIN_LOG_LINES"
    )]
    pub log_lines: u32,
    /// Most log bytes (messages and fields) a plugin may emit in one call, in KiB.
    #[arg(
        long = "plugin-log-kib",
        default_value_t = defaults::LOG_KIB,
        env = "HYPERPLUG_PLUGIN_LOG_KIB"
    )]
    pub log_kib: u64,
    /// Most claims one object may hold at once (each is a Lease); acquiring more is
    /// refused.
    #[arg(
        long = "plugin-claims-per-object",
        default_value_t = defaults::CLAIMS_PER_OBJECT,
        env = "HYPERPLUG_PLUGIN_CLAIMS_PER_OBJECT"
    )]
    pub claims_per_object: u32,
    /// Most calls of the `claims` import one plugin call may make (each reaches the
    /// Kubernetes API).
    #[arg(
        long = "plugin-claim-calls",
        default_value_t = defaults::CLAIM_CALLS,
        env = "HYPERPLUG_PLUGIN_CLAIM_CALLS"
    )]
    pub claim_calls: u32,
    /// Most plugin calls in flight at once, all plugins together (instances are pooled up
    /// to this number); more wait for a slot. Each call alive
    /// holds its sandbox's memory, so this bounds the manager's memory for plugins.
    /// Calls given no credentials (conversions, template descriptions), which reach no
    /// endpoint, have 4 slots of their own besides. Shared fairly: one namespace holds
    /// at most three quarters of them, and a freed one goes to the waiting namespace
    /// holding the fewest; a namespace's calls past its three quarters, held or waiting,
    /// do not wait but come back shortly, so they hold no reconcile worker either.
    #[arg(
        long = "plugin-concurrency",
        default_value_t = defaults::CONCURRENCY,
        env = "HYPERPLUG_PLUGIN_CONCURRENCY"
    )]
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    /// What production runs with (no flags) is what tests start from.
    #[test]
    fn no_flags_parse_to_the_defaults() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            limits: Limits,
        }
        assert_eq!(Cli::parse_from(["hyperplug"]).limits, Limits::default());
    }
}
