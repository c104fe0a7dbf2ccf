//! Host-side bindings generated from `wit/` (the only contract with plugins): those of
//! the current `hyperplug:provider@0.3.1`, which the whole host speaks. Plugins built
//! against 0.2.x are called through `compat`, which converts their shapes to these.
//!
//! Every export is async so a plugin call never blocks a tokio worker; `log`, `blobs`
//! and `reservations` are plain synchronous imports, `claims` is async (it reaches
//! Kubernetes).
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

pub use self::exports::hyperplug::provider::{cluster, conversion, identity, machine, observer};
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

impl identity::KindInfo {
    /// The kind's version `name`, if it declares one.
    pub fn version(&self, name: &str) -> Option<&identity::KindVersion> {
        self.versions.iter().find(|v| v.name == name)
    }
}

/// Lower-case plural of a kind, the name its resources (and CRD) go by
/// (`ExampleMachine` → `examplemachines`): a plugin may not declare two kinds with one.
pub fn plural(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    if lower.ends_with('s') {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    }
}

impl identity::PluginInfo {
    /// The `spec` schema (JSON) of `kind` in the version calls speak (`api-version`);
    /// the loader made sure every kind has it.
    pub fn spec_schema<'a>(&'a self, kind: &'a identity::KindInfo) -> &'a str {
        kind.version(&self.api_version)
            .map(|v| v.spec_schema.as_str())
            .unwrap_or("{}")
    }
}

impl machine::AddressPool {
    /// How the pool reads in names and messages: a reported pool by its name, a
    /// reference as `<Kind>/<name>` (what 0.2's `address-request.pool` said).
    pub fn label(&self) -> String {
        match self {
            machine::AddressPool::Reported(name) => name.clone(),
            machine::AddressPool::Reference(r) => format!("{}/{}", r.kind, r.name),
        }
    }
}
