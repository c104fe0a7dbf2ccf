//! Config writes (`PUT`/`POST .../config`) and VM creation (`POST /nodes/{node}/qemu`).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::api::{Call, check_lock, vm_on};
use crate::envelope::{ApiError, ApiResult};
use crate::params::{format_size, split_indexed};
use crate::state::{Vm, World, drive_options, drive_string, is_drive_key};
use crate::tasks::{self, TaskSpec};

use super::access;
use super::remove_volume;

/// Parameters of config writes that are not config keys.
const NON_CONFIG: &[&str] = &[
    "node",
    "pool",
    "start",
    "unique",
    "archive",
    "bwlimit",
    "live-restore",
    "storage",
    "ha-managed",
    "import-working-storage",
    "vmid",
    "digest",
    "delete",
    "revert",
    "skiplock",
    "force",
    "background_delay",
];

/// Normalizes `tags`: split on `;`, `,` and spaces, lower-cased, sorted, unique.
pub fn normalize_tags(v: &str) -> String {
    let set: BTreeSet<String> = v
        .split([';', ',', ' '])
        .filter(|s| !s.is_empty())
        .map(str::to_lowercase)
        .collect();
    set.into_iter().collect::<Vec<_>>().join(";")
}

fn next_unused(cfg: &BTreeMap<String, String>) -> String {
    (0..)
        .map(|i| format!("unused{i}"))
        .find(|k| !cfg.contains_key(k))
        .unwrap_or_default()
}

/// Allocates `STORAGE:SIZE` / `STORAGE:cloudinit` drive values; others pass through.
fn allocate_drive(w: &mut World, node: &str, vmid: u32, v: &str) -> Result<String, String> {
    let mut opts = drive_options(v);
    let file = opts.get("file").cloned().unwrap_or_default();
    let Some((sid, rest)) = file.split_once(':') else {
        return Ok(v.to_string());
    };
    let is_size = !rest.is_empty() && rest.parse::<f64>().is_ok();
    let is_ci = rest == "cloudinit";
    if !is_size && !is_ci {
        return Ok(v.to_string());
    }
    let st = w
        .storage(node, sid)
        .ok_or_else(|| format!("storage '{sid}' does not exist"))?;
    if !st.has_content("images") {
        return Err(format!("storage '{sid}' does not support vm images"));
    }
    if is_ci {
        let name = if st.kind.is_file_based() {
            format!("{vmid}/vm-{vmid}-cloudinit.qcow2")
        } else {
            format!("vm-{vmid}-cloudinit")
        };
        w.ensure_volume(node, &format!("{sid}:{name}"), vmid, 4 << 20);
        opts.insert("file".into(), format!("{sid}:{name}"));
        opts.insert("media".into(), "cdrom".into());
        return Ok(drive_string(&opts));
    }
    let gib: f64 = rest.parse().unwrap_or(0.0);
    let size = (gib * (1u64 << 30) as f64) as u64;
    let name = w.next_disk_name(node, sid, vmid, &BTreeSet::new());
    w.ensure_volume(node, &format!("{sid}:{name}"), vmid, size);
    opts.insert("file".into(), format!("{sid}:{name}"));
    opts.insert("size".into(), format_size(size));
    Ok(drive_string(&opts))
}

