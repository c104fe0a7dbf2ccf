//! `/nodes/{node}/qemu...`: list, config, clone, resize, power, destroy.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::{Value, json};

use super::{Call, check_lock, check_node, typed_config, vm_on};
use crate::envelope::{ApiError, ApiResult, Data};
use crate::params::{format_size, parse_bool, parse_size, split_indexed};
use crate::state::{Vm, World, drive_options, drive_string, is_drive_key};
use crate::tasks;

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

fn missing_vm(node: &str, vmid: u32) -> String {
    format!("Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist")
}

/// An entry of `GET /nodes/{node}/qemu` (serialized directly: hot with many VMs).
#[derive(Serialize)]
struct ListEntry<'a> {
    vmid: u32,
    name: String,
    status: &'static str,
    cpus: u64,
    maxmem: u64,
    mem: u64,
    maxdisk: u64,
    disk: u64,
    cpu: f64,
    uptime: u64,
    netin: u64,
    netout: u64,
    diskread: u64,
    diskwrite: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    template: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    serial: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tags: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lock: Option<&'a str>,
}

/// `GET /nodes/{node}/qemu`.
pub fn list(c: &mut Call) -> ApiResult<Data> {
    let w = c.shared.lock();
    let node = c.node();
    let entries: Vec<ListEntry> = w
        .vms
        .values()
        .filter(|vm| vm.node == node)
        .filter(|vm| c.can(&w, &format!("/vms/{}", vm.vmid), "VM.Audit"))
        .map(|vm| {
            let running = vm.run.is_some();
            let maxmem = vm.memory_mib() << 20;
            ListEntry {
                vmid: vm.vmid,
                name: vm.name(),
                status: vm.status(),
                cpus: vm.cpus(),
                maxmem,
                mem: if running { maxmem / 3 } else { 0 },
                maxdisk: vm.maxdisk(),
                disk: 0,
                cpu: if running { 0.01 } else { 0.0 },
                uptime: vm.uptime(),
                netin: 0,
                netout: 0,
                diskread: 0,
                diskwrite: 0,
                template: vm.is_template().then_some(1),
                serial: vm.config.contains_key("serial0").then_some(1),
                pid: vm.run.as_ref().map(|r| r.pid),
                tags: vm.config.get("tags").map(String::as_str),
                lock: vm.lock(),
            }
        })
        .collect();
    Ok(Data::serialize(&entries))
}

/// `GET /nodes/{node}/qemu/{vmid}/config`: the config with JSON types from the schema,
/// plus `digest`.
pub fn get_config(c: &mut Call) -> ApiResult {
    let w = c.shared.lock();
    let vm = vm_on(&w, c.node(), c.vmid())?;
    if let Some(s) = c.p("snapshot") {
        return Err(ApiError::die(format!("snapshot '{s}' does not exist")));
    }
    let mut m = typed_config(w.version, &vm.config);
    m.insert("digest".into(), json!(vm.digest()));
    Ok(Value::Object(m))
}

/// `GET /nodes/{node}/qemu/{vmid}/pending`: no pending changes are modelled.
pub fn pending(c: &mut Call) -> ApiResult {
    let w = c.shared.lock();
    let vm = vm_on(&w, c.node(), c.vmid())?;
    Ok(Value::Array(
        vm.config
            .iter()
            .map(|(k, v)| json!({"key": k, "value": v}))
            .collect(),
    ))
}

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

fn remove_volume(w: &mut World, node: &str, volid: &str) {
    if let Some((sid, name)) = volid.split_once(':')
        && let Some(st) = w.storage_mut(node, sid)
    {
        st.volumes.remove(name);
    }
}

