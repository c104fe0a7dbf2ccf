//! The in-cluster IPAM provider (with webhooks on loopback) allocates an address for an
//! IPAddressClaim, and the cert-manager controller issues a self-signed certificate, both
//! as plain processes against the plane (no pods, no kubelet).

use std::time::Instant;

use anyhow::Result;
use kube_world::{Plane, PlaneOpts};

use crate::support::wait_until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_cluster_ipam_provider_allocates_an_address_for_a_claim() {
    let plane = Plane::start(PlaneOpts::default())
        .await
        .expect("starting the plane");
    if let Err(e) = allocate(&plane).await {
        panic!("{e:#}");
    }
}

async fn allocate(plane: &Plane) -> Result<()> {
    plane.install_capi_crds().await?;
    let t = Instant::now();
    let mgr = plane.start_ipam().await?;
    eprintln!(
        "IPAM provider ready in {:?}, log {}",
        t.elapsed(),
        mgr.log.display()
    );
    let ns = plane.namespace("ipam").await?;
    plane
        .apply_yaml_in(
            &ns,
            r#"
apiVersion: ipam.cluster.x-k8s.io/v1alpha2
kind: InClusterIPPool
metadata:
  name: pool
spec:
  addresses: ["192.168.77.10-192.168.77.20"]
  prefix: 24
  gateway: 192.168.77.1
---
apiVersion: ipam.cluster.x-k8s.io/v1beta2
kind: IPAddressClaim
metadata:
  name: claim
spec:
  poolRef:
    apiGroup: ipam.cluster.x-k8s.io
    kind: InClusterIPPool
    name: pool
"#,
        )
        .await?;
    let claims = plane
        .dynamic_api("ipam.cluster.x-k8s.io/v1beta2", "IPAddressClaim", Some(&ns))
        .await?;
    let claim = wait_until(plane, &claims, "claim", "claim bound", |c| {
        c.data["status"]["addressRef"]["name"].is_string()
    })
    .await?;
    let address_name = claim.data["status"]["addressRef"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let addresses = plane
        .dynamic_api("ipam.cluster.x-k8s.io/v1beta2", "IPAddress", Some(&ns))
        .await?;
    let address = addresses.get(&address_name).await?;
    eprintln!("allocated: {}", address.data["spec"]);
    assert_eq!(address.data["spec"]["address"], "192.168.77.10");
    assert_eq!(address.data["spec"]["prefix"], 24);
    assert_eq!(address.data["spec"]["gateway"], "192.168.77.1");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cert_manager_controller_issues_a_self_signed_certificate() {
    let plane = Plane::start(PlaneOpts::default())
        .await
        .expect("starting the plane");
    if let Err(e) = issue(&plane).await {
        panic!("{e:#}");
    }
}

async fn issue(plane: &Plane) -> Result<()> {
    let mgr = plane.start_cert_manager().await?;
    eprintln!("cert-manager log {}", mgr.log.display());
    let ns = plane.namespace("cert-manager-issue").await?;
    plane
        .apply_yaml_in(
            &ns,
            r#"
apiVersion: cert-manager.io/v1
kind: Issuer
metadata:
  name: selfsigned
spec:
  selfSigned: {}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: webhook
spec:
  secretName: webhook-tls
  dnsNames: ["webhook.example.svc"]
  issuerRef:
    name: selfsigned
    kind: Issuer
"#,
        )
        .await?;
    let certs = plane
        .dynamic_api("cert-manager.io/v1", "Certificate", Some(&ns))
        .await?;
    wait_until(plane, &certs, "webhook", "Certificate Ready", |c| {
        c.data["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
    })
    .await?;
    let secrets = plane.dynamic_api("v1", "Secret", Some(&ns)).await?;
    let secret = secrets.get("webhook-tls").await?;
    assert!(secret.data["data"]["tls.crt"].is_string());
    assert!(secret.data["data"]["tls.key"].is_string());
    Ok(())
}
