use serde_json::{Value, json};

use super::*;
use crate::machine::nics::plan_nics;
use crate::spec::{cluster_spec, machine_spec};

/// The field of the invalid-spec error a `v1alpha1` spec (`extra` merged into the
/// smallest valid spec) and `cluster` give, or `None` when they pass.
fn refused(extra: Value, cluster: Value) -> Option<String> {
    let mut spec = json!({"templateID": 9000, "sourceNode": "pve1"});
    for (k, v) in extra.as_object().unwrap() {
        if v.is_null() {
            spec.as_object_mut().unwrap().remove(k);
        } else {
            spec[k] = v.clone();
        }
    }
    let checked = machine_spec(&spec.to_string(), "spec").and_then(|spec| {
        let cluster = cluster_spec(&cluster.to_string(), "cluster.spec")?;
        let nics = plan_nics(&spec, &cluster)?;
        validate(&spec, &cluster, &nics)
    });
    field_of(checked)
}

/// The same for a `v1alpha2` spec's network.
fn refused2(network: Value, cluster: Value) -> Option<String> {
    let spec: MachineSpec = serde_json::from_value(
        json!({"templateID": 9000, "sourceNode": "pve1", "network": network}),
    )
    .unwrap();
    let cluster: ClusterSpec = serde_json::from_value(cluster).unwrap();
    field_of(plan_nics(&spec, &cluster).and_then(|nics| validate(&spec, &cluster, &nics)))
}

fn field_of(r: Result<(), PluginError>) -> Option<String> {
    match r {
        Ok(()) => None,
        Err(PluginError::InvalidSpec(i)) => Some(i.field),
        Err(other) => panic!("expected an invalid spec, got {other:?}"),
    }
}

fn field(name: &str) -> Option<String> {
    Some(name.to_string())
}

#[test]
fn a_template_id_with_its_node_is_valid() {
    assert_eq!(refused(json!({}), json!({})), None);
}

#[test]
fn a_template_is_required_once_and_a_template_id_needs_its_node() {
    let neither = json!({"templateID": null, "sourceNode": null});
    assert_eq!(refused(neither, json!({})), field("spec.templateID"));
    let both = json!({"templateSelector": {"matchTags": ["k8s"]}});
    assert_eq!(refused(both, json!({})), field("spec.templateSelector"));
    let no_node = json!({"sourceNode": null});
    assert_eq!(refused(no_node, json!({})), field("spec.sourceNode"));
    let no_tags =
        json!({"templateID": null, "sourceNode": null, "templateSelector": {"matchTags": []}});
    assert_eq!(
        refused(no_tags, json!({})),
        field("spec.templateSelector.matchTags")
    );
    let bad_tag = json!({"templateID": null, "sourceNode": null, "templateSelector": {"matchTags": ["ok", "-no"]}});
    assert_eq!(
        refused(bad_tag, json!({})),
        field("spec.templateSelector.matchTags[1]")
    );
}

#[test]
fn a_vmid_range_must_run_upwards_from_100() {
    assert_eq!(
        refused(json!({"vmIDRange": {"start": 50, "end": 60}}), json!({})),
        field("spec.vmIDRange.start")
    );
    assert_eq!(
        refused(json!({"vmIDRange": {"start": 500, "end": 400}}), json!({})),
        field("spec.vmIDRange.end")
    );
    assert_eq!(
        refused(json!({"vmIDRange": {"start": 500, "end": 500}}), json!({})),
        None
    );
}

#[test]
fn only_full_clones_take_a_storage_or_format() {
    assert_eq!(
        refused(json!({"full": false, "storage": "local"}), json!({})),
        field("spec.storage")
    );
    assert_eq!(
        refused(json!({"full": false, "format": "qcow2"}), json!({})),
        field("spec.format")
    );
}

#[test]
fn tags_must_be_proxmox_tags_in_any_case() {
    assert_eq!(
        refused(json!({"tags": ["ok", "not ok"]}), json!({})),
        field("spec.tags[1]")
    );
    assert_eq!(
        refused(json!({"tags": ["-x"]}), json!({})),
        field("spec.tags[0]")
    );
    assert_eq!(
        refused(json!({"tags": ["k8s_1.33+x", "Prod"]}), json!({})),
        None
    );
}

#[test]
fn disks_must_be_disk_devices_each_used_once() {
    let boot = json!({"disks": {"bootVolume": {"disk": "disk0", "sizeGb": 20}}});
    assert_eq!(
        refused(boot, json!({})),
        field("spec.disks.bootVolume.disk")
    );
    let twice = json!({"disks": {"additionalVolumes": [
        {"disk": "scsi1", "sizeGb": 5}, {"disk": "scsi1", "sizeGb": 5}
    ]}});
    assert_eq!(
        refused(twice, json!({})),
        field("spec.disks.additionalVolumes[1].disk")
    );
}

