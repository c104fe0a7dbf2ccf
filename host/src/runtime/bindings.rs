//! Host-side bindings generated from `wit/` (the only contract with plugins).
//!
//! Every export is async so a plugin call never blocks a tokio worker; `log` is a plain
//! synchronous import.
wasmtime::component::bindgen!({
    path: "../wit",
    world: "plugin",
    imports: { default: trappable },
    exports: { default: async },
    additional_derives: [serde::Serialize],
});

pub use self::exports::hyperplug::provider::{cluster, identity, machine};
pub use self::hyperplug::provider::types;
