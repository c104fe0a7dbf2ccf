//! `hyperplug inspect`: what a plugin is.
use std::process::ExitCode;

use hyperplug_runtime::{Limits, Runtime, WIT_PACKAGE};
use serde_json::json;

use super::{CacheArgs, load_fetched};
use crate::oci::{Pins, PluginSource};

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The plugin to inspect: a component file (.wasm) or an oci:// reference (its
    /// digest and signature status are shown too).
    pub plugin: PluginSource,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub cache: CacheArgs,
}

pub async fn run(args: InspectArgs) -> anyhow::Result<ExitCode> {
    let (plugin, fetched) = load_fetched(
        std::slice::from_ref(&args.plugin),
        Runtime::builder(Limits::default()),
        &args.cache,
        &Pins::Cache,
    )
    .await?
    .remove(0);
    let info = plugin.info();
    let wit = format!("{WIT_PACKAGE}@{}", plugin.wit().version());
    let imports = plugin.imports();
    if args.json {
        let kinds: Vec<_> = info
            .kinds
            .iter()
            .map(|k| json!({
                "kind": k.kind, "role": k.role.name(),
                "versions": k.versions.iter().map(|v| json!({"name": v.name, "served": v.served, "storage": v.storage})).collect::<Vec<_>>(),
                "columns": k.columns.iter().map(|c| &c.name).collect::<Vec<_>>(),
            }))
            .collect();
        let doc = json!({
            "name": info.name, "version": info.version, "wit": wit,
            "group": info.group, "apiVersion": info.api_version,
            "kinds": kinds, "capabilities": info.capabilities,
            "imports": imports, "sha256": plugin.digest(), "path": plugin.path(),
            "reference": fetched.reference, "digest": fetched.digest,
            "signature": fetched.signature.to_string(),
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
    if let (Some(reference), Some(digest)) = (&fetched.reference, &fetched.digest) {
        println!("reference:    {reference}");
        println!("digest:       {digest}");
    }
    println!("signature:    {}", fetched.signature);
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
        // Versions oldest first; the stored one marked `*`, one not served in brackets.
        let versions: Vec<String> = k
            .versions
            .iter()
            .map(|v| {
                let name = format!("{}{}", v.name, if v.storage { "*" } else { "" });
                if v.served { name } else { format!("[{name}]") }
            })
            .collect();
        println!(
            "  {:<28} {:<22} {}",
            k.kind,
            k.role.name(),
            versions.join(" ")
        );
    }
    println!("imports:");
    for i in imports {
        println!("  {i}");
    }
    Ok(ExitCode::SUCCESS)
}
