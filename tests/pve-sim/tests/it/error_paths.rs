//! Every error path of the issue, with PVE's status lines and bodies.

use crate::common::{TOKEN, enc, start, start_fast};
use pve_sim::Config;
use reqwest::Method;
use serde_json::{Value, json};

#[tokio::test]
async fn a_missing_or_wrong_token_is_401_with_an_empty_body() {
    let s = start_fast().await;
    let r = s.send(s.http.get(s.url("/nodes"))).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.text, "");
    let r = s
        .send(
            s.http
                .get(s.url("/nodes"))
                .header("Authorization", "PVEAPIToken=capmox@pve!capi=WRONG"),
        )
        .await;
    assert_eq!(r.status, 401);
    assert_eq!(r.text, "");
    let r = s
        .send(s.http.get(s.url("/nodes")).header(
            "Authorization",
            "PVEAPIToken=other@pve!capi=REDACTED-SIM-SECRET",
        ))
        .await;
    assert_eq!(r.status, 401);
    let r = s
        .send(s.http.get(s.url("/nodes")).header("Authorization", TOKEN))
        .await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn a_missing_vm_is_500_naming_its_config_file() {
    let s = start_fast().await;
    for path in [
        "/nodes/pve1/qemu/999/config",
        "/nodes/pve1/qemu/999/status/current",
        "/nodes/pve2/qemu/9000/config",
    ] {
        let r = s.get(path).await;
        assert_eq!(r.status, 500, "{path}");
        let node = path.split('/').nth(2).unwrap();
        let id = path.split('/').nth(4).unwrap();
        let msg = format!("Configuration file 'nodes/{node}/qemu-server/{id}.conf' does not exist");
        assert_eq!(r.reason, msg);
        assert_eq!(
            r.json(),
            json!({"data": null, "message": format!("{msg}\n")})
        );
    }
    let r = s
        .call(Method::POST, "/nodes/pve1/qemu/999/status/start", &[])
        .await;
    assert_eq!(r.status, 500);
}

#[tokio::test]
async fn unknown_paths_and_gets_with_a_body_are_501() {
    let s = start_fast().await;
    let r = s.get("/nodes/pve1/foo").await;
    assert_eq!(r.status, 501);
    assert_eq!(r.reason, "Method 'GET /nodes/pve1/foo' not implemented");
    assert_eq!(r.json()["data"], Value::Null);
    let r = s.call(Method::PATCH, "/nodes", &[]).await;
    assert_eq!(r.status, 501);
    let r = s
        .send(
            s.http
                .get(s.url("/nodes"))
                .header("Authorization", TOKEN)
                .body("x=1"),
        )
        .await;
    assert_eq!(r.status, 501);
    let r = s
        .send(
            s.http
                .delete(s.url("/nodes/pve1/qemu/9000"))
                .header("Authorization", TOKEN)
                .body("purge=1"),
        )
        .await;
    assert_eq!(r.status, 501);
    assert_eq!(r.reason, "Unexpected content for method 'DELETE'");
    let r = s
        .send(
            s.http
                .delete(s.url("/nodes/pve1/qemu/9000"))
                .body("purge=1"),
        )
        .await;
    assert_eq!(r.status, 401, "authentication comes first");
}

