//! Round trips of every kind both ways, edits between conversions, and what CAPMOX's
//! own conversion gives for the same objects (its outputs for these inputs were
//! measured by running its conversion functions).
use serde_json::{Value, json};

use super::*;

fn yaml(text: &str) -> Value {
    serde_yaml::from_str(text).expect("test YAML")
}

fn conv(kind: Kind, from: Version, obj: &Value, preserved: Option<&str>) -> Converted {
    convert(kind, from, from.other(), obj, preserved).expect("converts")
}

/// `obj` there and back again, which must give `obj`.
fn round_trip(kind: Kind, from: Version, obj: &Value) -> (Converted, Value) {
    let there = conv(kind, from, obj, None);
    let back = conv(
        kind,
        from.other(),
        &there.object,
        there.preserved.as_deref(),
    );
    (there, back.object)
}

/// A `v1alpha1` machine spec using every field `v1alpha1` has, ours and CAPMOX's.
fn machine_v1() -> Value {
    yaml(
        r#"
spec:
  sourceNode: pve1
  templateID: 9000
  target: pve2
  snapName: base
  full: true
  storage: local-lvm
  format: qcow2
  pool: capi
  description: worker
  tags: [k8s, prod]
  numSockets: 2
  numCores: 4
  memoryMiB: 8192
  disks:
    bootVolume: {disk: scsi0, sizeGb: 40}
    additionalVolumes: [{disk: scsi1, sizeGb: 100, storage: ceph}]
  network:
    default: {bridge: vmbr0, model: virtio, mtu: 1500, vlan: 10, dnsServers: [10.0.0.2], dhcp6: true}
    additionalDevices:
    - name: net1
      bridge: vmbr1
      ipv4PoolRef: {apiGroup: ipam.cluster.x-k8s.io, kind: GlobalInClusterIPPool, name: pool-a}
      ipv6PoolRef: {apiGroup: ipam.cluster.x-k8s.io, kind: InClusterIPPool, name: pool-b}
      routes: [{to: 10.0.0.0/8, via: 10.1.1.1, metric: 100}]
      routingPolicy: [{to: 10.0.0.0/8, table: 500, priority: 100}]
      linkMtu: 9000
    - {name: net2, bridge: vmbr2, dhcp4: true}
    vrfs:
    - {name: vrf-ext, table: 500, interfaces: [net1], routingPolicy: [{from: 192.0.2.0/24}]}
  vmIDRange: {start: 1000, end: 1999}
  checks: {skipCloudInitStatus: true}
  cloudInit: {isoStorage: local, cdSlot: ide0}
  metadataSettings: {providerIDInjection: true}
  providerID: proxmox://6c3fa683-bef9-4425-b413-eaa45a9d6191
  virtualMachineID: 104
status:
  ready: true
  vmStatus: ready
  proxmoxNode: pve2
  ipAddresses:
    default: {ipv4: 10.0.0.5}
    net1: {ipv4: 10.1.0.5, ipv6: "2001:db8::5"}
  failureReason: UpdateError
  failureMessage: it broke once
  phase: Ready
"#,
    )
}

/// A `v1alpha2` machine using every field only `v1alpha2` has.
fn machine_v2() -> Value {
    yaml(
        r#"
spec:
  templateSelector: {matchTags: [a, b], matchPolicy: bestSubset}
  virtualMachineID: 104
  providerID: proxmox://6c3fa683-bef9-4425-b413-eaa45a9d6191
  metadataSettings: {providerIDInjection: false}
  network:
    zone: z1
    networkDevices:
    - {name: net1, bridge: vmbr1, queues: 2, defaultIPv6: true, ipPoolRef: [
        {apiGroup: ipam.cluster.x-k8s.io, kind: InClusterIPPool, name: foo},
        {apiGroup: ipam.cluster.x-k8s.io, kind: InClusterIPPool, name: bar},
        {apiGroup: ipam.cluster.x-k8s.io, kind: InClusterIPPool, name: baz}],
      routes: [{to: default, is6: true}], routingPolicy: [{to: all, table: 500, is6: true}]}
    - {name: net0, defaultIPv4: true, queues: 4}
    vrfs:
    - {name: vrf-ext, table: 500, interfaces: [net1], routes: [{to: default, is6: true}]}
status:
  proxmoxNode: pve2
  vmStatus: ready
  initialization: {provisioned: true}
  ipAddresses:
  - {net: default, ipv4: [10.0.0.5], ipv6: ["2001:db8::5"]}
  - {net: net1, ipv4: [10.1.0.5, 10.1.0.6]}
"#,
    )
}

