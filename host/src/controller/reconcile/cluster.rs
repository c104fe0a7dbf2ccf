//! The InfraCluster reconciler: validate the infrastructure, publish the control-plane
//! endpoint and failure domains, realize the IP pools. Its steps: the gate every role
//! passes (`gate`) → a deleting one's pools drain → credentials and spec → (delete) →
//! finalizer → call the plugin → pools and endpoint → persist its report (`report`) →
//! come back at the resync period.
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use serde_json::json;

use super::context::Context;
use super::gate::{self, Gate, Passed, Rules};
use crate::controller::call::outcome::{self, Failed, Outcome};
use crate::controller::call::{credentials, versions};
use crate::controller::error::{Error, Result};
use crate::controller::ipam;
use crate::controller::objects::{self, finalizer, str_field};
use crate::controller::schedule::requeue;
use crate::controller::trust::adoption;
use crate::controller::write::conditions::{self, Condition, PROVISIONED, READY, reasons};
use crate::controller::write::events::{Event, Report};
use crate::status::{FailureDomain, InfraClusterStatus, Initialization, Progressing, Status};
use hyperplug_runtime::bindings::cluster::{ClusterRequest, ClusterStatus};
use hyperplug_runtime::bindings::types::Progress;

/// The gate's rules for InfraClusters: no owner asked for (one without a Cluster is
/// reconciled on its own), always read afresh, the Cluster read (this controller caches
/// no Clusters), no statuses held.
const RULES: Rules<'static> = Rules {
    owner: None,
    from_cache: false,
    clusters: None,
    held: None,
};

pub async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action> {
    let Passed {
        obj,
        own,
        deleting,
        failed,
        id,
        write_id,
        ..
    } = match gate::pass(&ctx, &obj, &RULES).await? {
        Gate::Go(go) => go,
        Gate::Stop(action) => return Ok(action),
    };
    // Before the credentials and the spec are read: a drain wait looks every second.
    if deleting && let Some(wait) = pools_draining(&ctx, &obj).await? {
        return Ok(wait);
    }
    let (req, version) = match request(&ctx, &own, &obj, &id, failed).await? {
        Gate::Go(request) => request,
        Gate::Stop(action) => return Ok(action),
    };
    if deleting {
        return delete(&ctx, &own, &obj, &req, &version).await;
    }
    ctx.writes
        .take_ownership(
            &own,
            &obj,
            &finalizer(&ctx.plugin),
            &adoption::previous_finalizer(&ctx.resource),
            write_id.as_deref(),
        )
        .await?;
    let call = "cluster.reconcile";
    let result = ctx
        .metrics
        .plugin_call(ctx.plugin.name(), call, ctx.plugin.reconcile_cluster(&req))
        .await;
    let status = match outcome::of(ctx.plugin.name(), call, result) {
        Outcome::Done(s) => s,
        Outcome::Failed(err) => {
            return outcome::fail(
                &ctx.writes,
                ctx.options.resync,
                &own,
                &obj,
                err,
                Some(&version),
            )
            .await;
        }
    };
    // The endpoint first: the status then describes the generation it makes.
    let mut generation = obj.metadata.generation;
    if let Some(ep) = &status.control_plane_endpoint
        && str_field(&obj, "spec.controlPlaneEndpoint.host").is_none()
    {
        let endpoint = json!({"host": ep.host, "port": ep.port});
        if let Some(patched) = ctx
            .writes
            .spec_field(&own, &obj, "controlPlaneEndpoint", endpoint, None)
            .await?
        {
            generation = patched.metadata.generation;
        }
    }
    let report = report(
        &InfraClusterStatus::of(&obj),
        &status,
        generation.unwrap_or(0),
        &conditions::now(),
    );
    ctx.writes.status(&own, &obj, &report.status).await?;
    ctx.writes.events.publish_all(&obj, &report.events).await;
    ipam::ensure_pools(&ctx.client, &ctx.resource, &obj, &status.ip_pools).await?;
    ctx.backoff.reset(&objects::key(&obj));
    Ok(requeue::after_cluster_step(
        &status.progress,
        ctx.options.resync,
    ))
}

