//! The persisted state: what the host hands back on the next call.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The plugin's opaque state, handed back by the host on the next call.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub(super) struct State {
    #[serde(default)]
    pub(super) step: Step,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) vmid: Option<u32>,
    /// The PVE task being waited for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) upid: Option<String>,
    /// SMBIOS UUID (the provider ID's tail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) uuid: Option<String>,
    /// Volume ID of the NoCloud ISO while it exists (`local:iso/hyperplug-...iso`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) iso: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) cd_slot: Option<String>,
    /// Addresses learnt from the guest agent (DHCP), `device` → addresses.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) dhcp: BTreeMap<String, Vec<String>>,
    /// Delete progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) delete: Option<DeleteStep>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(super) enum Step {
    #[default]
    Start,
    Cloning,
    Configuring,
    Resizing,
    UploadingCloudInit,
    Attaching,
    PoweringOn,
    WaitingForGuestAgent,
    Ejecting,
    Ready,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub(super) enum DeleteStep {
    Stopping,
    Deleting,
    Confirming,
    RemovingIso,
}
