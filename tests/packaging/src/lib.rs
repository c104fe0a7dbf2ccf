//! Helpers for the packaging tests: the seed's `capmox.env` fixture, the rendered
//! clusterctl release folder (`scripts/release.sh`), and the built `clusterctl` and
//! `kubectl` run as child processes with only the variables we hand them.
//!
//! The tests themselves are in `tests/`, one file per claim.
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, anyhow, bail};
use tempfile::TempDir;

pub mod capmox;
mod plane;
pub use plane::{
    KUBEADM_GATES, TOPOLOGY_GATE, get, start_gated_managers, start_managers, wait_class_reconciled,
};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// The Kubernetes version the seed article generates its cluster with.
pub const SEED_KUBERNETES_VERSION: &str = "v1.33.0";

/// The flavors we ship: `(flavor, template file)`; `""` is the default flavor.
pub const FLAVORS: &[(&str, &str)] = &[
    ("", "cluster-template.yaml"),
    ("dhcp", "cluster-template-dhcp.yaml"),
    ("topology", "cluster-template-topology.yaml"),
];

/// The ClusterClass the topology flavor uses, and its file.
pub const CLUSTER_CLASS: (&str, &str) = ("proxmox-kubeadm", "clusterclass-proxmox-kubeadm.yaml");

/// Parses a shell env file of `export NAME=VALUE` lines (values bare, `'single'` or
/// `"double"` quoted), as the seed's `capmox.env` is written. Comments and blank lines
/// are skipped; anything else is an error.
pub fn parse_env_file(text: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        let (name, rest) = line
            .split_once('=')
            .ok_or_else(|| anyhow!("line {}: no `=`: {raw}", n + 1))?;
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            bail!("line {}: bad variable name {name:?}", n + 1);
        }
        let value = match rest.chars().next() {
            Some(q @ ('"' | '\'')) => {
                let body = &rest[1..];
                let end = body
                    .find(q)
                    .ok_or_else(|| anyhow!("line {}: unterminated quote", n + 1))?;
                let tail = body[end + 1..].trim();
                if !(tail.is_empty() || tail.starts_with('#')) {
                    bail!("line {}: text after the closing quote: {tail:?}", n + 1);
                }
                body[..end].to_string()
            }
            _ => rest.split_whitespace().next().unwrap_or("").to_string(),
        };
        out.push((name.to_string(), value));
    }
    Ok(out)
}

/// The seed's `capmox.env` pointed at pve-sim (`fixtures/capmox.env`).
pub fn capmox_env() -> Result<Vec<(String, String)>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/capmox.env");
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    parse_env_file(&text)
}

/// The value of one `capmox.env` variable.
pub fn capmox_var(name: &str) -> String {
    capmox_env()
        .expect("capmox.env")
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("capmox.env has no {name}"))
}

/// The bundled plugin (`plugins/proxmox.wasm`), loaded by the host library.
pub async fn bundled_plugin() -> Result<hyperplug_runtime::Plugin> {
    let plugin = repo_root().join("plugins/proxmox.wasm");
    if !plugin.is_file() {
        bail!(
            "{} is missing: run scripts/build-plugins.sh (scripts/test.sh does)",
            plugin.display()
        );
    }
    let cache = hyperplug::cli::CacheArgs {
        fetch: Default::default(),
        plugin_cache: None,
        no_plugin_cache: false,
    };
    let runtime = hyperplug_runtime::Runtime::builder(hyperplug_runtime::Limits::default());
    let source = hyperplug::oci::PluginSource::File(plugin);
    let mut plugins = hyperplug::cli::load_plugins(&[source], runtime, &cache).await?;
    plugins.pop().context("no plugin loaded")
}

/// `hyperplug crds plugins/proxmox.wasm`, rendered in process by the host library.
pub async fn bundled_plugin_crds() -> Result<String> {
    hyperplug_kinds::crds::crds_yaml(bundled_plugin().await?.info()).map_err(|e| anyhow!(e))
}

