//! What one plugin call may use. Every figure is configurable from the CLI.
use std::time::Duration;

/// Per-call resource limits.
#[derive(Debug, Clone, clap::Args)]
pub struct Limits {
    /// Largest linear memory a plugin may grow to during one call, in MiB.
    #[arg(
        long = "plugin-memory-mib",
        default_value_t = 64,
        env = "HYPERPLUG_PLUGIN_MEMORY_MIB"
    )]
    pub memory_mib: u64,
    /// CPU time a plugin may spend executing Wasm in one call, in milliseconds
    /// (measured with epoch interruption, 10 ms resolution).
    #[arg(
        long = "plugin-cpu-ms",
        default_value_t = 2_000,
        env = "HYPERPLUG_PLUGIN_CPU_MS"
    )]
    pub cpu_ms: u64,
    /// Wall-clock time one call may take, including time the plugin waits on HTTP
    /// through the host, in milliseconds.
    #[arg(
        long = "plugin-timeout-ms",
        default_value_t = 30_000,
        env = "HYPERPLUG_PLUGIN_TIMEOUT_MS"
    )]
    pub timeout_ms: u64,
    /// Largest result a call may return (all strings together), in KiB.
    #[arg(
        long = "plugin-output-kib",
        default_value_t = 1_024,
        env = "HYPERPLUG_PLUGIN_OUTPUT_KIB"
    )]
    pub output_kib: u64,
    /// Largest HTTP response body the host hands to a plugin, in MiB.
    #[arg(
        long = "plugin-http-body-mib",
        default_value_t = 16,
        env = "HYPERPLUG_PLUGIN_HTTP_BODY_MIB"
    )]
    pub http_body_mib: u64,
    /// Most log lines a plugin may emit in one call; further lines are dropped.
    #[arg(
        long = "plugin-log-lines",
        default_value_t = 200,
        env = "HYPERPLUG_PLUGIN_LOG_LINES"
    )]
    pub log_lines: u32,
    /// Most plugin calls in flight at once (instances are pooled up to this number).
    #[arg(
        long = "plugin-concurrency",
        default_value_t = 256,
        env = "HYPERPLUG_PLUGIN_CONCURRENCY"
    )]
    pub concurrency: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_mib: 64,
            cpu_ms: 2_000,
            timeout_ms: 30_000,
            output_kib: 1_024,
            http_body_mib: 16,
            log_lines: 200,
            concurrency: 256,
        }
    }
}

impl Limits {
    pub fn memory_bytes(&self) -> usize {
        (self.memory_mib as usize) << 20
    }
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
    /// CPU budget in epoch ticks.
    pub fn cpu_ticks(&self) -> u64 {
        self.cpu_ms
            .div_ceil(super::EPOCH_TICK.as_millis() as u64)
            .max(1)
    }
    pub fn output_bytes(&self) -> usize {
        (self.output_kib as usize) << 10
    }
    pub fn http_body_bytes(&self) -> usize {
        (self.http_body_mib as usize) << 20
    }
}