fn cluster_v1() -> Value {
    yaml(
        r#"
spec:
  controlPlaneEndpoint: {host: 10.0.0.1, port: 6443}
  externalManagedControlPlane: false
  allowedNodes: [pve1, pve2]
  schedulerHints: {memoryAdjustment: 0}
  ipv4Config: {addresses: [10.0.0.10-10.0.0.20], prefix: 24, gateway: 10.0.0.1, metric: 100}
  dnsServers: [8.8.8.8]
  credentialsRef: {name: pve, namespace: capmox-system}
  credentialsRefs: [{name: more}]
  cloneSpec:
    machineSpec:
      controlPlane: {sourceNode: pve1, templateID: 100}
    sshAuthorizedKeys: []
    virtualIPNetworkInterface: ""
status:
  ready: true
  inClusterIpPoolRef: [{name: c-v4-icip}]
  nodeLocations: {workers: [{machine: {name: m}, node: pve1}]}
  failureReason: UpdateError
  conditions: [{type: Ready, status: "True", reason: Ready, lastTransitionTime: "2026-01-01T00:00:00Z"}]
"#,
    )
}

fn cluster_v2() -> Value {
    yaml(
        r#"
spec:
  controlPlaneEndpoint: {host: 10.0.0.1, port: 6443}
  dnsServers: [8.8.8.8]
  ipv4Config: {addresses: [10.0.0.10-10.0.0.20], prefix: 24, gateway: 10.0.0.1}
  ipv6Config: {addresses: ["fd00::10-fd00::20"], prefix: 64, gateway: "fd00::1"}
  zoneConfig:
  - zone: z1
    dnsServers: [1.1.1.1]
    ipv4Config: {addresses: [10.2.0.10-10.2.0.20], prefix: 24, gateway: 10.2.0.1}
status:
  initialization: {provisioned: true}
  inClusterIPPoolRef: [{name: c-v4-icip}, {name: c-z1-v4-icip}]
  inClusterZoneRef:
  - {zone: default, inClusterIPPoolRefV4: {name: c-v4-icip}}
  - {zone: z1, inClusterIPPoolRefV4: {name: c-z1-v4-icip}}
  nodeLocations:
    controlPlane: [{machine: {name: cp}, node: pve1, zone: z1}]
"#,
    )
}

/// A template of `inner` (a spec and nothing else), with its metadata.
fn template(inner: &Value, metadata: Value) -> Value {
    json!({"spec": {"template": {"metadata": metadata, "spec": inner["spec"]}}})
}

#[test]
fn a_v1alpha1_machine_goes_up_and_comes_back_unchanged() {
    let (there, back) = round_trip(Kind::Machine, Version::V1alpha1, &machine_v1());
    assert_eq!(back, machine_v1());
    // `target` has no place in v1alpha2: it is preserved, and acts as allowedNodes.
    assert_eq!(there.object["spec"]["allowedNodes"], json!(["pve2"]));
    assert!(there.object["spec"].get("target").is_none());
    assert!(there.preserved.is_some());
}

#[test]
fn a_v1alpha2_machine_goes_down_and_comes_back_unchanged() {
    let (there, back) = round_trip(Kind::Machine, Version::V1alpha2, &machine_v2());
    assert_eq!(back, machine_v2());
    assert!(there.object["spec"]["network"].get("zone").is_none());
    assert!(there.preserved.unwrap().contains("\"queues\":4"));
}

