//! # kube-world: real Kubernetes for hyperplug's integration tests
//!
//! Starts etcd + kube-apiserver (+ kube-controller-manager) built from their Go modules by
//! `scripts/build-tools.sh`, on free loopback ports with a generated admin kubeconfig;
//! installs CRDs (Cluster API's and the IPAM provider's from the pinned module releases,
//! and any YAML such as `hyperplug crds` output); starts the Cluster API / IPAM managers as
//! processes with their webhooks on loopback; applies YAML with server-side apply (no
//! kubectl). Every process dies with the [`Plane`] (drop), or with the test binary
//! (`PR_SET_PDEATHSIG`).
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use kube_world::{Plane, PlaneOpts};
//! let plane = Plane::start(PlaneOpts::default()).await?;
//! plane.install_capi_crds().await?;
//! let ns = plane.namespace("my-test").await?;
//! plane.apply_yaml_in(&ns, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n").await?;
//! # Ok(()) }
//! ```
//!
//! Set `KUBE_WORLD_KEEP=1` to keep a plane's directory (logs, kubeconfig) after a passing
//! test; it is always kept, and printed, when the test panics.

pub mod apply;
pub mod certs;
pub mod managers;
pub mod plane;
pub mod ports;
pub mod process;
pub mod registry;
pub mod tools;

pub use managers::{Manager, ManagerSpec, WebhookServer};
pub use plane::{ADMIN_USER, AUDIT_WRITES_POLICY, Plane, PlaneOpts, audit_writes_and_gets_by};
pub use ports::free_port;
pub use registry::{CosignKeys, OciRegistry};
pub use tools::Tools;
