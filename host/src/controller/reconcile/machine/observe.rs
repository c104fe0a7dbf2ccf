//! The first step of a machine's reconcile: read what it needs, cheapest and most
//! decisive first, so an object that goes no further (externally managed, without an
//! owner yet, paused, failed on this generation) costs few reads; then build the
//! plugin's request.

use k8s_openapi::api::core::v1::Secret;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};

use super::super::context::{Context, MachineContext};
use crate::controller::cache::watch::cached_or_read;
use crate::controller::call::outcome::{self, Failed};
use crate::controller::call::{credentials, versions};
use crate::controller::error::{Error, Result};
use crate::controller::ipam::MachineClaims;
use crate::controller::objects::{self, api, capi_cluster, capi_machine, finalizer, str_field};
use crate::controller::schedule::requeue;
use crate::controller::trust::ownership::Ownership;
use crate::controller::trust::{adoption, unverified};
use crate::controller::write::conditions::{self, Condition, PAUSED, READY, reasons};
use crate::controller::write::patch;
use crate::status::{InfraMachineStatus, Progressing, Status};
use hyperplug_runtime::Grants;
use hyperplug_runtime::bindings::machine::{BootstrapData, MachineRequest};

/// A machine ready for its plugin call.
pub struct Observed {
    /// The object as the API server has it now.
    pub obj: DynamicObject,
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

/// What observing came to: go on, or this reconcile is over.
pub enum Step {
    Call(Box<Observed>),
    Done(Action),
}

pub async fn machine(ctx: &MachineContext, cached: &DynamicObject) -> Result<Step> {
    let ns = cached.namespace().unwrap_or_default();
    let own = api(&ctx.client, &ctx.resource, &ns);
    // The cache lags our own writes; it is read again unless it holds our last one.
    let current = ctx.writes.written.is_current(
        cached.uid().as_deref().unwrap_or_default(),
        cached.resource_version().as_deref(),
    );
    let read = if current {
        Some(cached.clone())
    } else {
        let read = objects::fresh(&own, cached).await?;
        match &read {
            Some(obj) => ctx
                .writes
                .written
                .read_at(&obj.uid().unwrap_or_default(), obj.resource_version()),
            None => {
                let uid = cached.uid().unwrap_or_default();
                ctx.coalescer.forget(&uid);
                ctx.writes.written.forget(&uid);
            }
        }
        read
    };
    let Some(obj) = read else {
        return Ok(Step::Done(Action::await_change()));
    };
    if objects::has_annotation(&obj, objects::MANAGED_BY_ANNOTATION) {
        return Ok(Step::Done(Action::await_change()));
    }
    let deleting = obj.metadata.deletion_timestamp.is_some();
    let Some(machine_name) = objects::capi_owner(&obj, "Machine") else {
        if deleting {
            // Never owned by a Machine: nothing can have been created.
            patch::remove_finalizer(&own, &obj, &finalizer(&ctx.plugin)).await?;
        }
        // Else the Machine controller sets itself as owner soon; its watch brings us back.
        return Ok(Step::Done(Action::await_change()));
    };
    if deleting && !obj.finalizers().contains(&finalizer(&ctx.plugin)) {
        return Ok(Step::Done(Action::await_change()));
    }
    let Some(cluster_name) = objects::cluster_name(&obj) else {
        return Ok(Step::Done(Action::await_change()));
    };
    let caches = &ctx.caches;
    let cluster = cached_or_read(
        Some(&caches.clusters),
        &ctx.client,
        &capi_cluster(),
        &ns,
        &cluster_name,
    )
    .await?;
    // Pause: no plugin call at all, and say so.
    if let Some(why) = objects::paused_why(&obj, cluster.as_ref()) {
        let written = patch::conditions(
            &own,
            &obj,
            &[Condition::new(PAUSED, true, reasons::PAUSED, why)],
        )
        .await;
        ctx.writes.written.record(&obj, &written);
        written?;
        return Ok(Step::Done(Action::await_change()));
    }
    // Failed for good on this generation: nothing more to read until the spec changes
    // (or, at the resync period, the credentials it was called with).
    let failed = outcome::still_failing(&Progressing::of(&obj), obj.metadata.generation, deleting);
    if failed == Failed::Stop {
        return Ok(Step::Done(Action::await_change()));
    }

    let infra_cluster = match (&cluster, &ctx.cluster_kind) {
        (Some(c), Some(kind)) => {
            match objects::reference_to(c, "spec.infrastructureRef", &kind.group, &kind.kind) {
                Some(name) => {
                    cached_or_read(Some(&caches.infra_clusters), &ctx.client, kind, &ns, &name)
                        .await?
                }
                None => None,
            }
        }
        _ => None,
    };
    let Some(infra_cluster) = infra_cluster else {
        if deleting {
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
        let written = patch::conditions(&own, &obj, &[c, conditions::not_paused()]).await;
        ctx.writes.written.record(&obj, &written);
        written?;
        return Ok(Step::Done(Action::requeue(requeue::CLUSTER_INFRASTRUCTURE)));
    };
    // Whose infrastructure this is: proven by the manager's MAC, never by what a user
    // wrote. Unproven, the plugin is not called at all.
    let (machine_id, write_id) = match ctx.ownership.verify(&ctx.resource, &obj).await {
        Ownership::Proven { id, write } => (id, write),
        Ownership::Unproven { message, recheck } => {
            return unverified::refuse(&ctx.writes, &ctx.plugin, &own, &obj, message, recheck)
                .await
                .map(Step::Done);
        }
    };
    let cluster_kind = ctx
        .cluster_kind
        .as_ref()
        .expect("an InfraCluster was found");
    let cluster_id = match ctx.ownership.verify(cluster_kind, &infra_cluster).await {
        Ownership::Proven { id, .. } => id,
        Ownership::Unproven { recheck, .. } => {
            let message = format!(
                "the ownership id of {} {} does not verify (see its Ready condition); nothing is done for its machines until it does",
                cluster_kind.kind,
                infra_cluster.name_any()
            );
            return unverified::refuse(&ctx.writes, &ctx.plugin, &own, &obj, message, recheck)
                .await
                .map(Step::Done);
        }
    };

    let stored = InfraMachineStatus::of(&obj);
    let prev = ctx
        .coalescer
        .current(obj.uid().as_deref().unwrap_or_default(), &stored);
    // Naming infrastructure the manager has no record of: only where an administrator
    // granted adoption, or (moved here, by a plugin that asks what is granted) to find
    // what carries its own marker. See `adoption`.
    let state = prev.progress.plugin_state.as_deref();
    let grants = ctx.options.grants_for(&obj);
    let told_nothing_granted = ctx.plugin.asks_grants() && adoption::moved(&obj, &machine_id);
    let gated = adoption::names_unrecorded(&obj, state) && !told_nothing_granted;
    if !deleting && !grants.adoption && gated {
        return adoption::not_granted(&ctx.writes, &own, &obj)
            .await
            .map(Step::Done);
    }
    // Provisioned without a record of ours (taken over, or the state was lost): create
    // finds the infrastructure again (by our marker, or by what the plugin can prove),
    // and never makes it again.
    let unrecorded = adoption::unrecorded(&obj, state);
    let provisioned = objects::provisioned(&obj) && !unrecorded;

    // Independent reads go out together: a reconcile's latency is its chain of API
    // round trips, and every machine is polled while its tasks run.
    let machine = async {
        let machine = cached_or_read(
            Some(&caches.machines),
            &ctx.client,
            &capi_machine(),
            &ns,
            &machine_name,
        )
        .await?;
        // Bootstrap data is for provisioning: never read again once provisioned.
        let bootstrap = match &machine {
            Some(m) if !deleting && !provisioned => bootstrap_data(ctx, m).await?,
            _ => None,
        };
        Ok::<_, Error>((machine, bootstrap))
    };
    let may_have_claims = ctx.asked.may_have_claims(
        obj.uid().as_deref().unwrap_or_default(),
        obj.finalizers().contains(&finalizer(&ctx.plugin)),
    );
    let claims = async {
        if deleting || !may_have_claims {
            Ok(MachineClaims::default())
        } else {
            MachineClaims::read(&ctx.client, &obj).await
        }
    };
    let creds = match failed {
        // Only the credentials decide whether to go on.
        Failed::UnlessChanged(version) => {
            match credentials::for_cluster(ctx.credentials(), &infra_cluster).await {
                Ok(creds) if creds.version == version => {
                    return Ok(Step::Done(Action::requeue(ctx.options.resync)));
                }
                read => Some(read),
            }
        }
        _ => None,
    };
    let creds = async {
        match creds {
            Some(read) => read,
            None => credentials::for_cluster(ctx.credentials(), &infra_cluster).await,
        }
    };
    let (creds, read) = tokio::join!(creds, async { tokio::try_join!(machine, claims) });
    let ((machine, bootstrap), claims) = read?;
    let creds = match creds {
        Ok(creds) => creds,
        Err(e) => {
            return outcome::fail(&ctx.writes, ctx.options.resync, &own, &obj, e, None)
                .await
                .map(Step::Done);
        }
    };
    let version = creds.version.clone();
    let specs = tokio::try_join!(
        versions::for_plugin(
            ctx.converter(),
            &ctx.kind.kind,
            &ctx.resource.version,
            &obj,
            unrecorded
        ),
        versions::spec_for_plugin(
            ctx.converter(),
            &cluster_kind.kind,
            &cluster_kind.version,
            &infra_cluster
        ),
    );
    let ((spec, plugin_status), cluster_spec) = match specs {
        Ok(specs) => specs,
        Err(e) => {
            return outcome::fail(&ctx.writes, ctx.options.resync, &own, &obj, e, None)
                .await
                .map(Step::Done);
        }
    };
    let request = MachineRequest {
        machine: objects::object_ref(&obj, &machine_id),
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
    Ok(Step::Call(Box::new(Observed {
        credentials: version,
        infra_cluster_name: infra_cluster.name_any(),
        obj,
        own,
        deleting,
        provisioned,
        cluster_name,
        write_id,
        claims,
        request,
        grants,
        stored,
        prev,
    })))
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
