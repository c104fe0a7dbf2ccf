//! The Proxmox VE plugin of hyperplug: all Proxmox knowledge lives here, compiled to a
//! `wasm32-wasip2` component that the host loads. It never sees Kubernetes: it gets
//! specs as JSON and answers with the shapes of `wit/`.
mod api;
mod cluster;
mod http;
mod identity;
mod machine;
mod schema;
mod spec;

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
    let de = &mut serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." || path.is_empty() {
            root.to_string()
        } else {
            format!("{root}.{path}")
        };
        PluginError::InvalidSpec(InvalidSpec {
            field,
            message: e.into_inner().to_string(),
        })
    })
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
