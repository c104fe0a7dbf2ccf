//! `POST .../migrate`: PVE's early checks in the API call, then a `qmigrate` task that
//! holds the VM's config lock, sets `lock: migrate`, checks the local volumes
//! (QemuMigrate's `scan_local_volumes`) and moves the VM (config, local volumes, a running
//! guest as it is) to the target node. `move_vm` is also what the inspection API's instant
//! move uses (a migration done by someone else, e.g. PVE 9.2's load balancer).

use serde_json::json;

use super::clone::check_cluster_node;
use crate::api::{Call, check_lock, vm_on};
use crate::envelope::{ApiError, ApiResult};
use crate::state::{World, drive_options, is_drive_key};
use crate::tasks::{self, TaskSpec};

/// `POST /nodes/{node}/qemu/{vmid}/migrate`.
pub fn migrate(c: &mut Call) -> ApiResult {
    let sh = c.shared.clone();
    let mut w = sh.lock();
    let node = c.node().to_string();
    let vmid = c.vmid();
    let target = c.p("target").unwrap_or_default().to_string();
    if target == node {
        return Err(ApiError::param("target", "target is local node."));
    }
    check_cluster_node(&w, &target)?;
    let root_only = [
        ("force", c.flag("force")),
        ("migration_type", c.p("migration_type").is_some()),
        ("migration_network", c.p("migration_network").is_some()),
    ];
    if let Some((p, _)) = root_only
        .iter()
        .find(|(_, set)| *set && c.user != "root@pam")
    {
        return Err(ApiError::param(p, "Only root may use this option."));
    }
    let vm = vm_on(&w, &node, vmid)?;
    check_lock(vm, false).map_err(ApiError::die)?;
    let running = vm.run.is_some();
    if running && !c.flag("online") {
        return Err(ApiError::die("can't migrate running VM without --online"));
    }
    storage_availability(&w, vmid, &target).map_err(ApiError::die)?;
    let with_local_disks = c.flag("with-local-disks");
    let (from, to) = (node.clone(), target.clone());
    let mut spec = TaskSpec::new(
        c,
        "qmigrate",
        &vmid.to_string(),
        Box::new(move |w, failure| {
            let res = match failure {
                Some(e) => Err(e),
                None => move_vm(w, vmid, &to, running && !with_local_disks),
            };
            match res {
                Ok(mut log) => {
                    log.push("migration finished successfully (duration 00:00:01)".into());
                    Ok(log)
                }
                Err(e) => {
                    if let Some(vm) = w.vms.get_mut(&vmid)
                        && vm.lock() == Some("migrate")
                    {
                        vm.config.remove("lock");
                    }
                    let last = e.lines().last().unwrap_or_default();
                    let last = last.trim_start_matches("ERROR: ").to_string();
                    Err(format!(
                        "{e}\nERROR: migration aborted (duration 00:00:01): {last}\nmigration aborted"
                    ))
                }
            }
        }),
    );
    spec.begin = Some(Box::new(move |w| {
        let vm = w
            .vms
            .get_mut(&vmid)
            .filter(|vm| vm.node == from)
            .ok_or_else(|| super::missing_vm(&from, vmid))?;
        check_lock(vm, false)?;
        vm.config.insert("lock".into(), "migrate".into());
        Ok(vec![format!(
            "starting migration of VM {vmid} to node '{target}'"
        )])
    }));
    let upid = tasks::start(&sh, &mut w, spec);
    Ok(json!(upid))
}

/// PVE's `check_storage_availability`: every volume's storage exists on the target.
fn storage_availability(w: &World, vmid: u32, target: &str) -> Result<(), String> {
    let Some(vm) = w.vms.get(&vmid) else {
        return Ok(());
    };
    for (_, v) in vm.config.iter().filter(|(k, _)| is_drive_key(k)) {
        let file = drive_options(v).get("file").cloned().unwrap_or_default();
        if let Some((sid, _)) = file.split_once(':')
            && w.storage(target, sid).is_none()
        {
            return Err(format!(
                "storage '{sid}' is not available on node '{target}'"
            ));
        }
    }
    Ok(())
}

/// Moves a VM to `target` now: its config, and the volumes of non-shared storages to the
/// storage of the same ID there (the cloud-init drive is regenerated); a running guest
/// keeps running. Refuses, as QemuMigrate does, local CD-ROM images, local linked clones,
/// and (when `live_local_disks_refused`) attached local disks of a running VM: the error's
/// lines are the task log's warnings and errors, the last one the reason.
pub fn move_vm(
    w: &mut World,
    vmid: u32,
    target: &str,
    live_local_disks_refused: bool,
) -> Result<Vec<String>, String> {
    let vm = w
        .vms
        .get(&vmid)
        .ok_or_else(|| format!("VM {vmid} does not exist"))?;
    let node = vm.node.clone();
    if !w.nodes.contains_key(target) {
        return Err(format!("no such cluster node '{target}'"));
    }
    let mut log = vec![];
    let mut errors = vec![];
    let mut local: Vec<String> = vec![];
    for (_, v) in vm.config.iter().filter(|(k, _)| is_drive_key(k)) {
        let o = drive_options(v);
        let file = o.get("file").cloned().unwrap_or_default();
        let Some((sid, name)) = file.split_once(':') else {
            continue;
        };
        if w.storage(&node, sid).is_none_or(|s| s.shared) {
            continue;
        }
        let cdrom = o.get("media").is_some_and(|m| m == "cdrom");
        if cdrom && !name.contains("cloudinit") {
            errors.push(format!(
                "can't migrate local disk '{file}': local cdrom image"
            ));
        } else if cdrom {
            log.push(format!(
                "found generated disk '{file}' (in current VM config)"
            ));
        } else if live_local_disks_refused {
            errors.push(format!(
                "can't migrate local disk '{file}': can't live migrate attached local disks without with-local-disks option"
            ));
        } else {
            log.push(format!("found local disk '{file}' (attached)"));
        }
        local.push(file);
    }
    if !errors.is_empty() {
        let warnings: Vec<String> = errors.iter().map(|e| format!("WARN: {e}")).collect();
        return Err(format!(
            "{}\nERROR: Problem found while scanning volumes - can't migrate VM - check log",
            warnings.join("\n")
        ));
    }
    if let Some((file, base)) = local.iter().find_map(|f| {
        let (_, name) = f.split_once(':')?;
        let (base, _) = name.split_once('/')?;
        base.starts_with("base-")
            .then(|| (f.clone(), base.to_string()))
    }) {
        return Err(format!(
            "ERROR: Problem found while scanning volumes - can't migrate '{file}' as it's a clone of '{base}'"
        ));
    }
    for file in &local {
        let Some((sid, name)) = file.split_once(':') else {
            continue;
        };
        let volume = w
            .storage_mut(&node, sid)
            .and_then(|s| s.volumes.remove(name));
        if let (Some(v), Some(st)) = (volume, w.storage_mut(target, sid)) {
            st.volumes.insert(name.to_string(), v);
        }
        log.push(format!("volume '{file}' is '{file}' on the target"));
    }
    if let Some(vm) = w.vms.get_mut(&vmid) {
        vm.node = target.to_string();
        if vm.lock() == Some("migrate") {
            vm.config.remove("lock");
        }
    }
    Ok(log)
}