/// The bundled plugin's CRDs on `plane`, converting between their versions through the
/// manager's webhook server, run in this process (a task of the caller's runtime) with
/// a certificate from the plane's CA.
pub async fn install_bundled_crds(plane: &kube_world::Plane) -> Result<()> {
    use hyperplug::admission::Finalizers;
    use hyperplug::controller::trust::ownership::OwnershipKeys;
    use hyperplug::conversion::Conversions;
    use hyperplug::webhook::{CertDir, Server};
    use std::sync::Arc;
    let plugin = bundled_plugin().await?;
    let crds = hyperplug_kinds::crds::crds_yaml(plugin.info()).map_err(|e| anyhow!(e))?;
    let certs = CertDir {
        dir: plane.webhook_cert_dir("hyperplug-webhook")?,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let server = Server::on(
        listener,
        certs,
        // Signed with a key of this process: no manager here reads what it keeps.
        Conversions::new(
            std::slice::from_ref(&plugin),
            Arc::new(OwnershipKeys::in_memory()),
        ),
        Finalizers::new(&[plugin], Default::default()),
    )?;
    let url = server.url()?;
    tokio::spawn(server.serve());
    plane.install_crds_yaml_converted_at(&crds, &url).await?;
    Ok(())
}

/// A release folder rendered by `scripts/release.sh` into a temporary directory.
pub struct Release {
    _root: TempDir,
    /// `<out>/infrastructure-proxmox/<version>`.
    pub folder: PathBuf,
    pub version: String,
}

impl Release {
    /// Renders the release folder (CRDs from the bundled plugin).
    pub async fn render() -> Result<Release> {
        let root = tempfile::tempdir()?;
        let crds = root.path().join("crds.yaml");
        std::fs::write(&crds, bundled_plugin_crds().await?)?;
        let out = root.path().join("release");
        let output = Command::new("bash")
            .arg(repo_root().join("scripts/release.sh"))
            .arg(&out)
            .env("CRDS", &crds)
            .stdin(Stdio::null())
            .output()
            .context("running scripts/release.sh")?;
        if !output.status.success() {
            bail!(
                "scripts/release.sh failed ({}):\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let stdout = String::from_utf8(output.stdout)?;
        let folder = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
        let version = folder
            .file_name()
            .and_then(|v| v.to_str())
            .ok_or_else(|| anyhow!("release.sh printed no folder: {stdout}"))?
            .to_string();
        Ok(Release {
            _root: root,
            folder,
            version,
        })
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.folder.join(name)
    }

    /// A `clusterctl.yaml` with the local provider override, next to the release.
    pub fn clusterctl_config(&self) -> Result<PathBuf> {
        let path = self.folder.join("../../clusterctl.yaml");
        std::fs::write(
            &path,
            format!(
                "providers:\n  - name: proxmox\n    type: InfrastructureProvider\n    url: {}\n",
                self.file("infrastructure-components.yaml").display()
            ),
        )?;
        Ok(path)
    }
}

/// The built `clusterctl`, run with a private HOME, the version check off, and exactly
/// the variables given (plus PATH).
pub struct Clusterctl {
    bin: PathBuf,
    home: TempDir,
    vars: Vec<(String, String)>,
}

impl Clusterctl {
    /// clusterctl with the seed's `capmox.env` as its environment.
    pub fn with_capmox_env() -> Result<Clusterctl> {
        Ok(Clusterctl {
            bin: kube_world::tools::Tools::get()?.clusterctl(),
            home: tempfile::tempdir()?,
            vars: capmox_env()?,
        })
    }

    /// Sets (or replaces) one variable.
    pub fn var(mut self, name: &str, value: &str) -> Clusterctl {
        self.vars.retain(|(k, _)| k != name);
        self.vars.push((name.into(), value.into()));
        self
    }

    /// Runs clusterctl; stdout on success, an error with stderr otherwise.
    pub fn run(&self, args: &[&str]) -> Result<String> {
        let output = Command::new(&self.bin)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
            .envs(self.vars.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", self.bin.display()))?;
        if !output.status.success() {
            bail!(
                "clusterctl {} failed ({}):\n{}",
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(String::from_utf8(output.stdout)?)
    }

    /// The seed's command: `clusterctl generate cluster NAME --from TEMPLATE
    /// --kubernetes-version v1.33.0 --control-plane-machine-count=1
    /// --worker-machine-count=1`, into `namespace`.
    pub fn generate_seed_cluster(
        &self,
        name: &str,
        template: &Path,
        namespace: &str,
    ) -> Result<String> {
        self.run(&[
            "generate",
            "cluster",
            name,
            "--from",
            &template.display().to_string(),
            "--kubernetes-version",
            SEED_KUBERNETES_VERSION,
            "--control-plane-machine-count=1",
            "--worker-machine-count=1",
            "--target-namespace",
            namespace,
        ])
    }
}

/// `kubectl apply --server-side --validate=strict` of `yaml` into `namespace` of the
/// plane: the API server (CRD schemas, admission webhooks) must accept every object as
/// is. Warnings count as failures.
pub fn kubectl_apply(plane: &kube_world::Plane, namespace: &str, yaml: &str) -> Result<String> {
    let mut child = Command::new(plane.tools().kubectl())
        .arg("--kubeconfig")
        .arg(plane.kubeconfig_path())
        .args([
            "apply",
            "--server-side",
            "--validate=strict",
            "--field-manager=packaging-test",
            "--namespace",
            namespace,
            "-f",
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running kubectl")?;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(yaml.as_bytes())?;
    let output = child.wait_with_output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() || stderr.contains("Warning") {
        bail!("kubectl apply failed ({}):\n{stderr}", output.status);
    }
    Ok(String::from_utf8(output.stdout)?)
}

/// The documents of a multi-document YAML stream.
pub fn documents(yaml: &str) -> Result<Vec<serde_json::Value>> {
    kube_world::apply::parse_documents(yaml)
}

/// The one document of `kind` (panics unless there is exactly one).
pub fn the_one<'a>(docs: &'a [serde_json::Value], kind: &str) -> &'a serde_json::Value {
    let found: Vec<_> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "expected one {kind}, got {}", found.len());
    found[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_file_parsing_handles_the_seeds_quoting() {
        let vars = parse_env_file(
            "## comment\nexport A=\"x y\"\nexport B='capmox@pve!capi'\nexport C=1\n\nD=[a,b] # note\n",
        )
        .unwrap();
        assert_eq!(
            vars,
            vec![
                ("A".into(), "x y".into()),
                ("B".into(), "capmox@pve!capi".into()),
                ("C".into(), "1".into()),
                ("D".into(), "[a,b]".into()),
            ]
        );
        assert!(parse_env_file("export X=\"open\n").is_err());
        assert!(parse_env_file("export X=\"a\"b\n").is_err());
    }

    #[test]
    fn the_capmox_fixture_has_every_variable_of_the_seed() {
        let names: Vec<String> = capmox_env().unwrap().into_iter().map(|(k, _)| k).collect();
        for seed in [
            "PROXMOX_URL",
            "PROXMOX_TOKEN",
            "PROXMOX_SECRET",
            "PROXMOX_SOURCENODE",
            "TEMPLATE_VMID",
            "ALLOWED_NODES",
            "VM_SSH_KEYS",
            "CONTROL_PLANE_ENDPOINT_IP",
            "NODE_IP_RANGES",
            "GATEWAY",
            "IP_PREFIX",
            "DNS_SERVERS",
            "BRIDGE",
            "NETWORK_MODEL",
            "BOOT_VOLUME_DEVICE",
            "BOOT_VOLUME_SIZE",
            "NUM_SOCKETS",
            "NUM_CORES",
            "MEMORY_MIB",
            "FILE_STORAGE_FORMAT",
            "STORAGE_NODE",
            "NODE_REPLICAS",
            "CLOUD_INIT_CONFIG",
        ] {
            assert!(names.iter().any(|n| n == seed), "capmox.env lacks {seed}");
        }
    }
}
