//! The delete step machine.

use guest_kit::log;
use guest_kit::machine::MachineRequest;
use guest_kit::types::{PluginError, Progress};

use super::cloudinit::delete_volume;
use super::context::Ctx;
use super::ownership::owned_by;
use super::properties::str_of;
use super::state::{DeleteStep, State};
use super::tasks::{poll, task_failed, upid_of};
use super::{RETRY_MS, SHORT_MS};
use crate::api::Pve;
use crate::spec::{ClusterSpec, MachineSpec};

// ---------------------------------------------------------------------------------
// delete
// ---------------------------------------------------------------------------------

pub(super) fn delete(req: &MachineRequest) -> Result<Option<Progress>, PluginError> {
    // A spec that no longer parses must not block deletion: only the UIDs are needed.
    let pve = Pve::new(&req.credentials);
    let cx = match Ctx::new(req) {
        Ok(cx) => cx,
        Err(_) => Ctx {
            req,
            spec: MachineSpec::default(),
            cluster: ClusterSpec::default(),
            nics: vec![],
            pve,
        },
    };
    let mut st: State = guest_kit::state::load(req.state.as_deref())?;
    let progress = |st: &State, phase: &str, msg: String, ms: u64| {
        Ok(Some(Progress {
            state: guest_kit::state::save(st),
            phase: phase.into(),
            message: msg,
            requeue_after_ms: Some(ms),
        }))
    };
    for _ in 0..6 {
        match st.delete {
            None => {
                // Locate this machine's VM: the recorded one if it is ours, else by marker.
                let recorded = match (st.vmid, &st.node) {
                    (Some(vmid), Some(_)) => match cx.get_config(&st) {
                        Ok(c) if owned_by(&c, cx.uid()) => true,
                        Ok(c) => {
                            log::warn(
                                "the recorded VMID belongs to another VM; leaving it alone",
                                &[
                                    ("vmid", vmid.to_string()),
                                    ("name", str_of(&c, "name").unwrap_or_default()),
                                ],
                            );
                            false
                        }
                        Err(e) if e.is_not_found() => false,
                        Err(e) => return Err(e.classify("reading the VM to delete")),
                    },
                    _ => false,
                };
                if !recorded {
                    match cx.find_owned()? {
                        Some((node, vmid, _)) => {
                            st.node = Some(node);
                            st.vmid = Some(vmid);
                        }
                        None => {
                            st.vmid = None;
                            st.delete = Some(DeleteStep::RemovingIso);
                            continue;
                        }
                    }
                }
                st.delete = Some(DeleteStep::Stopping);
            }
            Some(DeleteStep::Stopping) => {
                if let Some(upid) = st.upid.clone() {
                    match poll(&cx.pve, &upid, "following the stop task")? {
                        Ok(false) => {
                            return progress(&st, "Stopping", "stop task running".into(), SHORT_MS);
                        }
                        Ok(true) => st.upid = None,
                        Err(msg) => {
                            st.upid = None;
                            return progress(
                                &st,
                                "Stopping",
                                format!("stop failed ({msg}); retrying"),
                                RETRY_MS,
                            );
                        }
                    }
                }
                let current = match cx
                    .pve
                    .get(&format!("{}/status/current", cx.config_path(&st)))
                {
                    Ok(c) => c,
                    Err(e) if e.is_not_found() => {
                        st.delete = Some(DeleteStep::Confirming);
                        continue;
                    }
                    Err(e) => return Err(e.classify("reading the VM status")),
                };
                if let Some(lock) = str_of(&current, "lock") {
                    return progress(
                        &st,
                        "Stopping",
                        format!("VM is locked ({lock}); waiting"),
                        SHORT_MS,
                    );
                }
                if str_of(&current, "status").as_deref() == Some("stopped") {
                    st.delete = Some(DeleteStep::Deleting);
                    continue;
                }
                cx.owned_config(&st, "stopping the VM")?;
                let v = cx
                    .pve
                    .post(&format!("{}/status/stop", cx.config_path(&st)), &[])
                    .map_err(|e| e.classify("stopping the VM"))?;
                st.upid = upid_of(v);
                return progress(&st, "Stopping", "stopping the VM".into(), SHORT_MS);
            }
            Some(DeleteStep::Deleting) => {
                if let Some(upid) = st.upid.clone() {
                    match poll(&cx.pve, &upid, "following the destroy task")? {
                        Ok(false) => {
                            return progress(
                                &st,
                                "Deleting",
                                "destroy task running".into(),
                                SHORT_MS,
                            );
                        }
                        Ok(true) => {
                            st.upid = None;
                            st.delete = Some(DeleteStep::Confirming);
                            continue;
                        }
                        Err(msg) => {
                            st.upid = None;
                            if let Some(e) = task_failed("destroying the VM", &msg) {
                                return Err(e);
                            }
                            // Started again meanwhile, locked...: go back to stopping.
                            st.delete = Some(DeleteStep::Stopping);
                            return progress(
                                &st,
                                "Deleting",
                                format!("destroy failed ({msg}); retrying"),
                                RETRY_MS,
                            );
                        }
                    }
                }
                match cx.owned_config(&st, "destroying the VM") {
                    Ok(_) => {}
                    Err(PluginError::Transient(_))
                        if cx.get_config(&st).is_err_and(|e| e.is_not_found()) =>
                    {
                        st.delete = Some(DeleteStep::Confirming);
                        continue;
                    }
                    Err(e) => return Err(e),
                }
                let v = cx
                    .pve
                    .delete(
                        &cx.config_path(&st),
                        &[
                            ("purge", "1".into()),
                            ("destroy-unreferenced-disks", "1".into()),
                        ],
                    )
                    .map_err(|e| e.classify("destroying the VM"))?;
                st.upid = upid_of(v);
                return progress(&st, "Deleting", "destroying the VM".into(), SHORT_MS);
            }
            Some(DeleteStep::Confirming) => match cx.get_config(&st) {
                Err(e) if e.is_not_found() => st.delete = Some(DeleteStep::RemovingIso),
                Ok(c) if !owned_by(&c, cx.uid()) => st.delete = Some(DeleteStep::RemovingIso),
                Ok(_) => {
                    st.delete = Some(DeleteStep::Deleting);
                    return progress(
                        &st,
                        "Deleting",
                        "the VM is still there; destroying again".into(),
                        SHORT_MS,
                    );
                }
                Err(e) => return Err(e.classify("confirming the VM is gone")),
            },
            Some(DeleteStep::RemovingIso) => {
                if let (Some(volid), Some(node)) = (st.iso.clone(), st.node.clone()) {
                    delete_volume(&cx.pve, &node, &volid)?;
                }
                st.iso = None;
                return Ok(None);
            }
        }
    }
    progress(&st, "Deleting", "continuing".into(), SHORT_MS)
}
