//! Fault injection (at start and at runtime) and the /_sim inspection routes.

use crate::common::{start, start_fast};
use pve_sim::{Config, FaultRule, Faults};
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn endpoint_errors_can_be_injected_at_start_and_at_runtime() {
    let mut cfg = Config::fast();
    cfg.faults.rules.push(FaultRule {
        endpoint: "GET /nodes".into(),
        message: Some("boom".into()),
        ..FaultRule::default()
    });
    let s = start(cfg).await;
    let r = s.get("/nodes").await;
    assert_eq!((r.status.as_u16(), r.reason.as_str()), (500, "boom"));
    assert_eq!(r.json(), json!({"data": null, "message": "boom\n"}));

    let r = s
        .http
        .put(format!("{}/_sim/faults", s.sim.base_url()))
        .json(&json!({"errors": [{"endpoint": "GET /version", "rate": 1.0, "status": 595}], "unreachable_nodes": ["pve2"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(s.get("/nodes").await.status, 200);
    let r = s.get("/version").await;
    assert_eq!(r.status.as_u16(), 595);
    assert_eq!(r.text, "");
    assert_eq!(s.get("/nodes/pve2/status").await.status.as_u16(), 595);
    assert_eq!(s.get("/nodes/pve1/status").await.status, 200);
    let nodes = s
        .call(Method::GET, "/cluster/resources", &[("type", "node")])
        .await
        .data();
    let pve2 = nodes
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == "pve2")
        .unwrap();
    assert_eq!(pve2["status"], "offline");
    assert_eq!(
        s.sim.state().faults().unreachable_nodes,
        vec!["pve2".to_string()]
    );
}

#[tokio::test]
async fn task_failures_and_lock_timeouts_surface_like_pve() {
    let s = start_fast().await;
    let state = s.sim.state();
    state.set_faults(Faults {
        task_failure_rate: 1.0,
        ..Faults::default()
    });
    let st = s
        .task(
            Method::POST,
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "100")],
        )
        .await;
    assert_eq!(st["exitstatus"], "clone failed: simulated task failure");
    assert!(
        state.vm(100).is_none(),
        "a failed clone leaves no VM behind"
    );

    state.set_faults(Faults {
        lock_timeout_rate: 1.0,
        ..Faults::default()
    });
    let r = s
        .call(
            Method::PUT,
            "/nodes/pve1/qemu/9000/config",
            &[("cores", "2")],
        )
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.reason,
        "can't lock file '/var/lock/qemu-server/lock-9000.conf' - got timeout"
    );
    // the clone takes its locks in its worker: accepted, then the task fails
    let st = s
        .task(
            Method::POST,
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "100")],
        )
        .await;
    assert_eq!(
        st["exitstatus"],
        "can't lock file '/var/lock/qemu-server/lock-9000.conf' - got timeout"
    );
    assert!(state.vm(100).is_none());

    state.set_faults(Faults::default());
    s.task(
        Method::POST,
        "/nodes/pve1/qemu/9000/clone",
        &[("newid", "100")],
    )
    .await;
    state.set_faults(Faults {
        lock_timeout_rate: 1.0,
        latency_ms: 5,
        ..Faults::default()
    });
    let st = s
        .task(Method::POST, "/nodes/pve1/qemu/100/status/start", &[])
        .await;
    assert_eq!(
        st["exitstatus"],
        "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout"
    );
}

