//! Where the built binaries and the Go module sources (CRDs, webhook manifests) are.
//!
//! `scripts/build-tools.sh` builds everything into `${HYPERPLUG_CACHE:-~/.cache/hyperplug}`
//! and writes `world.env` there. [`Tools::get`] reads that file; when it is missing, stale
//! (versions differ from `scripts/tools.env`) or names a binary that is not there, it runs
//! the script first (once per test process), with its progress on stderr.
//! `KUBE_WORLD_NO_BUILD=1` uses whatever `world.env` names without building.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context, Result, anyhow, bail};

/// Paths of the test world's binaries and module source directories.
#[derive(Debug, Clone)]
pub struct Tools {
    vars: HashMap<String, String>,
}

/// The module sources named in `world.env` (manifests, templates), by key.
const SOURCES: &[&str] = &["CAPI_DIR", "IPAM_DIR", "CERT_MANAGER_DIR", "CAPMOX_DIR"];

/// The binaries named in `world.env`, by key.
const BINARIES: &[&str] = &[
    "ETCD",
    "KUBE_APISERVER",
    "KUBE_CONTROLLER_MANAGER",
    "KUBECTL",
    "CLUSTERCTL",
    "CAPI_MANAGER",
    "KUBEADM_BOOTSTRAP_MANAGER",
    "KUBEADM_CONTROL_PLANE_MANAGER",
    "IPAM_MANAGER",
];

static TOOLS: OnceLock<std::result::Result<Tools, String>> = OnceLock::new();

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

/// `${HYPERPLUG_CACHE:-$HOME/.cache/hyperplug}`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("HYPERPLUG_CACHE") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".cache/hyperplug")
}

fn parse_env(text: &str) -> HashMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

