use guest_kit::testing::allocated;
use serde_json::{Value, json};

use super::*;
use crate::machine::testing::{ctx, ctx_v2, request, template_spec};

fn with_network(network: Value) -> Value {
    let mut spec = template_spec();
    spec["network"] = network;
    spec
}

fn config(nics: usize) -> Value {
    let mut c = json!({});
    for i in 0..nics {
        c[format!("net{i}")] = json!(format!(
            "virtio=BC:24:11:00:00:{:02X},bridge=vmbr{i}",
            i + 1
        ));
    }
    c
}

fn dual_stack_cluster() -> Value {
    json!({
        "ipv4Config": {"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24, "gateway": "10.0.0.1", "metric": 100},
        "ipv6Config": {"addresses": ["2001:db8::10-2001:db8::20"], "prefix": 64, "gateway": "2001:db8::1", "metric": 100},
        "dnsServers": ["8.8.8.8", "8.8.4.4"],
    })
}

fn invalid_field(r: Result<NetworkConfig, PluginError>) -> String {
    match r {
        Err(PluginError::InvalidSpec(i)) => i.field,
        other => panic!("expected an invalid spec, got {other:?}"),
    }
}

/// A dual-stack default NIC, a second NIC on a shared pool with its own DNS, a
/// route into table 500, a rule and a guest MTU, and a third NIC in a VRF.
fn three_nics_and_a_vrf() -> Value {
    json!({"templateID": 9000, "sourceNode": "pve1", "network": {
        "networkDevices": [
            {"name": "net0", "bridge": "vmbr0", "defaultIPv4": true, "defaultIPv6": true},
            {"name": "net1", "bridge": "vmbr1", "dnsServers": ["9.9.9.9"], "linkMtu": 9000,
             "ipPoolRef": [{"apiGroup": "ipam.cluster.x-k8s.io", "kind": "GlobalInClusterIPPool", "name": "shared"}],
             "routes": [{"to": "172.16.0.0/16", "via": "10.10.10.253", "table": 500}],
             "routingPolicy": [{"to": "172.16.0.0/16", "priority": 100, "table": 500}]},
            {"name": "net2", "bridge": "vmbr2",
             "ipPoolRef": [{"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "ext"}]},
        ],
        "vrfs": [{"name": "vrf-ext", "table": 500, "interfaces": ["net2"],
                  "routes": [{"to": "0.0.0.0/0", "via": "172.16.4.1"}],
                  "routingPolicy": [{"from": "7.6.5.0/24"}]}],
    }})
}

/// What CAPMOX renders for `three_nics_and_a_vrf` (its renderer, run on the data its
/// controller builds from that spec), but for eth1's default route: CAPMOX reads its
/// metric (200) from the pool's `gateway-metric` annotation, which the host does not
/// pass yet.
const CAPMOX_RENDER: &str = r#"network:
  version: 2
  renderer: networkd
  ethernets:
    eth0:
      match:
        macaddress: BC:24:11:00:00:01
      dhcp4: false
      dhcp6: false
      addresses:
        - '10.0.0.5/24'
        - '2001:db8::5/64'
      routes:
        - { "to": "0.0.0.0/0",  "via": "10.0.0.1",  "metric": 100, }
        - { "to": "::/0",  "via": "2001:db8::1",  "metric": 100, }
      nameservers:
        addresses:
          - '8.8.8.8'
          - '8.8.4.4'
    eth1:
      match:
        macaddress: BC:24:11:00:00:02
      dhcp4: false
      dhcp6: false
      addresses:
        - '10.10.10.100/24'
      routes:
        - { "to": "0.0.0.0/0",  "via": "10.10.10.254", }
        - { "to": "172.16.0.0/16",  "via": "10.10.10.253",  "table": 500, }
      routing-policy:
        - { "to": "172.16.0.0/16",  "priority": 100,  "table": 500, }
      nameservers:
        addresses:
          - '9.9.9.9'
      mtu: 9000
    eth2:
      match:
        macaddress: BC:24:11:00:00:03
      dhcp4: false
      dhcp6: false
      addresses:
        - '172.16.4.10/24'
      nameservers:
        addresses:
          - '8.8.8.8'
          - '8.8.4.4'
  vrfs:
    vrf-ext:
      table: 500
      routes:
        - { "to": "0.0.0.0/0",  "via": "172.16.4.1", }
      routing-policy:
        - { "from": "7.6.5.0/24", }
      interfaces:
        - 'eth2'
"#;

#[test]
fn the_network_config_is_what_capmox_renders_for_the_same_spec() {
    let mut req = request(json!({}), json!({}));
    req.addresses = vec![
        allocated("net0-00-inet", "10.0.0.5", 24, Some("10.0.0.1")),
        allocated("net0-01-inet", "2001:db8::5", 64, Some("2001:db8::1")),
        allocated("net1-00-inet", "10.10.10.100", 24, Some("10.10.10.254")),
        allocated("net2-00-inet", "172.16.4.10", 24, None),
    ];
    let cx = ctx_v2(&req, three_nics_and_a_vrf(), dual_stack_cluster());
    let network = guest_network(&cx, &config(3)).unwrap();
    assert_eq!(network.render().unwrap(), CAPMOX_RENDER);
}

#[test]
fn nics_on_the_same_pool_get_one_default_route() {
    let spec = with_network(json!({
        "default": {"bridge": "vmbr0", "mtu": 1450},
        "additionalDevices": [{"name": "net1", "bridge": "vmbr1"}],
    }));
    let mut req = request(spec, dual_stack_cluster());
    req.addresses = vec![
        allocated("net0-00-inet", "10.0.0.11", 24, Some("10.0.0.1")),
        allocated("net1-00-inet", "10.0.0.12", 24, Some("10.0.0.1")),
    ];
    let network = guest_network(&ctx(&req), &config(2)).unwrap();
    let [eth0, eth1] = network.ethernets.as_slice() else {
        panic!("two NICs: {network:?}");
    };
    assert_eq!(
        (eth0.name.as_str(), eth0.mac.as_str()),
        ("eth0", "BC:24:11:00:00:01")
    );
    assert_eq!(eth0.routes.len(), 1);
    assert_eq!(eth0.routes[0].metric, Some(100));
    assert!(eth1.routes.is_empty(), "{eth1:?}");
    assert_eq!(eth0.mtu, None, "Proxmox's MTU is not the guest's");
    assert_eq!(eth1.dns_servers, ["8.8.8.8", "8.8.4.4"]);
}

#[test]
fn without_a_pool_nics_take_dhcp_and_no_addresses() {
    let spec = with_network(json!({
        "default": {"bridge": "vmbr0"},
        "additionalDevices": [{"name": "net1", "bridge": "vmbr1"}],
    }));
    let req = request(spec, json!({}));
    let network = guest_network(&ctx(&req), &config(2)).unwrap();
    for nic in &network.ethernets {
        assert!(
            nic.dhcp4 && nic.addresses.is_empty() && nic.routes.is_empty(),
            "{nic:?}"
        );
    }
}

#[test]
fn a_zone_gives_its_dns_servers_and_a_nic_its_own() {
    let cluster = json!({"dnsServers": ["10.0.0.2"], "zoneConfig": [
        {"zone": "z1", "dnsServers": ["10.9.0.2"],
         "ipv4Config": {"addresses": ["10.9.0.10-10.9.0.20"], "prefix": 24, "gateway": "10.9.0.1"}},
    ]});
    let spec = json!({"templateID": 9000, "sourceNode": "pve1", "network": {"zone": "z1", "networkDevices": [
        {"name": "net0"}, {"name": "net1", "bridge": "vmbr1", "dnsServers": ["1.1.1.1"]},
    ]}});
    let mut req = request(json!({}), json!({}));
    req.addresses = vec![allocated("net0-00-inet", "10.9.0.10", 24, Some("10.9.0.1"))];
    let network = guest_network(&ctx_v2(&req, spec, cluster), &config(2)).unwrap();
    assert_eq!(network.ethernets[0].dns_servers, ["10.9.0.2"]);
    assert_eq!(
        network.ethernets[0].addresses[0].to_string(),
        "10.9.0.10/24"
    );
    assert_eq!(network.ethernets[1].dns_servers, ["1.1.1.1"]);
}

#[test]
fn route_targets_take_placeholders_and_bare_addresses() {
    let r = |to: &str, via: Option<&str>, is6: Option<bool>| {
        let spec = RouteSpec {
            to: Some(to.into()),
            via: via.map(String::from),
            is6,
            ..RouteSpec::default()
        };
        route(&spec, "r").map(|r| r.to.to_string())
    };
    assert_eq!(r("default", None, None).unwrap(), "0.0.0.0/0");
    assert_eq!(r("all", None, Some(true)).unwrap(), "::/0");
    assert_eq!(r("default", Some("fd00::1"), None).unwrap(), "::/0");
    assert_eq!(r("10.1.2.3", None, None).unwrap(), "10.1.2.3/32");
    match route(&RouteSpec::default(), "spec.network.default.routes[0]") {
        Err(PluginError::InvalidSpec(i)) => {
            assert_eq!(i.field, "spec.network.default.routes[0].to")
        }
        other => panic!("a route without a destination: {other:?}"),
    }
    let rule = RoutingPolicySpec {
        to: Some("all".into()),
        from: Some("fd00::/64".into()),
        table: Some(500),
        ..RoutingPolicySpec::default()
    };
    assert_eq!(
        super::rule(&rule, "p").unwrap().to.unwrap().to_string(),
        "::/0"
    );
}

#[test]
fn a_vrf_member_must_be_a_nic_of_the_machine() {
    let spec = json!({"templateID": 9000, "sourceNode": "pve1", "network": {
        "networkDevices": [{"name": "net0"}],
        "vrfs": [{"name": "vrf-ext", "table": 500, "interfaces": ["net0", "net4"]}],
    }});
    let req = request(json!({}), json!({}));
    assert_eq!(
        invalid_field(guest_network(&ctx_v2(&req, spec, json!({})), &config(1))),
        "spec.network.vrfs[0].interfaces[1]"
    );
}

#[test]
fn colliding_routes_name_the_network() {
    let spec = json!({"templateID": 9000, "sourceNode": "pve1", "network": {"networkDevices": [
        {"name": "net0", "routes": [{"to": "10.0.0.0/8", "via": "10.0.0.1"}, {"to": "10.0.0.0/8", "via": "10.0.0.2"}]},
    ]}});
    let req = request(json!({}), json!({}));
    assert_eq!(
        invalid_field(guest_network(&ctx_v2(&req, spec, json!({})), &config(1))),
        "spec.network"
    );
}

#[test]
fn a_nic_the_vm_lacks_is_left_out() {
    let spec = with_network(json!({
        "default": {"bridge": "vmbr0"},
        "additionalDevices": [{"name": "net1", "bridge": "vmbr1"}],
    }));
    let req = request(spec, json!({}));
    let network = guest_network(&ctx(&req), &config(1)).unwrap();
    assert_eq!(network.ethernets.len(), 1);
}

#[test]
fn default_addresses_are_the_default_pools_ipv4_first() {
    let mut req = request(json!({}), json!({}));
    req.addresses = vec![
        allocated("net0-01-inet", "2001:db8::5", 64, None),
        allocated("net0-00-inet", "10.0.0.5", 24, None),
        allocated("net1-00-inet", "10.10.10.100", 24, None),
    ];
    let cx = ctx_v2(&req, three_nics_and_a_vrf(), dual_stack_cluster());
    let found: Vec<String> = default_addresses(&cx)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(found, ["10.0.0.5/24", "2001:db8::5/64"]);
}
