//! Where pve-sim used to fail more politely than Proxmox VE, one test per difference,
//! each checking PVE's own words (qemu-server, pve-storage, pve-access-control,
//! pve-manager sources of the PVE versions whose official schema is in `reference/`).

use std::time::Duration;

use crate::common::{self, TOKEN, assert_shape, enc, start, start_fast, violations};
use pve_sim::{Config, FaultKind, FaultRule, Faults};
use reqwest::Method;
use serde_json::{Value, json};

const CLONE: &str = "/nodes/pve1/qemu/9000/clone";

fn lock_timeout(vmid: u32) -> String {
    format!("can't lock file '/var/lock/qemu-server/lock-{vmid}.conf' - got timeout")
}

fn slow_clones(clone_ms: u64) -> Config {
    let mut cfg = Config::fast();
    cfg.task_ms.insert("qmclone".into(), clone_ms);
    cfg
}

async fn task_status(s: &common::Sim, upid: &str) -> Value {
    let node = upid.split(':').nth(1).unwrap();
    s.get(&format!("/nodes/{node}/tasks/{}/status", enc(upid)))
        .await
        .data()
}

#[tokio::test]
async fn during_a_clone_the_new_vm_has_only_the_temporary_config_lock_clone() {
    let s = start(slow_clones(400)).await;
    let upid = s
        .call(Method::POST, CLONE, &[("newid", "123"), ("name", "w-1")])
        .await;
    let upid = upid.data().as_str().unwrap().to_string();
    // qemu-server writes "lock: clone" alone until the first disk is cloned
    let cfg = s.eventually("/nodes/pve1/qemu/123/config", |_| true).await;
    let keys: Vec<&String> = cfg.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["digest", "lock"], "{cfg}");
    assert_eq!(cfg["lock"], "clone");
    let res = s
        .call(Method::GET, "/cluster/resources", &[("type", "vm")])
        .await
        .data();
    let vm = res
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["vmid"] == 123)
        .unwrap();
    assert_eq!(
        (&vm["lock"], &vm["name"]),
        (&json!("clone"), &json!("VM 123"))
    );
    // a second clone onto the same ID is refused at once
    let r = s.call(Method::POST, CLONE, &[("newid", "123")]).await;
    assert_eq!(
        r.reason,
        "unable to create VM 123: config file already exists"
    );
    let st = s.wait_task(&upid).await;
    assert_eq!(st["exitstatus"], "OK");
    let cfg = s.get("/nodes/pve1/qemu/123/config").await.data();
    assert_eq!(cfg["name"], "w-1");
    assert!(cfg.get("lock").is_none());
}

#[tokio::test]
async fn a_config_write_during_a_clone_waits_for_its_lock_then_applies() {
    let s = start(slow_clones(300)).await;
    let upid = s
        .call(Method::POST, CLONE, &[("newid", "123")])
        .await
        .data();
    s.eventually("/nodes/pve1/qemu/123/config", |_| true).await;
    let r = s
        .call(
            Method::PUT,
            "/nodes/pve1/qemu/123/config",
            &[("cores", "3")],
        )
        .await;
    assert_eq!(r.status, 200, "{} {}", r.reason, r.text);
    // the write waited for the clone's lock: the clone had ended when it applied
    assert_eq!(
        task_status(&s, upid.as_str().unwrap()).await["exitstatus"],
        "OK"
    );
    let cfg = s.get("/nodes/pve1/qemu/123/config").await.data();
    assert_eq!(cfg["cores"], 3);
    assert!(cfg.get("lock").is_none(), "{cfg}");
}

