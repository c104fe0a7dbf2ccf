//! The config write after the clone.

use std::collections::BTreeSet;

use guest_kit::types::PluginError;
use guest_kit::{invalid, terminal};
use serde_json::Value;

use super::context::Ctx;
use super::nics::{Nic, mac_of, model_name};
use super::ownership::uid_tag;
use super::properties::{is_cloudinit_drive, is_drive_key, option, str_of, uuid_of};
use super::state::{State, Step};
use crate::spec::NicModel;

/// CPU, memory, NICs, tags, description, extra disks, cloud-init drive out; picks the
/// CD slot for the NoCloud ISO.
pub(super) fn configuring(cx: &Ctx, st: &mut State) -> Result<(), PluginError> {
    let config = cx.owned_config(st, "configuring the VM")?;
    st.uuid = uuid_of(&config);
    let update = config_update(cx, &config)?;
    st.cd_slot = Some(update.cd_slot);
    let form: Vec<(&str, String)> = update
        .form
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    cx.pve
        .put(&format!("{}/config", cx.config_path(st)), &form)
        .map_err(|e| e.classify("configuring the VM"))?;
    st.step = Step::Resizing;
    Ok(())
}

/// The PVE net string of `nic` given the template's (`existing`): the template's MAC
/// and firewall flag kept, the spec's model, bridge, VLAN, MTU and queues. None: the
/// NIC stays as the template has it (no spec for it, or one naming nothing to change).
pub(super) fn nic_value(nic: &Nic, existing: Option<&str>) -> Result<Option<String>, PluginError> {
    let Some(dev) = &nic.spec else {
        return Ok(None);
    };
    let changes = dev.bridge.is_some()
        || dev.model.is_some()
        || dev.mtu.is_some()
        || dev.vlan.is_some()
        || dev.queues.is_some();
    if !changes && existing.is_some() {
        return Ok(None);
    }
    let existing = existing.unwrap_or_default();
    let bridge = dev
        .bridge
        .clone()
        .or_else(|| option(existing, "bridge"))
        .ok_or_else(|| {
            invalid(
                &format!("{}.bridge", nic.path),
                format!(
                    "the template has no {}: a bridge is required for it",
                    nic.device
                ),
            )
        })?;
    let model = model_name(dev.model.unwrap_or(NicModel::Virtio));
    let mut value = match mac_of(existing) {
        Some(mac) => format!("{model}={mac}"),
        None => model.to_string(),
    };
    value.push_str(&format!(",bridge={bridge}"));
    if let Some(v) = dev.vlan {
        value.push_str(&format!(",tag={v}"));
    }
    if let Some(m) = dev.mtu {
        value.push_str(&format!(",mtu={m}"));
    }
    if let Some(q) = dev.queues {
        value.push_str(&format!(",queues={q}"));
    }
    if option(existing, "firewall").as_deref() == Some("1") {
        value.push_str(",firewall=1");
    }
    Ok(Some(value))
}

/// The config write that makes the cloned VM (its `config` as PVE reports it) what
/// the spec asks for, and the slot the NoCloud ISO will go into.
#[derive(Debug)]
pub(super) struct ConfigUpdate {
    /// `PUT .../config` parameters, in order.
    pub(super) form: Vec<(String, String)>,
    pub(super) cd_slot: String,
}

pub(super) fn config_update(cx: &Ctx, config: &Value) -> Result<ConfigUpdate, PluginError> {
    let mut form: Vec<(&str, String)> = vec![];
    if let Some(v) = cx.spec.num_sockets {
        form.push(("sockets", v.to_string()));
    }
    if let Some(v) = cx.spec.num_cores {
        form.push(("cores", v.to_string()));
    }
    if let Some(v) = cx.spec.memory_mib {
        form.push(("memory", v.to_string()));
    }
    let mut nets: Vec<(String, String)> = vec![];
    for nic in &cx.nics {
        if let Some(value) = nic_value(nic, str_of(config, &nic.device).as_deref())? {
            nets.push((nic.device.clone(), value));
        }
    }
    let mut tags: BTreeSet<String> = cx
        .spec
        .tags
        .iter()
        .map(|t| t.to_ascii_lowercase())
        .collect();
    tags.insert("hyperplug".into());
    tags.insert(uid_tag(cx.uid()));
    form.push(("tags", tags.into_iter().collect::<Vec<_>>().join(";")));
    // PVE's own cloud-init drive would be a second, conflicting datasource.
    let delete: Vec<String> = config
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, v)| is_drive_key(k) && v.as_str().is_some_and(is_cloudinit_drive))
        .map(|(k, _)| k.clone())
        .collect();
    if cx
        .spec
        .checks
        .as_ref()
        .and_then(|c| c.skip_qemu_guest_agent)
        != Some(true)
        && config.get("agent").is_none()
    {
        form.push(("agent", "1".into()));
    }
    let extra = additional_volumes(cx, config)?;
    let slot = cd_slot(cx, config, &delete)?;
    let mut form: Vec<(String, String)> = form
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .chain(nets)
        .chain(extra)
        .collect();
    if !delete.is_empty() {
        form.push(("delete".into(), delete.join(",")));
    }
    if let Some(d) = str_of(config, "digest") {
        form.push(("digest".into(), d));
    }
    Ok(ConfigUpdate {
        form,
        cd_slot: slot,
    })
}

