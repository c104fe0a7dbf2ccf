//! `POST .../clone`, as qemu-server (7.2+) does it: the early checks in the API call, then
//! a `qmclone` worker that takes the source's config lock (shared; exclusive when the
//! source runs) and the target's, both waiting 1 s (`clone_lock_wait_ms`), checks again,
//! and writes the temporary config `lock: clone` on the source's node. The full config
//! (still `lock: clone`) is written once the first disk is cloned, the lock removed at
//! the end, when the config moves to the target node and the locks are released.
//!
//! So two clones racing for one `newid` can both be accepted; the loser fails inside its
//! task ("unable to create VM N: config file already exists", or a lock timeout on the
//! target's lock while the winner still clones). A config write or start on the new VM
//! during the clone waits for its lock, then applies.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use crate::api::{Call, check_lock, vm_on};
use crate::envelope::{ApiError, ApiResult};
use crate::faults::TaskFault;
use crate::locks::LockMode;
use crate::params::{parse_bool, parse_size, split_indexed};
use crate::state::{Vm, World, drive_options, drive_string, is_drive_key};
use crate::tasks::{self, TaskSpec};

/// PVE's `check_node_exists`.
pub(crate) fn check_cluster_node(w: &World, node: &str) -> ApiResult<()> {
    if w.nodes.contains_key(node) {
        Ok(())
    } else {
        Err(ApiError::die(format!("no such cluster node '{node}'")))
    }
}

/// Whether every volume of the VM's drives (CD-ROM images included) is on shared
/// storage: only then may it be cloned to another node (PVE's `check_storage_access_clone`).
pub(crate) fn on_shared_storage(w: &World, vm: &Vm) -> bool {
    vm.config
        .iter()
        .filter(|(k, _)| is_drive_key(k))
        .filter_map(|(_, v)| drive_options(v).get("file").cloned())
        .filter(|f| f != "none" && f != "cdrom")
        .all(|f| {
            f.split_once(':')
                .and_then(|(sid, _)| w.storage(&vm.node, sid))
                .is_some_and(|s| s.shared)
        })
}

/// What a clone will write: the config and the volumes to create.
struct Plan {
    config: BTreeMap<String, String>,
    volumes: Vec<(String, u64)>,
    log: Vec<String>,
    disks: usize,
}

/// The early checks of the API call, in PVE's order, and the new config.
fn plan(w: &mut World, c: &Call, src: &Vm, newid: u32, target: &str) -> ApiResult<Plan> {
    let node = src.node.clone();
    let other_node = target != node;
    if let Some(p) = c.p("pool")
        && !w.pools.contains_key(p)
    {
        return Err(crate::perms::denied(&format!("pool '{p}' does not exist")));
    }
    if other_node {
        check_cluster_node(w, target)?;
    }
    if let Some(s) = c.p("storage") {
        let Some(st) = w.storage(&node, s) else {
            return Err(ApiError::die(format!("storage '{s}' does not exist")));
        };
        if !st.has_content("images") {
            return Err(ApiError::param(
                "storage",
                format!("storage '{s}' does not support vm images"),
            ));
        }
        if other_node {
            if w.storage(target, s).is_none() {
                return Err(ApiError::die(format!(
                    "storage '{s}' is not available on node '{target}'"
                )));
            }
            if !st.shared {
                return Err(ApiError::die(format!(
                    "can't clone to non-shared storage '{s}'"
                )));
            }
        }
    }
    check_lock(src, false).map_err(ApiError::die)?;
    let full = c
        .p("full")
        .and_then(parse_bool)
        .unwrap_or(!src.is_template());
    for p in ["storage", "format"] {
        if c.p(p).is_some() && !full {
            return Err(ApiError::die(format!(
                "parameter '{p}' not allowed for linked clones"
            )));
        }
    }
    super::access::check_clone_storage(c, w, &src.config, c.p("storage"))?;
    super::access::check_bridges(
        c,
        w,
        src.config.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    )?;
    if other_node && !on_shared_storage(w, src) {
        return Err(ApiError::die(format!(
            "can't clone VM to node '{target}' (VM uses local storage)"
        )));
    }
    if w.vms.contains_key(&newid) {
        return Err(ApiError::die(already_exists(newid)));
    }
    if !full
        && !src.is_template()
        && let Some((k, volid, _)) = src.disks().first()
    {
        return Err(ApiError::die(format!(
            "Linked clone feature is not supported for '{volid}' ({k})"
        )));
    }
    // the new config
    let mut cfg = src.config.clone();
    cfg.retain(|k, _| !matches!(split_indexed(k), Some(("unused", _))));
    cfg.remove("template");
    cfg.insert(
        "name".into(),
        c.p("name")
            .map(String::from)
            .unwrap_or_else(|| format!("Copy-of-VM-{}", src.name())),
    );
    if let Some(d) = c.p("description") {
        cfg.insert("description".into(), d.to_string());
    }
    let nets: Vec<String> = cfg
        .keys()
        .filter(|k| matches!(split_indexed(k), Some(("net", _))))
        .cloned()
        .collect();
    for k in nets {
        let v = cfg[&k].clone();
        cfg.insert(k, w.normalize_net(&v, true));
    }
    let uuid = w.uuid();
    let mut smbios = vec![format!("uuid={uuid}")];
    smbios.extend(
        cfg.get("smbios1")
            .into_iter()
            .flat_map(|s| s.split(','))
            .filter(|p| !p.starts_with("uuid=") && !p.is_empty())
            .map(String::from),
    );
    cfg.insert("smbios1".into(), smbios.join(","));
    if cfg.contains_key("vmgenid") {
        let genid = w.uuid();
        cfg.insert("vmgenid".into(), genid);
    }
    let mut volumes: Vec<(String, u64)> = vec![];
    let mut log = vec![];
    let mut taken = BTreeSet::new();
    let mut disks = 0;
    for (k, v) in src.config.iter().filter(|(k, _)| is_drive_key(k)) {
        let mut o = drive_options(v);
        let file = o.get("file").cloned().unwrap_or_default();
        let Some((sid, name)) = file.split_once(':') else {
            continue;
        };
        if o.get("media").is_some_and(|m| m == "cdrom") {
            if name.contains("cloudinit") {
                let tsid = c.p("storage").unwrap_or(sid);
                let file_based = w
                    .storage(target, tsid)
                    .is_some_and(|s| s.kind.is_file_based());
                let nn = if file_based {
                    format!("{newid}/vm-{newid}-cloudinit.qcow2")
                } else {
                    format!("vm-{newid}-cloudinit")
                };
                o.insert("file".into(), format!("{tsid}:{nn}"));
                volumes.push((format!("{tsid}:{nn}"), 4 << 20));
                cfg.insert(k.clone(), drive_string(&o));
            }
            continue;
        }
        disks += 1;
        let size = o.get("size").and_then(|s| parse_size(s)).unwrap_or(0);
        let newvol = if full {
            let tsid = c.p("storage").unwrap_or(sid).to_string();
            let nn = w.next_disk_name(target, &tsid, newid, &taken);
            taken.insert(nn.clone());
            log.push(format!("create full clone of drive {k} ({file})"));
            format!("{tsid}:{nn}")
        } else {
            let base = name.rsplit('/').next().unwrap_or(name);
            let nn = w.next_disk_name(target, sid, newid, &taken);
            taken.insert(nn.clone());
            log.push(format!("create linked clone of drive {k} ({file})"));
            format!("{sid}:{base}/{nn}")
        };
        o.insert("file".into(), newvol.clone());
        volumes.push((newvol, size));
        cfg.insert(k.clone(), drive_string(&o));
    }
    Ok(Plan {
        config: cfg,
        volumes,
        log,
        disks,
    })
}

