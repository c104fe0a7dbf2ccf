//! Drift: what `machine.describe` reports when the infrastructure is no longer what the
//! plugin made (gone, someone else's, or not as specified).
//!
//! The host shows a drift everywhere at once: `status.ready` false, the phase, and the
//! `Ready` and `InfrastructureProvisioned` conditions with the drift's CamelCase reason
//! and its message (`InfrastructureProvisioned` stays True only for a `changed` drift:
//! the resource is there), one Warning event when it starts and one Normal
//! `DriftResolved` event once a describe no longer reports it. It never calls `create`
//! again for a provisioned machine: a missing resource is not silently made again.
use crate::machine::{Drift, MachineStatus};

/// `status` reporting `drift`, named by `reason` (CamelCase, e.g. `VMMissing`): the
/// reason becomes the phase, which the host shows as the conditions' reason, and the
/// drift's text their message. A machine with drift is not ready.
pub fn report(mut status: MachineStatus, reason: &str, drift: Drift) -> MachineStatus {
    let (Drift::Missing(text) | Drift::Foreign(text) | Drift::Changed(text)) = &drift;
    status.progress.phase = reason.into();
    status.progress.message = text.clone();
    status.ready = false;
    status.drift = Some(drift);
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Progress;

    #[test]
    fn a_drift_names_the_phase_and_message_and_is_not_ready() {
        let ready = MachineStatus {
            progress: Progress {
                state: "{}".into(),
                phase: "Ready".into(),
                message: "VM 103 is running".into(),
                requeue_after_ms: None,
            },
            ready: true,
            provider_id: Some("x://1".into()),
            addresses: vec![],
            failure_domain: None,
            address_requests: vec![],
            needs_bootstrap: false,
            drift: None,
            details: vec![],
        };
        let s = report(
            ready,
            "VMMissing",
            Drift::Missing("VM 103 no longer exists".into()),
        );
        assert_eq!(s.progress.phase, "VMMissing");
        assert_eq!(s.progress.message, "VM 103 no longer exists");
        assert!(!s.ready);
        assert!(matches!(s.drift, Some(Drift::Missing(_))));
    }
}
