//! `hyperplug run` as its own process, and what /proc says about it.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::webhook::Service;

/// How to start a manager: the same for every start of a replica.
#[derive(Debug, Clone)]
pub struct HostSpec {
    /// The `hyperplug` binary.
    pub binary: PathBuf,
    /// The plugin it serves.
    pub plugin: PathBuf,
    pub kubeconfig: PathBuf,
    /// Extra arguments for `hyperplug run` (e.g. `--leader-elect`).
    pub args: Vec<String>,
    /// Extra environment (e.g. `HOSTNAME`, the leader-election identity).
    pub env: Vec<(String, String)>,
    /// The webhook Service every start joins with a webhook server of its own.
    pub webhook: Service,
}

/// The running host; killed when dropped.
pub struct Host {
    child: Child,
    pub log: PathBuf,
    metrics_port: u16,
}

impl HostSpec {
    /// Starts `hyperplug run`, its output appended to `log`, its metrics and health
    /// endpoints on free loopback ports.
    pub fn start(&self, log: &Path) -> Result<Host> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        let port = |_| kube_world::free_port();
        let (metrics, health) = (port(0)?, port(1)?);
        let webhook = self.webhook.add_replica()?;
        let child = Command::new(&self.binary)
            .arg("run")
            .arg("--plugin")
            .arg(&self.plugin)
            .arg(format!("--metrics-addr=127.0.0.1:{metrics}"))
            .arg(format!("--health-addr=127.0.0.1:{health}"))
            .arg(format!("--webhook-addr=127.0.0.1:{webhook}"))
            .arg(format!(
                "--webhook-cert-dir={}",
                self.webhook.cert_dir.display()
            ))
            .args(&self.args)
            .env("KUBECONFIG", &self.kubeconfig)
            // The manager's own namespace (ownership key, claims, the leader's Lease):
            // the test plane's `default`, said, as the release says its pod's.
            .env("POD_NAMESPACE", "default")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", self.binary.display()))?;
        Ok(Host {
            child,
            log: log.to_path_buf(),
            metrics_port: metrics,
        })
    }
}

impl Host {
    /// The host's Prometheus metrics, for a look at where its time went.
    pub fn metrics(&self) -> Result<String> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.metrics_port))?;
        write!(s, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
        let mut body = String::new();
        s.read_to_string(&mut body)?;
        Ok(body)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, as a node failure or the OOM killer would: no shutdown, nothing flushed.
    pub fn kill(&mut self) -> Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    /// `Err` with the log's tail if the host has exited.
    pub fn check_running(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: String = log
                .lines()
                .rev()
                .take(30)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n");
            bail!(
                "hyperplug exited ({status}); log {}:\n{tail}",
                self.log.display()
            );
        }
        Ok(())
    }

    /// Peak resident memory (VmHWM) in bytes.
    pub fn peak_rss(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .context("no VmHWM in /proc/PID/status")
    }

    /// User + system CPU seconds so far.
    pub fn cpu_seconds(&self) -> Result<f64> {
        crate::cpu::process_seconds(self.pid())
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
