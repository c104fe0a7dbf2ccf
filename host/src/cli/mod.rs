//! The `hyperplug` command line: one module per subcommand.
mod conformance;
mod crds;
mod inspect;
mod limits;
mod run;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::oci::{FetchArgs, Fetched, Pins, PluginSource};
use crate::telemetry::LogArgs;
use hyperplug_runtime::{Plugin, RuntimeBuilder};

/// hyperplug — a Cluster API infrastructure provider whose infrastructure logic runs
/// in sandboxed WebAssembly plugins.
///
/// Load a plugin (e.g. plugins/proxmox.wasm) to see what it serves, print the CRDs of
/// its kinds, or run the manager that reconciles them.
#[derive(Debug, Parser)]
#[command(name = "hyperplug", version, about, long_about)]
pub struct Cli {
    #[command(flatten)]
    pub log: LogArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print a plugin's identity, WIT version, kinds and imports.
    Inspect(inspect::InspectArgs),
    /// Print the CustomResourceDefinitions of the plugins' kinds as YAML.
    Crds(crds::CrdsArgs),
    /// Run the manager: reconcile the kinds of every loaded plugin.
    Run(Box<run::RunArgs>),
    /// Check a plugin against a real endpoint: a verdict per case, JUnit XML, exit 1 on
    /// any failure.
    Conformance(Box<conformance::ConformanceArgs>),
}

impl Command {
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Command::Inspect(args) => inspect::run(args).await,
            Command::Crds(args) => crds::run(args).await,
            Command::Run(args) => run::run(*args).await,
            Command::Conformance(args) => conformance::run(*args).await,
        }
    }
}

/// Where plugins come from and where they are cached between runs.
#[derive(Debug, Clone, clap::Args)]
pub struct CacheArgs {
    #[command(flatten)]
    pub fetch: FetchArgs,
    /// Directory for precompiled plugins (keyed by content hash and engine version).
    /// Defaults to $XDG_CACHE_HOME/hyperplug/plugins or ~/.cache/hyperplug/plugins.
    #[arg(long, env = "HYPERPLUG_PLUGIN_CACHE")]
    pub plugin_cache: Option<PathBuf>,
    /// Compile plugins in memory only; write nothing to disk.
    #[arg(long)]
    pub no_plugin_cache: bool,
}

impl CacheArgs {
    pub fn dir(&self) -> Option<PathBuf> {
        if self.no_plugin_cache {
            return None;
        }
        self.plugin_cache.clone().or_else(default_cache_dir)
    }
}

fn default_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("hyperplug").join("plugins"))
}

/// Load plugins into one runtime, built from `runtime` with the plugin cache `cache`
/// says (tag pins in it too); errors name the file or reference and what is wrong
/// with it. Plugins loaded together must not share an identity (see
/// [`check_distinct`]).
pub async fn load_plugins(
    sources: &[PluginSource],
    runtime: RuntimeBuilder,
    cache: &CacheArgs,
) -> anyhow::Result<Vec<Plugin>> {
    let loaded = load_fetched(sources, runtime, cache, &Pins::Cache).await?;
    Ok(loaded.into_iter().map(|(plugin, _)| plugin).collect())
}

/// [`load_plugins`] with tags held to `pins`, keeping where each plugin was fetched
/// from (digest, signature).
pub async fn load_fetched(
    sources: &[PluginSource],
    runtime: RuntimeBuilder,
    cache: &CacheArgs,
    pins: &Pins,
) -> anyhow::Result<Vec<(Plugin, Fetched)>> {
    let runtime = runtime.cache_dir(cache.dir()).build()?;
    let mut loaded: Vec<(Plugin, Fetched)> = Vec::new();
    for source in sources {
        // Fetched and checked before a byte of it is compiled.
        let fetched = crate::oci::fetch(source, &cache.fetch, pins).await?;
        let plugin = runtime
            .load(&fetched.path)
            .await
            .map_err(|e| match &fetched.reference {
                Some(reference) => anyhow::Error::new(e).context(format!("plugin {reference}")),
                None => e.into(),
            })?;
        let plugins: Vec<&Plugin> = loaded.iter().map(|(p, _)| p).collect();
        check_distinct(&plugins, &plugin)?;
        loaded.push((plugin, fetched));
    }
    Ok(loaded)
}

/// A plugin's name, kinds and finalizer are what it is known by: its objects, their
/// credentials, claims, blobs and finalizer. A second plugin declaring any of them
/// would take over the first one's objects, so it is refused, naming both files.
fn check_distinct(loaded: &[&Plugin], new: &Plugin) -> anyhow::Result<()> {
    let info = new.info();
    let crd_names =
        |i: &hyperplug_runtime::bindings::identity::PluginInfo| -> Vec<(String, String)> {
            i.kinds
                .iter()
                .map(|k| {
                    (
                        format!("{}.{}", hyperplug_kinds::crds::plural(&k.kind), i.group),
                        k.kind.clone(),
                    )
                })
                .collect()
        };
    let new_crds = crd_names(info);
    for old in loaded {
        let clash = |what: String| {
            anyhow::anyhow!(
                "{} declares {what}, like {} (plugin {}) loaded before it; plugins loaded together must have distinct names, kinds and finalizers",
                new.path().display(),
                old.path().display(),
                old.name()
            )
        };
        if old.name() == new.name() {
            return Err(clash(format!("the plugin name `{}`", new.name())));
        }
        let old_crds = crd_names(old.info());
        if let Some((crd, kind)) = new_crds
            .iter()
            .find(|(c, _)| old_crds.iter().any(|(o, _)| o == c))
        {
            return Err(clash(format!("kind {kind} ({crd})")));
        }
        let finalizer = crate::controller::finalizer(new);
        if finalizer == crate::controller::finalizer(old) {
            return Err(clash(format!("the finalizer {finalizer}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn every_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
