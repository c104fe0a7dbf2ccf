//! The first step of a machine's reconcile: through the gate every role passes
//! (`gate`: the object now, managed-by, its Machine, the Cluster, paused, failed for
//! good, its ownership id), so an object that goes no further costs few reads; then
//! what only a machine reads, cheapest and most decisive first, and the plugin's
//! request made of it.

use k8s_openapi::api::core::v1::Secret;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::Value;

use super::super::context::{Context, MachineContext};
use super::super::gate::{self, Gate, Owner, Passed, Rules};
use crate::controller::cache::watch::cached_or_read;
use crate::controller::call::credentials::{self, CallCredentials};
use crate::controller::call::outcome::{self, Failed};
use crate::controller::call::versions;
use crate::controller::error::{Error, Result};
use crate::controller::ipam::MachineClaims;
use crate::controller::objects::{self, Uid, capi_machine, finalizer, str_field};
use crate::controller::schedule::requeue;
use crate::controller::trust::ownership::Ownership;
use crate::controller::trust::{adoption, unverified};
use crate::controller::write::conditions::{self, Condition, READY, reasons};
use crate::status::{InfraMachineStatus, Status};
use hyperplug_runtime::Grants;
use hyperplug_runtime::bindings::machine::{BootstrapData, MachineRequest};

/// A machine ready for its plugin call.
pub struct Observed {
    /// The object as the API server has it now.
    pub obj: DynamicObject,
    pub uid: Uid,
    pub own: Api<DynamicObject>,
    pub deleting: bool,
    /// Its infrastructure was provisioned before (describe, not create).
    pub provisioned: bool,
    pub cluster_name: String,
    pub infra_cluster_name: String,
    /// The version of the credentials the call is made with (`CallCredentials::version`).
    pub credentials: String,
    /// The ownership annotation to write with the finalizer, when it is not stored yet.
    pub write_id: Option<String>,
    pub claims: MachineClaims,
    pub request: MachineRequest,
    /// What an administrator granted the object (the plugin asks through `grants`).
    pub grants: Grants,
    /// The status the API server stores, and the one this step continues from (newer
    /// when the last steps' statuses are held unwritten, see `coalesce`).
    pub stored: InfraMachineStatus,
    pub prev: InfraMachineStatus,
}

impl Observed {
    /// The next call continues from the step that left `next` (stored if `written`).
    pub fn follow(&mut self, next: InfraMachineStatus, written: bool) {
        self.request.state = next.progress.plugin_state.clone();
        if written {
            self.obj.data["status"] = serde_json::to_value(&next).expect("a status serializes");
            self.stored = next.clone();
        }
        self.prev = next;
    }
}

/// What observing came to: go on to the call, or this reconcile is over.
pub type Step = Gate<Box<Observed>>;

/// The gate's rules for machines: owned by a Machine, started from the cache when it
/// holds our last write, the Clusters from their cache, held statuses forgotten with a
/// machine found gone.
fn rules(ctx: &MachineContext) -> Rules<'_> {
    Rules {
        owner: Some("Machine"),
        from_cache: true,
        clusters: Some(&ctx.caches.clusters),
        held: Some(&ctx.coalescer),
    }
}