#[tokio::test]
async fn parameters_the_schema_rejects_are_400_with_an_errors_map() {
    let s = start_fast().await;
    let r = s
        .call(
            Method::POST,
            "/nodes/pve1/qemu/9000/clone",
            &[
                ("newid", "99"),
                ("bogus", "1"),
                ("full", "maybe"),
                ("name", "not a dns name"),
            ],
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.reason, "Parameter verification failed.");
    let b = r.json();
    assert_eq!(b["data"], Value::Null);
    assert_eq!(b["message"], "Parameter verification failed.\n");
    let e = &b["errors"];
    assert_eq!(e["newid"], "value must have a minimum value of 100");
    assert_eq!(
        e["bogus"],
        "property is not defined in schema and the schema does not allow additional properties"
    );
    assert_eq!(e["full"], "type check ('boolean') failed - got 'maybe'");
    assert!(
        e["name"].as_str().unwrap().starts_with("invalid format"),
        "{e}"
    );

    let r = s
        .call(Method::POST, "/nodes/pve1/qemu/9000/clone", &[])
        .await;
    assert_eq!(
        r.json()["errors"]["newid"],
        "property is missing and it is not optional"
    );

    let r = s
        .call(
            Method::PUT,
            "/nodes/pve1/qemu/9000/config",
            &[
                ("net0", "virtio,bridge=vmbr0,bogus=1"),
                ("ipconfig0", "ip=10.0.0.5"),
                ("sshkeys", "ssh-ed25519 AAAA a@b"),
            ],
        )
        .await;
    assert_eq!(r.status, 400);
    let e = &r.json()["errors"];
    assert!(e["net0"].as_str().unwrap().contains("bogus"), "{e}");
    assert!(
        e["ipconfig0"]
            .as_str()
            .unwrap()
            .starts_with("invalid format"),
        "{e}"
    );
    assert!(
        e["sshkeys"]
            .as_str()
            .unwrap()
            .contains("invalid urlencoded string"),
        "{e}"
    );

    let r = s
        .call(Method::GET, "/cluster/resources", &[("type", "bogus")])
        .await;
    assert!(
        r.json()["errors"]["type"]
            .as_str()
            .unwrap()
            .contains("enumeration")
    );
    let r = s.get("/nodes/pve1/qemu/99999999999/config").await;
    assert_eq!(r.status, 400);
    assert!(r.json()["errors"]["vmid"].as_str().is_some());
}

#[tokio::test]
async fn an_unescaped_equals_sign_truncates_the_value_like_pve() {
    let s = start_fast().await;
    let r = s
        .send(
            s.http
                .put(s.url("/nodes/pve1/qemu/9000/config"))
                .header("Authorization", TOKEN)
                .header("Content-Type", "application/x-www-form-urlencoded")
                .body("description=a=b&tags=x;y"),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let cfg = s.get("/nodes/pve1/qemu/9000/config").await.data();
    assert_eq!(cfg["description"], "a");
    assert_eq!(cfg["tags"], "x", "';' separates parameters too");
}

#[tokio::test]
async fn nextid_checks_a_given_vmid_without_reserving_anything() {
    let s = start_fast().await;
    let r = s
        .call(Method::GET, "/cluster/nextid", &[("vmid", "9000")])
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json(),
        json!({"data": null, "errors": {"vmid": "VM 9000 already exists"}, "message": "Parameter verification failed.\n"})
    );
    let r = s
        .call(Method::GET, "/cluster/nextid", &[("vmid", "150")])
        .await;
    assert_eq!(r.data(), "150");
    assert_eq!(s.get("/cluster/nextid").await.data(), "100");
    assert_eq!(
        s.get("/cluster/nextid").await.data(),
        "100",
        "no reservation"
    );
}

#[tokio::test]
async fn a_stale_digest_fails_with_checksum_mismatch() {
    let s = start_fast().await;
    let digest = s.get("/nodes/pve1/qemu/9000/config").await.data()["digest"]
        .as_str()
        .unwrap()
        .to_string();
    s.call(
        Method::PUT,
        "/nodes/pve1/qemu/9000/config",
        &[("cores", "3")],
    )
    .await
    .data();
    let r = s
        .call(
            Method::PUT,
            "/nodes/pve1/qemu/9000/config",
            &[("cores", "4"), ("digest", &digest)],
        )
        .await;
    assert_eq!(r.status, 500);
    assert!(r.reason.starts_with("checksum missmatch"), "{}", r.reason);
    let r = s
        .call(
            Method::POST,
            "/nodes/pve1/qemu/9000/config",
            &[("cores", "4"), ("digest", &digest)],
        )
        .await;
    assert_eq!(r.status, 500);
}

