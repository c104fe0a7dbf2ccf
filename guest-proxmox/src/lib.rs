//! The Proxmox VE plugin of hyperplug: all Proxmox knowledge lives here, compiled to a
//! `wasm32-wasip2` component that the host loads. It never sees Kubernetes: it gets
//! specs as JSON and answers with the shapes of `wit/`.
mod api;
mod cluster;
mod identity;
mod machine;
mod spec;

use guest_kit::{http, schema};

mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "plugin",
        generate_all,
    });
}

use bindings::exports::hyperplug::provider;
use bindings::hyperplug::provider::types::{InvalidSpec, PluginError};

struct Plugin;

bindings::export!(Plugin with_types_in bindings);

/// Parse a spec, naming the field that does not fit.
fn parse_spec<T: serde::de::DeserializeOwned>(json: &str, root: &str) -> Result<T, PluginError> {
    guest_kit::parse_spec(json, root)
        .map_err(|(field, message)| PluginError::InvalidSpec(InvalidSpec { field, message }))
}

fn invalid(field: &str, message: impl Into<String>) -> PluginError {
    PluginError::InvalidSpec(InvalidSpec {
        field: field.into(),
        message: message.into(),
    })
}

/// Log through the host.
fn log(level: bindings::hyperplug::provider::log::Level, message: &str, fields: &[(&str, String)]) {
    let fields: Vec<(String, String)> = fields
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    bindings::hyperplug::provider::log::log(level, message, &fields);
}

impl provider::identity::Guest for Plugin {
    fn info() -> provider::identity::PluginInfo {
        identity::info()
    }
}
