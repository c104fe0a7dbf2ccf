//! `/nodes`, `/nodes/{node}/status`, `/nodes/{node}/certificates/info`.

use serde_json::{Value, json};

use super::Call;
use crate::envelope::ApiResult;

/// `GET /nodes`: every node with the listener's `ssl_fingerprint`, and its figures where
/// the caller has `Sys.Audit` on `/nodes/<node>`.
pub fn list(c: &mut Call) -> ApiResult {
    let w = c.shared.lock();
    Ok(Value::Array(
        w.nodes
            .keys()
            .map(|n| {
                let audit = c.can(&w, &format!("/nodes/{n}"), "Sys.Audit");
                let mut v = super::cluster::node_resource(&w, n, audit);
                if let Some(o) = v.as_object_mut() {
                    o.remove("cgroup-mode");
                }
                if !c.shared.fingerprint.is_empty() {
                    v["ssl_fingerprint"] = json!(c.shared.fingerprint);
                }
                v
            })
            .collect(),
    ))
}

/// `GET /nodes/{node}/status`.
pub fn status(c: &mut Call) -> ApiResult {
    let w = c.shared.lock();
    let n = &w.nodes[c.node()];
    let used = w.node_mem_used(&n.name);
    let (maj, min) = c.shared.config.version_tuple();
    let kernel = if maj >= 9 {
        "6.17.2-1-pve"
    } else {
        "6.8.12-4-pve"
    };
    Ok(json!({
        "uptime": w.boot.elapsed().as_secs() + 86_400,
        "cpu": 0.02,
        "wait": 0.0,
        "idle": 0,
        "loadavg": ["0.10", "0.05", "0.01"],
        "pveversion": format!("pve-manager/{}/5ba5e9d5", c.shared.config.pve_version),
        "kversion": format!("Linux {kernel} #1 SMP PREEMPT_DYNAMIC PMX {kernel}"),
        "current-kernel": {"sysname": "Linux", "release": kernel, "machine": "x86_64", "version": format!("#1 SMP PREEMPT_DYNAMIC PMX {kernel} ({maj}.{min})")},
        "boot-info": {"mode": "efi", "secureboot": 0},
        "cpuinfo": {
            "model": "pve-sim virtual CPU",
            "cpus": n.cpus,
            "cores": n.cpus / 2,
            "sockets": 1,
            "mhz": "2400.000",
            "hvm": "1",
            "user_hz": 100,
            "flags": "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall nx lm vmx",
        },
        "memory": {"total": n.memory, "used": used, "free": n.memory.saturating_sub(used), "available": n.memory.saturating_sub(used)},
        "swap": {"total": 0, "used": 0, "free": 0},
        "ksm": {"shared": 0},
        "rootfs": {"total": 100u64 << 30, "used": 8u64 << 30, "free": 92u64 << 30, "avail": 92u64 << 30},
    }))
}

/// `GET /nodes/{node}/certificates/info`: the listener's leaf.
pub fn certificates(c: &mut Call) -> ApiResult {
    if c.shared.fingerprint.is_empty() {
        return Ok(json!([]));
    }
    Ok(json!([{
        "filename": "pve-ssl.pem",
        "fingerprint": c.shared.fingerprint,
        "issuer": "/CN=Proxmox Virtual Environment (pve-sim)/OU=pve-sim/O=PVE Cluster Manager CA",
        "subject": "/CN=pve-sim/O=PVE Cluster Node",
        "san": ["localhost", "127.0.0.1"],
        "public-key-type": "ecdsa",
    }]))
}