fn already_exists(newid: u32) -> String {
    format!("unable to create VM {newid}: config file already exists")
}

/// The VM another client made with `newid` (fault `vmid_race`): it stays, stopped.
fn competitor(w: &mut World, node: &str, newid: u32) {
    let mut vm = Vm {
        vmid: newid,
        node: node.to_string(),
        config: [
            ("name", format!("vmid-race-{newid}")),
            ("memory", "512".to_string()),
            ("cores", "1".to_string()),
            (
                "description",
                "created by a competing client (pve-sim fault vmid_race)".to_string(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
        run: None,
    };
    w.fill_generated(&mut vm);
    w.vms.insert(newid, vm);
}

/// `POST .../clone`.
pub fn clone(c: &mut Call) -> ApiResult {
    let sh = c.shared.clone();
    let mut w = sh.lock();
    let node = c.node().to_string();
    let vmid = c.vmid();
    let newid: u32 = c.p("newid").and_then(|v| v.parse().ok()).unwrap_or(0);
    let src = vm_on(&w, &node, vmid)?.clone();
    let target = c.p("target").unwrap_or(&node).to_string();
    let Plan {
        config,
        volumes,
        log,
        disks,
    } = plan(&mut w, c, &src, newid, &target)?;
    if c.fault == Some(TaskFault::VmidRace) {
        c.fault = None;
        competitor(&mut w, &node, newid);
    }
    let source_mode = if src.run.is_some() {
        LockMode::Exclusive
    } else {
        LockMode::Shared
    };
    let pool = c.p("pool").map(String::from);
    let mut locked = config.clone();
    locked.insert("lock".into(), "clone".into());
    let (src_node, begin_node) = (node.clone(), node.clone());
    let mut spec = TaskSpec::new(
        c,
        "qmclone",
        &vmid.to_string(),
        Box::new(move |w, failure| {
            if let Some(e) = failure {
                // PVE frees what it cloned and unlinks the config it wrote
                w.vms.remove(&newid);
                return Err(format!("clone failed: {e}"));
            }
            for (volid, size) in &volumes {
                w.ensure_volume(&target, volid, newid, *size);
            }
            if let Some(vm) = w.vms.get_mut(&newid) {
                vm.config = config;
                vm.node = target;
            }
            if let Some(p) = pool {
                w.pools.entry(p).or_default().insert(newid);
            }
            Ok(log)
        }),
    );
    spec.vm = Some(newid);
    spec.locks = vec![(vmid, source_mode), (newid, LockMode::Exclusive)];
    spec.lock_wait = sh.config.clone_lock_wait();
    spec.begin = Some(Box::new(move |w| {
        let src = vm_on(w, &src_node, vmid).map_err(|e| e.message)?;
        check_lock(src, false)?;
        if w.vms.contains_key(&newid) {
            return Err(already_exists(newid));
        }
        let temporary = [("lock".to_string(), "clone".to_string())].into();
        w.vms.insert(
            newid,
            Vm {
                vmid: newid,
                node: begin_node,
                config: temporary,
                run: None,
            },
        );
        Ok(vec![format!(
            "creating a clone of VM {vmid} with ID {newid}"
        )])
    }));
    // the config is complete once the first disk is cloned (at the end without disks)
    let first_disk = if disks == 0 { 1.0 } else { 1.0 / disks as f64 };
    spec.midway = Some((
        first_disk,
        Box::new(move |w| {
            if let Some(vm) = w.vms.get_mut(&newid) {
                vm.config = locked;
            }
            Ok(vec![])
        }),
    ));
    let upid = tasks::start(&sh, &mut w, spec);
    Ok(json!(upid))
}
