//! The Redfish plugin of hyperplug: bare-metal hosts behind Redfish BMCs, compiled to
//! a `wasm32-wasip2` component that the host loads. All Redfish knowledge lives here;
//! it never sees Kubernetes: it gets specs as JSON, the BMCs' credentials, and the
//! host's `blobs` (to serve a machine's bootstrap ISO to its BMC) and `claims` (so no
//! host is ever given to two machines). The bindings and what every plugin shares come
//! from `guest-kit`.
mod api;
mod cluster;
mod identity;
mod inventory;
mod machine;
mod spec;

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