#[test]
fn a_v1alpha1_cluster_and_a_v1alpha2_cluster_come_back_unchanged() {
    let (there, back) = round_trip(Kind::Cluster, Version::V1alpha1, &cluster_v1());
    assert_eq!(back, cluster_v1());
    assert!(there.object["spec"].get("cloneSpec").is_none());
    let (there, back) = round_trip(Kind::Cluster, Version::V1alpha2, &cluster_v2());
    assert_eq!(back, cluster_v2());
    assert!(there.object["spec"].get("zoneConfig").is_none());
    assert!(there.object["status"].get("inClusterZoneRef").is_none());
}

#[test]
fn templates_of_both_kinds_come_back_unchanged_both_ways() {
    let labelled = json!({"labels": {"tier": "workers"}});
    for (kind, v1, v2) in [
        (Kind::MachineTemplate, machine_v1(), machine_v2()),
        (Kind::ClusterTemplate, cluster_v1(), cluster_v2()),
    ] {
        for metadata in [json!({}), labelled.clone()] {
            let t1 = template(&v1, metadata.clone());
            assert_eq!(round_trip(kind, Version::V1alpha1, &t1).1, t1, "{kind:?}");
        }
        let t2 = template(&v2, labelled.clone());
        assert_eq!(round_trip(kind, Version::V1alpha2, &t2).1, t2, "{kind:?}");
    }
}

#[test]
fn an_object_either_version_says_fully_needs_nothing_preserved() {
    let plain =
        yaml("spec: {sourceNode: pve1, templateID: 9000, network: {default: {bridge: vmbr0}}}");
    let there = conv(Kind::Machine, Version::V1alpha1, &plain, None);
    assert_eq!(there.preserved, None, "{there:?}");
    assert_eq!(
        there.object["spec"]["network"]["networkDevices"],
        json!([{"name": "net0", "bridge": "vmbr0", "defaultIPv4": true, "defaultIPv6": true}])
    );
}

#[test]
fn what_an_edit_in_the_other_version_cannot_touch_survives_it() {
    let down = conv(Kind::Machine, Version::V1alpha2, &machine_v2(), None);
    let mut edited = down.object.clone();
    edited["spec"]["memoryMiB"] = json!(4096);
    edited["spec"]["network"]["additionalDevices"][0]["bridge"] = json!("vmbr9");
    let up = conv(
        Kind::Machine,
        Version::V1alpha1,
        &edited,
        down.preserved.as_deref(),
    );
    let spec = &up.object["spec"];
    assert_eq!(spec["memoryMiB"], 4096, "the edit");
    assert_eq!(spec["network"]["zone"], "z1");
    let devices = spec["network"]["networkDevices"].as_array().unwrap();
    assert_eq!(devices[0]["name"], "net1", "the v1alpha2 order");
    assert_eq!(devices[0]["bridge"], "vmbr9", "the edit");
    assert_eq!(devices[0]["queues"], 2);
    assert_eq!(devices[0]["ipPoolRef"].as_array().unwrap().len(), 3);
    assert_eq!(devices[0]["routes"][0]["is6"], true);
    assert_eq!(devices[1]["queues"], 4);
    assert_eq!(spec["templateSelector"]["matchPolicy"], "bestSubset");
    assert_eq!(spec["network"]["vrfs"][0]["routes"][0]["is6"], true);
    assert_eq!(
        up.object["status"]["ipAddresses"][1]["ipv4"],
        json!(["10.1.0.5", "10.1.0.6"])
    );
}

#[test]
fn an_edit_in_v1alpha2_keeps_what_only_v1alpha1_says() {
    let up = conv(Kind::Cluster, Version::V1alpha1, &cluster_v1(), None);
    let mut edited = up.object.clone();
    edited["spec"]["dnsServers"] = json!(["9.9.9.9"]);
    let down = conv(
        Kind::Cluster,
        Version::V1alpha2,
        &edited,
        up.preserved.as_deref(),
    );
    assert_eq!(down.object["spec"]["dnsServers"], json!(["9.9.9.9"]));
    assert_eq!(
        down.object["spec"]["cloneSpec"],
        cluster_v1()["spec"]["cloneSpec"]
    );
    assert_eq!(down.object["status"]["failureReason"], "UpdateError");
}

