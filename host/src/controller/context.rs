//! What every reconcile needs: the client, the plugin, the kind it serves, events,
//! metrics, backoff, and the manager's options.
use std::sync::Arc;
use std::time::Duration;

use hyperplug_runtime::Plugin;
use hyperplug_runtime::bindings::identity::KindInfo;
use kube::Client;
use kube::api::ApiResource;
use kube::runtime::events::Recorder;

use super::backoff::Backoff;
use crate::metrics::Metrics;

/// Options of the manager that controllers read.
#[derive(Debug, Clone)]
pub struct ManagerOptions {
    /// `namespace/name` of the Secret used when an InfraCluster names none.
    pub default_credentials: Option<(String, String)>,
    /// Watch only this namespace.
    pub namespace: Option<String>,
    /// Reconciles in flight per controller.
    pub concurrency: u16,
    /// How often a provisioned object is re-checked for drift.
    pub resync: Duration,
}

impl Default for ManagerOptions {
    fn default() -> Self {
        ManagerOptions {
            default_credentials: None,
            namespace: None,
            concurrency: 16,
            resync: Duration::from_secs(300),
        }
    }
}

pub struct Context {
    pub client: Client,
    pub plugin: Plugin,
    pub kind: KindInfo,
    pub resource: ApiResource,
    /// The plugin's InfraCluster kind, which machines read their cluster spec from.
    pub cluster_kind: Option<ApiResource>,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub backoff: Backoff,
    pub options: ManagerOptions,
}

/// The finalizer on every object whose infrastructure we may create.
pub fn finalizer(plugin: &Plugin) -> String {
    format!("{}.infrastructure.hyperplug.dev", plugin.name())
}