#[tokio::test]
async fn a_config_write_fails_with_pves_lock_timeout_when_the_clone_outlasts_the_wait() {
    let mut cfg = slow_clones(60_000);
    cfg.lock_wait_ms = 50;
    let s = start(cfg).await;
    let upid = s
        .call(Method::POST, CLONE, &[("newid", "123")])
        .await
        .data();
    s.eventually("/nodes/pve1/qemu/123/config", |_| true).await;
    let r = s
        .call(
            Method::PUT,
            "/nodes/pve1/qemu/123/config",
            &[("cores", "3")],
        )
        .await;
    assert_eq!(
        (r.status.as_u16(), r.reason.clone()),
        (500, lock_timeout(123))
    );
    assert_eq!(
        r.json(),
        json!({"data": null, "message": format!("{}\n", lock_timeout(123))})
    );
    // a config write on the template waits for the clone's shared lock the same way
    let r = s
        .call(
            Method::PUT,
            "/nodes/pve1/qemu/9000/config",
            &[("cores", "3")],
        )
        .await;
    assert_eq!(r.reason, lock_timeout(9000));
    s.call(
        Method::DELETE,
        &format!("/nodes/pve1/tasks/{}", enc(upid.as_str().unwrap())),
        &[],
    )
    .await
    .data();
}

#[tokio::test]
async fn a_start_during_a_clone_waits_inside_its_task_then_starts() {
    let s = start(slow_clones(300)).await;
    let clone = s
        .call(Method::POST, CLONE, &[("newid", "123")])
        .await
        .data();
    s.eventually("/nodes/pve1/qemu/123/config", |_| true).await;
    let st = s
        .task(Method::POST, "/nodes/pve1/qemu/123/status/start", &[])
        .await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    assert_eq!(
        task_status(&s, clone.as_str().unwrap()).await["exitstatus"],
        "OK"
    );
    let cur = s.get("/nodes/pve1/qemu/123/status/current").await.data();
    assert_eq!(cur["status"], "running");
}

#[tokio::test]
async fn a_start_during_a_clone_fails_in_its_task_when_the_clone_outlasts_the_wait() {
    let mut cfg = slow_clones(60_000);
    cfg.lock_wait_ms = 50;
    let s = start(cfg).await;
    s.call(Method::POST, CLONE, &[("newid", "123")])
        .await
        .data();
    s.eventually("/nodes/pve1/qemu/123/config", |_| true).await;
    let r = s
        .call(Method::POST, "/nodes/pve1/qemu/123/status/start", &[])
        .await;
    assert_eq!(r.status, 200, "accepted: the lock is taken in the task");
    let st = s.wait_task(r.data().as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], json!(lock_timeout(123)));
}

#[tokio::test]
async fn the_loser_of_a_vmid_race_is_accepted_and_fails_inside_its_task() {
    let s = start_fast().await;
    s.sim.state().set_faults(Faults {
        rules: vec![FaultRule {
            endpoint: "POST /nodes/{node}/qemu/{vmid}/clone".into(),
            kind: FaultKind::VmidRace,
            max_count: Some(1),
            ..FaultRule::default()
        }],
        ..Faults::default()
    });
    let r = s
        .call(Method::POST, CLONE, &[("newid", "150"), ("name", "mine")])
        .await;
    assert_eq!(r.status, 200, "both racers get a UPID");
    let st = s.wait_task(r.data().as_str().unwrap()).await;
    assert_eq!(
        st["exitstatus"],
        "unable to create VM 150: config file already exists"
    );
    // the winner's VM stays as it is
    let vm = s.sim.state().vm(150).expect("the other client's VM");
    assert_eq!(vm["name"], "vmid-race-150");
    let hits = s.sim_get("/_sim/faults/hits").await;
    assert_eq!(hits[0]["fired"], 1);
    // the next clone onto a free ID works
    let st = s.task(Method::POST, CLONE, &[("newid", "151")]).await;
    assert_eq!(st["exitstatus"], "OK");
}

