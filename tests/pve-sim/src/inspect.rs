//! Inspection and control outside `/api2/json`, unauthenticated, for tests and benchmarks:
//!
//! | route | what |
//! |---|---|
//! | `GET /_sim/vms` | every VM: node, status, lock, pool, config (with digest), guest addresses |
//! | `GET /_sim/vms/{vmid}` | one VM (404 if absent) |
//! | `POST /_sim/vms/{vmid}/crash` | the VM stops at once, without a task (a guest crash) |
//! | `POST /_sim/vms/{vmid}/migrate?target=NODE` | the VM moves to NODE at once, as a finished migration by someone else (HA's load balancer); 409 with the reason if PVE would refuse |
//! | `GET /_sim/destroyed` | every VM a `qmdestroy` removed: VMID, node, the principal who asked, when (`at_ms`), its last config |
//! | `GET /_sim/state` | everything: nodes, storages and volumes, VMs, pools, tasks, counters, faults, leases |
//! | `GET /_sim/counters` | requests per endpoint, `{"METHOD /path/template": n}` |
//! | `POST /_sim/counters/reset` | zero the counters |
//! | `GET /_sim/faults`, `PUT /_sim/faults` | read / replace the fault injection (JSON, see `Faults`) |
//! | `GET /_sim/faults/hits` | per rule: how many requests it matched, skipped and faulted |
//! | `GET /_sim/tasks` | every task's status, oldest first |
//! | `GET /_sim/endpoints` | the API endpoints served |

use std::time::Instant;

use bytes::Bytes;
use hyper::http::request::Parts;
use serde_json::{Value, json};

use crate::envelope::{Resp, raw_json};
use crate::faults::Faults;
use crate::server::Shared;
use crate::state::{Vm, World};

