//! Logging: tracing to stderr, text for people or JSON for collectors.
use tracing_subscriber::EnvFilter;

mod warn_limit;
pub use warn_limit::WarnLimit;

#[derive(Debug, Clone, clap::Args)]
pub struct LogArgs {
    /// Log format: `text` or `json`.
    #[arg(
        long,
        global = true,
        default_value = "text",
        env = "HYPERPLUG_LOG_FORMAT"
    )]
    pub log_format: String,
    /// Log filter, e.g. `info` or `hyperplug=debug` (RUST_LOG syntax).
    #[arg(long, global = true, default_value = "info", env = "HYPERPLUG_LOG")]
    pub log: String,
}

pub fn init(args: &LogArgs) {
    let filter = EnvFilter::try_new(&args.log).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if args.log_format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