#[tokio::test]
async fn volume_attributes_are_served_as_pve_storage_does() {
    let s = start_fast().await;
    let form = reqwest::multipart::Form::new().text("content", "iso").part(
        "filename",
        reqwest::multipart::Part::bytes(vec![0u8; 4096]).file_name("seed.iso"),
    );
    let r = s
        .send(
            s.http
                .post(s.url("/nodes/pve1/storage/local/upload"))
                .header("Authorization", TOKEN)
                .multipart(form),
        )
        .await;
    s.wait_task(r.data().as_str().unwrap()).await;
    let path = format!(
        "/nodes/pve1/storage/local/content/{}",
        enc("local:iso/seed.iso")
    );
    let info = s.get(&path).await.data();
    assert_shape(
        "GET /nodes/{node}/storage/{storage}/content/{volume}",
        &info,
    );
    assert_eq!(
        info,
        json!({"path": "/var/lib/vz/template/iso/seed.iso", "size": 4096, "used": 4096, "format": "iso"})
    );
    let disk = s
        .get(&format!(
            "/nodes/pve1/storage/local-lvm/content/{}",
            enc("local-lvm:base-9000-disk-0")
        ))
        .await
        .data();
    assert_eq!(disk["path"], "/dev/pve/base-9000-disk-0");
    let r = s
        .get(&format!(
            "/nodes/pve1/storage/local/content/{}",
            enc("local:iso/none.iso")
        ))
        .await;
    assert_eq!(
        (r.status.as_u16(), r.reason.as_str()),
        (
            500,
            "volume_size_info on 'local:iso/none.iso' failed - no format"
        )
    );
    let r = s
        .get(&format!(
            "/nodes/pve1/storage/local/content/{}",
            enc("local-lvm:x")
        ))
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["errors"]["volume"],
        "storage ID mismatch (local-lvm != local)"
    );
}

#[tokio::test]
async fn a_node_without_containers_lists_none() {
    let s = start_fast().await;
    let lxc = s.get("/nodes/pve2/lxc").await.data();
    assert_eq!(lxc, json!([]));
    assert_shape("GET /nodes/{node}/lxc", &lxc);
}