impl Tools {
    /// The tools, building them first if needed (once per process).
    pub fn get() -> Result<&'static Tools> {
        TOOLS
            .get_or_init(|| Tools::load_or_build().map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|e| anyhow!("test world tools unavailable: {e}"))
    }

    fn load_or_build() -> Result<Tools> {
        let env_file = cache_dir().join("world.env");
        if let Ok(tools) = Self::load(&env_file)
            && (tools.is_complete() || std::env::var_os("KUBE_WORLD_NO_BUILD").is_some())
        {
            return Ok(tools);
        }
        let script = repo_root().join("scripts/build-tools.sh");
        eprintln!(
            "kube-world: building the test world with {} (cold: tens of minutes; progress below)",
            script.display()
        );
        let status = Command::new("bash")
            .arg(&script)
            .stdout(std::process::Stdio::null())
            .status()
            .with_context(|| format!("running {}", script.display()))?;
        if !status.success() {
            bail!("{} failed: {status}", script.display());
        }
        let tools = Self::load(&env_file)?;
        if !tools.is_complete() {
            bail!(
                "{} ran but {} is incomplete",
                script.display(),
                env_file.display()
            );
        }
        Ok(tools)
    }

    /// Reads a `world.env` file.
    pub fn load(env_file: &Path) -> Result<Tools> {
        let text = std::fs::read_to_string(env_file)
            .with_context(|| format!("reading {}", env_file.display()))?;
        Ok(Tools {
            vars: parse_env(&text),
        })
    }

    /// True when every binary exists and the versions match `scripts/tools.env`.
    fn is_complete(&self) -> bool {
        let pinned = std::fs::read_to_string(repo_root().join("scripts/tools.env"))
            .map(|t| parse_env(&t))
            .unwrap_or_default();
        let versions_match = pinned
            .iter()
            .all(|(k, v)| self.vars.get(k).is_none_or(|have| have == v));
        versions_match
            && BINARIES
                .iter()
                .all(|k| self.vars.get(*k).is_some_and(|p| Path::new(p).is_file()))
            && SOURCES
                .iter()
                .all(|k| self.vars.get(*k).is_some_and(|p| Path::new(p).is_dir()))
    }

    /// A raw value from `world.env` (e.g. `KUBERNETES_VERSION`).
    pub fn var(&self, key: &str) -> Result<&str> {
        self.vars
            .get(key)
            .map(String::as_str)
            .ok_or_else(|| anyhow!("{key} missing from world.env"))
    }

    fn path(&self, key: &str) -> PathBuf {
        PathBuf::from(self.vars.get(key).map(String::as_str).unwrap_or_default())
    }

    /// The pinned Kubernetes version, e.g. `v1.36.3`.
    pub fn kubernetes_version(&self) -> &str {
        self.vars
            .get("KUBERNETES_VERSION")
            .map_or("", String::as_str)
    }
    /// The pinned Cluster API version, e.g. `v1.14.2`.
    pub fn capi_version(&self) -> &str {
        self.vars.get("CAPI_VERSION").map_or("", String::as_str)
    }
    pub fn etcd(&self) -> PathBuf {
        self.path("ETCD")
    }
    pub fn kube_apiserver(&self) -> PathBuf {
        self.path("KUBE_APISERVER")
    }
    pub fn kube_controller_manager(&self) -> PathBuf {
        self.path("KUBE_CONTROLLER_MANAGER")
    }
    pub fn kubectl(&self) -> PathBuf {
        self.path("KUBECTL")
    }
    pub fn clusterctl(&self) -> PathBuf {
        self.path("CLUSTERCTL")
    }
    pub fn capi_manager(&self) -> PathBuf {
        self.path("CAPI_MANAGER")
    }
    pub fn kubeadm_bootstrap_manager(&self) -> PathBuf {
        self.path("KUBEADM_BOOTSTRAP_MANAGER")
    }
    pub fn kubeadm_control_plane_manager(&self) -> PathBuf {
        self.path("KUBEADM_CONTROL_PLANE_MANAGER")
    }
    pub fn ipam_manager(&self) -> PathBuf {
        self.path("IPAM_MANAGER")
    }
    /// The cert-manager controller, if it was built.
    pub fn cert_manager_controller(&self) -> Option<PathBuf> {
        let p = self.path("CERT_MANAGER_CONTROLLER");
        p.is_file().then_some(p)
    }
    /// `sigs.k8s.io/cluster-api@<version>` in the Go module cache.
    pub fn capi_dir(&self) -> PathBuf {
        self.path("CAPI_DIR")
    }
    /// `sigs.k8s.io/cluster-api-ipam-provider-in-cluster@<version>` in the Go module cache.
    pub fn ipam_dir(&self) -> PathBuf {
        self.path("IPAM_DIR")
    }
    /// `github.com/cert-manager/cert-manager@<version>` in the Go module cache.
    pub fn cert_manager_dir(&self) -> PathBuf {
        self.path("CERT_MANAGER_DIR")
    }
    /// CAPMOX's manager, if it was built (only the takeover walk runs it).
    pub fn capmox_manager(&self) -> Option<PathBuf> {
        let p = self.path("CAPMOX_MANAGER");
        p.is_file().then_some(p)
    }
    /// `github.com/ionos-cloud/cluster-api-provider-proxmox@<version>` (CAPMOX) in the Go
    /// module cache: its `templates/`, `docs/` and `config/` (CRDs, webhooks).
    pub fn capmox_dir(&self) -> PathBuf {
        self.path("CAPMOX_DIR")
    }
    /// The OCI registry (distribution's `registry`), oras and cosign: built only when
    /// named, so a missing one says how to build it.
    pub fn oci_tool(&self, key: &str) -> Result<PathBuf> {
        let p = self.path(key);
        if p.is_file() {
            return Ok(p);
        }
        bail!(
            "{key} ({}) is not built: run `scripts/build-tools.sh oci-registry oras cosign` (scripts/setup.sh does)",
            p.display()
        )
    }
}
