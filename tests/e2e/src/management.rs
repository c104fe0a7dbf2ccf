//! A management cluster made the way the seed article makes one: `clusterctl init
//! --infrastructure proxmox --ipam in-cluster` against a real API server, from the
//! offline repository. Without a kubelet the installed Deployments never run, so the
//! same managers run as processes beside the API server (webhooks on loopback), and so
//! does hyperplug with the bundled plugin and the default credentials Secret that
//! `clusterctl init` created from `PROXMOX_URL`, `PROXMOX_TOKEN`, `PROXMOX_SECRET`, and
//! its ownership key where the Deployment keeps it (`hyperplug-system`).
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube_world::process::Proc;
use kube_world::{Manager, Plane, PlaneOpts, free_port};
use packaging::Clusterctl;

use crate::progress::say;
use crate::repo::Repo;

/// Where the manager keeps its ownership key, as the release's Deployment does.
const KEY_NAMESPACE: &str = "hyperplug-system";
const KEY_SECRET: &str = "hyperplug-ownership-key";

/// Where the Proxmox VE API is (pve-sim) and the token clusterctl hands the provider.
#[derive(Debug, Clone)]
pub struct ProxmoxEndpoint {
    pub url: String,
    /// `user@realm!tokenid`.
    pub token: String,
    pub secret: String,
    /// SHA-256 fingerprint of the API's certificate (`PROXMOX_FINGERPRINT`).
    pub fingerprint: String,
}

/// A running management cluster.
pub struct Management {
    pub name: String,
    pub plane: Plane,
    /// clusterctl with the seed's `capmox.env`, pointed at the simulator.
    pub clusterctl: Clusterctl,
    pub config: PathBuf,
    pub hyperplug_log: PathBuf,
    pub metrics: SocketAddr,
    /// Where hyperplug adopts machines another provider made (`--adopt-namespace`).
    pub adopt: Option<String>,
    /// CAPMOX's manager, while it runs ([`Management::start_capmox`]).
    pub capmox: Option<Manager>,
}

impl Management {
    /// Starts the plane, runs `clusterctl init`, then the managers and hyperplug.
    pub async fn start(
        name: &str,
        repo: &Repo,
        pve: &ProxmoxEndpoint,
        hyperplug: &Path,
        plugin: &Path,
    ) -> Result<Management> {
        let mut mgmt = Management::before_init(name, repo, pve).await?;
        say(format!(
            "{name}: clusterctl init --infrastructure proxmox --ipam in-cluster"
        ));
        let out = mgmt.clusterctl(&[
            "init",
            "--infrastructure",
            "proxmox",
            "--ipam",
            "in-cluster",
        ])?;
        for line in out.lines().filter(|l| l.starts_with("Installing")) {
            say(format!("{name}:   {line}"));
        }
        mgmt.run_managers().await?;
        mgmt.start_hyperplug(hyperplug, plugin).await?;
        Ok(mgmt)
    }

    /// A management cluster running CAPMOX instead, as teams run it before switching:
    /// `clusterctl init --ipam in-cluster` (Cluster API, kubeadm, IPAM), then CAPMOX's
    /// CRDs and manager (built from its Go module) with the Proxmox credentials in its
    /// environment, as its release's Deployment has them.
    pub async fn start_capmox(
        name: &str,
        repo: &Repo,
        pve: &ProxmoxEndpoint,
    ) -> Result<Management> {
        let mut mgmt = Management::before_init(name, repo, pve).await?;
        say(format!("{name}: clusterctl init --ipam in-cluster"));
        mgmt.clusterctl(&["init", "--ipam", "in-cluster"])?;
        mgmt.run_managers().await?;
        say(format!("{name}: starting CAPMOX's manager"));
        let capmox = mgmt
            .plane
            .start_capmox(&[
                ("PROXMOX_URL", pve.url.as_str()),
                ("PROXMOX_TOKEN", pve.token.as_str()),
                ("PROXMOX_SECRET", pve.secret.as_str()),
                ("PROXMOX_INSECURE", "true"),
            ])
            .await?;
        mgmt.capmox = Some(capmox);
        Ok(mgmt)
    }

