//! Spec checks the schema cannot express (or that CAPMOX's admission webhook made,
//! which nothing runs here): applied on every call, each naming its field as the
//! user wrote it.

use std::collections::BTreeSet;

use guest_kit::invalid;
use guest_kit::types::PluginError;

use super::nics::{Nic, Pool, Zone, zone_pools};
use super::ownership::{has_marker_line, is_marker_tag};
use crate::spec::{ClusterSpec, MachineSpec, NetworkDevice, RoutingPolicySpec};

const IPAM_GROUP: &str = "ipam.cluster.x-k8s.io";

/// Checks the plugin can make (the schema has the rest).
pub(super) fn validate(
    spec: &MachineSpec,
    cluster: &ClusterSpec,
    nics: &[Nic],
) -> Result<(), PluginError> {
    template(spec)?;
    if let Some(r) = &spec.vm_id_range {
        if r.start < 100 {
            return Err(invalid("spec.vmIDRange.start", "must be at least 100"));
        }
        if r.end < r.start {
            return Err(invalid(
                "spec.vmIDRange.end",
                format!("must not be below start ({})", r.start),
            ));
        }
    }
    if spec.full == Some(false) && (spec.storage.is_some() || spec.format.is_some()) {
        let field = if spec.storage.is_some() {
            "spec.storage"
        } else {
            "spec.format"
        };
        return Err(invalid(
            field,
            "only full clones (full: true) take a target storage or format",
        ));
    }
    for (i, t) in spec.tags.iter().enumerate() {
        if !is_tag(t) {
            return Err(invalid(
                &format!("spec.tags[{i}]"),
                format!("`{t}` is not a Proxmox tag (letters, digits, `_`, `-`, `.`, `+`)"),
            ));
        }
        if is_marker_tag(t) {
            return Err(invalid(
                &format!("spec.tags[{i}]"),
                format!(
                    "`{t}`: tags starting with `hp-` are the provider's own (they mark which machine a VM is); choose another"
                ),
            ));
        }
    }
    if spec.description.as_deref().is_some_and(has_marker_line) {
        return Err(invalid(
            "spec.description",
            "a line starting with `hyperplug.machine-uid=` or `hyperplug.cluster-uid=` is the provider's own marker of which machine a VM is; remove it",
        ));
    }
    disks(spec)?;
    network(spec, cluster, nics)?;
    if let Some(ci) = &spec.cloud_init
        && let Some(slot) = &ci.cd_slot
        && !(["ide", "sata", "scsi"].iter().any(|p| {
            slot.strip_prefix(p)
                .is_some_and(|n| n.parse::<u32>().is_ok())
        }))
    {
        return Err(invalid(
            "spec.cloudInit.cdSlot",
            format!("`{slot}` is not a CD slot (ide0-3, sata0-5, scsi0-30)"),
        ));
    }
    Ok(())
}

fn template(spec: &MachineSpec) -> Result<(), PluginError> {
    match (&spec.template_id, &spec.template_selector) {
        (Some(_), Some(_)) => Err(invalid(
            "spec.templateSelector",
            "set either templateID (with sourceNode) or templateSelector, not both",
        )),
        (None, None) => Err(invalid(
            "spec.templateID",
            "a template is required: templateID with sourceNode, or templateSelector",
        )),
        (Some(_), None) if spec.source_node.as_deref().is_none_or(str::is_empty) => Err(invalid(
            "spec.sourceNode",
            "required with templateID: the node holding the template",
        )),
        (None, Some(sel)) if sel.match_tags.is_empty() => Err(invalid(
            "spec.templateSelector.matchTags",
            "at least one tag is required",
        )),
        (None, Some(sel)) => match sel.match_tags.iter().position(|t| !is_tag(t)) {
            Some(i) => Err(invalid(
                &format!("spec.templateSelector.matchTags[{i}]"),
                format!("`{}` is not a Proxmox tag", sel.match_tags[i]),
            )),
            None => Ok(()),
        },
        _ => Ok(()),
    }
}

/// A Proxmox tag: `[a-z0-9_][a-z0-9_-+.]*`, any case.
pub(super) fn is_tag(t: &str) -> bool {
    t.bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'+'))
}

