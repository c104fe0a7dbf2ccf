//! `DELETE /nodes/{node}/qemu/{vmid}`.

use serde_json::json;

use crate::api::{Call, check_lock, vm_on};
use crate::envelope::{ApiError, ApiResult};
use crate::params::split_indexed;
use crate::state::{Destroyed, drive_options, is_drive_key, unix_now_ms};
use crate::tasks::{self, TaskSpec};

use super::{missing_vm, remove_volume};

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
    let user = c.user.clone();
    let spec = TaskSpec::new(
        c,
        "qmdestroy",
        &vmid.to_string(),
        Box::new(move |w, inj| {
            if let Some(e) = inj {
                return Err(e);
            }
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
            if let Some(vm) = w.vms.remove(&vmid) {
                w.destroyed.push(Destroyed {
                    vmid,
                    node: vm.node,
                    user,
                    at_ms: unix_now_ms(),
                    config: vm.config,
                });
            }
            if purge {
                for members in w.pools.values_mut() {
                    members.remove(&vmid);
                }
            }
            Ok(log)
        }),
    );
    let upid = tasks::start(&sh, &mut w, spec);
    Ok(json!(upid))
}
