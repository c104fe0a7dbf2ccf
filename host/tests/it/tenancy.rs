//! A tenant on a shared Proxmox cluster reaches only what its own machines made (issue
//! 40's attacks, each tried against the real API server and pve-sim, the manager
//! granting no adoption): a spec naming a VM the manager has no record of adopts
//! nothing, whatever ownership id the object carries; a clone's source must be a clean
//! template; a spec cannot plant the provider's marker; and no refusal tells the tenant
//! a fact of a VM that is not its own. Each case shows that nothing outside the tenant
//! changed: no PVE request to the foreign VM, no clone, its config as it was.
use std::collections::BTreeMap;

use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use pve_sim::VmSeed;
use serde_json::json;

use crate::support::controllers::{machine, machine_with, proxmox_cluster};
use crate::support::world::{World, condition};

const V1ALPHA1: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
const OWNERSHIP: &str = "infrastructure.hyperplug.dev/ownership-id";
/// Another team's VM, made by hand: running, with its own name and SMBIOS UUID.
const FOREIGN: u32 = 151;
const FOREIGN_NAME: &str = "payroll-db";
const FOREIGN_UUID: &str = "0b7e2f1c-4d3a-4c5b-9e8f-1a2b3c4d5e6f";
/// A template someone made from a machine's VM: it still carries that machine's marker.
const MARKED_TEMPLATE: u32 = 9100;

fn seed(vmid: u32, running: bool, config: &[(&str, &str)]) -> VmSeed {
    let config: BTreeMap<String, String> = config
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    VmSeed {
        vmid,
        node: "pve1".into(),
        config,
        running,
        pool: None,
    }
}

async fn shared_cluster() -> World {
    let mut sim = pve_sim::Config::fast();
    let uuid = format!("uuid={FOREIGN_UUID}");
    let disk = format!("local-lvm:vm-{FOREIGN}-disk-0,size=20G");
    sim.vms.push(seed(
        FOREIGN,
        true,
        &[
            ("name", FOREIGN_NAME),
            ("smbios1", &uuid),
            ("memory", "4096"),
            ("scsi0", &disk),
        ],
    ));
    sim.vms.push(seed(
        MARKED_TEMPLATE,
        false,
        &[
            ("name", "golden-from-a-node"),
            ("template", "1"),
            ("description", "hyperplug.machine-uid=1f0c2d3e-aaaa-bbbb"),
            // `qm template` keeps a VM's tags: a machine's UID tag among them.
            ("tags", "hyperplug;hp-1f0c2d3e-aaaa-bbbb"),
        ],
    ));
    let world = World::start(sim).await;
    world
        .apply(&proxmox_cluster("demo", Some("{name: pve-credentials}")))
        .await;
    world
}

/// A small machine spec on pve1 with `extra` (a YAML flow map's entries: the template
/// and what else a case needs).
fn spec_with(extra: &str) -> String {
    format!(
        "{{sourceNode: pve1, numCores: 1, memoryMiB: 1024, network: {{default: {{bridge: vmbr0}}}}, {extra}}}"
    )
}

/// The spec fields naming the foreign VM as a machine another provider made would.
fn naming_the_foreign_vm() -> String {
    spec_with(&format!(
        "templateID: 9000, providerID: \"proxmox://{FOREIGN_UUID}\", virtualMachineID: {FOREIGN}"
    ))
}

/// Nothing in `text` is a fact of the foreign VM or the marked template.
fn tells_nothing(text: &str) {
    for fact in [FOREIGN_NAME, FOREIGN_UUID, "golden-from-a-node", "1f0c2d3e"] {
        assert!(!text.contains(fact), "`{fact}` told: {text}");
    }
}

