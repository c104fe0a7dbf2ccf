//! Adopting or cloning the VM, and following the clone task.
//!
//! The VMID is chosen in one call and the clone asked for in the next, so the host has
//! saved it before PVE sees it: whatever happens to a call's result afterwards, the next
//! call asks for that clone again, PVE refuses the VMID its first clone holds, and the
//! refusal makes the call look there and find its own clone rather than make a second.
//! A VMID another client takes first (refused at once, or lost inside the clone task, as
//! PVE lets two clones race for one ID) is replaced by another.
//! Asking in one call would save a status write on the way to the first task, but a
//! lost answer would then leave no VMID: a delete could not find a clone whose config
//! shows no owner yet, and the create's recovery would rest on the cluster listing
//! showing the fresh clone at once.

use std::collections::BTreeSet;

use guest_kit::machine::MachineStatus;
use guest_kit::types::PluginError;
use guest_kit::{log, terminal, transient};

use super::cloudinit::iso_storage;
use super::context::Ctx;
use super::ownership::{Located, description, owned_by};
use super::properties::{str_of, uuid_of};
use super::scheduler::{Source as Placement, pick_node, pinned_to};
use super::state::{Source, State, Step};
use super::tasks::{poll, task_failed, upid_of};
use super::template::{Reach, resolve_template, template_reach};
use super::vmid::{self, next_vmid, vmid_taken};
use super::{RETRY_MS, SHORT_MS};
use crate::api::percent_encode;

/// No VM recorded: adopt ours if it exists, else pick the template, a node it can be
/// cloned to, and a VMID, and record them.
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
        st.awaiting = None;
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
    // A VM another provider made and recorded on the machine: adopted if it proves to
    // be this machine's, never replaced by a clone.
    if let Some(claimed) = cx.claimed_by_another_provider() {
        cx.take_over(&claimed, st)?;
        return Ok(None);
    }
    if let Some(id) = &cx.spec.provider_id {
        return Err(terminal(
            "VMNotFound",
            format!(
                "spec.providerID is {id}, so this machine was provisioned, but no VM carries its marker ({}); a provisioned machine's VM is never made again: delete the machine to replace it",
                super::ownership::marker(cx.uid())
            ),
        ));
    }
    let (src_node, template) = resolve_template(cx)?;
    // A clone of this template in its first phase shows no owner yet and may be this
    // machine's (a call whose result was lost): wait for the ones seen now to show theirs,
    // except those another machine of this manager holds the VMID of (theirs, not ours).
    let mut unreadable = cx.unreadable_clones(&src_node)?;
    unreadable.retain(|&id| !vmid::held_elsewhere(cx, id));
    let waiting: BTreeSet<u32> = match &st.awaiting {
        None => unreadable,
        Some(seen) => seen.intersection(&unreadable).copied().collect(),
    };
    if !waiting.is_empty() {
        // Not named: those clones may be other tenants' VMs.
        let n = waiting.len();
        st.awaiting = Some(waiting);
        return Ok(Some(cx.status(
            st,
            "Pending",
            format!(
                "{n} clone(s) on {src_node} show no owner yet (their first phase); waiting to tell they are not this machine's"
            ),
            Some(SHORT_MS),
        )));
    }
    st.awaiting = None;
    // Where the template can be cloned to matters only when the VM may land elsewhere
    // than on the template's own node, which a template always reaches: a machine
    // pinned there (allowed nodes and failure domain) reads no template config.
    let reach = if pinned_to(cx, &src_node) {
        Reach::Anywhere
    } else {
        template_reach(cx, &src_node, template)?
    };
    let node = pick_node(
        cx,
        &Placement {
            node: &src_node,
            template,
            reach: &reach,
        },
    )?;
    let vmid = propose_vmid(cx, st, &BTreeSet::new())?;
    // The ISO storage is chosen now, from the listing this call has read: a node
    // without one fails before anything is cloned, and the upload asks nothing more.
    let iso = iso_storage(cx, st, &node)?;
    if cx
        .spec
        .cloud_init
        .as_ref()
        .and_then(|c| c.iso_storage.as_ref())
        .is_none()
    {
        st.iso_at = Some((node.clone(), iso));
    }
    st.source = Some(Source {
        node: src_node,
        template,
    });
    st.node = Some(node.clone());
    st.vmid = Some(vmid);
    st.upid = None;
    st.step = Step::Cloning;
    Ok(Some(cx.status(
        st,
        "Cloning",
        format!("cloning template {template} to VM {vmid} on {node}"),
        Some(0),
    )))
}

