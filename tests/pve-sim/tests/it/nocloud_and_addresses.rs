//! Booted VMs take their addresses from ipconfig, from an attached NoCloud ISO, or DHCP.

use crate::common::{TOKEN, start_fast};
use pve_sim::nocloud::build_cidata_iso;
use reqwest::Method;
use serde_json::Value;

fn ens(ifs: &Value, name: &str) -> Value {
    ifs["result"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {ifs}"))
        .clone()
}

#[tokio::test]
async fn an_uploaded_cidata_iso_gives_the_guest_its_static_address_and_hostname() {
    let s = start_fast().await;
    s.task(
        Method::POST,
        "/nodes/pve1/qemu/9000/clone",
        &[("newid", "300"), ("name", "cp-0")],
    )
    .await;
    let cfg = s.get("/nodes/pve1/qemu/300/config").await.data();
    let mac = cfg["net0"]
        .as_str()
        .unwrap()
        .split([',', '='])
        .nth(1)
        .unwrap()
        .to_lowercase();

    let net = format!(
        "version: 2\nethernets:\n  eth0:\n    match:\n      macaddress: \"{mac}\"\n    set-name: eth0\n    addresses:\n      - 10.20.0.7/24\n    routes:\n      - to: default\n        via: 10.20.0.1\n"
    );
    let iso = build_cidata_iso(
        "instance-id: cp-0\nlocal-hostname: cp-0.example\n",
        "#cloud-config\n",
        Some(&net),
    );
    let form = reqwest::multipart::Form::new().text("content", "iso").part(
        "filename",
        reqwest::multipart::Part::bytes(iso).file_name("cp-0-seed.iso"),
    );
    let r = s
        .send(
            s.http
                .post(s.url("/nodes/pve1/storage/local/upload"))
                .header("Authorization", TOKEN)
                .multipart(form),
        )
        .await;
    assert_eq!(
        s.wait_task(r.data().as_str().unwrap()).await["exitstatus"],
        "OK"
    );

    // swap PVE's cloud-init drive for the NoCloud ISO
    s.call(
        Method::PUT,
        "/nodes/pve1/qemu/300/config",
        &[("delete", "ide2,ipconfig0")],
    )
    .await
    .data();
    s.call(
        Method::PUT,
        "/nodes/pve1/qemu/300/config",
        &[("ide2", "local:iso/cp-0-seed.iso,media=cdrom")],
    )
    .await
    .data();
    s.task(Method::POST, "/nodes/pve1/qemu/300/status/start", &[])
        .await;

    let ifs = s
        .get("/nodes/pve1/qemu/300/agent/network-get-interfaces")
        .await
        .data();
    let eth0 = ens(&ifs, "eth0");
    assert_eq!(eth0["hardware-address"], mac);
    assert_eq!(eth0["ip-addresses"][0]["ip-address"], "10.20.0.7");
    assert_eq!(eth0["ip-addresses"][0]["prefix"], 24);
    let host = s
        .get("/nodes/pve1/qemu/300/agent/get-host-name")
        .await
        .data();
    assert_eq!(host["result"]["host-name"], "cp-0.example");
    let state = s.sim_get("/_sim/state").await;
    let vol = state["storages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|st| st["volumes"].as_array().unwrap().clone())
        .find(|v| v["volid"] == "local:iso/cp-0-seed.iso")
        .unwrap();
    assert_eq!(vol["nocloud"]["hostname"], "cp-0.example");
}

#[tokio::test]
async fn ipconfig_applies_at_boot_and_dhcp_is_the_fallback() {
    let s = start_fast().await;
    s.task(
        Method::POST,
        "/nodes/pve1/qemu/9000/clone",
        &[("newid", "301")],
    )
    .await;
    s.call(
        Method::PUT,
        "/nodes/pve1/qemu/301/config",
        &[
            ("ipconfig0", "ip=192.168.7.9/24,gw=192.168.7.1"),
            ("net1", "virtio,bridge=vmbr1"),
        ],
    )
    .await
    .data();
    s.task(Method::POST, "/nodes/pve1/qemu/301/status/start", &[])
        .await;
    let ifs = s
        .get("/nodes/pve1/qemu/301/agent/network-get-interfaces")
        .await
        .data();
    assert_eq!(
        ens(&ifs, "ens18")["ip-addresses"][0]["ip-address"],
        "192.168.7.9"
    );
    assert_eq!(
        ens(&ifs, "ens19")["ip-addresses"][0]["ip-address"],
        "10.10.0.100",
        "net1 has no ipconfig1: DHCP"
    );
    assert_eq!(
        ens(&ifs, "lo")["ip-addresses"][0]["ip-address"],
        "127.0.0.1"
    );

    // a changed ipconfig takes effect at the next boot only
    s.call(
        Method::PUT,
        "/nodes/pve1/qemu/301/config",
        &[("ipconfig0", "ip=192.168.7.10/24")],
    )
    .await
    .data();
    let ifs = s
        .get("/nodes/pve1/qemu/301/agent/network-get-interfaces")
        .await
        .data();
    assert_eq!(
        ens(&ifs, "ens18")["ip-addresses"][0]["ip-address"],
        "192.168.7.9"
    );
    s.task(Method::POST, "/nodes/pve1/qemu/301/status/reboot", &[])
        .await;
    let ifs = s
        .get("/nodes/pve1/qemu/301/agent/network-get-interfaces")
        .await
        .data();
    assert_eq!(
        ens(&ifs, "ens18")["ip-addresses"][0]["ip-address"],
        "192.168.7.10"
    );
}
