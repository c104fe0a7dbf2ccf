//! The flags of the runtime's limits. The runtime knows no command line: its
//! [`Limits`] and [`BlobLimits`] are plain structs, and these are their flags, each
//! field's default the runtime's one constant for it (`limits::defaults`,
//! `blobs::defaults`), which `Default` reads too.
use hyperplug_runtime::{BlobLimits, Limits, blobs, limits};

/// The flags of [`Limits`], each defaulting to its constant in `limits::defaults`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct LimitArgs {
    /// Largest linear memory a plugin may grow to during one call, in MiB (all its
    /// memories together).
    #[arg(
        long = "plugin-memory-mib",
        default_value_t = limits::defaults::MEMORY_MIB,
        env = "HYPERPLUG_PLUGIN_MEMORY_MIB"
    )]
    pub memory_mib: u64,
    /// Linear memory all calls of one plugin in flight at once may hold together, in
    /// MiB (at least --plugin-memory-mib): a plugin's concurrent calls cannot add up past
    /// it (a call that would grow past it fails, and is retried later).
    #[arg(
        long = "plugin-memory-per-plugin-mib",
        default_value_t = limits::defaults::MEMORY_PER_PLUGIN_MIB,
        env = "HYPERPLUG_PLUGIN_MEMORY_PER_PLUGIN_MIB"
    )]
    pub memory_per_plugin_mib: u64,
    /// CPU time one call may spend, in milliseconds: executing Wasm and the host's
    /// own work on the call's behalf (host imports, copying data in and out, sending
    /// its HTTP requests).
    #[arg(
        long = "plugin-cpu-ms",
        default_value_t = limits::defaults::CPU_MS,
        env = "HYPERPLUG_PLUGIN_CPU_MS"
    )]
    pub cpu_ms: u64,
    /// Wall-clock time one call may take, including time the plugin waits on HTTP
    /// through the host, in milliseconds. A call given no credentials (a conversion)
    /// waits on nothing: it may take no longer than 4 × --plugin-cpu-ms.
    #[arg(
        long = "plugin-timeout-ms",
        default_value_t = limits::defaults::TIMEOUT_MS,
        env = "HYPERPLUG_PLUGIN_TIMEOUT_MS"
    )]
    pub timeout_ms: u64,
    /// Largest result a call may return (as JSON), in KiB. The result is copied out of
    /// the sandbox within the larger of this and --blob-max-mib, then measured.
    #[arg(
        long = "plugin-output-kib",
        default_value_t = limits::defaults::OUTPUT_KIB,
        env = "HYPERPLUG_PLUGIN_OUTPUT_KIB"
    )]
    pub output_kib: u64,
    /// Largest HTTP response body the host hands to a plugin, in MiB.
    #[arg(
        long = "plugin-http-body-mib",
        default_value_t = limits::defaults::HTTP_BODY_MIB,
        env = "HYPERPLUG_PLUGIN_HTTP_BODY_MIB"
    )]
    pub http_body_mib: u64,
    /// HTTP request body bytes one call may send, all its requests together, in MiB
    /// (the host buffers them).
    #[arg(
        long = "plugin-request-body-mib",
        default_value_t = limits::defaults::REQUEST_BODY_MIB,
        env = "HYPERPLUG_PLUGIN_REQUEST_BODY_MIB"
    )]
    pub request_body_mib: u64,
    /// HTTP request body bytes all calls of one plugin may have the host buffer at once,
    /// in MiB (a call past it fails).
    #[arg(
        long = "plugin-request-body-per-plugin-mib",
        default_value_t = limits::defaults::REQUEST_BODY_PER_PLUGIN_MIB,
        env = "HYPERPLUG_PLUGIN_REQUEST_BODY_PER_PLUGIN_MIB"
    )]
    pub request_body_per_plugin_mib: u64,
    /// Most HTTP requests one call may have in flight at once (sent, response body not
    /// yet dropped).
    #[arg(
        long = "plugin-http-in-flight",
        default_value_t = limits::defaults::HTTP_IN_FLIGHT,
        env = "HYPERPLUG_PLUGIN_HTTP_IN_FLIGHT"
    )]
    pub http_in_flight: u32,
    /// Most HTTP requests all calls of one plugin may have in flight at once; further
    /// requests wait for a slot.
    #[arg(
        long = "plugin-http-in-flight-per-plugin",
        default_value_t = limits::defaults::HTTP_IN_FLIGHT_PER_PLUGIN,
        env = "HYPERPLUG_PLUGIN_HTTP_IN_FLIGHT_PER_PLUGIN"
    )]
    pub http_in_flight_per_plugin: u32,
    /// Most requests to hosts outside its endpoints one call may try; each is refused
    /// and logged, and one more fails the call.
    #[arg(
        long = "plugin-egress-denials",
        default_value_t = limits::defaults::EGRESS_DENIALS,
        env = "HYPERPLUG_PLUGIN_EGRESS_DENIALS"
    )]
    pub egress_denials: u32,
    /// Most log lines a plugin may emit in one call; further lines are dropped.
    #[arg(
        long = "plugin-log-lines",
        default_value_t = limits::defaults::LOG_LINES,
        env = "HYPERPLUG_PLUGIN_LOG_LINES"
    )]
    pub log_lines: u32,
    /// Most log bytes (messages and fields) a plugin may emit in one call, in KiB.
    #[arg(
        long = "plugin-log-kib",
        default_value_t = limits::defaults::LOG_KIB,
        env = "HYPERPLUG_PLUGIN_LOG_KIB"
    )]
    pub log_kib: u64,
    /// Most claims one object may hold at once (each is a Lease); acquiring more is
    /// refused.
    #[arg(
        long = "plugin-claims-per-object",
        default_value_t = limits::defaults::CLAIMS_PER_OBJECT,
        env = "HYPERPLUG_PLUGIN_CLAIMS_PER_OBJECT"
    )]
    pub claims_per_object: u32,
    /// Most calls of the `claims` import one plugin call may make (each reaches the
    /// Kubernetes API).
    #[arg(
        long = "plugin-claim-calls",
        default_value_t = limits::defaults::CLAIM_CALLS,
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
        default_value_t = limits::defaults::CONCURRENCY,
        env = "HYPERPLUG_PLUGIN_CONCURRENCY"
    )]
    pub concurrency: u32,
}

