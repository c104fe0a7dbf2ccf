//! The host's integration tests, one binary: each module was a test file of its own, and
//! its tests keep their names (`cargo test -p hyperplug --test it proxmox::`).
//! One binary links wasmtime and kube once instead of once per file.
// why: the 100-line rule (clippy.toml) is for production code; a test reads best as
// the story it tells, start to end.
#![allow(clippy::too_many_lines)]
mod support;

mod conformance_kit;
mod conformance_redfish;
mod controller_cluster;
mod controller_crash;
mod controller_machine;
mod conversion;
mod hostile_plugin;
mod leader_election;
mod lease_claims;
mod object_bound;
mod oci_plugins;
mod plugin_loading;
mod plugin_outputs;
mod plugin_upgrade;
mod proxmox;
mod proxmox_via_runtime;
mod pve_tenants;
mod redfish_machine;
mod security;
mod takeover;
mod tenancy;
mod tenant_memory;
mod two_plugins;
mod watch_filter;
