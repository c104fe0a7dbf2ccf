//! The Proxmox VE plugin of hyperplug: all Proxmox knowledge lives here, compiled to a
//! `wasm32-wasip2` component that the host loads. It never sees Kubernetes: it gets
//! specs as JSON and answers with the shapes of `wit/`. The bindings and what every
//! plugin shares come from `guest-kit`.
mod api;
mod cluster;
mod identity;
mod machine;
mod ranges;
pub mod spec;

/// The plugin: implements `identity`, `cluster` (in `cluster.rs`) and `machine` (in
/// `machine/`). Public (hidden) only so that `fuzz/` can call it natively.
#[doc(hidden)]
pub struct Plugin;

guest_kit::export!(Plugin);

impl guest_kit::identity::Guest for Plugin {
    fn info() -> guest_kit::identity::PluginInfo {
        identity::info()
    }
}
