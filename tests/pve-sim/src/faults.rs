//! Fault injection: latency, per-endpoint errors, task failures, lock timeouts, slow tasks.
//!
//! A `Faults` value is set at start (`[faults]` in the TOML config) and can be replaced at
//! runtime (`PUT /_sim/faults` with the same shape as JSON, or `StateHandle::set_faults`).

use serde::{Deserialize, Serialize};

/// All fault knobs. Rates are probabilities in `0.0..=1.0`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Faults {
    /// Added latency for every API request, in milliseconds.
    pub latency_ms: u64,
    /// Extra random latency `0..=latency_jitter_ms` on top of `latency_ms`.
    pub latency_jitter_ms: u64,
    /// Per-endpoint error injection.
    pub errors: Vec<EndpointError>,
    /// Probability that a task fails at its end with `task_failure_message`.
    pub task_failure_rate: f64,
    /// Exit status of injected task failures (default: "simulated task failure").
    pub task_failure_message: Option<String>,
    /// Probability that an operation taking the VM config lock times out
    /// ("can't lock file '/var/lock/qemu-server/lock-N.conf' - got timeout"): synchronously
    /// (500) for config writes and clones, inside the task for the others.
    pub lock_timeout_rate: f64,
    /// Probability that a task is slow.
    pub slow_task_rate: f64,
    /// Duration multiplier of slow tasks (default 10).
    pub slow_task_factor: Option<f64>,
    /// Nodes that do not answer: every request for them is a 595 "No route to host".
    pub unreachable_nodes: Vec<String>,
}

/// Error injection for one endpoint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct EndpointError {
    /// `"METHOD /path/template"` as in the counters (e.g.
    /// `"POST /nodes/{node}/qemu/{vmid}/clone"`), or `"*"` for every API endpoint.
    pub endpoint: String,
    /// Probability of failing a request.
    pub rate: f64,
    /// HTTP status: 500 (error with message) or 595 (unreachable node, empty body).
    pub status: u16,
    /// Error message for 500s (default "simulated failure").
    pub message: Option<String>,
}

impl Default for EndpointError {
    fn default() -> Self {
        Self {
            endpoint: "*".into(),
            rate: 1.0,
            status: 500,
            message: None,
        }
    }
}

impl Faults {
    /// The injected error (if any) for a request on `endpoint`, given a die roll per rule.
    pub fn pick_error(
        &self,
        endpoint: &str,
        mut roll: impl FnMut() -> f64,
    ) -> Option<&EndpointError> {
        self.errors
            .iter()
            .filter(|e| e.endpoint == "*" || e.endpoint == endpoint)
            .find(|e| e.rate > 0.0 && roll() < e.rate)
    }
}
