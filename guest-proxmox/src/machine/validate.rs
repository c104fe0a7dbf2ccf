//! Spec checks the schema cannot express.

use std::collections::BTreeSet;

use guest_kit::invalid;
use guest_kit::types::PluginError;

use crate::spec::{ClusterSpec, MachineSpec};

/// Checks the plugin can make (the schema has the rest).
pub(super) fn validate(spec: &MachineSpec, cluster: &ClusterSpec) -> Result<(), PluginError> {
    match (&spec.template_id, &spec.template_selector) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "spec.templateSelector",
                "set either templateID (with sourceNode) or templateSelector, not both",
            ));
        }
        (None, None) => {
            return Err(invalid(
                "spec.templateID",
                "a template is required: templateID with sourceNode, or templateSelector",
            ));
        }
        (Some(_), None) if spec.source_node.as_deref().is_none_or(str::is_empty) => {
            return Err(invalid(
                "spec.sourceNode",
                "required with templateID: the node holding the template",
            ));
        }
        (None, Some(sel)) if sel.match_tags.is_empty() => {
            return Err(invalid(
                "spec.templateSelector.matchTags",
                "at least one tag is required",
            ));
        }
        _ => {}
    }
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
        let ok = t
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            && t.bytes().all(|b| {
                b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || matches!(b, b'_' | b'-' | b'.' | b'+')
            });
        if !ok {
            return Err(invalid(
                &format!("spec.tags[{i}]"),
                format!(
                    "`{t}` is not a Proxmox tag (lower-case letters, digits, `_`, `-`, `.`, `+`)"
                ),
            ));
        }
    }
    let drive = |d: &str| {
        ["ide", "sata", "scsi", "virtio"]
            .iter()
            .any(|p| d.strip_prefix(p).is_some_and(|n| n.parse::<u32>().is_ok()))
    };
    if let Some(disks) = &spec.disks {
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
    }
    if let Some(net) = &spec.network {
        let mut seen = BTreeSet::from(["net0".to_string()]);
        for (i, d) in net.additional_devices.iter().enumerate() {
            if !seen.insert(d.name.clone()) || !d.name.starts_with("net") {
                return Err(invalid(
                    &format!("spec.network.additionalDevices[{i}].name"),
                    format!("`{}` is not a free NIC name (net1 ... net31)", d.name),
                ));
            }
        }
        let devices = net
            .default
            .iter()
            .map(|d| ("spec.network.default".to_string(), d))
            .chain(
                net.additional_devices
                    .iter()
                    .enumerate()
                    .map(|(i, d)| (format!("spec.network.additionalDevices[{i}]"), &d.device)),
            );
        for (path, d) in devices {
            if d.bridge.is_empty() {
                return Err(invalid(
                    &format!("{path}.bridge"),
                    "a bridge is required (e.g. vmbr0)",
                ));
            }
            if d.dhcp4 == Some(false) && cluster.ipv4_config.is_none() {
                return Err(invalid(
                    &format!("{path}.dhcp4"),
                    "static IPv4 needs the cluster's ipv4Config",
                ));
            }
            if d.dhcp6 == Some(false) && cluster.ipv6_config.is_none() {
                return Err(invalid(
                    &format!("{path}.dhcp6"),
                    "static IPv6 needs the cluster's ipv6Config",
                ));
            }
        }
    }
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
