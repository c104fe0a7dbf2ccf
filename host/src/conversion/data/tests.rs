use serde_json::json;

use super::*;

const V1: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";

fn machine(annotations: Value) -> Value {
    json!({"apiVersion": V1, "kind": "ProxmoxMachine",
        "metadata": {"namespace": "ns", "name": "m", "annotations": annotations}})
}

/// `object` with `data` kept on it, as the webhook writes it.
fn kept(keys: &OwnershipKeys, mut object: Value, data: &str) -> Value {
    keep(keys, &mut object, Some(data.into()));
    object
}

async fn verdict(keys: &OwnershipKeys, object: &Value) -> Result<Option<String>, Untrusted> {
    let a = object.pointer("/metadata/annotations");
    let (data, mac) = (
        a.and_then(|a| a.get(PRESERVED_ANNOTATION)),
        a.and_then(|a| a.get(MAC_ANNOTATION)),
    );
    check(keys, &Holder::of(object), data, mac).await
}

#[tokio::test]
async fn what_the_manager_kept_for_this_object_is_trusted_as_it_is() {
    let keys = OwnershipKeys::in_memory();
    let data = r#"{"v1alpha2":{"spec":{"network":{"zone":"z1"}}}}"#;
    let object = kept(&keys, machine(json!({"x": "y"})), data);
    assert_eq!(
        object["metadata"]["annotations"][PRESERVED_ANNOTATION],
        data
    );
    assert!(object["metadata"]["annotations"][MAC_ANNOTATION].is_string());
    assert_eq!(trusted(&keys, &object).await.as_deref(), Some(data));
    // Nothing to keep: both go, other annotations stay.
    let mut object = object;
    keep(&keys, &mut object, None);
    assert_eq!(object["metadata"]["annotations"], json!({"x": "y"}));
    let mut bare = kept(&keys, json!({"metadata": {"name": "m"}}), "d");
    keep(&keys, &mut bare, None);
    assert_eq!(bare, json!({"metadata": {"name": "m"}}));
}

#[tokio::test]
async fn hand_written_edited_copied_or_foreign_data_is_not() {
    let keys = OwnershipKeys::in_memory();
    let data = r#"{"v1alpha2":{"spec":{"network":{"zone":"z1"}}}}"#;
    let hand_written = machine(json!({PRESERVED_ANNOTATION: data}));
    assert_eq!(verdict(&keys, &hand_written).await, Err(Untrusted::NoMac));
    assert_eq!(trusted(&keys, &hand_written).await, None);
    let signed = kept(&keys, machine(json!({})), data);
    let mut edited = signed.clone();
    edited["metadata"]["annotations"][PRESERVED_ANNOTATION] = json!(data.replace("z1", "z2"));
    assert_eq!(verdict(&keys, &edited).await, Err(Untrusted::DoesNotVerify));
    // Copied to another object: another name, namespace or kind, or another group.
    for (pointer, other) in [
        ("/metadata/name", "n"),
        ("/metadata/namespace", "other"),
        ("/kind", "ProxmoxCluster"),
        ("/apiVersion", "infrastructure.example.com/v1alpha1"),
    ] {
        let mut copy = signed.clone();
        *copy.pointer_mut(pointer).unwrap() = json!(other);
        assert_eq!(
            verdict(&keys, &copy).await,
            Err(Untrusted::DoesNotVerify),
            "{pointer}"
        );
    }
    // Signed by a manager with another key.
    let foreign = kept(&OwnershipKeys::in_memory(), machine(json!({})), data);
    assert_eq!(
        verdict(&keys, &foreign).await,
        Err(Untrusted::DoesNotVerify)
    );
    // Names run together differently are another object.
    let mut shifted = signed.clone();
    shifted["metadata"]["namespace"] = json!("ns\nm");
    shifted["metadata"]["name"] = json!("");
    assert_eq!(
        verdict(&keys, &shifted).await,
        Err(Untrusted::DoesNotVerify)
    );
    // The same object in the other version: the MAC binds the group, not the version.
    let mut v2 = signed.clone();
    v2["apiVersion"] = json!("infrastructure.cluster.x-k8s.io/v1alpha2");
    assert_eq!(verdict(&keys, &v2).await.unwrap().as_deref(), Some(data));
}