/// The plugin's request for `obj` (ownership id `id`), and the version of the
/// credentials it carries; unless it failed for good with these very credentials, or
/// they or its spec cannot be read (then shown on the object).
async fn request(
    ctx: &Context,
    own: &kube::Api<DynamicObject>,
    obj: &DynamicObject,
    id: &str,
    failed: Failed,
) -> Result<Gate<(ClusterRequest, String)>> {
    let creds = match credentials::for_cluster(ctx.credentials(), obj).await {
        Ok(creds) => creds,
        Err(e) => {
            let failed = outcome::fail(&ctx.writes, ctx.options.resync, own, obj, e, None);
            return failed.await.map(Gate::Stop);
        }
    };
    if failed == Failed::UnlessChanged(creds.version.clone()) {
        return Ok(Gate::Stop(Action::requeue(ctx.options.resync)));
    }
    let (kind, version) = (&ctx.kind.kind, &ctx.resource.version);
    let spec = match versions::spec_for_plugin(ctx.converter(), kind, version, obj).await {
        Ok(spec) => spec,
        Err(e) => {
            let failed = outcome::fail(&ctx.writes, ctx.options.resync, own, obj, e, None);
            return failed.await.map(Gate::Stop);
        }
    };
    let req = ClusterRequest {
        cluster: objects::object_ref(obj, id),
        spec: spec.to_string(),
        state: str_field(obj, "status.pluginState").map(str::to_string),
        credentials: creds.primary,
        more_credentials: creds.more,
        plugin_status: None,
    };
    Ok(Gate::Go((req, creds.version)))
}

async fn delete(
    ctx: &Context,
    own: &kube::Api<DynamicObject>,
    obj: &DynamicObject,
    req: &ClusterRequest,
    credentials: &str,
) -> Result<Action> {
    let call = "cluster.delete";
    let result = ctx
        .metrics
        .plugin_call(ctx.plugin.name(), call, ctx.plugin.delete_cluster(req))
        .await;
    match outcome::of(ctx.plugin.name(), call, result) {
        Outcome::Done(None) => {
            // What the plugin published or claimed for the cluster goes with it.
            let runtime = ctx.plugin.runtime();
            runtime.blobs().withdraw_object(&req.cluster.uid);
            runtime
                .claims()
                .release_all(&req.cluster.uid)
                .await
                .map_err(Error::Dependency)?;
            let finalizer = finalizer(&ctx.plugin);
            ctx.writes.remove_finalizer(own, obj, &finalizer).await?;
            Ok(Action::await_change())
        }
        Outcome::Done(Some(p)) => {
            // The plugin's state goes on to its next call, as for machines.
            let status = deleting(&Progressing::of(obj), &p);
            ctx.writes.status(own, obj, &status).await?;
            Ok(requeue::after_delete_step(&p))
        }
        Outcome::Failed(e) => {
            outcome::fail(
                &ctx.writes,
                ctx.options.resync,
                own,
                obj,
                e,
                Some(credentials),
            )
            .await
        }
    }
}

/// While the pools of a deleting InfraCluster still hold addresses (its machines'
/// claims being released), a short wait before the plugin is called and the finalizer
/// goes (`ipam::addresses_left`); none once they are empty or the deletion is
/// [`requeue::POOLS_DRAIN_AT_MOST`] old.
async fn pools_draining(ctx: &Context, obj: &DynamicObject) -> Result<Option<Action>> {
    let since = obj
        .metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| Timestamp::now().duration_since(t.0));
    // A clock behind the API server's counts as a deletion just begun.
    let recent =
        since.is_some_and(|d| d.is_negative() || d.unsigned_abs() < requeue::POOLS_DRAIN_AT_MOST);
    if !recent || ipam::addresses_left(&ctx.client, obj).await? == 0 {
        return Ok(None);
    }
    Ok(Some(Action::requeue(requeue::POOLS_DRAIN)))
}

