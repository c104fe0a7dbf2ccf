//! The delete step machine: locate this machine's VM (never another's), stop it,
//! destroy it, confirm it gone, remove its NoCloud ISO. Each step does a few API calls
//! and either goes on to the next within the call or hands back progress.

use guest_kit::log;
use guest_kit::machine::MachineRequest;
use guest_kit::types::{PluginError, Progress};

use super::cloudinit::{delete_volume, following_iso_removal, untracked_upload};
use super::context::Ctx;
use super::ownership::Located;
use super::properties::str_of;
use super::state::{DeleteStep, State, Step};
use super::tasks::{poll, task_failed, upid_of, waits_for};
use super::{RETRY_MS, SHORT_MS};
use crate::api::{Pve, Task};
use crate::spec::{ClusterSpec, MachineSpec};

/// What one step came to.
enum Next {
    /// On to the step now in the state, within this call.
    Continue,
    /// Call again later, with this progress.
    Wait(Progress),
    /// The VM and its ISO are gone.
    Done,
}

/// Steps one call may take before it hands back progress.
const STEPS_PER_CALL: usize = 6;

pub(super) fn delete(req: &MachineRequest) -> Result<Option<Progress>, PluginError> {
    let cx = context(req);
    let mut st: State = guest_kit::state::load(req.state.as_deref())?;
    if st.delete.is_none() {
        untracked_upload(&cx, &mut st)?;
    }
    for _ in 0..STEPS_PER_CALL {
        let next = match st.delete {
            None => locate(&cx, &mut st)?,
            Some(DeleteStep::Stopping) => stop(&cx, &mut st)?,
            Some(DeleteStep::Deleting) => destroy(&cx, &mut st)?,
            Some(DeleteStep::Confirming) => confirm(&cx, &mut st)?,
            Some(DeleteStep::RemovingIso) => remove_iso(&cx, &mut st)?,
        };
        match next {
            Next::Continue => {}
            Next::Wait(progress) => return Ok(Some(progress)),
            Next::Done => return Ok(None),
        }
    }
    Ok(Some(waiting(
        &cx,
        &st,
        "Deleting",
        "continuing".into(),
        SHORT_MS,
    )))
}

/// The call's context. A spec that no longer parses must not block deletion: only the
/// UIDs are needed.
fn context(req: &MachineRequest) -> Ctx<'_> {
    Ctx::new(req).unwrap_or_else(|_| Ctx {
        req,
        spec: MachineSpec::default(),
        cluster: ClusterSpec::default(),
        nics: vec![],
        pve: Pve::new(&req.credentials),
        resources: Default::default(),
    })
}

fn waiting(cx: &Ctx, st: &State, phase: &str, message: String, ms: u64) -> Progress {
    let (waits, requeue) = waits_for(st.upid.as_deref(), &cx.req.credentials.endpoint, Some(ms));
    Progress {
        state: guest_kit::state::save(st),
        phase: phase.into(),
        message,
        requeue_after_ms: requeue,
        waits,
        // Deletion starts over from whatever the recorded VMID shows.
        durable: false,
    }
}

fn wait(cx: &Ctx, st: &State, phase: &str, message: String, ms: u64) -> Result<Next, PluginError> {
    Ok(Next::Wait(waiting(cx, st, phase, message, ms)))
}

/// Find this machine's VM: the recorded one (followed to another node if it migrated)
/// if it is ours, else one carrying its marker; none at all goes straight to the ISO.
fn locate(cx: &Ctx, st: &mut State) -> Result<Next, PluginError> {
    if let Some(next) = creation_in_flight(cx, st)? {
        return Ok(next);
    }
    // Any other task create was following is not ours to follow.
    st.upid = None;
    match cx.locate(st)? {
        Located::Ours(_) => {
            st.delete = Some(DeleteStep::Stopping);
            return Ok(Next::Continue);
        }
        // Maybe this machine's clone, before PVE writes its config: wait.
        Located::Cloning => {
            let message = format!(
                "VM {} is still being cloned; waiting to see whose it is",
                st.vmid.unwrap_or_default()
            );
            return wait(cx, st, "Stopping", message, SHORT_MS);
        }
        Located::Foreign(c) => log::warn(
            "the recorded VMID belongs to another VM; leaving it alone",
            &[
                ("vmid", st.vmid.unwrap_or_default().to_string()),
                ("name", str_of(&c, "name").unwrap_or_default()),
            ],
        ),
        Located::Gone => {}
    }
    match cx.find_owned()? {
        Some((node, vmid, _)) => {
            st.node = Some(node);
            st.vmid = Some(vmid);
            st.delete = Some(DeleteStep::Stopping);
        }
        None => {
            st.vmid = None;
            st.delete = Some(DeleteStep::RemovingIso);
        }
    }
    Ok(Next::Continue)
}