    /// The plane with cert-manager and a clusterctl pointed at `pve`: a management
    /// cluster before `clusterctl init`.
    async fn before_init(name: &str, repo: &Repo, pve: &ProxmoxEndpoint) -> Result<Management> {
        say(format!("{name}: starting etcd and kube-apiserver"));
        let plane = Plane::start(PlaneOpts::default()).await?;
        say(format!("{name}: starting the cert-manager controller"));
        plane.start_cert_manager().await?;
        let clusterctl = Clusterctl::with_capmox_env()?
            .var("PROXMOX_URL", &pve.url)
            .var("PROXMOX_TOKEN", &pve.token)
            .var("PROXMOX_SECRET", &pve.secret)
            .var("PROXMOX_FINGERPRINT", &pve.fingerprint);
        Ok(Management {
            name: name.to_string(),
            plane,
            clusterctl,
            config: repo.config.clone(),
            hyperplug_log: PathBuf::new(),
            metrics: SocketAddr::from(([127, 0, 0, 1], free_port()?)),
            adopt: None,
            capmox: None,
        })
    }

    /// After `clusterctl init`: the managers it installed run as processes here (Cluster
    /// API's, the IPAM provider, kube-controller-manager), their Service-backed webhooks
    /// pointed at loopback.
    async fn run_managers(&self) -> Result<()> {
        let removed = self.plane.remove_service_webhooks().await?;
        say(format!(
            "{}: running the managers as processes (their {} Service-backed webhooks, admission and CRD conversion, now point at loopback)",
            self.name,
            removed.len()
        ));
        // With the gates CAPMOX's ClusterClass and Flatcar flavors ask `clusterctl init`
        // for (CLUSTER_TOPOLOGY, EXP_KUBEADM_BOOTSTRAP_FORMAT_IGNITION).
        packaging::start_gated_managers(&self.plane).await?;
        self.plane.start_ipam().await?;
        self.plane.start_controller_manager().await
    }

    /// The switch of docs/migrate-from-capmox.md: CAPMOX stopped and its webhooks gone
    /// (what `clusterctl delete --infrastructure proxmox` does to a provider clusterctl
    /// installed; its CRDs and objects stay), `clusterctl init --infrastructure proxmox`
    /// installing hyperplug, whose manager runs with adoption granted in `adopt`.
    pub async fn switch_from_capmox(
        &mut self,
        hyperplug: &Path,
        plugin: &Path,
        adopt: &str,
    ) -> Result<()> {
        say(format!(
            "{}: stopping CAPMOX, keeping its CRDs and objects",
            self.name
        ));
        let capmox = self.capmox.take().context("CAPMOX is not running")?;
        ensure!(
            self.plane.stop_proc(&capmox.name),
            "no process {} to stop",
            capmox.name
        );
        let hooks = self.plane.remove_manager_webhooks(&capmox).await?;
        say(format!(
            "{}: removed CAPMOX's webhooks {hooks:?}",
            self.name
        ));
        say(format!(
            "{}: clusterctl init --infrastructure proxmox",
            self.name
        ));
        let out = self.clusterctl(&["init", "--infrastructure", "proxmox"])?;
        for line in out.lines().filter(|l| l.starts_with("Installing")) {
            say(format!("{}:   {line}", self.name));
        }
        self.plane.remove_service_webhooks().await?;
        self.adopt = Some(adopt.to_string());
        self.start_hyperplug(hyperplug, plugin).await
    }

