//! ProxmoxMachine (and template) specs between `v1alpha1` and `v1alpha2`.
//!
//! Up: the `default` NIC becomes `net0`, flagged to take the default IPv4 and IPv6
//! addresses (as CAPMOX converts it); an additional NIC keeps its pool references,
//! one per family, and one without any takes the default addresses too (what our
//! `v1alpha1` always meant: every NIC draws from the cluster's pools unless it asks
//! for DHCP); `target` becomes `allowedNodes: [target]`; a template selector without
//! a policy keeps `v1alpha1`'s superset match (`uniqueSubset`).
//! Down: `net0` becomes `default`, the others `additionalDevices` in order; a NIC's
//! pool references split into one IPv6 (the first named `*inet6*`) and one IPv4 (the
//! first other named `*inet*`, else the first other), as CAPMOX splits them.
use std::collections::BTreeMap;

use crate::spec::common::{MatchPolicy, PoolRef};
use crate::spec::{v1alpha1 as v1, v1alpha2 as v2};

pub fn up(s: &v1::MachineSpec) -> v2::MachineSpec {
    let template_selector = s.template_selector.clone().map(|mut t| {
        t.match_policy = t.match_policy.or(Some(MatchPolicy::UniqueSubset));
        t
    });
    v2::MachineSpec {
        source_node: s.source_node.clone(),
        template_id: s.template_id,
        template_selector,
        description: s.description.clone(),
        format: s.format,
        full: s.full,
        pool: s.pool.clone(),
        snap_name: s.snap_name.clone(),
        storage: s.storage.clone(),
        provider_id: s.provider_id.clone(),
        virtual_machine_id: s.virtual_machine_id,
        num_sockets: s.num_sockets,
        num_cores: s.num_cores,
        memory_mib: s.memory_mib,
        disks: s.disks.clone(),
        network: s.network.as_ref().map(network_up),
        vm_id_range: s.vm_id_range.clone(),
        checks: s.checks.clone(),
        metadata_settings: s.metadata_settings.clone(),
        allowed_nodes: match &s.target {
            Some(t) => vec![t.clone()],
            None => s.allowed_nodes.clone(),
        },
        tags: s.tags.clone(),
        cloud_init: s.cloud_init.clone(),
    }
}

pub fn down(s: &v2::MachineSpec) -> v1::MachineSpec {
    v1::MachineSpec {
        source_node: s.source_node.clone(),
        template_id: s.template_id,
        template_selector: s.template_selector.clone(),
        target: None,
        snap_name: s.snap_name.clone(),
        full: s.full,
        storage: s.storage.clone(),
        format: s.format,
        pool: s.pool.clone(),
        description: s.description.clone(),
        tags: s.tags.clone(),
        num_sockets: s.num_sockets,
        num_cores: s.num_cores,
        memory_mib: s.memory_mib,
        disks: s.disks.clone(),
        network: s.network.as_ref().map(network_down),
        vm_id_range: s.vm_id_range.clone(),
        allowed_nodes: s.allowed_nodes.clone(),
        checks: s.checks.clone(),
        cloud_init: s.cloud_init.clone(),
        metadata_settings: s.metadata_settings.clone(),
        provider_id: s.provider_id.clone(),
        virtual_machine_id: s.virtual_machine_id,
    }
}