/// Applies a config write (sets and `delete`) to VM `vmid`.
fn apply_config(w: &mut World, c: &Call, vmid: u32) -> Result<(), String> {
    let node = c.node().to_string();
    let mut cfg = w.vms[&vmid].config.clone();
    if let Some(del) = c.p("delete") {
        for key in del.split([',', ';', ' ']).filter(|s| !s.is_empty()) {
            let Some(old) = cfg.remove(key) else { continue };
            if is_drive_key(key) {
                let o = drive_options(&old);
                let file = o.get("file").cloned().unwrap_or_default();
                if o.get("media").is_some_and(|m| m == "cdrom") || !file.contains(':') {
                    if file.contains("cloudinit") {
                        remove_volume(w, &node, &file);
                    }
                } else {
                    let u = next_unused(&cfg);
                    cfg.insert(u, file);
                }
            } else if matches!(split_indexed(key), Some(("unused", _))) {
                remove_volume(w, &node, &old);
            }
        }
    }
    for (k, v) in &c.params {
        if NON_CONFIG.contains(&k.as_str()) {
            continue;
        }
        let value = match split_indexed(k) {
            Some(("net", _)) => w.normalize_net(v, false),
            _ if k == "tags" => normalize_tags(v),
            _ if is_drive_key(k) => {
                let nv = allocate_drive(w, &node, vmid, v)?;
                if let Some(old) = cfg.get(k) {
                    let o = drive_options(old);
                    let newfile = drive_options(&nv).get("file").cloned();
                    if o.get("media").is_none_or(|m| m != "cdrom")
                        && o.get("file") != newfile.as_ref()
                        && let Some(f) = o.get("file")
                    {
                        let u = next_unused(&cfg);
                        cfg.insert(u, f.clone());
                    }
                }
                nv
            }
            _ => v.clone(),
        };
        cfg.insert(k.clone(), value);
    }
    if let Some(vm) = w.vms.get_mut(&vmid) {
        vm.config = cfg;
    }
    Ok(())
}

/// The keys a config write deletes.
fn deletes<'c>(c: &'c Call) -> Vec<&'c str> {
    c.p("delete")
        .map(|d| d.split([',', ';', ' ']).filter(|s| !s.is_empty()).collect())
        .unwrap_or_default()
}

