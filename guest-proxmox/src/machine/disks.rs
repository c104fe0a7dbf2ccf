//! Growing the boot disk.

use guest_kit::invalid;
use guest_kit::machine::MachineStatus;
use guest_kit::types::PluginError;

use super::context::Ctx;
use super::properties::{option, parse_size, str_of};
use super::state::{State, Step};
use super::tasks::{poll, task_failed, upid_of};
use super::{RETRY_MS, SHORT_MS};

pub(super) fn resizing(cx: &Ctx, st: &mut State) -> Result<Option<MachineStatus>, PluginError> {
    let Some(boot) = cx.spec.disks.as_ref().and_then(|d| d.boot_volume.clone()) else {
        st.step = Step::UploadingCloudInit;
        return Ok(None);
    };
    if let Some(upid) = st.upid.clone() {
        match poll(&cx.pve, &upid, "following the resize task")? {
            Ok(false) => {
                return Ok(Some(cx.status(
                    st,
                    "Resizing",
                    format!("growing {}", boot.disk),
                    Some(SHORT_MS),
                )));
            }
            Ok(true) => {
                st.upid = None;
                st.step = Step::UploadingCloudInit;
                return Ok(None);
            }
            Err(msg) => {
                if let Some(e) = task_failed(&format!("resizing {}", boot.disk), &msg) {
                    return Err(e);
                }
                st.upid = None;
                return Ok(Some(cx.status(
                    st,
                    "Resizing",
                    format!("resizing {} failed ({msg}); retrying", boot.disk),
                    Some(RETRY_MS),
                )));
            }
        }
    }
    let config = cx.owned_config(st, "resizing the boot disk")?;
    let Some(drive) = str_of(&config, &boot.disk) else {
        return Err(invalid(
            "spec.disks.bootVolume.disk",
            format!("the VM has no disk {}", boot.disk),
        ));
    };
    let current = option(&drive, "size")
        .and_then(|s| parse_size(&s))
        .unwrap_or(0);
    let want = u64::from(boot.size_gb) << 30;
    if current >= want {
        st.step = Step::UploadingCloudInit;
        return Ok(None);
    }
    let v = cx
        .pve
        .put(
            &format!("{}/resize", cx.config_path(st)),
            &[
                ("disk", boot.disk.clone()),
                ("size", format!("{}G", boot.size_gb)),
            ],
        )
        .map_err(|e| e.classify(&format!("resizing {}", boot.disk)))?;
    match upid_of(v) {
        // PVE before 8 resizes synchronously.
        None => {
            st.step = Step::UploadingCloudInit;
            Ok(None)
        }
        Some(upid) => {
            st.upid = Some(upid);
            Ok(None)
        }
    }
}
