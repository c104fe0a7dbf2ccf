//! The delete step machine.

use guest_kit::log;
use guest_kit::machine::MachineRequest;
use guest_kit::types::{PluginError, Progress};

use super::cloudinit::{delete_volume, following_iso_removal};
use super::context::Ctx;
use super::ownership::Located;
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
            resources: Default::default(),
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
                // A task create was following is not ours to follow.
                st.upid = None;
                // Locate this machine's VM: the recorded one (followed to another node
                // if it migrated) if it is ours, else by marker.
                match cx.locate(&mut st)? {
                    Located::Ours(_) => {
                        st.delete = Some(DeleteStep::Stopping);
                        continue;
                    }
                    // Maybe this machine's clone, before PVE writes its config: wait.
                    Located::Cloning => {
                        return progress(
                            &st,
                            "Stopping",
                            format!(
                                "VM {} is still being cloned; waiting to see whose it is",
                                st.vmid.unwrap_or_default()
                            ),
                            SHORT_MS,
                        );
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
                    }
                    None => {
                        st.vmid = None;
                        st.delete = Some(DeleteStep::RemovingIso);
                        continue;
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
                cx.owned_config(&mut st, "stopping the VM")?;
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
                match cx.locate(&mut st)? {
                    Located::Ours(_) => {}
                    // Gone (or the VMID is someone else's now): confirm.
                    _ => {
                        st.delete = Some(DeleteStep::Confirming);
                        continue;
                    }
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
            // Gone from its node, and not ours on another one (a migration mid-delete).
            Some(DeleteStep::Confirming) => match cx.locate(&mut st)? {
                Located::Ours(_) => {
                    st.delete = Some(DeleteStep::Stopping);
                    return progress(
                        &st,
                        "Deleting",
                        "the VM is still there; stopping and destroying it again".into(),
                        SHORT_MS,
                    );
                }
                _ => st.delete = Some(DeleteStep::RemovingIso),
            },
            Some(DeleteStep::RemovingIso) => {
                if let Some(p) = following_iso_removal(&cx, &mut st, "Deleting")? {
                    return Ok(Some(p.progress));
                }
                let node = st.iso_node.clone().or_else(|| st.node.clone());
                if let (Some(volid), Some(node)) = (st.iso.clone(), node)
                    && let Some(upid) = delete_volume(&cx.pve, &node, &volid)?
                {
                    st.upid = Some(upid);
                    return progress(&st, "Deleting", "removing the NoCloud ISO".into(), SHORT_MS);
                }
                return Ok(None);
            }
        }
    }
    progress(&st, "Deleting", "continuing".into(), SHORT_MS)
}
