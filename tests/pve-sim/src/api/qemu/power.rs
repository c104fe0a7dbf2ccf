//! Power (`status/start|stop|shutdown|reboot`) and `resize`: accepted at once, errors
//! inside their tasks.

use serde_json::json;

use crate::api::{Call, check_lock, vm_on};
use crate::envelope::{ApiError, ApiResult};
use crate::params::{format_size, parse_size};
use crate::state::{drive_options, drive_string};
use crate::tasks::{self, TaskSpec};

use super::missing_vm;

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
    let spec = TaskSpec::new(
        c,
        "resize",
        &vmid.to_string(),
        Box::new(move |w, inj| {
            if let Some(e) = inj {
                return Err(e);
            }
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
    let upid = tasks::start(&sh, &mut w, spec);
    Ok(json!(upid))
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
    let delays = sh.config.guest_delays();
    let strict_memory = sh.config.strict_memory;
    let spec = TaskSpec::new(
        c,
        kind,
        &vmid.to_string(),
        Box::new(move |w, inj| {
            if let Some(e) = inj {
                return Err(e);
            }
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
                    w.boot_vm(vmid, delays);
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
                    w.boot_vm(vmid, delays);
                }
            }
            Ok(log)
        }),
    );
    let upid = tasks::start(&sh, &mut w, spec);
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
