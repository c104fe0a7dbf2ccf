//! Permissions as PVE evaluates them: ACL paths with propagation, the most specific
//! entry winning, privilege-separated tokens within their users, custom roles, pools,
//! `GET /access/permissions`, filtered listings, the checks handlers make themselves,
//! and PVE's 403 texts. Principals of users no entry names stay unrestricted.

use std::collections::BTreeMap;

use crate::common::{Reply, Sim, enc, start};
use pve_sim::{AclEntry, ApiToken, Config, VmSeed};
use reqwest::Method;
use serde_json::{Value, json};

const TOKEN_ID: &str = "capmox@pve!capi";
const ADMIN: &str = "admin@pam!all=ADMIN";

fn acl(path: &str, principal: &str, role: &str) -> AclEntry {
    AclEntry {
        path: path.into(),
        principal: principal.into(),
        role: Some(role.into()),
        ..AclEntry::default()
    }
}

fn token(id: &str, secret: &str, privsep: bool) -> ApiToken {
    ApiToken {
        id: id.into(),
        secret: secret.into(),
        privsep,
    }
}

/// A stopped VM `vmid` named `name` on pve1, in `pool` when given.
fn vm(vmid: u32, name: &str, pool: Option<&str>) -> VmSeed {
    let mut v = VmSeed {
        vmid,
        node: "pve1".into(),
        pool: pool.map(String::from),
        ..VmSeed::default()
    };
    v.config.insert("name".into(), name.into());
    v.config.insert("memory".into(), "1024".into());
    v.config.insert(
        "scsi0".into(),
        format!("local-lvm:vm-{vmid}-disk-0,size=4G"),
    );
    v.config.insert(
        "net0".into(),
        "virtio=BC:24:11:00:00:01,bridge=vmbr0".into(),
    );
    v.config.insert("agent".into(), "1".into());
    v
}

/// A request as `auth` (`USER@REALM!TOKENID=SECRET`); `form` as `Sim::call` sends it.
async fn call_as(s: &Sim, auth: &str, method: Method, path: &str, form: &[(&str, &str)]) -> Reply {
    let mut rb = s
        .http
        .request(method.clone(), s.url(path))
        .header("Authorization", format!("PVEAPIToken={auth}"));
    if method == Method::GET || method == Method::DELETE {
        rb = rb.query(form);
    } else {
        let body = form
            .iter()
            .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
            .collect::<Vec<_>>()
            .join("&");
        rb = rb
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(body);
    }
    s.send(rb).await
}

async fn get_as(s: &Sim, auth: &str, path: &str) -> Reply {
    call_as(s, auth, Method::GET, path, &[]).await
}

/// Waits for a task as the admin token; its final status.
async fn finish(s: &Sim, r: Reply) -> Value {
    let upid = r.data().as_str().expect("UPID").to_string();
    let node = upid.split(':').nth(1).unwrap().to_string();
    let path = format!("/nodes/{node}/tasks/{}/status", enc(&upid));
    for _ in 0..2000 {
        let st = get_as(s, ADMIN, &path).await.data();
        if st["status"] == "stopped" {
            return st;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    panic!("task {upid} did not finish");
}

fn denied(r: &Reply, what: &str) {
    assert_eq!(
        (r.status.as_u16(), r.reason.as_str()),
        (403, what),
        "body: {}",
        r.text
    );
}

fn ids(list: &Value) -> Vec<u64> {
    list.as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["vmid"].as_u64())
        .collect()
}

/// The privileges listed for `path` in a `GET /access/permissions` answer.
fn privs_at(perms: &Value, path: &str) -> BTreeMap<String, u64> {
    perms[path]
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
                .collect()
        })
        .unwrap_or_default()
}

