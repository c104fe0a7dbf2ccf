//! Plugins built against `hyperplug:provider@0.2.x` (`wit/v0.2/`, frozen): their own
//! bindings, and the conversion of their shapes to and from the current ones, so the
//! rest of the host speaks 0.3 only.
//!
//! What 0.2 cannot say takes its 0.3 meaning of "as before": progress names no waits
//! and is durable (stored before the next call, as 0.2 hosts did), every kind has one
//! API version (the plugin's `api-version`, served and stored) and nothing to convert,
//! no plugin status fields, and an address request's `<Kind>/<name>` pool is a
//! reference in `ipam.cluster.x-k8s.io`. Their `log`, `blobs` and `claims` imports are
//! the same services as 0.3's. They have no observer and import no reservations.
use crate::bindings::{cluster, conversion, identity, machine, observer, types};
use crate::state::CallState;

/// The 0.2 bindings, generated like the current ones (async exports, `claims` async).
pub mod v0_2 {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.2",
        world: "plugin",
        imports: {
            "hyperplug:provider/claims.acquire": async | trappable,
            "hyperplug:provider/claims.holder": async | trappable,
            "hyperplug:provider/claims.held": async | trappable,
            "hyperplug:provider/claims.release": async | trappable,
            default: trappable,
        },
        exports: { default: async },
    });
}

use v0_2::exports::hyperplug::provider::{
    cluster as old_cluster, identity as old_identity, machine as old_machine,
};
use v0_2::hyperplug::provider::{
    blobs as old_blobs, claims as old_claims, log as old_log, types as old_types,
};

/// The API group of Cluster API's IPAM pools, which 0.2's `<Kind>/<name>` names.
const IPAM_GROUP: &str = "ipam.cluster.x-k8s.io";

// Requests: current shapes to 0.2's (what 0.2 has no field for is left out).

fn object_ref(r: &types::ObjectRef) -> old_types::ObjectRef {
    old_types::ObjectRef {
        namespace: r.namespace.clone(),
        name: r.name.clone(),
        uid: r.uid.clone(),
    }
}

fn credentials(c: &types::Credentials) -> old_types::Credentials {
    old_types::Credentials {
        endpoint: c.endpoint.clone(),
        token: c.token.clone(),
        secret: c.secret.clone(),
        ca_bundle: c.ca_bundle.clone(),
        fingerprint: c.fingerprint.clone(),
        insecure: c.insecure,
    }
}

fn named_credentials(list: &[types::NamedCredentials]) -> Vec<old_types::NamedCredentials> {
    list.iter()
        .map(|n| old_types::NamedCredentials {
            name: n.name.clone(),
            credentials: credentials(&n.credentials),
        })
        .collect()
}

pub fn cluster_request(r: &cluster::ClusterRequest) -> old_cluster::ClusterRequest {
    old_cluster::ClusterRequest {
        cluster: object_ref(&r.cluster),
        spec: r.spec.clone(),
        state: r.state.clone(),
        credentials: credentials(&r.credentials),
        more_credentials: named_credentials(&r.more_credentials),
    }
}

pub fn machine_request(r: &machine::MachineRequest) -> old_machine::MachineRequest {
    old_machine::MachineRequest {
        machine: object_ref(&r.machine),
        cluster: object_ref(&r.cluster),
        spec: r.spec.clone(),
        cluster_spec: r.cluster_spec.clone(),
        state: r.state.clone(),
        bootstrap: r.bootstrap.as_ref().map(|b| old_machine::BootstrapData {
            format: b.format.clone(),
            value: b.value.clone(),
        }),
        failure_domain: r.failure_domain.clone(),
        addresses: r
            .addresses
            .iter()
            .map(|a| old_machine::AllocatedAddress {
                device: a.device.clone(),
                address: a.address.clone(),
                prefix: a.prefix,
                gateway: a.gateway.clone(),
            })
            .collect(),
        credentials: credentials(&r.credentials),
        more_credentials: named_credentials(&r.more_credentials),
    }
}