#[tokio::test]
async fn tasks_beyond_the_node_concurrency_limit_queue() {
    let mut cfg = Config::fast();
    cfg.node_task_concurrency = 1;
    cfg.task_ms.insert("qmclone".into(), 60_000);
    let s = start(cfg).await;
    let a = s
        .call(
            Method::POST,
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "100")],
        )
        .await
        .data();
    let b = s
        .call(
            Method::POST,
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "101")],
        )
        .await
        .data();
    let tasks = loop {
        let t = s.sim_get("/_sim/tasks").await;
        if t.as_array().unwrap().iter().any(|t| t["queued"] == false) {
            break t;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    };
    let q = |u: &serde_json::Value| {
        tasks
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["upid"] == *u)
            .unwrap()["queued"]
            .clone()
    };
    assert_eq!((q(&a), q(&b)), (json!(false), json!(true)));
    // stopping a task ends it as interrupted
    let r = s
        .call(
            Method::DELETE,
            &format!(
                "/nodes/pve1/tasks/{}",
                crate::common::enc(a.as_str().unwrap())
            ),
            &[],
        )
        .await;
    assert_eq!(r.data(), serde_json::Value::Null);
    let st = s.wait_task(a.as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "clone failed: interrupted by signal");
}

#[tokio::test]
async fn inspection_lists_vms_counts_requests_and_resets_counters() {
    let s = start_fast().await;
    s.get("/nodes").await.data();
    s.get("/nodes/pve1/qemu/9000/config").await.data();
    s.get("/nodes/pve1/qemu/9000/config").await.data();
    s.get("/nodes/pve1/nope").await;
    let c = s.sim_get("/_sim/counters").await;
    assert_eq!(c["GET /nodes"], 1);
    assert_eq!(c["GET /nodes/{node}/qemu/{vmid}/config"], 2);
    assert_eq!(c["GET <unknown>"], 1);
    let vms = s.sim_get("/_sim/vms").await;
    assert_eq!(vms[0]["vmid"], 9000);
    assert_eq!(vms[0]["config"]["template"], "1");
    let one = s.sim_get("/_sim/vms/9000").await;
    assert_eq!(one["name"], "ubuntu-2404-cloudinit");
    let r = s
        .http
        .post(format!("{}/_sim/counters/reset", s.sim.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(s.sim.state().counters().is_empty());
    let state = s.sim.state().dump();
    assert_eq!(state["nodes"].as_array().unwrap().len(), 3);
    let endpoints = s.sim_get("/_sim/endpoints").await;
    assert!(
        endpoints
            .as_array()
            .unwrap()
            .contains(&json!("POST /nodes/{node}/qemu/{vmid}/clone"))
    );
}

#[tokio::test]
async fn a_config_write_waits_for_the_lock_a_running_task_holds_and_can_time_out() {
    let mut cfg = Config::fast();
    cfg.task_ms.insert("qmstart".into(), 2000);
    cfg.lock_wait_ms = 50;
    let s = start(cfg).await;
    s.task(
        Method::POST,
        "/nodes/pve1/qemu/9000/clone",
        &[("newid", "100")],
    )
    .await;
    let upid = s
        .call(Method::POST, "/nodes/pve1/qemu/100/status/start", &[])
        .await
        .data();
    // wait until the start task runs (holds the lock)
    loop {
        let state = s.sim.state().dump();
        let t = state["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["upid"] == upid)
            .unwrap()
            .clone();
        if t["queued"] == false {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let r = s
        .call(
            Method::PUT,
            "/nodes/pve1/qemu/100/config",
            &[("cores", "3")],
        )
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.reason,
        "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout"
    );
    // a second task on the same VM fails inside the task the same way
    let st = s
        .task(Method::POST, "/nodes/pve1/qemu/100/status/stop", &[])
        .await;
    assert_eq!(
        st["exitstatus"],
        "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout"
    );
    assert_eq!(
        s.wait_task(upid.as_str().unwrap()).await["exitstatus"],
        "OK"
    );
    s.call(
        Method::PUT,
        "/nodes/pve1/qemu/100/config",
        &[("cores", "3")],
    )
    .await
    .data();
}

#[tokio::test]
async fn slow_tasks_stay_running_and_can_be_stopped() {
    let s = start_fast().await;
    s.sim.state().set_faults(Faults {
        slow_task_rate: 1.0,
        slow_task_factor: Some(600.0),
        ..Faults::default()
    });
    let upid = s
        .call(
            Method::POST,
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "100")],
        )
        .await
        .data();
    let upid = upid.as_str().unwrap();
    let st = s
        .get(&format!(
            "/nodes/pve1/tasks/{}/status",
            crate::common::enc(upid)
        ))
        .await
        .data();
    assert_eq!(st["status"], "running");
    let active = s
        .call(Method::GET, "/nodes/pve1/tasks", &[("source", "active")])
        .await
        .data();
    assert_eq!(active[0]["upid"], upid);
    s.call(
        Method::DELETE,
        &format!("/nodes/pve1/tasks/{}", crate::common::enc(upid)),
        &[],
    )
    .await
    .data();
    assert_eq!(
        s.wait_task(upid).await["exitstatus"],
        "clone failed: interrupted by signal"
    );
    // like PVE's clone worker, the interrupted clone removes what it made
    assert!(s.sim.state().vm(100).is_none());
}

#[tokio::test]
async fn a_crashed_vm_is_stopped_without_a_task() {
    let s = start_fast().await;
    s.task(
        Method::POST,
        "/nodes/pve1/qemu/9000/clone",
        &[("newid", "100")],
    )
    .await;
    s.task(Method::POST, "/nodes/pve1/qemu/100/status/start", &[])
        .await;
    let r = s
        .http
        .post(format!("{}/_sim/vms/100/crash", s.sim.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        s.get("/nodes/pve1/qemu/100/status/current").await.data()["status"],
        "stopped"
    );
    assert!(!s.sim.state().crash_vm(100), "already stopped");
    let r = s
        .get("/nodes/pve1/qemu/100/agent/network-get-interfaces")
        .await;
    assert_eq!(r.reason, "VM 100 is not running");
}

#[tokio::test]
async fn a_lost_reply_is_an_error_for_a_request_that_was_carried_out() {
    let mut cfg = Config::fast();
    cfg.faults.rules.push(FaultRule {
        endpoint: "POST /nodes/{node}/qemu/{vmid}/clone".into(),
        status: 595,
        handled: true,
        max_count: Some(1),
        ..FaultRule::default()
    });
    let s = start(cfg).await;
    let r = s
        .call(
            Method::POST,
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "100"), ("name", "lost")],
        )
        .await;
    assert_eq!((r.status.as_u16(), r.text.as_str()), (595, ""));
    let config = s
        .eventually("/nodes/pve1/qemu/100/config", |c| {
            c["lock"].is_null() && c["name"] == "lost"
        })
        .await;
    assert!(
        config["digest"].is_string(),
        "the clone happened all the same"
    );
    assert_eq!(s.sim.state().fault_hits()[0]["fired"], 1);
}

#[tokio::test]
async fn destroyed_vms_are_recorded_with_who_destroyed_them_and_their_last_config() {
    let s = start_fast().await;
    s.task(
        Method::POST,
        "/nodes/pve1/qemu/9000/clone",
        &[
            ("newid", "100"),
            ("description", "hyperplug.machine-uid=u1"),
        ],
    )
    .await;
    assert_eq!(s.sim_get("/_sim/destroyed").await, json!([]));
    let st = s
        .task(Method::DELETE, "/nodes/pve1/qemu/100", &[("purge", "1")])
        .await;
    assert_eq!(st["exitstatus"], "OK");
    let destroyed = s.sim_get("/_sim/destroyed").await;
    assert_eq!(destroyed[0]["vmid"], 100);
    assert_eq!(destroyed[0]["node"], "pve1");
    assert_eq!(destroyed[0]["user"], "capmox@pve!capi");
    assert_eq!(
        destroyed[0]["config"]["description"],
        "hyperplug.machine-uid=u1"
    );
    assert!(destroyed[0]["at_ms"].as_u64().unwrap() > 0);
    assert_eq!(
        s.sim.state().destroyed(),
        destroyed.as_array().unwrap().clone()
    );
}