fn restricted() -> Config {
    let mut cfg = Config::fast();
    cfg.tokens.push(ADMIN.into());
    cfg.acls = vec![
        // the user may do what its token may; the token is privilege-separated
        acl("/", "capmox@pve", "PVEAdmin"),
        AclEntry {
            path: "/vms/9000".into(),
            principal: TOKEN_ID.into(),
            privs: vec!["VM.Clone".into(), "VM.Audit".into()],
            ..AclEntry::default()
        },
        acl("/pool/capi", TOKEN_ID, "PVEVMAdmin"),
        acl("/storage/local-lvm", TOKEN_ID, "PVEDatastoreUser"),
        acl("/sdn/zones/localnetwork/vmbr0", TOKEN_ID, "PVESDNUser"),
    ];
    let mut other = vm(500, "someone-else", None);
    other.running = true;
    cfg.vms.push(other);
    cfg
}

#[tokio::test]
async fn a_restricted_token_gets_403s_and_sees_only_what_it_may_audit() {
    let s = start(restricted()).await;
    assert_eq!(s.get("/nodes/pve1/qemu/9000/config").await.status, 200);

    let r = s.get("/nodes/pve1/qemu/500/config").await;
    denied(&r, "Permission check failed (/vms/500, VM.Audit)");
    assert_eq!(
        r.message(),
        "Permission check failed (/vms/500, VM.Audit)\n"
    );
    let r = s
        .get("/nodes/pve1/qemu/500/agent/network-get-interfaces")
        .await;
    denied(
        &r,
        "Permission check failed (/vms/500, VM.GuestAgent.Audit|VM.GuestAgent.Unrestricted)",
    );
    denied(
        &s.get("/nodes/pve1/status").await,
        "Permission check failed (/nodes/pve1, Sys.Audit)",
    );

    // cloning needs VM.Allocate on the new ID or on the target pool: an `or` that fails
    // names nothing
    let r = s
        .call(
            Method::POST,
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "100")],
        )
        .await;
    denied(&r, "Permission check failed");
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

    assert_eq!(ids(&s.get("/nodes/pve1/qemu").await.data()), [100, 9000]);
    let res = s
        .call(Method::GET, "/cluster/resources", &[("type", "vm")])
        .await
        .data();
    assert_eq!(ids(&res), [100, 9000]);
    let storages = s.get("/nodes/pve1/storage").await.data();
    assert_eq!(storages.as_array().unwrap().len(), 1, "{storages}");
    assert_eq!(storages[0]["storage"], "local-lvm");

    // a principal that no ACL names sees everything
    let r = get_as(&s, ADMIN, "/nodes/pve1/qemu").await;
    assert_eq!(ids(&r.data()), [100, 500, 9000]);
}

#[tokio::test]
async fn the_most_specific_acl_replaces_what_is_inherited_and_propagate_decides_inheritance() {
    let mut cfg = Config::fast();
    cfg.tokens = vec!["ops@pve!t=S".into(), ADMIN.into()];
    cfg.api_tokens = vec![token("ops@pve!t", "S", false)];
    cfg.vms.push(vm(500, "audited-only", None));
    cfg.vms.push(vm(501, "nothing", None));
    cfg.acls = vec![
        acl("/vms", "ops@pve", "PVEVMAdmin"),
        // below /vms, this entry replaces the admin role for VM 500
        acl("/vms/500", "ops@pve", "PVEAuditor"),
        acl("/vms/501", "ops@pve", "NoAccess"),
        // not propagated: /nodes itself only
        AclEntry {
            propagate: false,
            ..acl("/nodes", "ops@pve", "PVEAuditor")
        },
        acl("/storage", "ops@pve", "PVEDatastoreUser"),
        acl("/sdn", "ops@pve", "PVESDNUser"),
    ];
    let s = start(cfg).await;
    let me = "ops@pve!t=S";
    assert_eq!(
        get_as(&s, me, "/nodes/pve1/qemu/500/config").await.status,
        200
    );
    let r = call_as(
        &s,
        me,
        Method::POST,
        "/nodes/pve1/qemu/500/status/start",
        &[],
    )
    .await;
    denied(&r, "Permission check failed (/vms/500, VM.PowerMgmt)");
    denied(
        &get_as(&s, me, "/nodes/pve1/qemu/501/config").await,
        "Permission check failed (/vms/501, VM.Audit)",
    );
    let r = call_as(
        &s,
        me,
        Method::POST,
        "/nodes/pve1/qemu/9000/clone",
        &[("newid", "120")],
    )
    .await;
    assert_eq!(
        finish(&s, r).await["exitstatus"],
        "OK",
        "VM.Clone and VM.Allocate from /vms"
    );
    denied(
        &get_as(&s, me, "/nodes/pve1/status").await,
        "Permission check failed (/nodes/pve1, Sys.Audit)",
    );
    let p = get_as(&s, me, "/access/permissions?path=/nodes")
        .await
        .data();
    assert_eq!(privs_at(&p, "/nodes").get("Sys.Audit"), Some(&0), "{p}");
    // the listing follows the same rules
    assert_eq!(
        ids(&get_as(&s, me, "/nodes/pve1/qemu").await.data()),
        [120, 500, 9000]
    );
}