/// One VM for inspection.
pub fn vm_json(w: &World, vm: &Vm) -> Value {
    let now = Instant::now();
    let guest = vm.run.as_ref().map(|r| {
        json!({
            "hostname": r.hostname,
            "booted": now >= r.booted_at,
            "agent_up": vm.agent_enabled() && now >= r.agent_at,
            "interfaces": r.interfaces.iter().map(|i| json!({
                "name": i.name, "mac": i.mac,
                "ipv4": i.ipv4.iter().map(|(a, p)| format!("{a}/{p}")).collect::<Vec<_>>(),
                "ipv6": i.ipv6.iter().map(|(a, p)| format!("{a}/{p}")).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    });
    let ips: Vec<String> = vm
        .run
        .iter()
        .flat_map(|r| r.interfaces.iter().filter(|i| i.name != "lo"))
        .flat_map(|i| i.ipv4.iter().map(|(a, _)| a.clone()))
        .collect();
    json!({
        "vmid": vm.vmid,
        "node": vm.node,
        "name": vm.name(),
        "status": vm.status(),
        "template": vm.is_template(),
        "lock": vm.lock(),
        "flock": w.flocks.get(&vm.vmid),
        "pool": w.pool_of(vm.vmid),
        "digest": vm.digest(),
        "config": vm.config,
        "guest": guest,
        "ipv4": ips,
    })
}

/// Every VM for inspection.
pub fn vms_json(w: &World) -> Vec<Value> {
    w.vms.values().map(|vm| vm_json(w, vm)).collect()
}

/// The whole world.
pub fn dump(w: &World) -> Value {
    let storages: Vec<Value> = w
        .storages
        .iter()
        .map(|((node, _), s)| {
            json!({
                "node": if node.is_empty() { None } else { Some(node) },
                "storage": s.id,
                "type": s.kind.as_str(),
                "content": s.content,
                "shared": s.shared,
                "total": s.total,
                "volumes": s.volumes.values().map(|v| json!({
                    "volid": format!("{}:{}", s.id, v.name), "content": v.content,
                    "format": v.format, "size": v.size, "vmid": v.vmid, "parent": v.parent,
                    "nocloud": v.nocloud,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "version": format!("{}.{}", w.version.0, w.version.1),
        "nodes": w.nodes.values().collect::<Vec<_>>(),
        "storages": storages,
        "vms": vms_json(w),
        "pools": w.pools,
        "tasks": w.task_order.iter().filter_map(|u| w.tasks.get(u)).map(|t| t.inspect_json()).collect::<Vec<_>>(),
        "counters": w.counters,
        "destroyed": w.destroyed,
        "faults": w.faults,
        "fault_hits": w.fault_hits_json(),
        "leases": w.leases.iter().map(|(m, ip)| (m.clone(), ip.to_string())).collect::<std::collections::BTreeMap<_, _>>(),
    })
}

/// Handles `/_sim/...`.
pub fn handle(shared: &Shared, parts: &Parts, body: Bytes) -> Resp {
    let path = parts.uri.path().trim_end_matches('/');
    let method = parts.method.as_str();
    match (method, path) {
        ("GET", "/_sim/vms") => raw_json(200, &Value::Array(vms_json(&shared.lock()))),
        ("GET", "/_sim/destroyed") => raw_json(200, &json!(shared.lock().destroyed)),
        ("GET", "/_sim/state") => raw_json(200, &dump(&shared.lock())),
        ("GET", "/_sim/counters") => raw_json(200, &json!(shared.lock().counters)),
        ("POST", "/_sim/counters/reset") => {
            shared.lock().counters.clear();
            raw_json(200, &json!({"ok": true}))
        }
        ("GET", "/_sim/faults") => raw_json(200, &json!(shared.lock().faults)),
        ("GET", "/_sim/faults/hits") => raw_json(200, &shared.lock().fault_hits_json()),
        ("PUT", "/_sim/faults") | ("POST", "/_sim/faults") => {
            match serde_json::from_slice::<Faults>(&body) {
                Ok(f) => {
                    shared.lock().set_faults(f.clone());
                    raw_json(200, &json!(f))
                }
                Err(e) => raw_json(400, &json!({"error": e.to_string()})),
            }
        }
        ("GET", "/_sim/tasks") => {
            let w = shared.lock();
            let t: Vec<Value> = w
                .task_order
                .iter()
                .filter_map(|u| w.tasks.get(u))
                .map(|t| t.inspect_json())
                .collect();
            raw_json(200, &Value::Array(t))
        }
        ("GET", "/_sim/endpoints") => raw_json(200, &json!(crate::api::endpoints())),
        ("POST", p) if p.starts_with("/_sim/vms/") && p.ends_with("/crash") => {
            let id: Option<u32> = p["/_sim/vms/".len()..p.len() - "/crash".len()].parse().ok();
            let mut w = shared.lock();
            match id.and_then(|id| w.vms.get_mut(&id)) {
                Some(vm) if vm.run.is_some() => {
                    vm.run = None;
                    raw_json(200, &json!({"ok": true}))
                }
                Some(_) => raw_json(409, &json!({"error": "VM is not running"})),
                None => raw_json(404, &json!({"error": "no such VM"})),
            }
        }
        ("POST", p) if p.starts_with("/_sim/vms/") && p.ends_with("/migrate") => {
            let id: Option<u32> = p["/_sim/vms/".len()..p.len() - "/migrate".len()]
                .parse()
                .ok();
            let query = crate::params::decode_urlencoded(parts.uri.query().unwrap_or(""));
            let target = query.get("target").cloned().or_else(|| {
                serde_json::from_slice::<Value>(&body)
                    .ok()
                    .and_then(|v| v["target"].as_str().map(String::from))
            });
            let (Some(id), Some(target)) = (id, target) else {
                return raw_json(
                    400,
                    &json!({"error": "a VMID and ?target=NODE are required"}),
                );
            };
            let mut w = shared.lock();
            match migrate_now(&mut w, id, &target) {
                Ok(log) => raw_json(200, &json!({"ok": true, "node": target, "log": log})),
                Err((status, e)) => raw_json(status, &json!({"error": e})),
            }
        }
        ("GET", p) if p.starts_with("/_sim/vms/") => {
            let id: Option<u32> = p["/_sim/vms/".len()..].parse().ok();
            let w = shared.lock();
            match id.and_then(|id| w.vms.get(&id)) {
                Some(vm) => raw_json(200, &vm_json(&w, vm)),
                None => raw_json(404, &json!({"error": "no such VM"})),
            }
        }
        _ => raw_json(
            404,
            &json!({"error": format!("unknown inspection route {method} {path}")}),
        ),
    }
}

/// Moves a VM to `target` at once (no task), as a migration done by someone else; refused
/// (409) while the VM is locked or a task holds its config lock, or when PVE would refuse
/// the migration.
pub fn migrate_now(w: &mut World, vmid: u32, target: &str) -> Result<Vec<String>, (u16, String)> {
    let Some(vm) = w.vms.get(&vmid) else {
        return Err((404, "no such VM".into()));
    };
    if vm.node == target {
        return Err((409, format!("VM {vmid} is already on {target}")));
    }
    if let Some(l) = vm.lock() {
        return Err((409, format!("VM is locked ({l})")));
    }
    if !w.flock_free(vmid) {
        return Err((409, format!("a task holds the config lock of VM {vmid}")));
    }
    crate::api::qemu::move_vm(w, vmid, target, false).map_err(|e| (409, e))
}
