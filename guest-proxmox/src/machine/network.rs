//! The guest's network, from the spec, the addresses the host allocated and the VM's
//! NICs (their MACs): what cloud-init's `network-config` and Ignition's networkd
//! units are rendered from.
//!
//! One `ethN` per NIC, by position, matched by the MAC Proxmox gave it. Its addresses
//! are its pools' in order; each address whose pool has a gateway adds a default route
//! through it with the pool's metric (a second identical one, e.g. two NICs on the
//! same pool, is left out); then the NIC's own routes and rules. DNS servers: the
//! NIC's, else its zone's, else the cluster's. `linkMtu` is the guest's MTU.
use std::net::IpAddr;

use guest_kit::invalid;
use guest_kit::types::PluginError;
use guest_nocloud::{Ethernet, NetworkConfig, Prefix, Route, Rule, Vrf};
use serde_json::Value;

use super::context::Ctx;
use super::nics::{Pool, mac_of, zone_pools};
use super::properties::str_of;
use crate::spec::{RouteSpec, RoutingPolicySpec};

/// The guest network of this machine, whose VM has `config`.
pub(super) fn guest_network(cx: &Ctx, config: &Value) -> Result<NetworkConfig, PluginError> {
    let zone = cx.spec.network.as_ref().and_then(|n| n.zone.as_deref());
    let zone_dns = zone_pools(&cx.cluster, zone)?.dns_servers;
    let mut ethernets: Vec<Ethernet> = vec![];
    // (name in the guest, device) of each NIC, for VRF members.
    let mut names: Vec<(String, String)> = vec![];
    for (i, nic) in cx.nics.iter().enumerate() {
        let Some(mac) = str_of(config, &nic.device).and_then(|n| mac_of(&n)) else {
            // Not a NIC of this VM (yet): nothing to match it by.
            continue;
        };
        let name = format!("eth{i}");
        names.push((name.clone(), nic.device.clone()));
        let mut eth = Ethernet {
            name,
            mac,
            dhcp4: nic.dhcp4,
            dhcp6: nic.dhcp6,
            dns_servers: zone_dns.to_vec(),
            ..Ethernet::default()
        };
        for (pool, a) in cx.allocated_to(nic) {
            let ip = Prefix::parse(&format!("{}/{}", a.address, a.prefix)).map_err(|e| {
                invalid(
                    &format!("{}.ipPoolRef", nic.path),
                    format!("the allocated address: {e}"),
                )
            })?;
            eth.addresses.push(ip);
            let Some(via) = a.gateway.as_deref().filter(|g| !g.is_empty()) else {
                continue;
            };
            let via: IpAddr = via.parse().map_err(|_| {
                invalid(
                    &format!("{}.ipPoolRef", nic.path),
                    format!("the gateway `{via}` of {} is not an IP address", a.address),
                )
            })?;
            let route = Route {
                to: Prefix::default_route(ip.is_v6()),
                via: Some(via),
                metric: match pool {
                    Pool::Default { metric, .. } => *metric,
                    Pool::Ref(_) => None,
                },
                table: None,
            };
            let taken = ethernets
                .iter()
                .chain(std::iter::once(&eth))
                .flat_map(|e| &e.routes)
                .any(|r| r.to == route.to && r.table.is_none() && r.metric == route.metric);
            if !taken {
                eth.routes.push(route);
            }
        }
        if let Some(dev) = &nic.spec {
            if !dev.dns_servers.is_empty() {
                eth.dns_servers = dev.dns_servers.clone();
            }
            for (j, r) in dev.routes.iter().enumerate() {
                eth.routes
                    .push(route(r, &format!("{}.routes[{j}]", nic.path))?);
            }
            for (j, r) in dev.routing_policy.iter().enumerate() {
                eth.rules
                    .push(rule(r, &format!("{}.routingPolicy[{j}]", nic.path))?);
            }
            eth.mtu = dev.link_mtu;
        }
        ethernets.push(eth);
    }
    let vrfs = vrfs(cx, &names)?;
    let network = NetworkConfig { ethernets, vrfs };
    network
        .validate()
        .map_err(|e| invalid("spec.network", e.to_string()))?;
    Ok(network)
}

