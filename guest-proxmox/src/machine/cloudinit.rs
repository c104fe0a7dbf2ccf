//! The NoCloud ISO: build, upload, attach, eject, delete.

use std::collections::BTreeSet;

use guest_kit::machine::{BootstrapData, MachineStatus};
use guest_kit::types::PluginError;
use guest_kit::{log, terminal, transient};
use guest_nocloud::ignition::{Additions, File};
use serde_json::Value;

use super::context::Ctx;
use super::network::{default_addresses, guest_network};
use super::ownership::uid_tag;
use super::properties::{str_of, u64_of, uuid_of};
use super::state::{State, Step};
use super::tasks::{poll, task_failed, upid_of};
use super::{BOOTSTRAP_MS, RETRY_MS, SHORT_MS};
use crate::api::{Pve, percent_encode};

/// The ISO's storage: the spec's, else the node's first (by name) active file-based
/// storage with `iso` content (as chosen with the node, when it was: `st.iso_at`).
pub(super) fn iso_storage(cx: &Ctx, st: &State, node: &str) -> Result<String, PluginError> {
    if let Some(s) = cx
        .spec
        .cloud_init
        .as_ref()
        .and_then(|c| c.iso_storage.clone())
    {
        return Ok(s);
    }
    if let Some((n, s)) = &st.iso_at
        && n == node
    {
        return Ok(s.clone());
    }
    let list = cx.node_storages(node)?;
    let mut names: Vec<String> = list
        .iter()
        .filter(|s| u64_of(s, "active").unwrap_or(1) == 1 && u64_of(s, "enabled").unwrap_or(1) == 1)
        .filter(|s| {
            matches!(
                str_of(s, "type").as_deref(),
                Some("dir" | "nfs" | "cifs" | "cephfs" | "glusterfs" | "btrfs")
            )
        })
        .filter(|s| str_of(s, "content").is_some_and(|c| c.split(',').any(|x| x == "iso")))
        .filter_map(|s| str_of(s, "storage"))
        .collect();
    names.sort();
    names.into_iter().next().ok_or_else(|| {
        terminal(
            "NoISOStorage",
            format!("node {node} has no directory storage with `iso` content; set spec.cloudInit.isoStorage"),
        )
    })
}

pub(super) fn iso_name(cx: &Ctx, vmid: u32) -> String {
    let uid = uid_tag(cx.uid());
    format!("hyperplug-{vmid}-{}.iso", &uid[3..])
}

/// The NoCloud seed of this machine, from the VM's config (MACs, SMBIOS UUID).
///
/// `meta-data`: `instance-id` is the SMBIOS UUID (templates set the kubelet's
/// provider ID from it, which must match the machine's), `provider-id` unless
/// `metadataSettings.providerIDInjection` is false, and `proxmox_node` and `zone` for
/// templates that label Nodes with them. Cloud-config guests get the network as
/// `network-config`; Ignition guests get it as networkd units in their config, with
/// `/etc/hostname` and `/etc/proxmox-env` (for Flatcar's metadata agent), and an empty
/// `network-config`.
pub(super) fn seed(
    cx: &Ctx,
    config: &Value,
    bootstrap: &BootstrapData,
    uuid: &str,
    node: &str,
) -> Result<guest_nocloud::Seed, PluginError> {
    let network = guest_network(cx, config)?;
    let provider_id = format!("proxmox://{uuid}");
    let inject = cx
        .spec
        .metadata_settings
        .as_ref()
        .and_then(|m| m.provider_id_injection)
        != Some(false);
    let zone = cx
        .spec
        .network
        .as_ref()
        .and_then(|n| n.zone.clone())
        .unwrap_or_else(|| "default".into());
    let meta_data = guest_nocloud::MetaData {
        instance_id: uuid.to_string(),
        hostname: cx.req.machine.name.clone(),
        provider_id: inject.then(|| provider_id.clone()),
        kubernetes_version: None,
        extra: vec![("proxmox_node".into(), node.into()), ("zone".into(), zone)],
    };
    let invalid_network =
        |e: guest_nocloud::NetworkError| terminal("InvalidNetwork", e.to_string());
    let (user_data, network_config) = match bootstrap.format.as_str() {
        "ignition" => {
            let name = &cx.req.machine.name;
            let mut env = format!(
                "COREOS_CUSTOM_HOSTNAME={name}\nCOREOS_CUSTOM_INSTANCE_ID={uuid}\nCOREOS_CUSTOM_PROVIDER_ID={provider_id}"
            );
            for a in default_addresses(cx) {
                let family = if a.is_v6() { "IPV6" } else { "IPV4" };
                env.push_str(&format!("\nCOREOS_CUSTOM_PRIVATE_{family}={a}"));
            }
            let additions = Additions {
                files: vec![
                    File {
                        path: "/etc/hostname".into(),
                        contents: name.clone(),
                        mode: 0o644,
                    },
                    File {
                        path: "/etc/proxmox-env".into(),
                        contents: env,
                        mode: 0o644,
                    },
                ],
                enable_units: vec!["systemd-resolved.service".into()],
                networkd_units: network.networkd_units().map_err(invalid_network)?,
            };
            let user_data = guest_nocloud::ignition::append(&bootstrap.value, &additions)
                .map_err(|e| terminal("InvalidBootstrapData", e.to_string()))?;
            (user_data, guest_nocloud::EMPTY_NETWORK_CONFIG.to_string())
        }
        _ => (
            bootstrap.value.clone(),
            network.render().map_err(invalid_network)?,
        ),
    };
    Ok(guest_nocloud::Seed {
        user_data,
        meta_data,
        network_config: Some(network_config),
    })
}