#[test]
fn nics_need_a_free_name_and_a_bridge() {
    let net0_again =
        json!({"network": {"additionalDevices": [{"name": "net0", "bridge": "vmbr0"}]}});
    assert_eq!(
        refused(net0_again, json!({})),
        field("spec.network.additionalDevices[0].name")
    );
    let no_bridge = json!({"network": {"default": {"bridge": ""}}});
    assert_eq!(
        refused(no_bridge, json!({})),
        field("spec.network.default.bridge")
    );
    let twice = json!({"networkDevices": [{"name": "net1"}, {"name": "net1"}]});
    assert_eq!(
        refused2(twice, json!({})),
        field("spec.network.additionalDevices[1].name")
    );
    let beyond = json!({"networkDevices": [{"name": "net32"}]});
    assert!(refused2(beyond, json!({})).is_some());
}

#[test]
fn a_static_address_needs_a_pool() {
    let static4 = json!({"network": {"default": {"bridge": "vmbr0", "dhcp4": false}}});
    assert_eq!(
        refused(static4.clone(), json!({})),
        field("spec.network.default.dhcp4")
    );
    let pool = json!({"ipv4Config": {"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24, "gateway": "10.0.0.1"}});
    assert_eq!(refused(static4, pool), None);
    let static6 = json!({"network": {"additionalDevices": [{"name": "net1", "bridge": "vmbr0", "dhcp6": false}]}});
    assert_eq!(
        refused(static6, json!({})),
        field("spec.network.additionalDevices[0].dhcp6")
    );
}

#[test]
fn the_cd_slot_must_be_a_cd_bus() {
    assert_eq!(
        refused(json!({"cloudInit": {"cdSlot": "virtio1"}}), json!({})),
        field("spec.cloudInit.cdSlot")
    );
    assert_eq!(
        refused(json!({"cloudInit": {"cdSlot": "sata3"}}), json!({})),
        None
    );
}

#[test]
fn mtus_are_1_or_big_enough_for_ipv6_and_link_mtus_big_enough() {
    let nic = |extra: Value| {
        let mut d = json!({"name": "net0", "bridge": "vmbr0"});
        for (k, v) in extra.as_object().unwrap() {
            d[k] = v.clone();
        }
        refused2(json!({"networkDevices": [d]}), json!({}))
    };
    assert_eq!(nic(json!({"mtu": 1})), None);
    assert_eq!(nic(json!({"mtu": 9000, "linkMtu": 9000})), None);
    assert_eq!(nic(json!({"mtu": 1000})), field("spec.network.default.mtu"));
    assert_eq!(
        nic(json!({"linkMtu": 1})),
        field("spec.network.default.linkMtu")
    );
    assert_eq!(
        nic(json!({"queues": 0})),
        field("spec.network.default.queues")
    );
}

#[test]
fn pools_must_be_ipam_pools() {
    let nic = |kind: &str, group: &str| {
        refused2(
            json!({"networkDevices": [{"name": "net0", "ipPoolRef": [
                {"apiGroup": group, "kind": kind, "name": "p"}
            ]}]}),
            json!({}),
        )
    };
    assert_eq!(nic("GlobalInClusterIPPool", "ipam.cluster.x-k8s.io"), None);
    assert_eq!(
        nic("Secret", "ipam.cluster.x-k8s.io"),
        field("spec.network.default.ipPoolRef[0]")
    );
    assert_eq!(
        nic("InClusterIPPool", "example.com"),
        field("spec.network.default.ipPoolRef[0]")
    );
}

#[test]
fn rules_need_a_table_on_a_nic_and_the_vrfs_own_on_a_vrf() {
    let on_nic =
        json!({"networkDevices": [{"name": "net0", "routingPolicy": [{"to": "10.0.0.0/8"}]}]});
    assert_eq!(
        refused2(on_nic, json!({})),
        field("spec.network.default.routingPolicy[0].table")
    );
    let kernel = json!({"networkDevices": [{"name": "net0", "routingPolicy": [
        {"to": "10.0.0.0/8", "table": 500, "priority": 32766}
    ]}]});
    assert_eq!(
        refused2(kernel, json!({})),
        field("spec.network.default.routingPolicy[0].priority")
    );
    let vrf = |table: u32| {
        json!({"networkDevices": [{"name": "net0"}], "vrfs": [
            {"name": "vrf-ext", "table": 500, "routingPolicy": [{"from": "10.0.0.0/8", "table": table}]}
        ]})
    };
    assert_eq!(refused2(vrf(500), json!({})), None);
    assert_eq!(
        refused2(vrf(501), json!({})),
        field("spec.network.vrfs[0].routingPolicy[0].table")
    );
    let main =
        json!({"networkDevices": [{"name": "net0"}], "vrfs": [{"name": "vrf-main", "table": 254}]});
    assert_eq!(
        refused2(main, json!({})),
        field("spec.network.vrfs[0].table")
    );
}

#[test]
fn a_description_or_tag_of_the_providers_marker_forms_is_refused() {
    let planted = json!({"description": "web\nhyperplug.machine-uid=0b7e2f1c-4d3a"});
    assert_eq!(refused(planted, json!({})), field("spec.description"));
    let cluster_line = json!({"description": "hyperplug.cluster-uid=x"});
    assert_eq!(refused(cluster_line, json!({})), field("spec.description"));
    let tag = json!({"tags": ["prod", "hp-0b7e2f1c-4d3a"]});
    assert_eq!(refused(tag, json!({})), field("spec.tags[1]"));
    let fine = json!({"description": "runs hyperplug", "tags": ["hyperplug-demo", "php"]});
    assert_eq!(refused(fine, json!({})), None);
}