/// The additional volumes the template lacks, as `PUT .../config` parameters: each on
/// its own storage, else the spec's, else the boot disk's.
fn additional_volumes(cx: &Ctx, config: &Value) -> Result<Vec<(String, String)>, PluginError> {
    let boot_storage = cx
        .spec
        .disks
        .as_ref()
        .and_then(|d| d.boot_volume.as_ref())
        .and_then(|b| str_of(config, &b.disk))
        .or_else(|| {
            config.as_object().into_iter().flatten().find_map(|(k, v)| {
                let v = v.as_str()?;
                (is_drive_key(k) && !v.contains("media=cdrom")).then(|| v.to_string())
            })
        })
        .and_then(|v| {
            v.split(',')
                .next()
                .and_then(|f| f.split_once(':'))
                .map(|(s, _)| s.to_string())
        });
    let mut extra: Vec<(String, String)> = vec![];
    for (i, vol) in cx
        .spec
        .disks
        .as_ref()
        .map(|d| d.additional_volumes.as_slice())
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        if config.get(&vol.disk).is_some() {
            continue;
        }
        let storage = vol
            .storage
            .clone()
            .or_else(|| cx.spec.storage.clone())
            .or_else(|| boot_storage.clone())
            .ok_or_else(|| {
                invalid(
                    &format!("spec.disks.additionalVolumes[{i}].storage"),
                    "no storage given and none can be derived from the boot disk",
                )
            })?;
        let mut value = format!("{storage}:{}", vol.size_gb);
        if let Some(f) = cx.spec.format {
            let f = serde_json::to_value(f)
                .ok()
                .and_then(|v| v.as_str().map(String::from));
            if let Some(f) = f {
                value.push_str(&format!(",format={f}"));
            }
        }
        extra.push((vol.disk.clone(), value));
    }
    Ok(extra)
}

