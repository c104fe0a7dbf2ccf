//! Cluster lifecycle: check that Proxmox answers with these credentials, publish the
//! control-plane endpoint, one failure domain per allowed node, and the IP pools (the
//! cluster's default pools and each zone's).
//!
//! With `externalManagedControlPlane` the endpoint belongs to whoever hosts the control
//! plane (e.g. Kamaji writes it): the cluster is not ready until it is set, and is
//! never reported back, so the host never writes it.
//!
//! The token's privileges are checked against what the machines will need, with one
//! `GET /access/permissions` per reconcile ([`privileges`]): a missing one is the
//! terminal `MissingPrivileges`, naming each; one machines may need is advised in the
//! status message. A token that may not ask (or a PVE without the endpoint) is not
//! checked.
use std::net::IpAddr;

use guest_kit::cluster::{ClusterRequest, ClusterStatus, Endpoint, FailureDomain, Guest, IpPool};
use guest_kit::types::{PluginError, Progress};
use guest_kit::{invalid, log, terminal};
use serde_json::Value;

use crate::Plugin;
use crate::api::Pve;
use crate::machine::default_pool_name;
use crate::ranges::Range;
use crate::spec::{ClusterSpec, IpConfig, cluster_spec};

mod privileges;

/// How often a ready cluster is re-checked (drift of nodes, credentials).
const RECHECK_MS: u64 = 5 * 60 * 1000;
/// How often a cluster waiting for its external control plane's endpoint looks again
/// (setting it is a spec change, which wakes the cluster at once anyway).
const ENDPOINT_WAIT_MS: u64 = 10_000;

impl Guest for Plugin {
    fn reconcile(req: ClusterRequest) -> Result<ClusterStatus, PluginError> {
        let spec = cluster_spec(&req.spec, "spec")?;
        let endpoint = endpoint(&spec)?;
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
        let advice = check_privileges(&pve, &req.credentials.token, &release, &nodes)?;
        let failure_domains = nodes
            .iter()
            .map(|n| FailureDomain {
                name: n.clone(),
                control_plane: true,
                attributes: vec![("node".into(), n.clone())],
            })
            .collect();
        let waiting = waiting_for_endpoint(&spec);
        let (phase, message, requeue) = if waiting {
            (
                "MissingControlPlaneEndpoint",
                "waiting for the externally managed control plane to set spec.controlPlaneEndpoint"
                    .to_string(),
                ENDPOINT_WAIT_MS,
            )
        } else {
            (
                "Ready",
                match advice {
                    Some(a) => format!("Proxmox VE {release} reachable; {a}"),
                    None => format!("Proxmox VE {release} reachable"),
                },
                RECHECK_MS,
            )
        };
        Ok(ClusterStatus {
            progress: Progress {
                state: String::new(),
                phase: phase.into(),
                message,
                requeue_after_ms: Some(requeue),
                waits: vec![],
                durable: true,
            },
            ready: !waiting,
            control_plane_endpoint: endpoint,
            failure_domains,
            ip_pools: pools,
            details: vec![("pveVersion".into(), release)],
            plugin_status: None,
        })
    }

    fn delete(_req: ClusterRequest) -> Result<Option<Progress>, PluginError> {
        // Nothing cluster-wide is created on Proxmox: machines clean up their own VMs.
        Ok(None)
    }
}

/// The preflight: the token's effective privileges against what its machines need.
/// `Err`: `MissingPrivileges`; `Ok(Some(..))`: what machines may need and the token
/// lacks (for the status message); `Ok(None)`: nothing to say, or the privileges could
/// not be read (logged).
fn check_privileges(
    pve: &Pve,
    token: &str,
    release: &str,
    nodes: &[String],
) -> Result<Option<String>, PluginError> {
    let perms: privileges::Perms = match pve.get_as("/access/permissions") {
        Ok(p) => p,
        Err(e) => {
            log::warn(
                "the token's privileges could not be read; not checked",
                &[("error", e.to_string())],
            );
            return Ok(None);
        }
    };
    let major = release
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(9);
    let (required, advised) = privileges::needs(nodes, major);
    let missing = privileges::unmet(&perms, &required);
    if !missing.is_empty() {
        return Err(terminal(
            "MissingPrivileges",
            privileges::missing_message(token, &missing),
        ));
    }
    let maybe = privileges::unmet(&perms, &advised);
    if maybe.is_empty() {
        return Ok(None);
    }
    let list: Vec<String> = maybe.iter().map(|n| privileges::describe(n)).collect();
    log::info(
        "the token lacks privileges some machines may need",
        &[("privileges", list.join("; "))],
    );
    Ok(Some(format!(
        "the token lacks privileges some machines may need: {}",
        list.join("; ")
    )))
}

