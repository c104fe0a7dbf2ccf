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

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// The field of the invalid-spec error `validate` gives `spec` (merged into the
    /// smallest valid spec) and `cluster`, or `None` when it passes.
    fn refused(extra: Value, cluster: Value) -> Option<String> {
        let mut spec = json!({"templateID": 9000, "sourceNode": "pve1"});
        for (k, v) in extra.as_object().unwrap() {
            if v.is_null() {
                spec.as_object_mut().unwrap().remove(k);
            } else {
                spec[k] = v.clone();
            }
        }
        let spec: MachineSpec = serde_json::from_value(spec).unwrap();
        let cluster: ClusterSpec = serde_json::from_value(cluster).unwrap();
        match validate(&spec, &cluster) {
            Ok(()) => None,
            Err(PluginError::InvalidSpec(i)) => Some(i.field),
            Err(other) => panic!("expected an invalid spec, got {other:?}"),
        }
    }

    fn field(name: &str) -> Option<String> {
        Some(name.to_string())
    }

    #[test]
    fn a_template_id_with_its_node_is_valid() {
        assert_eq!(refused(json!({}), json!({})), None);
    }

    #[test]
    fn a_template_is_required_once_and_a_template_id_needs_its_node() {
        let neither = json!({"templateID": null, "sourceNode": null});
        assert_eq!(refused(neither, json!({})), field("spec.templateID"));
        let both = json!({"templateSelector": {"matchTags": ["k8s"]}});
        assert_eq!(refused(both, json!({})), field("spec.templateSelector"));
        let no_node = json!({"sourceNode": null});
        assert_eq!(refused(no_node, json!({})), field("spec.sourceNode"));
        let no_tags =
            json!({"templateID": null, "sourceNode": null, "templateSelector": {"matchTags": []}});
        assert_eq!(
            refused(no_tags, json!({})),
            field("spec.templateSelector.matchTags")
        );
    }

    #[test]
    fn a_vmid_range_must_run_upwards_from_100() {
        assert_eq!(
            refused(json!({"vmIDRange": {"start": 50, "end": 60}}), json!({})),
            field("spec.vmIDRange.start")
        );
        assert_eq!(
            refused(json!({"vmIDRange": {"start": 500, "end": 400}}), json!({})),
            field("spec.vmIDRange.end")
        );
        assert_eq!(
            refused(json!({"vmIDRange": {"start": 500, "end": 500}}), json!({})),
            None
        );
    }

    #[test]
    fn only_full_clones_take_a_storage_or_format() {
        assert_eq!(
            refused(json!({"full": false, "storage": "local"}), json!({})),
            field("spec.storage")
        );
        assert_eq!(
            refused(json!({"full": false, "format": "qcow2"}), json!({})),
            field("spec.format")
        );
    }

    #[test]
    fn tags_must_be_proxmox_tags() {
        assert_eq!(
            refused(json!({"tags": ["ok", "Not-Ok"]}), json!({})),
            field("spec.tags[1]")
        );
        assert_eq!(
            refused(json!({"tags": ["-x"]}), json!({})),
            field("spec.tags[0]")
        );
        assert_eq!(refused(json!({"tags": ["k8s_1.33+x"]}), json!({})), None);
    }

    #[test]
    fn disks_must_be_disk_devices_each_used_once() {
        let boot = json!({"disks": {"bootVolume": {"disk": "disk0", "sizeGb": 20}}});
        assert_eq!(
            refused(boot, json!({})),
            field("spec.disks.bootVolume.disk")
        );
        let twice = json!({"disks": {"additionalVolumes": [
            {"disk": "scsi1", "sizeGb": 5}, {"disk": "scsi1", "sizeGb": 5}
        ]}});
        assert_eq!(
            refused(twice, json!({})),
            field("spec.disks.additionalVolumes[1].disk")
        );
    }

    #[test]
    fn nics_need_a_free_name_and_a_bridge() {
        let net0_again =
            json!({"network": {"additionalDevices": [{"name": "net0", "bridge": "vmbr0"}]}});
        assert_eq!(
            refused(net0_again, json!({})),
            field("spec.network.additionalDevices[0].name")
        );
        let no_bridge = json!({"network": {"default": {"bridge": ""}}});
        assert_eq!(
            refused(no_bridge, json!({})),
            field("spec.network.default.bridge")
        );
    }

    #[test]
    fn a_static_address_needs_the_clusters_pool() {
        let static4 = json!({"network": {"default": {"bridge": "vmbr0", "dhcp4": false}}});
        assert_eq!(
            refused(static4.clone(), json!({})),
            field("spec.network.default.dhcp4")
        );
        let pool = json!({"ipv4Config": {"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24, "gateway": "10.0.0.1"}});
        assert_eq!(refused(static4, pool), None);
        let static6 = json!({"network": {"additionalDevices": [{"name": "net1", "bridge": "vmbr0", "dhcp6": false}]}});
        assert_eq!(
            refused(static6, json!({})),
            field("spec.network.additionalDevices[0].dhcp6")
        );
    }

    #[test]
    fn the_cd_slot_must_be_a_cd_bus() {
        assert_eq!(
            refused(json!({"cloudInit": {"cdSlot": "virtio1"}}), json!({})),
            field("spec.cloudInit.cdSlot")
        );
        assert_eq!(
            refused(json!({"cloudInit": {"cdSlot": "sata3"}}), json!({})),
            None
        );
    }
}
