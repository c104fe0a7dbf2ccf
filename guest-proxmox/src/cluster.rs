//! Cluster lifecycle: check that Proxmox answers with these credentials, publish the
//! control-plane endpoint, one failure domain per allowed node, and the IP pools.
use guest_kit::cluster::{ClusterRequest, ClusterStatus, FailureDomain, Guest, IpPool};
use guest_kit::endpoint::control_plane_endpoint;
use guest_kit::types::{PluginError, Progress};
use guest_kit::{invalid, log, parse_spec};
use serde_json::Value;

use crate::Plugin;
use crate::api::Pve;
use crate::spec::{ClusterSpec, IpConfig};

/// How often a ready cluster is re-checked (drift of nodes, credentials).
const RECHECK_MS: u64 = 5 * 60 * 1000;

impl Guest for Plugin {
    fn reconcile(req: ClusterRequest) -> Result<ClusterStatus, PluginError> {
        let spec: ClusterSpec = parse_spec(&req.spec, "spec")?;
        let endpoint = control_plane_endpoint(
            spec.control_plane_endpoint.as_ref(),
            spec.external_managed_control_plane,
        )?;
        let pools = ip_pools(&spec)?;
        let pve = Pve::new(&req.credentials);
        let version = pve
            .get("/version")
            .map_err(|e| e.classify("checking the Proxmox API"))?;
        let release = version
            .get("version")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_string();
        log::debug("Proxmox API reachable", &[("version", release.clone())]);
        let nodes = if spec.allowed_nodes.is_empty() {
            online_nodes(&pve)?
        } else {
            spec.allowed_nodes.clone()
        };
        let failure_domains = nodes
            .iter()
            .map(|n| FailureDomain {
                name: n.clone(),
                control_plane: true,
                attributes: vec![("node".into(), n.clone())],
            })
            .collect();
        Ok(ClusterStatus {
            progress: Progress {
                state: String::new(),
                phase: "Ready".into(),
                message: format!("Proxmox VE {release} reachable"),
                requeue_after_ms: Some(RECHECK_MS),
            },
            ready: true,
            control_plane_endpoint: endpoint,
            failure_domains,
            ip_pools: pools,
            details: vec![("pveVersion".into(), release)],
        })
    }

    fn delete(_req: ClusterRequest) -> Result<Option<Progress>, PluginError> {
        // Nothing cluster-wide is created on Proxmox: machines clean up their own VMs.
        Ok(None)
    }
}

fn ip_pools(spec: &ClusterSpec) -> Result<Vec<IpPool>, PluginError> {
    let mut pools = Vec::new();
    for (name, field, config) in [
        ("ipv4", "spec.ipv4Config", &spec.ipv4_config),
        ("ipv6", "spec.ipv6Config", &spec.ipv6_config),
    ] {
        let Some(IpConfig {
            addresses,
            prefix,
            gateway,
            ..
        }) = config
        else {
            continue;
        };
        if addresses.is_empty() {
            return Err(invalid(
                &format!("{field}.addresses"),
                "at least one address range is required",
            ));
        }
        let max = if name == "ipv4" { 32 } else { 128 };
        if *prefix == 0 || *prefix > max {
            return Err(invalid(
                &format!("{field}.prefix"),
                format!("must be between 1 and {max}"),
            ));
        }
        pools.push(IpPool {
            name: name.into(),
            addresses: addresses.clone(),
            prefix: *prefix,
            gateway: (!gateway.is_empty()).then(|| gateway.clone()),
        });
    }
    Ok(pools)
}

fn online_nodes(pve: &Pve) -> Result<Vec<String>, PluginError> {
    let nodes = pve.get("/nodes").map_err(|e| e.classify("listing nodes"))?;
    let mut names: Vec<String> = nodes
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| n.get("status").and_then(Value::as_str) == Some("online"))
        .filter_map(|n| n.get("node").and_then(Value::as_str).map(str::to_string))
        .collect();
    names.sort();
    Ok(names)
}
