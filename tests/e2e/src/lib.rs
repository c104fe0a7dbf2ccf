//! # e2e: the real Cluster API flow against hyperplug and pve-sim
//!
//! Everything a platform team does with a Proxmox provider, on one machine and offline:
//! `clusterctl init --infrastructure proxmox --ipam in-cluster` against a real API server
//! (from an offline repository rendered from the providers' Go modules, [`repo`]), the
//! Cluster API core, kubeadm bootstrap and control-plane and in-cluster IPAM managers as
//! processes beside it, the hyperplug manager with the bundled plugin
//! ([`management::Management`]), pve-sim in place of Proxmox VE, then
//! `clusterctl generate cluster` from the seed's `capmox.env` and `kubectl apply`.
//!
//! No VM boots, so [`workload::WorkloadSim`] does on their behalf the two things Cluster
//! API waits for: the workload API server that `kubeadm init` would start on the
//! control-plane endpoint, and the Node each kubelet registers with its providerID.
//!
//! Used by the tests in `tests/` and by the `quickstart` binary behind `scripts/demo.sh`.

pub mod capi;
pub mod management;
pub mod progress;
pub mod quickstart;
pub mod repo;
pub mod workload;

pub use management::{Management, ProxmoxEndpoint};
pub use quickstart::Quickstart;
pub use workload::WorkloadSim;
