//! Full VM lifecycles over real HTTPS, every body checked against the official schema.

use std::time::Duration;

use crate::common::{assert_shape, enc, start, start_fast};
use pve_sim::Config;
use reqwest::Method;
use serde_json::Value;

#[tokio::test]
async fn a_template_is_cloned_configured_resized_started_stopped_and_destroyed() {
    let s = start_fast().await;

    let version = s.get("/version").await.data();
    assert_shape("GET /version", &version);
    assert_eq!(version["version"], "9.1.3");

    let nodes = s.get("/nodes").await.data();
    assert_shape("GET /nodes", &nodes);
    assert_eq!(nodes.as_array().unwrap().len(), 3);
    assert_eq!(nodes[0]["ssl_fingerprint"], s.sim.fingerprint());

    let status = s.get("/nodes/pve1/status").await.data();
    assert_shape("GET /nodes/{node}/status", &status);
    let free_before = status["memory"]["free"].as_u64().unwrap();

    let next = s.get("/cluster/nextid").await.data();
    assert_eq!(next, Value::String("100".into()), "nextid is a string");
    assert_shape("GET /cluster/nextid", &Value::from(100));

    // clone
    let r = s
        .call(
            Method::POST,
            "/nodes/pve1/qemu/9000/clone",
            &[
                ("newid", "100"),
                ("name", "cp-1"),
                ("full", "1"),
                ("storage", "local-lvm"),
                ("pool", "capi"),
            ],
        )
        .await;
    let upid = r.data().as_str().unwrap().to_string();
    assert_shape(
        "POST /nodes/{node}/qemu/{vmid}/clone",
        &Value::String(upid.clone()),
    );
    assert!(
        upid.starts_with("UPID:pve1:") && upid.ends_with(":qmclone:9000:capmox@pve!capi:"),
        "{upid}"
    );
    let st = s.wait_task(&upid).await;
    assert_shape("GET /nodes/{node}/tasks/{upid}/status", &st);
    assert_eq!(st["exitstatus"], "OK");
    let log = s
        .get(&format!("/nodes/pve1/tasks/{}/log", enc(&upid)))
        .await
        .data();
    assert_shape("GET /nodes/{node}/tasks/{upid}/log", &log);
    assert_eq!(log.as_array().unwrap().last().unwrap()["t"], "TASK OK");

    // the clone's config: new MAC, new SMBIOS UUID, no template, no lock
    let tpl = s.get("/nodes/pve1/qemu/9000/config").await.data();
    let cfg = s.get("/nodes/pve1/qemu/100/config").await.data();
    assert_shape("GET /nodes/{node}/qemu/{vmid}/config", &cfg);
    assert_ne!(cfg["net0"], tpl["net0"]);
    assert!(
        cfg["net0"]
            .as_str()
            .unwrap()
            .starts_with("virtio=BC:24:11:")
    );
    assert_ne!(cfg["smbios1"], tpl["smbios1"]);
    assert!(cfg["smbios1"].as_str().unwrap().starts_with("uuid="));
    assert!(cfg.get("template").is_none() && cfg.get("lock").is_none());
    assert_eq!(cfg["name"], "cp-1");
    assert_eq!(cfg["digest"].as_str().unwrap().len(), 40);
    assert_eq!(cfg["scsi0"], "local-lvm:vm-100-disk-0,size=10G");

    let next = s.get("/cluster/nextid").await.data();
    assert_eq!(next, "101");

    // configure (async POST, then sync PUT with the current digest)
    let st = s
        .task(
            Method::POST,
            "/nodes/pve1/qemu/100/config",
            &[
                ("cores", "4"),
                ("memory", "4096"),
                ("ipconfig0", "ip=10.0.0.5/24,gw=10.0.0.1"),
                ("tags", "Worker;capi,b"),
                ("sshkeys", &enc("ssh-ed25519 AAAA test@host")),
            ],
        )
        .await;
    assert_eq!(st["type"], "qmconfig");
    assert_eq!(st["exitstatus"], "OK");
    let cfg = s.get("/nodes/pve1/qemu/100/config").await.data();
    assert_eq!(cfg["cores"], 4);
    assert_eq!(cfg["memory"], "4096", "memory is a string since PVE 8.1");
    assert_eq!(cfg["tags"], "b;capi;worker");
    let digest = cfg["digest"].as_str().unwrap().to_string();
    let r = s
        .call(
            Method::PUT,
            "/nodes/pve1/qemu/100/config",
            &[("description", "hello"), ("digest", &digest)],
        )
        .await;
    assert_eq!(r.data(), Value::Null);
    assert_shape("PUT /nodes/{node}/qemu/{vmid}/config", &Value::Null);

    // resize
    let st = s
        .task(
            Method::PUT,
            "/nodes/pve1/qemu/100/resize",
            &[("disk", "scsi0"), ("size", "+10G")],
        )
        .await;
    assert_eq!(st["exitstatus"], "OK");
    let cfg = s.get("/nodes/pve1/qemu/100/config").await.data();
    assert_eq!(cfg["scsi0"], "local-lvm:vm-100-disk-0,size=20G");

    // start
    let st = s
        .task(Method::POST, "/nodes/pve1/qemu/100/status/start", &[])
        .await;
    assert_eq!(st["exitstatus"], "OK");
    let cur = s.get("/nodes/pve1/qemu/100/status/current").await.data();
    assert_shape("GET /nodes/{node}/qemu/{vmid}/status/current", &cur);
    assert_eq!(cur["status"], "running");
    assert_eq!(cur["agent"], 1);
    let list = s.get("/nodes/pve1/qemu").await.data();
    assert_shape("GET /nodes/{node}/qemu", &list);
    let res = s
        .call(Method::GET, "/cluster/resources", &[("type", "vm")])
        .await
        .data();
    assert_shape("GET /cluster/resources", &res);
    let vm = res
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["vmid"] == 100)
        .unwrap();
    assert_eq!(vm["status"], "running");
    assert_eq!(vm["pool"], "capi");
    assert_eq!(vm["tags"], "b;capi;worker");
    let status = s.get("/nodes/pve1/status").await.data();
    assert_eq!(
        free_before - status["memory"]["free"].as_u64().unwrap(),
        4096 << 20
    );

    // the guest agent reports the static address from ipconfig0
    let ifs = s
        .get("/nodes/pve1/qemu/100/agent/network-get-interfaces")
        .await
        .data();
    assert_shape(
        "GET /nodes/{node}/qemu/{vmid}/agent/network-get-interfaces",
        &ifs,
    );
    let ens18 = ifs["result"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "ens18")
        .unwrap();
    assert_eq!(ens18["ip-addresses"][0]["ip-address"], "10.0.0.5");
    assert_eq!(ens18["ip-addresses"][0]["prefix"], 24);
    let mac = cfg["net0"]
        .as_str()
        .unwrap()
        .split([',', '='])
        .nth(1)
        .unwrap()
        .to_lowercase();
    assert_eq!(ens18["hardware-address"], mac);
    let os = s.get("/nodes/pve1/qemu/100/agent/get-osinfo").await.data();
    assert_eq!(os["result"]["id"], "ubuntu");

    // a running VM cannot be destroyed
    let r = s
        .call(Method::DELETE, "/nodes/pve1/qemu/100", &[("purge", "1")])
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(r.reason, "VM 100 is running - destroy failed");

    // reboot keeps it running; shutdown stops it
    assert_eq!(
        s.task(Method::POST, "/nodes/pve1/qemu/100/status/reboot", &[])
            .await["exitstatus"],
        "OK"
    );
    assert_eq!(
        s.task(Method::POST, "/nodes/pve1/qemu/100/status/shutdown", &[])
            .await["exitstatus"],
        "OK"
    );
    let cur = s.get("/nodes/pve1/qemu/100/status/current").await.data();
    assert_eq!(cur["status"], "stopped");
    assert_eq!(
        s.task(Method::POST, "/nodes/pve1/qemu/100/status/start", &[])
            .await["exitstatus"],
        "OK"
    );
    assert_eq!(
        s.task(Method::POST, "/nodes/pve1/qemu/100/status/stop", &[])
            .await["exitstatus"],
        "OK"
    );

    // destroy
    let r = s
        .call(
            Method::DELETE,
            "/nodes/pve1/qemu/100",
            &[("purge", "1"), ("destroy-unreferenced-disks", "1")],
        )
        .await;
    let upid = r.data().as_str().unwrap().to_string();
    assert_shape(
        "DELETE /nodes/{node}/qemu/{vmid}",
        &Value::String(upid.clone()),
    );
    assert!(upid.contains(":qmdestroy:100:"));
    assert_eq!(s.wait_task(&upid).await["exitstatus"], "OK");
    let r = s.get("/nodes/pve1/qemu/100/config").await;
    assert_eq!(r.status, 500);
    let content = s.get("/nodes/pve1/storage/local-lvm/content").await.data();
    assert_shape("GET /nodes/{node}/storage/{storage}/content", &content);
    assert!(
        content.as_array().unwrap().iter().all(|v| v["vmid"] != 100),
        "disks removed: {content}"
    );
    assert!(s.sim.state().vm(100).is_none());
    let counters = s.sim.state().counters();
    assert_eq!(counters["POST /nodes/{node}/qemu/{vmid}/clone"], 1);
}

