//! The offline clusterctl repository (`scripts/clusterctl-repo.sh`): every provider
//! `clusterctl init` installs, rendered from the Go modules the test world is built
//! from, plus our release folder with CRDs from the bundled plugin.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use tempfile::TempDir;

/// A rendered repository and its `clusterctl.yaml`.
pub struct Repo {
    _dir: TempDir,
    /// `clusterctl.yaml` with the `providers:` and `cert-manager:` overrides.
    pub config: PathBuf,
}

impl Repo {
    /// Renders the repository into a temporary directory; `hyperplug` renders the
    /// plugin's CRDs (`hyperplug crds <plugin>`).
    pub fn render(hyperplug: &Path, plugin: &Path) -> Result<Repo> {
        let dir = tempfile::Builder::new()
            .prefix("clusterctl-repo-")
            .tempdir()?;
        let crds = dir.path().join("crds.yaml");
        let out = Command::new(hyperplug)
            .arg("crds")
            .arg(plugin)
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("running {} crds", hyperplug.display()))?;
        if !out.status.success() {
            bail!(
                "hyperplug crds {} failed ({})",
                plugin.display(),
                out.status
            );
        }
        std::fs::write(&crds, &out.stdout)?;
        let script = packaging::repo_root().join("scripts/clusterctl-repo.sh");
        let out = Command::new("bash")
            .arg(&script)
            .arg(dir.path().join("repo"))
            .env("CRDS", &crds)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", script.display()))?;
        if !out.status.success() {
            bail!(
                "{} failed ({}):\n{}",
                script.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let config = PathBuf::from(
            String::from_utf8(out.stdout)?
                .lines()
                .last()
                .unwrap_or("")
                .trim(),
        );
        if !config.is_file() {
            bail!("{} printed no clusterctl.yaml", script.display());
        }
        Ok(Repo { _dir: dir, config })
    }
}
