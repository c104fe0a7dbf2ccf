//! Where a VM lands: the scheduler's memory and CPU checks, the failure domain as the
//! node, templates by selector and their capacity, and what local storage allows.
use std::collections::BTreeMap;

use hyperplug_runtime::{Limits, PluginError};
use pve_sim::Config;
use serde_json::{Value, json};

use super::{
    bootstrap, cfg, create_until_cloning, dhcp_cluster, drive_create, drive_delete, iso_volumes,
    non_templates, request, vmid_of,
};
use crate::support::{load, object, pinned, sim_with};

#[tokio::test]
async fn scheduling_checks_memory_with_the_adjustment_and_cpus() {
    let sim = sim_with(Config::fast()).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let cluster = |adjustment: u64| {
        json!({"allowedNodes": ["pve1"], "controlPlaneEndpoint": {"host": "10.0.0.1", "port": 6443},
               "schedulerHints": {"memoryAdjustment": adjustment}})
    };
    // 70000 MiB does not fit in pve1's 64 GiB at 100 %.
    let big = json!({"sourceNode": "pve1", "templateID": 9000, "memoryMiB": 70000});
    let req = request(&sim, "m1", "c1", big.clone(), cluster(100));
    match plugin.create_machine(&req).await.unwrap() {
        Err(PluginError::Transient(e)) => {
            assert!(
                e.message.contains("no node can take the VM"),
                "{}",
                e.message
            );
            assert!(e.message.contains("pve1"), "{}", e.message);
        }
        other => panic!("expected a transient scheduling error, got {other:?}"),
    }
    // ... fits at 200 % (overcommit).
    let mut req = request(&sim, "m2", "c1", big.clone(), cluster(200));
    let s = create_until_cloning(&plugin, &mut req).await;
    assert!(vmid_of(&s) >= 100);
    // ... and 0 disables the memory check.
    let mut req = request(&sim, "m3", "c1", big, cluster(0));
    create_until_cloning(&plugin, &mut req).await;
    // More vCPUs than the node has.
    let wide = json!({"sourceNode": "pve1", "templateID": 9000, "numSockets": 2, "numCores": 16});
    let req = request(&sim, "m4", "c1", wide, cluster(0));
    match plugin.create_machine(&req).await.unwrap() {
        Err(PluginError::Transient(e)) => assert!(e.message.contains("CPUs"), "{}", e.message),
        other => panic!("expected a transient scheduling error, got {other:?}"),
    }
    assert_eq!(non_templates(&sim).len(), 2);
}

#[tokio::test]
async fn template_selector_failure_domain_and_templates() {
    let sim = sim_with(Config::fast()).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let spec = json!({
        "templateSelector": {"matchTags": ["ubuntu", "cloudinit"]},
        "full": false,
        "numCores": 2,
        "memoryMiB": 4096,
        "network": {"default": {"bridge": "vmbr0", "dhcp4": true}},
        "checks": {"skipQemuGuestAgent": true},
    });
    let mut req = request(&sim, "m1", "c1", spec.clone(), dhcp_cluster());
    req.bootstrap = Some(bootstrap());
    req.failure_domain = Some("pve1".into());
    let (status, _) = drive_create(&plugin, &mut req).await.unwrap();
    let vmid = vmid_of(&status);
    let vm = sim.state().vm(vmid).unwrap();
    assert_eq!(vm["node"], "pve1");
    assert!(
        cfg(&vm, "scsi0").starts_with(&format!("local-lvm:base-9000-disk-0/vm-{vmid}-disk-")),
        "linked clone: {}",
        cfg(&vm, "scsi0")
    );
    // Without the guest agent, the ISO stays attached, describe included; delete
    // removes it.
    assert_eq!(iso_volumes(&sim).len(), 1);
    let d = plugin.describe_machine(&req).await.unwrap().unwrap();
    assert!(d.ready && d.drift.is_none(), "{}", d.progress.message);
    assert_eq!(iso_volumes(&sim).len(), 1, "describe left the attached ISO");
    drive_delete(&plugin, &mut req).await.unwrap();
    assert!(
        iso_volumes(&sim).is_empty(),
        "leftover ISO deleted with the machine"
    );

    // The template describes capacity for autoscaling from zero.
    let t = plugin
        .describe_template(&hyperplug_runtime::bindings::machine::TemplateRequest {
            template: object("tpl"),
            spec: spec.to_string(),
            credentials: None,
        })
        .await
        .unwrap()
        .unwrap();
    let cap: BTreeMap<_, _> = t.capacity.into_iter().collect();
    assert_eq!(cap.get("cpu").map(String::as_str), Some("2"));
    assert_eq!(cap.get("memory").map(String::as_str), Some("4096Mi"));
    // Unset values come from the template (9000: 2 cores, 2048 MiB) when it can be read.
    let t = plugin
        .describe_template(&hyperplug_runtime::bindings::machine::TemplateRequest {
            template: object("tpl"),
            spec: json!({"sourceNode": "pve1", "templateID": 9000, "numSockets": 2}).to_string(),
            credentials: Some(pinned(&sim)),
        })
        .await
        .unwrap()
        .unwrap();
    let cap: BTreeMap<_, _> = t.capacity.into_iter().collect();
    assert_eq!(cap.get("cpu").map(String::as_str), Some("4"));
    assert_eq!(cap.get("memory").map(String::as_str), Some("2048Mi"));
}