/// The config keys a write or creation sets, with their values.
fn settings<'c>(c: &'c Call) -> Vec<(&'c str, &'c str)> {
    c.params
        .iter()
        .filter(|(k, _)| !NON_CONFIG.contains(&k.as_str()))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// The permission checks of a config write, in qemu-server's order: the keys deleted,
/// the keys set, the storages and volumes of drives, the bridges, then each drive
/// deleted or replaced and each drive set.
fn check_write_perms(c: &Call, w: &World, vm: &Vm) -> ApiResult<()> {
    let (vmid, node) = (vm.vmid, vm.node.as_str());
    let deletes = deletes(c);
    let sets = settings(c);
    access::check_keys(c, w, vmid, None, deletes.iter().copied())?;
    access::check_keys(c, w, vmid, None, sets.iter().map(|(k, _)| *k))?;
    access::check_storage(c, w, node, vmid, sets.iter().copied())?;
    access::check_bridges(c, w, sets.iter().copied())?;
    for key in &deletes {
        let Some(old) = vm.config.get(*key) else {
            continue;
        };
        if is_drive_key(key) {
            access::check_drive(c, w, vmid, old)?;
        } else if matches!(split_indexed(key), Some(("net", _))) {
            access::check_bridges(c, w, [(*key, old.as_str())].into_iter())?;
        }
    }
    for (key, value) in sets.iter().filter(|(k, _)| is_drive_key(k)) {
        if let Some(old) = vm.config.get(*key) {
            access::check_drive(c, w, vmid, old)?;
        }
        access::check_drive(c, w, vmid, value)?;
    }
    Ok(())
}

/// Checks shared by config writes: VM, permissions, digest, lock, lock timeout (all
/// synchronous).
fn check_config_write(w: &mut World, c: &Call) -> ApiResult<u32> {
    let vmid = c.vmid();
    let vm = vm_on(w, c.node(), vmid)?;
    check_write_perms(c, w, vm)?;
    if let Some(d) = c.p("digest")
        && d != vm.digest()
    {
        return Err(ApiError::die(
            "checksum missmatch (file change by other user?)",
        ));
    }
    check_lock(vm, c.flag("skiplock")).map_err(ApiError::die)?;
    if let Some(del) = c.p("delete") {
        for key in del.split([',', ';', ' ']).filter(|s| !s.is_empty()) {
            if c.params.contains_key(key) {
                return Err(ApiError::die(format!(
                    "you can't use '-{key}' and -delete {key}' at the same time"
                )));
            }
        }
    }
    Ok(vmid)
}

/// `PUT .../config`: synchronous update, returns null.
pub fn put_config(c: &mut Call) -> ApiResult {
    let sh = c.shared.clone();
    let mut w = sh.lock();
    let vmid = check_config_write(&mut w, c)?;
    apply_config(&mut w, c, vmid).map_err(ApiError::die)?;
    Ok(Value::Null)
}

/// `POST .../config`: the same checks synchronously, then a `qmconfig` task.
pub fn post_config(c: &mut Call) -> ApiResult {
    let sh = c.shared.clone();
    let mut w = sh.lock();
    let vmid = check_config_write(&mut w, c)?;
    apply_config(&mut w, c, vmid).map_err(ApiError::die)?;
    let spec = TaskSpec::new(
        c,
        "qmconfig",
        &vmid.to_string(),
        Box::new(|_, inj| inj.map_or(Ok(vec![]), Err)),
    );
    let upid = tasks::start(&sh, &mut w, spec);
    Ok(json!(upid))
}

/// `POST /nodes/{node}/qemu`: create a VM from parameters (no `archive` restore). The
/// config exists at once with `lock: create` until the `qmcreate` task ends.
pub fn create(c: &mut Call) -> ApiResult {
    let sh = c.shared.clone();
    let mut w = sh.lock();
    let node = c.node().to_string();
    let vmid = c.vmid();
    if let Some(vm) = w.vms.get(&vmid) {
        return Err(ApiError::die(format!(
            "unable to create VM {vmid} - VM {vmid} already exists on node '{}'",
            vm.node
        )));
    }
    if c.p("archive").is_some() {
        return Err(ApiError::die("restoring from an archive is not simulated"));
    }
    let pool = c.p("pool");
    if let Some(p) = pool
        && !w.pools.contains_key(p)
    {
        return Err(crate::perms::denied(&format!("pool '{p}' does not exist")));
    }
    if let Some(s) = c.p("storage") {
        c.require(&w, &format!("/storage/{s}"), &["Datastore.AllocateSpace"])?;
    }
    access::check_vm_perm(c, &w, vmid, pool, &["VM.Allocate"], false)?;
    let sets = settings(c);
    access::check_keys(c, &w, vmid, pool, sets.iter().map(|(k, _)| *k))?;
    access::check_storage(c, &w, &node, vmid, sets.iter().copied())?;
    access::check_bridges(c, &w, sets.iter().copied())?;
    w.vms.insert(
        vmid,
        Vm {
            vmid,
            node: node.clone(),
            config: BTreeMap::new(),
            run: None,
        },
    );
    if let Err(e) = apply_config(&mut w, c, vmid) {
        w.vms.remove(&vmid);
        return Err(ApiError::die(e));
    }
    let mut vm = w.vms.remove(&vmid).expect("just inserted");
    w.fill_generated(&mut vm);
    vm.config.insert("lock".into(), "create".into());
    w.vms.insert(vmid, vm);
    let pool = c.p("pool").map(String::from);
    let start = c.flag("start");
    let delays = sh.config.guest_delays();
    let spec = TaskSpec::new(
        c,
        "qmcreate",
        &vmid.to_string(),
        Box::new(move |w, inj| {
            if let Some(e) = inj {
                w.vms.remove(&vmid);
                return Err(e);
            }
            if let Some(vm) = w.vms.get_mut(&vmid) {
                vm.config.remove("lock");
            }
            if let Some(p) = pool {
                w.pools.entry(p).or_default().insert(vmid);
            }
            if start {
                w.boot_vm(vmid, delays);
            }
            Ok(vec![])
        }),
    );
    let upid = tasks::start(&sh, &mut w, spec);
    Ok(json!(upid))
}