pub(super) fn uploading(cx: &Ctx, st: &mut State) -> Result<Option<MachineStatus>, PluginError> {
    if let Some(upid) = st.upid.clone() {
        match poll(&cx.pve, &upid, "following the ISO upload")? {
            Ok(false) => {
                return Ok(Some(cx.status(
                    st,
                    "UploadingCloudInit",
                    "uploading the NoCloud ISO",
                    Some(SHORT_MS),
                )));
            }
            Ok(true) => {
                st.upid = None;
                st.step = Step::Attaching;
                return Ok(None);
            }
            Err(msg) => {
                if let Some(e) = task_failed("uploading the NoCloud ISO", &msg) {
                    return Err(e);
                }
                st.upid = None;
                return Ok(Some(cx.status(
                    st,
                    "UploadingCloudInit",
                    format!("ISO upload failed ({msg}); retrying"),
                    Some(RETRY_MS),
                )));
            }
        }
    }
    // Static addresses go into the ISO: the clone before it did not need them, so the
    // IPAM provider's allocation overlapped the clone.
    let missing = cx.missing_addresses();
    if !missing.is_empty() {
        return Ok(Some(cx.status(
            st,
            "WaitingForAddresses",
            format!(
                "VM cloned and configured; waiting for IPAM addresses: {}",
                missing.join(", ")
            ),
            None,
        )));
    }
    let Some(bootstrap) = &cx.req.bootstrap else {
        let mut s = cx.status(
            st,
            "WaitingForBootstrapData",
            "VM cloned and configured; waiting for the bootstrap data",
            Some(BOOTSTRAP_MS),
        );
        s.needs_bootstrap = true;
        return Ok(Some(s));
    };
    if !matches!(bootstrap.format.as_str(), "cloud-config" | "ignition") {
        return Err(terminal(
            "UnsupportedBootstrapFormat",
            format!(
                "bootstrap format `{}`: only cloud-config and ignition are supported",
                bootstrap.format
            ),
        ));
    }
    // The node of the state this call began with (steps before may have followed the VM).
    let recorded = guest_kit::state::load::<State>(cx.req.state.as_deref())
        .ok()
        .and_then(|saved| saved.node);
    let config = cx.owned_config(st, "building the NoCloud ISO")?;
    let node = st.node.clone().unwrap_or_default();
    let uuid = uuid_of(&config)
        .ok_or_else(|| transient("the VM has no smbios1 uuid yet", Some(SHORT_MS)))?;
    st.uuid = Some(uuid.clone());
    let storage = iso_storage(cx, st, &node)?;
    let name = iso_name(cx, st.vmid.unwrap_or_default());
    if st.iso.is_none() && recorded.is_some_and(|r| r != node) {
        remove_untracked_elsewhere(cx, &node, &name)?;
    }
    let volid = format!("{storage}:iso/{name}");
    let image = seed(cx, &config, bootstrap, &uuid, &node)?
        .iso()
        .map_err(|e| terminal("CloudInitISO", e.to_string()))?;
    // An ISO an earlier attempt left (lost state) needs no look first: PVE's upload
    // writes over a file of the same name.
    st.iso = Some(volid);
    st.iso_node = Some(node.clone());
    let v = cx
        .pve
        .upload(&node, &storage, "iso", &name, &image)
        .map_err(|e| e.classify(&format!("uploading the NoCloud ISO to {storage}")))?;
    match upid_of(v) {
        // Not polled at once: the task's end wakes the machine.
        Some(upid) => {
            st.upid = Some(upid);
            Ok(Some(cx.status(
                st,
                "UploadingCloudInit",
                "uploading the NoCloud ISO",
                Some(SHORT_MS),
            )))
        }
        None => {
            st.step = Step::Attaching;
            Ok(None)
        }
    }
}