/// CAPI's failure domain is the node: a template on shared storage is cloned there, and
/// the seed goes to that node's ISO storage.
#[tokio::test]
async fn the_failure_domain_is_the_node_the_vm_lands_on() {
    let mut config = Config::fast();
    config.storages.push(pve_sim::StorageConfig {
        id: "shared".into(),
        kind: pve_sim::StorageType::Dir,
        content: vec!["images".into()],
        shared: true,
        ..pve_sim::StorageConfig::default()
    });
    config.vms.push(pve_sim::VmSeed {
        vmid: 9100,
        node: "pve1".into(),
        config: [
            ("name", "shared-template"),
            ("template", "1"),
            ("scsi0", "shared:9100/base-9100-disk-0.raw,size=10G"),
            ("net0", "virtio,bridge=vmbr0"),
            ("agent", "1"),
            ("cores", "2"),
            ("memory", "2048"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        ..pve_sim::VmSeed::default()
    });
    let sim = sim_with(config).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let cluster = json!({"allowedNodes": ["pve1", "pve2", "pve3"],
                         "controlPlaneEndpoint": {"host": "10.10.0.5", "port": 6443}});
    let spec = json!({"sourceNode": "pve1", "templateID": 9100,
                      "checks": {"skipCloudInitStatus": true}});
    let mut req = request(&sim, "m1", "c1", spec, cluster);
    req.bootstrap = Some(bootstrap());
    req.failure_domain = Some("pve2".into());
    let (status, _) = drive_create(&plugin, &mut req).await.unwrap();
    assert_eq!(status.failure_domain.as_deref(), Some("pve2"));
    let vm = sim.state().vm(vmid_of(&status)).unwrap();
    assert_eq!(vm["node"], "pve2");
    assert_eq!(vm["status"], "running");
    assert!(
        cfg(&vm, "scsi0").starts_with("shared:"),
        "{}",
        cfg(&vm, "scsi0")
    );
    let details: BTreeMap<_, _> = status.details.iter().cloned().collect();
    assert_eq!(details.get("node").map(String::as_str), Some("pve2"));
    drive_delete(&plugin, &mut req).await.unwrap();
    assert!(non_templates(&sim).is_empty());
}

/// Three nodes where pve1, the template's node, has the least free memory.
fn pve1_smallest() -> Config {
    let mut config = Config::fast();
    config.nodes[0].memory = 16 << 30;
    config
}

fn cluster_without_allowed_nodes() -> Value {
    json!({"controlPlaneEndpoint": {"host": "10.10.0.5", "port": 6443}})
}

/// PVE clones a template on local storage only on its own node ("can't clone VM to node
/// 'pve2' (VM uses local storage)"): without `allowedNodes`, the scheduler picks among
/// the nodes the template reaches, and a failure domain it cannot reach (CAPI spreads
/// machines over every node the cluster reports) gives way.
#[tokio::test]
async fn without_allowed_nodes_a_local_template_is_cloned_on_its_own_node() {
    let sim = sim_with(pve1_smallest()).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let spec =
        json!({"sourceNode": "pve1", "templateID": 9000, "checks": {"skipCloudInitStatus": true}});
    let mut a = request(
        &sim,
        "a",
        "c1",
        spec.clone(),
        cluster_without_allowed_nodes(),
    );
    a.bootstrap = Some(bootstrap());
    let (status, _) = drive_create(&plugin, &mut a).await.unwrap();
    let vm = sim.state().vm(vmid_of(&status)).unwrap();
    assert_eq!(vm["node"], "pve1", "pve2 and pve3 have more free memory");
    assert_eq!(vm["status"], "running");

    let mut b = request(
        &sim,
        "b",
        "c1",
        spec.clone(),
        cluster_without_allowed_nodes(),
    );
    b.bootstrap = Some(bootstrap());
    b.failure_domain = Some("pve3".into());
    let (status, _) = drive_create(&plugin, &mut b).await.unwrap();
    assert_eq!(status.failure_domain.as_deref(), Some("pve1"));
    assert_eq!(sim.state().vm(vmid_of(&status)).unwrap()["node"], "pve1");
    assert_eq!(
        sim.state().counters()["POST /nodes/{node}/qemu/{vmid}/clone"],
        2,
        "no clone was refused"
    );

    // Allowed nodes that leave the template's node out cannot work: say why, once.
    let mut spec_c = spec.clone();
    spec_c["allowedNodes"] = json!(["pve2", "pve3"]);
    let mut c = request(&sim, "c", "c1", spec_c, cluster_without_allowed_nodes());
    match plugin.create_machine(&c).await.unwrap() {
        Err(PluginError::Terminal(e)) => {
            assert_eq!(e.reason, "TemplateOnLocalStorage");
            for part in [
                "template 9000 on pve1",
                "local-lvm",
                "allowedNodes",
                "shared storage",
            ] {
                assert!(e.message.contains(part), "{part}: {}", e.message);
            }
        }
        other => panic!("expected TemplateOnLocalStorage, got {other:?}"),
    }
    c.state = None;
    assert_eq!(non_templates(&sim).len(), 2);
}

/// A template on shared storage reaches every node, but a full clone to a `storage` that
/// is not shared does not ("can't clone to non-shared storage 'local-lvm'"): such clones
/// stay on the template's node, whatever the failure domain.
#[tokio::test]
async fn a_full_clone_to_node_local_storage_stays_on_the_templates_node() {
    let mut config = pve1_smallest();
    config.storages.push(pve_sim::StorageConfig {
        id: "shared".into(),
        kind: pve_sim::StorageType::Dir,
        content: vec!["images".into()],
        shared: true,
        ..pve_sim::StorageConfig::default()
    });
    if let Some(t) = config.vms.iter_mut().find(|v| v.vmid == 9000) {
        t.config.insert(
            "scsi0".into(),
            "shared:9000/base-9000-disk-0.raw,size=10G".into(),
        );
        t.config.insert(
            "ide2".into(),
            "shared:9000/vm-9000-cloudinit.qcow2,media=cdrom".into(),
        );
    }
    let sim = sim_with(config).await;
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let cluster = json!({"allowedNodes": ["pve1", "pve2"],
                         "controlPlaneEndpoint": {"host": "10.10.0.5", "port": 6443}});
    let spec = json!({"sourceNode": "pve1", "templateID": 9000, "full": true, "storage": "local-lvm",
                      "checks": {"skipCloudInitStatus": true}});
    let mut req = request(&sim, "w", "c1", spec.clone(), cluster.clone());
    req.bootstrap = Some(bootstrap());
    req.failure_domain = Some("pve2".into());
    let (status, _) = drive_create(&plugin, &mut req).await.unwrap();
    let vm = sim.state().vm(vmid_of(&status)).unwrap();
    assert_eq!(vm["node"], "pve1");
    assert!(
        cfg(&vm, "scsi0").starts_with("local-lvm:"),
        "{}",
        cfg(&vm, "scsi0")
    );
    // on shared storage, the failure domain is honoured
    let mut shared = spec;
    shared["storage"] = json!("shared");
    let mut req = request(&sim, "v", "c1", shared, cluster);
    req.bootstrap = Some(bootstrap());
    req.failure_domain = Some("pve2".into());
    let (status, _) = drive_create(&plugin, &mut req).await.unwrap();
    assert_eq!(sim.state().vm(vmid_of(&status)).unwrap()["node"], "pve2");
}
