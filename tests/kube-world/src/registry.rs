//! A real OCI registry for plugin artifacts: distribution's `registry` on a loopback
//! port with its storage in a temporary directory; artifacts pushed with the real `oras`
//! and signed with the real `cosign`, as users do it. All three are built from their Go
//! modules by `scripts/build-tools.sh oci-registry oras cosign`.
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::Tools;
use crate::plane::http_status;
use crate::ports::free_port;
use crate::process::{Proc, log_tail};

/// A running registry; stopped (and its storage removed) on drop.
pub struct OciRegistry {
    proc: Option<Proc>,
    addr: SocketAddr,
    dir: tempfile::TempDir,
    config: PathBuf,
    /// User and password every request needs (htpasswd), when started with a login.
    login: Option<(String, String)>,
}

impl OciRegistry {
    /// A registry anyone may pull from and push to.
    pub fn start() -> Result<OciRegistry> {
        OciRegistry::start_with(None)
    }

    /// A private registry: every request needs `user` and `password` (HTTP basic, from
    /// an htpasswd file). Pushes and signatures here log in with them.
    pub fn start_with_login(user: &str, password: &str) -> Result<OciRegistry> {
        OciRegistry::start_with(Some((user.into(), password.into())))
    }

    fn start_with(login: Option<(String, String)>) -> Result<OciRegistry> {
        let dir = tempfile::Builder::new().prefix("oci-registry-").tempdir()?;
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let config = dir.path().join("config.yml");
        let mut yaml = format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n",
            dir.path().join("storage").display()
        );
        if let Some((user, password)) = &login {
            // The registry reads bcrypt hashes only; the lowest cost keeps tests quick.
            let hash = bcrypt::hash(password, 4)?;
            let htpasswd = dir.path().join("htpasswd");
            std::fs::write(&htpasswd, format!("{user}:{hash}\n"))?;
            yaml.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: kube-world\n    path: {}\n",
                htpasswd.display()
            ));
        }
        std::fs::write(&config, yaml)?;
        let mut registry = OciRegistry {
            proc: None,
            addr,
            dir,
            config,
            login,
        };
        registry.restart()?;
        Ok(registry)
    }

    /// A Docker config file (`{"auths": …}`) with this registry's login, as `docker
    /// login` writes it.
    pub fn docker_config(&self) -> Result<String> {
        use base64::Engine as _;
        let (user, password) = self.login.as_ref().context("the registry has no login")?;
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        Ok(format!(
            r#"{{"auths": {{"{}": {{"auth": "{auth}"}}}}}}"#,
            self.host()
        ))
    }

    /// Starts the registry again (after [`OciRegistry::stop`]) with the same storage.
    pub fn restart(&mut self) -> Result<()> {
        let mut cmd = Command::new(Tools::get()?.oci_tool("OCI_REGISTRY")?);
        cmd.arg("serve").arg(&self.config);
        let log = self.dir.path().join("registry.log");
        let mut proc = Proc::spawn("oci-registry", cmd, &log)?;
        let deadline = Instant::now() + Duration::from_secs(30);
        // 401 is a private registry's answer to an anonymous request: it is up.
        while !matches!(http_status(self.addr, "/v2/").ok(), Some(200 | 401)) {
            proc.check_running()?;
            if Instant::now() > deadline {
                bail!(
                    "the registry did not answer on {} within 30 s:\n{}",
                    self.addr,
                    log_tail(&log, 4000)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.proc = Some(proc);
        Ok(())
    }

    /// Stops the registry, keeping its storage: what a pull meets when offline.
    pub fn stop(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
    }

    /// `HOST:PORT`, as references and `--plugin-plain-http` name it.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// Pushes `file` as a plugin artifact (one `application/wasm` layer) to
    /// `REPOSITORY:TAG` with oras; returns the manifest digest.
    pub fn push(&self, file: &Path, repo_tag: &str) -> Result<String> {
        self.push_as(file, "application/wasm", repo_tag)
    }

    /// Like [`OciRegistry::push`], with the layer's media type chosen.
    pub fn push_as(&self, file: &Path, media_type: &str, repo_tag: &str) -> Result<String> {
        let dir = file.parent().context("file without a directory")?;
        let name = file.file_name().context("file without a name")?;
        let mut oras = Command::new(Tools::get()?.oci_tool("ORAS")?);
        oras.args(["push", "--plain-http", "--no-tty"]);
        if let Some((user, password)) = &self.login {
            oras.args(["--username", user, "--password", password]);
        }
        let out = oras
            .current_dir(dir)
            .env("HOME", self.dir.path())
            .arg(format!("{}/{repo_tag}", self.host()))
            .arg(format!("{}:{media_type}", name.to_string_lossy()))
            .output()?;
        if !out.status.success() {
            bail!(
                "oras push {repo_tag}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .find_map(|l| l.strip_prefix("Digest: "))
            .map(|d| d.trim().to_string())
            .with_context(|| format!("oras push printed no digest:\n{text}"))
    }

    /// Signs `REPOSITORY@DIGEST` with cosign and `keys` (no transparency log: offline).
    pub fn sign(&self, keys: &CosignKeys, repository: &str, digest: &str) -> Result<()> {
        let mut cosign = Command::new(Tools::get()?.oci_tool("COSIGN")?);
        if self.login.is_some() {
            // cosign logs in from a Docker config, as after `docker login`.
            let docker = self.dir.path().join("docker");
            std::fs::create_dir_all(&docker)?;
            std::fs::write(docker.join("config.json"), self.docker_config()?)?;
            cosign.env("DOCKER_CONFIG", docker);
        }
        let out = cosign
            .env("HOME", self.dir.path())
            .env("COSIGN_PASSWORD", "")
            .args([
                "sign",
                "--yes",
                "--tlog-upload=false",
                "--allow-http-registry",
            ])
            .arg("--key")
            .arg(keys.private())
            .arg(format!("{}/{repository}@{digest}", self.host()))
            .output()?;
        if !out.status.success() {
            bail!(
                "cosign sign {repository}@{digest}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// The file the registry serves blob `digest` from (to tamper with in tests).
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.dir
            .path()
            .join("storage/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

impl Drop for OciRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A cosign key pair (`cosign.key`, `cosign.pub`, empty password) in a temporary directory.
pub struct CosignKeys {
    dir: tempfile::TempDir,
}

impl CosignKeys {
    pub fn generate() -> Result<CosignKeys> {
        let dir = tempfile::Builder::new().prefix("cosign-keys-").tempdir()?;
        let out = Command::new(Tools::get()?.oci_tool("COSIGN")?)
            .current_dir(dir.path())
            .env("HOME", dir.path())
            .env("COSIGN_PASSWORD", "")
            .arg("generate-key-pair")
            .output()?;
        if !out.status.success() {
            bail!(
                "cosign generate-key-pair: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(CosignKeys { dir })
    }

    pub fn public(&self) -> PathBuf {
        self.dir.path().join("cosign.pub")
    }

    pub fn private(&self) -> PathBuf {
        self.dir.path().join("cosign.key")
    }
}
