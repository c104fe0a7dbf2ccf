//! What `clusterctl generate provider --infrastructure proxmox` yields from the rendered
//! release folder (with the seed's `capmox.env`) is accepted as is by a real API server
//! (`kubectl apply --server-side --validate=strict`): Namespace, CRDs, RBAC, credentials
//! Secret, webhook Service and certificate, finalizer webhook, and Deployment. Nothing runs it (no kubelet here); the schemas are what is
//! checked.
use kube_world::{Plane, PlaneOpts};
use packaging::{Clusterctl, Release, kubectl_apply};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_provider_components_are_accepted_as_is_by_the_api_server() {
    let release = Release::render().await.unwrap();
    let config = release.clusterctl_config().unwrap().display().to_string();
    let components = Clusterctl::with_capmox_env()
        .unwrap()
        .run(&[
            "generate",
            "provider",
            "--infrastructure",
            "proxmox",
            "--config",
            &config,
        ])
        .unwrap();
    let plane = Plane::start(PlaneOpts::default())
        .await
        .expect("starting the plane");
    // The webhook's Certificate and Issuer are cert-manager's kinds (`clusterctl init`
    // installs cert-manager first).
    plane
        .install_crds_dir(plane.tools().cert_manager_dir().join("deploy/crds"))
        .await
        .expect("cert-manager's CRDs");
    let out = kubectl_apply(&plane, "hyperplug-system", &components).unwrap();
    for applied in [
        "namespace/hyperplug-system",
        "customresourcedefinition.apiextensions.k8s.io/proxmoxmachines.infrastructure.cluster.x-k8s.io",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/hyperplug-proxmox-finalizer",
        "serviceaccount/hyperplug-manager",
        "clusterrole.rbac.authorization.k8s.io/hyperplug-manager",
        "clusterrolebinding.rbac.authorization.k8s.io/hyperplug-manager",
        "role.rbac.authorization.k8s.io/hyperplug-manager",
        "rolebinding.rbac.authorization.k8s.io/hyperplug-manager",
        "secret/hyperplug-proxmox-credentials",
        "service/hyperplug-webhook-service",
        "issuer.cert-manager.io/hyperplug-selfsigned-issuer",
        "certificate.cert-manager.io/hyperplug-serving-cert",
        "deployment.apps/hyperplug-controller-manager",
    ] {
        assert!(
            out.contains(&format!("{applied} serverside-applied")),
            "{applied} not in:\n{out}"
        );
    }
    let deployment = plane
        .dynamic_api("apps/v1", "Deployment", Some("hyperplug-system"))
        .await
        .unwrap()
        .get("hyperplug-controller-manager")
        .await
        .unwrap();
    assert_eq!(
        deployment.data["spec"]["template"]["spec"]["containers"][0]["name"],
        "manager"
    );
}
