//! `POST .../clone`.

use std::collections::BTreeSet;

use serde_json::json;

use crate::api::{Call, check_lock, check_node, vm_on};
use crate::envelope::{ApiError, ApiResult};
use crate::params::{parse_bool, parse_size, split_indexed};
use crate::state::{Vm, drive_options, drive_string, is_drive_key};
use crate::tasks;

/// `POST .../clone`.
pub fn clone(c: &mut Call) -> ApiResult {
    let sh = c.shared.clone();
    let mut w = sh.lock();
    let node = c.node().to_string();
    let vmid = c.vmid();
    let newid: u32 = c.p("newid").and_then(|v| v.parse().ok()).unwrap_or(0);
    let src = vm_on(&w, &node, vmid)?.clone();
    w.lock_timeout(vmid).map_err(ApiError::die)?;
    check_lock(&src, false).map_err(ApiError::die)?;
    if w.vms.contains_key(&newid) {
        return Err(ApiError::die(format!(
            "unable to create VM {newid}: config file already exists"
        )));
    }
    let target = c.p("target").unwrap_or(&node).to_string();
    check_node(&w, &target)?;
    let full = c
        .p("full")
        .and_then(parse_bool)
        .unwrap_or(!src.is_template());
    if !full {
        if let Some(p) = ["storage", "format"].iter().find(|p| c.p(p).is_some()) {
            return Err(ApiError::param(
                p,
                "option can only be used with full clones",
            ));
        }
        if !src.is_template()
            && let Some((k, _, _)) = src.disks().first()
        {
            return Err(ApiError::die(format!(
                "Linked clone feature is not supported for drive '{k}'"
            )));
        }
    }
    if target != node {
        let local = src.disks().iter().any(|(_, volid, _)| {
            volid
                .split_once(':')
                .and_then(|(sid, _)| w.storage(&node, sid))
                .is_some_and(|s| !s.shared)
        }) && c
            .p("storage")
            .is_none_or(|s| w.storage(&target, s).is_none_or(|s| !s.shared));
        if local {
            return Err(ApiError::die(format!(
                "Can't clone VM to node '{target}' (VM uses local storage)"
            )));
        }
    }
    if let Some(p) = c.p("pool")
        && !w.pools.contains_key(p)
    {
        return Err(ApiError::die(format!("pool '{p}' does not exist")));
    }
    if let Some(s) = c.p("storage") {
        match w.storage(&target, s) {
            None => return Err(ApiError::die(format!("storage '{s}' does not exist"))),
            Some(st) if !st.has_content("images") => {
                return Err(ApiError::die(format!(
                    "storage '{s}' does not support vm images"
                )));
            }
            _ => {}
        }
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
    let smbios = cfg
        .get("smbios1")
        .map(|s| {
            s.split(',')
                .filter(|p| !p.starts_with("uuid="))
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let mut smbios_parts = vec![format!("uuid={uuid}")];
    smbios_parts.extend(smbios);
    cfg.insert("smbios1".into(), smbios_parts.join(","));
    let genid = w.uuid();
    cfg.insert("vmgenid".into(), genid);
    let mut planned: Vec<(String, u64)> = vec![];
    let mut log = vec![];
    let mut taken = BTreeSet::new();
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
                    .storage(&target, tsid)
                    .is_some_and(|s| s.kind.is_file_based());
                let nn = if file_based {
                    format!("{newid}/vm-{newid}-cloudinit.qcow2")
                } else {
                    format!("vm-{newid}-cloudinit")
                };
                o.insert("file".into(), format!("{tsid}:{nn}"));
                planned.push((format!("{tsid}:{nn}"), 4 << 20));
                cfg.insert(k.clone(), drive_string(&o));
            }
            continue;
        }
        let size = o.get("size").and_then(|s| parse_size(s)).unwrap_or(0);
        let newvol = if full {
            let tsid = c.p("storage").unwrap_or(sid).to_string();
            let nn = w.next_disk_name(&target, &tsid, newid, &taken);
            taken.insert(nn.clone());
            log.push(format!("create full clone of drive {k} ({file})"));
            format!("{tsid}:{nn}")
        } else {
            let base = name.rsplit('/').next().unwrap_or(name);
            let nn = w.next_disk_name(&target, sid, newid, &taken);
            taken.insert(nn.clone());
            log.push(format!("create linked clone of drive {k} ({file})"));
            format!("{sid}:{base}/{nn}")
        };
        o.insert("file".into(), newvol.clone());
        planned.push((newvol, size));
        cfg.insert(k.clone(), drive_string(&o));
    }
    cfg.insert("lock".into(), "clone".into());
    w.vms.insert(
        newid,
        Vm {
            vmid: newid,
            node: target.clone(),
            config: cfg,
            run: None,
        },
    );
    let pool = c.p("pool").map(String::from);
    let upid = tasks::start(
        &sh,
        &mut w,
        c.node(),
        "qmclone",
        &vmid.to_string(),
        &c.user,
        vec![],
        Box::new(move |w, inj| {
            if let Some(e) = inj {
                w.vms.remove(&newid);
                return Err(e);
            }
            for (volid, size) in &planned {
                w.ensure_volume(&target, volid, newid, *size);
            }
            if let Some(vm) = w.vms.get_mut(&newid) {
                vm.config.remove("lock");
            }
            if let Some(p) = pool {
                w.pools.entry(p).or_default().insert(newid);
            }
            Ok(log)
        }),
    );
    if let Some(t) = w.tasks.get_mut(&upid) {
        t.vm = Some(newid);
    }
    Ok(json!(upid))
}
