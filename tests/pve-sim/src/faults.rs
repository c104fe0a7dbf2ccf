//! Fault injection, in one place: added latency, unreachable nodes, rules per method and
//! path (errors, delays, task failures, lock timeouts, VMID races) with hit counters, and
//! the per-task dice (task failures, slow tasks).
//!
//! A `Faults` value is set at start (`[faults]` in the TOML config) and can be replaced at
//! runtime (`PUT /_sim/faults` with the same shape as JSON, or `StateHandle::set_faults`);
//! replacing it zeroes the rules' hit counters (`GET /_sim/faults/hits`).

use serde::{Deserialize, Serialize};

use crate::envelope::ApiError;
use crate::state::World;

/// All fault knobs. Rates and probabilities are in `0.0..=1.0`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Faults {
    /// Added latency for every API request, in milliseconds.
    pub latency_ms: u64,
    /// Extra random latency `0..=latency_jitter_ms` on top of `latency_ms`.
    pub latency_jitter_ms: u64,
    /// Rules tried in order on every API request (`errors` is accepted as an older name).
    #[serde(alias = "errors")]
    pub rules: Vec<FaultRule>,
    /// Probability that a task fails at its end with `task_failure_message` (a `*` rule of
    /// kind `task_failure`, rolled per task).
    pub task_failure_rate: f64,
    /// Exit status of injected task failures (default: "simulated task failure").
    pub task_failure_message: Option<String>,
    /// Probability that a write on a VM finds its config lock taken for longer than PVE
    /// waits ("can't lock file '/var/lock/qemu-server/lock-N.conf' - got timeout"):
    /// synchronously (500) for config writes, inside the task for the others.
    pub lock_timeout_rate: f64,
    /// Probability that a task is slow.
    pub slow_task_rate: f64,
    /// Duration multiplier of slow tasks (default 10).
    pub slow_task_factor: Option<f64>,
    /// Nodes that do not answer: every request for them is a 595 "No route to host".
    pub unreachable_nodes: Vec<String>,
}

/// One fault rule (in the spirit of vcsim's fault injection).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct FaultRule {
    /// Label in the hit counters (default: the endpoint pattern).
    pub name: Option<String>,
    /// `"METHOD PATH"`, or just `PATH` for any method. METHOD may be `*`. PATH is matched
    /// segment by segment against the request path under `/api2/json`: `*` and `{name}`
    /// match one segment, `**` any number, so an endpoint template
    /// (`POST /nodes/{node}/qemu/{vmid}/clone`), a concrete path
    /// (`POST /nodes/pve2/qemu/105/status/start`) and globs (`GET /nodes/pve2/**`) all work;
    /// `*` alone matches every request.
    pub endpoint: String,
    /// Probability that a matching request is faulted (`rate` is the older name).
    #[serde(alias = "rate")]
    pub probability: f64,
    /// Added delay before the request is answered (or failed), in milliseconds.
    pub delay_ms: u64,
    /// Let the first `skip` matching requests through untouched.
    pub skip: u64,
    /// Fault at most this many requests (then the rule stays inert).
    pub max_count: Option<u64>,
    /// What happens to a faulted request.
    pub kind: FaultKind,
    /// HTTP status of kind `http`: 500 and 503 answer with `message` as PVE's errors do,
    /// 595 with an empty body (a node that cannot be reached).
    pub status: u16,
    /// Kind `http`: handle the request first and answer the error after it, as when the
    /// connection to the node drops once the node has acted (595): the client cannot
    /// tell whether its request happened (a clone may have started, a VM been
    /// destroyed).
    pub handled: bool,
    /// Error text: the HTTP error's message (default "simulated failure"), or the task's
    /// exit status of kind `task_failure` (default "simulated task failure"; a clone
    /// prefixes it with "clone failed: " as PVE does).
    pub message: Option<String>,
}

impl Default for FaultRule {
    fn default() -> Self {
        Self {
            name: None,
            endpoint: "*".into(),
            probability: 1.0,
            delay_ms: 0,
            skip: 0,
            max_count: None,
            kind: FaultKind::Http,
            status: 500,
            handled: false,
            message: None,
        }
    }
}

