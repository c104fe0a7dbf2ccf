//! PVE's errors: classified (invalid spec, terminal, transient) with PVE's message kept,
//! and lock timeouts retried until create and delete converge.
use hyperplug_conformance::drive::{Failure, Pacing, TRANSIENT_RETRIES};
use hyperplug_runtime::bindings::machine::{MachineRequest, MachineStatus};
use hyperplug_runtime::{Credentials, Limits, Plugin, PluginError};
use pve_sim::{Config, FaultRule, Faults};
use serde_json::{Value, json};

use super::{
    bootstrap, create_until_cloning, dhcp_cluster, drive_delete, non_templates, request, vmid_of,
};
use crate::support::drive::{NoAddresses, create_until, create_until_ready, pacing};
use crate::support::{credentials, load, sim_with};

#[tokio::test]
async fn errors_are_classified_and_keep_the_pve_message() {
    let sim = sim_with(Config::fast()).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    // Up to the clone call (the VMID is recorded one call before it).
    let call = async |spec: Value| -> Result<MachineStatus, PluginError> {
        let mut req = request(&sim, "m1", "c1", spec, dhcp_cluster());
        let cloning = |s: &MachineStatus| s.progress.state.contains("UPID:");
        match create_until(
            &plugin,
            &mut req,
            &mut NoAddresses(None),
            &pacing(50),
            cloning,
        )
        .await
        {
            Ok((status, _)) => Ok(status),
            Err((drive, why)) => match drive.failure {
                Some(Failure::Plugin(e)) => Err(e),
                _ => panic!("the call did not complete: {why}"),
            },
        }
    };
    let base = json!({"sourceNode": "pve1", "templateID": 9000});
    let with = |patch: Value| {
        let mut s = base.clone();
        for (k, v) in patch.as_object().unwrap() {
            s[k] = v.clone();
        }
        s
    };

    // Invalid specs name the field.
    for (spec, field) in [
        (json!({"templateID": 9000}), "spec.sourceNode"),
        (json!({"sourceNode": "pve1"}), "spec.templateID"),
        (
            with(json!({"vmIDRange": {"start": 200, "end": 100}})),
            "spec.vmIDRange.end",
        ),
        (with(json!({"numCores": "four"})), "spec.numCores"),
        (with(json!({"tags": ["Bad Tag"]})), "spec.tags[0]"),
        (
            with(json!({"full": false, "storage": "local-lvm"})),
            "spec.storage",
        ),
        (
            with(json!({"network": {"default": {"bridge": ""}}})),
            "spec.network.default.bridge",
        ),
        (
            with(json!({"cloudInit": {"cdSlot": "floppy0"}})),
            "spec.cloudInit.cdSlot",
        ),
    ] {
        match call(spec.clone()).await {
            Err(PluginError::InvalidSpec(e)) => assert_eq!(e.field, field, "{spec}: {}", e.message),
            other => panic!("{spec}: expected invalid spec {field}, got {other:?}"),
        }
    }

    // Terminal: the template does not exist, said as for any VMID that may not be
    // cloned (no oracle of what it holds).
    match call(json!({"sourceNode": "pve1", "templateID": 9999})).await {
        Err(PluginError::Terminal(e)) => {
            assert_eq!(e.reason, "TemplateNotFound");
            assert!(
                e.message
                    .contains("spec.templateID 9999 on spec.sourceNode pve1 is not a template"),
                "{}",
                e.message
            );
        }
        other => panic!("expected TemplateNotFound, got {other:?}"),
    }
    match call(json!({"templateSelector": {"matchTags": ["no-such-tag"]}})).await {
        Err(PluginError::Terminal(e)) => assert_eq!(e.reason, "TemplateNotFound"),
        other => panic!("expected TemplateNotFound, got {other:?}"),
    }
    // Terminal: invalid configuration (a storage PVE does not know).
    match call(with(json!({"storage": "nosuch"}))).await {
        Err(PluginError::Terminal(e)) => {
            assert_eq!(e.reason, "InvalidConfiguration");
            assert!(
                e.message.contains("storage 'nosuch' does not exist"),
                "{}",
                e.message
            );
        }
        other => panic!("expected InvalidConfiguration, got {other:?}"),
    }

    let inject = |status: u16, message: &str| Faults {
        rules: vec![FaultRule {
            endpoint: "POST /nodes/{node}/qemu/{vmid}/clone".into(),
            status,
            message: Some(message.into()),
            ..FaultRule::default()
        }],
        ..Faults::default()
    };
    // Terminal: permission denied.
    sim.state()
        .set_faults(inject(403, "Permission check failed (/vms/9000, VM.Clone)"));
    match call(base.clone()).await {
        Err(PluginError::Terminal(e)) => {
            assert_eq!(e.reason, "PermissionDenied");
            assert!(
                e.message
                    .contains("Permission check failed (/vms/9000, VM.Clone)"),
                "{}",
                e.message
            );
        }
        other => panic!("expected PermissionDenied, got {other:?}"),
    }
    // Transient: a 500.
    sim.state().set_faults(inject(
        500,
        "cfs-lock 'file-replication_cfg' error: got lock request timeout",
    ));
    match call(base.clone()).await {
        Err(PluginError::Transient(e)) => {
            assert!(
                e.message.contains("got lock request timeout"),
                "{}",
                e.message
            )
        }
        other => panic!("expected transient, got {other:?}"),
    }
    // Transient: 595, the node does not answer.
    sim.state().set_faults(inject(595, ""));
    match call(base.clone()).await {
        Err(PluginError::Transient(e)) => assert!(e.message.contains("595"), "{}", e.message),
        other => panic!("expected transient, got {other:?}"),
    }
    // Not terminal: a lock timeout on the template's config lock, inside the clone task
    // (where PVE's clone worker takes its locks).
    sim.state().set_faults(Faults {
        lock_timeout_rate: 1.0,
        ..Faults::default()
    });
    let mut req = request(&sim, "m1", "c1", base.clone(), dhcp_cluster());
    create_until_cloning(&plugin, &mut req).await;
    let s = plugin.create_machine(&req).await.unwrap().unwrap();
    assert_eq!(s.progress.phase, "Cloning");
    assert!(
        s.progress
            .message
            .contains("can't lock file '/var/lock/qemu-server/lock-9000.conf' - got timeout"),
        "{}",
        s.progress.message
    );
    sim.state().set_faults(Faults::default());
    // Transient: network (nothing listens).
    let mut req = request(&sim, "m1", "c1", base.clone(), dhcp_cluster());
    req.credentials = Credentials {
        insecure: true,
        ..credentials("https://127.0.0.1:1")
    };
    assert!(matches!(
        plugin.create_machine(&req).await.unwrap(),
        Err(PluginError::Transient(_))
    ));
    assert!(
        non_templates(&sim).is_empty(),
        "no VM was left by the failures"
    );
}

