//! The InfraCluster reconciler: validate the infrastructure, publish the control-plane
//! endpoint and failure domains, realize the IP pools.
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use serde_json::{Map, Value, json};

use super::conditions::{self, Condition, PAUSED, PROVISIONED, READY, reasons};
use super::context::{Context, finalizer};
use super::error::Result;
use super::machine::{key, object_ref, publish};
use super::objects::{self, api, capi_cluster, str_field};
use super::outcome::{self, Outcome};
use super::ownership::{self, Ownership};
use super::{credentials, ipam, patch};
use crate::runtime::bindings::cluster::ClusterRequest;

pub async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action> {
    let ns = obj.namespace().unwrap_or_default();
    let own = api(&ctx.client, &ctx.resource, &ns);
    let Some(obj) = objects::fresh(&own, &obj).await? else {
        return Ok(Action::await_change());
    };
    let generation = obj.metadata.generation.unwrap_or(0);
    if objects::has_annotation(&obj, objects::MANAGED_BY_ANNOTATION) {
        return Ok(Action::await_change());
    }
    let cluster = match objects::cluster_name(&obj) {
        Some(name) => objects::read(&api(&ctx.client, &capi_cluster(), &ns), &name).await?,
        None => None,
    };
    if let Some(why) = objects::paused_why(&obj, cluster.as_ref()) {
        patch::conditions(
            &own,
            &obj,
            &[Condition::new(PAUSED, true, reasons::PAUSED, why)],
        )
        .await?;
        return Ok(Action::await_change());
    }
    // Unproven ownership: no plugin call at all.
    let (cluster_id, write_id) = match ctx.ownership.verify(&ctx.resource, &obj).await {
        Ownership::Proven { id, write } => (id, write),
        Ownership::Unproven { message } => {
            return ownership::refuse(&ctx, &own, &obj, message).await;
        }
    };
    let creds = match credentials::for_cluster(&ctx, &obj).await {
        Ok(creds) => creds,
        Err(e) => return super::machine::fail(&ctx, &own, &obj, e).await,
    };
    let deleting = obj.metadata.deletion_timestamp.is_some();
    let request = |credentials: credentials::CallCredentials| ClusterRequest {
        cluster: object_ref(&obj, &cluster_id),
        spec: spec(&obj),
        state: state(&obj),
        credentials: credentials.primary,
        more_credentials: credentials.more,
    };
    if deleting {
        if !obj
            .finalizers()
            .iter()
            .any(|f| *f == finalizer(&ctx.plugin))
        {
            return Ok(Action::await_change());
        }
        let req = request(creds);
        let result = ctx
            .metrics
            .plugin_call(
                ctx.plugin.name(),
                "cluster.delete",
                ctx.plugin.delete_cluster(&req),
            )
            .await;
        return match outcome::of(result) {
            Outcome::Done(None) => {
                // What the plugin published or claimed for the cluster goes with it.
                let runtime = ctx.plugin.runtime();
                runtime.blobs().withdraw_object(&cluster_id);
                runtime
                    .claims()
                    .release_all(&cluster_id)
                    .await
                    .map_err(super::error::Error::Dependency)?;
                patch::remove_finalizer(&own, &obj, &finalizer(&ctx.plugin)).await?;
                Ok(Action::await_change())
            }
            Outcome::Done(Some(p)) => {
                // The plugin's state goes on to its next call, as for machines.
                patch::status(&own, &obj, patch::progress_fields(&p)).await?;
                Ok(Action::requeue(Duration::from_millis(
                    p.requeue_after_ms.unwrap_or(2_000).max(50),
                )))
            }
            Outcome::Failed(e) => Err(e),
        };
    }
    if objects::failed_this_generation(&obj) {
        return Ok(Action::await_change());
    }
    patch::take_ownership(&own, &obj, &finalizer(&ctx.plugin), write_id.as_deref()).await?;
    let req = request(creds);
    let result = ctx
        .metrics
        .plugin_call(
            ctx.plugin.name(),
            "cluster.reconcile",
            ctx.plugin.reconcile_cluster(&req),
        )
        .await;
    let status = match outcome::of(result) {
        Outcome::Done(s) => s,
        Outcome::Failed(err) => return super::machine::fail(&ctx, &own, &obj, err).await,
    };
    ipam::ensure_pools(&ctx, &obj, &status.ip_pools).await?;
    if let Some(ep) = &status.control_plane_endpoint
        && str_field(&obj, "spec.controlPlaneEndpoint.host").is_none()
    {
        patch::spec_field(
            &own,
            &obj,
            "controlPlaneEndpoint",
            json!({"host": ep.host, "port": ep.port}),
        )
        .await?;
    }
    let mut fields = patch::progress_fields(&status.progress);
    fields.insert("observedGeneration".into(), json!(generation));
    fields.insert("failedGeneration".into(), Value::Null);
    let domains: Vec<Value> = status
        .failure_domains
        .iter()
        .map(|d| {
            let attributes: Map<String, Value> = d
                .attributes
                .iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect();
            json!({"name": d.name, "controlPlane": d.control_plane, "attributes": attributes})
        })
        .collect();
    fields.insert("failureDomains".into(), json!(domains));
    let details: Map<String, Value> = status
        .details
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    fields.insert("details".into(), Value::Object(details));
    if status.ready {
        fields.insert("initialization".into(), json!({"provisioned": true}));
        fields.insert("ready".into(), json!(true));
    }
    let existing = obj.data.get("status").and_then(|s| s.get("conditions"));
    let reason = if status.ready {
        reasons::PROVISIONED.to_string()
    } else {
        status.progress.phase.clone()
    };
    let updates = [
        Condition::new(READY, status.ready, &reason, &status.progress.message),
        Condition::new(
            PROVISIONED,
            status.ready,
            &status.progress.phase,
            &status.progress.message,
        ),
        conditions::not_paused(),
    ];
    fields.insert(
        "conditions".into(),
        conditions::merge(existing, &updates, generation),
    );
    if str_field(&obj, "status.phase") != Some(status.progress.phase.as_str()) {
        publish(
            &ctx,
            &obj,
            &status.progress.phase,
            &status.progress.message,
            false,
        )
        .await;
    }
    patch::status(&own, &obj, fields).await?;
    ctx.backoff.reset(&key(&obj));
    Ok(match status.progress.requeue_after_ms {
        Some(ms) => Action::requeue(Duration::from_millis(ms.max(50))),
        None => Action::requeue(ctx.options.resync),
    })
}

fn spec(obj: &DynamicObject) -> String {
    obj.data
        .get("spec")
        .cloned()
        .unwrap_or(json!({}))
        .to_string()
}

fn state(obj: &DynamicObject) -> Option<String> {
    str_field(obj, "status.pluginState").map(str::to_string)
}