/// The status and events after a reconcile call reported `s` on a cluster whose status
/// was `prev`. Pure, like the machine's (`machine::report`).
pub fn report(
    prev: &InfraClusterStatus,
    s: &ClusterStatus,
    generation: i64,
    now: &str,
) -> Report<InfraClusterStatus> {
    let mut next = prev.clone();
    let p = &mut next.progress;
    p.plugin_state = (!s.progress.state.is_empty()).then(|| s.progress.state.clone());
    p.phase = (!s.progress.phase.is_empty()).then(|| s.progress.phase.clone());
    p.observed_generation = Some(generation);
    p.failed_generation = None;
    p.failed_credentials = None;
    p.details = s.details.iter().cloned().collect();
    next.failure_domains = s
        .failure_domains
        .iter()
        .map(|d| FailureDomain {
            name: d.name.clone(),
            control_plane: d.control_plane,
            attributes: d.attributes.iter().cloned().collect(),
        })
        .collect();
    if s.ready {
        next.initialization = Initialization::provisioned();
        next.ready = Some(true);
    }
    let step = conditions::reason_or(
        &s.progress.phase,
        if s.ready {
            reasons::PROVISIONED
        } else {
            reasons::PROVISIONING
        },
    );
    let ready_reason = if s.ready { reasons::PROVISIONED } else { &step };
    let message = &s.progress.message;
    next.progress.conditions = conditions::merge(
        &prev.progress.conditions,
        &[
            Condition::new(READY, s.ready, ready_reason, message),
            Condition::new(PROVISIONED, s.ready, &step, message),
            conditions::not_paused(),
        ],
        generation,
        now,
    );
    // An InfraCluster's phases are few: each is an event.
    let events = if prev.progress.phase != next.progress.phase {
        vec![Event::normal(&step, message)]
    } else {
        vec![]
    };
    Report {
        status: next,
        events,
    }
}

/// The status while the plugin releases what the cluster holds.
fn deleting(prev: &Progressing, p: &Progress) -> Progressing {
    let mut next = prev.clone();
    next.plugin_state = (!p.state.is_empty()).then(|| p.state.clone());
    next.phase = (!p.phase.is_empty()).then(|| p.phase.clone());
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyperplug_runtime::bindings::cluster::FailureDomain as PluginDomain;

    fn status(phase: &str, ready: bool) -> ClusterStatus {
        ClusterStatus {
            progress: Progress {
                state: String::new(),
                phase: phase.into(),
                message: "3 nodes".into(),
                requeue_after_ms: None,
                waits: vec![],
                durable: true,
            },
            ready,
            control_plane_endpoint: None,
            failure_domains: vec![PluginDomain {
                name: "pve1".into(),
                control_plane: true,
                attributes: vec![("node".into(), "pve1".into())],
            }],
            ip_pools: vec![],
            details: vec![],
            plugin_status: None,
        }
    }

    #[test]
    fn a_ready_cluster_reports_its_domains_and_one_event_per_phase() {
        let first = report(&Default::default(), &status("Ready", true), 1, "t0");
        let s = &first.status;
        assert_eq!(s.ready, Some(true));
        assert_eq!(s.failure_domains[0].attributes["node"], "pve1");
        assert_eq!(
            conditions::find(&s.progress.conditions, READY)
                .unwrap()
                .reason,
            "Provisioned"
        );
        assert_eq!(first.events, vec![Event::normal("Ready", "3 nodes")]);
        let again = report(s, &status("Ready", true), 1, "t1");
        assert_eq!(&again.status, s);
        assert!(again.events.is_empty());
    }
}
