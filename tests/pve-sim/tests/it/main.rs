//! pve-sim's integration tests, one binary: each module was a test file of its own, and
//! its tests keep their names (`cargo test -p pve-sim --test it vm_lifecycle::`).
mod common;

mod binary;
mod cluster_views;
mod error_paths;
mod faults_and_inspection;
mod nocloud_and_addresses;
mod permissions;
mod pve_fidelity;
mod schema_shapes;
mod tickets_and_csrf;
mod vm_lifecycle;
