//! Errors of the plugin runtime, typed so callers can branch on them.
use std::path::PathBuf;

/// Why a plugin could not be loaded. Each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read plugin file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} is not a WebAssembly component ({detail}); build plugins for the wasm32-wasip2 target"
    )]
    NotAComponent { path: PathBuf, detail: String },
    #[error("{path} does not compile: {detail}")]
    Invalid { path: PathBuf, detail: String },
    #[error(
        "{path} imports `{import}`, which hyperplug does not grant to plugins (granted: {granted})"
    )]
    ImportNotGranted {
        path: PathBuf,
        import: String,
        granted: String,
    },
    #[error(
        "{path} targets hyperplug:provider@{found}, but this host speaks hyperplug:provider@{supported}; rebuild the plugin against a compatible WIT"
    )]
    IncompatibleWit {
        path: PathBuf,
        found: String,
        supported: String,
    },
    #[error(
        "{path} does not export `{export}` of hyperplug:provider; it is not a hyperplug plugin"
    )]
    MissingExport { path: PathBuf, export: String },
    #[error("{path}: {detail}")]
    Other { path: PathBuf, detail: String },
}

/// Why a plugin call failed, apart from errors the plugin itself returned.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error(
        "plugin {plugin} exceeded its memory limit of {limit_mib} MiB in `{call}` (--plugin-memory-mib)"
    )]
    MemoryLimit {
        plugin: String,
        call: &'static str,
        limit_mib: u64,
    },
    #[error(
        "plugin {plugin} exceeded its CPU budget of {limit_ms} ms in `{call}` (--plugin-cpu-ms)"
    )]
    CpuBudget {
        plugin: String,
        call: &'static str,
        limit_ms: u64,
    },
    #[error("plugin {plugin} did not finish `{call}` within {limit_ms} ms (--plugin-timeout-ms)")]
    Timeout {
        plugin: String,
        call: &'static str,
        limit_ms: u64,
    },
    #[error("plugin {plugin} panicked in `{call}`: {message}")]
    Panic {
        plugin: String,
        call: &'static str,
        message: String,
    },
    #[error(
        "plugin {plugin} returned more than the {limit} bytes allowed from `{call}` (--plugin-output-kib; {size} bytes counted when it stopped)"
    )]
    OutputTooLarge {
        plugin: String,
        call: &'static str,
        size: usize,
        limit: usize,
    },
    /// Any other limit of the call or the plugin, named with its flag.
    #[error("plugin {plugin} exceeded its limit of {breach} in `{call}`")]
    Limit {
        plugin: String,
        call: &'static str,
        breach: crate::limits::Breach,
    },
    #[error("plugin {plugin} trapped in `{call}`: {message}")]
    Trap {
        plugin: String,
        call: &'static str,
        message: String,
    },
    #[error("cannot start plugin {plugin}: {message}")]
    Instantiate { plugin: String, message: String },
    #[error("invalid credentials for plugin {plugin}: {message}")]
    Credentials { plugin: String, message: String },
    /// Every pooled instance slot was in use (worth retrying: slots free up).
    #[error(
        "plugin {plugin} found no free instance slot for `{call}` ({message}; --plugin-concurrency)"
    )]
    Busy {
        plugin: String,
        call: &'static str,
        message: String,
    },
    /// The call's tenant (its object's namespace; for calls about no object, its
    /// endpoint) already had its whole share of `--plugin-concurrency` in use or waited
    /// for: refused before it waited, so its caller does not wait either (see `slots`).
    /// Not a failure of anything: the caller comes back shortly.
    #[error(
        "plugin {plugin}: `{call}` for tenant {tenant} not started: its calls hold or wait for all {share} of the plugin slots one tenant may have ({held} held; --plugin-concurrency)"
    )]
    TenantAtShare {
        plugin: String,
        call: &'static str,
        tenant: String,
        held: usize,
        share: usize,
    },
    /// The plugin's calls in flight together held all of a budget they share (memory)
    /// before this call reached its own limit: worth retrying once others end, not a
    /// failure of the plugin.
    #[error(
        "plugin {plugin}'s calls in flight held {limit} when `{call}` needed more (retried; {flag} raises it)"
    )]
    Crowded {
        plugin: String,
        call: &'static str,
        limit: String,
        flag: &'static str,
    },
}

impl CallError {
    /// A short label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            CallError::MemoryLimit { .. } => "memory_limit",
            CallError::CpuBudget { .. } => "cpu_budget",
            CallError::Timeout { .. } => "timeout",
            CallError::Panic { .. } => "panic",
            CallError::OutputTooLarge { .. } => "output_too_large",
            CallError::Limit { .. } => "limit",
            CallError::Trap { .. } => "trap",
            CallError::Instantiate { .. } => "instantiate",
            CallError::Credentials { .. } => "credentials",
            CallError::Busy { .. } => "busy",
            CallError::Crowded { .. } => "crowded",
            CallError::TenantAtShare { .. } => "tenant_at_share",
        }
    }
}