#[test]
fn the_hosts_fields_pass_through_as_they_are() {
    let up = conv(Kind::Cluster, Version::V1alpha1, &cluster_v1(), None);
    assert_eq!(
        up.object["spec"]["credentialsRef"],
        json!({"name": "pve", "namespace": "capmox-system"})
    );
    assert_eq!(
        up.object["spec"]["credentialsRefs"],
        json!([{"name": "more"}])
    );
    assert_eq!(
        up.object["status"]["conditions"],
        cluster_v1()["status"]["conditions"]
    );
}

#[test]
fn a_spec_that_does_not_parse_names_its_field() {
    let bad = json!({"spec": {"templateID": 9000, "network": {"default": {"bridge": 5}}}});
    match convert(
        Kind::Machine,
        Version::V1alpha1,
        Version::V1alpha2,
        &bad,
        None,
    ) {
        Err(PluginError::InvalidSpec(i)) => assert_eq!(i.field, "spec.network.default.bridge"),
        other => panic!("expected an invalid spec, got {other:?}"),
    }
    let bad = json!({"spec": {"template": {"spec": {"templateID": "x"}}}});
    match convert(
        Kind::MachineTemplate,
        Version::V1alpha1,
        Version::V1alpha2,
        &bad,
        None,
    ) {
        Err(PluginError::InvalidSpec(i)) => assert_eq!(i.field, "spec.template.spec.templateID"),
        other => panic!("expected an invalid spec, got {other:?}"),
    }
}

#[test]
fn converting_to_the_same_version_changes_nothing() {
    let same = convert(
        Kind::Machine,
        Version::V1alpha2,
        Version::V1alpha2,
        &machine_v2(),
        Some("kept"),
    )
    .unwrap();
    assert_eq!(same.object, machine_v2());
    assert_eq!(same.preserved.as_deref(), Some("kept"));
}

// What CAPMOX's conversion gives for the same inputs (measured), and where ours differs.

#[test]
fn a_seed_like_v1alpha1_template_goes_up_as_capmox_converts_it() {
    let t = yaml(
        r#"
spec:
  template:
    spec:
      sourceNode: pve1
      templateID: 9000
      target: pve2
      full: true
      format: raw
      storage: local-lvm
      numSockets: 1
      numCores: 2
      memoryMiB: 2048
      disks: {bootVolume: {disk: scsi0, sizeGb: 20}}
      network:
        default: {bridge: vmbr0, model: virtio, mtu: 1500}
        additionalDevices:
        - name: net1
          bridge: vmbr1
          vlan: 10
          dnsServers: [9.9.9.9]
          ipv4PoolRef: {apiGroup: ipam.cluster.x-k8s.io, kind: GlobalInClusterIPPool, name: pool-a}
          ipv6PoolRef: {apiGroup: ipam.cluster.x-k8s.io, kind: InClusterIPPool, name: pool-b}
          routes: [{to: 10.0.0.0/8, via: 10.1.1.1, metric: 100}]
          routingPolicy: [{to: 10.0.0.0/8, table: 500, priority: 100}]
          linkMtu: 9000
        vrfs:
        - name: vrf-ext
          table: 500
          interfaces: [net1]
          routingPolicy: [{from: 192.0.2.0/24}]
"#,
    );
    // CAPMOX's output, but for its `routingPolicy[0].from: ""` (an unset field it
    // turns into an empty string): unset here.
    let capmox = yaml(
        r#"
spec:
  template:
    spec:
      allowedNodes: [pve2]
      disks: {bootVolume: {disk: scsi0, sizeGb: 20}}
      format: raw
      full: true
      memoryMiB: 2048
      network:
        networkDevices:
        - {bridge: vmbr0, defaultIPv4: true, defaultIPv6: true, model: virtio, mtu: 1500, name: net0}
        - bridge: vmbr1
          dnsServers: [9.9.9.9]
          ipPoolRef:
          - {apiGroup: ipam.cluster.x-k8s.io, kind: GlobalInClusterIPPool, name: pool-a}
          - {apiGroup: ipam.cluster.x-k8s.io, kind: InClusterIPPool, name: pool-b}
          linkMtu: 9000
          name: net1
          routes: [{metric: 100, to: 10.0.0.0/8, via: 10.1.1.1}]
          routingPolicy: [{priority: 100, table: 500, to: 10.0.0.0/8}]
          vlan: 10
        vrfs:
        - {interfaces: [net1], name: vrf-ext, routingPolicy: [{from: 192.0.2.0/24}], table: 500}
      numCores: 2
      numSockets: 1
      sourceNode: pve1
      storage: local-lvm
      templateID: 9000
"#,
    );
    let up = conv(Kind::MachineTemplate, Version::V1alpha1, &t, None);
    assert_eq!(up.object, capmox);
    // CAPMOX loses `target` (and, on the way down, pool-b); kept here.
    let back = conv(
        Kind::MachineTemplate,
        Version::V1alpha2,
        &up.object,
        up.preserved.as_deref(),
    );
    assert_eq!(back.object, t);
}

