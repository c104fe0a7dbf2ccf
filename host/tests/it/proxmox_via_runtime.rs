//! The bundled Proxmox plugin makes a real call through the granted HTTP import:
//! `GET /api2/json/version` on pve-sim over HTTPS, with each TLS policy.
use hyperplug_runtime::{Credentials, Limits, PluginError};
use pve_sim::Config;
use serde_json::json;

use crate::support::{cluster_request, credentials, load, pinned, seed_cluster, sim_with};

async fn reconcile(
    creds: Credentials,
) -> Result<hyperplug_runtime::bindings::cluster::ClusterStatus, PluginError> {
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    plugin
        .reconcile_cluster(&cluster_request(seed_cluster(), creds))
        .await
        .expect("call completes")
}

#[tokio::test]
async fn reconcile_reaches_pve_sim_with_a_pinned_fingerprint() {
    let sim = sim_with(Config::fast()).await;
    let status = reconcile(pinned(&sim)).await.expect("reconcile");
    assert!(status.ready);
    let endpoint = status.control_plane_endpoint.expect("endpoint");
    assert_eq!(
        (endpoint.host.as_str(), endpoint.port),
        ("192.168.1.230", 6443)
    );
    let domains: Vec<_> = status
        .failure_domains
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(domains, ["pve1"]);
    assert_eq!(status.ip_pools.len(), 1);
    assert_eq!(
        status.ip_pools[0].addresses,
        ["192.168.1.220-192.168.1.229"]
    );
    let counters = sim.state().counters();
    assert_eq!(
        counters.get("GET /version").copied(),
        Some(1),
        "{counters:?}"
    );
}

#[tokio::test]
async fn reconcile_trusts_a_ca_bundle() {
    let sim = sim_with(Config::fast()).await;
    let creds = Credentials {
        ca_bundle: Some(sim.ca_pem().to_string()),
        ..credentials(sim.base_url())
    };
    assert!(reconcile(creds).await.expect("reconcile").ready);
}

#[tokio::test]
async fn a_wrong_fingerprint_is_a_terminal_tls_error() {
    let sim = sim_with(Config::fast()).await;
    let wrong = vec!["AB"; 32].join(":");
    let creds = Credentials {
        fingerprint: Some(wrong),
        ..credentials(sim.base_url())
    };
    match reconcile(creds).await {
        Err(PluginError::Terminal(e)) => {
            assert_eq!(e.reason, "TLSVerificationFailed");
            assert!(
                e.message.contains("does not match the pinned"),
                "{}",
                e.message
            );
        }
        other => panic!("expected a terminal TLS error, got {other:?}"),
    }
    assert!(
        sim.state().counters().is_empty(),
        "no request may pass an unverified TLS session"
    );
}

#[tokio::test]
async fn system_roots_do_not_trust_a_self_signed_server() {
    let sim = sim_with(Config::fast()).await;
    assert!(matches!(
        reconcile(credentials(sim.base_url())).await,
        Err(PluginError::Terminal(_))
    ));
}

#[tokio::test]
async fn a_bad_token_is_a_terminal_authentication_error() {
    let sim = sim_with(Config::fast()).await;
    let creds = Credentials {
        insecure: true,
        secret: "wrong".into(),
        ..credentials(sim.base_url())
    };
    match reconcile(creds).await {
        Err(PluginError::Terminal(e)) => {
            assert_eq!(e.reason, "AuthenticationFailed", "{}", e.message)
        }
        other => panic!("expected AuthenticationFailed, got {other:?}"),
    }
}

#[tokio::test]
async fn an_unreachable_endpoint_is_transient() {
    let creds = Credentials {
        insecure: true,
        ..credentials("https://127.0.0.1:1")
    };
    assert!(matches!(
        reconcile(creds).await,
        Err(PluginError::Transient(_))
    ));
}

#[tokio::test]
async fn a_spec_without_endpoint_names_the_field() {
    let (_rt, plugin) = load("proxmox", Limits::default()).await;
    let req = cluster_request(
        json!({"allowedNodes": ["pve1"]}),
        credentials("https://127.0.0.1:1"),
    );
    match plugin.reconcile_cluster(&req).await.unwrap() {
        Err(PluginError::InvalidSpec(e)) => assert_eq!(e.field, "spec.controlPlaneEndpoint"),
        other => panic!("expected invalid spec, got {other:?}"),
    }
    let req = cluster_request(
        json!({"allowedNodes": "pve1"}),
        credentials("https://127.0.0.1:1"),
    );
    match plugin.reconcile_cluster(&req).await.unwrap() {
        Err(PluginError::InvalidSpec(e)) => assert_eq!(e.field, "spec.allowedNodes"),
        other => panic!("expected invalid spec, got {other:?}"),
    }
}