    async fn start_hyperplug(&mut self, hyperplug: &Path, plugin: &Path) -> Result<()> {
        let health = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let webhook = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let certs = self.plane.webhook_cert_dir("hyperplug-webhook")?;
        let log = self.plane.dir().join("hyperplug.log");
        let mut cmd = Command::new(hyperplug);
        cmd.arg("run")
            .arg("--plugin")
            .arg(plugin)
            .arg("--default-credentials-secret=hyperplug-system/hyperplug-proxmox-credentials")
            .arg(format!(
                "--ownership-key-secret={KEY_NAMESPACE}/{KEY_SECRET}"
            ))
            .arg(format!("--metrics-addr={}", self.metrics))
            .arg(format!("--health-addr={health}"))
            .arg(format!("--webhook-addr={webhook}"))
            .arg(format!("--webhook-cert-dir={}", certs.display()))
            .env("KUBECONFIG", self.plane.kubeconfig_path())
            .env("POD_NAMESPACE", KEY_NAMESPACE);
        if let Some(ns) = &self.adopt {
            cmd.arg(format!("--adopt-namespace={ns}"));
        }
        say(format!(
            "{}: starting hyperplug run --plugin {}",
            self.name,
            plugin.display()
        ));
        self.plane.add_proc(Proc::spawn("hyperplug", cmd, &log)?);
        self.hyperplug_log = log;
        self.plane
            .wait_for(
                "hyperplug's health endpoint",
                Duration::from_secs(60),
                || async move {
                    Ok(TcpStream::connect_timeout(&health, Duration::from_millis(200)).is_ok())
                },
            )
            .await?;
        // clusterctl installed our CRDs converting through the release's Service, which
        // nothing backs here: the API server calls this manager on loopback instead.
        let pointed = self
            .plane
            .point_conversion(
                "cluster.x-k8s.io/provider=infrastructure-proxmox",
                &format!("https://{webhook}/convert"),
            )
            .await?;
        say(format!(
            "{}: {} CRDs convert through hyperplug's webhook",
            self.name,
            pointed.len()
        ));
        // Its finalizer webhook, which the loopback switch above removed with the other
        // Service-backed ones, on the same server.
        let crds = Command::new(hyperplug)
            .arg("crds")
            .arg(plugin)
            .output()
            .context("running hyperplug crds")?;
        ensure!(
            crds.status.success(),
            "hyperplug crds failed: {}",
            String::from_utf8_lossy(&crds.stderr)
        );
        let hooks = self
            .plane
            .install_admission_at(
                &String::from_utf8(crds.stdout)?,
                &format!("https://{webhook}/"),
            )
            .await?;
        say(format!(
            "{}: admission webhooks {hooks:?} on hyperplug's server",
            self.name
        ));
        Ok(())
    }

    /// Let this manager verify ownership ids `source`'s manager signed, as before a
    /// `clusterctl move` from it: its key goes into this manager's key Secret as an
    /// `accept.<name>` entry (docs/security.md). Waits for this manager to have made its
    /// own key first.
    pub async fn accept_ownership_key_of(&self, source: &Management) -> Result<()> {
        let secrets =
            |m: &Management| -> Api<Secret> { Api::namespaced(m.plane.client(), KEY_NAMESPACE) };
        let mine = secrets(self);
        self.plane
            .wait_for(
                "this manager's ownership key",
                Duration::from_secs(60),
                || {
                    let mine = mine.clone();
                    async move { Ok(mine.get_opt(KEY_SECRET).await?.is_some()) }
                },
            )
            .await?;
        let theirs = secrets(source).get(KEY_SECRET).await?;
        let key = theirs
            .data
            .as_ref()
            .and_then(|d| d.get("key"))
            .context("the source's ownership key Secret has no `key`")?;
        let name = format!("accept.{}", source.name);
        say(format!(
            "{}: accepting ownership ids signed by {} ({KEY_NAMESPACE}/{KEY_SECRET} `{name}`)",
            self.name, source.name
        ));
        mine.patch(
            KEY_SECRET,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {name: key}})),
        )
        .await?;
        Ok(())
    }

    /// Runs clusterctl against this management cluster with the offline repository.
    pub fn clusterctl(&self, args: &[&str]) -> Result<String> {
        let config = self.config.display().to_string();
        let kubeconfig = self.plane.kubeconfig_path().display().to_string();
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--config", &config, "--kubeconfig", &kubeconfig]);
        self.clusterctl
            .run(&all)
            .with_context(|| format!("on management cluster {}", self.name))
    }
}
