//! Tenants separated by Proxmox VE's own permissions (issue 40), with the provider's
//! checks as a second line: each tenant's ProxmoxCluster has its own PVE API token, a
//! privilege-separated token whose ACLs (and its user's) reach its own pool, the
//! template, the disk storage, its own ISO storage, the bridge and the node. Each
//! provisions and deletes a machine; each names the other's VM in a spec (as the
//! template to clone, as the VM to adopt) and is refused; PVE itself refuses the other's
//! token on that VM; the journal shows no successful request of one tenant's token to
//! the other's VM, and that VM's config does not change. A token missing a privilege
//! gets the cluster's `MissingPrivileges` at once.
use kube::api::{DeleteParams, DynamicObject};
use pve_sim::{AclEntry, ApiToken, StorageConfig, StorageType};
use serde_json::Value;

use crate::support::controllers::{machine, proxmox_cluster};
use crate::support::world::{World, ready_reason};

const V1ALPHA1: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
const TENANTS: [&str; 2] = ["team-a", "team-b"];
/// A token that lacks `SDN.Use` on the bridge.
const MISCONFIGURED: &str = "team-c";

fn token_id(tenant: &str) -> String {
    format!("{tenant}@pve!capi")
}

fn secret_of(tenant: &str) -> String {
    format!("{tenant}-5ecret-0000-4000-8000-{:0>12}", tenant.len())
}

fn acl(path: &str, principal: &str, role: &str) -> AclEntry {
    AclEntry {
        path: path.into(),
        principal: principal.into(),
        role: Some(role.into()),
        ..AclEntry::default()
    }
}

/// The PVE side of the tenant setup (docs/security.md, "Running it for several
/// tenants"): a pool, an ISO storage and a privilege-separated token per tenant, the
/// roles, and the same ACLs for the token and its user.
fn shared_pve() -> pve_sim::Config {
    let mut cfg = pve_sim::Config::fast();
    cfg.roles.insert(
        "HyperplugVMs".into(),
        [
            "VM.Allocate",
            "VM.Audit",
            "VM.Clone",
            "VM.Config.CDROM",
            "VM.Config.CPU",
            "VM.Config.Cloudinit",
            "VM.Config.Disk",
            "VM.Config.Memory",
            "VM.Config.Network",
            "VM.Config.Options",
            "VM.PowerMgmt",
            "VM.GuestAgent.Audit",
            "Pool.Audit",
        ]
        .map(String::from)
        .to_vec(),
    );
    cfg.roles
        .insert("HyperplugNodes".into(), vec!["Sys.Audit".into()]);
    for tenant in TENANTS.iter().chain([&MISCONFIGURED]) {
        cfg.pools.push(tenant.to_string());
        cfg.storages.push(StorageConfig {
            id: format!("iso-{tenant}"),
            kind: StorageType::Dir,
            content: vec!["iso".into()],
            ..StorageConfig::default()
        });
        cfg.api_tokens.push(ApiToken {
            id: token_id(tenant),
            secret: secret_of(tenant),
            privsep: true,
        });
        let user = format!("{tenant}@pve");
        for who in [user.as_str(), &token_id(tenant)] {
            cfg.acls.extend([
                acl(&format!("/pool/{tenant}"), who, "HyperplugVMs"),
                acl("/vms/9000", who, "PVETemplateUser"),
                acl("/storage/local-lvm", who, "PVEDatastoreUser"),
                acl(&format!("/storage/iso-{tenant}"), who, "PVEDatastoreAdmin"),
                acl("/nodes/pve1", who, "HyperplugNodes"),
            ]);
            if *tenant != MISCONFIGURED {
                cfg.acls
                    .push(acl("/sdn/zones/localnetwork/vmbr0", who, "PVESDNUser"));
            }
        }
    }
    cfg
}

