//! hyperplug: a Cluster API infrastructure provider host whose infrastructure logic runs
//! in sandboxed WebAssembly plugins. This crate knows Kubernetes and Cluster API; it
//! knows no hypervisor. It reads cli → controller → runtime (`hyperplug-runtime`); the
//! conformance kit (`hyperplug-conformance`) drives plugins through the runtime alone;
//! both make their kinds' CRDs and status with `hyperplug-kinds`.
pub mod admission;
pub mod cli;
pub mod controller;
pub mod conversion;
pub mod health;
pub mod heap;
pub mod kept;
pub mod leader;
pub mod lease_claims;
pub mod listen;
pub mod metrics;
pub mod oci;
pub mod status;
pub mod telemetry;
pub mod webhook;