/// Up, with what only `v1alpha2` says taken back from `hub`, the object as it was
/// before it went down to `s` (and was maybe edited there since).
pub fn restore_up(out: &mut v2::MachineSpec, s: &v1::MachineSpec, hub: &v2::MachineSpec) {
    if let (Some(m), Some(hub_m)) = (&mut out.metadata_settings, &hub.metadata_settings)
        && m.provider_id_injection.is_none()
    {
        m.provider_id_injection = hub_m.provider_id_injection;
    }
    if let (Some(sel), Some(hub_sel)) = (&mut out.template_selector, &hub.template_selector)
        && s.template_selector
            .as_ref()
            .and_then(|t| t.match_policy)
            .is_none()
    {
        sel.match_policy = hub_sel.match_policy;
    }
    let (Some(net), Some(hub_net)) = (&mut out.network, &hub.network) else {
        return;
    };
    net.zone = hub_net.zone.clone();
    for d in &mut net.network_devices {
        let Some(h) = hub_net.network_devices.iter().find(|h| h.name == d.name) else {
            continue;
        };
        d.default_ipv4 = h.default_ipv4;
        d.default_ipv6 = h.default_ipv6;
        d.queues = h.queues;
        // The pools as `v1alpha1` has them are still the hub's split: keep the hub's list.
        if pools_of_split(&h.ip_pool_ref) == d.ip_pool_ref {
            d.ip_pool_ref = h.ip_pool_ref.clone();
        }
        if h.bridge.is_none() && d.bridge.as_deref() == Some("") {
            d.bridge = None;
        }
        for (r, hr) in d.routes.iter_mut().zip(&h.routes) {
            if (&r.to, &r.via) == (&hr.to, &hr.via) {
                r.is6 = hr.is6;
            }
        }
        for (r, hr) in d.routing_policy.iter_mut().zip(&h.routing_policy) {
            if (&r.to, &r.from) == (&hr.to, &hr.from) {
                r.is6 = hr.is6;
            }
        }
    }
    for v in &mut net.vrfs {
        let Some(h) = hub_net.vrfs.iter().find(|h| h.name == v.name) else {
            continue;
        };
        for (r, hr) in v.routes.iter_mut().zip(&h.routes) {
            if (&r.to, &r.via) == (&hr.to, &hr.via) {
                r.is6 = hr.is6;
            }
        }
        for (r, hr) in v.routing_policy.iter_mut().zip(&h.routing_policy) {
            if (&r.to, &r.from) == (&hr.to, &hr.from) {
                r.is6 = hr.is6;
            }
        }
    }
    // The hub's device order, when the devices are still the same ones.
    let order: BTreeMap<&str, usize> = hub_net
        .network_devices
        .iter()
        .enumerate()
        .map(|(i, d)| (d.name.as_str(), i))
        .collect();
    if net.network_devices.len() == order.len()
        && net
            .network_devices
            .iter()
            .all(|d| order.contains_key(d.name.as_str()))
    {
        net.network_devices
            .sort_by_key(|d| order.get(d.name.as_str()).copied().unwrap_or(usize::MAX));
    }
}

/// Down, with what only `v1alpha1` says taken back from `old`, the object as it was
/// before it went up (and was maybe edited there since).
pub fn restore_down(out: &mut v1::MachineSpec, s: &v2::MachineSpec, old: &v1::MachineSpec) {
    if let Some(t) = &old.target
        && s.allowed_nodes == [t.clone()]
    {
        out.target = Some(t.clone());
        out.allowed_nodes = old.allowed_nodes.clone();
    }
    if let (Some(sel), Some(old_sel)) = (&mut out.template_selector, &old.template_selector)
        && old_sel.match_policy.is_none()
        && sel.match_policy == Some(MatchPolicy::UniqueSubset)
    {
        sel.match_policy = None;
    }
}

fn network_up(n: &v1::Network) -> v2::Network {
    let mut devices = vec![];
    if let Some(d) = &n.default {
        let mut dev = device_up("net0", d);
        dev.default_ipv4 = Some(true);
        dev.default_ipv6 = Some(true);
        devices.push(dev);
    }
    for a in &n.additional_devices {
        let mut dev = device_up(&a.name, &a.device);
        if dev.ip_pool_ref.is_empty() {
            dev.default_ipv4 = Some(true);
            dev.default_ipv6 = Some(true);
        }
        devices.push(dev);
    }
    v2::Network {
        zone: None,
        network_devices: devices,
        vrfs: n
            .vrfs
            .iter()
            .map(|v| v2::VrfDevice {
                name: v.name.clone(),
                table: v.table,
                interfaces: v.interfaces.clone(),
                routes: v.routes.iter().map(route_up).collect(),
                routing_policy: v.routing_policy.iter().map(rule_up).collect(),
            })
            .collect(),
    }
}

fn device_up(name: &str, d: &v1::NetworkDevice) -> v2::NetworkDevice {
    v2::NetworkDevice {
        name: name.into(),
        bridge: Some(d.bridge.clone()),
        model: d.model,
        mtu: d.mtu,
        vlan: d.vlan,
        queues: None,
        default_ipv4: None,
        default_ipv6: None,
        ip_pool_ref: d
            .ipv4_pool_ref
            .iter()
            .chain(&d.ipv6_pool_ref)
            .cloned()
            .collect(),
        dns_servers: d.dns_servers.clone(),
        routes: d.routes.iter().map(route_up).collect(),
        routing_policy: d.routing_policy.iter().map(rule_up).collect(),
        link_mtu: d.link_mtu,
        dhcp4: d.dhcp4,
        dhcp6: d.dhcp6,
    }
}