#[tokio::test]
async fn cloud_init_status_runs_through_agent_exec_and_exec_status() {
    let mut cfg = Config::fast();
    cfg.cloud_init_delay_ms = 300;
    let s = start(cfg).await;
    s.task(Method::POST, CLONE, &[("newid", "100")]).await;
    s.task(Method::POST, "/nodes/pve1/qemu/100/status/start", &[])
        .await;
    let exec = async |argv: &[&str]| {
        let form: Vec<(&str, &str)> = argv.iter().map(|a| ("command", *a)).collect();
        s.call(Method::POST, "/nodes/pve1/qemu/100/agent/exec", &form)
            .await
    };
    let status = async |pid: &Value| {
        s.call(
            Method::GET,
            "/nodes/pve1/qemu/100/agent/exec-status",
            &[("pid", &pid.to_string())],
        )
        .await
        .data()
    };
    let started = exec(&["cloud-init", "status"]).await.data();
    assert_shape("POST /nodes/{node}/qemu/{vmid}/agent/exec", &started);
    let early = status(&started["pid"]).await;
    assert_shape("GET /nodes/{node}/qemu/{vmid}/agent/exec-status", &early);
    assert_eq!(
        early,
        json!({"exited": 1, "exitcode": 0, "out-data": "status: running\n"})
    );
    // `--wait` blocks until cloud-init is done: the process has not exited before
    let waiting = exec(&["cloud-init", "status", "--wait"]).await.data();
    assert_eq!(status(&waiting["pid"]).await, json!({"exited": 0}));
    let done = loop {
        let st = status(&waiting["pid"]).await;
        if st["exited"] == 1 {
            break st;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(done["out-data"], "status: done\n");
    let again = exec(&["cloud-init", "status"]).await.data();
    assert_eq!(status(&again["pid"]).await["out-data"], "status: done\n");
    // a JSON body carries `command` as an array (go-proxmox sends it so)
    let r = s
        .send(
            s.http
                .post(s.url("/nodes/pve1/qemu/100/agent/exec"))
                .header("Authorization", TOKEN)
                .json(&json!({"command": ["cloud-init", "status"], "input-data": ""})),
        )
        .await;
    assert_eq!(status(&r.data()["pid"]).await["out-data"], "status: done\n");
    // what the agent answers for a program that does not exist, and an unknown PID
    let r = exec(&["nope"]).await;
    assert_eq!(
        r.message(),
        "Agent error: Failed to execute child process \u{201c}nope\u{201d} (No such file or directory)\n"
    );
    let r = s
        .call(
            Method::GET,
            "/nodes/pve1/qemu/100/agent/exec-status",
            &[("pid", "4242")],
        )
        .await;
    assert_eq!(r.reason, "Agent error: Invalid parameter 'pid'");
    let r = s
        .call(Method::POST, "/nodes/pve1/qemu/100/agent/exec", &[])
        .await;
    assert_eq!(
        r.json()["errors"]["command"],
        "property is missing and it is not optional"
    );
}

#[tokio::test]
async fn task_logs_and_task_lists_carry_total() {
    let s = start_fast().await;
    let st = s.task(Method::POST, CLONE, &[("newid", "100")]).await;
    let upid = enc(st["upid"].as_str().unwrap());
    let r = s
        .call(
            Method::GET,
            &format!("/nodes/pve1/tasks/{upid}/log"),
            &[("start", "1"), ("limit", "1")],
        )
        .await;
    let body = r.json();
    let lines = body["data"].as_array().unwrap();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["n"], 2);
    assert!(body["total"].as_u64().unwrap() >= 2, "{body}");
    assert_eq!(
        body["total"].as_u64().unwrap() as usize,
        s.get(&format!("/nodes/pve1/tasks/{upid}/log"))
            .await
            .data()
            .as_array()
            .unwrap()
            .len()
    );
    let r = s
        .call(Method::GET, "/nodes/pve1/tasks", &[("limit", "0")])
        .await;
    assert_eq!(r.json()["total"], 1);
    assert_eq!(r.json()["data"], json!([]));
}

#[tokio::test]
async fn a_bad_token_is_401_with_pves_reason_phrase_and_no_body() {
    let s = start_fast().await;
    for (token, reason) in [
        ("capmox@pve!capi=WRONG", "invalid token value!"),
        (
            "capmox@pve!other=REDACTED-SIM-SECRET",
            "no such token 'other' for user 'capmox@pve'",
        ),
        ("nobody@pve!capi=x", "no such user ('nobody@pve')"),
        (
            "capmox@pve=x",
            "'capmox@pve' is not a valid token ID - not able to split into user and token parts",
        ),
    ] {
        let r = s
            .send(
                s.http
                    .get(s.url("/version"))
                    .header("Authorization", format!("PVEAPIToken={token}")),
            )
            .await;
        assert_eq!(
            (r.status.as_u16(), r.reason.as_str()),
            (401, reason),
            "{token}"
        );
        assert_eq!(r.text, "", "{token}");
    }
    let r = s.send(s.http.get(s.url("/version"))).await;
    assert_eq!((r.status.as_u16(), r.reason.as_str()), (401, "No ticket"));
}

#[tokio::test]
async fn migrate_refuses_what_pve_refuses_in_the_api_call() {
    let s = start_fast().await;
    s.task(Method::POST, CLONE, &[("newid", "100")]).await;
    s.task(Method::POST, "/nodes/pve1/qemu/100/status/start", &[])
        .await;
    let migrate = async |node: &str, form: &[(&str, &str)]| {
        s.call(
            Method::POST,
            &format!("/nodes/{node}/qemu/100/migrate"),
            form,
        )
        .await
    };
    let r = migrate("pve1", &[("target", "pve1")]).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["errors"]["target"], "target is local node.");
    let r = migrate("pve1", &[("target", "pve9")]).await;
    assert_eq!(r.reason, "no such cluster node 'pve9'");
    let r = migrate("pve1", &[("target", "pve2"), ("force", "1")]).await;
    assert_eq!(
        r.json()["errors"]["force"],
        "Only root may use this option."
    );
    let r = migrate("pve1", &[("target", "pve2")]).await;
    assert_eq!(r.reason, "can't migrate running VM without --online");
    let r = migrate("pve2", &[("target", "pve3")]).await;
    assert_eq!(
        r.reason,
        "Configuration file 'nodes/pve2/qemu-server/100.conf' does not exist"
    );
}