/// A VMID to clone to, other than those `tried` (the clone verifies it).
fn propose_vmid(cx: &Ctx, st: &State, tried: &BTreeSet<u32>) -> Result<u32, PluginError> {
    next_vmid(cx, st.collisions, tried)?.ok_or_else(|| {
        transient(
            match &cx.spec.vm_id_range {
                Some(r) => format!("no free VMID in vmIDRange {}-{}", r.start, r.end),
                None => "no free VMID".into(),
            },
            Some(RETRY_MS),
        )
    })
}

/// The recorded VMID is someone else's: record another one.
fn another_vmid(
    cx: &Ctx,
    st: &mut State,
    why: String,
) -> Result<Option<MachineStatus>, PluginError> {
    let taken = st.vmid.unwrap_or_default();
    vmid::release(cx, taken);
    st.collisions += 1;
    let vmid = propose_vmid(cx, st, &BTreeSet::from([taken]))?;
    log::debug(
        "VMID taken, trying another",
        &[("vmid", taken.to_string()), ("next", vmid.to_string())],
    );
    st.vmid = Some(vmid);
    st.upid = None;
    st.look_first = false;
    Ok(Some(cx.status(
        st,
        "Cloning",
        format!("{why}; cloning to VM {vmid} instead"),
        Some(0),
    )))
}

pub(super) fn cloning(cx: &Ctx, st: &mut State) -> Result<Option<MachineStatus>, PluginError> {
    let vmid = st.vmid.unwrap_or_default();
    if let Some(upid) = st.upid.clone() {
        // The clone is over once its config is at the target node, ours and unlocked
        // (PVE builds a clone to another node on the template's, and moves its config to
        // the target last): only the target is read, and the task's status only when
        // the config there does not say so.
        if let Ok(c) = cx.get_config(st)
            && owned_by(&c, cx.uid())
            && !clone_locked(&c)
        {
            st.upid = None;
            return Ok(cloned(cx, st, &c));
        }
        match poll(&cx.pve, &upid, "following the clone task")? {
            Ok(false) => {
                // Until the task writes the VM's config, `nextid` still offers the ID
                // (a task can wait minutes for its node): keep holding it.
                vmid::hold_id(cx, vmid);
                return Ok(Some(cx.status(
                    st,
                    "Cloning",
                    "clone task running",
                    Some(SHORT_MS),
                )));
            }
            Ok(true) => st.upid = None,
            Err(msg) => {
                if let Some(e) = task_failed("clone task failed", &msg) {
                    return Err(e);
                }
                // Lost the VMID to another clone, or failed: what VM N is decides next.
                st.upid = None;
                st.look_first = true;
                return Ok(Some(cx.status(
                    st,
                    "Cloning",
                    format!(
                        "clone to VM {vmid} failed ({msg}); checking VM {vmid} before going on"
                    ),
                    Some(SHORT_MS),
                )));
            }
        }
    } else if !st.look_first {
        // Nothing seen at this VMID yet: the clone request itself is the check (PVE
        // refuses a VMID in use at once), and only a refusal is looked into.
        return post_clone(cx, st);
    }
    found(cx, st)
}

