//! What a tenant's objects make the manager hold is bounded in bytes (issue 40, item 6):
//! an InfraCluster naming 256 credentials Secrets of about 1 MiB each, and 300 labelled
//! Secrets of about 1 MiB beside the machines (the bootstrap-Secret trigger watches
//! their metadata only), across a restart of the manager. `hyperplug run` runs as a
//! process; its peak resident memory is read from /proc and printed as a table.
use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};

use crate::support::controllers::{PROXMOX_SPEC, machine, proxmox_cluster};
use crate::support::manager::{Manager, rss_table};
use crate::support::world::{World, condition};

const V1ALPHA1: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
/// About the largest Secret the API server stores.
const SECRET_BYTES: usize = 1_000_000;

/// `hyperplug run` with the Proxmox plugin against `world`.
fn start_manager(world: &World) -> Manager {
    let child = world
        .hyperplug_run(&["proxmox"])
        .args(["--resync-seconds", "5"])
        .spawn()
        .expect("start hyperplug run");
    Manager(child)
}

/// A Secret of `padding` bytes besides, where `credentials`, credentials keys whose
/// `secret` and `ca.crt` are that many bytes; labelled as a cluster's when `label`.
fn big_secret(name: &str, credentials: Option<usize>, padding: usize, label: bool) -> Secret {
    let mut data: BTreeMap<String, ByteString> = BTreeMap::new();
    if let Some(n) = credentials {
        data.insert("url".into(), ByteString(b"https://127.0.0.1:1".to_vec()));
        data.insert("token".into(), ByteString(b"tenant@pve!t".to_vec()));
        data.insert("secret".into(), ByteString(vec![b's'; n]));
        data.insert("ca.crt".into(), ByteString(vec![b'c'; n]));
    }
    data.insert("padding".into(), ByteString(vec![b'p'; padding]));
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: label.then(|| [("cluster.x-k8s.io/cluster-name".into(), "demo".into())].into()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    }
}

/// Creates in flight: the API server and etcd take several 1 MiB Secrets at once.
const IN_FLIGHT: usize = 8;

async fn create_all(world: &World, secrets: impl IntoIterator<Item = Secret>) {
    let api: Api<Secret> = Api::namespaced(world.plane.client(), &world.ns);
    futures::stream::iter(secrets)
        .map(|s| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &s)
                    .await
                    .expect("secret");
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<()>()
        .await;
}

/// A ProxmoxCluster `name` naming `count` Secrets `<prefix>-<i>` in `credentialsRefs`.
fn flooded_cluster(name: &str, prefix: &str, count: usize) -> String {
    let refs: Vec<String> = (0..count)
        .map(|i| format!("{{name: {prefix}-{i}}}"))
        .collect();
    let cluster = proxmox_cluster(name, Some("{name: pve-credentials}"));
    format!("{cluster}  credentialsRefs: [{}]\n", refs.join(", "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_secrets_leave_the_manager_under_its_memory_goal() {
    let world = World::start_with(pve_sim::Config::fast(), false).await;
    let pcs = world.api(V1ALPHA1, "ProxmoxCluster").await;
    let pms = world.api(V1ALPHA1, "ProxmoxMachine").await;
    let mut rows: Vec<(&str, u64, String)> = Vec::new();

    // 256 credentialsRefs to 1 MiB Secrets with small credentials: read a few at once.
    create_all(
        &world,
        (0..256).map(|i| big_secret(&format!("many-{i}"), Some(16), SECRET_BYTES, false)),
    )
    .await;
    // ... and with 60 KiB values: over --credentials-max-kib after a few.
    create_all(
        &world,
        (0..256).map(|i| big_secret(&format!("large-{i}"), Some(60 << 10), 0, false)),
    )
    .await;
    // 300 labelled 1 MiB Secrets beside the machines.
    create_all(
        &world,
        (0..300).map(|i| big_secret(&format!("labelled-{i}"), None, SECRET_BYTES, true)),
    )
    .await;
    world
        .apply(&proxmox_cluster("demo", Some("{name: pve-credentials}")))
        .await;
    world.apply(&flooded_cluster("many", "many", 256)).await;
    world.apply(&flooded_cluster("large", "large", 256)).await;

    let manager = start_manager(&world);
    world
        .wait_for(&pcs, "many", "provisioned with 256 credentialsRefs", |o| {
            o.data["status"]["initialization"]["provisioned"] == true
        })
        .await;
    rows.push((
        "256 credentialsRefs to 1 MiB Secrets",
        manager.peak_rss_mib(),
        "provisioned".into(),
    ));
    let large = world
        .wait_for(&pcs, "large", "CredentialsTooLarge", |o| {
            condition(o, "Ready").is_some_and(|c| c["reason"] == "CredentialsTooLarge")
        })
        .await;
    let message = condition(&large, "Ready").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("--credentials-max-kib"), "{message}");
    rows.push((
        "256 credentialsRefs of 60 KiB values",
        manager.peak_rss_mib(),
        message,
    ));

    // A machine provisions beside the labelled Secrets (the bootstrap trigger is up).
    machine(&world, "demo", "ProxmoxMachine", "m0", "{}", PROXMOX_SPEC).await;
    let provisioned =
        |o: &kube::api::DynamicObject| o.data["status"]["initialization"]["provisioned"] == true;
    world.wait_for(&pms, "m0", "provisioned", provisioned).await;
    rows.push((
        "300 labelled 1 MiB Secrets",
        manager.peak_rss_mib(),
        "a machine provisioned".into(),
    ));
    drop(manager);

    // Restarted, the manager lists them all again.
    let manager = start_manager(&world);
    machine(&world, "demo", "ProxmoxMachine", "m1", "{}", PROXMOX_SPEC).await;
    world.wait_for(&pms, "m1", "provisioned", provisioned).await;
    rows.push((
        "... after a restart",
        manager.peak_rss_mib(),
        "a machine provisioned".into(),
    ));

    rss_table(
        "Peak RSS of `hyperplug run` under a tenant's Secrets",
        "flood",
        &rows,
    );
}