#[tokio::test]
async fn migrate_is_a_task_that_moves_the_vm_or_aborts_as_qemu_migrate_does() {
    let s = start_fast().await;
    s.task(Method::POST, CLONE, &[("newid", "100"), ("full", "1")])
        .await;
    s.task(Method::POST, "/nodes/pve1/qemu/100/status/start", &[])
        .await;
    // live, with its disk on local storage: refused unless with-local-disks
    let st = s
        .task(
            Method::POST,
            "/nodes/pve1/qemu/100/migrate",
            &[("target", "pve2"), ("online", "1")],
        )
        .await;
    assert_eq!(st["type"], "qmigrate");
    assert_eq!(st["exitstatus"], "migration aborted");
    let log = s
        .get(&format!(
            "/nodes/pve1/tasks/{}/log",
            enc(st["upid"].as_str().unwrap())
        ))
        .await
        .data();
    let text: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["t"].as_str())
        .collect();
    assert!(
        text.iter().any(|l| l
            .contains("can't live migrate attached local disks without with-local-disks option")),
        "{text:?}"
    );
    assert!(
        text.contains(
            &"ERROR: Problem found while scanning volumes - can't migrate VM - check log"
        ),
        "{text:?}"
    );
    assert!(
        s.get("/nodes/pve1/qemu/100/config")
            .await
            .data()
            .get("lock")
            .is_none()
    );
    // with-local-disks: moved, still running, disk on the target's storage
    let st = s
        .task(
            Method::POST,
            "/nodes/pve1/qemu/100/migrate",
            &[
                ("target", "pve2"),
                ("online", "1"),
                ("with-local-disks", "1"),
            ],
        )
        .await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    let r = s.get("/nodes/pve1/qemu/100/config").await;
    assert_eq!(
        r.reason,
        "Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist"
    );
    let cur = s.get("/nodes/pve2/qemu/100/status/current").await.data();
    assert_eq!(cur["status"], "running");
    let content = s
        .call(
            Method::GET,
            "/nodes/pve2/storage/local-lvm/content",
            &[("vmid", "100")],
        )
        .await
        .data();
    assert!(!content.as_array().unwrap().is_empty(), "{content}");
    // a linked clone on local storage cannot move
    s.task(Method::POST, CLONE, &[("newid", "101")]).await;
    let st = s
        .task(
            Method::POST,
            "/nodes/pve1/qemu/101/migrate",
            &[("target", "pve3")],
        )
        .await;
    assert_eq!(st["exitstatus"], "migration aborted");
}

#[tokio::test]
async fn the_inspection_api_moves_a_vm_as_a_migration_by_someone_else() {
    let s = start(slow_clones(300)).await;
    s.task(Method::POST, CLONE, &[("newid", "100"), ("full", "1")])
        .await;
    let move_to = async |vmid: u32, target: &str| {
        s.http
            .post(format!(
                "{}/_sim/vms/{vmid}/migrate?target={target}",
                s.sim.base_url()
            ))
            .send()
            .await
            .unwrap()
    };
    assert_eq!(move_to(100, "pve3").await.status(), 200);
    assert_eq!(s.sim.state().vm(100).unwrap()["node"], "pve3");
    assert!(
        s.get("/nodes/pve3/qemu/100/config")
            .await
            .status
            .is_success()
    );
    // not while a clone holds the VM
    s.call(Method::POST, CLONE, &[("newid", "102")])
        .await
        .data();
    s.eventually("/nodes/pve1/qemu/102/config", |_| true).await;
    let r = move_to(102, "pve2").await;
    assert_eq!(r.status(), 409);
    assert_eq!(
        s.sim.state().migrate_vm(102, "pve2"),
        Err("VM is locked (clone)".into())
    );
}