#[tokio::test]
async fn a_privilege_separated_token_has_its_own_acls_within_its_users_privileges() {
    let mut cfg = Config::fast();
    cfg.tokens = vec![ADMIN.into()];
    cfg.api_tokens = vec![
        token("dev@pve!sep", "A", true),
        token("dev@pve!full", "B", false),
    ];
    cfg.acls = vec![
        acl("/vms", "dev@pve", "PVEVMUser"),
        // more than the user has: VM.Allocate and Sys.Audit are dropped
        acl("/vms/9000", "dev@pve!sep", "PVEVMAdmin"),
        acl("/nodes", "dev@pve!sep", "PVEAuditor"),
    ];
    let s = start(cfg).await;
    let p = get_as(&s, "dev@pve!sep=A", "/access/permissions?path=/vms/9000")
        .await
        .data();
    let held = privs_at(&p, "/vms/9000");
    assert!(held.contains_key("VM.PowerMgmt"), "{p}");
    assert!(!held.contains_key("VM.Allocate"), "the user lacks it: {p}");
    assert!(!held.contains_key("VM.Clone"), "{p}");
    denied(
        &get_as(&s, "dev@pve!sep=A", "/nodes/pve1/status").await,
        "Permission check failed (/nodes/pve1, Sys.Audit)",
    );
    // no own entry on a path: nothing there, whatever the user has
    let p = get_as(&s, "dev@pve!sep=A", "/access/permissions?path=/vms/100")
        .await
        .data();
    assert_eq!(p, json!({"/vms/100": {}}));
    // without privilege separation: the user's privileges, no entries of its own needed
    let p = get_as(&s, "dev@pve!full=B", "/access/permissions?path=/vms/100")
        .await
        .data();
    assert!(privs_at(&p, "/vms/100").contains_key("VM.PowerMgmt"), "{p}");
    // the two tokens side by side: the journal names who asked
    let who: Vec<String> = s
        .sim
        .state()
        .requests()
        .iter()
        .map(|e| e["user"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(who.contains(&"dev@pve!sep".to_string()), "{who:?}");
    assert!(who.contains(&"dev@pve!full".to_string()), "{who:?}");
}

#[tokio::test]
async fn custom_roles_grant_their_privileges_and_bad_ones_are_refused_at_start() {
    let mut cfg = Config::fast();
    cfg.roles.insert(
        "Starter".into(),
        vec!["VM.Audit".into(), "VM.PowerMgmt".into()],
    );
    cfg.acls = vec![
        acl("/vms/9000", "capmox@pve", "Starter"),
        acl("/vms/9000", TOKEN_ID, "Starter"),
    ];
    let s = start(cfg).await;
    let p = s.get("/access/permissions?path=/vms/9000").await.data();
    assert_eq!(p, json!({"/vms/9000": {"VM.Audit": 1, "VM.PowerMgmt": 1}}));
    drop(s);

    let refused = async |cfg: Config| {
        let opts = pve_sim::ListenOpts {
            addr: "127.0.0.1:0".into(),
            tls: false,
        };
        pve_sim::Simulator::start(cfg, opts)
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let mut cfg = Config::fast();
    cfg.roles.insert("PVEAdmin".into(), vec![]);
    assert_eq!(refused(cfg).await, "roles: 'PVEAdmin' is a built-in role");
    let mut cfg = Config::fast();
    cfg.roles.insert("Old".into(), vec!["VM.Monitor".into()]);
    assert_eq!(
        refused(cfg).await,
        "roles.Old: invalid privilege 'VM.Monitor'",
        "PVE 9 dropped VM.Monitor"
    );
    let mut cfg = Config::fast();
    cfg.acls = vec![acl("/", "capmox@pve", "Nope")];
    assert_eq!(refused(cfg).await, "acls[0]: role 'Nope' does not exist");
}

#[tokio::test]
async fn built_in_roles_follow_the_presented_version() {
    for (version, agent, monitor) in [("9.1.3", true, false), ("8.4.0", false, true)] {
        let mut cfg = Config::fast();
        cfg.pve_version = version.into();
        cfg.acls = vec![acl("/", "capmox@pve", "PVEVMAdmin")];
        cfg.api_tokens = vec![token(TOKEN_ID, "REDACTED-SIM-SECRET", false)];
        cfg.tokens = vec![];
        let s = start(cfg).await;
        let p = s.get("/access/permissions?path=/vms").await.data();
        let held = privs_at(&p, "/vms");
        assert_eq!(
            held.contains_key("VM.GuestAgent.Audit"),
            agent,
            "{version}: {p}"
        );
        assert_eq!(held.contains_key("VM.Monitor"), monitor, "{version}: {p}");
    }
}

/// Two tenants as the multi-tenant setup has them: a pool, a role and a
/// privilege-separated token each.
fn tenants() -> Config {
    let mut cfg = Config::fast();
    cfg.tokens = vec![ADMIN.into()];
    cfg.pools = vec!["team-a".into(), "team-b".into()];
    cfg.roles.insert(
        "Tenant".into(),
        [
            "VM.Allocate",
            "VM.Audit",
            "VM.Clone",
            "VM.Config.Memory",
            "VM.PowerMgmt",
            "Pool.Audit",
        ]
        .map(String::from)
        .to_vec(),
    );
    cfg.api_tokens = vec![
        token("a@pve!capi", "A", true),
        token("b@pve!capi", "B", true),
    ];
    for t in ["a", "b"] {
        for who in [format!("{t}@pve"), format!("{t}@pve!capi")] {
            cfg.acls
                .push(acl(&format!("/pool/team-{t}"), &who, "Tenant"));
            cfg.acls.push(acl("/vms/9000", &who, "PVETemplateUser"));
            cfg.acls
                .push(acl("/storage/local-lvm", &who, "PVEDatastoreUser"));
            cfg.acls
                .push(acl("/sdn/zones/localnetwork/vmbr0", &who, "PVESDNUser"));
        }
    }
    cfg.acls.push(acl("/nodes/pve1", "a@pve", "PVEAuditor"));
    cfg.acls
        .push(acl("/nodes/pve1", "a@pve!capi", "PVEAuditor"));
    cfg.vms.push(vm(601, "a-1", Some("team-a")));
    cfg.vms.push(vm(602, "b-1", Some("team-b")));
    cfg
}

#[tokio::test]
async fn access_permissions_answers_like_pve() {
    let s = start(tenants()).await;
    let a = "a@pve!capi=A";
    let all = get_as(&s, a, "/access/permissions").await.data();
    let paths: Vec<&str> = all
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        paths,
        [
            "/nodes/pve1",
            "/pool/team-a",
            "/sdn/zones/localnetwork/vmbr0",
            "/storage/local-lvm",
            "/vms/601",
            "/vms/9000"
        ],
        "paths without privileges are left out: {all}"
    );
    assert_eq!(privs_at(&all, "/pool/team-a").get("VM.Allocate"), Some(&1));
    // a pool's member gets the pool's roles, not propagated further
    assert_eq!(privs_at(&all, "/vms/601").get("VM.PowerMgmt"), Some(&0));
    assert_eq!(
        privs_at(&all, "/vms/9000"),
        BTreeMap::from([("VM.Audit".to_string(), 1), ("VM.Clone".to_string(), 1)])
    );
    // one path: present even when empty
    let p = get_as(&s, a, "/access/permissions?path=/vms/602")
        .await
        .data();
    assert_eq!(p, json!({"/vms/602": {}}));
    // its own ID is fine; its user or another token needs Sys.Audit on /access
    let p = get_as(
        &s,
        a,
        "/access/permissions?userid=a@pve!capi&path=/pool/team-a",
    )
    .await
    .data();
    assert!(privs_at(&p, "/pool/team-a").contains_key("VM.Clone"));
    for other in ["a@pve", "b@pve!capi"] {
        let r = get_as(&s, a, &format!("/access/permissions?userid={}", enc(other))).await;
        denied(&r, "Permission check failed (/access, Sys.Audit)");
    }
    // an administrator may ask about anyone
    let p = get_as(&s, ADMIN, "/access/permissions?userid=b@pve!capi")
        .await
        .data();
    assert!(privs_at(&p, "/vms/602").contains_key("VM.Audit"), "{p}");
    assert!(p.get("/vms/601").is_none(), "{p}");
}

#[tokio::test]
async fn listings_show_each_tenant_only_its_own() {
    let s = start(tenants()).await;
    let (a, b) = ("a@pve!capi=A", "b@pve!capi=B");
    // /cluster/resources, all types: its pool, its VMs and the template, every node
    // (figures only where it may audit the node), the storage it may audit on each node
    let res = get_as(&s, a, "/cluster/resources").await.data();
    let res = res.as_array().unwrap();
    let of = |t: &str| -> Vec<&Value> { res.iter().filter(|r| r["type"] == t).collect() };
    assert_eq!(of("pool").len(), 1);
    assert_eq!(of("pool")[0]["pool"], "team-a");
    let vms: Vec<u64> = of("qemu")
        .iter()
        .map(|v| v["vmid"].as_u64().unwrap())
        .collect();
    assert_eq!(vms, [601, 9000]);
    assert_eq!(of("qemu")[0]["pool"], "team-a");
    let nodes = of("node");
    assert_eq!(nodes.len(), 3);
    assert!(nodes[0]["maxmem"].is_u64(), "pve1 audited: {}", nodes[0]);
    assert!(nodes[1].get("maxmem").is_none(), "pve2 not: {}", nodes[1]);
    assert_eq!(nodes[1]["status"], "online");
    let storages: Vec<&str> = of("storage")
        .iter()
        .map(|s| s["storage"].as_str().unwrap())
        .collect();
    assert_eq!(storages, ["local-lvm"; 3]);
    // (`pool` is no `type` the schema accepts: pools come only in the full listing)
    for (ty, n) in [("vm", 2), ("node", 3), ("storage", 3)] {
        let r = call_as(&s, a, Method::GET, "/cluster/resources", &[("type", ty)])
            .await
            .data();
        assert_eq!(r.as_array().unwrap().len(), n, "type={ty}: {r}");
    }
    let vms = get_as(&s, b, "/cluster/resources?type=vm").await.data();
    assert_eq!(ids(&vms), [602, 9000]);
    assert_eq!(
        ids(&get_as(&s, b, "/nodes/pve1/qemu").await.data()),
        [602, 9000]
    );
    // the node storage list also shows what it may allocate on
    let st = get_as(&s, b, "/nodes/pve1/storage").await.data();
    assert_eq!(st[0]["storage"], "local-lvm");
    // /nodes: every node, without figures it may not audit
    let nodes = get_as(&s, b, "/nodes").await.data();
    assert!(
        nodes
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n.get("maxmem").is_none())
    );
    // /pools lists the pools it may audit, but PVE answers a pool asked by name to
    // anyone, members included
    assert_eq!(
        get_as(&s, b, "/pools").await.data(),
        json!([{"poolid": "team-b"}])
    );
    let other = get_as(&s, b, "/pools?poolid=team-a").await.data();
    assert_eq!(other[0]["members"][0]["vmid"], 601);
    assert_eq!(other[0]["members"][0]["name"], "a-1");
}

#[tokio::test]
async fn a_tenant_cannot_touch_the_other_tenants_vm() {
    let s = start(tenants()).await;
    let (a, b) = ("a@pve!capi=A", "b@pve!capi=B");
    // its own clone into its pool works
    let r = call_as(
        &s,
        a,
        Method::POST,
        "/nodes/pve1/qemu/9000/clone",
        &[("newid", "700"), ("pool", "team-a"), ("name", "a-2")],
    )
    .await;
    assert_eq!(finish(&s, r).await["exitstatus"], "OK");
    let r = call_as(
        &s,
        a,
        Method::PUT,
        "/nodes/pve1/qemu/700/config",
        &[("memory", "2048")],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    // the other tenant's VM: read, clone from, write, start, destroy
    let b_path = "/nodes/pve1/qemu/700";
    denied(
        &get_as(&s, b, &format!("{b_path}/config")).await,
        "Permission check failed (/vms/700, VM.Audit)",
    );
    let r = call_as(
        &s,
        b,
        Method::POST,
        &format!("{b_path}/clone"),
        &[("newid", "701"), ("pool", "team-b")],
    )
    .await;
    denied(&r, "Permission check failed (/vms/700, VM.Clone)");
    let r = call_as(
        &s,
        b,
        Method::PUT,
        &format!("{b_path}/config"),
        &[("memory", "512")],
    )
    .await;
    denied(
        &r,
        "Permission check failed (/vms/700, VM.Config.Disk|VM.Config.CDROM|VM.Config.CPU|VM.Config.Memory|VM.Config.Network|VM.Config.HWType|VM.Config.Options|VM.Config.Cloudinit)",
    );
    let r = call_as(&s, b, Method::POST, &format!("{b_path}/status/start"), &[]).await;
    denied(&r, "Permission check failed (/vms/700, VM.PowerMgmt)");
    let r = call_as(&s, b, Method::DELETE, b_path, &[]).await;
    denied(&r, "Permission check failed (/vms/700, VM.Allocate)");
    // cloning into the other's pool is refused as an `or`
    let r = call_as(
        &s,
        b,
        Method::POST,
        "/nodes/pve1/qemu/9000/clone",
        &[("newid", "702"), ("pool", "team-a")],
    )
    .await;
    denied(&r, "Permission check failed");
    assert_eq!(
        s.sim.state().vm(700).unwrap()["config"]["memory"],
        "2048",
        "untouched"
    );
    // tasks: its own task's status is its to read, another's is not
    let r = call_as(
        &s,
        a,
        Method::POST,
        "/nodes/pve1/qemu/700/status/start",
        &[],
    )
    .await;
    let upid = r.data().as_str().unwrap().to_string();
    let path = format!("/nodes/pve1/tasks/{}/status", enc(&upid));
    assert_eq!(get_as(&s, a, &path).await.status, 200);
    denied(
        &get_as(&s, b, &path).await,
        "Permission check failed (/nodes/pve1, Sys.Audit)",
    );
    // a token without Sys.Audit on / sees no cluster tasks, not even its own
    assert_eq!(get_as(&s, a, "/cluster/tasks").await.data(), json!([]));
    let all = get_as(&s, ADMIN, "/cluster/tasks").await.data();
    let mine = all
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["upid"] == upid.as_str())
        .expect("the admin sees it");
    assert_eq!(
        (mine["user"].as_str(), mine["tokenid"].as_str()),
        (Some("a@pve"), Some("capi"))
    );
}

#[tokio::test]
async fn handlers_make_the_checks_pve_makes_inside_them() {
    let mut cfg = tenants();
    // tenant c: allowed to allocate in its pool, but no storage, no bridge, no ISO rights
    cfg.pools.push("team-c".into());
    cfg.api_tokens.push(token("c@pve!capi", "C", false));
    cfg.acls.push(acl("/pool/team-c", "c@pve", "PVEVMAdmin"));
    cfg.acls.push(acl("/vms/9000", "c@pve", "PVETemplateUser"));
    cfg.acls
        .push(acl("/storage/local", "c@pve", "PVEDatastoreUser"));
    let s = start(cfg).await;
    let c = "c@pve!capi=C";
    let clone = async |newid: &str| {
        call_as(
            &s,
            c,
            Method::POST,
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", newid), ("pool", "team-c")],
        )
        .await
    };
    denied(
        &clone("800").await,
        "Permission check failed (/storage/local-lvm, Datastore.AllocateSpace)",
    );
    // the pool must exist: PVE says so as a permission failure (a tenant without
    // VM.Allocate there fails the schema's check first)
    let r = call_as(
        &s,
        ADMIN,
        Method::POST,
        "/nodes/pve1/qemu/9000/clone",
        &[("newid", "800"), ("pool", "nope")],
    )
    .await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.reason,
        "Permission check failed (pool 'nope' does not exist)"
    );

    // tenant a: its role has VM.Config.Memory but not VM.Config.CPU or Network
    let a = "a@pve!capi=A";
    let r = call_as(
        &s,
        a,
        Method::POST,
        "/nodes/pve1/qemu/9000/clone",
        &[("newid", "810"), ("pool", "team-a")],
    )
    .await;
    assert_eq!(finish(&s, r).await["exitstatus"], "OK");
    let put = async |form: &[(&str, &str)]| {
        call_as(&s, a, Method::PUT, "/nodes/pve1/qemu/810/config", form).await
    };
    assert_eq!(put(&[("memory", "4096")]).await.status, 200);
    denied(
        &put(&[("cores", "4")]).await,
        "Permission check failed (/vms/810, VM.Config.CPU)",
    );
    denied(
        &put(&[("net1", "virtio,bridge=vmbr0")]).await,
        "Permission check failed (/vms/810, VM.Config.Network)",
    );
    let r = put(&[("args", "-no-reboot")]).await;
    assert_eq!(
        (r.status.as_u16(), r.reason.as_str()),
        (500, "only root can set 'args' config")
    );

    // the administrator uploads an ISO; deleting it needs Datastore.Allocate
    let form = reqwest::multipart::Form::new().text("content", "iso").part(
        "filename",
        reqwest::multipart::Part::bytes(vec![0u8; 2048]).file_name("x.iso"),
    );
    let r = s
        .send(
            s.http
                .post(s.url("/nodes/pve1/storage/local/upload"))
                .header("Authorization", format!("PVEAPIToken={ADMIN}"))
                .multipart(form),
        )
        .await;
    assert_eq!(finish(&s, r).await["exitstatus"], "OK");
    let iso = format!(
        "/nodes/pve1/storage/local/content/{}",
        enc("local:iso/x.iso")
    );
    let r = call_as(&s, c, Method::DELETE, &iso, &[]).await;
    denied(
        &r,
        "Permission check failed (/storage/local, Datastore.Allocate)",
    );
    // ...while reading it needs only AllocateSpace (or Audit) on its storage
    let r = get_as(&s, c, &iso).await;
    assert_eq!(r.status, 200, "{}", r.text);
    denied(
        &get_as(&s, a, &iso).await,
        "Permission check failed (/storage/local, Datastore.AllocateSpace|Datastore.Audit)",
    );
}