impl From<LimitArgs> for Limits {
    fn from(args: LimitArgs) -> Limits {
        Limits {
            memory_mib: args.memory_mib,
            memory_per_plugin_mib: args.memory_per_plugin_mib,
            cpu_ms: args.cpu_ms,
            timeout_ms: args.timeout_ms,
            output_kib: args.output_kib,
            http_body_mib: args.http_body_mib,
            request_body_mib: args.request_body_mib,
            request_body_per_plugin_mib: args.request_body_per_plugin_mib,
            http_in_flight: args.http_in_flight,
            http_in_flight_per_plugin: args.http_in_flight_per_plugin,
            egress_denials: args.egress_denials,
            log_lines: args.log_lines,
            log_kib: args.log_kib,
            claims_per_object: args.claims_per_object,
            claim_calls: args.claim_calls,
            concurrency: args.concurrency,
        }
    }
}

/// The flags of [`BlobLimits`], each defaulting to its constant in `blobs::defaults`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct BlobLimitArgs {
    /// Longest a published blob lives, in seconds (a plugin may ask for less).
    #[arg(long, default_value_t = blobs::defaults::TTL_SECONDS, env = "HYPERPLUG_BLOB_TTL_SECONDS")]
    pub blob_ttl_seconds: u64,
    /// Largest blob a plugin may publish, in MiB.
    #[arg(long, default_value_t = blobs::defaults::MAX_MIB, env = "HYPERPLUG_BLOB_MAX_MIB")]
    pub blob_max_mib: usize,
    /// Most blobs one object may have published at once.
    #[arg(long, default_value_t = blobs::defaults::MAX_PER_OBJECT, env = "HYPERPLUG_BLOB_MAX_PER_OBJECT")]
    pub blob_max_per_object: usize,
    /// Most bytes of blobs one object may have published at once, in MiB.
    #[arg(long, default_value_t = blobs::defaults::OBJECT_MIB, env = "HYPERPLUG_BLOB_OBJECT_MIB")]
    pub blob_object_mib: usize,
    /// Most bytes of blobs all objects of one plugin may have published at once, in
    /// MiB (the host keeps them in memory).
    #[arg(long, default_value_t = blobs::defaults::PLUGIN_MIB, env = "HYPERPLUG_BLOB_PLUGIN_MIB")]
    pub blob_plugin_mib: usize,
    /// Most bytes of blobs the objects of one namespace may have published at once, in
    /// MiB: one tenant cannot take the whole plugin budget from the others.
    #[arg(long, default_value_t = blobs::defaults::NAMESPACE_MIB, env = "HYPERPLUG_BLOB_NAMESPACE_MIB")]
    pub blob_namespace_mib: usize,
}

impl From<BlobLimitArgs> for BlobLimits {
    fn from(args: BlobLimitArgs) -> BlobLimits {
        BlobLimits {
            blob_ttl_seconds: args.blob_ttl_seconds,
            blob_max_mib: args.blob_max_mib,
            blob_max_per_object: args.blob_max_per_object,
            blob_object_mib: args.blob_object_mib,
            blob_plugin_mib: args.blob_plugin_mib,
            blob_namespace_mib: args.blob_namespace_mib,
        }
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
            limits: LimitArgs,
            #[command(flatten)]
            blob_limits: BlobLimitArgs,
        }
        let cli = Cli::parse_from(["hyperplug"]);
        assert_eq!(Limits::from(cli.limits), Limits::default());
        assert_eq!(BlobLimits::from(cli.blob_limits), BlobLimits::default());
    }
}
