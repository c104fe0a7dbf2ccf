//! Adopting or cloning the VM, and following the clone task.

use std::collections::BTreeSet;

use guest_kit::machine::MachineStatus;
use guest_kit::types::PluginError;
use guest_kit::{log, terminal, transient};

use super::context::Ctx;
use super::ownership::description;
use super::properties::{str_of, uuid_of};
use super::scheduler::pick_node;
use super::state::{State, Step};
use super::tasks::{poll, task_failed, upid_of};
use super::template::resolve_template;
use super::vmid::{next_vmid, vmid_taken};
use super::{RETRY_MS, SHORT_MS, VMID_TRIES};
use crate::api::percent_encode;

/// No VM recorded: adopt ours if it exists, else pick a node and a VMID and clone.
pub(super) fn start(cx: &Ctx, st: &mut State) -> Result<Option<MachineStatus>, PluginError> {
    if let Some((node, vmid, config)) = cx.find_owned()? {
        log::info(
            "adopting the existing VM of this machine",
            &[("vmid", vmid.to_string()), ("node", node.clone())],
        );
        st.node = Some(node);
        st.vmid = Some(vmid);
        st.uuid = uuid_of(&config);
        st.upid = None;
        st.step = if str_of(&config, "lock").as_deref() == Some("clone") {
            Step::Cloning
        } else {
            Step::Configuring
        };
        // A running VM has booted from its seed already: only its addresses are missing.
        if st.step == Step::Configuring {
            let current = cx
                .pve
                .get(&format!("{}/status/current", cx.config_path(st)))
                .map_err(|e| e.classify("reading the adopted VM's status"))?;
            if str_of(&current, "status").as_deref() == Some("running") {
                st.step = Step::WaitingForGuestAgent;
            }
        }
        return Ok(None);
    }
    let (src_node, template) = resolve_template(cx)?;
    let node = pick_node(cx)?;
    let full = cx.spec.full.unwrap_or(true);
    let mut form: Vec<(&str, String)> = vec![
        ("name", cx.req.machine.name.clone()),
        ("description", description(&cx.spec, cx.req)),
        ("full", if full { "1" } else { "0" }.into()),
    ];
    if node != src_node {
        form.push(("target", node.clone()));
    }
    if full {
        if let Some(s) = &cx.spec.storage {
            form.push(("storage", s.clone()));
        }
        if let Some(f) = cx.spec.format {
            let f = serde_json::to_value(f)
                .ok()
                .and_then(|v| v.as_str().map(String::from));
            form.push(("format", f.unwrap_or_default()));
        }
    }
    if let Some(p) = &cx.spec.pool {
        form.push(("pool", p.clone()));
    }
    if let Some(s) = &cx.spec.snap_name {
        form.push(("snapname", s.clone()));
    }
    let path = format!("/nodes/{}/qemu/{template}/clone", percent_encode(&src_node));
    let mut tried = BTreeSet::new();
    for attempt in 0..VMID_TRIES {
        let Some(vmid) = next_vmid(cx, attempt, &tried)? else {
            break;
        };
        tried.insert(vmid);
        let mut f = form.clone();
        f.push(("newid", vmid.to_string()));
        match cx.pve.post(&path, &f) {
            Ok(v) => {
                log::info(
                    "cloning",
                    &[
                        ("vmid", vmid.to_string()),
                        ("node", node.clone()),
                        ("template", template.to_string()),
                    ],
                );
                st.node = Some(node);
                st.vmid = Some(vmid);
                st.upid = upid_of(v);
                st.step = Step::Cloning;
                return Ok(None);
            }
            Err(e) if vmid_taken(&e) => {
                log::debug("VMID taken, trying another", &[("vmid", vmid.to_string())]);
                continue;
            }
            Err(e) if e.is_not_found() && e.to_string().contains(&format!("/{template}.conf")) => {
                return Err(terminal(
                    "TemplateNotFound",
                    format!("cloning template {template} on {src_node}: {e}"),
                ));
            }
            Err(e) => return Err(e.classify(&format!("cloning template {template} to VM {vmid}"))),
        }
    }
    Err(transient(
        format!(
            "no free VMID after {} tries ({})",
            tried.len(),
            match &cx.spec.vm_id_range {
                Some(r) => format!("vmIDRange {}-{}", r.start, r.end),
                None => "cluster nextid".into(),
            }
        ),
        Some(RETRY_MS),
    ))
}

pub(super) fn cloning(cx: &Ctx, st: &mut State) -> Result<Option<MachineStatus>, PluginError> {
    if let Some(upid) = st.upid.clone() {
        match poll(&cx.pve, &upid, "following the clone task")? {
            Ok(false) => {
                return Ok(Some(cx.status(
                    st,
                    "Cloning",
                    "clone task running",
                    Some(SHORT_MS),
                )));
            }
            Ok(true) => {}
            Err(msg) => {
                if let Some(e) = task_failed("clone task failed", &msg) {
                    return Err(e);
                }
                let vmid = st.vmid.unwrap_or_default();
                *st = State::default();
                return Ok(Some(cx.status(
                    st,
                    "Cloning",
                    format!("clone to VM {vmid} failed ({msg}); retrying with a new clone"),
                    Some(RETRY_MS),
                )));
            }
        }
    }
    // Adopted mid-clone (or the task is done): the VM is ready once the lock is gone.
    match cx.get_config(st) {
        Ok(c) if str_of(&c, "lock").as_deref() == Some("clone") => {
            st.upid = None;
            Ok(Some(cx.status(
                st,
                "Cloning",
                "VM still locked by its clone",
                Some(SHORT_MS),
            )))
        }
        Ok(c) => {
            st.uuid = uuid_of(&c);
            st.upid = None;
            st.step = Step::Configuring;
            Ok(None)
        }
        Err(e) if e.is_not_found() => {
            // The clone failed and PVE removed the VM: start over.
            *st = State::default();
            Ok(Some(cx.status(
                st,
                "Cloning",
                "the cloned VM is gone; cloning again",
                Some(SHORT_MS),
            )))
        }
        Err(e) => Err(e.classify("reading the cloned VM")),
    }
}