/// What the recorded VMID holds decides: this machine's clone (done, or still being
/// written), someone else's VM (another VMID), or nothing (clone to it).
fn found(cx: &Ctx, st: &mut State) -> Result<Option<MachineStatus>, PluginError> {
    let vmid = st.vmid.unwrap_or_default();
    match cx.locate(st)? {
        Located::Ours(c) if clone_locked(&c) => {
            st.look_first = true;
            Ok(Some(cx.status(
                st,
                "Cloning",
                "VM still locked by its clone",
                Some(SHORT_MS),
            )))
        }
        Located::Ours(c) => Ok(cloned(cx, st, &c)),
        Located::Cloning => {
            st.look_first = true;
            Ok(Some(cx.status(
                st,
                "Cloning",
                format!("VM {vmid} is being cloned; its owner shows once its first disk is copied"),
                Some(SHORT_MS),
            )))
        }
        Located::Foreign(c) => another_vmid(
            cx,
            st,
            format!(
                "VMID {vmid} is taken by another VM ({})",
                str_of(&c, "name").unwrap_or_default()
            ),
        ),
        // Nothing there (any more): clone to it; a refusal now means another VMID.
        Located::Gone => {
            st.look_first = true;
            post_clone(cx, st)
        }
    }
}

fn clone_locked(config: &serde_json::Value) -> bool {
    str_of(config, "lock").as_deref() == Some("clone")
}

/// The clone is done and its config (`config`) written: on to configuring it.
fn cloned(cx: &Ctx, st: &mut State, config: &serde_json::Value) -> Option<MachineStatus> {
    // Its config is written: `nextid` no longer offers the ID.
    vmid::release(cx, st.vmid.unwrap_or_default());
    st.uuid = uuid_of(config);
    st.source = None;
    st.collisions = 0;
    st.look_first = false;
    st.step = Step::Configuring;
    None
}

/// Starts the clone to the recorded node and VMID.
fn post_clone(cx: &Ctx, st: &mut State) -> Result<Option<MachineStatus>, PluginError> {
    let Source {
        node: src_node,
        template,
    } = match st.source.clone() {
        Some(s) => s,
        None => {
            let (node, template) = resolve_template(cx)?;
            Source { node, template }
        }
    };
    let vmid = st.vmid.unwrap_or_default();
    // The hold may have lapsed while this machine waited for its turn (a long queue):
    // hold the ID again, or leave it to the machine that proposes it now.
    if !vmid::hold_id(cx, vmid) {
        return another_vmid(
            cx,
            st,
            format!("VMID {vmid} is now proposed by another machine of this manager"),
        );
    }
    let node = st.node.clone().unwrap_or_else(|| src_node.clone());
    let full = cx.spec.full.unwrap_or(true);
    let mut form: Vec<(&str, String)> = vec![
        ("newid", vmid.to_string()),
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
    match cx.pve.post(&path, &form) {
        Ok(v) => {
            log::info(
                "cloning",
                &[
                    ("vmid", vmid.to_string()),
                    ("node", node.clone()),
                    ("template", template.to_string()),
                ],
            );
            st.source = Some(Source {
                node: src_node,
                template,
            });
            st.upid = upid_of(v);
            st.look_first = false;
            Ok(Some(cx.status(
                st,
                "Cloning",
                format!("cloning template {template} to VM {vmid} on {node}"),
                Some(SHORT_MS),
            )))
        }
        // Taken: maybe by this machine's own clone (a call whose result was lost), so
        // what holds it is looked at before another VMID is tried.
        Err(e) if vmid_taken(&e) && !st.look_first => {
            st.look_first = true;
            found(cx, st)
        }
        Err(e) if vmid_taken(&e) => another_vmid(cx, st, format!("VMID {vmid} is taken")),
        Err(e) if e.is_not_found() && e.to_string().contains(&format!("/{template}.conf")) => {
            Err(terminal(
                "TemplateNotFound",
                format!("cloning template {template} on {src_node}: {e}"),
            ))
        }
        Err(e) => Err(e.classify(&format!("cloning template {template} to VM {vmid}"))),
    }
}
