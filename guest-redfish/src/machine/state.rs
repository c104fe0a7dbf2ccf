//! The persisted state: what the host hands back on the next call. It never holds
//! the bootstrap media's URL (a secret); the host's blobs keep that.

use serde::{Deserialize, Serialize};

use crate::inventory::Host;

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub(super) struct State {
    #[serde(default)]
    pub(super) step: Step,
    /// The claimed host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) host: Option<Host>,
    /// A power-on (or restart) was requested; the host boots the media from now on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) reset_sent: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) delete: Option<DeleteStep>,
}

/// One layout so far.
impl guest_kit::state::Versioned for State {}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Step {
    #[default]
    Start,
    Claimed,
    MediaInserted,
    BootOverrideSet,
    PoweringOn,
    Ready,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub(super) enum DeleteStep {
    PoweringOff,
    EjectingMedia,
}
