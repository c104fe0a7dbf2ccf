//! Host-side bindings generated from `wit/` (the only contract with plugins).
//!
//! Every export is async so a plugin call never blocks a tokio worker; `log` and
//! `blobs` are plain synchronous imports, `claims` is async (it reaches Kubernetes).
wasmtime::component::bindgen!({
    path: "../../wit",
    world: "plugin",
    imports: {
        "hyperplug:provider/claims.acquire": async | trappable,
        "hyperplug:provider/claims.holder": async | trappable,
        "hyperplug:provider/claims.held": async | trappable,
        "hyperplug:provider/claims.release": async | trappable,
        default: trappable,
    },
    exports: { default: async },
    additional_derives: [serde::Serialize],
});

pub use self::exports::hyperplug::provider::{cluster, identity, machine};
pub use self::hyperplug::provider::types;

impl identity::KindRole {
    /// The role's name in the Cluster API contract, as `hyperplug inspect` prints it.
    pub fn name(self) -> &'static str {
        match self {
            identity::KindRole::InfraCluster => "InfraCluster",
            identity::KindRole::InfraClusterTemplate => "InfraClusterTemplate",
            identity::KindRole::InfraMachine => "InfraMachine",
            identity::KindRole::InfraMachineTemplate => "InfraMachineTemplate",
        }
    }
}