/// Plays the host through transient errors: create until ready, retrying what is
/// transient (as many in a row as the conformance kit retries); returns the ready
/// status and the transient messages seen.
async fn drive_create_through_transients(
    plugin: &Plugin,
    req: &mut MachineRequest,
) -> (MachineStatus, Vec<String>) {
    let pacing = Pacing {
        transient_retries: TRANSIENT_RETRIES,
        ..pacing(50)
    };
    let (status, drive) =
        create_until_ready(plugin, req, &mut NoAddresses(Some(bootstrap())), &pacing)
            .await
            .unwrap_or_else(|e| panic!("create did not converge: {e}"));
    (status, drive.transient_errors)
}

#[tokio::test]
async fn lock_timeouts_are_retried_until_create_and_delete_converge() {
    let sim = sim_with(Config::fast()).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let lock_timeout = |endpoint: &str, max: u64| FaultRule {
        endpoint: endpoint.into(),
        kind: pve_sim::FaultKind::LockTimeout,
        max_count: Some(max),
        ..FaultRule::default()
    };
    sim.state().set_faults(Faults {
        rules: vec![
            lock_timeout("POST /nodes/{node}/qemu/{vmid}/clone", 1),
            lock_timeout("PUT /nodes/{node}/qemu/{vmid}/config", 2),
            lock_timeout("POST /nodes/{node}/qemu/{vmid}/status/start", 1),
            lock_timeout("POST /nodes/{node}/qemu/{vmid}/status/stop", 1),
            lock_timeout("DELETE /nodes/{node}/qemu/{vmid}", 1),
        ],
        ..Faults::default()
    });
    let spec =
        json!({"sourceNode": "pve1", "templateID": 9000, "checks": {"skipCloudInitStatus": true}});
    let mut req = request(&sim, "m1", "c1", spec, dhcp_cluster());
    req.bootstrap = Some(bootstrap());
    let (status, transients) = drive_create_through_transients(&plugin, &mut req).await;
    assert!(status.ready);
    assert_eq!(transients.len(), 2, "the two config writes: {transients:?}");
    for t in &transients {
        assert!(t.contains("got timeout"), "{t}");
    }
    let vmid = vmid_of(&status);
    drive_delete(&plugin, &mut req).await.unwrap();
    assert!(sim.state().vm(vmid).is_none());
    assert!(non_templates(&sim).is_empty());
    let hits = sim.state().fault_hits();
    for (i, rule) in hits.as_array().unwrap().iter().enumerate() {
        assert!(
            rule["fired"].as_u64().unwrap() >= 1,
            "rule {i} never fired: {hits}"
        );
    }
}
