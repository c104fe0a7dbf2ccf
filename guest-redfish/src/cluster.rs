//! Cluster lifecycle: check every BMC of the inventory answers, count its hosts,
//! publish the control-plane endpoint and the IP pool.
use guest_kit::cluster::{ClusterRequest, ClusterStatus, Guest, IpPool};
use guest_kit::endpoint::control_plane_endpoint;
use guest_kit::types::{PluginError, Progress};
use guest_kit::{invalid, parse_spec};

use crate::Plugin;
use crate::inventory::{bmcs, hosts, require_some};
use crate::spec::ClusterSpec;

/// How often a ready cluster is re-checked (BMCs reachable, hosts counted).
const RECHECK_MS: u64 = 5 * 60 * 1000;

impl Guest for Plugin {
    fn reconcile(req: ClusterRequest) -> Result<ClusterStatus, PluginError> {
        let spec: ClusterSpec = parse_spec(&req.spec, "spec")?;
        let endpoint = control_plane_endpoint(
            spec.control_plane_endpoint.as_ref(),
            spec.external_managed_control_plane,
        )?;
        let ip_pools = ip_pools(&spec)?;
        let bmcs = bmcs(&req.credentials, &req.more_credentials);
        require_some(&bmcs)?;
        let mut count = 0;
        for bmc in &bmcs {
            count += hosts(bmc)?.len();
        }
        Ok(ClusterStatus {
            progress: Progress {
                state: String::new(),
                phase: "Ready".into(),
                message: format!("{} BMCs reachable, {count} hosts", bmcs.len()),
                requeue_after_ms: Some(RECHECK_MS),
            },
            ready: true,
            control_plane_endpoint: endpoint,
            failure_domains: vec![],
            ip_pools,
            details: vec![
                ("bmcs".into(), bmcs.len().to_string()),
                ("hosts".into(), count.to_string()),
            ],
        })
    }

    fn delete(_req: ClusterRequest) -> Result<Option<Progress>, PluginError> {
        // Nothing cluster-wide is made on the BMCs: machines release their own hosts.
        Ok(None)
    }
}

fn ip_pools(spec: &ClusterSpec) -> Result<Vec<IpPool>, PluginError> {
    let Some(config) = &spec.ipv4_config else {
        return Ok(vec![]);
    };
    if config.addresses.is_empty() {
        return Err(invalid(
            "spec.ipv4Config.addresses",
            "name at least one range, CIDR or address",
        ));
    }
    if !(1..=32).contains(&config.prefix) {
        return Err(invalid("spec.ipv4Config.prefix", "must be 1-32"));
    }
    Ok(vec![IpPool {
        name: "ipv4".into(),
        addresses: config.addresses.clone(),
        prefix: config.prefix,
        gateway: Some(config.gateway.clone()).filter(|g| !g.is_empty()),
    }])
}
