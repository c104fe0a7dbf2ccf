//! `/cluster/status`, `/cluster/nextid`, `/cluster/resources`, `/pools`.

use serde_json::{Value, json};

use super::Call;
use crate::envelope::{ApiError, ApiResult};
use crate::state::{Storage, Vm, World};

/// `GET /cluster/status`: the cluster entry, then one entry per node.
pub fn status(c: &mut Call) -> ApiResult {
    let w = c.shared.lock();
    let mut out = vec![json!({
        "type": "cluster",
        "id": "cluster",
        "name": c.shared.config.cluster_name,
        "nodes": w.nodes.len(),
        "quorate": 1,
        "version": w.nodes.len() + 1,
    })];
    for (i, n) in w.nodes.values().enumerate() {
        out.push(json!({
            "type": "node",
            "id": format!("node/{}", n.name),
            "name": n.name,
            "nodeid": i + 1,
            "ip": n.ip,
            "online": u8::from(n.online),
            "local": u8::from(i == 0),
            "level": "",
        }));
    }
    Ok(Value::Array(out))
}

/// `GET /cluster/nextid`: the lowest free VMID as a string; with `vmid`, that ID if free,
/// else 400. Nothing is reserved.
pub fn nextid(c: &mut Call) -> ApiResult {
    let w = c.shared.lock();
    if let Some(id) = c.p("vmid") {
        let n: u32 = id.parse().unwrap_or(0);
        if w.vms.contains_key(&n) {
            return Err(ApiError::param("vmid", format!("VM {n} already exists")));
        }
        return Ok(json!(n.to_string()));
    }
    Ok(json!(w.next_free_vmid().to_string()))
}

/// The `/cluster/resources` entry of a VM.
pub fn vm_resource(w: &World, vm: &Vm) -> Value {
    let running = vm.run.is_some();
    let mut v = json!({
        "id": format!("qemu/{}", vm.vmid),
        "type": "qemu",
        "vmid": vm.vmid,
        "name": vm.name(),
        "node": vm.node,
        "status": vm.status(),
        "template": u8::from(vm.is_template()),
        "maxmem": vm.memory_mib() << 20,
        "mem": if running { (vm.memory_mib() << 20) / 3 } else { 0 },
        "maxcpu": vm.cpus(),
        "cpu": if running { 0.01 } else { 0.0 },
        "maxdisk": vm.maxdisk(),
        "disk": 0,
        "uptime": vm.uptime(),
        "netin": 0,
        "netout": 0,
        "diskread": 0,
        "diskwrite": 0,
    });
    if let Some(t) = vm.config.get("tags") {
        v["tags"] = json!(t);
    }
    if let Some(l) = vm.lock() {
        v["lock"] = json!(l);
    }
    if let Some(p) = w.pool_of(vm.vmid) {
        v["pool"] = json!(p);
    }
    v
}

pub fn node_resource(w: &World, name: &str) -> Value {
    let n = &w.nodes[name];
    json!({
        "id": format!("node/{}", n.name),
        "type": "node",
        "node": n.name,
        "status": if n.online { "online" } else { "offline" },
        "maxcpu": n.cpus,
        "cpu": 0.02,
        "maxmem": n.memory,
        "mem": w.node_mem_used(name),
        "maxdisk": 100u64 << 30,
        "disk": 8u64 << 30,
        "uptime": w.boot.elapsed().as_secs() + 86_400,
        "level": "",
        "cgroup-mode": 2,
    })
}

pub fn storage_resource(node: &str, s: &Storage) -> Value {
    json!({
        "id": format!("storage/{node}/{}", s.id),
        "type": "storage",
        "storage": s.id,
        "node": node,
        "plugintype": s.kind.as_str(),
        "content": s.content.join(","),
        "disk": s.used(),
        "maxdisk": s.total,
        "status": "available",
        "shared": u8::from(s.shared),
    })
}

/// `GET /cluster/resources[?type=vm|node|storage|pool]`.
pub fn resources(c: &mut Call) -> ApiResult {
    let w = c.shared.lock();
    let ty = c.p("type");
    let mut out = vec![];
    if ty.is_none() || ty == Some("vm") {
        out.extend(w.vms.values().map(|vm| vm_resource(&w, vm)));
    }
    if ty.is_none() || ty == Some("node") {
        out.extend(w.nodes.keys().map(|n| node_resource(&w, n)));
    }
    if ty.is_none() || ty == Some("storage") {
        for n in w.nodes.keys() {
            for s in w.node_storages(n) {
                out.push(storage_resource(n, s));
            }
        }
    }
    if ty.is_none() || ty == Some("pool") {
        for p in w.pools.keys() {
            out.push(json!({"id": format!("/pool/{p}"), "type": "pool", "pool": p}));
        }
    }
    Ok(Value::Array(out))
}

/// `GET /pools`.
pub fn pools(c: &mut Call) -> ApiResult {
    let w = c.shared.lock();
    Ok(Value::Array(
        w.pools
            .keys()
            .filter(|p| c.p("poolid").is_none_or(|id| id == *p))
            .map(|p| json!({"poolid": p}))
            .collect(),
    ))
}