pub fn template_request(r: &machine::TemplateRequest) -> old_machine::TemplateRequest {
    old_machine::TemplateRequest {
        template: object_ref(&r.template),
        spec: r.spec.clone(),
        credentials: r.credentials.as_ref().map(credentials),
    }
}

// Results: 0.2's shapes to the current ones.

pub fn plugin_error(e: old_types::PluginError) -> types::PluginError {
    match e {
        old_types::PluginError::Transient(t) => {
            types::PluginError::Transient(types::TransientError {
                message: t.message,
                retry_after_ms: t.retry_after_ms,
            })
        }
        old_types::PluginError::Terminal(t) => types::PluginError::Terminal(types::TerminalError {
            reason: t.reason,
            message: t.message,
        }),
        old_types::PluginError::InvalidSpec(i) => {
            types::PluginError::InvalidSpec(types::InvalidSpec {
                field: i.field,
                message: i.message,
            })
        }
    }
}

/// 0.2 progress: no waits, and durable (0.2 hosts stored every state at once).
pub fn progress(p: old_types::Progress) -> types::Progress {
    types::Progress {
        state: p.state,
        phase: p.phase,
        message: p.message,
        requeue_after_ms: p.requeue_after_ms,
        waits: vec![],
        durable: true,
    }
}

/// A 0.2 plugin's identity: each kind in the one version `api-version`, served and
/// stored, with no status fields of the plugin's own.
pub fn plugin_info(i: old_identity::PluginInfo) -> identity::PluginInfo {
    let api_version = i.api_version;
    identity::PluginInfo {
        name: i.name,
        version: i.version,
        group: i.group,
        kinds: i
            .kinds
            .into_iter()
            .map(|k| identity::KindInfo {
                kind: k.kind,
                role: match k.role {
                    old_identity::KindRole::InfraCluster => identity::KindRole::InfraCluster,
                    old_identity::KindRole::InfraClusterTemplate => {
                        identity::KindRole::InfraClusterTemplate
                    }
                    old_identity::KindRole::InfraMachine => identity::KindRole::InfraMachine,
                    old_identity::KindRole::InfraMachineTemplate => {
                        identity::KindRole::InfraMachineTemplate
                    }
                },
                versions: vec![identity::KindVersion {
                    name: api_version.clone(),
                    spec_schema: k.spec_schema,
                    status_schema: None,
                    served: true,
                    storage: true,
                    deprecation_warning: None,
                }],
                columns: k
                    .columns
                    .into_iter()
                    .map(|c| identity::PrinterColumn {
                        name: c.name,
                        column_type: c.column_type,
                        json_path: c.json_path,
                        description: c.description,
                    })
                    .collect(),
            })
            .collect(),
        api_version,
        capabilities: i.capabilities,
    }
}

pub fn cluster_status(s: old_cluster::ClusterStatus) -> cluster::ClusterStatus {
    cluster::ClusterStatus {
        progress: progress(s.progress),
        ready: s.ready,
        control_plane_endpoint: s.control_plane_endpoint.map(|e| cluster::Endpoint {
            host: e.host,
            port: e.port,
        }),
        failure_domains: s
            .failure_domains
            .into_iter()
            .map(|f| cluster::FailureDomain {
                name: f.name,
                control_plane: f.control_plane,
                attributes: f.attributes,
            })
            .collect(),
        ip_pools: s
            .ip_pools
            .into_iter()
            .map(|p| cluster::IpPool {
                name: p.name,
                addresses: p.addresses,
                prefix: p.prefix,
                gateway: p.gateway,
            })
            .collect(),
        details: s.details,
        plugin_status: None,
    }
}

/// 0.2's pool: a reported pool's name, or `<Kind>/<name>` of an IPAM pool.
pub fn address_pool(pool: String) -> machine::AddressPool {
    match pool.split_once('/') {
        Some((kind, name)) => machine::AddressPool::Reference(machine::PoolRef {
            api_group: IPAM_GROUP.into(),
            kind: kind.into(),
            name: name.into(),
        }),
        None => machine::AddressPool::Reported(pool),
    }
}

