//! The binaries a run drives: `hyperplug` and the bundled plugin.
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, anyhow, bail};

/// The repository's root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// The `hyperplug` binary next to the running executable (`target/<profile>/` for a
/// binary, its parent for test binaries in `deps/`), or `$HYPERPLUG_BIN`.
pub fn hyperplug_binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("HYPERPLUG_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .ok_or_else(|| anyhow!("no directory of {}", exe.display()))?;
    [dir.join("hyperplug"), dir.join("../hyperplug")]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| {
            anyhow!(
                "no hyperplug binary next to {}: run `cargo build -p hyperplug` (or set HYPERPLUG_BIN)",
                exe.display()
            )
        })
}

/// Builds the `hyperplug` binary into the target directory this test runs from
/// (integration tests of another package do not get it built by cargo), and returns it;
/// `$HYPERPLUG_BIN` when set (built already: scripts/test-parallel.sh runs these tests
/// while another cargo holds the target directory).
pub fn build_hyperplug() -> Result<PathBuf> {
    if std::env::var_os("HYPERPLUG_BIN").is_some() {
        return hyperplug_binary();
    }
    let exe = std::env::current_exe()?;
    // target/<profile>/deps/<test binary>
    let target = exe
        .ancestors()
        .nth(3)
        .ok_or_else(|| anyhow!("unexpected test binary path {}", exe.display()))?;
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "--quiet",
            "-p",
            "hyperplug",
            "--bin",
            "hyperplug",
            "--target-dir",
        ])
        .arg(target)
        .current_dir(repo_root())
        .status()
        .context("running cargo build -p hyperplug")?;
    if !status.success() {
        bail!("cargo build -p hyperplug failed ({status})");
    }
    hyperplug_binary()
}

/// The bundled plugin, built by `scripts/build-plugins.sh`.
pub fn bundled_plugin() -> Result<PathBuf> {
    let p = repo_root().join("plugins/proxmox.wasm");
    if !p.is_file() {
        bail!("{} is missing: run scripts/build-plugins.sh", p.display());
    }
    Ok(p)
}
