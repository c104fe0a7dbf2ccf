//! hyperplug's fuzz targets, as library functions the targets (`fuzz_targets/`) call
//! and the seeds' own tests (`cargo test` here) run on stable Rust:
//!
//! - [`lifecycle`]: the Proxmox plugin through a cluster and a machine's whole life,
//!   against PVE replies a [`script`] makes up (target `pve_replies`);
//! - [`specs`]: both plugins' spec parsing (target `specs`);
//! - [`nocloud`]: the NoCloud image writer and seed (target `nocloud_iso`);
//! - [`checks`]: what every result must be, whatever the input.
pub mod checks;
pub mod lifecycle;
pub mod nocloud;
pub mod script;
pub mod specs;

/// The Proxmox plugin, as the host calls it.
pub type Proxmox = guest_proxmox::ExportedPlugin;
