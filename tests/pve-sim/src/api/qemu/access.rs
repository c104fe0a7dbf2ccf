//! The permission checks qemu-server makes inside its handlers, beyond the schema's
//! check expression: per config key (`check_vm_modify_config_perm`), per drive
//! (`check_drive_perms`), storages of new disks and clones, volumes a drive names
//! (pve-storage's `check_volume_access`), and bridges (`check_vnet_access`: `SDN.Use` on
//! `/sdn/zones/localnetwork/<bridge>`, or on `.../<bridge>/<tag>` for a VLAN; the
//! simulator has no SDN zones of its own).

use crate::api::Call;
use crate::envelope::{ApiError, ApiResult};
use crate::params::{parse_property_string, split_indexed};
use crate::perms::{config_key_privs, drive_privs};
use crate::state::{World, drive_options, is_drive_key, net_format};

/// `root@pam` and principals without ACLs pass every check here.
fn free(c: &Call) -> bool {
    c.shared.access.unrestricted(&c.user)
}

/// PVE's `check_vm_perm`: the privileges on the pool (when one is given) or else on the
/// VM; `any`: one of them suffices.
pub(super) fn check_vm_perm(
    c: &Call,
    w: &World,
    vmid: u32,
    pool: Option<&str>,
    privs: &[&str],
    any: bool,
) -> ApiResult<()> {
    let check = |path: &str| {
        if any {
            c.require_any(w, path, privs)
        } else {
            c.require(w, path, privs)
        }
    };
    if let Some(p) = pool
        && check(&format!("/pool/{p}")).is_ok()
    {
        return Ok(());
    }
    check(&format!("/vms/{vmid}"))
}

/// The privileges of non-drive config keys, in order (`keys` as given).
pub(super) fn check_keys<'a>(
    c: &Call,
    w: &World,
    vmid: u32,
    pool: Option<&str>,
    keys: impl Iterator<Item = &'a str>,
) -> ApiResult<()> {
    if free(c) {
        return Ok(());
    }
    for key in keys {
        if is_drive_key(key) || key == "cdrom" {
            continue;
        }
        if matches!(
            split_indexed(key),
            Some(("usb" | "hostpci" | "virtiofs", _))
        ) {
            // only root (or mapped devices, which the simulator does not have)
            return Err(ApiError::die(format!("only root can set '{key}' config")));
        }
        match config_key_privs(key) {
            Some(privs) => {
                let any = privs.len() > 1;
                check_vm_perm(c, w, vmid, pool, privs, any)?;
                if key == "startup" {
                    c.require(w, "/", &["Sys.Modify"])?;
                }
            }
            None => {
                return Err(ApiError::die(format!("only root can set '{key}' config")));
            }
        }
    }
    Ok(())
}

/// A drive's own privileges (its value tells disk, CD-ROM or cloud-init drive).
pub(super) fn check_drive(c: &Call, w: &World, vmid: u32, value: &str) -> ApiResult<()> {
    if free(c) {
        return Ok(());
    }
    let privs = drive_privs(value);
    c.require(w, &format!("/vms/{vmid}"), privs)
}

/// Whether a drive value asks for a new disk (`STORAGE:SIZE`).
fn new_disk(file: &str) -> Option<&str> {
    let (sid, size) = file.split_once(':')?;
    (!size.is_empty() && size.parse::<f64>().is_ok()).then_some(sid)
}

/// pve-storage's `check_volume_access` for an existing volume `volid` (used by `vmid`).
pub(crate) fn check_volume(
    c: &Call,
    w: &World,
    node: &str,
    vmid: Option<u32>,
    volid: &str,
) -> ApiResult<()> {
    if free(c) {
        return Ok(());
    }
    let Some((sid, name)) = volid.split_once(':') else {
        return Err(ApiError::die(
            "Only root can pass arbitrary filesystem paths.",
        ));
    };
    let path = format!("/storage/{sid}");
    if c.can(w, &path, "Datastore.Allocate") {
        return Ok(());
    }
    let vol = w.storage(node, sid).and_then(|s| s.volumes.get(name));
    let content = vol
        .map(|v| v.content.as_str())
        .unwrap_or(if name.starts_with("iso/") {
            "iso"
        } else {
            "images"
        });
    let owner = vol.and_then(|v| v.vmid);
    match (content, owner) {
        ("iso" | "vztmpl" | "import", _) => {
            c.require_any(w, &path, &["Datastore.AllocateSpace", "Datastore.Audit"])
        }
        (_, Some(o)) if Some(o) == vmid => Ok(()),
        ("images" | "rootdir", Some(o)) => {
            c.require(w, &path, &["Datastore.Audit"])?;
            c.require(w, &format!("/vms/{o}"), &["VM.Config.Disk"])
        }
        _ => Err(ApiError::die(format!(
            "missing privileges to access {volid}"
        ))),
    }
}