/// Checks shared by config writes: VM, digest, lock, lock timeout (all synchronous).
fn check_config_write(w: &mut World, c: &Call) -> ApiResult<u32> {
    let vmid = c.vmid();
    let vm = vm_on(w, c.node(), vmid)?;
    if let Some(d) = c.p("digest")
        && d != vm.digest()
    {
        return Err(ApiError::die(
            "checksum missmatch (file change by other user?)",
        ));
    }
    check_lock(vm, c.flag("skiplock")).map_err(ApiError::die)?;
    w.lock_timeout(vmid).map_err(ApiError::die)?;
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
    let upid = tasks::start(
        &sh,
        &mut w,
        c.node(),
        "qmconfig",
        &vmid.to_string(),
        &c.user,
        vec![],
        Box::new(|_, inj| inj.map_or(Ok(vec![]), Err)),
    );
    Ok(json!(upid))
}

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
    Ok(json!(upid))
}

/// `PUT .../resize`: grow a disk; errors surface in the `resize` task.
pub fn resize(c: &mut Call) -> ApiResult {
    let sh = c.shared.clone();
    let mut w = sh.lock();
    let node = c.node().to_string();
    let vmid = c.vmid();
    vm_on(&w, &node, vmid)?;
    let disk = c.p("disk").unwrap_or("").to_string();
    let size = c.p("size").unwrap_or("").to_string();
    let re = regex::Regex::new(r"^(\+)?(\d+(\.\d+)?)([KMGT])?$").expect("static regex");
    if !re.is_match(&size) {
        return Err(ApiError::param(
            "size",
            "value does not match the regex pattern",
        ));
    }
    let skiplock = c.flag("skiplock");
    let digest = c.p("digest").map(String::from);
    let upid = tasks::start(
        &sh,
        &mut w,
        c.node(),
        "resize",
        &vmid.to_string(),
        &c.user,
        vec![],
        Box::new(move |w, inj| {
            if let Some(e) = inj {
                return Err(e);
            }
            w.lock_timeout(vmid)?;
            let vm = w.vms.get(&vmid).ok_or_else(|| missing_vm(&node, vmid))?;
            if let Some(d) = digest
                && d != vm.digest()
            {
                return Err("checksum missmatch (file change by other user?)".into());
            }
            check_lock(vm, skiplock)?;
            let drive = vm
                .config
                .get(&disk)
                .ok_or_else(|| format!("disk '{disk}' does not exist"))?;
            let mut o = drive_options(drive);
            if o.get("media").is_some_and(|m| m == "cdrom") {
                return Err("you can't resize a cdrom".into());
            }
            let old = o.get("size").and_then(|s| parse_size(s)).unwrap_or(0);
            let new = match size.strip_prefix('+') {
                Some(inc) => old + parse_size(inc).unwrap_or(0),
                None => parse_size(&size).unwrap_or(0),
            };
            if new < old {
                return Err("shrinking disks is not supported".into());
            }
            let file = o.get("file").cloned().unwrap_or_default();
            o.insert("size".into(), format_size(new));
            let value = drive_string(&o);
            if let Some(vm) = w.vms.get_mut(&vmid) {
                vm.config.insert(disk.clone(), value);
            }
            if let Some((sid, name)) = file.split_once(':')
                && let Some(st) = w.storage_mut(&node, sid)
                && let Some(v) = st.volumes.get_mut(name)
            {
                v.size = new;
            }
            Ok(vec![format!(
                "  Size of logical volume changed from {} to {}.",
                format_size(old),
                format_size(new)
            )])
        }),
    );
    Ok(json!(upid))
}