/// The spec's VRFs, their members named as in the guest (`names`: each NIC's name there
/// and its device; a member may be given as either).
fn vrfs(cx: &Ctx, names: &[(String, String)]) -> Result<Vec<Vrf>, PluginError> {
    let mut vrfs = vec![];
    for (i, v) in cx
        .spec
        .network
        .as_ref()
        .map(|n| n.vrfs.as_slice())
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let path = format!("spec.network.vrfs[{i}]");
        let mut interfaces = vec![];
        for (j, member) in v.interfaces.iter().enumerate() {
            let found = names
                .iter()
                .find(|(name, device)| member == device || member == name)
                .ok_or_else(|| {
                    invalid(
                        &format!("{path}.interfaces[{j}]"),
                        format!("{member} is none of the machine's NICs"),
                    )
                })?;
            interfaces.push(found.0.clone());
        }
        vrfs.push(Vrf {
            name: v.name.clone(),
            table: v.table,
            interfaces,
            routes: v
                .routes
                .iter()
                .enumerate()
                .map(|(j, r)| route(r, &format!("{path}.routes[{j}]")))
                .collect::<Result<_, _>>()?,
            rules: v
                .routing_policy
                .iter()
                .enumerate()
                .map(|(j, r)| rule(r, &format!("{path}.routingPolicy[{j}]")))
                .collect::<Result<_, _>>()?,
        });
    }
    Ok(vrfs)
}

/// The default addresses of the machine (`address/prefix`), IPv4 first: what Ignition
/// guests are told as their private addresses.
pub(super) fn default_addresses(cx: &Ctx) -> Vec<Prefix> {
    let mut out: Vec<Prefix> = cx
        .nics
        .iter()
        .flat_map(|n| cx.allocated_to(n))
        .filter(|(p, _)| matches!(p, Pool::Default { .. }))
        .filter_map(|(_, a)| Prefix::parse(&format!("{}/{}", a.address, a.prefix)).ok())
        .collect();
    out.sort_by_key(Prefix::is_v6);
    out
}

/// A route of the spec: `to` an address, a CIDR or `default`/`all` (the family from
/// `is6`, else from `via`, else IPv4).
pub(super) fn route(r: &RouteSpec, path: &str) -> Result<Route, PluginError> {
    let via = match r.via.as_deref().filter(|v| !v.is_empty()) {
        None => None,
        Some(v) => Some(v.parse::<IpAddr>().map_err(|_| {
            invalid(
                &format!("{path}.via"),
                format!("`{v}` is not an IP address"),
            )
        })?),
    };
    let v6 = r.is6.or(via.map(|v| v.is_ipv6())).unwrap_or(false);
    let to = target(r.to.as_deref(), v6, &format!("{path}.to"))?
        .ok_or_else(|| invalid(&format!("{path}.to"), "a route needs a destination"))?;
    Ok(Route {
        to,
        via,
        metric: r.metric,
        table: r.table,
    })
}

/// A routing-policy rule of the spec; a placeholder takes the other side's family.
pub(super) fn rule(r: &RoutingPolicySpec, path: &str) -> Result<Rule, PluginError> {
    let concrete = |s: &Option<String>| {
        s.as_deref()
            .filter(|s| !placeholder(s))
            .and_then(|s| Prefix::parse(s).ok())
            .map(|p| p.is_v6())
    };
    let v6 = r
        .is6
        .or_else(|| concrete(&r.to))
        .or_else(|| concrete(&r.from))
        .unwrap_or(false);
    let rule = Rule {
        to: target(r.to.as_deref(), v6, &format!("{path}.to"))?,
        from: target(r.from.as_deref(), v6, &format!("{path}.from"))?,
        priority: r.priority,
        table: r.table,
    };
    if rule.to.is_none() && rule.from.is_none() {
        return Err(invalid(path, "a rule needs `to` or `from`"));
    }
    Ok(rule)
}

fn placeholder(s: &str) -> bool {
    matches!(s, "default" | "all")
}

fn target(s: Option<&str>, v6: bool, path: &str) -> Result<Option<Prefix>, PluginError> {
    match s.filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(p) if placeholder(p) => Ok(Some(Prefix::default_route(v6))),
        Some(p) => Prefix::parse(p).map(Some).map_err(|e| invalid(path, e)),
    }
}

#[cfg(test)]
mod tests;
