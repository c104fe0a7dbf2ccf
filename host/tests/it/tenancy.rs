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
/// plugin slots, however many of its calls come: those past its share are refused at once
/// (`TenantAtShare`, so their callers wait for nothing) and another tenant's call runs.
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
    let mut slow = tokio::task::JoinSet::new();
    for i in 0..8 {
        let (plugin, req) = (
            plugin.clone(),
            in_namespace("slow", i, support::credentials(&endpoint)),
        );
        slow.spawn(async move { plugin.describe_machine(&req).await });
    }
    // Three of the four slots are the slow tenant's: its calls reach the endpoint.
    while accepted.recv().await.is_some_and(|n| n < 3) {}
    // The other five are refused without waiting: the three that hold slots end only
    // at their first-byte timeout, so these are the first five to end.
    for _ in 0..5 {
        let refused = slow.join_next().await.unwrap().unwrap();
        assert!(
            matches!(
                refused,
                Err(hyperplug_runtime::CallError::TenantAtShare {
                    held: 3,
                    share: 3,
                    ..
                })
            ),
            "{refused:?}"
        );
    }

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
    assert_eq!(slow.len(), 3);
    assert!(slow.try_join_next().is_none(), "the three hang");
    assert!(accepted.try_recv().is_err(), "no fourth slow call ran");
    slow.abort_all();
}