/// `GET .../status/current`.
pub fn status_current(c: &mut Call) -> ApiResult {
    let w = c.shared.lock();
    let vm = vm_on(&w, c.node(), c.vmid())?;
    let running = vm.run.is_some();
    let mut v = json!({
        "vmid": vm.vmid,
        "name": vm.name(),
        "status": vm.status(),
        "qmpstatus": vm.status(),
        "cpus": vm.cpus(),
        "maxmem": vm.memory_mib() << 20,
        "mem": if running { (vm.memory_mib() << 20) / 3 } else { 0 },
        "maxdisk": vm.maxdisk(),
        "disk": 0,
        "cpu": if running { 0.01 } else { 0.0 },
        "uptime": vm.uptime(),
        "netin": 0,
        "netout": 0,
        "diskread": 0,
        "diskwrite": 0,
        "ha": {"managed": 0},
    });
    if vm.agent_enabled() {
        v["agent"] = json!(1);
    }
    if vm.is_template() {
        v["template"] = json!(1);
    }
    if vm.config.contains_key("serial0") {
        v["serial"] = json!(1);
    }
    if let Some(r) = &vm.run {
        v["pid"] = json!(r.pid);
        v["running-machine"] = json!("pc-i440fx-9.2+pve1");
        v["running-qemu"] = json!("9.2.0");
    }
    if let Some(t) = vm.config.get("tags") {
        v["tags"] = json!(t);
    }
    if let Some(l) = vm.lock() {
        v["lock"] = json!(l);
    }
    Ok(v)
}

enum Power {
    Start,
    Stop,
    Shutdown,
    Reboot,
}

fn power(c: &mut Call, op: Power) -> ApiResult {
    let sh = c.shared.clone();
    let mut w = sh.lock();
    let node = c.node().to_string();
    let vmid = c.vmid();
    let vm = vm_on(&w, &node, vmid)?;
    if matches!(op, Power::Reboot) && vm.run.is_none() {
        return Err(ApiError::die(format!("VM {vmid} not running")));
    }
    let kind = match op {
        Power::Start => "qmstart",
        Power::Stop => "qmstop",
        Power::Shutdown => "qmshutdown",
        Power::Reboot => "qmreboot",
    };
    let skiplock = c.flag("skiplock");
    let boot = sh.config.boot_delay_ms;
    let agent = sh.config.agent_delay_ms;
    let strict_memory = sh.config.strict_memory;
    let upid = tasks::start(
        &sh,
        &mut w,
        c.node(),
        kind,
        &vmid.to_string(),
        &c.user,
        vec![],
        Box::new(move |w, inj| {
            if let Some(e) = inj {
                return Err(e);
            }
            w.lock_timeout(vmid)?;
            let vm = w.vms.get(&vmid).ok_or_else(|| missing_vm(&node, vmid))?;
            check_lock(vm, skiplock)?;
            let running = vm.run.is_some();
            let mut log = vec![];
            match op {
                Power::Start => {
                    if vm.is_template() {
                        return Err("you can't start a vm if it's a template".into());
                    }
                    if running {
                        return Err(format!("VM {vmid} already running"));
                    }
                    let need = vm.memory_mib() << 20;
                    let (used, total) = (
                        w.node_mem_used(&node),
                        w.nodes.get(&node).map_or(0, |n| n.memory),
                    );
                    if strict_memory && used + need > total {
                        return Err("kvm: cannot set up guest memory 'pc.ram': Cannot allocate memory\nstart failed: QEMU exited with code 1".into());
                    }
                    let vm = &w.vms[&vmid];
                    if vm.config.values().any(|v| v.contains("cloudinit")) {
                        log.push("generating cloud-init ISO".into());
                    }
                    w.boot_vm(vmid, boot, agent, &node);
                }
                Power::Stop => {
                    if let Some(vm) = w.vms.get_mut(&vmid) {
                        vm.run = None;
                    }
                }
                Power::Shutdown => {
                    if !running {
                        return Err(format!("VM {vmid} not running"));
                    }
                    if let Some(vm) = w.vms.get_mut(&vmid) {
                        vm.run = None;
                    }
                }
                Power::Reboot => {
                    if !running {
                        return Err(format!("VM {vmid} not running"));
                    }
                    w.boot_vm(vmid, boot, agent, &node);
                }
            }
            Ok(log)
        }),
    );
    Ok(json!(upid))
}

