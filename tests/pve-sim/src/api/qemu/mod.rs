//! `/nodes/{node}/qemu...`: listing and reads here; config writes and creation in
//! `config`, `clone`, power and resize in `power`, destruction in `destroy`, migration in
//! `migrate`.

pub(crate) mod access;
mod clone;
mod config;
mod destroy;
mod migrate;
mod power;

pub use clone::clone;
pub use config::{create, post_config, put_config};
pub use destroy::destroy;
pub use migrate::{migrate, move_vm};
pub use power::{reboot, resize, shutdown, start, stop};

use serde::Serialize;
use serde_json::{Value, json};

use super::{Call, typed_config, vm_on};
use crate::envelope::{ApiError, ApiResult, Data};
use crate::state::World;

pub(crate) fn missing_vm(node: &str, vmid: u32) -> String {
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

pub(crate) fn remove_volume(w: &mut World, node: &str, volid: &str) {
    if let Some((sid, name)) = volid.split_once(':')
        && let Some(st) = w.storage_mut(node, sid)
    {
        st.volumes.remove(name);
    }
}
