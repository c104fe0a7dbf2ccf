//! Conditions as a visible state machine: `Ready`, `Paused`, and the provider condition
//! whose reason names the plugin's current step.
use crate::status::{self, ConditionStatus};

pub const READY: &str = "Ready";
pub const PAUSED: &str = "Paused";
/// The provider condition: True once the infrastructure exists; its reason is the step.
pub const PROVISIONED: &str = "InfrastructureProvisioned";

pub mod reasons {
    pub const PAUSED: &str = "Paused";
    pub const NOT_PAUSED: &str = "NotPaused";
    pub const PROVISIONED: &str = "Provisioned";
    pub const PROVISIONING: &str = "Provisioning";
    pub const WAITING_FOR_CLUSTER_INFRASTRUCTURE: &str = "WaitingForClusterInfrastructure";
    pub const WAITING_FOR_BOOTSTRAP_DATA: &str = "WaitingForBootstrapData";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const PLUGIN_FAILURE: &str = "PluginFailure";
    /// The plugin returned something the host will not write (too large, malformed).
    pub const INVALID_PLUGIN_OUTPUT: &str = "InvalidPluginOutput";
    pub const CREDENTIALS_ERROR: &str = "CredentialsError";
    pub const TRANSIENT_ERROR: &str = "TransientError";
    /// Drift the plugin names with no valid reason of its own, by kind.
    pub const INFRASTRUCTURE_MISSING: &str = "InfrastructureMissing";
    pub const INFRASTRUCTURE_FOREIGN: &str = "InfrastructureForeign";
    pub const INFRASTRUCTURE_CHANGED: &str = "InfrastructureChanged";
    /// The Normal event when a drift is gone.
    pub const DRIFT_RESOLVED: &str = "DriftResolved";
    /// A reason nobody gave.
    pub const UNKNOWN: &str = "Unknown";
}

/// Longest condition message kept (longer ones are cut, marked with `…`).
pub const MAX_MESSAGE: usize = 4096;
/// Longest reason used: what an Event's reason holds.
const MAX_REASON: usize = 128;

/// One condition as a reconcile wants it; [`merge`] makes it a `metav1.Condition`.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub type_: &'static str,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

impl Condition {
    pub fn new(
        type_: &'static str,
        status: bool,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Condition {
            type_,
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// Whether `reason` is a condition reason Kubernetes and Cluster API accept (CamelCase:
/// `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`), short enough for an event too.
pub fn is_reason(reason: &str) -> bool {
    let bytes = reason.as_bytes();
    let inner = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b',' | b':');
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            reason.len() <= MAX_REASON
                && first.is_ascii_alphabetic()
                && (last.is_ascii_alphanumeric() || *last == b'_')
                && bytes.iter().all(inner)
        }
        _ => false,
    }
}

/// `reason` if it is one (see [`is_reason`]), else `fallback`.
pub fn reason_or(reason: &str, fallback: &str) -> String {
    if is_reason(reason) {
        reason.to_string()
    } else {
        fallback.to_string()
    }
}

/// Merge `updates` into `existing`, keeping `lastTransitionTime` where the status did
/// not change (`now` where it did). A reason that is not one becomes `Unknown`, and a
/// message is cut at [`MAX_MESSAGE`] bytes.
pub fn merge(
    existing: &[status::Condition],
    updates: &[Condition],
    generation: i64,
    now: &str,
) -> Vec<status::Condition> {
    let mut list = existing.to_vec();
    for c in updates {
        let status = ConditionStatus::from(c.status);
        let old = list.iter().position(|v| v.type_ == c.type_);
        let since = old
            .map(|i| &list[i])
            .filter(|o| o.status == status)
            .map(|o| o.last_transition_time.clone())
            .unwrap_or_else(|| now.to_string());
        let value = status::Condition {
            type_: c.type_.to_string(),
            status,
            observed_generation: Some(generation),
            last_transition_time: since,
            reason: reason_or(&c.reason, reasons::UNKNOWN),
            message: truncate(&c.message, MAX_MESSAGE),
        };
        match old {
            Some(i) => list[i] = value,
            None => list.push(value),
        }
    }
    list
}

/// The condition `type_` of a list.
pub fn find<'a>(list: &'a [status::Condition], type_: &str) -> Option<&'a status::Condition> {
    list.iter().find(|c| c.type_ == type_)
}

/// The time as conditions write it.
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// `text` cut at `max` bytes (on a character boundary), marked with `…` when cut.
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &text[..cut])
}

/// `Paused` False, reason `NotPaused`.
pub fn not_paused() -> Condition {
    Condition::new(PAUSED, false, reasons::NOT_PAUSED, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_is_kept_while_status_holds() {
        let t0 = "2030-01-01T00:00:00Z";
        let first = merge(&[], &[Condition::new(READY, false, "Cloning", "")], 1, t0);
        let second = merge(
            &first,
            &[Condition::new(READY, false, "PoweringOn", "")],
            1,
            "2030-01-01T00:00:09Z",
        );
        assert_eq!(second[0].last_transition_time, t0);
        assert_eq!(second[0].reason, "PoweringOn");
        let third = merge(
            &second,
            &[Condition::new(READY, true, "Provisioned", "")],
            2,
            "2030-01-01T00:01:00Z",
        );
        assert_eq!(third[0].last_transition_time, "2030-01-01T00:01:00Z");
        assert_eq!(third[0].observed_generation, Some(2));
    }

    #[test]
    fn only_camel_case_reasons_are_written() {
        for good in ["VMMissing", "Ready", "A", "Waiting_For:X,Y"] {
            assert!(is_reason(good), "{good}");
        }
        for bad in ["", "cloning vm", "1Up", "Bad,", "Über", &"A".repeat(129)] {
            assert!(!is_reason(bad), "{bad}");
        }
        let merged = merge(
            &[],
            &[Condition::new(READY, false, "not a reason", "")],
            1,
            "t",
        );
        assert_eq!(merged[0].reason, "Unknown");
        assert_eq!(reason_or("", "Provisioning"), "Provisioning");
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let long = "é".repeat(MAX_MESSAGE);
        let merged = merge(&[], &[Condition::new(READY, false, "X", &long)], 1, "t");
        assert!(merged[0].message.len() <= MAX_MESSAGE + '…'.len_utf8());
        assert!(merged[0].message.ends_with('…'));
    }
}