/// The ISO a machine deleted before attaching one may have left without a record: an
/// upload whose reply was lost (PVE carried it out) leaves none in the state, yet writes
/// the ISO, and the call that uploads may have begun at any step since the clone (the
/// state kept is the one from before that call). Its name says where it would be, so the
/// delete removes that too. Only a failure worth retrying stops the delete here; a node
/// without ISO storage had no upload.
pub(super) fn untracked_upload(cx: &Ctx, st: &mut State) -> Result<(), PluginError> {
    let before_attaching = matches!(
        st.step,
        Step::Cloning | Step::Configuring | Step::Resizing | Step::UploadingCloudInit
    );
    if !before_attaching || st.iso.is_some() {
        return Ok(());
    }
    let (Some(vmid), Some(node)) = (st.vmid, st.node.clone()) else {
        return Ok(());
    };
    let storage = match iso_storage(cx, st, &node) {
        Ok(s) => s,
        Err(e @ PluginError::Transient(_)) => return Err(e),
        Err(_) => return Ok(()),
    };
    st.iso = Some(format!("{storage}:iso/{}", iso_name(cx, vmid)));
    st.iso_node = Some(node);
    Ok(())
}

/// A VM that moved since the last saved state may have left behind an ISO no state
/// records: an upload whose reply was lost wrote it on the node the VM was on then. The
/// name is this machine's and this VM's, so it is removed from the ISO storages of every
/// other node (PVE answers a missing volume at once). Only on a move: no cost otherwise.
fn remove_untracked_elsewhere(cx: &Ctx, node: &str, name: &str) -> Result<(), PluginError> {
    let iso_storages: Vec<(String, String, bool)> = cx
        .resources()?
        .iter()
        .filter(|r| r.is("storage"))
        .filter(|r| (r.content.as_deref()).is_some_and(|c| c.split(',').any(|x| x == "iso")))
        .filter_map(|r| {
            let shared = r.shared == Some(1);
            Some((
                r.node.as_deref()?.into(),
                r.storage.as_deref()?.into(),
                shared,
            ))
        })
        .collect();
    // A shared storage the VM's node has too is where this upload goes (and is looked
    // at there); others are removed from once.
    let here: BTreeSet<&str> = iso_storages
        .iter()
        .filter(|(n, _, shared)| *shared && n == node)
        .map(|(_, s, _)| s.as_str())
        .collect();
    let mut done = BTreeSet::new();
    for (n, storage, shared) in &iso_storages {
        if n == node || (*shared && (here.contains(storage.as_str()) || !done.insert(storage))) {
            continue;
        }
        delete_volume(&cx.pve, n, &format!("{storage}:iso/{name}"))?;
    }
    Ok(())
}