/// A clone or an ISO upload create asked for is followed to its end before anything is
/// concluded. PVE accepts a clone (and hands back its task) before the task has written
/// even the temporary config of the new VM (its worker first waits for the config locks
/// of the template and the VMID), so until the task ends, "no VM with this VMID" does not
/// mean there will be none, and a delete that went by it would leave the clone behind,
/// marked as this machine's. Likewise an upload's ISO is in its storage only once its
/// task ends: removed before, it would be written after and left behind. `None` once
/// there is no such task (any more).
fn creation_in_flight(cx: &Ctx, st: &mut State) -> Result<Option<Next>, PluginError> {
    let what = match st.step {
        Step::Cloning => format!("the clone to VM {}", st.vmid.unwrap_or_default()),
        Step::UploadingCloudInit if st.iso.is_some() => "the NoCloud ISO's upload".to_string(),
        _ => return Ok(None),
    };
    let Some(upid) = st.upid.clone() else {
        return Ok(None);
    };
    match cx.pve.task(&upid) {
        Ok(Task::Running) => {
            let message = format!("{what} is still running; waiting for it to end before deleting");
            wait(cx, st, "Stopping", message, SHORT_MS).map(Some)
        }
        Ok(Task::Done | Task::Failed(_)) => {
            st.upid = None;
            Ok(None)
        }
        // PVE no longer knows the task (it keeps a node's recent ones): it has ended.
        Err(e) if e.is_no_such_task() => {
            st.upid = None;
            Ok(None)
        }
        Err(e) => Err(e.classify(&format!("following {what} before deleting"))),
    }
}

/// Stop the VM. Its stop task is not followed here: the destroy that comes next is
/// refused while the VM runs, and only then is the task asked about (see [`destroy`]).
fn stop(cx: &Ctx, st: &mut State) -> Result<Next, PluginError> {
    if st.upid.is_some() {
        st.delete = Some(DeleteStep::Deleting);
        return Ok(Next::Continue);
    }
    match cx.locate(st)? {
        Located::Ours(c) => {
            if let Some(lock) = str_of(&c, "lock") {
                return wait(
                    cx,
                    st,
                    "Stopping",
                    format!("VM is locked ({lock}); waiting"),
                    SHORT_MS,
                );
            }
        }
        Located::Cloning => {
            let message = format!(
                "VM {} is still being cloned; waiting to see whose it is",
                st.vmid.unwrap_or_default()
            );
            return wait(cx, st, "Stopping", message, SHORT_MS);
        }
        // Gone, or the VMID is someone else's now: confirm.
        Located::Gone | Located::Foreign(_) => {
            st.delete = Some(DeleteStep::Confirming);
            return Ok(Next::Continue);
        }
    }
    // Stopping a stopped VM is a task that ends at once: cheaper than asking first.
    let v = cx
        .pve
        .post(&format!("{}/status/stop", cx.config_path(st)), &[])
        .map_err(|e| e.classify("stopping the VM"))?;
    st.upid = upid_of(v);
    wait(cx, st, "Stopping", "stopping the VM".into(), SHORT_MS)
}

/// Destroy the stopped VM, if it is still ours. `st.upid` is the stop task: asked about
/// only when PVE refuses the destroy because the VM still runs.
fn destroy(cx: &Ctx, st: &mut State) -> Result<Next, PluginError> {
    match cx.locate(st)? {
        Located::Ours(_) => {}
        // Gone (or the VMID is someone else's now): confirm.
        _ => {
            st.upid = None;
            st.delete = Some(DeleteStep::Confirming);
            return Ok(Next::Continue);
        }
    }
    let stop_task = st.upid.take();
    let v = match cx.pve.delete(
        &cx.config_path(st),
        &[
            ("purge", "1".into()),
            ("destroy-unreferenced-disks", "1".into()),
        ],
    ) {
        Ok(v) => v,
        Err(e) if e.to_string().contains("is running") => return still_running(cx, st, stop_task),
        Err(e) => return Err(e.classify("destroying the VM")),
    };
    st.upid = upid_of(v);
    st.delete = Some(DeleteStep::Confirming);
    wait(cx, st, "Deleting", "destroying the VM".into(), SHORT_MS)
}

