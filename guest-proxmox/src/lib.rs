//! The Proxmox VE plugin: all Proxmox knowledge of hyperplug lives here.
mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "plugin",
        generate_all,
    });
}

use bindings::exports::hyperplug::provider::{cluster, identity, machine};
use bindings::hyperplug::provider::types::PluginError;

struct Plugin;

impl identity::Guest for Plugin {
    fn info() -> identity::PluginInfo {
        identity::PluginInfo {
            name: "proxmox".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            group: "infrastructure.cluster.x-k8s.io".into(),
            api_version: "v1alpha1".into(),
            kinds: vec![],
            capabilities: vec![],
        }
    }
}

impl cluster::Guest for Plugin {
    fn reconcile(_req: cluster::ClusterRequest) -> Result<cluster::ClusterStatus, PluginError> {
        let _ = std::fs::read("/etc/passwd");
        Err(PluginError::Transient(bindings::hyperplug::provider::types::TransientError { message: "x".into(), retry_after_ms: None }))
    }
    fn delete(_req: cluster::ClusterRequest) -> Result<Option<bindings::hyperplug::provider::types::Progress>, PluginError> {
        Ok(None)
    }
}

impl machine::Guest for Plugin {
    fn create(_req: machine::MachineRequest) -> Result<machine::MachineStatus, PluginError> { todo!() }
    fn describe(_req: machine::MachineRequest) -> Result<machine::MachineStatus, PluginError> { todo!() }
    fn delete(_req: machine::MachineRequest) -> Result<Option<bindings::hyperplug::provider::types::Progress>, PluginError> { todo!() }
    fn describe_template(_req: machine::TemplateRequest) -> Result<machine::TemplateStatus, PluginError> { todo!() }
}

bindings::export!(Plugin with_types_in bindings);