fn disks(spec: &MachineSpec) -> Result<(), PluginError> {
    let drive = |d: &str| {
        ["ide", "sata", "scsi", "virtio"]
            .iter()
            .any(|p| d.strip_prefix(p).is_some_and(|n| n.parse::<u32>().is_ok()))
    };
    let Some(disks) = &spec.disks else {
        return Ok(());
    };
    if let Some(b) = &disks.boot_volume
        && !drive(&b.disk)
    {
        return Err(invalid(
            "spec.disks.bootVolume.disk",
            format!("`{}` is not a disk device (e.g. scsi0)", b.disk),
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, v) in disks.additional_volumes.iter().enumerate() {
        if !drive(&v.disk) || !seen.insert(v.disk.clone()) {
            return Err(invalid(
                &format!("spec.disks.additionalVolumes[{i}].disk"),
                format!("`{}` is not a free disk device (e.g. scsi1)", v.disk),
            ));
        }
    }
    Ok(())
}

fn network(spec: &MachineSpec, cluster: &ClusterSpec, nics: &[Nic]) -> Result<(), PluginError> {
    let zone = spec.network.as_ref().and_then(|n| n.zone.as_deref());
    let zone = zone_pools(cluster, zone)?;
    let mut names = BTreeSet::new();
    for nic in nics {
        if let Some(d) = &nic.spec {
            device(nic, d, &zone, &mut names)?;
        }
    }
    vrfs(spec)
}

/// One NIC's device as the spec gives it (`names`: the NIC names taken so far).
fn device(
    nic: &Nic,
    d: &NetworkDevice,
    zone: &Zone,
    names: &mut BTreeSet<String>,
) -> Result<(), PluginError> {
    let path = &nic.path;
    let (v4, v6) = (zone.v4, zone.v6);
    let number = d
        .name
        .strip_prefix("net")
        .and_then(|n| n.parse::<u32>().ok());
    if number.is_none_or(|n| n > 31) || !names.insert(d.name.clone()) {
        return Err(invalid(
            &format!("{path}.name"),
            format!("`{}` is not a free NIC name (net0 ... net31)", d.name),
        ));
    }
    if d.bridge.as_deref() == Some("") {
        return Err(invalid(
            &format!("{path}.bridge"),
            "a bridge is required (e.g. vmbr0)",
        ));
    }
    if let Some(m) = d.mtu
        && m != 1
        && !(1280..=65520).contains(&m)
    {
        return Err(invalid(
            &format!("{path}.mtu"),
            format!("{m}: 1 (the bridge's) or 1280 to 65520 (IPv6 needs 1280)"),
        ));
    }
    if let Some(m) = d.link_mtu
        && !(1280..=65520).contains(&m)
    {
        return Err(invalid(
            &format!("{path}.linkMtu"),
            format!("{m}: 1280 to 65520 (IPv6 needs 1280)"),
        ));
    }
    if let Some(v) = d.vlan
        && !(1..=4094).contains(&v)
    {
        return Err(invalid(&format!("{path}.vlan"), "1 to 4094"));
    }
    if let Some(q) = d.queues
        && !(1..=65535).contains(&q)
    {
        return Err(invalid(&format!("{path}.queues"), "1 to 65535"));
    }
    for (j, r) in d.ip_pool_ref.iter().enumerate() {
        let group_ok = r.api_group.as_deref().is_none_or(|g| g == IPAM_GROUP);
        let kind_ok = matches!(r.kind.as_str(), "InClusterIPPool" | "GlobalInClusterIPPool");
        if !group_ok || !kind_ok || r.name.is_empty() {
            return Err(invalid(
                &format!("{path}.ipPoolRef[{j}]"),
                format!(
                    "{}/{} `{}`: pools are {IPAM_GROUP} InClusterIPPools or GlobalInClusterIPPools",
                    r.api_group.as_deref().unwrap_or_default(),
                    r.kind,
                    r.name
                ),
            ));
        }
    }
    for (j, r) in d.routing_policy.iter().enumerate() {
        rule_priority(r, &format!("{path}.routingPolicy[{j}]"))?;
        if r.table.unwrap_or(0) == 0 {
            return Err(invalid(
                &format!("{path}.routingPolicy[{j}].table"),
                "a routing policy rule needs a table",
            ));
        }
    }
    let static_from_refs = nic.pools.iter().any(|p| matches!(p, Pool::Ref(_)));
    for (dhcp, flagged, pool, field, family) in [
        (d.dhcp4, nic.default4, v4, "dhcp4", "ipv4Config"),
        (d.dhcp6, nic.default6, v6, "dhcp6", "ipv6Config"),
    ] {
        if dhcp == Some(false) && flagged && pool.is_none() && !static_from_refs {
            return Err(invalid(
                &format!("{path}.{field}"),
                format!("a static address needs the cluster's {family} (or an ipPoolRef)"),
            ));
        }
    }
    Ok(())
}

/// The spec's VRFs: their tables and rules.
fn vrfs(spec: &MachineSpec) -> Result<(), PluginError> {
    for (i, v) in spec
        .network
        .as_ref()
        .map(|n| n.vrfs.as_slice())
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let path = format!("spec.network.vrfs[{i}]");
        if matches!(v.table, 0 | 254 | 255) {
            return Err(invalid(
                &format!("{path}.table"),
                "not the kernel's tables (0, 254, 255)",
            ));
        }
        for (j, r) in v.routing_policy.iter().enumerate() {
            rule_priority(r, &format!("{path}.routingPolicy[{j}]"))?;
            if let Some(t) = r.table
                && t != v.table
            {
                return Err(invalid(
                    &format!("{path}.routingPolicy[{j}].table"),
                    format!("a VRF's rules use its table ({}), not {t}", v.table),
                ));
            }
        }
    }
    Ok(())
}

fn rule_priority(r: &RoutingPolicySpec, path: &str) -> Result<(), PluginError> {
    match r.priority {
        Some(p) if p == 0 || p == 32765 || p == 32766 || p > 4_294_967_295 => Err(invalid(
            &format!("{path}.priority"),
            format!("{p} would match the kernel's own rules (0, 32765, 32766)"),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
