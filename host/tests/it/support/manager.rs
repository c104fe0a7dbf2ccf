//! `hyperplug run` as a process of a test: started in one namespace, killed when
//! dropped, its peak memory read from /proc (what the flood tests hold against their
//! goal).
use std::process::{Child, Command, Stdio};

/// The goal for the manager's peak resident memory under any flood.
pub const PEAK_RSS_GOAL_MIB: u64 = 256;

/// Prints a flood test's table, `title` above it and one row per `(what, peak RSS in MiB,
/// outcome)`, outcomes cut to 120 characters; then holds every row to
/// [`PEAK_RSS_GOAL_MIB`].
pub fn rss_table<N: std::fmt::Display>(title: &str, what: &str, rows: &[(N, u64, String)]) {
    println!("\n{title} (goal {PEAK_RSS_GOAL_MIB} MiB)\n");
    println!("| {what} | peak RSS (MiB) | what it got |");
    println!("|---|---:|---|");
    for (name, rss, outcome) in rows {
        let outcome: String = outcome.chars().take(120).collect();
        println!("| {name} | {rss} | {outcome} |");
    }
    for (name, rss, _) in rows {
        assert!(*rss <= PEAK_RSS_GOAL_MIB, "{name}: {rss} MiB");
    }
}

pub struct Manager(pub Child);

impl Drop for Manager {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Manager {
    /// Peak resident set size (VmHWM) in MiB.
    pub fn peak_rss_mib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.0.id())).unwrap();
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM");
        kib / 1024
    }
}

/// `hyperplug run` with the plugin `plugin` (by name, as `plugin_path` takes it),
/// watching only namespace `ns` and keeping its own objects (claims, ownership key)
/// there, logging at info to `<plane dir>/hyperplug-<log>.log`. Add flags, then spawn.
pub fn in_namespace(world: &super::world::World, plugin: &str, ns: &str, log: &str) -> Command {
    let log = std::fs::File::create(world.plane.dir().join(format!("hyperplug-{log}.log")))
        .expect("log file");
    let cache = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache");
    let mut run = Command::new(env!("CARGO_BIN_EXE_hyperplug"));
    run.arg("run")
        .arg("--plugin")
        .arg(super::plugin_path(plugin))
        .args(["--namespace", ns, "--claims-namespace", ns])
        .args(["--ownership-key-secret", &format!("{ns}/ownership-key")])
        .arg(format!("--plugin-cache={}", cache.display()))
        .env("KUBECONFIG", world.plane.kubeconfig_path())
        .env("HYPERPLUG_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::from(log));
    run
}
