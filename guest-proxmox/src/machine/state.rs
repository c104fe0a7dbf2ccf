//! The persisted state: what the host hands back on the next call.

use std::collections::{BTreeMap, BTreeSet};

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
    /// The template the VMID in `vmid` is to be cloned from (recorded before the clone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) source: Option<Source>,
    /// VMIDs found taken so far (spreads the next proposals).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(super) collisions: u32,
    /// Clones seen in their first phase (no owner readable yet) by a call without a VM:
    /// waited for before cloning, as one may be this machine's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) awaiting: Option<BTreeSet<u32>>,
    /// Look at the recorded VMID before asking for a clone to it: something was seen
    /// there (a refusal, a failed clone task, a clone still being written).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) look_first: bool,
    /// Looks at a booting guest's agent so far (spaces the next ones out).
    #[serde(default, skip_serializing_if = "is_zero_u8")]
    pub(super) agent_tries: u8,
    /// The ISO storage chosen with the node (node, storage), when the spec names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) iso_at: Option<(String, String)>,
    /// The node the NoCloud ISO was uploaded to (the VM's, unless it migrated since).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) iso_node: Option<String>,
}

/// Layout 1 is what the plugin wrote before states carried a version (WIT 0.2 builds
/// included): this layout with fewer fields, all of them defaulted when absent, so it
/// still reads. Layout 2 is the first versioned one.
impl guest_kit::state::Versioned for State {
    const VERSION: u32 = 2;
    const OLDEST_READ: u32 = 1;
}

impl State {
    /// Whether the host must store this state before the next call. Only a VMID about to
    /// be cloned to is: once the clone is requested, a machine that lost that VMID
    /// would clone a second VM. Every other step is found again from PVE (the recorded
    /// VM's config, power state and ISO, or the ownership marker), so the host may hold
    /// it; becoming ready is written by the host regardless.
    pub(super) fn is_durable(&self) -> bool {
        self.step == Step::Cloning && self.upid.is_none()
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero_u8(n: &u8) -> bool {
    *n == 0
}

/// A template: where it is and its VMID.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub(super) struct Source {
    pub(super) node: String,
    pub(super) template: u32,
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
