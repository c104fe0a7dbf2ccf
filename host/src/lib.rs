//! hyperplug: a Cluster API infrastructure provider host whose infrastructure logic runs
//! in sandboxed WebAssembly plugins. This crate knows Kubernetes and Cluster API; it
//! knows no hypervisor.
pub mod blob_server;
pub mod cli;
pub mod conformance;
pub mod controller;
pub mod crds;
pub mod health;
pub mod leader;
pub mod metrics;
pub mod runtime;
pub mod status;
pub mod telemetry;
