//! The Proxmox VE plugin of hyperplug: all Proxmox knowledge lives here, compiled to a
//! `wasm32-wasip2` component that the host loads. It never sees Kubernetes: it gets
//! specs as JSON and answers with the shapes of `wit/`. The bindings and what every
//! plugin shares come from `guest-kit`.
mod api;
mod cluster;
mod conversion;
mod identity;
mod machine;
mod observer;
mod ranges;
mod resources;
pub mod spec;

/// The plugin: implements `identity`, `cluster` (in `cluster.rs`), `machine` (in
/// `machine/`), `conversion` (in `conversion.rs`, over `spec::convert`) and `observer`
/// (in `observer.rs`: the tasks machines wait for). Public (hidden) only so that
/// `fuzz/` can call it natively.
#[doc(hidden)]
pub struct Plugin;

guest_kit::export!(Plugin);

impl guest_kit::identity::Guest for Plugin {
    fn info() -> guest_kit::identity::PluginInfo {
        identity::info()
    }
}

impl guest_kit::conversion::Guest for Plugin {
    fn convert(
        req: guest_kit::conversion::ConversionRequest,
    ) -> Result<guest_kit::conversion::Converted, guest_kit::types::PluginError> {
        conversion::convert(req)
    }
}

impl guest_kit::observer::Guest for Plugin {
    fn observe(
        req: guest_kit::observer::ObserveRequest,
    ) -> Result<guest_kit::observer::Observation, guest_kit::types::PluginError> {
        observer::observe(req)
    }
}