/// What a rule does to a request it faults.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// Answer with `status` instead of handling the request.
    #[default]
    Http,
    /// Only `delay_ms`.
    Delay,
    /// Handle the request; the task it starts fails with `message`.
    TaskFailure,
    /// The VM's config file lock times out: synchronously (500) for config writes, inside
    /// the task for task endpoints.
    LockTimeout,
    /// Clone only: another client wins the race for `newid` after the request was
    /// accepted; the clone task fails with "unable to create VM N: config file already
    /// exists" and the other client's VM stays.
    VmidRace,
}

/// Per-rule counters, shown by `GET /_sim/faults/hits`.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct RuleHits {
    /// Requests the rule's pattern matched.
    pub matched: u64,
    /// Matches let through by `skip`.
    pub skipped: u64,
    /// Requests the rule faulted.
    pub fired: u64,
}

/// A fault for the handler of a request and the task it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskFault {
    /// The task fails with this exit status.
    Fail(String),
    /// The config lock cannot be had.
    LockTimeout,
    /// Another client takes the clone's `newid` first.
    VmidRace,
}

/// What the faults decided for one request.
#[derive(Debug, Default)]
pub struct Decision {
    /// Wait this long before going on.
    pub delay_ms: u64,
    /// Answer with this error instead of handling the request.
    pub error: Option<ApiError>,
    /// Handle the request, then answer with this error (its reply is lost).
    pub error_after: Option<ApiError>,
    /// Hand this to the handler.
    pub task: Option<TaskFault>,
}

/// Whether `pattern` (see `FaultRule::endpoint`) matches a request.
pub fn pattern_matches(pattern: &str, method: &str, path: &str) -> bool {
    let (m, p) = match pattern.trim().split_once(' ') {
        Some((m, p)) => (m, p.trim()),
        None => ("*", pattern.trim()),
    };
    if m != "*" && !m.eq_ignore_ascii_case(method) {
        return false;
    }
    if p == "*" {
        return true;
    }
    let pat: Vec<&str> = p.trim_matches('/').split('/').collect();
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    glob(&pat, &segs)
}

fn glob(pat: &[&str], segs: &[&str]) -> bool {
    match pat.split_first() {
        None => segs.is_empty(),
        Some((&"**", rest)) => (0..=segs.len()).any(|i| glob(rest, &segs[i..])),
        Some((p, rest)) => {
            let one = *p == "*" || (p.starts_with('{') && p.ends_with('}'));
            !segs.is_empty() && (one || *p == segs[0]) && glob(rest, &segs[1..])
        }
    }
}

impl FaultRule {
    fn error(&self) -> ApiError {
        match self.status {
            595 => {
                let mut e = ApiError::unreachable();
                if let Some(m) = &self.message {
                    e.message = m.clone();
                }
                e
            }
            status => ApiError::with_status(
                status,
                self.message
                    .clone()
                    .unwrap_or_else(|| "simulated failure".into()),
            ),
        }
    }
}

impl World {
    /// Replaces the faults and zeroes the rules' counters.
    pub fn set_faults(&mut self, faults: Faults) {
        self.fault_hits = vec![RuleHits::default(); faults.rules.len()];
        self.faults = faults;
    }