#[tokio::test]
async fn malformed_values_are_refused_without_panicking() {
    let keys = OwnershipKeys::in_memory();
    let mac = keys.mac(b"anything");
    // Not JSON, unsigned: refused. (Signed, a plugin's own data need not be JSON: the
    // host does not read it.)
    let not_json = machine(json!({PRESERVED_ANNOTATION: "{not json", MAC_ANNOTATION: mac}));
    assert_eq!(
        verdict(&keys, &not_json).await,
        Err(Untrusted::DoesNotVerify)
    );
    // Values that are not strings, as only a posted review can hold them.
    for value in [
        json!(1),
        json!(null),
        json!({"v1alpha2": {}}),
        json!(["a"]),
        json!(true),
    ] {
        let o = machine(json!({PRESERVED_ANNOTATION: value, MAC_ANNOTATION: mac}));
        assert_eq!(
            verdict(&keys, &o).await,
            Err(Untrusted::NotAString),
            "{value}"
        );
        assert_eq!(trusted(&keys, &o).await, None);
    }
    // A MAC that is not a string, not base64, or empty.
    for bad in [json!(7), json!({}), json!("!!not base64!!"), json!("")] {
        let o = machine(json!({PRESERVED_ANNOTATION: "{}", MAC_ANNOTATION: bad}));
        assert_eq!(
            verdict(&keys, &o).await,
            Err(Untrusted::DoesNotVerify),
            "{bad}"
        );
    }
    // Huge: refused by its length, whatever its MAC says.
    let huge = "x".repeat(MAX_BYTES + 1);
    let o = kept(&keys, machine(json!({})), &huge);
    assert_eq!(
        verdict(&keys, &o).await,
        Err(Untrusted::TooLarge(MAX_BYTES + 1))
    );
    // Annotations or metadata of the wrong shape hold no data, and keep writes none.
    for mut o in [
        json!({"kind": "ProxmoxMachine", "metadata": {"name": "m", "annotations": "x"}}),
        json!({"kind": "ProxmoxMachine", "metadata": {"name": "m", "annotations": [1]}}),
        json!({"kind": "ProxmoxMachine", "metadata": "m"}),
        json!({"kind": "ProxmoxMachine"}),
        json!("not an object"),
    ] {
        assert_eq!(trusted(&keys, &o).await, None, "{o}");
        let before = o.clone();
        keep(&keys, &mut o, Some("d".into()));
        assert_eq!(o, before);
    }
}

#[tokio::test]
async fn an_object_read_by_the_manager_is_checked_the_same_way() {
    let keys = OwnershipKeys::in_memory();
    let data = r#"{"v1alpha1":{"spec":{"target":"pve2"}}}"#;
    let v2 = "infrastructure.cluster.x-k8s.io/v1alpha2";
    let mut object = json!({"apiVersion": v2, "kind": "ProxmoxMachine",
        "metadata": {"namespace": "ns", "name": "m"}});
    keep(&keys, &mut object, Some(data.into()));
    let obj: DynamicObject = serde_json::from_value(object.clone()).unwrap();
    let group = "infrastructure.cluster.x-k8s.io";
    assert_eq!(
        trusted_in(&keys, group, "ProxmoxMachine", &obj)
            .await
            .as_deref(),
        Some(data)
    );
    object["metadata"]["annotations"][PRESERVED_ANNOTATION] = json!("{}");
    let obj: DynamicObject = serde_json::from_value(object).unwrap();
    assert_eq!(trusted_in(&keys, group, "ProxmoxMachine", &obj).await, None);
}

#[test]
fn warnings_are_bounded_per_object_and_per_minute() {
    let warned = untrusted_warnings();
    let t0 = Instant::now();
    assert_eq!(warned.may_warn("a", t0), Some(0));
    // The same object again: quiet until its interval is over.
    assert_eq!(warned.may_warn("a", t0 + Duration::from_secs(1)), None);
    // Other objects: up to the minute's budget.
    for i in 1..WARNINGS_PER_MINUTE {
        assert_eq!(
            warned.may_warn(&format!("o{i}"), t0),
            Some(u64::from(i == 1))
        );
    }
    assert_eq!(warned.may_warn("over", t0 + Duration::from_secs(30)), None);
    // The next minute: one more, saying how many were not logged since the last.
    assert_eq!(
        warned.may_warn("over", t0 + Duration::from_secs(61)),
        Some(1)
    );
    assert_eq!(warned.may_warn("a", t0 + Duration::from_secs(62)), None);
    assert_eq!(warned.may_warn("a", t0 + SAME_OBJECT_EVERY), Some(1));
}