/// Through the gate, then what only a machine reads: its InfraCluster, whether it may
/// name what it names (adoption), its Machine, bootstrap data, claims and credentials,
/// its spec and its cluster's; and the plugin's request made of them.
pub async fn machine(ctx: &MachineContext, cached: &DynamicObject) -> Result<Step> {
    let mut go = match gate::pass(ctx, cached, &rules(ctx)).await? {
        Gate::Go(go) => go,
        Gate::Stop(action) => return Ok(Gate::Stop(action)),
    };
    let Owner {
        name: machine_name,
        cluster: cluster_name,
    } = go
        .owner
        .take()
        .expect("the gate passes a machine with its Machine");
    let (infra_cluster, cluster_id) = match infra_cluster(ctx, &go, &cluster_name).await? {
        Gate::Go(found) => found,
        Gate::Stop(action) => return Ok(Gate::Stop(action)),
    };
    let stored = InfraMachineStatus::of(&go.obj);
    let prev = ctx.coalescer.current(&go.uid, &stored);
    let state = prev.progress.plugin_state.as_deref();
    let grants = match granted(ctx, &go, state).await? {
        Gate::Go(grants) => grants,
        Gate::Stop(action) => return Ok(Gate::Stop(action)),
    };
    // Provisioned without a record of ours (taken over, or the state was lost): create
    // finds the infrastructure again (by our marker, or by what the plugin can prove),
    // and never makes it again.
    let unrecorded = adoption::unrecorded(&go.obj, state);
    let provisioned = objects::provisioned(&go.obj) && !unrecorded;
    let inputs = match inputs(ctx, &go, &machine_name, &infra_cluster, provisioned).await? {
        Gate::Go(inputs) => inputs,
        Gate::Stop(action) => return Ok(Gate::Stop(action)),
    };
    let specs = specs(ctx, &go.obj, &infra_cluster, unrecorded).await;
    let ((spec, plugin_status), cluster_spec) = match specs {
        Ok(specs) => specs,
        Err(e) => {
            let failed = outcome::fail(&ctx.writes, ctx.options.resync, &go.own, &go.obj, e, None);
            return failed.await.map(Gate::Stop);
        }
    };
    let Inputs {
        machine,
        bootstrap,
        claims,
        creds,
    } = inputs;
    let request = MachineRequest {
        machine: objects::object_ref(&go.obj, &go.id),
        cluster: objects::object_ref(&infra_cluster, &cluster_id),
        spec: spec.to_string(),
        cluster_spec: cluster_spec.to_string(),
        state: prev.progress.plugin_state.clone(),
        bootstrap,
        failure_domain: machine
            .as_ref()
            .and_then(|m| str_field(m, "spec.failureDomain"))
            .map(str::to_string),
        addresses: claims.bound(),
        credentials: creds.primary,
        more_credentials: creds.more,
        plugin_status: plugin_status.map(|s| s.to_string()),
    };
    Ok(Gate::Go(Box::new(Observed {
        credentials: creds.version,
        infra_cluster_name: infra_cluster.name_any(),
        obj: go.obj,
        uid: go.uid,
        own: go.own,
        deleting: go.deleting,
        provisioned,
        cluster_name,
        write_id: go.write_id,
        claims,
        request,
        grants,
        stored,
        prev,
    })))
}

/// The machine's InfraCluster (the one its Cluster references) and its proven ownership
/// id. Without one, a machine waits (and says so); a deleting one cannot reach its
/// infrastructure, and keeps its finalizer until the cluster is back.
async fn infra_cluster(
    ctx: &MachineContext,
    go: &Passed,
    cluster_name: &str,
) -> Result<Gate<(DynamicObject, String)>> {
    let ns = go.obj.namespace().unwrap_or_default();
    let infra_cluster = match (&go.cluster, &ctx.cluster_kind) {
        (Some(c), Some(kind)) => {
            match objects::reference_to(c, "spec.infrastructureRef", &kind.group, &kind.kind) {
                Some(name) => {
                    let cache = Some(&ctx.caches.infra_clusters);
                    cached_or_read(cache, &ctx.client, kind, &ns, &name).await?
                }
                None => None,
            }
        }
        _ => None,
    };
    let (Some(infra_cluster), Some(kind)) = (infra_cluster, &ctx.cluster_kind) else {
        if go.deleting {
            // Without its cluster we cannot reach the infrastructure; what was made (if any)
            // stays, and so does the finalizer, until the cluster is back.
            return Err(Error::Dependency(format!(
                "cluster {cluster_name} or its infrastructure is gone; cannot delete"
            )));
        }
        let c = Condition::new(
            READY,
            false,
            reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
            format!("waiting for cluster {cluster_name}"),
        );
        let waiting = [c, conditions::not_paused()];
        ctx.writes.conditions(&go.own, &go.obj, &waiting).await?;
        return Ok(Gate::Stop(Action::requeue(requeue::CLUSTER_INFRASTRUCTURE)));
    };
    match ctx.ownership.verify(kind, &infra_cluster).await {
        Ownership::Proven { id, .. } => Ok(Gate::Go((infra_cluster, id))),
        Ownership::Unproven { recheck, .. } => {
            let message = format!(
                "the ownership id of {} {} does not verify (see its Ready condition); nothing is done for its machines until it does",
                kind.kind,
                infra_cluster.name_any()
            );
            let refused =
                unverified::refuse(&ctx.writes, &ctx.plugin, &go.own, &go.obj, message, recheck);
            refused.await.map(Gate::Stop)
        }
    }
}

/// What an administrator granted the machine. Naming infrastructure the manager has
/// no record of: only where adoption is granted, or (moved here, by a plugin that asks
/// what is granted) to find what carries its own marker; else it is refused, and looked
/// at again later. See `adoption`. `state`: the plugin state this step continues from.
async fn granted(ctx: &MachineContext, go: &Passed, state: Option<&str>) -> Result<Gate<Grants>> {
    let grants = ctx.options.grants_for(&go.obj);
    let told_nothing_granted = ctx.plugin.asks_grants() && adoption::moved(&go.obj, &go.id);
    let gated = adoption::names_unrecorded(&go.obj, state) && !told_nothing_granted;
    if go.deleting || grants.adoption || !gated {
        return Ok(Gate::Go(grants));
    }
    let refused = adoption::not_granted(&ctx.writes, &go.own, &go.obj);
    refused.await.map(Gate::Stop)
}