pub fn machine_status(s: old_machine::MachineStatus) -> machine::MachineStatus {
    machine::MachineStatus {
        progress: progress(s.progress),
        ready: s.ready,
        provider_id: s.provider_id,
        addresses: s
            .addresses
            .into_iter()
            .map(|a| machine::MachineAddress {
                address_type: match a.address_type {
                    old_machine::AddressType::InternalIp => machine::AddressType::InternalIp,
                    old_machine::AddressType::ExternalIp => machine::AddressType::ExternalIp,
                    old_machine::AddressType::Hostname => machine::AddressType::Hostname,
                    old_machine::AddressType::InternalDns => machine::AddressType::InternalDns,
                    old_machine::AddressType::ExternalDns => machine::AddressType::ExternalDns,
                },
                address: a.address,
            })
            .collect(),
        failure_domain: s.failure_domain,
        address_requests: s
            .address_requests
            .into_iter()
            .map(|r| machine::AddressRequest {
                device: r.device,
                pool: address_pool(r.pool),
                claim_suffix: None,
            })
            .collect(),
        needs_bootstrap: s.needs_bootstrap,
        drift: s.drift.map(|d| match d {
            old_machine::Drift::Missing(t) => machine::Drift::Missing(t),
            old_machine::Drift::Foreign(t) => machine::Drift::Foreign(t),
            old_machine::Drift::Changed(t) => machine::Drift::Changed(t),
        }),
        details: s.details,
        plugin_status: None,
    }
}

pub fn template_status(s: old_machine::TemplateStatus) -> machine::TemplateStatus {
    machine::TemplateStatus {
        capacity: s.capacity,
        node_info: s.node_info,
    }
}

/// `Result<old, old error>` to `Result<new, new error>`.
pub fn result<T, U>(
    r: Result<T, old_types::PluginError>,
    f: impl FnOnce(T) -> U,
) -> Result<U, types::PluginError> {
    r.map(f).map_err(plugin_error)
}

/// Conversion for a 0.2 plugin: its kinds have one version each, so there is nothing to
/// convert; a request for another version is refused as the 0.3 contract says.
pub fn convert(
    info: &identity::PluginInfo,
    req: &conversion::ConversionRequest,
) -> Result<conversion::Converted, types::PluginError> {
    let terminal = |reason: &str, message: String| {
        types::PluginError::Terminal(types::TerminalError {
            reason: reason.into(),
            message,
        })
    };
    let Some(kind) = info.kinds.iter().find(|k| k.kind == req.kind) else {
        return Err(terminal(
            "UnknownKind",
            format!("plugin {} serves no kind `{}`", info.name, req.kind),
        ));
    };
    for version in [&req.from_version, &req.to_version] {
        if kind.version(version).is_none() {
            return Err(terminal(
                "UnknownVersion",
                format!(
                    "{} has no version `{version}` (only {})",
                    req.kind, info.api_version
                ),
            ));
        }
    }
    Ok(conversion::Converted {
        object: req.object.clone(),
        preserved: req.preserved.clone(),
    })
}

/// A 0.2 plugin names no waits: nothing to observe.
pub fn observation() -> observer::Observation {
    observer::Observation { fired: vec![] }
}

// The imports of 0.2 plugins: the same services as 0.3's.

impl old_types::Host for CallState {}

impl old_log::Host for CallState {
    fn log(
        &mut self,
        level: old_log::Level,
        message: String,
        fields: Vec<(String, String)>,
    ) -> wasmtime::Result<()> {
        use crate::bindings::hyperplug::provider::log::{Host, Level};
        let level = match level {
            old_log::Level::Trace => Level::Trace,
            old_log::Level::Debug => Level::Debug,
            old_log::Level::Info => Level::Info,
            old_log::Level::Warn => Level::Warn,
            old_log::Level::Error => Level::Error,
        };
        Host::log(self, level, message, fields)
    }
}

