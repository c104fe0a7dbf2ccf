//! `hyperplug crds`: the CRD YAML of the plugins' kinds.
use std::process::ExitCode;

use hyperplug_runtime::{Limits, Runtime};

use super::{CacheArgs, load_plugins};
use crate::oci::PluginSource;

#[derive(Debug, clap::Args)]
pub struct CrdsArgs {
    /// Plugins whose kinds to print: component files (.wasm) or oci:// references.
    #[arg(required = true)]
    pub plugins: Vec<PluginSource>,
    #[command(flatten)]
    pub cache: CacheArgs,
}

pub async fn run(args: CrdsArgs) -> anyhow::Result<ExitCode> {
    for plugin in load_plugins(
        &args.plugins,
        Runtime::builder(Limits::default()),
        &args.cache,
    )
    .await?
    {
        let yaml = hyperplug_kinds::crds::crds_yaml(plugin.info())
            .map_err(|e| anyhow::anyhow!("plugin {}: {e}", plugin.path().display()))?;
        print!("{yaml}");
    }
    Ok(ExitCode::SUCCESS)
}