#[tokio::test]
async fn a_linked_clone_shares_the_base_disk_the_template_then_keeps() {
    let mut cfg = Config::fast();
    cfg.task_ms.insert("qmclone".into(), 400);
    let s = start(cfg).await;
    let st = s
        .task(
            Method::POST,
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "123"), ("name", "w-1")],
        )
        .await;
    assert_shape("GET /nodes/{node}/tasks/{upid}/status", &st);
    assert_eq!(st["exitstatus"], "OK");
    let cfg = s.get("/nodes/pve1/qemu/123/config").await.data();
    assert!(cfg.get("lock").is_none());
    assert!(
        cfg["scsi0"]
            .as_str()
            .unwrap()
            .starts_with("local-lvm:base-9000-disk-0/vm-123-disk-0")
    );
    // the template cannot go while a linked clone uses its base disk
    let st = s.task(Method::DELETE, "/nodes/pve1/qemu/9000", &[]).await;
    assert!(
        st["exitstatus"].as_str().unwrap().contains("still in use"),
        "{st}"
    );
}

#[tokio::test]
async fn booted_vms_get_dhcp_leases_and_the_agent_answers_after_its_delay() {
    let mut cfg = Config::fast();
    cfg.agent_delay_ms = 300;
    let s = start(cfg).await;
    s.task(
        Method::POST,
        "/nodes/pve1/qemu/9000/clone",
        &[("newid", "200")],
    )
    .await;
    s.task(
        Method::POST,
        "/nodes/pve1/qemu/9000/clone",
        &[("newid", "201")],
    )
    .await;
    for id in ["200", "201"] {
        s.task(
            Method::POST,
            &format!("/nodes/pve1/qemu/{id}/status/start"),
            &[],
        )
        .await;
    }
    let r = s
        .get("/nodes/pve1/qemu/200/agent/network-get-interfaces")
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(r.reason, "QEMU guest agent is not running");
    tokio::time::sleep(Duration::from_millis(350)).await;
    let mut ips = vec![];
    for id in ["200", "201"] {
        let d = s
            .eventually(
                &format!("/nodes/pve1/qemu/{id}/agent/network-get-interfaces"),
                |_| true,
            )
            .await;
        let ens = d["result"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["name"] == "ens18")
            .unwrap()
            .clone();
        ips.push(
            ens["ip-addresses"][0]["ip-address"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    assert_eq!(ips, vec!["10.10.0.100", "10.10.0.101"]);
    let vms = s.sim_get("/_sim/vms").await;
    let v200 = vms
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["vmid"] == 200)
        .unwrap();
    assert_eq!(v200["ipv4"][0], "10.10.0.100");
}
