//! One `hyperplug run` process with both bundled plugins provisions a ProxmoxMachine
//! (on pve-sim) and a RedfishMachine (on a sushy-tools BMC) side by side on a real
//! API server: a different kind of infrastructure served by the same binary, with
//! only another `.wasm` and its CRDs. The Redfish host's claim is a Lease; the BMC
//! downloads the bootstrap ISO from the host's blob server.
use std::process::Child;

use hyperplug_runtime::Limits;
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};

use crate::support::sushy::Bmc;
use crate::support::world::World;

fn start_host(world: &World, blob_port: u16) -> Child {
    let blob_addr = format!("127.0.0.1:{blob_port}");
    world
        .hyperplug_run(&["proxmox", "redfish"])
        .args(["--resync-seconds", "5", "--claims-namespace", &world.ns])
        .args(["--blob-listen-addr", &blob_addr])
        .args(["--blob-advertise-url", &format!("http://{blob_addr}")])
        .env("RUST_LOG", "info")
        .spawn()
        .expect("start hyperplug run")
}

/// Kill the host when the test ends, however it ends.
struct Host(Child);

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Wait until one of `names` is provisioned; returns it and the name of the other.
async fn first_provisioned(
    world: &World,
    api: &Api<kube::api::DynamicObject>,
    names: [&str; 2],
) -> (kube::api::DynamicObject, String) {
    for _ in 0..300 {
        for (i, name) in names.iter().enumerate() {
            if let Ok(Some(o)) = api.get_opt(name).await
                && o.data["status"]["initialization"]["provisioned"] == true
            {
                return (o, names[1 - i].to_string());
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    panic!(
        "neither of {names:?} was provisioned; see {}",
        world.plane.dir().display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_host_process_provisions_a_proxmox_and_a_redfish_machine_side_by_side() {
    let world = World::start_with(pve_sim::Config::fast(), false).await;
    world.plane.start_ipam().await.expect("IPAM provider");
    let (_rt, redfish) = crate::support::load("redfish", Limits::default()).await;
    let crds = hyperplug_kinds::crds::crds_yaml(redfish.info()).expect("Redfish CRDs");
    world
        .plane
        .install_crds_yaml(&crds)
        .await
        .expect("install Redfish CRDs");
    let bmc = Bmc::start("metal", 1).await;
    let uuid = bmc.systems[0].uuid.clone();

    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    let proxmox = std::fs::read_to_string(format!("{fixtures}/cluster-and-machine.yaml")).unwrap();
    world.apply_owned_by_machine(&proxmox, "m-0").await;
    let metal = std::fs::read_to_string(format!("{fixtures}/redfish-cluster-and-machine.yaml"))
        .unwrap()
        .replace("BMC_URL", &bmc.url);
    world.apply_owned_by_machine(&metal, "rm-0").await;
    // A second machine for the same single host: it must wait, not share it.
    let (_, second) = metal.split_once("name: rm-0-bootstrap").unwrap();
    let second = format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: rm-0-bootstrap{second}")
        .replace("rm-0", "rm-1");
    world.apply_owned_by_machine(&second, "rm-1").await;

    let blob_port = kube_world::free_port().expect("port");
    let _host = Host(start_host(&world, blob_port));
    let provisioned =
        |o: &kube::api::DynamicObject| o.data["status"]["initialization"]["provisioned"] == true;
    let pms = world
        .api("infrastructure.cluster.x-k8s.io/v1alpha1", "ProxmoxMachine")
        .await;
    let rms = world
        .api("infrastructure.cluster.x-k8s.io/v1alpha1", "RedfishMachine")
        .await;
    let pm = world
        .wait_for(&pms, "m-0", "provisioned", provisioned)
        .await;
    let (rm, other) = first_provisioned(&world, &rms, ["rm-0", "rm-1"]).await;

    let pm_id = pm.data["spec"]["providerID"].as_str().unwrap_or_default();
    assert!(pm_id.starts_with("proxmox://"), "{pm_id}");
    assert_eq!(rm.data["spec"]["providerID"], format!("redfish://{uuid}"));
    assert_eq!(rm.data["status"]["details"]["host"], "metal-0");
    assert_eq!(bmc.power(&uuid).await, "On");
    let cd = bmc.cd(&uuid).await;
    assert_eq!(cd["Inserted"], true);
    assert_eq!(
        cd["ImageName"], "cidata.iso",
        "the BMC downloaded the ISO: {cd}"
    );
    // The media URL is a secret: not in the object, not in the host's log.
    let image = cd["Image"].as_str().unwrap().to_string();
    assert!(!serde_json::to_string(&rm.data).unwrap().contains(&image));
    let log = std::fs::read_to_string(world.plane.dir().join("hyperplug.log")).unwrap();
    assert!(
        log.contains("starting controller"),
        "the host's log is there: {log}"
    );
    assert!(!log.contains(&image), "the media URL is never logged");
    assert!(!log.contains("bmc-test-password"));
    // The other machine waits for a free host.
    let waiting = world
        .wait_for(&rms, &other, "waiting for a host", |o| {
            o.data["status"]["phase"] == "WaitingForHost"
        })
        .await;
    assert!(!provisioned(&waiting));

    // The claim is a Lease held by the provisioned RedfishMachine.
    let leases: Api<Lease> = Api::namespaced(world.plane.client(), &world.ns);
    let claims = leases
        .list(&ListParams::default().labels("hyperplug.dev/claim-plugin=redfish"))
        .await
        .unwrap();
    assert_eq!(claims.items.len(), 1, "one claim");
    assert_eq!(
        claims.items[0].spec.as_ref().unwrap().holder_identity,
        rm.uid()
    );

    // Deleting it powers the host off, ejects, releases the claim; the waiting machine
    // then gets the host.
    let first = rm.name_any();
    rms.delete(&first, &DeleteParams::default()).await.unwrap();
    world.wait_gone(&rms, &first).await;
    let next = world
        .wait_for(&rms, &other, "provisioned", provisioned)
        .await;
    assert_eq!(next.data["spec"]["providerID"], format!("redfish://{uuid}"));
    assert_eq!(bmc.power(&uuid).await, "On");
    rms.delete(&other, &DeleteParams::default()).await.unwrap();
    world.wait_gone(&rms, &other).await;
    assert_eq!(bmc.power(&uuid).await, "Off");
    assert_eq!(bmc.cd(&uuid).await["Inserted"], false);
    let claims = leases
        .list(&ListParams::default().labels("hyperplug.dev/claim-plugin=redfish"))
        .await
        .unwrap();
    assert!(claims.items.is_empty(), "the host is released");
    // The Proxmox machine is untouched by all this.
    let pm = pms.get("m-0").await.unwrap();
    assert!(provisioned(&pm));
}