#[tokio::test]
async fn shrinking_a_disk_fails_inside_the_resize_task() {
    let s = start_fast().await;
    s.task(
        Method::POST,
        "/nodes/pve1/qemu/9000/clone",
        &[("newid", "100")],
    )
    .await;
    let st = s
        .task(
            Method::PUT,
            "/nodes/pve1/qemu/100/resize",
            &[("disk", "scsi0"), ("size", "5G")],
        )
        .await;
    assert_eq!(st["exitstatus"], "shrinking disks is not supported");
    let log = s
        .get(&format!(
            "/nodes/pve1/tasks/{}/log",
            enc(st["upid"].as_str().unwrap())
        ))
        .await
        .data();
    assert_eq!(
        log.as_array().unwrap().last().unwrap()["t"],
        "TASK ERROR: shrinking disks is not supported"
    );
    let st = s
        .task(
            Method::PUT,
            "/nodes/pve1/qemu/100/resize",
            &[("disk", "scsi0"), ("size", "40G")],
        )
        .await;
    assert_eq!(st["exitstatus"], "OK");
    let r = s
        .call(
            Method::PUT,
            "/nodes/pve1/qemu/100/resize",
            &[("disk", "scsi0"), ("size", "lots")],
        )
        .await;
    assert_eq!(r.status, 400);
}

#[tokio::test]
async fn the_guest_agent_errors_until_it_is_configured_running_and_up() {
    let mut cfg = Config::fast();
    cfg.agent_delay_ms = 60_000;
    let s = start(cfg).await;
    s.task(
        Method::POST,
        "/nodes/pve1/qemu/9000/clone",
        &[("newid", "100")],
    )
    .await;
    let path = "/nodes/pve1/qemu/100/agent/network-get-interfaces";
    let r = s.get(path).await;
    assert_eq!(
        (r.status.as_u16(), r.reason.as_str()),
        (500, "VM 100 is not running")
    );
    s.call(
        Method::PUT,
        "/nodes/pve1/qemu/100/config",
        &[("delete", "agent")],
    )
    .await
    .data();
    let r = s.get(path).await;
    assert_eq!(r.reason, "No QEMU guest agent configured");
    s.call(
        Method::PUT,
        "/nodes/pve1/qemu/100/config",
        &[("agent", "enabled=1")],
    )
    .await
    .data();
    s.task(Method::POST, "/nodes/pve1/qemu/100/status/start", &[])
        .await;
    let r = s.get(path).await;
    assert_eq!(r.reason, "QEMU guest agent is not running");
    assert_eq!(r.message(), "QEMU guest agent is not running\n");
    let r = s.get("/nodes/pve1/qemu/100/agent/get-osinfo").await;
    assert_eq!(r.reason, "QEMU guest agent is not running");
}

#[tokio::test]
async fn power_errors_surface_where_pve_puts_them() {
    let s = start_fast().await;
    s.task(
        Method::POST,
        "/nodes/pve1/qemu/9000/clone",
        &[("newid", "100")],
    )
    .await;
    let r = s
        .call(Method::POST, "/nodes/pve1/qemu/100/status/reboot", &[])
        .await;
    assert_eq!(r.reason, "VM 100 not running");
    let st = s
        .task(Method::POST, "/nodes/pve1/qemu/100/status/shutdown", &[])
        .await;
    assert_eq!(st["exitstatus"], "VM 100 not running");
    s.task(Method::POST, "/nodes/pve1/qemu/100/status/start", &[])
        .await;
    let st = s
        .task(Method::POST, "/nodes/pve1/qemu/100/status/start", &[])
        .await;
    assert_eq!(st["exitstatus"], "VM 100 already running");
    let st = s
        .task(Method::POST, "/nodes/pve1/qemu/9000/status/start", &[])
        .await;
    assert!(st["exitstatus"].as_str().unwrap().contains("template"));
}