/// The slot the NoCloud ISO goes into: the spec's, else ide2 when free (or only PVE's
/// cloud-init drive), else the first free IDE/SATA slot (`delete`: the drives the
/// update removes).
fn cd_slot(cx: &Ctx, config: &Value, delete: &[String]) -> Result<String, PluginError> {
    let free = |k: &str| config.get(k).is_none() || delete.iter().any(|d| d == k);
    let slot = match cx.spec.cloud_init.as_ref().and_then(|c| c.cd_slot.clone()) {
        Some(s) => {
            let current = str_of(config, &s).unwrap_or_default();
            if !free(&s) && !current.contains("media=cdrom") {
                return Err(invalid(
                    "spec.cloudInit.cdSlot",
                    format!("{s} holds a disk ({current}) in the template"),
                ));
            }
            s
        }
        None => [
            "ide2", "ide0", "ide1", "ide3", "sata0", "sata1", "sata2", "sata3", "sata4", "sata5",
        ]
        .iter()
        .find(|k| free(k) || str_of(config, k).is_some_and(|v| v.starts_with("none,")))
        .map(|s| s.to_string())
        .ok_or_else(|| {
            terminal(
                "NoFreeCDSlot",
                "no free IDE or SATA slot for the cloud-init ISO; set spec.cloudInit.cdSlot",
            )
        })?,
    };
    Ok(slot)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::machine::testing::{ctx, request, template_spec};

    /// A VM as PVE reports it right after cloning a cloud-init template.
    fn cloned() -> Value {
        json!({
            "name": "m1",
            "digest": "d1g35t",
            "sockets": 1,
            "cores": 2,
            "memory": "2048",
            "scsi0": "local-lvm:vm-100-disk-0,size=10G",
            "ide2": "local-lvm:vm-100-cloudinit,media=cdrom",
            "net0": "virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1",
            "smbios1": "uuid=5c1a8a5e-0000-4000-8000-000000000001",
        })
    }

    fn spec_with(extra: Value) -> Value {
        let mut spec = template_spec();
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        spec
    }

    fn update(spec: Value, config: &Value) -> Result<ConfigUpdate, PluginError> {
        let req = request(spec, json!({}));
        config_update(&ctx(&req), config)
    }

    fn value<'a>(update: &'a ConfigUpdate, key: &str) -> Option<&'a str> {
        update
            .form
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn invalid_field(result: Result<ConfigUpdate, PluginError>) -> String {
        match result {
            Err(PluginError::InvalidSpec(i)) => i.field,
            other => panic!("expected an invalid spec, got {other:?}"),
        }
    }

    #[test]
    fn the_spec_sizes_the_vm() {
        let spec = spec_with(json!({"numSockets": 2, "numCores": 4, "memoryMiB": 8192}));
        let u = update(spec, &cloned()).unwrap();
        assert_eq!(value(&u, "sockets"), Some("2"));
        assert_eq!(value(&u, "cores"), Some("4"));
        assert_eq!(value(&u, "memory"), Some("8192"));
    }

    #[test]
    fn sizes_the_spec_leaves_out_stay_the_templates() {
        let u = update(template_spec(), &cloned()).unwrap();
        for key in ["sockets", "cores", "memory"] {
            assert_eq!(value(&u, key), None, "{key}");
        }
    }

    #[test]
    fn the_vm_is_tagged_as_hyperplugs_and_this_machines_besides_the_specs_tags() {
        let u = update(spec_with(json!({"tags": ["prod", "k8s"]})), &cloned()).unwrap();
        assert_eq!(
            value(&u, "tags"),
            Some("hp-7f3a9c2e-1b4d-4e5f-8a6b-0c1d2e3f4a5b;hyperplug;k8s;prod")
        );
    }

    #[test]
    fn a_nic_keeps_the_templates_mac_and_firewall_and_takes_the_specs_bridge_vlan_and_mtu() {
        let spec = spec_with(json!({"network": {"default": {
            "bridge": "vmbr1", "model": "e1000", "vlan": 20, "mtu": 9000
        }}}));
        let u = update(spec, &cloned()).unwrap();
        assert_eq!(
            value(&u, "net0"),
            Some("e1000=BC:24:11:00:00:01,bridge=vmbr1,tag=20,mtu=9000,firewall=1")
        );
    }

    #[test]
    fn queues_go_after_the_mtu() {
        let req = request(template_spec(), json!({}));
        let cx = crate::machine::testing::ctx_v2(
            &req,
            json!({"templateID": 9000, "sourceNode": "pve1", "network": {"networkDevices": [
                {"name": "net0", "bridge": "vmbr0", "mtu": 1, "queues": 4},
                {"name": "net1", "queues": 2},
            ]}}),
            json!({}),
        );
        let mut config = cloned();
        config["net1"] = json!("e1000=BC:24:11:00:00:02,bridge=vmbr5");
        let u = config_update(&cx, &config).unwrap();
        assert_eq!(
            value(&u, "net0"),
            Some("virtio=BC:24:11:00:00:01,bridge=vmbr0,mtu=1,queues=4,firewall=1")
        );
        // No bridge in the spec: the template's.
        assert_eq!(
            value(&u, "net1"),
            Some("virtio=BC:24:11:00:00:02,bridge=vmbr5,queues=2")
        );
    }

    #[test]
    fn a_nic_the_template_lacks_needs_a_bridge() {
        let req = request(template_spec(), json!({}));
        let cx = crate::machine::testing::ctx_v2(
            &req,
            json!({"templateID": 9000, "sourceNode": "pve1", "network": {"networkDevices": [
                {"name": "net0"}, {"name": "net3", "vlan": 5},
            ]}}),
            json!({}),
        );
        match config_update(&cx, &cloned()) {
            Err(PluginError::InvalidSpec(i)) => {
                assert_eq!(i.field, "spec.network.additionalDevices[0].bridge")
            }
            other => panic!("expected an invalid spec, got {other:?}"),
        }
    }

    #[test]
    fn a_nic_the_template_lacks_gets_no_mac_so_pve_makes_one() {
        let spec = spec_with(json!({"network": {
            "default": {"bridge": "vmbr0"},
            "additionalDevices": [{"name": "net1", "bridge": "vmbr2"}],
        }}));
        let u = update(spec, &cloned()).unwrap();
        assert_eq!(value(&u, "net1"), Some("virtio,bridge=vmbr2"));
    }

    #[test]
    fn without_a_network_spec_the_templates_nic_is_left_alone() {
        let u = update(template_spec(), &cloned()).unwrap();
        assert_eq!(value(&u, "net0"), None);
    }

    #[test]
    fn pves_cloud_init_drive_goes_and_its_slot_takes_the_iso() {
        let u = update(template_spec(), &cloned()).unwrap();
        assert_eq!(value(&u, "delete"), Some("ide2"));
        assert_eq!(u.cd_slot, "ide2");
    }

    #[test]
    fn the_iso_takes_the_first_free_slot_when_ide2_holds_media() {
        let mut config = cloned();
        config["ide2"] = json!("local:iso/debian.iso,media=cdrom");
        let u = update(template_spec(), &config).unwrap();
        assert_eq!(value(&u, "delete"), None);
        assert_eq!(u.cd_slot, "ide0");
    }

    #[test]
    fn an_empty_cd_drive_counts_as_free() {
        let mut config = cloned();
        config["ide2"] = json!("none,media=cdrom");
        assert_eq!(update(template_spec(), &config).unwrap().cd_slot, "ide2");
    }

    #[test]
    fn the_specs_cd_slot_is_used_unless_it_holds_a_disk() {
        let spec = spec_with(json!({"cloudInit": {"cdSlot": "sata1"}}));
        assert_eq!(update(spec, &cloned()).unwrap().cd_slot, "sata1");

        let spec = spec_with(json!({"cloudInit": {"cdSlot": "scsi0"}}));
        assert_eq!(
            invalid_field(update(spec, &cloned())),
            "spec.cloudInit.cdSlot"
        );
    }

    #[test]
    fn no_free_ide_or_sata_slot_is_terminal() {
        let mut config = cloned();
        for slot in [
            "ide0", "ide1", "ide2", "ide3", "sata0", "sata1", "sata2", "sata3", "sata4", "sata5",
        ] {
            config[slot] = json!(format!("local-lvm:vm-100-{slot},size=1G"));
        }
        match update(template_spec(), &config) {
            Err(PluginError::Terminal(t)) => assert_eq!(t.reason, "NoFreeCDSlot"),
            other => panic!("expected NoFreeCDSlot, got {other:?}"),
        }
    }

    #[test]
    fn extra_volumes_go_to_their_own_storage_else_the_boot_disks() {
        let spec = spec_with(json!({"disks": {"additionalVolumes": [
            {"disk": "scsi1", "sizeGb": 20, "storage": "ceph"},
            {"disk": "scsi2", "sizeGb": 30},
        ]}}));
        let u = update(spec, &cloned()).unwrap();
        assert_eq!(value(&u, "scsi1"), Some("ceph:20"));
        assert_eq!(value(&u, "scsi2"), Some("local-lvm:30"));
    }

    #[test]
    fn extra_volumes_take_the_clones_storage_and_format_when_the_spec_names_them() {
        let spec = spec_with(json!({"storage": "nfs", "format": "qcow2", "disks": {
            "additionalVolumes": [{"disk": "scsi1", "sizeGb": 20}]
        }}));
        let u = update(spec, &cloned()).unwrap();
        assert_eq!(value(&u, "scsi1"), Some("nfs:20,format=qcow2"));
    }

    #[test]
    fn an_extra_volume_the_vm_already_has_is_not_added_again() {
        let spec = spec_with(json!({"disks": {"additionalVolumes": [
            {"disk": "scsi0", "sizeGb": 20},
        ]}}));
        assert_eq!(value(&update(spec, &cloned()).unwrap(), "scsi0"), None);
    }

    #[test]
    fn an_extra_volume_with_no_storage_to_go_to_names_its_field() {
        let mut config = cloned();
        config.as_object_mut().unwrap().remove("scsi0");
        config.as_object_mut().unwrap().remove("ide2");
        let spec = spec_with(json!({"disks": {"additionalVolumes": [
            {"disk": "scsi1", "sizeGb": 20},
        ]}}));
        assert_eq!(
            invalid_field(update(spec, &config)),
            "spec.disks.additionalVolumes[0].storage"
        );
    }

    #[test]
    fn the_guest_agent_is_enabled_unless_the_spec_skips_it_or_the_template_set_it() {
        assert_eq!(
            value(&update(template_spec(), &cloned()).unwrap(), "agent"),
            Some("1")
        );
        let skip = spec_with(json!({"checks": {"skipQemuGuestAgent": true}}));
        assert_eq!(value(&update(skip, &cloned()).unwrap(), "agent"), None);
        let mut config = cloned();
        config["agent"] = json!("enabled=1,fstrim_cloned_disks=1");
        assert_eq!(
            value(&update(template_spec(), &config).unwrap(), "agent"),
            None
        );
    }

    #[test]
    fn the_write_carries_the_configs_digest_so_pve_refuses_it_after_a_concurrent_change() {
        let u = update(template_spec(), &cloned()).unwrap();
        assert_eq!(u.form.last(), Some(&("digest".into(), "d1g35t".into())));
    }
}