/// Deletes a volume; the UPID of PVE's `imgdel` task, or `None` when it is gone already.
pub(super) fn delete_volume(
    pve: &Pve,
    node: &str,
    volid: &str,
) -> Result<Option<String>, PluginError> {
    let storage = volid.split(':').next().unwrap_or_default();
    match pve.delete(
        &format!(
            "/nodes/{}/storage/{}/content/{}",
            percent_encode(node),
            percent_encode(storage),
            percent_encode(volid)
        ),
        &[],
    ) {
        Ok(v) => Ok(upid_of(v)),
        Err(e) if e.to_string().contains("does not exist") => Ok(None),
        Err(e) => Err(e.classify(&format!("deleting {volid}"))),
    }
}

/// Follows the ISO's `imgdel` task in `st.upid`: `Some(status)` while it runs; when it
/// failed, the deletion is tried again.
pub(super) fn following_iso_removal(
    cx: &Ctx,
    st: &mut State,
    phase: &str,
) -> Result<Option<MachineStatus>, PluginError> {
    let Some(upid) = st.upid.clone() else {
        return Ok(None);
    };
    match poll(&cx.pve, &upid, "following the ISO removal")? {
        Ok(false) => Ok(Some(cx.status(
            st,
            phase,
            "removing the NoCloud ISO",
            Some(SHORT_MS),
        ))),
        Ok(true) => {
            st.upid = None;
            st.iso = None;
            st.iso_node = None;
            Ok(None)
        }
        Err(msg) => {
            log::warn(
                "removing the NoCloud ISO failed; trying again",
                &[("error", msg)],
            );
            st.upid = None;
            Ok(None)
        }
    }
}

pub(super) fn attaching(cx: &Ctx, st: &mut State) -> Result<Option<MachineStatus>, PluginError> {
    // Removing the ISO left on the node the VM moved from (below): followed to its end,
    // and tried again when it failed, since that ISO holds the bootstrap data.
    if let Some(s) = following_iso_removal(cx, st, "UploadingCloudInit")? {
        return Ok(Some(s));
    }
    let Some(volid) = st.iso.clone() else {
        st.step = Step::UploadingCloudInit;
        return Ok(None);
    };
    let config = cx.owned_config(st, "attaching the NoCloud ISO")?;
    // Migrated since the upload: the ISO is on the old node's storage; remove it there,
    // then upload it again.
    if let Some(old) = st.iso_node.clone()
        && st.node.as_ref() != Some(&old)
    {
        let Some(upid) = delete_volume(&cx.pve, &old, &volid)? else {
            st.iso = None;
            st.iso_node = None;
            st.step = Step::UploadingCloudInit;
            return Ok(None);
        };
        st.upid = Some(upid);
        return Ok(Some(cx.status(
            st,
            "UploadingCloudInit",
            format!("removing the NoCloud ISO left on {old}, which the VM moved from"),
            Some(SHORT_MS),
        )));
    }
    let slot = st.cd_slot.clone().unwrap_or_else(|| "ide2".into());
    let mut form = vec![(slot.as_str(), format!("{volid},media=cdrom"))];
    if let Some(d) = str_of(&config, "digest") {
        form.push(("digest", d));
    }
    cx.pve
        .put(&format!("{}/config", cx.config_path(st)), &form)
        .map_err(|e| e.classify("attaching the NoCloud ISO"))?;
    st.step = Step::PoweringOn;
    Ok(None)
}

/// Booted: eject the ISO (media change works on a running VM) and delete it. The machine
/// is ready once the deletion is asked for: its `imgdel` task can queue behind other
/// tasks of the node, and describe follows it to its end (see [`removing_iso`]).
pub(super) fn ejecting(cx: &Ctx, st: &mut State) -> Result<Option<MachineStatus>, PluginError> {
    if let Some(volid) = st.iso.clone() {
        let config = cx.owned_config(st, "ejecting the NoCloud ISO")?;
        let slot = st.cd_slot.clone().unwrap_or_else(|| "ide2".into());
        if iso_attached(&config, st) {
            cx.pve
                .put(
                    &format!("{}/config", cx.config_path(st)),
                    &[(slot.as_str(), "none,media=cdrom".to_string())],
                )
                .map_err(|e| e.classify("ejecting the NoCloud ISO"))?;
        }
        ask_iso_removal(cx, st, &volid)?;
    }
    st.step = Step::Ready;
    Ok(None)
}