pub fn start(c: &mut Call) -> ApiResult {
    power(c, Power::Start)
}
pub fn stop(c: &mut Call) -> ApiResult {
    power(c, Power::Stop)
}
pub fn shutdown(c: &mut Call) -> ApiResult {
    power(c, Power::Shutdown)
}
pub fn reboot(c: &mut Call) -> ApiResult {
    power(c, Power::Reboot)
}

/// `DELETE /nodes/{node}/qemu/{vmid}`.
pub fn destroy(c: &mut Call) -> ApiResult {
    let sh = c.shared.clone();
    let mut w = sh.lock();
    let node = c.node().to_string();
    let vmid = c.vmid();
    let vm = vm_on(&w, &node, vmid)?;
    if vm.config.get("protection").is_some_and(|p| p == "1") {
        return Err(ApiError::die(format!(
            "can't remove VM {vmid} - protection mode enabled"
        )));
    }
    if vm.run.is_some() {
        return Err(ApiError::die(format!(
            "VM {vmid} is running - destroy failed"
        )));
    }
    let skiplock = c.flag("skiplock");
    let purge = c.flag("purge");
    let unreferenced = c.flag("destroy-unreferenced-disks");
    let upid = tasks::start(
        &sh,
        &mut w,
        c.node(),
        "qmdestroy",
        &vmid.to_string(),
        &c.user,
        vec![],
        Box::new(move |w, inj| {
            if let Some(e) = inj {
                return Err(e);
            }
            w.lock_timeout(vmid)?;
            let vm = w.vms.get(&vmid).ok_or_else(|| missing_vm(&node, vmid))?;
            check_lock(vm, skiplock)?;
            if vm.run.is_some() {
                return Err(format!("VM {vmid} is running - destroy failed"));
            }
            let referenced: Vec<String> = vm
                .config
                .iter()
                .filter(|(k, _)| is_drive_key(k) || matches!(split_indexed(k), Some(("unused", _))))
                .filter_map(|(_, v)| drive_options(v).get("file").cloned())
                .filter(|f| !f.contains("/iso/") && !f.contains(":iso/"))
                .collect();
            for volid in &referenced {
                if let Some((_, name)) = volid.split_once(':')
                    && name.starts_with("base-")
                    && !name.contains('/')
                    && let Some(user) = w.vms.values().find(|o| {
                        o.vmid != vmid && o.config.values().any(|v| v.contains(&format!("{name}/")))
                    })
                {
                    return Err(format!(
                        "base volume '{name}' is still in use by linked cloned VM {}",
                        user.vmid
                    ));
                }
            }
            let mut log = vec![];
            for volid in &referenced {
                remove_volume(w, &node, volid);
                log.push(format!(
                    "  Logical volume \"{volid}\" successfully removed."
                ));
            }
            if unreferenced {
                let keys: Vec<(String, String)> = w
                    .storages
                    .iter()
                    .filter(|((n, _), _)| *n == node || n.is_empty())
                    .flat_map(|((_, sid), st)| {
                        st.volumes
                            .values()
                            .filter(|v| v.vmid == Some(vmid) && v.content == "images")
                            .map(move |v| (sid.clone(), v.name.clone()))
                    })
                    .collect();
                for (sid, name) in keys {
                    remove_volume(w, &node, &format!("{sid}:{name}"));
                }
            }
            w.vms.remove(&vmid);
            if purge {
                for members in w.pools.values_mut() {
                    members.remove(&vmid);
                }
            }
            Ok(log)
        }),
    );
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
    if let Some(p) = c.p("pool")
        && !w.pools.contains_key(p)
    {
        return Err(ApiError::die(format!("pool '{p}' does not exist")));
    }
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
    let (boot, agent) = (sh.config.boot_delay_ms, sh.config.agent_delay_ms);
    let upid = tasks::start(
        &sh,
        &mut w,
        c.node(),
        "qmcreate",
        &vmid.to_string(),
        &c.user,
        vec![],
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
                w.boot_vm(vmid, boot, agent, &node);
            }
            Ok(vec![])
        }),
    );
    Ok(json!(upid))
}
