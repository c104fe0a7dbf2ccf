//! `/cluster/status`, `/cluster/nextid`, `/cluster/resources`, `/pools`.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::{Value, json};

use super::Call;
use crate::envelope::{ApiError, ApiResult, Data};
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

/// The `/cluster/resources` entry of a VM (serialized directly: this listing is the hot
/// path of schedulers polling thousands of VMs).
#[derive(Serialize)]
pub struct VmResource<'a> {
    id: String,
    #[serde(rename = "type")]
    kind: &'static str,
    vmid: u32,
    name: String,
    node: &'a str,
    status: &'static str,
    template: u8,
    maxmem: u64,
    mem: u64,
    maxcpu: u64,
    cpu: f64,
    maxdisk: u64,
    disk: u64,
    uptime: u64,
    netin: u64,
    netout: u64,
    diskread: u64,
    diskwrite: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    tags: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lock: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pool: Option<&'a str>,
}

/// The `/cluster/resources` entry of a VM.
pub fn vm_resource<'a>(vm: &'a Vm, pool: Option<&'a str>, node_up: bool) -> VmResource<'a> {
    let running = vm.run.is_some();
    let maxmem = vm.memory_mib() << 20;
    VmResource {
        id: format!("qemu/{}", vm.vmid),
        kind: "qemu",
        vmid: vm.vmid,
        name: vm.name(),
        node: &vm.node,
        // VMs on a node that does not answer are "unknown" in the cluster view
        status: if node_up { vm.status() } else { "unknown" },
        template: u8::from(vm.is_template()),
        maxmem,
        mem: if running { maxmem / 3 } else { 0 },
        maxcpu: vm.cpus(),
        cpu: if running { 0.01 } else { 0.0 },
        maxdisk: vm.maxdisk(),
        disk: 0,
        uptime: vm.uptime(),
        netin: 0,
        netout: 0,
        diskread: 0,
        diskwrite: 0,
        tags: vm.config.get("tags").map(String::as_str),
        lock: vm.lock(),
        pool,
    }
}

/// VMID -> pool, for listings.
fn pool_index(w: &World) -> HashMap<u32, &str> {
    w.pools
        .iter()
        .flat_map(|(p, m)| m.iter().map(move |id| (*id, p.as_str())))
        .collect()
}

/// The `/cluster/resources` (and `/nodes`) entry of a node; without `audit` (`Sys.Audit`
/// on `/nodes/<node>`) PVE leaves out its figures: CPU, memory, disk and uptime.
pub fn node_resource(w: &World, name: &str, audit: bool) -> Value {
    let n = &w.nodes[name];
    let mut v = json!({
        "id": format!("node/{}", n.name),
        "type": "node",
        "node": n.name,
        "status": if w.node_up(name) { "online" } else { "offline" },
        "level": "",
        "cgroup-mode": 2,
    });
    if audit {
        v["maxcpu"] = json!(n.cpus);
        v["cpu"] = json!(0.02);
        v["maxmem"] = json!(n.memory);
        v["mem"] = json!(w.node_mem_used(name));
        v["maxdisk"] = json!(100u64 << 30);
        v["disk"] = json!(8u64 << 30);
        v["uptime"] = json!(w.boot.elapsed().as_secs() + 86_400);
    }
    v
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

/// `GET /cluster/resources[?type=vm|node|storage]`: pools the caller may audit
/// (`Pool.Audit`), then VMs (`VM.Audit`; their `pool` only with `Pool.Audit` on it), then
/// every node (its figures only with `Sys.Audit`), then storages (`Datastore.Audit`),
/// as PVE's `resources` lists them.
pub fn resources(c: &mut Call) -> ApiResult<Data> {
    let w = c.shared.lock();
    let ty = c.p("type");
    let mut pools_out: Vec<Value> = vec![];
    let mut out: Vec<Value> = vec![];
    let mut vms: Vec<VmResource> = vec![];
    // pools: only in the full listing (`pool` is not a `type` the schema accepts)
    if ty.is_none() {
        for p in w.pools.keys() {
            if c.can(&w, &format!("/pool/{p}"), "Pool.Audit") {
                pools_out.push(json!({"id": format!("/pool/{p}"), "type": "pool", "pool": p}));
            }
        }
    }
    if ty.is_none() || ty == Some("vm") {
        let pools = pool_index(&w);
        vms.extend(
            w.vms
                .values()
                .filter(|vm| c.can(&w, &format!("/vms/{}", vm.vmid), "VM.Audit"))
                .map(|vm| {
                    let pool = pools
                        .get(&vm.vmid)
                        .copied()
                        .filter(|p| c.can(&w, &format!("/pool/{p}"), "Pool.Audit"));
                    vm_resource(vm, pool, w.node_up(&vm.node))
                }),
        );
    }
    if ty.is_none() || ty == Some("node") {
        out.extend(w.nodes.keys().map(|n| {
            let audit = c.can(&w, &format!("/nodes/{n}"), "Sys.Audit");
            node_resource(&w, n, audit)
        }));
    }
    if ty.is_none() || ty == Some("storage") {
        for n in w.nodes.keys() {
            for s in w.node_storages(n) {
                if c.can(&w, &format!("/storage/{}", s.id), "Datastore.Audit") {
                    out.push(storage_resource(n, s));
                }
            }
        }
    }
    #[derive(Serialize)]
    #[serde(untagged)]
    enum Entry<'a> {
        Vm(Box<VmResource<'a>>),
        Other(Value),
    }
    let all: Vec<Entry> = pools_out
        .into_iter()
        .map(Entry::Other)
        .chain(vms.into_iter().map(|v| Entry::Vm(Box::new(v))))
        .chain(out.into_iter().map(Entry::Other))
        .collect();
    Ok(Data::serialize(&all))
}

/// `GET /pools[?poolid=&type=]`: without `poolid`, the pools the caller may audit
/// (`Pool.Audit` on `/pool/<pool>`); with it, that pool and its members, for any caller:
/// PVE's handler makes the `Pool.Audit` check there but ignores its outcome.
pub fn pools(c: &mut Call) -> ApiResult {
    let w = c.shared.lock();
    if let Some(id) = c.p("poolid") {
        let Some(members) = w.pools.get(id) else {
            return Err(ApiError::die(format!("pool '{id}' does not exist")));
        };
        let wanted = c.p("type");
        let members: Vec<Value> = members
            .iter()
            .filter_map(|vmid| w.vms.get(vmid))
            .filter(|_| wanted.is_none_or(|t| t == "qemu"))
            .map(|vm| {
                let mut v = serde_json::to_value(vm_resource(vm, None, w.node_up(&vm.node)))
                    .unwrap_or_default();
                if let Some(o) = v.as_object_mut() {
                    // what the pool's member entries leave out
                    for k in ["tags", "lock", "pool"] {
                        o.remove(k);
                    }
                }
                v
            })
            .collect();
        return Ok(json!([{"poolid": id, "members": members}]));
    }
    Ok(Value::Array(
        w.pools
            .keys()
            .filter(|p| c.can(&w, &format!("/pool/{p}"), "Pool.Audit"))
            .map(|p| json!({"poolid": p}))
            .collect(),
    ))
}
