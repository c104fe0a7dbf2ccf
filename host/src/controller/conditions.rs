//! Conditions as a visible state machine: `Ready`, `Paused`, and the provider condition
//! whose reason names the plugin's current step.
use chrono::{SecondsFormat, Utc};
use serde_json::{Value, json};

pub const READY: &str = "Ready";
pub const PAUSED: &str = "Paused";
/// The provider condition: True once the infrastructure exists; its reason is the step.
pub const PROVISIONED: &str = "InfrastructureProvisioned";

pub mod reasons {
    pub const PAUSED: &str = "Paused";
    pub const NOT_PAUSED: &str = "NotPaused";
    pub const PROVISIONED: &str = "Provisioned";
    pub const WAITING_FOR_OWNER: &str = "WaitingForOwner";
    pub const WAITING_FOR_CLUSTER_INFRASTRUCTURE: &str = "WaitingForClusterInfrastructure";
    pub const WAITING_FOR_BOOTSTRAP_DATA: &str = "WaitingForBootstrapData";
    pub const WAITING_FOR_ADDRESSES: &str = "WaitingForAddresses";
    pub const DELETING: &str = "Deleting";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const PLUGIN_FAILURE: &str = "PluginFailure";
    pub const CREDENTIALS_ERROR: &str = "CredentialsError";
    pub const TRANSIENT_ERROR: &str = "TransientError";
    pub const DRIFT: &str = "Drift";
}

/// One condition, metav1.Condition-shaped.
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

/// Merge `updates` into the existing conditions, keeping `lastTransitionTime` where the
/// status did not change. Returns the new list.
pub fn merge(existing: Option<&Value>, updates: &[Condition], generation: i64) -> Value {
    let mut list: Vec<Value> = existing
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let now = Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true);
    for c in updates {
        let status = if c.status { "True" } else { "False" };
        let old = list
            .iter()
            .position(|v| v.get("type").and_then(Value::as_str) == Some(c.type_));
        let since = old
            .and_then(|i| {
                list[i]
                    .get("status")
                    .and_then(Value::as_str)
                    .filter(|s| *s == status)
                    .map(|_| i)
            })
            .and_then(|i| list[i].get("lastTransitionTime").cloned())
            .unwrap_or_else(|| Value::String(now.clone()));
        let reason = if c.reason.is_empty() {
            "Unknown".to_string()
        } else {
            c.reason.clone()
        };
        let value = json!({
            "type": c.type_,
            "status": status,
            "reason": reason,
            "message": truncate(&c.message, 4096),
            "lastTransitionTime": since,
            "observedGeneration": generation,
        });
        match old {
            Some(i) => list[i] = value,
            None => list.push(value),
        }
    }
    Value::Array(list)
}

/// The reason of a condition in a status, if present.
pub fn reason_of(status: Option<&Value>, type_: &str) -> Option<String> {
    status?
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
        .and_then(|c| c.get("reason").and_then(Value::as_str))
        .map(str::to_string)
}

fn truncate(text: &str, max: usize) -> String {
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
        let first = merge(None, &[Condition::new(READY, false, "Cloning", "")], 1);
        let t0 = first[0]["lastTransitionTime"].clone();
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let second = merge(
            Some(&first),
            &[Condition::new(READY, false, "PoweringOn", "")],
            1,
        );
        assert_eq!(second[0]["lastTransitionTime"], t0);
        assert_eq!(second[0]["reason"], "PoweringOn");
        let third = merge(
            Some(&second),
            &[Condition::new(READY, true, "Provisioned", "")],
            2,
        );
        assert_ne!(third[0]["lastTransitionTime"], t0);
        assert_eq!(third[0]["observedGeneration"], 2);
    }
}
