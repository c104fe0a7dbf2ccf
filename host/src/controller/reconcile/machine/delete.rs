//! A deleting machine: the plugin tears its infrastructure down; only once it confirms
//! it gone do its claims, blobs and the finalizer go.
use kube::runtime::controller::Action;

use super::super::context::MachineContext;
use super::observe::Observed;
use super::report;
use super::status::write_or_hold;
use crate::controller::call::outcome::{self, Outcome};
use crate::controller::error::{Error, Result};
use crate::controller::ipam;
use crate::controller::objects::{self, finalizer};
use crate::controller::schedule::requeue;
use crate::controller::schedule::waits::StepSeen;
use crate::controller::write::conditions;
use crate::controller::write::events::Event;

pub async fn run(ctx: &MachineContext, o: &Observed) -> Result<Action> {
    let result = ctx
        .metrics
        .plugin_call(
            ctx.plugin.name(),
            "machine.delete",
            ctx.plugin.delete_machine(&o.request),
        )
        .await;
    match outcome::of(ctx.plugin.name(), "machine.delete", result) {
        Outcome::Done(None) => {
            ctx.waits.clear(&objects::obj_ref(&o.obj, &ctx.resource));
            ipam::release_claims(&ctx.client, &o.obj).await?;
            // What the plugin published or claimed for this object dies with it, even
            // if the plugin forgot to give it up.
            let uid = &o.request.machine.uid;
            let runtime = ctx.plugin.runtime();
            runtime.blobs().withdraw_object(uid);
            runtime
                .claims()
                .release_all(uid)
                .await
                .map_err(Error::Dependency)?;
            ctx.writes
                .events
                .publish(
                    &o.obj,
                    &Event::normal("Deleted", "the infrastructure is confirmed gone"),
                )
                .await;
            let finalizer = finalizer(&ctx.plugin);
            ctx.writes
                .remove_finalizer(&o.own, &o.obj, &finalizer)
                .await?;
            // Only now: a retry of a step above reads the object afresh, as before.
            ctx.coalescer.forget(&o.uid);
            ctx.writes.written.forget(&o.uid);
            ctx.asked.forget(&o.uid);
            Ok(Action::await_change())
        }
        Outcome::Done(Some(progress)) => {
            let next = report::deleting(
                &o.prev,
                &progress,
                o.obj.metadata.generation.unwrap_or(0),
                &conditions::now(),
            );
            write_or_hold(ctx, o, &next, progress.durable, false).await?;
            ctx.waits.set(
                objects::obj_ref(&o.obj, &ctx.resource),
                StepSeen {
                    generation: o.obj.metadata.generation,
                    requeue_ms: progress.requeue_after_ms,
                    watching: false,
                    deleting: true,
                },
                &progress.waits,
                (&o.request.credentials, &o.request.more_credentials),
            );
            Ok(requeue::after_delete_step(&progress))
        }
        Outcome::Failed(err) => {
            // The step failed: what it waited for before is no reason to hold its retry.
            ctx.waits.clear(&objects::obj_ref(&o.obj, &ctx.resource));
            outcome::fail(
                &ctx.writes,
                ctx.options.resync,
                &o.own,
                &o.obj,
                err,
                Some(&o.credentials),
            )
            .await
        }
    }
}
