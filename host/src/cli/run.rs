//! `hyperplug run`: the manager.
use std::path::PathBuf;
use std::process::ExitCode;

use super::{CacheArgs, load_plugins};
use crate::runtime::Limits;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// A plugin component to serve; repeat for several. Each plugin's kinds get their
    /// own controllers.
    #[arg(
        long = "plugin",
        required = true,
        env = "HYPERPLUG_PLUGINS",
        value_delimiter = ','
    )]
    pub plugins: Vec<PathBuf>,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "HYPERPLUG_NAMESPACE")]
    pub namespace: Option<String>,
    #[command(flatten)]
    pub limits: Limits,
    #[command(flatten)]
    pub cache: CacheArgs,
}

pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let plugins = load_plugins(&args.plugins, args.limits.clone(), &args.cache).await?;
    for plugin in &plugins {
        let kinds: Vec<_> = plugin
            .info()
            .kinds
            .iter()
            .map(|k| k.kind.as_str())
            .collect();
        tracing::info!(plugin = plugin.name(), version = %plugin.info().version, ?kinds, "plugin loaded");
    }
    tracing::info!("manager started; waiting for a termination signal");
    tokio::signal::ctrl_c().await?;
    Ok(ExitCode::SUCCESS)
}