/// More of one tenant's machines against an endpoint that hangs than there are
/// reconcile workers: the tenant's calls hold its share of the plugin slots (3 of 4),
/// and its other reconciles give their workers back at once rather than wait for a slot
/// holding them, so another tenant's machine still gets a worker and its plugin call.
/// Shown by the order of events, no clock: the other tenant's clone reaches its PVE
/// before any of the hanging calls ends (each ends only at the plugin's first-byte
/// timeout, after which a next slow call would reach the hanging endpoint). With workers
/// held while waiting for a slot, every worker is the slow tenant's until then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_whose_endpoint_hangs_does_not_hold_every_reconcile_worker() {
    use std::sync::Arc;

    use crate::support::controllers::{self, PROXMOX_SPEC, machine};
    use crate::support::world::{TOKEN_ID, TOKEN_SECRET};
    use hyperplug::controller::ManagerOptions;
    use hyperplug::lease_claims::LeaseClaims;
    use hyperplug_runtime::{Limits, Runtime};

    const WORKERS: u16 = 4;
    const SLOW_MACHINES: usize = 8;
    let world = World::start_with(pve_sim::Config::fast(), false).await;
    let mut slow_config = pve_sim::Config::fast();
    slow_config.tokens = vec![format!("{TOKEN_ID}={TOKEN_SECRET}")];
    let slow_sim = crate::support::sim_with(slow_config).await;
    let fast_ns = world.plane.namespace("fast").await.unwrap();
    let credentials = |name: &str, sim: &pve_sim::RunningSim| {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\nstringData:\n  url: {}\n  token: \"{TOKEN_ID}\"\n  secret: {TOKEN_SECRET}\n  fingerprint: \"{}\"\n",
            sim.base_url(),
            sim.fingerprint()
        )
    };
    // The slow tenant in the world's namespace with a PVE of its own; the fast tenant in
    // another namespace with the world's PVE.
    world
        .apply(&credentials("slow-credentials", &slow_sim))
        .await;
    world
        .apply(&proxmox_cluster("slow", Some("{name: slow-credentials}")))
        .await;
    let in_fast = |yaml: String| {
        let (plane, ns) = (&world.plane, fast_ns.clone());
        async move { plane.apply_yaml_in(&ns, &yaml).await.unwrap() }
    };
    in_fast(credentials("pve-credentials", &world.sim)).await;
    in_fast(proxmox_cluster("fast", Some("{name: pve-credentials}"))).await;

    // 4 plugin slots (one tenant holds at most 3) and 4 reconcile workers per kind.
    let limits = Limits {
        concurrency: u32::from(WORKERS),
        ..Limits::default()
    };
    let runtime = Runtime::builder(limits)
        .claims(Arc::new(LeaseClaims::new(world.plane.client(), &world.ns)));
    let (_runtime, plugin) = crate::support::load_with("proxmox", runtime).await;
    let options = ManagerOptions {
        concurrency: WORKERS,
        ..controllers::options()
    };
    let _controllers = controllers::start(&world, plugin, options);
    let ready = |o: &kube::api::DynamicObject| o.data["status"]["ready"] == true;
    let slow_clusters = world.api(V1ALPHA1, "ProxmoxCluster").await;
    world.wait_for(&slow_clusters, "slow", "ready", ready).await;
    let fast_clusters = world
        .plane
        .dynamic_api(V1ALPHA1, "ProxmoxCluster", Some(&fast_ns))
        .await
        .unwrap();
    world.wait_for(&fast_clusters, "fast", "ready", ready).await;

    // The slow tenant's endpoint now answers nothing within the plugin's timeouts (each
    // request is counted as it arrives); twice as many of its machines as workers.
    let slow = slow_sim.state();
    slow.set_faults(pve_sim::Faults {
        latency_ms: 600_000,
        ..pve_sim::Faults::default()
    });
    slow.reset_counters();
    let slow_requests = || slow.counters().values().sum::<u64>();
    for i in 0..SLOW_MACHINES {
        machine(
            &world,
            "slow",
            "ProxmoxMachine",
            &format!("slow-{i}"),
            "{}",
            PROXMOX_SPEC,
        )
        .await;
    }
    // Its calls hold its share: three requests in, each a call holding a slot.
    crate::support::until("the slow tenant's calls hold its share", || {
        slow_requests() >= 3
    })
    .await;
    let held = slow_requests();
    assert_eq!(held, 3, "one tenant's calls hold at most 3 of the 4 slots");

    // The other tenant's machine.
    let machine_yaml = |name: &str, owner_uid: Option<&str>| match owner_uid {
        None => format!(
            "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Machine\nmetadata:\n  name: {name}\n  labels:\n    cluster.x-k8s.io/cluster-name: fast\nspec:\n  clusterName: fast\n  bootstrap:\n    dataSecretName: {name}-bootstrap\n  infrastructureRef:\n    apiGroup: infrastructure.cluster.x-k8s.io\n    kind: ProxmoxMachine\n    name: {name}\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}-bootstrap\n  labels:\n    cluster.x-k8s.io/cluster-name: fast\ntype: cluster.x-k8s.io/secret\nstringData:\n  value: \"#cloud-config\\n\"\n  format: cloud-config\n"
        ),
        Some(uid) => format!(
            "apiVersion: {V1ALPHA1}\nkind: ProxmoxMachine\nmetadata:\n  name: {name}\n  labels:\n    cluster.x-k8s.io/cluster-name: fast\n  ownerReferences:\n  - apiVersion: cluster.x-k8s.io/v1beta2\n    kind: Machine\n    name: {name}\n    uid: {uid}\nspec: {PROXMOX_SPEC}\n"
        ),
    };
    let clones = || world.requests("POST /nodes/{node}/qemu/{vmid}/clone");
    let before = clones();
    in_fast(machine_yaml("fast-0", None)).await;
    let machines = world
        .plane
        .dynamic_api("cluster.x-k8s.io/v1beta2", "Machine", Some(&fast_ns))
        .await
        .unwrap();
    let uid = machines.get("fast-0").await.unwrap().uid().unwrap();
    in_fast(machine_yaml("fast-0", Some(&uid))).await;

    // Which comes first: the fast tenant's clone, or a fourth request at the hanging
    // endpoint (a slow call ended and another took its slot).
    loop {
        if clones() > before {
            break;
        }
        let now = slow_requests();
        assert_eq!(
            now, held,
            "a slow call ended before the other tenant's machine got its plugin call"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(slow_requests(), held);
    // The slow tenant's machines that found no room show nothing of it: it is no failure.
    let pms = world.api(V1ALPHA1, "ProxmoxMachine").await;
    for i in 0..SLOW_MACHINES {
        let m = pms.get(&format!("slow-{i}")).await.unwrap();
        let message = condition(&m, "Ready")
            .and_then(|c| c["message"].as_str().map(str::to_string))
            .unwrap_or_default();
        assert!(!message.contains("plugin slots"), "slow-{i}: {message}");
    }
}