#[test]
fn a_v1alpha2_machine_goes_down_as_capmox_converts_it_and_comes_back_whole() {
    let m = yaml(
        r#"
spec:
  templateSelector: {matchTags: [a, b], matchPolicy: bestSubset}
  virtualMachineID: 104
  providerID: proxmox://6c3fa683-bef9-4425-b413-eaa45a9d6191
  metadataSettings: {providerIDInjection: false}
  network:
    zone: z1
    networkDevices:
    - {name: net0, bridge: vmbr0, defaultIPv4: true, defaultIPv6: true, queues: 4}
    - name: net1
      bridge: vmbr1
      ipPoolRef:
      - {apiGroup: ipam.cluster.x-k8s.io, kind: InClusterIPPool, name: foo}
      - {apiGroup: ipam.cluster.x-k8s.io, kind: InClusterIPPool, name: bar}
      - {apiGroup: ipam.cluster.x-k8s.io, kind: InClusterIPPool, name: baz}
      routes: [{to: default, is6: true}]
status:
  proxmoxNode: pve2
  vmStatus: ready
  initialization: {provisioned: true}
  ipAddresses:
  - {net: default, ipv4: [10.0.0.5], ipv6: ["2001:db8::5"]}
  - {net: net1, ipv4: [10.1.0.5, 10.1.0.6]}
"#,
    );
    // CAPMOX's output, but `metadataSettings` keeps `providerIDInjection: false`
    // (CAPMOX's v1alpha1 drops a false) and no `retryAfter: null`.
    let capmox = yaml(
        r#"
spec:
  metadataSettings: {providerIDInjection: false}
  network:
    additionalDevices:
    - bridge: vmbr1
      ipv4PoolRef: {apiGroup: ipam.cluster.x-k8s.io, kind: InClusterIPPool, name: foo}
      name: net1
      routes: [{to: default}]
    default: {bridge: vmbr0}
  providerID: proxmox://6c3fa683-bef9-4425-b413-eaa45a9d6191
  templateSelector: {matchPolicy: bestSubset, matchTags: [a, b]}
  virtualMachineID: 104
status:
  initialization: {provisioned: true}
  ipAddresses:
    default: {ipv4: 10.0.0.5, ipv6: "2001:db8::5"}
    net1: {ipv4: 10.1.0.5}
  proxmoxNode: pve2
  ready: true
  vmStatus: ready
"#,
    );
    let down = conv(Kind::Machine, Version::V1alpha2, &m, None);
    assert_eq!(down.object, capmox);
    // Back up with what was kept: whole (CAPMOX keeps only the first of net1's pools).
    let up = conv(
        Kind::Machine,
        Version::V1alpha1,
        &down.object,
        down.preserved.as_deref(),
    );
    assert_eq!(up.object, m);
    // Without it: what v1alpha1 says, read as CAPMOX reads it.
    let bare = conv(Kind::Machine, Version::V1alpha1, &down.object, None);
    let devices = &bare.object["spec"]["network"]["networkDevices"];
    assert_eq!(
        devices[0],
        json!({"name": "net0", "bridge": "vmbr0", "defaultIPv4": true, "defaultIPv6": true})
    );
    assert_eq!(devices[1]["ipPoolRef"].as_array().unwrap().len(), 1);
    assert!(devices[1].get("defaultIPv4").is_none());
}

