//! A plugin's exports in the current contract's shapes, whichever contract it speaks:
//! the one place that tells WIT versions apart. [`Exports`] is what the host calls;
//! the current bindings implement it as they are, 0.2's by converting through
//! `compat`. [`Pre`] and [`Instance`] hold a plugin by its contract, and
//! [`with_exports!`] runs one call against whichever it is, so `plugin.rs` writes
//! each call once.
use wasmtime::Store;
use wasmtime::component::{Component, InstancePre};

use crate::bindings::{
    Plugin as Current, PluginPre as CurrentPre, cluster, conversion, identity, machine, observer,
    types,
};
use crate::compat::{
    self,
    v0_2::{Plugin as V0_2, PluginPre as V0_2Pre},
};
use crate::state::CallState;
use crate::wit::WitMajor;

/// What a plugin's export answers: the plugin's own error, or a trap.
type Answer<T> = wasmtime::Result<Result<T, types::PluginError>>;

/// The exports the host calls, in the current shapes. Written as `async fn` for the
/// two bindings below only: [`with_exports!`] calls them on the concrete type, so
/// each future stays `Send` for the caller.
pub(crate) trait Exports {
    async fn info(&self, store: &mut Store<CallState>) -> wasmtime::Result<identity::PluginInfo>;
    async fn reconcile_cluster(
        &self,
        store: &mut Store<CallState>,
        req: &cluster::ClusterRequest,
    ) -> Answer<cluster::ClusterStatus>;
    async fn delete_cluster(
        &self,
        store: &mut Store<CallState>,
        req: &cluster::ClusterRequest,
    ) -> Answer<Option<types::Progress>>;
    async fn create_machine(
        &self,
        store: &mut Store<CallState>,
        req: &machine::MachineRequest,
    ) -> Answer<machine::MachineStatus>;
    async fn describe_machine(
        &self,
        store: &mut Store<CallState>,
        req: &machine::MachineRequest,
    ) -> Answer<machine::MachineStatus>;
    async fn delete_machine(
        &self,
        store: &mut Store<CallState>,
        req: &machine::MachineRequest,
    ) -> Answer<Option<types::Progress>>;
    async fn describe_template(
        &self,
        store: &mut Store<CallState>,
        req: &machine::TemplateRequest,
    ) -> Answer<machine::TemplateStatus>;
    async fn convert(
        &self,
        store: &mut Store<CallState>,
        req: &conversion::ConversionRequest,
    ) -> Answer<conversion::Converted>;
    async fn observe(
        &self,
        store: &mut Store<CallState>,
        req: &observer::ObserveRequest,
    ) -> Answer<observer::Observation>;
}

impl Exports for Current {
    async fn info(&self, store: &mut Store<CallState>) -> wasmtime::Result<identity::PluginInfo> {
        self.hyperplug_provider_identity().call_info(store).await
    }
    async fn reconcile_cluster(
        &self,
        store: &mut Store<CallState>,
        req: &cluster::ClusterRequest,
    ) -> Answer<cluster::ClusterStatus> {
        let cluster = self.hyperplug_provider_cluster();
        cluster.call_reconcile(store, req).await
    }
    async fn delete_cluster(
        &self,
        store: &mut Store<CallState>,
        req: &cluster::ClusterRequest,
    ) -> Answer<Option<types::Progress>> {
        self.hyperplug_provider_cluster()
            .call_delete(store, req)
            .await
    }
    async fn create_machine(
        &self,
        store: &mut Store<CallState>,
        req: &machine::MachineRequest,
    ) -> Answer<machine::MachineStatus> {
        self.hyperplug_provider_machine()
            .call_create(store, req)
            .await
    }
    async fn describe_machine(
        &self,
        store: &mut Store<CallState>,
        req: &machine::MachineRequest,
    ) -> Answer<machine::MachineStatus> {
        let machine = self.hyperplug_provider_machine();
        machine.call_describe(store, req).await
    }
    async fn delete_machine(
        &self,
        store: &mut Store<CallState>,
        req: &machine::MachineRequest,
    ) -> Answer<Option<types::Progress>> {
        self.hyperplug_provider_machine()
            .call_delete(store, req)
            .await
    }
    async fn describe_template(
        &self,
        store: &mut Store<CallState>,
        req: &machine::TemplateRequest,
    ) -> Answer<machine::TemplateStatus> {
        let machine = self.hyperplug_provider_machine();
        machine.call_describe_template(store, req).await
    }
    async fn convert(
        &self,
        store: &mut Store<CallState>,
        req: &conversion::ConversionRequest,
    ) -> Answer<conversion::Converted> {
        let conversion = self.hyperplug_provider_conversion();
        conversion.call_convert(store, req).await
    }
    async fn observe(
        &self,
        store: &mut Store<CallState>,
        req: &observer::ObserveRequest,
    ) -> Answer<observer::Observation> {
        let observer = self.hyperplug_provider_observer();
        observer.call_observe(store, req).await
    }
}

