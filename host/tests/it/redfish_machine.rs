//! The Redfish plugin against real BMC emulators (sushy-tools, several processes =
//! several BMCs), through the runtime with the host's blob server and claims: a
//! machine claims a host, the emulator downloads the bootstrap ISO from the blob URL,
//! boots once from CD, powers on; delete powers off, ejects and releases. No host is
//! claimed twice, and a machine never touches a host it does not hold.
use std::sync::Arc;

use hyperplug_runtime::bindings::machine::{BootstrapData, Drift, MachineRequest, MachineStatus};
use hyperplug_runtime::{
    BlobStore, Grants, Limits, NamedCredentials, Plugin, PluginError, Runtime,
};
use serde_json::json;

use crate::support::drive::{NoAddresses, create_until_ready, delete_until_gone, pacing};
use crate::support::sushy::{Bmc, serve_blobs};
use crate::support::{cluster_request, load_with, object};

const CLOUD_CONFIG: &str = "#cloud-config\nruncmd:\n  - echo joined\n";

struct Fleet {
    bmcs: Vec<Bmc>,
    runtime: Runtime,
    plugin: Plugin,
    blobs: Arc<BlobStore>,
}

impl Fleet {
    /// One emulator per entry, serving that many systems.
    async fn start(systems: &[usize]) -> Fleet {
        let mut bmcs = Vec::new();
        for (i, n) in systems.iter().enumerate() {
            bmcs.push(Bmc::start(&format!("bmc{i}"), *n).await);
        }
        let blobs = serve_blobs().await;
        let runtime = Runtime::builder(Limits::default()).blobs(blobs.clone());
        let (runtime, plugin) = load_with("redfish", runtime).await;
        Fleet {
            bmcs,
            runtime,
            plugin,
            blobs,
        }
    }

    fn request(&self, name: &str) -> MachineRequest {
        MachineRequest {
            machine: object(name),
            cluster: object("c1"),
            spec: "{}".into(),
            cluster_spec: json!({"controlPlaneEndpoint": {"host": "10.0.0.10", "port": 6443}})
                .to_string(),
            plugin_status: None,
            state: None,
            bootstrap: None,
            failure_domain: None,
            addresses: vec![],
            credentials: self.bmcs[0].credentials(),
            more_credentials: self
                .bmcs
                .iter()
                .enumerate()
                .map(|(i, b)| NamedCredentials {
                    name: format!("default/bmc{i}"),
                    credentials: b.credentials(),
                })
                .collect(),
        }
    }

    fn bmc_of(&self, uuid: &str) -> &Bmc {
        self.bmcs
            .iter()
            .find(|b| b.serves(uuid))
            .expect("a BMC serves it")
    }

    async fn holder(&self, uuid: &str) -> Option<String> {
        self.runtime
            .claims()
            .holder("redfish", &format!("host/{uuid}"))
            .await
            .expect("claims")
    }

    /// Release `holder`'s claim on the host `uuid` behind the plugin's back.
    async fn release(&self, uuid: &str, holder: &str) {
        self.runtime
            .claims()
            .release("redfish", &format!("host/{uuid}"), holder)
            .await
            .expect("claims");
    }

    async fn describe(&self, req: &MachineRequest) -> MachineStatus {
        self.plugin
            .describe_machine(req)
            .await
            .expect("call completes")
            .expect("describe")
    }

    async fn create(&self, req: &MachineRequest) -> Result<MachineStatus, PluginError> {
        self.plugin
            .create_machine(req)
            .await
            .expect("call completes")
    }

    /// `create` with adoption granted, as `--adopt-namespace` grants it.
    async fn create_granted(&self, req: &MachineRequest) -> Result<MachineStatus, PluginError> {
        let granted = Grants { adoption: true };
        self.plugin
            .create_machine_with(req, granted)
            .await
            .expect("call completes")
    }

    /// `create`, called again after a transient failure as the host's backoff would:
    /// the emulator keeps its state in SQLite, which answers concurrent requests with
    /// "database is locked" (HTTP 500) now and then.
    async fn create_retrying(&self, req: &MachineRequest) -> MachineStatus {
        for _ in 0..10 {
            match self.create(req).await {
                Err(PluginError::Transient(_)) => {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await
                }
                other => return other.expect("create"),
            }
        }
        self.create(req)
            .await
            .expect("create, after transient failures")
    }

