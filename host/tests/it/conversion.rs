//! Both API versions of the Proxmox kinds on a real API server: objects written in one
//! version read back in the other through the manager's conversion webhook (served as
//! `hyperplug run` serves it), and round trips lose nothing, the other version's fields
//! kept in the `cluster.x-k8s.io/conversion-data` annotation.
use std::sync::Arc;

use hyperplug::controller::trust::ownership::OwnershipKeys;
use hyperplug::conversion::Conversions;
use hyperplug::conversion::data::{MAC_ANNOTATION, MAX_BYTES};
use kube::api::{Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use serde_json::{Value, json};

use crate::support::world::{World, logs};

const V1: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
const V2: &str = "infrastructure.cluster.x-k8s.io/v1alpha2";
const PRESERVED: &str = "cluster.x-k8s.io/conversion-data";

fn in_memory() -> OwnershipKeys {
    OwnershipKeys::in_memory()
}

/// A `v1alpha1` spec per kind, with fields `v1alpha2` says differently or not at all.
fn v1alpha1_specs() -> Vec<(&'static str, Value)> {
    let machine = json!({
        "sourceNode": "pve1", "templateID": 9000, "target": "pve2", "full": true,
        "numSockets": 2, "numCores": 4, "memoryMiB": 8192,
        "disks": {"bootVolume": {"disk": "scsi0", "sizeGb": 40}},
        "network": {
            "default": {"bridge": "vmbr0", "model": "virtio", "vlan": 10},
            "additionalDevices": [{"name": "net1", "bridge": "vmbr1", "model": "virtio", "linkMtu": 9000,
                "ipv4PoolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "pool-a"}}],
        },
    });
    let cluster = json!({
        "controlPlaneEndpoint": {"host": "10.0.0.1", "port": 6443},
        "allowedNodes": ["pve1", "pve2"],
        "ipv4Config": {"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24, "gateway": "10.0.0.1", "metric": 100},
        "dnsServers": ["8.8.8.8"],
        "cloneSpec": {"machineSpec": {"controlPlane": {"sourceNode": "pve1", "templateID": 100}}},
    });
    vec![
        ("ProxmoxMachine", machine.clone()),
        ("ProxmoxCluster", cluster.clone()),
        (
            "ProxmoxMachineTemplate",
            json!({"template": {"metadata": {"labels": {"tier": "workers"}}, "spec": machine}}),
        ),
        (
            "ProxmoxClusterTemplate",
            json!({"template": {"spec": cluster}}),
        ),
    ]
}

/// Whether every field of `written` reads back equal in `read` (the API server may add
/// the schema's defaults).
fn kept(written: &Value, read: &Value) -> bool {
    match (written, read) {
        (Value::Object(w), Value::Object(r)) => w
            .iter()
            .all(|(k, v)| r.get(k).is_some_and(|rv| kept(v, rv))),
        (Value::Array(w), Value::Array(r)) => {
            w.len() == r.len() && w.iter().zip(r).all(|(a, b)| kept(a, b))
        }
        _ => written == read,
    }
}

fn object(api_version: &str, kind: &str, name: &str, spec: &Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": api_version, "kind": kind,
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_written_in_v1alpha1_reads_in_v1alpha2_and_comes_back_unchanged() {
    let world = World::start_with(pve_sim::Config::fast(), false).await;
    for (kind, spec) in v1alpha1_specs() {
        let name = kind.to_ascii_lowercase();
        let v1 = world.api(V1, kind).await;
        v1.create(&PostParams::default(), &object(V1, kind, &name, &spec))
            .await
            .unwrap_or_else(|e| panic!("creating a v1alpha1 {kind}: {e}"));
        let stored = world.api(V2, kind).await.get(&name).await.unwrap();
        let v2_spec = &stored.data["spec"];
        assert!(
            !kept(&spec, v2_spec),
            "{kind} reads the same in v1alpha2: {v2_spec}"
        );
        let back = v1.get(&name).await.unwrap();
        assert!(
            kept(&spec, &back.data["spec"]),
            "{kind}: written {spec}\nread back {}",
            back.data["spec"]
        );
    }
    // What v1alpha2 says differently, seen there.
    let machine = world
        .api(V2, "ProxmoxMachine")
        .await
        .get("proxmoxmachine")
        .await
        .unwrap();
    let devices = machine.data["spec"]["network"]["networkDevices"]
        .as_array()
        .expect("networkDevices");
    let names: Vec<&str> = devices.iter().filter_map(|d| d["name"].as_str()).collect();
    assert_eq!(names, ["net0", "net1"], "{devices:?}");
    assert_eq!(machine.data["spec"]["allowedNodes"], json!(["pve2"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1alpha2_object_edited_through_v1alpha1_keeps_what_v1alpha1_cannot_say() {
    let world = World::start_with(pve_sim::Config::fast(), false).await;
    let spec = json!({
        "sourceNode": "pve1", "templateID": 9000,
        "numSockets": 1, "numCores": 2, "memoryMiB": 2048,
        "disks": {"bootVolume": {"disk": "scsi0", "sizeGb": 20}},
        "network": {
            "zone": "z1",
            "networkDevices": [
                {"name": "net0", "bridge": "vmbr0", "defaultIPv4": true, "queues": 4},
            ],
        },
    });
    let v2 = world.api(V2, "ProxmoxMachine").await;
    v2.create(
        &PostParams::default(),
        &object(V2, "ProxmoxMachine", "m", &spec),
    )
    .await
    .expect("creating a v1alpha2 ProxmoxMachine");
    let v1 = world.api(V1, "ProxmoxMachine").await;
    let old = v1.get("m").await.unwrap();
    assert!(
        old.data["spec"]["network"].get("zone").is_none(),
        "{}",
        old.data
    );
    assert!(
        old.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(PRESERVED)),
        "v1alpha1 cannot say zone and queues: they ride in {PRESERVED}"
    );
    // A v1alpha1 client edits what it knows; the rest survives.
    let edit = json!({"spec": {"numCores": 8}});
    v1.patch("m", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .expect("a merge patch through v1alpha1");
    let now = v2.get("m").await.unwrap();
    assert_eq!(now.data["spec"]["numCores"], 8);
    assert_eq!(now.data["spec"]["network"]["zone"], "z1");
    assert_eq!(
        now.data["spec"]["network"]["networkDevices"][0]["queues"],
        4
    );
    assert!(
        !now.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(PRESERVED)),
        "stored in v1alpha2, nothing needs keeping: {:?}",
        now.metadata.annotations
    );
}

/// The review as the API server sends it, of one object.
fn review(object: Value) -> kube::core::conversion::ConversionReview {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "u-1", "desiredAPIVersion": V2, "objects": [object]},
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_the_plugin_cannot_answer_fails_naming_the_object_and_the_field() {
    let (_rt, plugin) = crate::support::load("proxmox", hyperplug_runtime::Limits::default()).await;
    let conversions = hyperplug::conversion::Conversions::new(&[plugin], Arc::new(in_memory()));
    let failed = |answer: kube::core::conversion::ConversionReview| {
        let response = answer.response.expect("a response");
        assert_eq!(response.uid, "u-1");
        assert!(response.converted_objects.is_empty());
        assert_eq!(response.result.reason, "ConversionFailed");
        response.result.message
    };
    let meta = json!({"name": "m", "namespace": "ns"});
    let unknown = json!({"apiVersion": V1, "kind": "OtherMachine", "metadata": meta});
    let message = failed(conversions.review(review(unknown)).await);
    assert!(
        message.contains("OtherMachine ns/m") && message.contains("no loaded plugin"),
        "{message}"
    );
    let broken = json!({"apiVersion": V1, "kind": "ProxmoxMachine", "metadata": meta,
        "spec": {"numCores": "many"}});
    let message = failed(conversions.review(review(broken)).await);
    assert!(
        message.contains("ProxmoxMachine ns/m") && message.contains("numCores"),
        "{message}"
    );
    // What converts keeps its metadata and says what it preserved.
    let fine = json!({"apiVersion": V1, "kind": "ProxmoxMachine",
        "metadata": {"name": "m", "namespace": "ns", "uid": "x", "labels": {"a": "b"}},
        "spec": {"sourceNode": "pve1", "templateID": 100, "target": "pve2"}});
    let answer = conversions.review(review(fine)).await.response.unwrap();
    assert_eq!(answer.uid, "u-1");
    let object = &answer.converted_objects[0];
    assert_eq!(object["apiVersion"], V2);
    assert_eq!(object["metadata"]["labels"]["a"], "b");
    assert_eq!(object["metadata"]["uid"], "x");
    assert!(
        object["metadata"]["annotations"][PRESERVED].is_string(),
        "{object}"
    );
}

/// A `v1alpha1` ProxmoxMachine spec, and the `v1alpha2` fields a forged
/// conversion-data annotation would add to it: a zone and a NIC's queues that
/// `v1alpha2`'s schema refuses (the zone's pattern, at most 65,535 queues).
fn forged() -> (Value, Value) {
    let v1 = json!({
        "sourceNode": "pve1", "templateID": 9000,
        "network": {"default": {"bridge": "vmbr0", "model": "virtio"}},
    });
    let v2 = json!({
        "sourceNode": "pve1", "templateID": 9000,
        "network": {
            "zone": "not a zone!",
            "networkDevices": [{"name": "net0", "bridge": "vmbr0", "model": "virtio",
                "defaultIPv4": true, "defaultIPv6": true, "queues": 100000}],
        },
    });
    (v1, v2)
}

fn annotated(mut object: DynamicObject, annotations: &[(&str, &str)]) -> DynamicObject {
    object.metadata.annotations = Some(
        annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    object
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_written_or_copied_conversion_data_annotation_brings_no_v1alpha2_field_into_storage()
{
    let world = World::start_with(pve_sim::Config::fast(), false).await;
    let (v1_spec, v2_spec) = forged();
    let (v1, v2) = (
        world.api(V1, "ProxmoxMachine").await,
        world.api(V2, "ProxmoxMachine").await,
    );
    // Written in v1alpha2, the API server refuses these fields.
    let refused = v2
        .create(
            &PostParams::default(),
            &object(V2, "ProxmoxMachine", "direct", &v2_spec),
        )
        .await
        .expect_err("v1alpha2's schema refuses the zone and the queues");
    let refused = refused.to_string();
    assert!(
        refused.contains("zone") && refused.contains("queues"),
        "{refused}"
    );
    // Written in v1alpha1 with the v1alpha2 spec in a hand-written annotation (as the
    // plugin keeps it), the write succeeds and stores only what v1alpha1 said.
    let kept = json!({"v1alpha2": {"spec": v2_spec}}).to_string();
    let hand_written = annotated(
        object(V1, "ProxmoxMachine", "forged", &v1_spec),
        &[(PRESERVED, &kept)],
    );
    v1.create(&PostParams::default(), &hand_written)
        .await
        .expect("a v1alpha1 write with a hand-written annotation");
    let stored = v2.get("forged").await.unwrap();
    let network = &stored.data["spec"]["network"];
    assert!(network.get("zone").is_none(), "{network}");
    assert!(
        network["networkDevices"][0].get("queues").is_none(),
        "{network}"
    );
    let annotations = stored.metadata.annotations.clone().unwrap_or_default();
    assert!(
        !annotations.values().any(|v| v.contains("not a zone")),
        "the forged value is not stored either: {annotations:?}"
    );
    let object_named = format!(
        "ProxmoxMachine.infrastructure.cluster.x-k8s.io {}/forged",
        world.ns
    );
    // The manager says so (a warning per object; its debug lines are not captured here).
    let logged = String::from_utf8_lossy(&logs().lock().unwrap()).to_string();
    assert!(
        logged.lines().any(
            |l| l.contains("ignoring the cluster.x-k8s.io/conversion-data")
                && l.contains(&object_named)
                && l.contains("has no infrastructure.hyperplug.dev/conversion-data-mac")
        ),
        "the manager logs what it ignored"
    );

    // The manager's own annotation, copied with its MAC to another object, is ignored
    // too: it is signed for the object it was written on.
    let legit = json!({
        "sourceNode": "pve1", "templateID": 9000,
        "network": {"zone": "z1", "networkDevices": [{"name": "net0", "bridge": "vmbr0", "queues": 4}]},
    });
    v2.create(
        &PostParams::default(),
        &object(V2, "ProxmoxMachine", "victim", &legit),
    )
    .await
    .unwrap();
    let read = v1.get("victim").await.unwrap();
    let a = read.metadata.annotations.clone().unwrap();
    let (data, mac) = (&a[PRESERVED], &a[MAC_ANNOTATION]);
    let mut copy = read.clone();
    copy.metadata = annotated(
        object(V1, "ProxmoxMachine", "thief", &json!({})),
        &[(PRESERVED, data), (MAC_ANNOTATION, mac)],
    )
    .metadata;
    v1.create(&PostParams::default(), &copy).await.unwrap();
    let stored = v2.get("thief").await.unwrap();
    assert!(
        stored.data["spec"]["network"].get("zone").is_none(),
        "{}",
        stored.data
    );
    // While the object it was written for keeps it through v1alpha1 edits.
    let edit = json!({"spec": {"numCores": 2}});
    v1.patch("victim", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .unwrap();
    let victim = v2.get("victim").await.unwrap();
    assert_eq!(victim.data["spec"]["network"]["zone"], "z1");
    assert_eq!(victim.data["spec"]["numCores"], 2);
}

/// A review of one `v1alpha1` machine carrying `annotations`, as anyone who reaches the
/// port may post it.
fn review_of(annotations: Value) -> kube::core::conversion::ConversionReview {
    let (v1_spec, _) = forged();
    review(json!({"apiVersion": V1, "kind": "ProxmoxMachine",
        "metadata": {"name": "m", "namespace": "ns", "annotations": annotations},
        "spec": v1_spec}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_conversion_data_is_ignored_and_the_object_still_converts() {
    let (_rt, plugin) = crate::support::load("proxmox", hyperplug_runtime::Limits::default()).await;
    let keys = Arc::new(in_memory());
    let conversions = Conversions::new(&[plugin], keys.clone());
    let (_, v2_spec) = forged();
    let kept = json!({"v1alpha2": {"spec": v2_spec}}).to_string();
    let huge = format!(
        "{{\"v1alpha2\":{{\"spec\":{{\"description\":\"{}\"}}}}}}",
        "x".repeat(MAX_BYTES)
    );
    // Under the right key, but not over this data for this object.
    let signed_elsewhere = keys.mac(b"something else");
    for (what, annotations) in [
        ("hand-written", json!({PRESERVED: kept})),
        (
            "not JSON",
            json!({PRESERVED: "{\"v1alpha2\": {", MAC_ANNOTATION: "AAAA"}),
        ),
        ("huge", json!({PRESERVED: huge})),
        ("a number", json!({PRESERVED: 7})),
        (
            "an object",
            json!({PRESERVED: {"v1alpha2": {"spec": v2_spec}}}),
        ),
        ("null", json!({PRESERVED: null})),
        (
            "a MAC of something else",
            json!({PRESERVED: kept, MAC_ANNOTATION: signed_elsewhere}),
        ),
        (
            "a MAC that is a list",
            json!({PRESERVED: kept, MAC_ANNOTATION: ["x"]}),
        ),
    ] {
        let answer = conversions
            .review(review_of(annotations))
            .await
            .response
            .unwrap();
        assert!(answer.result.is_success(), "{what}: {:?}", answer.result);
        let object = &answer.converted_objects[0];
        let network = &object["spec"]["network"];
        assert!(network.get("zone").is_none(), "{what}: {network}");
        assert!(
            network["networkDevices"][0].get("queues").is_none(),
            "{what}: {network}"
        );
        // What came in is not passed on: the answer keeps only what the webhook wrote.
        let out = &object["metadata"]["annotations"];
        assert!(!out.to_string().contains("not a zone"), "{what}: {out}");
    }
}