/// PVE refused to destroy a running VM: its stop task (if any) is still running, failed,
/// or the VM was started again since; stopped again in the last two cases.
fn still_running(cx: &Ctx, st: &mut State, stop_task: Option<String>) -> Result<Next, PluginError> {
    if let Some(upid) = stop_task {
        match poll(&cx.pve, &upid, "following the stop task")? {
            Ok(false) => {
                st.upid = Some(upid);
                return wait(cx, st, "Stopping", "stop task running".into(), SHORT_MS);
            }
            Ok(true) => {}
            Err(msg) => {
                st.delete = Some(DeleteStep::Stopping);
                return wait(
                    cx,
                    st,
                    "Stopping",
                    format!("stop failed ({msg}); retrying"),
                    RETRY_MS,
                );
            }
        }
    }
    st.delete = Some(DeleteStep::Stopping);
    wait(
        cx,
        st,
        "Stopping",
        "the VM is running; stopping it".into(),
        SHORT_MS,
    )
}

/// Gone from its node, and not ours on another one (a migration mid-delete), nor
/// anywhere else by its marker: "not at the recorded VMID and node" is not proof that
/// it is gone (the VM may be on its way between nodes), and the finalizer goes next.
/// The cluster's listing is read first: a VMID it no longer lists needs no config read
/// (the listing shows every VM the token may audit, and each step before read this VM's
/// config, which takes that right). `st.upid` is the destroy task: asked about only
/// while the VM is still listed.
fn confirm(cx: &Ctx, st: &mut State) -> Result<Next, PluginError> {
    let vmid = st.vmid.map(u64::from);
    let listed = cx.qemu_vms()?.any(|v| vmid.is_some() && v.vmid == vmid);
    // Still listed while its destroy task is recorded: the task is asked first (woken
    // before it ended, the VM would be read mid-destroy). Once it ended, the next call
    // reads a fresh listing.
    if listed && let Some(upid) = st.upid.take() {
        return match poll(&cx.pve, &upid, "following the destroy task")? {
            Ok(false) => {
                st.upid = Some(upid);
                wait(cx, st, "Deleting", "destroy task running".into(), SHORT_MS)
            }
            Ok(true) => wait(cx, st, "Deleting", "destroyed; confirming".into(), SHORT_MS),
            Err(msg) => {
                if let Some(e) = task_failed("destroying the VM", &msg) {
                    return Err(e);
                }
                // Started again meanwhile, locked...: go back to stopping.
                st.delete = Some(DeleteStep::Stopping);
                wait(
                    cx,
                    st,
                    "Deleting",
                    format!("destroy failed ({msg}); retrying"),
                    RETRY_MS,
                )
            }
        };
    }
    let ours_at_vmid = listed && matches!(cx.locate(st)?, Located::Ours(_));
    let still_there = ours_at_vmid
        || match cx.find_owned()? {
            Some((node, vmid, _)) => {
                st.node = Some(node);
                st.vmid = Some(vmid);
                true
            }
            None => false,
        };
    st.upid = None;
    if !still_there {
        st.delete = Some(DeleteStep::RemovingIso);
        return Ok(Next::Continue);
    }
    st.delete = Some(DeleteStep::Stopping);
    wait(
        cx,
        st,
        "Deleting",
        "the VM is still there; stopping and destroying it again".into(),
        SHORT_MS,
    )
}

/// Remove the NoCloud ISO (following its removal task); then everything is gone.
fn remove_iso(cx: &Ctx, st: &mut State) -> Result<Next, PluginError> {
    if let Some(p) = following_iso_removal(cx, st, "Deleting")? {
        return Ok(Next::Wait(p.progress));
    }
    let node = st.iso_node.clone().or_else(|| st.node.clone());
    if let (Some(volid), Some(node)) = (st.iso.clone(), node)
        && let Some(upid) = delete_volume(&cx.pve, &node, &volid)?
    {
        st.upid = Some(upid);
        return wait(
            cx,
            st,
            "Deleting",
            "removing the NoCloud ISO".into(),
            SHORT_MS,
        );
    }
    Ok(Next::Done)
}