/// Each tenant's credentials Secret, `<tenant>-pve`, naming its own token.
async fn credentials(world: &World) {
    for tenant in TENANTS.iter().chain([&MISCONFIGURED]) {
        world
            .apply(&format!(
                "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {tenant}-pve\nstringData:\n  url: {}\n  token: \"{}\"\n  secret: {}\n  fingerprint: \"{}\"\n",
                world.sim.base_url(),
                token_id(tenant),
                secret_of(tenant),
                world.sim.fingerprint()
            ))
            .await;
    }
}

/// A machine spec like `PROXMOX_SPEC`, cloning `template`, in the tenant's pool, its ISO
/// on its own storage, with `extra`.
fn spec(tenant: &str, template: u64, extra: &str) -> String {
    format!(
        "{{sourceNode: pve1, templateID: {template}, numCores: 1, memoryMiB: 1024, \
         network: {{default: {{bridge: vmbr0}}}}, pool: {tenant}, \
         cloudInit: {{isoStorage: iso-{tenant}}}{extra}}}"
    )
}

fn provisioned(o: &DynamicObject) -> bool {
    o.data["status"]["initialization"]["provisioned"] == true
}

/// The journal's requests of `tenant`'s token to VM `vmid` that succeeded.
fn successful_requests(world: &World, tenant: &str, vmid: u64) -> Vec<Value> {
    let to_it = format!("/qemu/{vmid}");
    world
        .sim
        .state()
        .requests()
        .into_iter()
        .filter(|r| r["user"] == token_id(tenant).as_str())
        .filter(|r| {
            r["path"]
                .as_str()
                .is_some_and(|p| p.ends_with(&to_it) || p.contains(&format!("{to_it}/")))
        })
        .filter(|r| r["status"] == 200)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_with_their_own_pve_tokens_reach_only_their_own_vms() {
    let world = World::start(shared_pve()).await;
    credentials(&world).await;
    let pcs = world.api(V1ALPHA1, "ProxmoxCluster").await;
    let pms = world.api(V1ALPHA1, "ProxmoxMachine").await;
    for tenant in TENANTS.iter().chain([&MISCONFIGURED]) {
        world
            .apply(&proxmox_cluster(
                tenant,
                Some(&format!("{{name: {tenant}-pve}}")),
            ))
            .await;
    }

    // The misconfigured token is told at once, on its cluster, what it lacks.
    let message = world
        .wait_reason(&pcs, MISCONFIGURED, "MissingPrivileges")
        .await;
    assert!(
        message
            .contains("SDN.Use on the bridges the machines use (/sdn/zones/localnetwork/<bridge>)"),
        "{message}"
    );
    assert!(message.contains(&token_id(MISCONFIGURED)), "{message}");
    assert!(
        !message.contains("VM.Allocate"),
        "only what is missing: {message}"
    );
    let failed = pcs.get(MISCONFIGURED).await.unwrap();
    assert!(
        failed.data["status"]["failedGeneration"].is_i64(),
        "terminal: {:?}",
        failed.data["status"]
    );

    // Each tenant provisions a machine in its own pool.
    for tenant in TENANTS {
        world
            .wait_for(&pcs, tenant, "provisioned", provisioned)
            .await;
        machine(
            &world,
            tenant,
            "ProxmoxMachine",
            &format!("{tenant}-1"),
            "{}",
            &spec(tenant, 9000, ""),
        )
        .await;
    }
    let mut vms = vec![];
    for tenant in TENANTS {
        let m = world
            .wait_for(&pms, &format!("{tenant}-1"), "provisioned", provisioned)
            .await;
        let vmid: u64 = m.data["status"]["details"]["vmid"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .expect("a VMID");
        let provider_id = m.data["spec"]["providerID"].as_str().unwrap().to_string();
        let vm = world.sim.state().vm(vmid as u32).expect("its VM");
        assert_eq!(vm["pool"], tenant, "in its own pool: {vm}");
        vms.push((vmid, provider_id, vm["config"]["digest"].clone()));
    }

    // Each names the other's VM: as the template to clone, and as the VM to adopt.
    for (i, tenant) in TENANTS.iter().enumerate() {
        let (vmid, provider_id, _) = &vms[1 - i];
        machine(
            &world,
            tenant,
            "ProxmoxMachine",
            &format!("{tenant}-cloner"),
            "{}",
            &spec(tenant, *vmid, ""),
        )
        .await;
        machine(
            &world,
            tenant,
            "ProxmoxMachine",
            &format!("{tenant}-taker"),
            "{}",
            &spec(
                tenant,
                9000,
                &format!(", providerID: \"{provider_id}\", virtualMachineID: {vmid}"),
            ),
        )
        .await;
    }
    for tenant in TENANTS {
        // not in its listing, so the plugin asks for the VM's config: PVE's 403 (the
        // same whether or not the VMID exists), or the plugin's own refusal
        let name = format!("{tenant}-cloner");
        let refused = world
            .wait_for(&pms, &name, "refused", |o| {
                matches!(
                    ready_reason(o).as_deref(),
                    Some("TemplateNotFound" | "PermissionDenied")
                )
            })
            .await;
        assert!(!provisioned(&refused), "{name}");
        world
            .wait_reason(&pms, &format!("{tenant}-taker"), "AdoptionNotGranted")
            .await;
    }
    // Beneath the provider, PVE refuses the other's token on the VM itself.
    let (a_vm, b_vm) = (vms[0].0, vms[1].0);
    let http = reqwest::Client::builder()
        .add_root_certificate(
            reqwest::Certificate::from_pem(world.sim.ca_pem().as_bytes()).unwrap(),
        )
        .build()
        .unwrap();
    let r = http
        .get(format!(
            "{}/api2/json/nodes/pve1/qemu/{a_vm}/config",
            world.sim.base_url()
        ))
        .header(
            "Authorization",
            format!("PVEAPIToken={}={}", token_id("team-b"), secret_of("team-b")),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);

    for (tenant, other_vm) in [("team-a", b_vm), ("team-b", a_vm)] {
        let reached = successful_requests(&world, tenant, other_vm);
        assert!(
            reached.is_empty(),
            "{tenant}'s token reached VM {other_vm}: {reached:?}"
        );
    }
    for (i, (vmid, _, digest)) in vms.iter().enumerate() {
        let vm = world.sim.state().vm(*vmid as u32).unwrap();
        assert_eq!(&vm["config"]["digest"], digest, "{} unchanged", TENANTS[i]);
        assert_eq!(vm["status"], "running");
    }
    // Each tenant's own requests did succeed, with its own token.
    for (tenant, vmid) in [("team-a", a_vm), ("team-b", b_vm)] {
        assert!(
            !successful_requests(&world, tenant, vmid).is_empty(),
            "{tenant}"
        );
    }

    // Deleting everything: the refused machines destroy nothing, and each tenant's
    // machine its own VM, with its own token.
    for tenant in TENANTS {
        for m in ["cloner", "taker"] {
            let name = format!("{tenant}-{m}");
            pms.delete(&name, &DeleteParams::default()).await.unwrap();
            world.wait_gone(&pms, &name).await;
        }
    }
    assert!(
        world.sim.state().destroyed().is_empty(),
        "nothing destroyed"
    );
    for tenant in TENANTS {
        let name = format!("{tenant}-1");
        pms.delete(&name, &DeleteParams::default()).await.unwrap();
        world.wait_gone(&pms, &name).await;
    }
    let destroyed = world.sim.state().destroyed();
    let by: Vec<(u64, &str)> = destroyed
        .iter()
        .map(|d| (d["vmid"].as_u64().unwrap(), d["user"].as_str().unwrap()))
        .collect();
    assert_eq!(by.len(), 2, "{destroyed:?}");
    for (vmid, tenant) in [(a_vm, "team-a"), (b_vm, "team-b")] {
        assert!(
            by.contains(&(vmid, token_id(tenant).as_str())),
            "{vmid} destroyed by {tenant}'s token: {by:?}"
        );
    }
}