/// An externally managed control plane has not set the endpoint yet.
fn waiting_for_endpoint(spec: &ClusterSpec) -> bool {
    external(spec) && endpoint_host(spec).is_none()
}

fn external(spec: &ClusterSpec) -> bool {
    spec.external_managed_control_plane == Some(true)
}

fn endpoint_host(spec: &ClusterSpec) -> Option<&str> {
    spec.control_plane_endpoint
        .as_ref()
        .map(|e| e.host.as_str())
        .filter(|h| !h.is_empty())
}

/// The endpoint to report: the spec's, checked (a host name or an IP outside the
/// machines' pools); none when an external control plane owns it.
fn endpoint(spec: &ClusterSpec) -> Result<Option<Endpoint>, PluginError> {
    if external(spec) {
        return Ok(None);
    }
    let (Some(host), Some(ep)) = (endpoint_host(spec), &spec.control_plane_endpoint) else {
        return Err(invalid(
            "spec.controlPlaneEndpoint",
            "a host and port are required (e.g. the kube-vip address), unless externalManagedControlPlane is true",
        ));
    };
    match host.parse::<IpAddr>() {
        Ok(ip) => {
            for (field, config) in [
                ("spec.ipv4Config", &spec.ipv4_config),
                ("spec.ipv6Config", &spec.ipv6_config),
            ] {
                for (i, a) in config.iter().flat_map(|c| c.addresses.iter()).enumerate() {
                    let range = Range::parse(a)
                        .map_err(|e| invalid(&format!("{field}.addresses[{i}]"), e))?;
                    if range.contains(ip) {
                        return Err(invalid(
                            &format!("{field}.addresses[{i}]"),
                            format!(
                                "{a} holds the control-plane endpoint {ip}: machines would take it"
                            ),
                        ));
                    }
                }
            }
        }
        Err(_) if !is_host_name(host) => {
            return Err(invalid(
                "spec.controlPlaneEndpoint.host",
                format!("`{host}` is neither an IP address nor a host name"),
            ));
        }
        Err(_) => {}
    }
    Ok(Some(Endpoint {
        host: host.into(),
        port: ep.port,
    }))
}

/// A DNS name: dot-separated labels of letters, digits and inner `-`.
fn is_host_name(h: &str) -> bool {
    h.len() <= 253
        && h.trim_end_matches('.').split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// The pools the host realizes: the cluster's default ones and each zone's.
pub(crate) fn ip_pools(spec: &ClusterSpec) -> Result<Vec<IpPool>, PluginError> {
    let mut pools = Vec::new();
    let zones = spec.zone_config.iter().enumerate().map(|(i, z)| {
        (
            Some(z.zone.as_str()),
            format!("spec.zoneConfig[{i}]"),
            &z.ipv4_config,
            &z.ipv6_config,
        )
    });
    let all = std::iter::once((
        None,
        "spec".to_string(),
        &spec.ipv4_config,
        &spec.ipv6_config,
    ))
    .chain(zones);
    for (zone, at, v4, v6) in all {
        for (v6_pool, config, field) in [(false, v4, "ipv4Config"), (true, v6, "ipv6Config")] {
            let Some(config) = config else { continue };
            pools.push(ip_pool(
                default_pool_name(zone, v6_pool),
                config,
                &format!("{at}.{field}"),
                v6_pool,
            )?);
        }
    }
    Ok(pools)
}

fn ip_pool(name: String, config: &IpConfig, field: &str, v6: bool) -> Result<IpPool, PluginError> {
    let IpConfig {
        addresses,
        prefix,
        gateway,
        ..
    } = config;
    if addresses.is_empty() {
        return Err(invalid(
            &format!("{field}.addresses"),
            "at least one address range is required",
        ));
    }
    let family = if v6 { "IPv6" } else { "IPv4" };
    for (i, a) in addresses.iter().enumerate() {
        let range = Range::parse(a).map_err(|e| invalid(&format!("{field}.addresses[{i}]"), e))?;
        if range.is_v6() != v6 {
            return Err(invalid(
                &format!("{field}.addresses[{i}]"),
                format!("`{a}` is not {family}"),
            ));
        }
    }
    let max = if v6 { 128 } else { 32 };
    if *prefix == 0 || *prefix > max {
        return Err(invalid(
            &format!("{field}.prefix"),
            format!("must be between 1 and {max}"),
        ));
    }
    if let Some(g) = gateway.as_deref().filter(|g| !g.is_empty())
        && g.parse::<IpAddr>().map(|ip| ip.is_ipv6()) != Ok(v6)
    {
        return Err(invalid(
            &format!("{field}.gateway"),
            format!("`{g}` is not an {family} address"),
        ));
    }
    Ok(IpPool {
        name,
        addresses: addresses.clone(),
        prefix: *prefix,
        gateway: gateway.clone().filter(|g| !g.is_empty()),
    })
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

#[cfg(test)]
mod tests;
