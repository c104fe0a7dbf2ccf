//! Malformed plugin results through the controllers, against a real API server: each
//! ends in a clear condition on its object (never a panic, never an object left without
//! one), every condition reason stays one Cluster API accepts, each object can still be
//! deleted, and the same manager keeps serving honest objects. The hostile test plugin
//! (`tests/hostile-plugin`, `outputs.rs`) returns them on request.
use kube::api::{Api, DeleteParams, DynamicObject};

use crate::support::controllers::{hostile_cluster, hostile_world, machine};
use crate::support::world::{World, condition};

const V1ALPHA1: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";

/// Whether `reason` is a condition reason Kubernetes and Cluster API accept.
fn camel_case(reason: &str) -> bool {
    let mut chars = reason.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && reason
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ',' | ':'))
        && !reason.ends_with([',', ':'])
}

fn ready(o: &DynamicObject) -> (String, String, String) {
    let c = condition(o, "Ready").unwrap_or_default();
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    (text("status"), text("reason"), text("message"))
}

fn every_reason_is_camel_case(o: &DynamicObject) {
    for c in o.data["status"]["conditions"].as_array().unwrap() {
        let reason = c["reason"].as_str().unwrap();
        assert!(camel_case(reason), "{reason} in {c}");
    }
}

/// A HostileMachine of cluster `demo` returning what `spec` asks for.
async fn hostile_machine(world: &World, name: &str, spec: &str) {
    machine(world, "demo", "HostileMachine", name, "{}", spec).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_malformed_result_ends_in_a_clear_condition_and_the_manager_serves_on() {
    let (world, _controllers, _runtime, _blobs) = hostile_world().await;
    world
        .apply(&hostile_cluster(
            "demo",
            "{credentialsRef: {name: hostile-credentials}}",
        ))
        .await;
    // Refused whole, for good on this generation: (name, spec, reason, message part).
    let refused = [
        (
            "huge-state",
            "{attack: huge-state, kib: 512}",
            "InvalidPluginOutput",
            "plugin hostile returned from machine.create: progress.state is 524288 bytes; at most 262144 are kept in status.pluginState",
        ),
        (
            "huge-details",
            "{attack: huge-details, count: 1000}",
            "InvalidPluginOutput",
            "details has 1000 entries; at most 64 are kept",
        ),
        (
            "flood-of-details",
            "{attack: huge-details, count: 100000}",
            "PluginFailure",
            "--plugin-output-kib",
        ),
        (
            "bad-variant",
            "{attack: bad-variant}",
            "PluginFailure",
            "plugin hostile trapped in `machine.create`",
        ),
        (
            "empty-error",
            "{attack: empty-error}",
            "PluginFailure",
            "plugin hostile gave no message from machine.create",
        ),
        // Its first call hands back a state its next call cannot read.
        (
            "bad-state",
            "{attack: bad-state}",
            "StateUnreadable",
            "remove status.pluginState and status.failedGeneration",
        ),
        // A state a newer release wrote, met by this one (a rollback mid-way).
        (
            "newer-state",
            "{attack: newer-state}",
            "StateIncompatible",
            "layout version 2, this plugin reads versions 1..=1: a newer version of this plugin wrote it",
        ),
    ];
    for (name, spec, _, _) in &refused {
        hostile_machine(&world, name, spec).await;
    }
    hostile_machine(&world, "empty-status", "{attack: empty-status}").await;
    hostile_machine(&world, "bad-reason", "{attack: bad-reason}").await;
    hostile_machine(&world, "honest", "{attack: noop}").await;

    let hms = world.api(V1ALPHA1, "HostileMachine").await;
    for (name, _, reason, message) in &refused {
        let o = world
            .wait_for(&hms, name, reason, |o| {
                o.data["status"]["failedGeneration"].is_i64() && ready(o).1 == *reason
            })
            .await;
        let (status, _, text) = ready(&o);
        assert_eq!(status, "False", "{name}");
        assert!(text.contains(message), "{name}: {text}");
        assert_eq!(o.data["status"]["phase"], *reason, "{name}");
        assert!(
            o.data["status"]["pluginState"]
                .as_str()
                .unwrap_or_default()
                .len()
                < 1024,
            "{name}: nothing refused is written"
        );
        every_reason_is_camel_case(&o);
    }
    // Shapes that are no reason to stop are written as sound ones.
    let o = world
        .wait_for(&hms, "empty-status", "reported", |o| {
            condition(o, "Ready").is_some()
        })
        .await;
    assert_eq!(
        ready(&o),
        ("False".into(), "Provisioning".into(), String::new())
    );
    assert!(o.data["status"].get("phase").is_none());
    assert!(o.data["status"].get("failedGeneration").is_none());
    every_reason_is_camel_case(&o);
    let o = world
        .wait_for(&hms, "bad-reason", "reported", |o| {
            condition(o, "Ready").is_some()
        })
        .await;
    assert_eq!(
        ready(&o),
        ("False".into(), "Provisioning".into(), "still going".into())
    );
    assert_eq!(o.data["status"]["phase"], "cloning the vm!");
    every_reason_is_camel_case(&o);
    // The same manager still serves an honest machine.
    world
        .wait_for(&hms, "honest", "provisioned", |o| {
            o.data["status"]["initialization"]["provisioned"] == true
        })
        .await;

    // None of them is stuck: every one is deleted.
    let names: Vec<&str> = refused
        .iter()
        .map(|(name, ..)| *name)
        .chain(["empty-status", "bad-reason", "honest"])
        .collect();
    delete_all(&world, &hms, &names).await;
}

async fn delete_all(world: &World, api: &Api<DynamicObject>, names: &[&str]) {
    for name in names {
        api.delete(name, &DeleteParams::default()).await.unwrap();
    }
    for name in names {
        world.wait_gone(api, name).await;
    }
}

#[test]
fn the_reason_check_knows_a_reason() {
    assert!(camel_case("VMMissing") && camel_case("A_b:c,D"));
    assert!(!camel_case("") && !camel_case("cloning the vm!") && !camel_case("Bad,"));
}
