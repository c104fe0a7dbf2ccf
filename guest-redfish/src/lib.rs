//! The Redfish plugin of hyperplug: bare-metal hosts behind Redfish BMCs, compiled to
//! a `wasm32-wasip2` component that the host loads. All Redfish knowledge lives here;
//! it never sees Kubernetes: it gets specs as JSON, the BMCs' credentials, and the
//! host's `blobs` (to serve a machine's bootstrap ISO to its BMC) and `claims` (so no
//! host is ever given to two machines).
mod api;
mod cluster;
mod identity;
mod inventory;
mod machine;
mod spec;

mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "plugin",
        generate_all,
    });
}

use bindings::exports::hyperplug::provider;
use bindings::hyperplug::provider::types::{
    InvalidSpec, PluginError, TerminalError, TransientError,
};

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

fn terminal(reason: &str, message: impl Into<String>) -> PluginError {
    PluginError::Terminal(TerminalError {
        reason: reason.into(),
        message: message.into(),
    })
}

fn transient(message: impl Into<String>, retry_after_ms: Option<u64>) -> PluginError {
    PluginError::Transient(TransientError {
        message: message.into(),
        retry_after_ms,
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
