//! `hyperplug inspect`: what a plugin is.
use std::path::PathBuf;
use std::process::ExitCode;

use hyperplug_runtime::{Limits, Runtime, WIT_PACKAGE, WIT_VERSION};
use serde_json::json;

use super::{CacheArgs, load_plugins};

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The plugin component (.wasm) to inspect.
    pub plugin: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub cache: CacheArgs,
}

pub async fn run(args: InspectArgs) -> anyhow::Result<ExitCode> {
    let plugin = load_plugins(
        std::slice::from_ref(&args.plugin),
        Runtime::builder(Limits::default()),
        &args.cache,
    )
    .await?
    .remove(0);
    let info = plugin.info();
    let wit = format!("{WIT_PACKAGE}@{WIT_VERSION}");
    let imports = plugin.imports();
    if args.json {
        let kinds: Vec<_> = info
            .kinds
            .iter()
            .map(|k| json!({"kind": k.kind, "role": k.role.name(), "columns": k.columns.iter().map(|c| &c.name).collect::<Vec<_>>()}))
            .collect();
        let doc = json!({
            "name": info.name, "version": info.version, "wit": wit,
            "group": info.group, "apiVersion": info.api_version,
            "kinds": kinds, "capabilities": info.capabilities,
            "imports": imports, "sha256": plugin.digest(), "path": plugin.path(),
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("plugin:       {} {}", info.name, info.version);
    println!(
        "file:         {} (sha256 {})",
        plugin.path().display(),
        plugin.digest()
    );
    println!("wit:          {wit}");
    println!("api:          {}/{}", info.group, info.api_version);
    println!(
        "capabilities: {}",
        if info.capabilities.is_empty() {
            "-".into()
        } else {
            info.capabilities.join(", ")
        }
    );
    println!("kinds:");
    for k in &info.kinds {
        println!("  {:<28} {}", k.kind, k.role.name());
    }
    println!("imports:");
    for i in imports {
        println!("  {i}");
    }
    Ok(ExitCode::SUCCESS)
}
