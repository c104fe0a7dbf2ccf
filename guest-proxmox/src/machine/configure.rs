//! The config write after the clone.

use std::collections::BTreeSet;

use guest_kit::types::PluginError;
use guest_kit::{invalid, terminal};

use super::context::Ctx;
use super::nics::{mac_of, model_name};
use super::ownership::uid_tag;
use super::properties::{is_cloudinit_drive, is_drive_key, option, str_of, uuid_of};
use super::state::{State, Step};
use crate::spec::NicModel;

/// CPU, memory, NICs, tags, description, extra disks, cloud-init drive out; picks the
/// CD slot for the NoCloud ISO.
pub(super) fn configuring(cx: &Ctx, st: &mut State) -> Result<(), PluginError> {
    let config = cx.owned_config(st, "configuring the VM")?;
    st.uuid = uuid_of(&config);
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
        let Some(dev) = &nic.dev else { continue };
        let model = model_name(dev.model.unwrap_or(NicModel::Virtio));
        let existing = str_of(&config, &nic.device).unwrap_or_default();
        let mut value = match mac_of(&existing) {
            Some(mac) => format!("{model}={mac}"),
            None => model.to_string(),
        };
        value.push_str(&format!(",bridge={}", dev.bridge));
        if let Some(v) = dev.vlan {
            value.push_str(&format!(",tag={v}"));
        }
        if let Some(m) = dev.mtu {
            value.push_str(&format!(",mtu={m}"));
        }
        if option(&existing, "firewall").as_deref() == Some("1") {
            value.push_str(",firewall=1");
        }
        nets.push((nic.device.clone(), value));
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
    let boot_storage = cx
        .spec
        .disks
        .as_ref()
        .and_then(|d| d.boot_volume.as_ref())
        .and_then(|b| str_of(&config, &b.disk))
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
    // The CD slot: the spec's, else ide2 when free (or only PVE's cloud-init drive),
    // else the first free IDE/SATA slot.
    let free = |k: &str| config.get(k).is_none() || delete.iter().any(|d| d == k);
    let slot = match cx.spec.cloud_init.as_ref().and_then(|c| c.cd_slot.clone()) {
        Some(s) => {
            let current = str_of(&config, &s).unwrap_or_default();
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
        .find(|k| free(k) || str_of(&config, k).is_some_and(|v| v.starts_with("none,")))
        .map(|s| s.to_string())
        .ok_or_else(|| {
            terminal(
                "NoFreeCDSlot",
                "no free IDE or SATA slot for the cloud-init ISO; set spec.cloudInit.cdSlot",
            )
        })?,
    };
    st.cd_slot = Some(slot);
    let mut f: Vec<(&str, String)> = form;
    let nets_ref: Vec<(&str, String)> = nets.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    f.extend(nets_ref);
    let extra_ref: Vec<(&str, String)> =
        extra.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    f.extend(extra_ref);
    if !delete.is_empty() {
        f.push(("delete", delete.join(",")));
    }
    if let Some(d) = str_of(&config, "digest") {
        f.push(("digest", d));
    }
    cx.pve
        .put(&format!("{}/config", cx.config_path(st)), &f)
        .map_err(|e| e.classify("configuring the VM"))?;
    st.step = Step::Resizing;
    Ok(())
}
