//! The local quickstart behind `scripts/demo.sh`: pve-sim, a management cluster made
//! by `clusterctl init --infrastructure proxmox --ipam in-cluster`, hyperplug with the
//! bundled plugin, then the seed's `clusterctl generate cluster capi-quickstart` applied;
//! it shows progress until the Machines are provisioned, prints how to look around, and
//! keeps everything running until Ctrl-C.
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use e2e::capi;
use e2e::progress::say;
use e2e::quickstart::{Options, Quickstart};

const USAGE: &str = "\
quickstart: the hyperplug local demo (run by scripts/demo.sh)

Usage: quickstart [--pve-listen ADDR] [--workers N] [--fast] [--exit-when-provisioned]

  --pve-listen ADDR  where pve-sim listens (default 127.0.0.1:8006)
  --workers N        scale the workers to N once the first two machines are up (default 1)
  --fast             instant pve-sim tasks instead of its default durations (clone 300 ms, ...)
  --exit-when-provisioned
                     stop everything once the Machines are provisioned (for scripts and tests)

Environment: HYPERPLUG_BIN (default: hyperplug next to this binary),
HYPERPLUG_PLUGIN (default: plugins/proxmox.wasm).";

#[tokio::main]
async fn main() -> Result<()> {
    let mut pve_listen = "127.0.0.1:8006".to_string();
    let mut workers = 1u32;
    let mut fast = false;
    let mut exit_when_provisioned = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--pve-listen" => pve_listen = args.next().context("--pve-listen needs ADDR")?,
            "--workers" => {
                workers = args
                    .next()
                    .context("--workers needs N")?
                    .parse()
                    .context("--workers needs a number")?
            }
            "--fast" => fast = true,
            "--exit-when-provisioned" => exit_when_provisioned = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => anyhow::bail!("unknown argument {other}\n\n{USAGE}"),
        }
    }
    let hyperplug = capi::hyperplug_binary()?;
    let plugin = match std::env::var_os("HYPERPLUG_PLUGIN") {
        Some(p) => PathBuf::from(p),
        None => capi::bundled_plugin()?,
    };
    let mut qs = Quickstart::start(
        "management",
        Options {
            pve_listen,
            fast_tasks: fast,
            namespace: "default".into(),
        },
        hyperplug,
        plugin,
    )
    .await?;
    let yaml = qs.generate()?;
    let file = qs.management.plane.dir().join("capi-quickstart.yaml");
    std::fs::write(&file, &yaml)?;
    qs.cluster.apply(&qs.management, &qs.sim, &yaml).await?;
    qs.cluster
        .wait_provisioned(&qs.management, 2, Duration::from_secs(300))
        .await?;
    if workers != 1 {
        qs.scale_workers(workers).await?;
        qs.cluster
            .wait_provisioned(
                &qs.management,
                1 + workers as usize,
                Duration::from_secs(300),
            )
            .await?;
    }
    let dir = qs.management.plane.dir().display().to_string();
    let kubeconfig = qs.management.plane.kubeconfig_path().display().to_string();
    let kubectl = qs.management.plane.tools().kubectl().display().to_string();
    let clusterctl = qs
        .management
        .plane
        .tools()
        .clusterctl()
        .display()
        .to_string();
    let workload = qs
        .cluster
        .kubeconfig()
        .await
        .map(|p| p.display().to_string());
    say("every Machine is provisioned");
    println!(
        "
The quickstart cluster is up. Look around in another shell:

  export KUBECONFIG={kubeconfig}
  alias kubectl={kubectl} clusterctl={clusterctl}
  clusterctl describe cluster capi-quickstart
  kubectl get clusters,machines,proxmoxmachines -o wide
  kubectl describe proxmoxmachine                 # conditions and events
  kubectl get proxmoxmachines -o jsonpath='{{.items[*].status.details}}'
  curl -sk {pve}/_sim/vms                # the simulator's VMs
  curl -s http://{metrics}/metrics | grep hyperplug_

Scale the workers:   kubectl scale machinedeployment capi-quickstart-workers --replicas=3
Delete the cluster:  kubectl delete cluster capi-quickstart
The generated YAML:  {file}
Workload cluster (simulated kubeadm and kubelets): KUBECONFIG={workload}
Logs (hyperplug.log, the managers', kube-apiserver.log): {dir}
Stop: Ctrl-C",
        pve = qs.pve.url,
        metrics = qs.management.metrics,
        file = file.display(),
        workload = workload.unwrap_or_else(|| "-".into()),
    );
    if !exit_when_provisioned {
        tokio::signal::ctrl_c().await?;
    }
    say("stopping");
    qs.cluster.stop().await;
    Ok(())
}