fn network_down(n: &v2::Network) -> v1::Network {
    let mut default = None;
    let mut additional_devices = vec![];
    for d in &n.network_devices {
        let dev = device_down(d);
        if d.name == "net0" {
            default = Some(dev);
        } else {
            additional_devices.push(v1::AdditionalNetworkDevice {
                name: d.name.clone(),
                device: dev,
            });
        }
    }
    v1::Network {
        default,
        additional_devices,
        vrfs: n
            .vrfs
            .iter()
            .map(|v| v1::VrfDevice {
                name: v.name.clone(),
                table: v.table,
                interfaces: v.interfaces.clone(),
                routes: v.routes.iter().map(route_down).collect(),
                routing_policy: v.routing_policy.iter().map(rule_down).collect(),
            })
            .collect(),
    }
}

fn device_down(d: &v2::NetworkDevice) -> v1::NetworkDevice {
    let (ipv4_pool_ref, ipv6_pool_ref) = split_pools(&d.ip_pool_ref);
    v1::NetworkDevice {
        bridge: d.bridge.clone().unwrap_or_default(),
        model: d.model,
        mtu: d.mtu,
        vlan: d.vlan,
        dns_servers: d.dns_servers.clone(),
        ipv4_pool_ref,
        ipv6_pool_ref,
        routes: d.routes.iter().map(route_down).collect(),
        routing_policy: d.routing_policy.iter().map(rule_down).collect(),
        link_mtu: d.link_mtu,
        dhcp4: d.dhcp4,
        dhcp6: d.dhcp6,
    }
}

/// (IPv4 pool, IPv6 pool) of a `v1alpha2` pool list, as CAPMOX tells them apart by name.
fn split_pools(refs: &[PoolRef]) -> (Option<PoolRef>, Option<PoolRef>) {
    let v6 = refs.iter().position(|r| r.name.contains("inet6"));
    let others = || refs.iter().enumerate().filter(|(i, _)| Some(*i) != v6);
    let v4 = others()
        .find(|(_, r)| r.name.contains("inet"))
        .or_else(|| others().next())
        .map(|(_, r)| r.clone());
    (v4, v6.map(|i| refs[i].clone()))
}

/// The list `v1alpha1`'s split of `refs` comes back up as.
fn pools_of_split(refs: &[PoolRef]) -> Vec<PoolRef> {
    let (v4, v6) = split_pools(refs);
    v4.into_iter().chain(v6).collect()
}

fn route_up(r: &v1::RouteSpec) -> v2::RouteSpec {
    v2::RouteSpec {
        to: r.to.clone(),
        via: r.via.clone(),
        metric: r.metric,
        table: r.table,
        is6: None,
    }
}

fn route_down(r: &v2::RouteSpec) -> v1::RouteSpec {
    v1::RouteSpec {
        to: r.to.clone(),
        via: r.via.clone(),
        metric: r.metric,
        table: r.table,
    }
}

fn rule_up(r: &v1::RoutingPolicySpec) -> v2::RoutingPolicySpec {
    v2::RoutingPolicySpec {
        to: r.to.clone(),
        from: r.from.clone(),
        table: r.table,
        priority: r.priority,
        is6: None,
    }
}

fn rule_down(r: &v2::RoutingPolicySpec) -> v1::RoutingPolicySpec {
    v1::RoutingPolicySpec {
        to: r.to.clone(),
        from: r.from.clone(),
        table: r.table,
        priority: r.priority,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(name: &str) -> PoolRef {
        PoolRef {
            api_group: Some("ipam.cluster.x-k8s.io".into()),
            kind: "InClusterIPPool".into(),
            name: name.into(),
        }
    }

    #[test]
    fn pools_split_by_their_inet_names_else_the_first_is_ipv4() {
        let names =
            |(a, b): (Option<PoolRef>, Option<PoolRef>)| (a.map(|p| p.name), b.map(|p| p.name));
        assert_eq!(
            names(split_pools(&[pool("foo"), pool("bar")])),
            (Some("foo".into()), None)
        );
        assert_eq!(
            names(split_pools(&[pool("m-inet6"), pool("m-inet")])),
            (Some("m-inet".into()), Some("m-inet6".into()))
        );
        assert_eq!(
            names(split_pools(&[pool("x-inet6")])),
            (None, Some("x-inet6".into()))
        );
        assert_eq!(names(split_pools(&[])), (None, None));
    }
}