    /// Rolls the faults for one API request (`writes_vm`: a write on a VM, which takes
    /// its config lock) and counts the rules' hits.
    pub fn decide_faults(&mut self, method: &str, path: &str, writes_vm: bool) -> Decision {
        let mut d = Decision::default();
        let (latency, jitter) = (self.faults.latency_ms, self.faults.latency_jitter_ms);
        d.delay_ms = latency
            + if jitter > 0 {
                self.rng.u64(0..=jitter)
            } else {
                0
            };
        if self.fault_hits.len() != self.faults.rules.len() {
            self.fault_hits
                .resize(self.faults.rules.len(), RuleHits::default());
        }
        for i in 0..self.faults.rules.len() {
            let rule = &self.faults.rules[i];
            if !pattern_matches(&rule.endpoint, method, path) {
                continue;
            }
            let (skip, max, p) = (rule.skip, rule.max_count, rule.probability);
            let hits = &mut self.fault_hits[i];
            hits.matched += 1;
            if hits.matched <= skip {
                hits.skipped += 1;
                continue;
            }
            if max.is_some_and(|m| hits.fired >= m) {
                continue;
            }
            if p < 1.0 && !(p > 0.0 && self.rng.f64() < p) {
                continue;
            }
            self.fault_hits[i].fired += 1;
            let rule = &self.faults.rules[i];
            d.delay_ms += rule.delay_ms;
            match rule.kind {
                FaultKind::Delay => {}
                FaultKind::Http => {
                    if rule.handled {
                        d.error_after = Some(rule.error());
                    } else {
                        d.error = Some(rule.error());
                    }
                    break;
                }
                FaultKind::TaskFailure => {
                    let m = rule.message.clone();
                    d.task.get_or_insert_with(|| {
                        TaskFault::Fail(m.unwrap_or_else(|| "simulated task failure".into()))
                    });
                }
                FaultKind::LockTimeout => {
                    d.task.get_or_insert(TaskFault::LockTimeout);
                }
                FaultKind::VmidRace => {
                    d.task.get_or_insert(TaskFault::VmidRace);
                }
            }
        }
        let rate = self.faults.lock_timeout_rate;
        if writes_vm && d.task.is_none() && rate > 0.0 && self.rng.f64() < rate {
            d.task = Some(TaskFault::LockTimeout);
        }
        d
    }

    /// Rolls the per-task dice: an injected failure, a slow-down factor.
    pub fn roll_task_faults(&mut self) -> (Option<String>, f64) {
        let f = &self.faults;
        let (fail_rate, slow_rate) = (f.task_failure_rate, f.slow_task_rate);
        let message = f
            .task_failure_message
            .clone()
            .unwrap_or_else(|| "simulated task failure".into());
        let factor = f.slow_task_factor.unwrap_or(10.0).max(1.0);
        let slow = if slow_rate > 0.0 && self.rng.f64() < slow_rate {
            factor
        } else {
            1.0
        };
        let fail = (fail_rate > 0.0 && self.rng.f64() < fail_rate).then_some(message);
        (fail, slow)
    }

    /// The rules with their counters, for inspection.
    pub fn fault_hits_json(&self) -> serde_json::Value {
        serde_json::Value::Array(
            self.faults
                .rules
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let h = self.fault_hits.get(i).copied().unwrap_or_default();
                    serde_json::json!({
                        "rule": i,
                        "name": r.name.clone().unwrap_or_else(|| r.endpoint.clone()),
                        "endpoint": r.endpoint,
                        "kind": r.kind,
                        "matched": h.matched,
                        "skipped": h.skipped,
                        "fired": h.fired,
                    })
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_templates_concrete_paths_and_globs() {
        let clone = "/nodes/pve1/qemu/9000/clone";
        assert!(pattern_matches("*", "GET", "/version"));
        assert!(pattern_matches(
            "POST /nodes/{node}/qemu/{vmid}/clone",
            "POST",
            clone
        ));
        assert!(!pattern_matches(
            "GET /nodes/{node}/qemu/{vmid}/clone",
            "POST",
            clone
        ));
        assert!(pattern_matches("* /nodes/pve1/**", "POST", clone));
        assert!(!pattern_matches("/nodes/pve2/**", "POST", clone));
        assert!(pattern_matches("/nodes/*/qemu/9000/*", "POST", clone));
        assert!(!pattern_matches("/nodes/*/qemu/9000", "POST", clone));
    }

    #[test]
    fn skip_and_max_count_bound_what_a_rule_fires_on() {
        let mut w = World::new(&crate::Config::fast()).unwrap();
        w.set_faults(Faults {
            rules: vec![FaultRule {
                endpoint: "GET /version".into(),
                skip: 2,
                max_count: Some(3),
                ..FaultRule::default()
            }],
            ..Faults::default()
        });
        let failed: Vec<bool> = (0..8)
            .map(|_| w.decide_faults("GET", "/version", false).error.is_some())
            .collect();
        assert_eq!(
            failed,
            [false, false, true, true, true, false, false, false]
        );
        assert_eq!(
            w.fault_hits[0],
            RuleHits {
                matched: 8,
                skipped: 2,
                fired: 3
            }
        );
    }
}