/// 0.2's exports: each request converted down, each answer up (`compat`).
impl Exports for V0_2 {
    async fn info(&self, store: &mut Store<CallState>) -> wasmtime::Result<identity::PluginInfo> {
        let info = self.hyperplug_provider_identity().call_info(store).await?;
        Ok(compat::plugin_info(info))
    }
    async fn reconcile_cluster(
        &self,
        store: &mut Store<CallState>,
        req: &cluster::ClusterRequest,
    ) -> Answer<cluster::ClusterStatus> {
        let old = compat::cluster_request(req);
        let r = self
            .hyperplug_provider_cluster()
            .call_reconcile(store, &old);
        Ok(compat::result(r.await?, compat::cluster_status))
    }
    async fn delete_cluster(
        &self,
        store: &mut Store<CallState>,
        req: &cluster::ClusterRequest,
    ) -> Answer<Option<types::Progress>> {
        let old = compat::cluster_request(req);
        let r = self.hyperplug_provider_cluster().call_delete(store, &old);
        Ok(compat::result(r.await?, |p| p.map(compat::progress)))
    }
    async fn create_machine(
        &self,
        store: &mut Store<CallState>,
        req: &machine::MachineRequest,
    ) -> Answer<machine::MachineStatus> {
        let old = compat::machine_request(req);
        let r = self.hyperplug_provider_machine().call_create(store, &old);
        Ok(compat::result(r.await?, compat::machine_status))
    }
    async fn describe_machine(
        &self,
        store: &mut Store<CallState>,
        req: &machine::MachineRequest,
    ) -> Answer<machine::MachineStatus> {
        let old = compat::machine_request(req);
        let r = self.hyperplug_provider_machine().call_describe(store, &old);
        Ok(compat::result(r.await?, compat::machine_status))
    }
    async fn delete_machine(
        &self,
        store: &mut Store<CallState>,
        req: &machine::MachineRequest,
    ) -> Answer<Option<types::Progress>> {
        let old = compat::machine_request(req);
        let r = self.hyperplug_provider_machine().call_delete(store, &old);
        Ok(compat::result(r.await?, |p| p.map(compat::progress)))
    }
    async fn describe_template(
        &self,
        store: &mut Store<CallState>,
        req: &machine::TemplateRequest,
    ) -> Answer<machine::TemplateStatus> {
        let old = compat::template_request(req);
        let machine = self.hyperplug_provider_machine();
        let r = machine.call_describe_template(store, &old);
        Ok(compat::result(r.await?, compat::template_status))
    }
    /// 0.2's kinds have one version: nothing to convert, answered from its identity.
    /// (`Plugin::convert` answers without a call; this is the same answer if asked.)
    async fn convert(
        &self,
        store: &mut Store<CallState>,
        req: &conversion::ConversionRequest,
    ) -> Answer<conversion::Converted> {
        let info = self.info(store).await?;
        Ok(compat::convert(&info, req))
    }
    /// 0.2 names no waits: nothing fires (`Plugin::observe` does not even call).
    async fn observe(
        &self,
        _store: &mut Store<CallState>,
        _req: &observer::ObserveRequest,
    ) -> Answer<observer::Observation> {
        Ok(Ok(compat::observation()))
    }
}

/// A plugin's compiled, linked component, by the contract it speaks.
#[derive(Clone)]
pub(crate) enum Pre {
    Current(CurrentPre<CallState>),
    V0_2(V0_2Pre<CallState>),
}

/// One instance of a plugin, by the contract it speaks: the exports of one call.
pub(crate) enum Instance {
    Current(Current),
    V0_2(V0_2),
}

impl Pre {
    /// The bindings of `major`'s contract over a linked component.
    pub(crate) fn new(major: WitMajor, pre: InstancePre<CallState>) -> wasmtime::Result<Pre> {
        Ok(match major {
            WitMajor::Current => Pre::Current(CurrentPre::new(pre)?),
            WitMajor::V0_2 => Pre::V0_2(V0_2Pre::new(pre)?),
        })
    }

    pub(crate) fn wit(&self) -> WitMajor {
        match self {
            Pre::Current(_) => WitMajor::Current,
            Pre::V0_2(_) => WitMajor::V0_2,
        }
    }

    pub(crate) fn component(&self) -> &Component {
        match self {
            Pre::Current(p) => p.instance_pre().component(),
            Pre::V0_2(p) => p.instance_pre().component(),
        }
    }

    /// A fresh instance in `store` (one call's).
    pub(crate) async fn instantiate(
        &self,
        store: &mut Store<CallState>,
    ) -> wasmtime::Result<Instance> {
        Ok(match self {
            Pre::Current(p) => Instance::Current(p.instantiate_async(store).await?),
            Pre::V0_2(p) => Instance::V0_2(p.instantiate_async(store).await?),
        })
    }
}

/// `with_exports!(instance, e => body)`: `body` with `e` bound to the instance's
/// [`Exports`], whichever contract it speaks. A macro, not a function: the body is
/// compiled once per contract's bindings (a closure cannot be generic over them).
macro_rules! with_exports {
    ($instance:expr, $exports:ident => $body:expr) => {
        match $instance {
            $crate::exports::Instance::Current($exports) => $body,
            $crate::exports::Instance::V0_2($exports) => $body,
        }
    };
}
pub(crate) use with_exports;
