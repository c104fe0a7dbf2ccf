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
                waits: vec![],
                durable: true,
            },
            ready: true,
            control_plane_endpoint: endpoint,
            failure_domains: vec![],
            ip_pools,
            details: vec![
                ("bmcs".into(), bmcs.len().to_string()),
                ("hosts".into(), count.to_string()),
            ],
            plugin_status: None,
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

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn pools(cluster: Value) -> Result<Vec<IpPool>, PluginError> {
        let spec: ClusterSpec = serde_json::from_value(cluster).unwrap();
        ip_pools(&spec)
    }

    fn invalid_field(result: Result<Vec<IpPool>, PluginError>) -> String {
        match result {
            Err(PluginError::InvalidSpec(i)) => i.field,
            other => panic!("expected an invalid spec, got {other:?}"),
        }
    }

    #[test]
    fn without_ipv4_config_hosts_use_dhcp_and_no_pool_is_reported() {
        assert!(pools(json!({})).unwrap().is_empty());
    }

    #[test]
    fn ipv4_config_becomes_the_ipv4_pool() {
        let pools = pools(json!({"ipv4Config": {
            "addresses": ["10.0.0.20-10.0.0.40", "10.0.1.0/28"], "prefix": 24, "gateway": "10.0.0.1"
        }}))
        .unwrap();
        assert_eq!(pools.len(), 1);
        assert_eq!(pools[0].name, "ipv4");
        assert_eq!(pools[0].addresses, ["10.0.0.20-10.0.0.40", "10.0.1.0/28"]);
        assert_eq!(pools[0].prefix, 24);
        assert_eq!(pools[0].gateway.as_deref(), Some("10.0.0.1"));
    }

    #[test]
    fn an_empty_gateway_is_no_gateway() {
        let pools =
            pools(json!({"ipv4Config": {"addresses": ["10.0.0.5"], "prefix": 24, "gateway": ""}}));
        assert_eq!(pools.unwrap()[0].gateway, None);
    }

    #[test]
    fn a_pool_needs_addresses_and_an_ipv4_prefix() {
        let none = json!({"ipv4Config": {"addresses": [], "prefix": 24, "gateway": "10.0.0.1"}});
        assert_eq!(invalid_field(pools(none)), "spec.ipv4Config.addresses");
        for prefix in [0, 33] {
            let bad =
                json!({"ipv4Config": {"addresses": ["10.0.0.5"], "prefix": prefix, "gateway": ""}});
            assert_eq!(invalid_field(pools(bad)), "spec.ipv4Config.prefix");
        }
    }
}