impl old_blobs::Host for CallState {
    fn publish(
        &mut self,
        name: String,
        content: Vec<u8>,
        ttl_seconds: u32,
    ) -> wasmtime::Result<Result<String, String>> {
        crate::bindings::hyperplug::provider::blobs::Host::publish(self, name, content, ttl_seconds)
    }

    fn withdraw(&mut self, name: String) -> wasmtime::Result<()> {
        crate::bindings::hyperplug::provider::blobs::Host::withdraw(self, name)
    }
}

impl old_claims::Host for CallState {
    async fn acquire(&mut self, key: String) -> wasmtime::Result<Result<Option<String>, String>> {
        crate::bindings::hyperplug::provider::claims::Host::acquire(self, key).await
    }

    async fn holder(&mut self, key: String) -> wasmtime::Result<Result<Option<String>, String>> {
        crate::bindings::hyperplug::provider::claims::Host::holder(self, key).await
    }

    async fn held(&mut self) -> wasmtime::Result<Result<Vec<String>, String>> {
        crate::bindings::hyperplug::provider::claims::Host::held(self).await
    }

    async fn release(&mut self, key: String) -> wasmtime::Result<Result<(), String>> {
        crate::bindings::hyperplug::provider::claims::Host::release(self, key).await
    }
}

/// Link the 0.2 imports (log, blobs, claims) next to the current ones.
pub fn add_to_linker(linker: &mut wasmtime::component::Linker<CallState>) -> wasmtime::Result<()> {
    use wasmtime::component::HasSelf;
    old_log::add_to_linker::<_, HasSelf<_>>(linker, |s: &mut CallState| s)?;
    old_blobs::add_to_linker::<_, HasSelf<_>>(linker, |s: &mut CallState| s)?;
    old_claims::add_to_linker::<_, HasSelf<_>>(linker, |s: &mut CallState| s)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_named_by_kind_is_a_reference_in_the_ipam_group_and_a_bare_name_is_reported() {
        assert!(matches!(
            address_pool("GlobalInClusterIPPool/shared".into()),
            machine::AddressPool::Reference(p)
                if p.api_group == IPAM_GROUP && p.kind == "GlobalInClusterIPPool" && p.name == "shared"
        ));
        assert!(matches!(
            address_pool("ipv4".into()),
            machine::AddressPool::Reported(name) if name == "ipv4"
        ));
    }

    #[test]
    fn progress_of_0_2_waits_for_nothing_and_is_stored_at_once() {
        let p = progress(old_types::Progress {
            state: "{}".into(),
            phase: "Cloning".into(),
            message: "m".into(),
            requeue_after_ms: Some(1_000),
        });
        assert!(p.waits.is_empty());
        assert!(p.durable);
        assert_eq!(p.requeue_after_ms, Some(1_000));
    }

    #[test]
    fn a_0_2_kind_has_its_one_version_served_and_stored_and_nothing_to_convert() {
        let info = plugin_info(old_identity::PluginInfo {
            name: "old".into(),
            version: "1".into(),
            group: "infrastructure.cluster.x-k8s.io".into(),
            api_version: "v1alpha1".into(),
            kinds: vec![old_identity::KindInfo {
                kind: "OldMachine".into(),
                role: old_identity::KindRole::InfraMachine,
                spec_schema: r#"{"type":"object"}"#.into(),
                columns: vec![],
            }],
            capabilities: vec![],
        });
        let v = &info.kinds[0].versions;
        assert_eq!(v.len(), 1);
        assert!(v[0].name == "v1alpha1" && v[0].served && v[0].storage);
        let req = |to: &str| conversion::ConversionRequest {
            kind: "OldMachine".into(),
            from_version: "v1alpha1".into(),
            to_version: to.into(),
            object: r#"{"spec":{}}"#.into(),
            preserved: None,
        };
        assert_eq!(
            convert(&info, &req("v1alpha1")).unwrap().object,
            r#"{"spec":{}}"#
        );
        assert!(matches!(
            convert(&info, &req("v1alpha2")),
            Err(types::PluginError::Terminal(t)) if t.reason == "UnknownVersion"
        ));
    }
}