/// qemu-server's `check_storage_access` for the drives of a config write or creation.
pub(super) fn check_storage<'a>(
    c: &Call,
    w: &World,
    node: &str,
    vmid: u32,
    settings: impl Iterator<Item = (&'a str, &'a str)>,
) -> ApiResult<()> {
    if free(c) {
        return Ok(());
    }
    for (_, value) in settings.filter(|(k, _)| is_drive_key(k)) {
        let o = drive_options(value);
        let file = o.get("file").map(String::as_str).unwrap_or("");
        let cdrom = o.get("media").is_some_and(|m| m == "cdrom");
        let volname = file.split_once(':').map(|(_, n)| n);
        if file.is_empty() || file == "none" || file == "cloudinit" || volname == Some("cloudinit")
        {
            continue;
        }
        if cdrom && file == "cdrom" {
            c.require(w, "/", &["Sys.Console"])?;
        } else if !cdrom && let Some(sid) = new_disk(file) {
            c.require(w, &format!("/storage/{sid}"), &["Datastore.AllocateSpace"])?;
        } else {
            check_volume(c, w, node, Some(vmid), file)?;
        }
    }
    Ok(())
}

/// `Datastore.AllocateSpace` on the storage of every disk a clone copies (`storage` when
/// given, else the disk's own) and `Sys.Console` for a physical CD-ROM: qemu-server's
/// `check_storage_access_clone`.
pub(super) fn check_clone_storage(
    c: &Call,
    w: &World,
    config: &std::collections::BTreeMap<String, String>,
    storage: Option<&str>,
) -> ApiResult<()> {
    if free(c) {
        return Ok(());
    }
    for (_, value) in config.iter().filter(|(k, _)| is_drive_key(k)) {
        let o = drive_options(value);
        let file = o.get("file").map(String::as_str).unwrap_or("");
        if file.is_empty() || file == "none" {
            continue;
        }
        if o.get("media").is_some_and(|m| m == "cdrom") {
            if file == "cdrom" {
                c.require(w, "/", &["Sys.Console"])?;
            }
            continue;
        }
        let Some((sid, _)) = file.split_once(':') else {
            continue;
        };
        let sid = storage.unwrap_or(sid);
        c.require(w, &format!("/storage/{sid}"), &["Datastore.AllocateSpace"])?;
    }
    Ok(())
}

/// `SDN.Use` on the bridge (or the VLANs) of every `netN` among `settings`.
pub(super) fn check_bridges<'a>(
    c: &Call,
    w: &World,
    settings: impl Iterator<Item = (&'a str, &'a str)>,
) -> ApiResult<()> {
    if free(c) {
        return Ok(());
    }
    for (_, value) in settings.filter(|(k, _)| matches!(split_indexed(k), Some(("net", _)))) {
        let Ok(o) = parse_property_string(net_format(), value) else {
            continue;
        };
        let Some(bridge) = o.get("bridge") else {
            continue;
        };
        let base = format!("/sdn/zones/localnetwork/{bridge}");
        let tag = o.get("tag").filter(|t| !t.is_empty());
        if let Some(t) = tag {
            c.require(w, &format!("{base}/{t}"), &["SDN.Use"])?;
        }
        let trunks = o.get("trunks").filter(|t| !t.is_empty());
        if let Some(trunks) = trunks {
            for t in trunk_tags(trunks) {
                c.require(w, &format!("{base}/{t}"), &["SDN.Use"])?;
            }
        }
        if tag.is_none() && trunks.is_none() {
            c.require(w, &base, &["SDN.Use"])?;
        }
    }
    Ok(())
}

/// The VLAN tags of a `trunks` value (`10;20-22`), sorted.
fn trunk_tags(trunks: &str) -> Vec<u32> {
    let mut tags = std::collections::BTreeSet::new();
    for part in trunks.split(';').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    tags.extend(a..=b.min(4094));
                }
            }
            None => {
                if let Ok(t) = part.parse() {
                    tags.insert(t);
                }
            }
        }
    }
    tags.into_iter().collect()
}