/// Whether the VM's `config` still has this machine's NoCloud ISO in its CD slot.
pub(super) fn iso_attached(config: &Value, st: &State) -> bool {
    let slot = st.cd_slot.as_deref().unwrap_or("ide2");
    st.iso
        .as_ref()
        .is_some_and(|volid| str_of(config, slot).is_some_and(|v| v.starts_with(volid.as_str())))
}

/// A ready machine's NoCloud ISO (it holds the bootstrap data) until it is gone: its
/// `imgdel` task in `st.upid` followed to its end (the task is the machine's wait, so
/// its end brings describe here), and the deletion asked for again if it failed.
pub(super) fn removing_iso(cx: &Ctx, st: &mut State) -> Result<(), PluginError> {
    if st.upid.is_some() {
        following_iso_removal(cx, st, "Ready")?;
        if st.upid.is_some() {
            return Ok(());
        }
    }
    let Some(volid) = st.iso.clone() else {
        return Ok(());
    };
    ask_iso_removal(cx, st, &volid)
}

/// Asks PVE to delete the ISO `volid` on the node it was uploaded to: its `imgdel` task
/// is followed in `st.upid`; an ISO already gone is forgotten at once.
fn ask_iso_removal(cx: &Ctx, st: &mut State, volid: &str) -> Result<(), PluginError> {
    let node = st
        .iso_node
        .clone()
        .or_else(|| st.node.clone())
        .unwrap_or_default();
    match delete_volume(&cx.pve, &node, volid)? {
        Some(upid) => st.upid = Some(upid),
        None => {
            st.iso = None;
            st.iso_node = None;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use guest_kit::testing::allocated;
    use serde_json::json;

    use super::*;

    use crate::machine::testing::{ctx, request, template_spec};

    const UUID: &str = "5c1a8a5e-0000-4000-8000-000000000001";

    #[test]
    fn an_iso_is_attached_while_its_cd_slot_names_it() {
        let volid = "local:iso/hyperplug-100-u.iso";
        let mut st = State {
            iso: Some(volid.into()),
            ..State::default()
        };
        let attached = json!({"ide2": format!("{volid},media=cdrom")});
        assert!(iso_attached(&attached, &st));
        assert!(!iso_attached(&json!({"ide2": "none,media=cdrom"}), &st));
        st.cd_slot = Some("ide0".into());
        assert!(!iso_attached(&attached, &st), "another slot");
        st.iso = None;
        assert!(!iso_attached(
            &json!({"ide0": format!("{volid},media=cdrom")}),
            &st
        ));
    }

    fn cloud_config() -> BootstrapData {
        BootstrapData {
            format: "cloud-config".into(),
            value: b"#cloud-config\n".to_vec(),
        }
    }

    fn ignition() -> BootstrapData {
        BootstrapData {
            format: "ignition".into(),
            value: br#"{"ignition":{"version":"2.3.0"},"passwd":{"users":[{"name":"core"}]}}"#
                .to_vec(),
        }
    }

    fn vm() -> Value {
        json!({"net0": "virtio=BC:24:11:00:00:01,bridge=vmbr0"})
    }

    fn static_cluster() -> Value {
        json!({
            "ipv4Config": {"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24, "gateway": "10.0.0.1"},
            "dnsServers": ["10.0.0.2"],
        })
    }

    fn meta(seed: &guest_nocloud::Seed) -> String {
        seed.meta_data.render()
    }

    #[test]
    fn the_instance_id_is_the_smbios_uuid_templates_make_the_provider_id_from() {
        let req = request(template_spec(), json!({}));
        let seed = seed(&ctx(&req), &vm(), &cloud_config(), UUID, "pve2").unwrap();
        assert_eq!(seed.meta_data.instance_id, UUID);
        assert_eq!(
            seed.meta_data.provider_id.as_deref(),
            Some("proxmox://5c1a8a5e-0000-4000-8000-000000000001")
        );
        assert_eq!(seed.meta_data.hostname, "m1");
        let text = meta(&seed);
        assert!(text.contains("proxmox_node: \"pve2\"\n"), "{text}");
        assert!(text.contains("zone: \"default\"\n"), "{text}");
        assert_eq!(seed.user_data, b"#cloud-config\n");
    }

    #[test]
    fn the_provider_id_is_left_out_when_the_spec_says_so() {
        let mut spec = template_spec();
        spec["metadataSettings"] = json!({"providerIDInjection": false});
        let req = request(spec, json!({}));
        let seed = seed(&ctx(&req), &vm(), &cloud_config(), UUID, "pve1").unwrap();
        assert_eq!(seed.meta_data.provider_id, None);
        assert!(!meta(&seed).contains("provider-id"));
    }

    #[test]
    fn a_cloud_config_guest_gets_its_network_as_network_config() {
        let mut req = request(template_spec(), static_cluster());
        req.addresses = vec![allocated("net0-00-inet", "10.0.0.11", 24, Some("10.0.0.1"))];
        let seed = seed(&ctx(&req), &vm(), &cloud_config(), UUID, "pve1").unwrap();
        let net = seed.network_config.unwrap();
        assert!(net.starts_with("network:\n  version: 2\n"), "{net}");
        assert!(net.contains("macaddress: BC:24:11:00:00:01"), "{net}");
        assert!(net.contains("- '10.0.0.11/24'"), "{net}");
        assert!(net.contains("\"via\": \"10.0.0.1\""), "{net}");
    }

    #[test]
    fn an_ignition_guest_gets_hostname_proxmox_env_and_networkd_units_in_its_config() {
        let mut req = request(template_spec(), static_cluster());
        req.addresses = vec![allocated("net0-00-inet", "10.0.0.11", 24, Some("10.0.0.1"))];
        let seed = seed(&ctx(&req), &vm(), &ignition(), UUID, "pve1").unwrap();
        assert_eq!(
            seed.network_config.as_deref(),
            Some(guest_nocloud::EMPTY_NETWORK_CONFIG)
        );
        let config: Value = serde_json::from_slice(&seed.user_data).unwrap();
        assert_eq!(
            config["passwd"]["users"][0]["name"], "core",
            "the bootstrap's own"
        );
        let files = config["storage"]["files"].as_array().unwrap();
        assert_eq!(files[0]["path"], "/etc/hostname");
        assert_eq!(files[0]["contents"]["source"], "data:,m1");
        assert_eq!(files[1]["path"], "/etc/proxmox-env");
        assert_eq!(
            files[1]["contents"]["source"],
            format!(
                "data:,COREOS_CUSTOM_HOSTNAME=m1%0ACOREOS_CUSTOM_INSTANCE_ID={UUID}%0A\
                 COREOS_CUSTOM_PROVIDER_ID=proxmox:%2F%2F{UUID}%0ACOREOS_CUSTOM_PRIVATE_IPV4=10.0.0.11%2F24"
            )
        );
        assert_eq!(
            config["systemd"]["units"],
            json!([{"name": "systemd-resolved.service", "enabled": true}])
        );
        let unit = &config["networkd"]["units"][0];
        assert_eq!(unit["name"], "00-eth0.network");
        assert!(
            unit["contents"]
                .as_str()
                .unwrap()
                .contains("MACAddress=BC:24:11:00:00:01\n"),
            "{unit}"
        );
    }

    #[test]
    fn bootstrap_data_claiming_ignition_that_is_not_is_terminal() {
        let req = request(template_spec(), json!({}));
        let bad = BootstrapData {
            format: "ignition".into(),
            value: b"#cloud-config\n".to_vec(),
        };
        match seed(&ctx(&req), &vm(), &bad, UUID, "pve1") {
            Err(PluginError::Terminal(t)) => assert_eq!(t.reason, "InvalidBootstrapData"),
            other => panic!("expected a terminal error, got {other:?}"),
        }
    }

    #[test]
    fn the_iso_is_named_after_the_vm_and_the_machine() {
        let req = request(template_spec(), json!({}));
        assert_eq!(
            iso_name(&ctx(&req), 123),
            "hyperplug-123-7f3a9c2e-1b4d-4e5f-8a6b-0c1d2e3f4a5b.iso"
        );
    }
}