    /// Create until ready through the host's driver, the state fed back as the host
    /// does.
    async fn create_until_ready(&self, req: &mut MachineRequest) -> MachineStatus {
        let mut answers = NoAddresses(bootstrap());
        let (status, _) = create_until_ready(&self.plugin, req, &mut answers, &pacing(500))
            .await
            .unwrap_or_else(|e| panic!("machine {} never became ready: {e}", req.machine.name));
        status
    }

    async fn delete_until_gone(&self, req: &mut MachineRequest) {
        delete_until_gone(&self.plugin, req, &pacing(500))
            .await
            .unwrap_or_else(|e| panic!("machine {} was never deleted: {e}", req.machine.name));
    }
}

fn bootstrap() -> Option<BootstrapData> {
    Some(BootstrapData {
        format: "cloud-config".into(),
        value: CLOUD_CONFIG.as_bytes().to_vec(),
    })
}

fn detail(status: &MachineStatus, key: &str) -> String {
    status
        .details
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no detail {key} in {:?}", status.details))
}

async fn fetch(url: &str) -> (u16, Vec<u8>) {
    let r = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(url)
        .send()
        .await
        .expect("GET");
    let status = r.status().as_u16();
    (status, r.bytes().await.expect("body").to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_claims_a_host_boots_its_media_and_releases_the_host() {
    let fleet = Fleet::start(&[2]).await;
    let mut req = fleet.request("m1");

    // Without bootstrap data: a host is claimed, nothing on it is touched yet.
    let status = fleet.create(&req).await.expect("create");
    assert!(status.needs_bootstrap && !status.ready, "{status:?}");
    assert_eq!(status.progress.phase, "WaitingForBootstrapData");
    let uuid = detail(&status, "uuid");
    let bmc = fleet.bmc_of(&uuid);
    assert_eq!(fleet.holder(&uuid).await.as_deref(), Some("uid-m1"));
    assert_eq!(bmc.cd(&uuid).await["Inserted"], false);
    req.state = Some(status.progress.state.clone());

    // With it: the ISO is published, the emulator downloads it, boot once from CD, power on.
    req.bootstrap = bootstrap();
    let served = fleet.blobs.served();
    let status = fleet.create(&req).await.expect("create");
    assert_eq!(status.progress.phase, "PoweringOn", "{status:?}");
    req.state = Some(status.progress.state.clone());
    let cd = bmc.cd(&uuid).await;
    assert_eq!(cd["Inserted"], true, "{cd}");
    assert_eq!(
        cd["ImageName"], "cidata.iso",
        "the emulator stored the download: {cd}"
    );
    assert!(
        fleet.blobs.served() > served,
        "the emulator fetched the blob"
    );
    let image = cd["Image"].as_str().unwrap().to_string();
    assert!(
        !status.progress.state.contains(&image) && !status.progress.state.contains("/blobs/"),
        "the media URL is a secret and stays out of the state"
    );
    let (code, iso) = fetch(&image).await;
    assert_eq!(code, 200);
    assert_eq!(&iso[0x8001..0x8006], b"CD001", "an ISO 9660 image");
    assert!(
        iso.windows(CLOUD_CONFIG.len())
            .any(|w| w == CLOUD_CONFIG.as_bytes()),
        "holding the bootstrap data"
    );
    let system = bmc.system(&uuid).await;
    assert_eq!(system["Boot"]["BootSourceOverrideTarget"], "Cd");

    let status = fleet.create_until_ready(&mut req).await;
    assert_eq!(
        status.provider_id.as_deref(),
        Some(&*format!("redfish://{uuid}"))
    );
    assert!(status.addresses.iter().any(|a| a.address == "m1"));
    assert_eq!(bmc.power(&uuid).await, "On");
    assert!(
        fleet.blobs.is_empty(),
        "the media is withdrawn once provisioned"
    );
    assert_eq!(fetch(&image).await.0, 404);

    // Ten more reconciles change nothing.
    for _ in 0..10 {
        let again = fleet.create(&req).await.expect("create");
        assert!(again.ready && again.provider_id == status.provider_id);
    }
    let described = fleet.describe(&req).await;
    assert!(
        described.ready && described.drift.is_none(),
        "{described:?}"
    );
    // The claim is the ownership marker: released behind its back, the host is no
    // longer this machine's, and describe says so (and takes nothing).
    fleet.release(&uuid, "uid-m1").await;
    let described = fleet.describe(&req).await;
    assert!(
        matches!(described.drift, Some(Drift::Missing(_))),
        "{described:?}"
    );
    assert_eq!(fleet.holder(&uuid).await, None);
    // Create takes it back (nobody else took it meanwhile).
    assert!(fleet.create(&req).await.expect("create").ready);
    assert_eq!(fleet.holder(&uuid).await.as_deref(), Some("uid-m1"));

    fleet.delete_until_gone(&mut req).await;
    assert_eq!(bmc.power(&uuid).await, "Off");
    assert_eq!(bmc.cd(&uuid).await["Inserted"], false);
    assert_eq!(fleet.holder(&uuid).await, None, "the host is released");
    assert!(fleet.blobs.is_empty());
    // Deleting again is a no-op.
    req.state = None;
    fleet.delete_until_gone(&mut req).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_machines_at_once_never_share_a_host() {
    let fleet = Arc::new(Fleet::start(&[2, 2]).await);
    let names: Vec<String> = (0..6).map(|i| format!("m{i}")).collect();
    let calls = names.iter().map(|n| {
        let fleet = fleet.clone();
        let req = fleet.request(n);
        async move { (req.machine.name.clone(), fleet.create_retrying(&req).await) }
    });
    let results = futures::future::join_all(calls).await;
    let mut claimed: Vec<(String, String)> = results
        .iter()
        .filter(|(_, s)| s.needs_bootstrap)
        .map(|(n, s)| (n.clone(), detail(s, "uuid")))
        .collect();
    let waiting: Vec<&String> = results
        .iter()
        .filter(|(_, s)| s.progress.phase == "WaitingForHost")
        .map(|(n, _)| n)
        .collect();
    assert_eq!(claimed.len(), 4, "{results:?}");
    assert_eq!(waiting.len(), 2, "{results:?}");
    let mut uuids: Vec<&String> = claimed.iter().map(|(_, u)| u).collect();
    uuids.sort();
    uuids.dedup();
    assert_eq!(uuids.len(), 4, "every host once: {claimed:?}");
    for (name, uuid) in &claimed {
        assert_eq!(fleet.holder(uuid).await, Some(format!("uid-{name}")));
    }

    // Repeats (even with the state lost) find the same host: no second claim.
    claimed.sort();
    let (name, uuid) = &claimed[0];
    for _ in 0..3 {
        let status = fleet.create(&fleet.request(name)).await.expect("create");
        assert_eq!(&detail(&status, "uuid"), uuid);
    }

    // Releasing one lets a waiting machine have it.
    let mut req = fleet.request(name);
    fleet.delete_until_gone(&mut req).await;
    assert_eq!(fleet.holder(uuid).await, None);
    let status = fleet
        .create(&fleet.request(waiting[0]))
        .await
        .expect("create");
    assert_eq!(&detail(&status, "uuid"), uuid, "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_never_touches_a_host_it_does_not_hold() {
    let fleet = Fleet::start(&[1]).await;
    let mut owner = fleet.request("owner");
    owner.bootstrap = bootstrap();
    let status = fleet.create_until_ready(&mut owner).await;
    let uuid = detail(&status, "uuid");
    let bmc = fleet.bmc_of(&uuid);

    // Another machine handed the owner's state (a copied object, a bug) is refused ...
    let mut intruder = fleet.request("intruder");
    intruder.bootstrap = bootstrap();
    intruder.state = owner.state.clone();
    match fleet.create(&intruder).await {
        Err(PluginError::Terminal(t)) => assert_eq!(t.reason, "HostClaimedByAnother", "{t:?}"),
        other => panic!("expected HostClaimedByAnother, got {other:?}"),
    }
    let described = fleet.describe(&intruder).await;
    assert!(
        matches!(described.drift, Some(Drift::Foreign(_))),
        "{described:?}"
    );
    // ... and its delete leaves the host as it is.
    let gone = fleet
        .plugin
        .delete_machine(&intruder)
        .await
        .unwrap()
        .expect("delete");
    assert!(gone.is_none());
    assert_eq!(bmc.power(&uuid).await, "On");
    assert_eq!(bmc.cd(&uuid).await["Inserted"], true);
    assert_eq!(fleet.holder(&uuid).await.as_deref(), Some("uid-owner"));

    // With no free host, a new machine waits instead of taking one.
    let status = fleet.create(&fleet.request("late")).await.expect("create");
    assert_eq!(status.progress.phase, "WaitingForHost");
    assert_eq!(status.progress.requeue_after_ms, Some(15_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_machine_mid_provisioning_withdraws_its_media() {
    let fleet = Fleet::start(&[1]).await;
    let mut req = fleet.request("m1");
    req.bootstrap = bootstrap();
    let status = fleet.create(&req).await.expect("create");
    req.state = Some(status.progress.state.clone());
    let uuid = detail(&status, "uuid");
    assert_eq!(
        fleet.blobs.len(),
        1,
        "the ISO is published while provisioning"
    );
    fleet.delete_until_gone(&mut req).await;
    assert!(
        fleet.blobs.is_empty(),
        "and gone once the machine is deleted"
    );
    assert_eq!(fleet.bmc_of(&uuid).cd(&uuid).await["Inserted"], false);
    assert_eq!(fleet.holder(&uuid).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_counts_the_hosts_of_every_bmc_and_names_bad_fields() {
    let fleet = Fleet::start(&[2, 1]).await;
    let spec = json!({"controlPlaneEndpoint": {"host": "10.0.0.10", "port": 6443}});
    let mut req = cluster_request(spec, fleet.bmcs[0].credentials());
    req.more_credentials = fleet.request("x").more_credentials;
    let status = fleet
        .plugin
        .reconcile_cluster(&req)
        .await
        .unwrap()
        .expect("reconcile");
    assert!(status.ready);
    assert!(
        status.details.contains(&("hosts".into(), "3".into())),
        "{:?}",
        status.details
    );
    assert!(
        status.details.contains(&("bmcs".into(), "2".into())),
        "{:?}",
        status.details
    );

    req.spec = "{}".into();
    match fleet.plugin.reconcile_cluster(&req).await.unwrap() {
        Err(PluginError::InvalidSpec(i)) => assert_eq!(i.field, "spec.controlPlaneEndpoint"),
        other => panic!("expected an invalid spec, got {other:?}"),
    }

    // A BMC that does not answer is a transient failure.
    req.spec = json!({"controlPlaneEndpoint": {"host": "10.0.0.10", "port": 6443}}).to_string();
    req.credentials.endpoint = "http://127.0.0.1:1".into();
    req.more_credentials.clear();
    match fleet.plugin.reconcile_cluster(&req).await.unwrap() {
        Err(PluginError::Transient(_)) => {}
        other => panic!("expected a transient error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn media_lost_by_a_restarted_manager_is_published_and_inserted_again() {
    let fleet = Fleet::start(&[1]).await;
    let mut req = fleet.request("m1");
    req.bootstrap = bootstrap();
    let status = fleet.create(&req).await.expect("create");
    req.state = Some(status.progress.state.clone());
    let uuid = detail(&status, "uuid");
    let bmc = fleet.bmc_of(&uuid);
    let first = bmc.cd(&uuid).await["Image"].as_str().unwrap().to_string();
    // The manager restarts: its in-memory blobs are gone.
    assert_eq!(fleet.blobs.withdraw_object("uid-m1"), 1);
    let served = fleet.blobs.served();
    let status = fleet.create(&req).await.expect("create");
    let second = bmc.cd(&uuid).await["Image"].as_str().unwrap().to_string();
    assert_ne!(first, second, "a new URL");
    assert!(fleet.blobs.served() > served, "downloaded again");
    // Served until the host has booted (this very call may have seen it booted).
    let expected = if status.ready { 404 } else { 200 };
    assert_eq!(fetch(&second).await.0, expected);
    fleet.create_until_ready(&mut req).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provisioned_host_is_adopted_without_a_restart() {
    let fleet = Fleet::start(&[2]).await;
    let mut req = fleet.request("m1");
    req.bootstrap = bootstrap();
    let status = fleet.create_until_ready(&mut req).await;
    let uuid = detail(&status, "uuid");
    let bmc = fleet.bmc_of(&uuid);
    let provider_id = status.provider_id.clone().unwrap();

    // State lost after ready: the claim finds the host, the BMC says it booted.
    let mut lost = req.clone();
    lost.state = None;
    let again = fleet.create(&lost).await.expect("create");
    assert!(again.ready, "{again:?}");
    assert_eq!(again.provider_id.as_deref(), Some(provider_id.as_str()));
    assert_eq!(bmc.power(&uuid).await, "On", "not restarted");

    // `clusterctl move`: state and claims gone, the providerID (in the spec) remains.
    fleet.release(&uuid, "uid-m1").await;
    // A provider ID is what someone wrote: followed only with adoption granted.
    let mut moved = req.clone();
    moved.state = None;
    moved.spec = json!({"providerID": provider_id}).to_string();
    match fleet.create(&moved).await {
        Err(PluginError::Terminal(t)) => assert_eq!(t.reason, "AdoptionNotGranted"),
        other => panic!("expected AdoptionNotGranted, got {other:?}"),
    }
    let again = fleet.create_granted(&moved).await.expect("create");
    assert!(again.ready, "{again:?}");
    assert_eq!(again.provider_id.as_deref(), Some(provider_id.as_str()));
    assert_eq!(fleet.holder(&uuid).await.as_deref(), Some("uid-m1"));
    assert_eq!(bmc.power(&uuid).await, "On", "not restarted");

    // A providerID naming a host someone else holds is refused.
    // ... and even granted, it does not take a host someone else holds, nor say who.
    let mut thief = fleet.request("thief");
    thief.spec = moved.spec.clone();
    match fleet.create_granted(&thief).await {
        Err(PluginError::Terminal(t)) => {
            assert_eq!(t.reason, "HostClaimedByAnother");
            assert!(!t.message.contains("uid-m1"), "{t:?}");
        }
        other => panic!("expected HostClaimedByAnother, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_address_from_the_pool_is_bound_to_the_hosts_first_nic() {
    use hyperplug_runtime::bindings::machine::{AddressType, AllocatedAddress};
    let fleet = Fleet::start(&[1]).await;
    let mut req = fleet.request("m1");
    req.cluster_spec = json!({
        "controlPlaneEndpoint": {"host": "10.0.0.10", "port": 6443},
        "ipv4Config": {"addresses": ["192.0.2.50-192.0.2.60"], "prefix": 24, "gateway": "192.0.2.1"},
        "dnsServers": ["192.0.2.53"],
    })
    .to_string();
    req.bootstrap = bootstrap();
    // First the address: nothing is claimed before it is there.
    let status = fleet.create(&req).await.expect("create");
    assert_eq!(status.progress.phase, "WaitingForAddresses");
    assert_eq!(status.address_requests.len(), 1);
    assert_eq!(status.address_requests[0].pool.label(), "ipv4");
    let system = &fleet.bmcs[0].systems[0];
    assert_eq!(fleet.holder(&system.uuid).await, None);

    req.addresses = vec![AllocatedAddress {
        device: status.address_requests[0].device.clone(),
        address: "192.0.2.50".into(),
        prefix: 24,
        gateway: Some("192.0.2.1".into()),
    }];
    let status = fleet.create(&req).await.expect("create");
    req.state = Some(status.progress.state.clone());
    let image = fleet.bmcs[0].cd(&system.uuid).await["Image"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, iso) = fetch(&image).await;
    let text = String::from_utf8_lossy(&iso);
    assert!(text.contains("192.0.2.50/24"), "the static address");
    assert!(
        text.contains(&system.mac),
        "bound to the NIC's MAC {}",
        system.mac
    );
    assert!(text.contains("192.0.2.53"), "the DNS server");
    let status = fleet.create_until_ready(&mut req).await;
    assert!(status.addresses.iter().any(|a| {
        matches!(a.address_type, AddressType::InternalIp) && a.address == "192.0.2.50"
    }));
}