#[test]
fn a_v1alpha2_cluster_template_with_zones_goes_down_without_them() {
    let t = yaml(
        r#"
spec:
  template:
    spec:
      controlPlaneEndpoint: {host: 10.0.0.1, port: 6443}
      dnsServers: [8.8.8.8]
      ipv4Config: {addresses: [10.0.0.10-10.0.0.20], prefix: 24, gateway: 10.0.0.1}
      zoneConfig:
      - zone: z1
        dnsServers: [1.1.1.1]
        ipv4Config: {addresses: [10.2.0.10-10.2.0.20], prefix: 24, gateway: 10.2.0.1}
"#,
    );
    let down = conv(Kind::ClusterTemplate, Version::V1alpha2, &t, None);
    // CAPMOX also fakes a `cloneSpec` for old ClusterClass patches; not needed here,
    // nothing reads it.
    assert_eq!(
        down.object,
        yaml(
            r#"
spec:
  template:
    spec:
      controlPlaneEndpoint: {host: 10.0.0.1, port: 6443}
      dnsServers: [8.8.8.8]
      ipv4Config: {addresses: [10.0.0.10-10.0.0.20], prefix: 24, gateway: 10.0.0.1}
"#
        )
    );
    let up = conv(
        Kind::ClusterTemplate,
        Version::V1alpha1,
        &down.object,
        down.preserved.as_deref(),
    );
    assert_eq!(up.object, t);
}

#[test]
fn a_v1alpha1_cluster_goes_up_as_capmox_converts_it() {
    let c = yaml(
        r#"
spec:
  controlPlaneEndpoint: {host: 10.0.0.1, port: 6443}
  allowedNodes: [pve1, pve2]
  dnsServers: [8.8.8.8]
  ipv4Config: {addresses: [10.0.0.10-10.0.0.20], prefix: 24, gateway: 10.0.0.1}
  schedulerHints: {memoryAdjustment: 0}
status:
  ready: true
  inClusterIpPoolRef: [{name: c-v4-icip}]
  nodeLocations: {workers: [{machine: {name: m}, node: pve1}]}
  failureReason: UpdateError
"#,
    );
    let up = conv(Kind::Cluster, Version::V1alpha1, &c, None);
    // CAPMOX's, but `ready` stays (the host writes both fields in both versions).
    assert_eq!(
        up.object,
        yaml(
            r#"
spec:
  allowedNodes: [pve1, pve2]
  controlPlaneEndpoint: {host: 10.0.0.1, port: 6443}
  dnsServers: [8.8.8.8]
  ipv4Config: {addresses: [10.0.0.10-10.0.0.20], gateway: 10.0.0.1, prefix: 24}
  schedulerHints: {memoryAdjustment: 0}
status:
  ready: true
  inClusterIPPoolRef: [{name: c-v4-icip}]
  initialization: {provisioned: true}
  nodeLocations: {workers: [{machine: {name: m}, node: pve1}]}
"#
        )
    );
}

