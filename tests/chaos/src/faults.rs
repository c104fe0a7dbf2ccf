//! The failures pve-sim injects during a chaos run, the way PVE fails: replies that are
//! errors (500, 595 before the node acted, 595 after it did), failed and slow tasks,
//! lock timeouts, and clones that lose their VMID to another client inside the task.
use pve_sim::{FaultKind, FaultRule, Faults};

/// The exit status of injected task failures.
pub const TASK_FAILURE: &str = "simulated task failure";

/// About 10 % of the replies are errors: 5 % 500s, 3 % 595s before the request was
/// handled, and 2 % of the writes have their reply lost after they were carried out; 5 %
/// of the tasks fail, 10 % are five times slower, 3 % of the writes on a VM time out on
/// its config lock, and 10 % of the clones lose their VMID to a competing client.
pub fn like_pve() -> Faults {
    let lost = |method: &str| FaultRule {
        name: Some(format!(
            "lost reply ({method}, 595 after it was carried out)"
        )),
        endpoint: format!("{method} /**"),
        probability: 0.02,
        kind: FaultKind::Http,
        status: 595,
        handled: true,
        ..FaultRule::default()
    };
    Faults {
        rules: vec![
            FaultRule {
                name: Some("clone loses its VMID in the task".into()),
                endpoint: "POST /nodes/{node}/qemu/{vmid}/clone".into(),
                probability: 0.1,
                kind: FaultKind::VmidRace,
                ..FaultRule::default()
            },
            lost("POST"),
            lost("PUT"),
            lost("DELETE"),
            FaultRule {
                name: Some("500 reply".into()),
                endpoint: "*".into(),
                probability: 0.05,
                kind: FaultKind::Http,
                status: 500,
                message: Some("got unexpected error (simulated)".into()),
                ..FaultRule::default()
            },
            FaultRule {
                name: Some("595 reply (no route to the node)".into()),
                endpoint: "*".into(),
                // 3 % of all requests: of those the 500 rule let through.
                probability: 0.03 / 0.95,
                kind: FaultKind::Http,
                status: 595,
                ..FaultRule::default()
            },
        ],
        task_failure_rate: 0.05,
        task_failure_message: Some(TASK_FAILURE.into()),
        lock_timeout_rate: 0.03,
        slow_task_rate: 0.1,
        slow_task_factor: Some(5.0),
        ..Faults::default()
    }
}
