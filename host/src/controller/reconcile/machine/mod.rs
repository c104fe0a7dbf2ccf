//! The InfraMachine reconciler, in its steps: observe (`observe`: the gate, then what a
//! machine reads) → finalizer → call the plugin → persist its report (`report`) → claim
//! the addresses it asks for → decide when to come back. A deleting machine goes to
//! `delete` after observing.
mod delete;
mod observe;
pub mod report;
#[cfg(test)]
mod result_properties;
mod status;

use std::sync::Arc;

use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use serde_json::json;

use super::context::MachineContext;
use super::gate::Gate;
use crate::controller::call::outcome::{self, Outcome};
use crate::controller::error::Result;
use crate::controller::ipam::Claimed;
use crate::controller::objects::{self, finalizer};
use crate::controller::schedule::requeue;
use crate::controller::schedule::waits::StepSeen;
use crate::controller::trust::adoption;
use crate::controller::write::conditions;
use crate::status::InfraMachineStatus;
use hyperplug_runtime::bindings::machine::MachineStatus;
use observe::Observed;
use status::write_or_hold;

pub async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<MachineContext>) -> Result<Action> {
    // Waiting on something the observer has not reported over: no reads, no call (a
    // deletion that began since goes on at once).
    if let Some(left) = ctx.waits.still_waiting(
        &objects::obj_ref(&obj, &ctx.resource),
        obj.metadata.generation,
        obj.metadata.deletion_timestamp.is_some(),
    ) {
        return Ok(Action::requeue(left));
    }
    let mut o = match observe::machine(&ctx, &obj).await? {
        Gate::Go(o) => o,
        Gate::Stop(action) => {
            // No call (paused, failed for good, not ours, ...): nothing to watch either.
            ctx.waits.clear(&objects::obj_ref(&obj, &ctx.resource));
            return Ok(action);
        }
    };
    if o.deleting {
        return delete::run(&ctx, &o).await;
    }
    // Before any call that may create infrastructure: the finalizer, and the ownership
    // id. A machine the finalizer webhook gave the finalizer at creation takes the id
    // with its provider ID instead (one write fewer): until it is provisioned the id is
    // its UID, which only `clusterctl move` changes, and clusterctl moves provisioned
    // machines only.
    let finalizer = finalizer(&ctx.plugin);
    let id_later = (!o.provisioned
        && o.obj.finalizers().contains(&finalizer)
        && !objects::has_annotation(&o.obj, objects::OWNERSHIP_ID_ANNOTATION))
    .then(|| o.write_id.clone())
    .flatten();
    ctx.writes
        .take_ownership(
            &o.own,
            &o.obj,
            &finalizer,
            &adoption::previous_finalizer(&ctx.resource),
            o.write_id.as_deref().filter(|_| id_later.is_none()),
        )
        .await?;
    // A step that asks to go on at once (its state stored first, e.g. a VMID before the
    // clone is asked for) goes on in this reconcile, not after a round through the queue.
    let mut steps = 0;
    let status = loop {
        let status = match call(&ctx, &o).await {
            Outcome::Done(status) => status,
            Outcome::Failed(err) => {
                // The step failed: what it waited for before is no reason to hold its
                // retry (the error policy's backoff brings it back).
                ctx.waits.clear(&objects::obj_ref(&o.obj, &ctx.resource));
                return outcome::fail(
                    &ctx.writes,
                    ctx.options.resync,
                    &o.own,
                    &o.obj,
                    err,
                    Some(&o.credentials),
                )
                .await;
            }
        };
        // The plugin's state is saved before anything else is done for its report.
        let (next, written) = persist(&ctx, &o, &status, id_later.as_deref()).await?;
        steps += 1;
        if steps == MAX_STEPS_PER_RECONCILE || !goes_on_at_once(&status) {
            break status;
        }
        o.follow(next, written);
    };
    // Addresses the plugin needs: claim them now, hand them over on the next call.
    ctx.asked
        .record(&o.uid, !status.address_requests.is_empty());
    let claimed = if status.address_requests.is_empty() {
        Claimed::default()
    } else {
        o.claims
            .ensure(
                &ctx.client,
                &ctx.resource,
                &o.obj,
                &o.cluster_name,
                &o.infra_cluster_name,
                &status.address_requests,
            )
            .await?
    };
    ctx.backoff.reset(&objects::key(&o.obj));
    ctx.waits.set(
        objects::obj_ref(&o.obj, &ctx.resource),
        StepSeen {
            generation: o.obj.metadata.generation,
            requeue_ms: status.progress.requeue_after_ms,
            watching: o.provisioned,
            deleting: false,
        },
        &status.progress.waits,
        (&o.request.credentials, &o.request.more_credentials),
    );
    Ok(requeue::after_machine_step(
        &status,
        claimed,
        o.provisioned || status.ready,
        ctx.options.resync,
    ))
}