#[tokio::test]
async fn fault_rules_match_by_method_and_path_and_count_their_hits() {
    let s = start_fast().await;
    s.task(Method::POST, CLONE, &[("newid", "100")]).await;
    let rules = json!({"rules": [
        {"name": "pve1 busy", "endpoint": "GET /nodes/pve1/**", "status": 503,
         "message": "service unavailable", "skip": 1, "max_count": 2},
        {"endpoint": "POST /nodes/{node}/qemu/{vmid}/status/start", "kind": "task_failure",
         "message": "start failed: QEMU exited with code 1"},
        {"endpoint": "PUT /nodes/*/qemu/100/config", "kind": "lock_timeout", "probability": 1.0},
        {"endpoint": "GET /version", "status": 595},
        {"endpoint": "GET /cluster/nextid", "kind": "delay", "delay_ms": 5, "probability": 0.0},
    ]});
    let r = s
        .http
        .put(format!("{}/_sim/faults", s.sim.base_url()))
        .json(&rules)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let statuses: Vec<u16> = {
        let mut v = vec![];
        for _ in 0..4 {
            v.push(s.get("/nodes/pve1/status").await.status.as_u16());
        }
        v
    };
    assert_eq!(statuses, [200, 503, 503, 200]);
    assert_eq!(s.get("/nodes/pve2/status").await.status, 200);
    let r = s.get("/nodes/pve1/qemu/100/config").await;
    assert_eq!(r.status, 200, "max_count reached");
    let hits = s.sim.state().fault_hits();
    assert_eq!(hits[0]["name"], "pve1 busy");
    assert_eq!(
        (&hits[0]["matched"], &hits[0]["skipped"], &hits[0]["fired"]),
        (&json!(5), &json!(1), &json!(2))
    );
    let st = s
        .task(Method::POST, "/nodes/pve1/qemu/100/status/start", &[])
        .await;
    assert_eq!(st["exitstatus"], "start failed: QEMU exited with code 1");
    let r = s
        .call(
            Method::PUT,
            "/nodes/pve1/qemu/100/config",
            &[("cores", "2")],
        )
        .await;
    assert_eq!(r.reason, lock_timeout(100));
    let r = s.get("/version").await;
    assert_eq!((r.status.as_u16(), r.text.as_str()), (595, ""));
    s.get("/cluster/nextid").await.data();
    let hits = s.sim_get("/_sim/faults/hits").await;
    let h = |i: usize| {
        (
            hits[i]["matched"].clone(),
            hits[i]["skipped"].clone(),
            hits[i]["fired"].clone(),
        )
    };
    assert_eq!(h(1), (json!(1), json!(0), json!(1)));
    assert_eq!(h(2), (json!(1), json!(0), json!(1)));
    assert_eq!(h(3), (json!(1), json!(0), json!(1)));
    assert_eq!(
        h(4),
        (json!(1), json!(0), json!(0)),
        "probability 0 never fires"
    );
    // a lock timeout on a task endpoint surfaces inside the task
    s.sim.state().set_faults(Faults {
        rules: vec![FaultRule {
            endpoint: "POST /nodes/pve1/qemu/100/status/stop".into(),
            kind: FaultKind::LockTimeout,
            ..FaultRule::default()
        }],
        ..Faults::default()
    });
    assert_eq!(
        s.sim.state().fault_hits()[0]["fired"],
        0,
        "counters start over"
    );
    let st = s
        .task(Method::POST, "/nodes/pve1/qemu/100/status/stop", &[])
        .await;
    assert_eq!(st["exitstatus"], json!(lock_timeout(100)));
}

#[tokio::test]
async fn ten_thousand_vms_are_listed_numbered_and_cloned_alongside() {
    let mut cfg = Config::fast();
    // VMIDs 100..=8999 and 9001..=10100 around the template 9000
    for (first_vmid, count) in [(100, 8_900), (9_001, 1_100)] {
        cfg.vm_sets.push(pve_sim::VmSet {
            count,
            clone_of: 9000,
            first_vmid,
            running: true,
            ..pve_sim::VmSet::default()
        });
    }
    let s = start(cfg).await;
    let vms = s
        .call(Method::GET, "/cluster/resources", &[("type", "vm")])
        .await
        .data();
    assert_eq!(vms.as_array().unwrap().len(), 10_001);
    assert!(violations("9.1.3", "GET /cluster/resources", &vms).is_empty());
    assert_eq!(s.get("/cluster/nextid").await.data(), "10101");
    let st = s.task(Method::POST, CLONE, &[("newid", "10101")]).await;
    assert_eq!(st["exitstatus"], "OK");
    assert_eq!(s.get("/cluster/nextid").await.data(), "10102");
    let mut per_node = 0;
    for node in ["pve1", "pve2", "pve3"] {
        per_node += s
            .get(&format!("/nodes/{node}/qemu"))
            .await
            .data()
            .as_array()
            .unwrap()
            .len();
    }
    assert_eq!(per_node, 10_002);
}