#[test]
fn what_capmox_left_in_the_annotation_brings_its_object_back_whole() {
    // CAPMOX's down-conversion of the machine of the test above: its v1alpha1 object
    // and the annotation it wrote (measured).
    let capmox_v1 = yaml(
        r#"
spec:
  metadataSettings: {}
  network:
    additionalDevices:
    - bridge: vmbr1
      ipv4PoolRef: {apiGroup: ipam.cluster.x-k8s.io, kind: InClusterIPPool, name: foo}
      name: net1
      routes: [{to: default}]
    default: {bridge: vmbr0}
  providerID: proxmox://6c3fa683-bef9-4425-b413-eaa45a9d6191
  templateSelector: {matchPolicy: bestSubset, matchTags: [a, b]}
  virtualMachineID: 104
status:
  ipAddresses:
    default: {ipv4: 10.0.0.5, ipv6: "2001:db8::5"}
    net1: {ipv4: 10.1.0.5}
  proxmoxNode: pve2
  ready: true
  vmStatus: ready
"#,
    );
    let annotation = r#"{"apiVersion":"infrastructure.cluster.x-k8s.io/v1alpha2","kind":"ProxmoxMachine","spec":{"metadataSettings":{"providerIDInjection":false},"network":{"networkDevices":[{"bridge":"vmbr0","defaultIPv4":true,"defaultIPv6":true,"name":"net0","queues":4},{"bridge":"vmbr1","ipPoolRef":[{"apiGroup":"ipam.cluster.x-k8s.io","kind":"InClusterIPPool","name":"foo"},{"apiGroup":"ipam.cluster.x-k8s.io","kind":"InClusterIPPool","name":"bar"},{"apiGroup":"ipam.cluster.x-k8s.io","kind":"InClusterIPPool","name":"baz"}],"name":"net1","routes":[{"is6":true,"to":"default"}]}],"zone":"z1"},"providerID":"proxmox://6c3fa683-bef9-4425-b413-eaa45a9d6191","templateSelector":{"matchPolicy":"bestSubset","matchTags":["a","b"]},"virtualMachineID":104},"status":{"initialization":{"provisioned":true},"ipAddresses":[{"ipv4":["10.0.0.5"],"ipv6":["2001:db8::5"],"net":"default"},{"ipv4":["10.1.0.5","10.1.0.6"],"net":"net1"}],"proxmoxNode":"pve2","vmStatus":"ready"}}"#;
    let up = conv(
        Kind::Machine,
        Version::V1alpha1,
        &capmox_v1,
        Some(annotation),
    );
    let spec = &up.object["spec"];
    assert_eq!(spec["metadataSettings"]["providerIDInjection"], false);
    assert_eq!(spec["network"]["zone"], "z1");
    let devices = &spec["network"]["networkDevices"];
    assert_eq!(devices[0]["queues"], 4);
    assert_eq!(
        devices[1]["ipPoolRef"].as_array().unwrap().len(),
        3,
        "all three pools (CAPMOX restores only the first)"
    );
    assert_eq!(devices[1]["routes"][0]["is6"], true);
    assert_eq!(
        up.object["status"]["ipAddresses"][1]["ipv4"],
        json!(["10.1.0.5", "10.1.0.6"])
    );
}

/// The top-level properties of a model, as its schema says.
fn properties<T: schemars::JsonSchema>() -> Vec<String> {
    let schema = schemars::schema_for!(T);
    let mut keys: Vec<String> = schema
        .as_value()
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    keys.sort();
    keys
}

#[test]
fn the_known_keys_are_the_models_properties() {
    use crate::spec::{v1alpha1 as v1, v1alpha2 as v2};
    let listed = |kind, version| {
        let mut keys: Vec<String> = known_keys(kind, version)
            .iter()
            .map(|k| k.to_string())
            .collect();
        keys.sort();
        keys
    };
    assert_eq!(
        listed(Kind::Cluster, Version::V1alpha1),
        properties::<v1::ClusterSpec>()
    );
    assert_eq!(
        listed(Kind::Cluster, Version::V1alpha2),
        properties::<v2::ClusterSpec>()
    );
    assert_eq!(
        listed(Kind::Machine, Version::V1alpha1),
        properties::<v1::MachineSpec>()
    );
    assert_eq!(
        listed(Kind::Machine, Version::V1alpha2),
        properties::<v2::MachineSpec>()
    );
}