/// Plugin steps one reconcile may take (see [`goes_on_at_once`]).
const MAX_STEPS_PER_RECONCILE: u32 = 3;

/// A step that asks to be called again at once, with nothing to wait for. Addresses it
/// asks for do not hold the next step back (the infrastructure is made while they are
/// allocated): the requests of the step a reconcile ends on are what is claimed.
fn goes_on_at_once(s: &MachineStatus) -> bool {
    s.progress.requeue_after_ms == Some(0) && s.progress.waits.is_empty() && !s.ready
}

/// Create until provisioned, describe after: a provisioned machine's infrastructure is
/// never made again (a missing VM is drift, not a reason to clone another).
async fn call(ctx: &MachineContext, o: &Observed) -> Outcome<MachineStatus> {
    let (name, result) = if o.provisioned {
        let call = "machine.describe";
        let f = ctx.plugin.describe_machine(&o.request);
        (
            call,
            ctx.metrics.plugin_call(ctx.plugin.name(), call, f).await,
        )
    } else {
        let call = "machine.create";
        let f = ctx.plugin.create_machine_with(&o.request, o.grants);
        (
            call,
            ctx.metrics.plugin_call(ctx.plugin.name(), call, f).await,
        )
    };
    outcome::of(ctx.plugin.name(), name, result)
}

/// Write the plugin's report: the provider ID in the spec once ready (Cluster API reads
/// it), then the status (its state first of all) describing the generation that makes,
/// and the events. One status write, not a second one for the new generation. Returns
/// the status the step leaves and whether it was written (or held, see `coalesce`).
/// `id_later`: the ownership id to write with the provider ID.
async fn persist(
    ctx: &MachineContext,
    o: &Observed,
    status: &MachineStatus,
    id_later: Option<&str>,
) -> Result<(InfraMachineStatus, bool)> {
    let mut generation = o.obj.metadata.generation;
    if let (true, Some(id)) = (status.ready, &status.provider_id) {
        let annotation = id_later.map(|v| (objects::OWNERSHIP_ID_ANNOTATION, v));
        // Its echo (the ownership id is metadata a reconcile acts on) is no change: told
        // to the watch before the write, as a loaded API server's watch event can come
        // before its answer (a failed write costs one reconcile more, no less).
        if let Some((key, value)) = annotation {
            let mut after = o.obj.clone();
            after
                .annotations_mut()
                .insert(key.to_string(), value.to_string());
            ctx.seen.wrote(&after);
        }
        let patched = ctx
            .writes
            .spec_field(&o.own, &o.obj, "providerID", json!(id), annotation)
            .await?;
        if let Some(patched) = patched {
            ctx.seen.wrote(&patched);
            generation = patched.metadata.generation;
        }
    }
    let report = report::after_call(
        &o.prev,
        status,
        o.provisioned,
        generation.unwrap_or(0),
        &conditions::now(),
    );
    tracing::debug!(
        object = %objects::key(&o.obj),
        phase = %status.progress.phase,
        message = %status.progress.message,
        requeue_ms = ?status.progress.requeue_after_ms,
        waits = status.progress.waits.len(),
        durable = status.progress.durable,
        "machine step"
    );
    let written = write_or_hold(
        ctx,
        o,
        &report.status,
        status.progress.durable,
        !report.events.is_empty(),
    )
    .await?;
    ctx.writes.events.publish_all(&o.obj, &report.events).await;
    if status.ready {
        // Blobs (bootstrap media) are for provisioning only: once provisioned, gone.
        ctx.plugin
            .runtime()
            .blobs()
            .withdraw_object(&o.request.machine.uid);
    }
    Ok((report.status, written))
}