/// The clone API call's early checks, with qemu-server's texts.
#[tokio::test]
async fn clone_refuses_bad_targets_synchronously() {
    let s = start_fast().await;
    let clone = async |form: &[(&str, &str)]| {
        let mut f = vec![("newid", "100")];
        f.extend_from_slice(form);
        s.call(Method::POST, "/nodes/pve1/qemu/9000/clone", &f)
            .await
    };
    let r = clone(&[("target", "pve2")]).await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.reason,
        "can't clone VM to node 'pve2' (VM uses local storage)"
    );
    let r = clone(&[("target", "pve9")]).await;
    assert_eq!(r.reason, "no such cluster node 'pve9'");
    let r = clone(&[("pool", "nope")]).await;
    assert_eq!(
        (r.status.as_u16(), r.reason.as_str()),
        (403, "Permission check failed (pool 'nope' does not exist)")
    );
    let r = clone(&[("storage", "local-lvm")]).await;
    assert_eq!(
        (r.status.as_u16(), r.reason.as_str()),
        (500, "parameter 'storage' not allowed for linked clones")
    );
    let r = clone(&[("full", "1"), ("storage", "local")]).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["errors"]["storage"],
        "storage 'local' does not support vm images"
    );
    let r = clone(&[("full", "1"), ("storage", "local-lvm"), ("target", "pve2")]).await;
    assert_eq!(r.reason, "can't clone to non-shared storage 'local-lvm'");
    let r = s
        .call(
            Method::POST,
            "/nodes/nowhere/qemu/9000/clone",
            &[("newid", "100")],
        )
        .await;
    assert_eq!(r.status, 500);
    assert!(r.reason.starts_with("hostname lookup 'nowhere' failed"));
}

#[tokio::test]
async fn uploads_are_accepted_only_on_directory_storages_with_iso_content() {
    let s = start_fast().await;
    let form = || {
        reqwest::multipart::Form::new().text("content", "iso").part(
            "filename",
            reqwest::multipart::Part::bytes(b"not really an iso".to_vec()).file_name("x.iso"),
        )
    };
    let r = s
        .send(
            s.http
                .post(s.url("/nodes/pve1/storage/local-lvm/upload"))
                .header("Authorization", TOKEN)
                .multipart(form()),
        )
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(r.reason, "can't upload to storage type 'lvmthin'");
    let bad = reqwest::multipart::Form::new().text("content", "iso").part(
        "filename",
        reqwest::multipart::Part::bytes(b"x".to_vec()).file_name("x.txt"),
    );
    let r = s
        .send(
            s.http
                .post(s.url("/nodes/pve1/storage/local/upload"))
                .header("Authorization", TOKEN)
                .multipart(bad),
        )
        .await;
    assert_eq!(r.json()["errors"]["filename"], "wrong file extension");
    let r = s
        .send(
            s.http
                .post(s.url("/nodes/pve1/storage/local/upload"))
                .header("Authorization", TOKEN)
                .multipart(form()),
        )
        .await;
    let upid = r.data().as_str().unwrap().to_string();
    assert!(upid.contains(":imgcopy::capmox@pve!capi:"), "{upid}");
    assert_eq!(s.wait_task(&upid).await["exitstatus"], "OK");
    let isos = s
        .call(
            Method::GET,
            "/nodes/pve1/storage/local/content",
            &[("content", "iso")],
        )
        .await
        .data();
    assert_eq!(isos[0]["volid"], "local:iso/x.iso");
    let st = s
        .task(
            Method::DELETE,
            &format!(
                "/nodes/pve1/storage/local/content/{}",
                enc("local:iso/x.iso")
            ),
            &[],
        )
        .await;
    assert_eq!(st["exitstatus"], "OK");
    let r = s
        .call(
            Method::DELETE,
            &format!(
                "/nodes/pve1/storage/local/content/{}",
                enc("local:iso/x.iso")
            ),
            &[],
        )
        .await;
    assert_eq!(r.status, 500);
}

#[tokio::test]
async fn before_pve_8_3_error_bodies_carry_no_message() {
    let mut cfg = Config::fast();
    cfg.pve_version = "8.0.5".into();
    let s = start(cfg).await;
    let r = s.get("/nodes/pve1/qemu/999/config").await;
    assert_eq!(r.status, 500);
    assert_eq!(r.json(), json!({"data": null}));
    assert_eq!(
        r.reason,
        "Configuration file 'nodes/pve1/qemu-server/999.conf' does not exist"
    );
    let cfg = s.get("/nodes/pve1/qemu/9000/config").await.data();
    assert_eq!(cfg["memory"], 2048, "an integer before PVE 8.1");
}
