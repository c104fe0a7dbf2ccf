//! ACLs: a restricted token gets PVE's 403s and filtered listings; others stay unrestricted.

use crate::common::start;
use pve_sim::{AclEntry, Config, VmSeed};
use reqwest::Method;

const TOKEN_ID: &str = "capmox@pve!capi";

fn restricted() -> Config {
    let mut cfg = Config::fast();
    cfg.tokens.push("admin@pam!all=ADMIN".into());
    cfg.acls = vec![
        AclEntry {
            path: "/vms/9000".into(),
            principal: TOKEN_ID.into(),
            privs: vec!["VM.Clone".into(), "VM.Audit".into()],
            ..AclEntry::default()
        },
        AclEntry {
            path: "/pool/capi".into(),
            principal: TOKEN_ID.into(),
            role: Some("PVEVMAdmin".into()),
            ..AclEntry::default()
        },
        AclEntry {
            path: "/storage/local".into(),
            principal: "capmox@pve".into(),
            role: Some("PVEDatastoreUser".into()),
            ..AclEntry::default()
        },
    ];
    let mut other = VmSeed {
        vmid: 500,
        node: "pve1".into(),
        running: true,
        ..VmSeed::default()
    };
    other.config.insert("name".into(), "someone-else".into());
    other.config.insert("agent".into(), "1".into());
    cfg.vms.push(other);
    cfg
}

#[tokio::test]
async fn a_restricted_token_gets_403s_and_sees_only_what_it_may_audit() {
    let s = start(restricted()).await;
    assert_eq!(s.get("/nodes/pve1/qemu/9000/config").await.status, 200);

    let r = s.get("/nodes/pve1/qemu/500/config").await;
    assert_eq!(
        (r.status.as_u16(), r.reason.as_str()),
        (403, "Permission check failed (/vms/500, VM.Audit)")
    );
    assert_eq!(
        r.message(),
        "Permission check failed (/vms/500, VM.Audit)\n"
    );
    let r = s
        .get("/nodes/pve1/qemu/500/agent/network-get-interfaces")
        .await;
    assert_eq!(
        r.reason,
        "Permission check failed (/vms/500, VM.GuestAgent.Audit|VM.GuestAgent.Unrestricted)"
    );
    let r = s.get("/nodes/pve1/status").await;
    assert_eq!(r.reason, "Permission check failed (/nodes/pve1, Sys.Audit)");

    // cloning needs VM.Allocate on the new ID or on the target pool
    let r = s
        .call(
            Method::POST,
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "100")],
        )
        .await;
    assert_eq!(r.status, 403);
    let st = s
        .task(
            Method::POST,
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "100"), ("pool", "capi")],
        )
        .await;
    assert_eq!(st["exitstatus"], "OK");
    // the pool's ACL covers its new member
    assert_eq!(
        s.task(Method::POST, "/nodes/pve1/qemu/100/status/start", &[])
            .await["exitstatus"],
        "OK"
    );

    let list = s.get("/nodes/pve1/qemu").await.data();
    let ids: Vec<u64> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["vmid"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, vec![100, 9000]);
    let res = s
        .call(Method::GET, "/cluster/resources", &[("type", "vm")])
        .await
        .data();
    assert_eq!(res.as_array().unwrap().len(), 2);
    let storages = s.get("/nodes/pve1/storage").await.data();
    assert_eq!(
        storages.as_array().unwrap().len(),
        1,
        "user ACL applies to its token: {storages}"
    );
    assert_eq!(storages[0]["storage"], "local");

    // an unrestricted token sees everything
    let r = s
        .send(
            s.http
                .get(s.url("/nodes/pve1/qemu"))
                .header("Authorization", "PVEAPIToken=admin@pam!all=ADMIN"),
        )
        .await;
    assert_eq!(r.data().as_array().unwrap().len(), 3);
}