/// No request reached the foreign VM, and it is as it was.
fn untouched(world: &World, digest: &serde_json::Value) {
    let to_it = format!("/qemu/{FOREIGN}");
    let requests = world.sim.state().requests();
    let reached: Vec<_> = requests
        .iter()
        .filter(|r| r["path"].as_str().is_some_and(|p| p.contains(&to_it)))
        .collect();
    assert!(
        reached.is_empty(),
        "requests to the foreign VM: {reached:?}"
    );
    let vm = world
        .sim
        .state()
        .vm(FOREIGN)
        .expect("the foreign VM is there");
    assert_eq!(&vm["config"]["digest"], digest, "its config is unchanged");
    assert_eq!(vm["status"], "running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_reaches_no_vm_its_machines_did_not_make() {
    let world = shared_cluster().await;
    let digest = world.sim.state().vm(FOREIGN).unwrap()["config"]["digest"].clone();
    let pms = world.api(V1ALPHA1, "ProxmoxMachine").await;

    // 1. A machine whose first call failed carries an ownership id the manager signed;
    // its spec then names the foreign VM. 2. The same, the id copied onto a machine
    // made again under the same name (its id is then not its own UID, as after a move).
    // Both carry another provider's finalizer, so the finalizer webhook leaves them to
    // the reconciler, which signs their id before the first call (as it does whenever
    // the webhook is down) and drops that finalizer.
    let missing_template = spec_with("templateID: 424242");
    for name in ["signed", "recreated"] {
        let metadata = "finalizers: [proxmoxmachine.infrastructure.cluster.x-k8s.io]";
        machine_with(
            &world,
            "demo",
            "ProxmoxMachine",
            name,
            metadata,
            &missing_template,
        )
        .await;
    }
    // 3. The foreign VM, and a template made from a machine's VM, as clone sources.
    let foreign_source = spec_with(&format!("templateID: {FOREIGN}"));
    machine(
        &world,
        "demo",
        "ProxmoxMachine",
        "cloner",
        "{}",
        &foreign_source,
    )
    .await;
    let marked_source = spec_with(&format!("templateID: {MARKED_TEMPLATE}"));
    machine(
        &world,
        "demo",
        "ProxmoxMachine",
        "marked",
        "{}",
        &marked_source,
    )
    .await;
    // 4. The provider's marker forms in a spec's description and tags.
    let planted =
        spec_with("templateID: 9000, description: \"notes\\nhyperplug.machine-uid=1f0c2d3e\"");
    machine(&world, "demo", "ProxmoxMachine", "planter", "{}", &planted).await;
    let tagged = spec_with("templateID: 9000, tags: [prod, hp-1f0c2d3e]");
    machine(&world, "demo", "ProxmoxMachine", "tagger", "{}", &tagged).await;

    let mut missing = String::new();
    for name in ["signed", "recreated"] {
        missing = world.wait_reason(&pms, name, "TemplateNotFound").await;
    }
    let signed = pms.get("signed").await.unwrap();
    let id = signed.annotations()[OWNERSHIP].clone();
    assert!(
        id.starts_with(&signed.uid().unwrap()),
        "an id the manager signed for it: {id}"
    );
    let naming = serde_yaml::from_str::<serde_json::Value>(&naming_the_foreign_vm()).unwrap();
    let patch = Patch::Merge(json!({"spec": naming}));
    pms.patch("signed", &PatchParams::default(), &patch)
        .await
        .unwrap();
    let message = world
        .wait_reason(&pms, "signed", "AdoptionNotGranted")
        .await;
    assert!(
        message.contains("--adopt-namespace"),
        "says what to do: {message}"
    );
    tells_nothing(&message);

    let copied = pms.get("recreated").await.unwrap().annotations()[OWNERSHIP].clone();
    pms.delete("recreated", &DeleteParams::default())
        .await
        .unwrap();
    world.wait_gone(&pms, "recreated").await;
    let annotations = format!("{{{OWNERSHIP}: \"{copied}\"}}");
    let spec = naming_the_foreign_vm();
    machine(
        &world,
        "demo",
        "ProxmoxMachine",
        "recreated",
        &annotations,
        &spec,
    )
    .await;
    // Its id verifies and is not its UID: the plugin is called, told nothing is granted,
    // and refuses without reading the VM.
    let message = world
        .wait_reason(&pms, "recreated", "AdoptionNotGranted")
        .await;
    tells_nothing(&message);

    // Refused in the words a missing template gets: no oracle of what the VMID holds.
    for (name, vmid) in [("cloner", FOREIGN), ("marked", MARKED_TEMPLATE)] {
        let message = world.wait_reason(&pms, name, "TemplateNotFound").await;
        assert!(message.contains("spec.templateID"), "{message}");
        assert_eq!(message, missing.replace("424242", &vmid.to_string()));
        tells_nothing(&message);
    }
    for (name, field) in [("planter", "spec.description"), ("tagger", "spec.tags[1]")] {
        let o = world
            .wait_for(&pms, name, "invalid", |o| {
                condition(o, "Ready")
                    .is_some_and(|c| c["message"].as_str().is_some_and(|m| m.contains(field)))
            })
            .await;
        assert_eq!(condition(&o, "Ready").unwrap()["status"], "False", "{name}");
    }
    let clones = world.requests("POST /nodes/{node}/qemu/{vmid}/clone");
    assert_eq!(clones, 0, "nothing cloned");
    untouched(&world, &digest);

    // Deleting them all destroys nothing.
    let vms = world.sim.state().vms().len();
    for name in [
        "signed",
        "recreated",
        "cloner",
        "marked",
        "planter",
        "tagger",
    ] {
        pms.delete(name, &DeleteParams::default()).await.unwrap();
        world.wait_gone(&pms, name).await;
    }
    assert_eq!(world.sim.state().vms().len(), vms, "no VM destroyed");
    assert!(world.sim.state().destroyed().is_empty());
    untouched(&world, &digest);
}

/// One tenant's endpoint that answers nothing holds at most three quarters of the
/// plugin slots, however many of its calls wait: another tenant's call runs at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_whose_endpoint_hangs_does_not_hold_every_plugin_slot() {
    use crate::support::{self, machine_request};
    use hyperplug_runtime::Limits;

    // Accepts connections and never answers: each call to it waits for its first byte.
    let hanging = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", hanging.local_addr().unwrap());
    let (accepted_tx, mut accepted) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = hanging.accept().await {
            open.push(socket);
            let _ = accepted_tx.send(open.len());
        }
    });
    let limits = Limits {
        concurrency: 4,
        ..Limits::default()
    };
    let (_runtime, plugin) = support::load("proxmox", limits).await;
    let spec = json!({"sourceNode": "pve1", "templateID": 9000});
    let in_namespace = |ns: &str, i: usize, credentials| {
        let mut req = machine_request(spec.clone(), credentials);
        req.machine.namespace = ns.into();
        req.machine.name = format!("m{i}");
        req.machine.uid = format!("uid-{ns}-{i}");
        req
    };
    let slow: Vec<_> = (0..8)
        .map(|i| {
            let (plugin, req) = (
                plugin.clone(),
                in_namespace("slow", i, support::credentials(&endpoint)),
            );
            tokio::spawn(async move { plugin.describe_machine(&req).await })
        })
        .collect();
    // Three of the four slots are the slow tenant's: its calls reach the endpoint.
    while accepted.recv().await.is_some_and(|n| n < 3) {}

    let sim = support::sim_with(pve_sim::Config::fast()).await;
    let fast = in_namespace("fast", 0, support::pinned(&sim));
    // Which comes first, no clock: the other tenant's answer, or a fourth slow call
    // reaching the endpoint (a slot it took). A slow call ends only at its first-byte
    // timeout, so with plain first-come slots the answer would come after one of them.
    let answered = tokio::select! {
        biased;
        answered = plugin.describe_machine(&fast) => answered,
        n = accepted.recv() => panic!("a slow call took the slot first ({n:?} reached the endpoint)"),
    };
    assert!(answered.is_ok(), "{answered:?}");
    assert!(slow.iter().all(|call| !call.is_finished()));
    assert!(accepted.try_recv().is_err(), "no fourth slow call ran");
    for call in slow {
        call.abort();
    }
}
