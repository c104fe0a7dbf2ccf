//! Cluster-wide views and the JSON request body PVE also accepts.

use crate::common::{TOKEN, start_fast};
use serde_json::json;

#[tokio::test]
async fn cluster_status_lists_the_cluster_then_its_nodes() {
    let s = start_fast().await;
    let st = s.get("/cluster/status").await.data();
    let items = st.as_array().unwrap();
    assert_eq!(items[0]["type"], "cluster");
    assert_eq!(items[0]["quorate"], 1);
    assert_eq!(items[0]["nodes"], 3);
    let nodes: Vec<&str> = items[1..]
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(nodes, ["pve1", "pve2", "pve3"]);
    assert!(
        items[1..]
            .iter()
            .all(|n| n["online"] == 1 && n["type"] == "node")
    );
    let pools = s.get("/pools").await.data();
    assert_eq!(pools, json!([{"poolid": "capi"}]));
    let all = s.get("/cluster/resources").await.data();
    let kinds: std::collections::BTreeSet<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        ["node", "pool", "qemu", "storage"]
    );
}

#[tokio::test]
async fn a_json_body_is_accepted_like_a_form() {
    let s = start_fast().await;
    let r = s
        .send(
            s.http
                .post(s.url("/nodes/pve1/qemu/9000/clone"))
                .header("Authorization", TOKEN)
                .json(&json!({"newid": 150, "full": true, "name": "from-json"})),
        )
        .await;
    let upid = r.data();
    assert_eq!(
        s.wait_task(upid.as_str().unwrap()).await["exitstatus"],
        "OK"
    );
    let cfg = s.get("/nodes/pve1/qemu/150/config").await.data();
    assert_eq!(cfg["name"], "from-json");
    assert_eq!(
        cfg["scsi0"], "local-lvm:vm-150-disk-0,size=10G",
        "a full clone"
    );
    let r = s
        .send(
            s.http
                .post(s.url("/nodes/pve1/qemu/9000/clone"))
                .header("Authorization", TOKEN)
                .json(&json!({"newid": "x"})),
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["errors"]["newid"],
        "type check ('integer') failed - got 'x'"
    );
}
