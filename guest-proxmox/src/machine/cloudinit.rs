//! The NoCloud ISO: build, upload, attach, eject, delete.

use guest_kit::machine::MachineStatus;
use guest_kit::types::PluginError;
use guest_kit::{log, terminal, transient};
use serde_json::Value;

use super::context::Ctx;
use super::nics::mac_of;
use super::ownership::uid_tag;
use super::properties::{str_of, u64_of, uuid_of};
use super::state::{State, Step};
use super::tasks::{poll, task_failed, upid_of};
use super::{BOOTSTRAP_MS, RETRY_MS, SHORT_MS};
use crate::api::{Pve, percent_encode};

/// The ISO's storage: the spec's, else the node's first (by name) active file-based
/// storage with `iso` content.
pub(super) fn iso_storage(cx: &Ctx, node: &str) -> Result<String, PluginError> {
    if let Some(s) = cx
        .spec
        .cloud_init
        .as_ref()
        .and_then(|c| c.iso_storage.clone())
    {
        return Ok(s);
    }
    let list = cx
        .pve
        .get(&format!(
            "/nodes/{}/storage?content=iso",
            percent_encode(node)
        ))
        .map_err(|e| e.classify("listing ISO storages"))?;
    let mut names: Vec<String> = list
        .as_array()
        .into_iter()
        .flatten()
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

/// Builds the NoCloud seed for this machine from the VM's config (MACs, UUID).
pub(super) fn seed(
    cx: &Ctx,
    config: &Value,
    bootstrap: Vec<u8>,
    uuid: &str,
) -> guest_nocloud::Seed {
    let mut interfaces = vec![];
    for (i, nic) in cx.nics.iter().enumerate() {
        let mac = str_of(config, &nic.device)
            .and_then(|n| mac_of(&n))
            .unwrap_or_default();
        let mut iface = guest_nocloud::Interface {
            name: format!("eth{i}"),
            mac,
            dhcp4: nic.dhcp4,
            dhcp6: nic.dhcp6,
            mtu: nic.dev.as_ref().and_then(|d| d.mtu),
            ..Default::default()
        };
        for v6 in [false, true] {
            if !(if v6 { nic.v6 } else { nic.v4 }) {
                continue;
            }
            if let Some(a) = cx.allocated(&nic.device, v6) {
                iface.addresses.push(format!("{}/{}", a.address, a.prefix));
                // The default route only on the first NIC with a gateway.
                let gw = a.gateway.clone().filter(|g| !g.is_empty());
                let first = !interfaces.iter().any(|x: &guest_nocloud::Interface| {
                    if v6 {
                        x.gateway6.is_some()
                    } else {
                        x.gateway4.is_some()
                    }
                });
                if first {
                    if v6 {
                        iface.gateway6 = gw;
                    } else {
                        iface.gateway4 = gw;
                        iface.metric = cx.cluster.ipv4_config.as_ref().and_then(|c| c.metric);
                    }
                }
            }
        }
        interfaces.push(iface);
    }
    guest_nocloud::Seed {
        user_data: bootstrap,
        meta_data: guest_nocloud::MetaData {
            instance_id: cx.uid().to_string(),
            hostname: cx.req.machine.name.clone(),
            provider_id: Some(format!("proxmox://{uuid}")),
        },
        network: Some(guest_nocloud::NetworkConfig {
            interfaces,
            dns_servers: cx.cluster.dns_servers.clone(),
        }),
    }
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
    let config = cx.owned_config(st, "building the NoCloud ISO")?;
    let node = st.node.clone().unwrap_or_default();
    let uuid = uuid_of(&config)
        .ok_or_else(|| transient("the VM has no smbios1 uuid yet", Some(SHORT_MS)))?;
    st.uuid = Some(uuid.clone());
    let storage = iso_storage(cx, &node)?;
    let name = iso_name(cx, st.vmid.unwrap_or_default());
    let volid = format!("{storage}:iso/{name}");
    let image = seed(cx, &config, bootstrap.value.clone(), &uuid)
        .iso()
        .map_err(|e| terminal("CloudInitISO", e.to_string()))?;
    // An ISO left by an earlier attempt (lost state) is replaced: its content may differ.
    let content = cx
        .pve
        .get(&format!(
            "/nodes/{}/storage/{}/content?content=iso",
            percent_encode(&node),
            percent_encode(&storage)
        ))
        .map_err(|e| e.classify("listing ISO images"))?;
    let exists = content
        .as_array()
        .into_iter()
        .flatten()
        .any(|v| str_of(v, "volid").as_deref() == Some(volid.as_str()));
    if exists {
        let attached = config
            .as_object()
            .into_iter()
            .flatten()
            .any(|(_, v)| v.as_str().is_some_and(|s| s.starts_with(&volid)));
        if attached {
            st.iso = Some(volid);
            st.iso_node = Some(node);
            st.step = Step::Attaching;
            return Ok(None);
        }
        // Its removal is a task: upload once it is gone (a later call sees it gone).
        delete_volume(&cx.pve, &node, &volid)?;
        return Ok(Some(cx.status(
            st,
            "UploadingCloudInit",
            format!("removing an earlier {volid} before uploading this one"),
            Some(SHORT_MS),
        )));
    }
    st.iso = Some(volid);
    st.iso_node = Some(node.clone());
    let v = cx
        .pve
        .upload(&node, &storage, "iso", &name, &image)
        .map_err(|e| e.classify(&format!("uploading the NoCloud ISO to {storage}")))?;
    match upid_of(v) {
        Some(upid) => st.upid = Some(upid),
        None => st.step = Step::Attaching,
    }
    Ok(None)
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

pub(super) fn attaching(cx: &Ctx, st: &mut State) -> Result<(), PluginError> {
    let config = cx.owned_config(st, "attaching the NoCloud ISO")?;
    // Migrated since the upload: the ISO is on the old node's storage; upload it again.
    if let (Some(volid), Some(old)) = (st.iso.clone(), st.iso_node.clone())
        && st.node.as_ref() != Some(&old)
    {
        delete_volume(&cx.pve, &old, &volid)?;
        st.iso = None;
        st.iso_node = None;
        st.step = Step::UploadingCloudInit;
        return Ok(());
    }
    let slot = st.cd_slot.clone().unwrap_or_else(|| "ide2".into());
    let volid = st.iso.clone().unwrap_or_default();
    let mut form = vec![(slot.as_str(), format!("{volid},media=cdrom"))];
    if let Some(d) = str_of(&config, "digest") {
        form.push(("digest", d));
    }
    cx.pve
        .put(&format!("{}/config", cx.config_path(st)), &form)
        .map_err(|e| e.classify("attaching the NoCloud ISO"))?;
    st.step = Step::PoweringOn;
    Ok(())
}

/// Booted: eject the ISO (media change works on a running VM) and delete it.
pub(super) fn ejecting(cx: &Ctx, st: &mut State) -> Result<Option<MachineStatus>, PluginError> {
    if let Some(s) = following_iso_removal(cx, st, "WaitingForGuestAgent")? {
        return Ok(Some(s));
    }
    if let Some(volid) = st.iso.clone() {
        let config = cx.owned_config(st, "ejecting the NoCloud ISO")?;
        let node = st
            .iso_node
            .clone()
            .or_else(|| st.node.clone())
            .unwrap_or_default();
        let slot = st.cd_slot.clone().unwrap_or_else(|| "ide2".into());
        if str_of(&config, &slot).is_some_and(|v| v.starts_with(&volid)) {
            cx.pve
                .put(
                    &format!("{}/config", cx.config_path(st)),
                    &[(slot.as_str(), "none,media=cdrom".to_string())],
                )
                .map_err(|e| e.classify("ejecting the NoCloud ISO"))?;
        }
        if let Some(upid) = delete_volume(&cx.pve, &node, &volid)? {
            st.upid = Some(upid);
            return Ok(Some(cx.status(
                st,
                "WaitingForGuestAgent",
                "removing the NoCloud ISO",
                Some(SHORT_MS),
            )));
        }
        st.iso = None;
        st.iso_node = None;
    }
    st.step = Step::Ready;
    Ok(None)
}

#[cfg(test)]
mod tests {
    use guest_nocloud::Interface;
    use serde_json::json;

    use super::*;
    use guest_kit::testing::allocated;

    use crate::machine::testing::{ctx, request, template_spec};

    fn two_nics() -> Value {
        let mut spec = template_spec();
        spec["network"] = json!({
            "default": {"bridge": "vmbr0", "mtu": 1450},
            "additionalDevices": [{"name": "net1", "bridge": "vmbr1"}],
        });
        spec
    }

    fn cluster() -> Value {
        json!({
            "ipv4Config": {"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24, "gateway": "10.0.0.1", "metric": 100},
            "dnsServers": ["10.0.0.2"],
        })
    }

    fn config() -> Value {
        json!({
            "net0": "virtio=BC:24:11:00:00:01,bridge=vmbr0",
            "net1": "virtio=BC:24:11:00:00:02,bridge=vmbr1",
        })
    }

    fn interfaces(seed: &guest_nocloud::Seed) -> &[Interface] {
        &seed.network.as_ref().expect("a network-config").interfaces
    }

    #[test]
    fn static_addresses_go_to_their_nics_matched_by_mac_with_one_default_route() {
        let mut req = request(two_nics(), cluster());
        req.addresses = vec![
            allocated("net0", "10.0.0.11", 24, Some("10.0.0.1")),
            allocated("net1", "10.0.0.12", 24, Some("10.0.0.1")),
        ];
        let seed = seed(&ctx(&req), &config(), b"#cloud-config\n".to_vec(), "u-1");
        let nics = interfaces(&seed);
        assert_eq!(nics.len(), 2);
        assert_eq!(
            (nics[0].name.as_str(), nics[0].mac.as_str()),
            ("eth0", "BC:24:11:00:00:01")
        );
        assert_eq!(nics[0].addresses, ["10.0.0.11/24"]);
        assert_eq!(nics[0].gateway4.as_deref(), Some("10.0.0.1"));
        assert_eq!(nics[0].metric, Some(100));
        assert_eq!(nics[0].mtu, Some(1450));
        assert_eq!(
            (nics[1].name.as_str(), nics[1].mac.as_str()),
            ("eth1", "BC:24:11:00:00:02")
        );
        assert_eq!(nics[1].addresses, ["10.0.0.12/24"]);
        assert_eq!(nics[1].gateway4, None);
        assert!(!nics[0].dhcp4 && !nics[1].dhcp4);
        assert_eq!(seed.network.as_ref().unwrap().dns_servers, ["10.0.0.2"]);
    }

    #[test]
    fn without_a_pool_nics_take_dhcp_and_no_addresses() {
        let req = request(two_nics(), json!({}));
        let seed = seed(&ctx(&req), &config(), vec![], "u-1");
        for nic in interfaces(&seed) {
            assert!(nic.dhcp4, "{nic:?}");
            assert!(nic.addresses.is_empty(), "{nic:?}");
            assert_eq!(nic.gateway4, None);
        }
    }

    #[test]
    fn meta_data_names_the_machine_and_its_provider_id() {
        let req = request(template_spec(), json!({}));
        let seed = seed(&ctx(&req), &json!({}), b"data".to_vec(), "5c1a8a5e");
        assert_eq!(seed.user_data, b"data");
        assert_eq!(seed.meta_data.instance_id, req.machine.uid);
        assert_eq!(seed.meta_data.hostname, "m1");
        assert_eq!(
            seed.meta_data.provider_id.as_deref(),
            Some("proxmox://5c1a8a5e")
        );
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
