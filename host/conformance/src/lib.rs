//! The plugin conformance kit behind `hyperplug conformance`: drives one plugin, through
//! the production runtime and limits, against a real endpoint, and judges it on the
//! provider invariants (idempotent, convergent, adopting, deletion-safe, failing in the
//! right class within its deadline). It knows no infrastructure: everything specific
//! comes from the files it is given and from what the plugin declares.
pub mod addresses;
mod cases;
pub mod drive;
pub mod fixtures;
pub mod inputs;
pub mod kit;
pub mod mutate;
pub mod report;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use addresses::{PoolFile, Pools};
use drive::Pacing;
use hyperplug_runtime::bindings::machine::BootstrapData;
use hyperplug_runtime::{Credentials, Plugin};
use kit::Kit;
pub use report::{Report, Verdict};

/// Everything a run needs, read and checked by the CLI.
pub struct Options {
    pub plugin: Plugin,
    /// The same plugin in a runtime whose call deadline is `deadline`.
    pub deadline_plugin: Plugin,
    pub deadline: Duration,
    pub plugin_path: PathBuf,
    pub credentials: Credentials,
    pub spec: Value,
    pub cluster_spec: Value,
    pub pools: Vec<PoolFile>,
    pub bootstrap: BootstrapData,
    pub repeat: usize,
    pub pacing: Pacing,
    pub namespace: String,
    pub run_id: String,
    /// Cases not to run (by name).
    pub skip: Vec<String>,
}

/// Every case by name, with what it shows, in the order they run.
pub fn cases() -> &'static [(&'static str, &'static str)] {
    cases::CASES
}

/// A fresh run id: short, lower-case, unique enough for parallel runs.
pub fn new_run_id() -> String {
    format!("{:06x}", rand::random::<u32>() & 0xff_ffff)
}

/// Run every case; the report says what passed.
pub async fn run(opts: Options) -> anyhow::Result<Report> {
    let info = opts.plugin.info().clone();
    let mut pools = Pools::default();
    pools
        .add(&opts.pools)
        .map_err(|e| anyhow::anyhow!("--addresses: {e}"))?;
    let properties = vec![
        ("plugin".to_string(), opts.plugin_path.display().to_string()),
        (
            "plugin.version".to_string(),
            format!("{} {}", info.name, info.version),
        ),
        (
            "plugin.sha256".to_string(),
            opts.plugin.digest().to_string(),
        ),
        ("target".to_string(), opts.credentials.endpoint.clone()),
        ("run-id".to_string(), opts.run_id.clone()),
        ("repeat".to_string(), opts.repeat.to_string()),
    ];
    let mut report = Report::new(format!("conformance.{}", info.name), properties);
    let mut kit = Kit {
        plugin: opts.plugin.clone(),
        info,
        creds: opts.credentials.clone(),
        spec: opts.spec.clone(),
        cluster_spec: opts.cluster_spec.clone(),
        bootstrap: opts.bootstrap.clone(),
        pools,
        pacing: opts.pacing.clone(),
        repeat: opts.repeat,
        run_id: opts.run_id.clone(),
        namespace: opts.namespace.clone(),
        cluster: kit::object_ref(&opts.namespace, &opts.run_id, "cluster"),
        cluster_state: None,
        machines: BTreeMap::new(),
        probes: BTreeSet::new(),
        main: None,
        describes_during: vec![],
    };
    let interrupted = {
        let all = cases::run_all(&mut kit, &opts, &mut report);
        tokio::pin!(all);
        tokio::select! {
            r = &mut all => { r?; false }
            _ = tokio::signal::ctrl_c() => true,
        }
    };
    if interrupted {
        // What the cases made must not outlive an interrupted run either.
        eprintln!("interrupted: deleting what the suite created (Ctrl-C again to abandon it)");
        let left = tokio::select! {
            left = cases::cleanup(&mut kit) => left,
            _ = tokio::signal::ctrl_c() => vec!["cleanup abandoned".to_string()],
        };
        if left.is_empty() {
            anyhow::bail!("interrupted; everything the suite created is deleted");
        }
        anyhow::bail!("interrupted; left behind: {}", left.join("; "));
    }
    Ok(report)
}
