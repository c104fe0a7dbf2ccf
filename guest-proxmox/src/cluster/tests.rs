use guest_kit::types::PluginError;
use serde_json::{Value, json};

use super::*;

fn spec(v: Value) -> ClusterSpec {
    cluster_spec(&v.to_string(), "spec").expect("a v1alpha1 cluster spec")
}

fn spec2(v: Value) -> ClusterSpec {
    serde_json::from_value(v).expect("a v1alpha2 cluster spec")
}

fn pool(addresses: &str, gateway: &str) -> Value {
    json!({"addresses": [addresses], "prefix": 24, "gateway": gateway})
}

fn invalid_field<T: std::fmt::Debug>(r: Result<T, PluginError>) -> String {
    match r {
        Err(PluginError::InvalidSpec(i)) => i.field,
        other => panic!("expected an invalid spec, got {other:?}"),
    }
}

#[test]
fn the_endpoint_is_reported_as_given() {
    let e = endpoint(&spec(
        json!({"controlPlaneEndpoint": {"host": "10.0.0.5", "port": 6443}}),
    ))
    .unwrap()
    .unwrap();
    assert_eq!((e.host.as_str(), e.port), ("10.0.0.5", 6443));
    let named = spec(json!({"controlPlaneEndpoint": {"host": "api.example.com", "port": 443}}));
    assert!(endpoint(&named).unwrap().is_some());
}

#[test]
fn an_endpoint_is_required_and_must_be_an_address_or_a_host_name() {
    assert_eq!(
        invalid_field(endpoint(&spec(json!({})))),
        "spec.controlPlaneEndpoint"
    );
    let bad = spec(json!({"controlPlaneEndpoint": {"host": "not a host!", "port": 6443}}));
    assert_eq!(
        invalid_field(endpoint(&bad)),
        "spec.controlPlaneEndpoint.host"
    );
}

#[test]
fn the_machines_pools_may_not_hold_the_endpoint_address() {
    let inside = spec(json!({
        "controlPlaneEndpoint": {"host": "10.0.0.15", "port": 6443},
        "ipv4Config": pool("10.0.0.10-10.0.0.20", "10.0.0.1"),
    }));
    assert_eq!(
        invalid_field(endpoint(&inside)),
        "spec.ipv4Config.addresses[0]"
    );
}

#[test]
fn an_external_control_plane_is_waited_for_and_its_endpoint_never_reported() {
    let without = spec(json!({"externalManagedControlPlane": true}));
    assert!(waiting_for_endpoint(&without));
    assert!(endpoint(&without).unwrap().is_none());
    let set = spec(json!({"externalManagedControlPlane": true,
                          "controlPlaneEndpoint": {"host": "10.0.0.5", "port": 6443}}));
    assert!(!waiting_for_endpoint(&set));
    assert!(
        endpoint(&set).unwrap().is_none(),
        "it is the control plane's to write"
    );
}

#[test]
fn the_cluster_and_each_zone_report_their_pools() {
    let s = spec2(json!({
        "ipv4Config": pool("10.0.0.10-10.0.0.20", "10.0.0.1"),
        "ipv6Config": {"addresses": ["fd00::10-fd00::20"], "prefix": 64, "gateway": "fd00::1"},
        "zoneConfig": [
            {"zone": "Rack_A", "dnsServers": ["10.1.0.2"], "ipv4Config": pool("10.1.0.10-10.1.0.20", "10.1.0.1")},
            {"zone": "b", "dnsServers": ["10.2.0.2"]},
        ],
    }));
    let names: Vec<String> = ip_pools(&s).unwrap().into_iter().map(|p| p.name).collect();
    assert_eq!(names, ["v4-icip", "v6-icip", "rack-a-v4-icip"]);
}

#[test]
fn a_pool_of_the_wrong_family_or_shape_names_its_field() {
    let v6_in_v4 = spec(json!({"ipv4Config": pool("fd00::10-fd00::20", "fd00::1")}));
    assert_eq!(
        invalid_field(ip_pools(&v6_in_v4)),
        "spec.ipv4Config.addresses[0]"
    );
    let bad_gateway = spec(json!({"ipv4Config": pool("10.0.0.10-10.0.0.20", "fd00::1")}));
    assert_eq!(
        invalid_field(ip_pools(&bad_gateway)),
        "spec.ipv4Config.gateway"
    );
    let zone = spec2(json!({"zoneConfig": [
        {"zone": "z", "dnsServers": ["1.1.1.1"], "ipv4Config": {"addresses": [], "prefix": 24}},
    ]}));
    assert_eq!(
        invalid_field(ip_pools(&zone)),
        "spec.zoneConfig[0].ipv4Config.addresses"
    );
    let no_gateway = spec(json!({"ipv4Config": {"addresses": ["10.0.0.0/24"], "prefix": 24}}));
    assert_eq!(ip_pools(&no_gateway).unwrap()[0].gateway, None);
}

#[test]
fn host_names_are_dns_labels() {
    for ok in ["api", "api.example.com", "a-1.b"] {
        assert!(is_host_name(ok), "{ok}");
    }
    for bad in ["", "-a", "a_b", "a..b", "a b"] {
        assert!(!is_host_name(bad), "{bad}");
    }
}
