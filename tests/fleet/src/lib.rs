//! # fleet: machines at scale through the real management plane
//!
//! What the runs that drive many machines through real processes share (the benchmark
//! `scale-bench`, the `chaos` run): `hyperplug run` as its own process ([`host`]),
//! pve-sim's world of nodes with one template each ([`world`]), the management plane with
//! Cluster API's CRDs and the plugin's ([`plane`]), the objects Cluster API lays out for
//! clusters and machines ([`objects`]), waiting for the world ([`wait`]), the managers'
//! conversion webhook behind one address ([`webhook`]),
//! and finding or building the binaries ([`binaries`]).

pub mod binaries;
pub mod cpu;
pub mod host;
pub mod objects;
pub mod plane;
pub mod wait;
pub mod webhook;
pub mod world;

pub use host::{Host, HostSpec};

/// Unix milliseconds now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