/// What the call is made with besides the specs.
struct Inputs {
    /// Its Machine (the failure domain), and the bootstrap data it names.
    machine: Option<DynamicObject>,
    bootstrap: Option<BootstrapData>,
    claims: MachineClaims,
    creds: CallCredentials,
}

/// Read the machine's [`Inputs`], independent reads together: a reconcile's latency is
/// its chain of API round trips, and every machine is polled while its tasks run. A
/// machine that failed for good with these very credentials stops here, and one whose
/// credentials cannot be read shows why.
async fn inputs(
    ctx: &MachineContext,
    go: &Passed,
    machine_name: &str,
    infra_cluster: &DynamicObject,
    provisioned: bool,
) -> Result<Gate<Inputs>> {
    let ns = go.obj.namespace().unwrap_or_default();
    let machine = async {
        let cache = Some(&ctx.caches.machines);
        let machine =
            cached_or_read(cache, &ctx.client, &capi_machine(), &ns, machine_name).await?;
        // Bootstrap data is for provisioning: never read again once provisioned.
        let bootstrap = match &machine {
            Some(m) if !go.deleting && !provisioned => bootstrap_data(ctx, m).await?,
            _ => None,
        };
        Ok::<_, Error>((machine, bootstrap))
    };
    let may_have_claims = ctx.asked.may_have_claims(
        &go.uid,
        go.obj.finalizers().contains(&finalizer(&ctx.plugin)),
    );
    let claims = async {
        if go.deleting || !may_have_claims {
            Ok(MachineClaims::default())
        } else {
            MachineClaims::read(&ctx.client, &go.obj).await
        }
    };
    let creds = match &go.failed {
        // Only the credentials decide whether to go on.
        Failed::UnlessChanged(version) => {
            match credentials::for_cluster(ctx.credentials(), infra_cluster).await {
                Ok(creds) if creds.version == *version => {
                    return Ok(Gate::Stop(Action::requeue(ctx.options.resync)));
                }
                read => Some(read),
            }
        }
        _ => None,
    };
    let creds = async {
        match creds {
            Some(read) => read,
            None => credentials::for_cluster(ctx.credentials(), infra_cluster).await,
        }
    };
    let (creds, read) = tokio::join!(creds, async { tokio::try_join!(machine, claims) });
    let ((machine, bootstrap), claims) = read?;
    match creds {
        Ok(creds) => Ok(Gate::Go(Inputs {
            machine,
            bootstrap,
            claims,
            creds,
        })),
        Err(e) => outcome::fail(&ctx.writes, ctx.options.resync, &go.own, &go.obj, e, None)
            .await
            .map(Gate::Stop),
    }
}

/// The machine's spec (and, `unrecorded`, its status) and its InfraCluster's spec, in
/// the plugin's version.
async fn specs(
    ctx: &MachineContext,
    obj: &DynamicObject,
    infra_cluster: &DynamicObject,
    unrecorded: bool,
) -> Result<((Value, Option<Value>), Value)> {
    let cluster_kind = ctx
        .cluster_kind
        .as_ref()
        .expect("an InfraCluster was found");
    let (kind, version) = (&ctx.kind.kind, &ctx.resource.version);
    tokio::try_join!(
        versions::for_plugin(ctx.converter(), kind, version, obj, unrecorded),
        versions::spec_for_plugin(
            ctx.converter(),
            &cluster_kind.kind,
            &cluster_kind.version,
            infra_cluster
        ),
    )
}

async fn bootstrap_data(ctx: &Context, machine: &DynamicObject) -> Result<Option<BootstrapData>> {
    let Some(name) = str_field(machine, "spec.bootstrap.dataSecretName") else {
        return Ok(None);
    };
    let ns = machine.namespace().unwrap_or_default();
    let Some(secret) =
        objects::read(&Api::<Secret>::namespaced(ctx.client.clone(), &ns), name).await?
    else {
        return Ok(None);
    };
    let data = secret.data.unwrap_or_default();
    let Some(value) = data.get("value") else {
        return Ok(None);
    };
    let format = data
        .get("format")
        .map(|f| String::from_utf8_lossy(&f.0).to_string())
        .unwrap_or_else(|| "cloud-config".into());
    Ok(Some(BootstrapData {
        format,
        value: value.0.clone(),
    }))
}
