//! ProxmoxCluster (and template) specs between `v1alpha1` and `v1alpha2`: the same
//! fields, but `cloneSpec` (`v1alpha1` only, unused) and `zoneConfig` (`v1alpha2` only).
use crate::spec::{v1alpha1 as v1, v1alpha2 as v2};

pub fn up(s: &v1::ClusterSpec) -> v2::ClusterSpec {
    v2::ClusterSpec {
        control_plane_endpoint: s.control_plane_endpoint.clone(),
        external_managed_control_plane: s.external_managed_control_plane,
        allowed_nodes: s.allowed_nodes.clone(),
        scheduler_hints: s.scheduler_hints.clone(),
        ipv4_config: s.ipv4_config.clone(),
        ipv6_config: s.ipv6_config.clone(),
        dns_servers: s.dns_servers.clone(),
        zone_config: vec![],
    }
}

pub fn down(s: &v2::ClusterSpec) -> v1::ClusterSpec {
    v1::ClusterSpec {
        control_plane_endpoint: s.control_plane_endpoint.clone(),
        external_managed_control_plane: s.external_managed_control_plane,
        allowed_nodes: s.allowed_nodes.clone(),
        scheduler_hints: s.scheduler_hints.clone(),
        ipv4_config: s.ipv4_config.clone(),
        ipv6_config: s.ipv6_config.clone(),
        dns_servers: s.dns_servers.clone(),
        clone_spec: None,
    }
}

pub fn restore_up(out: &mut v2::ClusterSpec, _s: &v1::ClusterSpec, hub: &v2::ClusterSpec) {
    out.zone_config = hub.zone_config.clone();
}

pub fn restore_down(out: &mut v1::ClusterSpec, _s: &v2::ClusterSpec, old: &v1::ClusterSpec) {
    out.clone_spec = old.clone_spec.clone();
}