/// Two clients cloning to one `newid` at the same moment: PVE may accept both (the check
/// in the API call runs before either worker has written the config); then the loser's
/// task fails with PVE's words. Whoever wins, there is one VM per VMID.
#[tokio::test]
async fn two_clones_racing_for_one_newid_make_one_vm_and_the_loser_says_why() {
    let s = start_fast().await;
    let mut lost_in_task = 0;
    for newid in 300..310u32 {
        let id = newid.to_string();
        let form = [("newid", id.as_str())];
        let (a, b) = tokio::join!(
            s.call(Method::POST, CLONE, &form),
            s.call(Method::POST, CLONE, &form)
        );
        let mut ok = 0;
        for r in [a, b] {
            if r.status != 200 {
                assert_eq!(
                    r.reason,
                    format!("unable to create VM {newid}: config file already exists")
                );
                continue;
            }
            let st = s.wait_task(r.data().as_str().unwrap()).await;
            match st["exitstatus"].as_str().unwrap() {
                "OK" => ok += 1,
                e => {
                    lost_in_task += 1;
                    assert!(
                        e == format!("unable to create VM {newid}: config file already exists")
                            || e == lock_timeout(newid),
                        "{e}"
                    );
                }
            }
        }
        assert_eq!(ok, 1, "one clone of VM {newid} succeeded");
        assert!(s.sim.state().vm(newid).is_some());
    }
    println!("{lost_in_task} of 10 races were lost inside the task");
    let vms = s.sim.state().vms();
    assert_eq!(vms.len(), 11, "one VM per VMID, and the template");
}

/// `GET /cluster/tasks`: every node's running tasks (no `endtime`) and its newest
/// finished ones, with `endtime` and `status`; older finished ones drop out of it (their
/// status stays readable on their node).
#[tokio::test]
async fn the_cluster_task_list_shows_running_tasks_and_each_nodes_newest_finished_ones() {
    let mut cfg = Config::fast();
    cfg.task_ms.insert("qmclone".into(), 400);
    let s = start(cfg).await;
    let first = s.task(Method::POST, CLONE, &[("newid", "101")]).await;
    let first = first["upid"].as_str().unwrap().to_string();
    let clone = s
        .call(Method::POST, CLONE, &[("newid", "100")])
        .await
        .data();
    let clone = clone.as_str().unwrap().to_string();
    let listed = s.get("/cluster/tasks").await.data();
    let entry = |list: &Value, upid: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|t| t["upid"] == upid)
            .cloned()
    };
    let running = entry(&listed, &clone).expect("the running clone is listed");
    assert!(running.get("endtime").is_none(), "{running}");
    assert_eq!(running["node"], "pve1");
    let done = entry(&listed, &first).expect("a finished task is listed");
    assert_eq!(done["status"], "OK");
    assert!(done["endtime"].is_u64(), "{done}");
    s.wait_task(&clone).await;
    // Enough newer finished tasks on pve1 push the first one out of the list.
    for _ in 0..25 {
        s.task(Method::POST, "/nodes/pve1/qemu/100/status/start", &[])
            .await;
        s.task(Method::POST, "/nodes/pve1/qemu/100/status/stop", &[])
            .await;
    }
    let listed = s.get("/cluster/tasks").await.data();
    assert!(
        entry(&listed, &first).is_none(),
        "the oldest finished task left the list"
    );
    let finished_on_pve1 = listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["node"] == "pve1" && t.get("endtime").is_some())
        .count();
    assert_eq!(
        finished_on_pve1,
        pve_sim::tasks::CLUSTER_TASKS_FINISHED_PER_NODE
    );
    let path = format!("/nodes/pve1/tasks/{}/status", enc(&first));
    assert_eq!(s.get(&path).await.data()["exitstatus"], "OK");
}
