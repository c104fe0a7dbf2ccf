//! The InfraMachine reconciler: observe → finalizer → call the plugin → persist its
//! state → decide when to come back.
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::{Map, Value, json};

use super::conditions::{self, Condition, PAUSED, PROVISIONED, READY, reasons};
use super::context::{Context, finalizer};
use super::error::{Error, Result};
use super::objects::{self, api, capi_cluster, capi_machine, str_field};
use super::outcome::{self, Outcome};
use super::ownership::{self, Ownership};
use super::{credentials, ipam, patch};
use crate::runtime::ObjectRef;
use crate::runtime::bindings::machine::{
    AddressType, BootstrapData, MachineRequest, MachineStatus,
};

pub async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action> {
    let ns = obj.namespace().unwrap_or_default();
    let own = api(&ctx.client, &ctx.resource, &ns);
    let Some(obj) = objects::fresh(&own, &obj).await? else {
        return Ok(Action::await_change());
    };
    if objects::has_annotation(&obj, objects::MANAGED_BY_ANNOTATION) {
        return Ok(Action::await_change());
    }
    let deleting = obj.metadata.deletion_timestamp.is_some();
    let Some(machine_name) = objects::capi_owner(&obj, "Machine") else {
        if deleting {
            // Never owned by a Machine: nothing can have been created.
            patch::remove_finalizer(&own, &obj, &finalizer(&ctx.plugin)).await?;
            return Ok(Action::await_change());
        }
        // The Machine controller sets itself as owner soon; its watch brings us back.
        return Ok(Action::await_change());
    };
    let Some(cluster_name) = objects::cluster_name(&obj) else {
        return Ok(Action::await_change());
    };
    // Independent reads go out together: a reconcile's latency is its chain of API
    // round trips, and every machine is polled while its tasks run.
    let (cluster, machine, addresses) = tokio::try_join!(
        async {
            Ok::<_, Error>(
                objects::read(&api(&ctx.client, &capi_cluster(), &ns), &cluster_name).await?,
            )
        },
        async {
            Ok::<_, Error>(
                objects::read(&api(&ctx.client, &capi_machine(), &ns), &machine_name).await?,
            )
        },
        ipam::bound_addresses(&ctx, &obj),
    )?;

    // Pause: no plugin call at all, and say so.
    if let Some(why) = objects::paused_why(&obj, cluster.as_ref()) {
        patch::conditions(
            &own,
            &obj,
            &[Condition::new(PAUSED, true, reasons::PAUSED, why)],
        )
        .await?;
        return Ok(Action::await_change());
    }

    let infra_cluster = match (&cluster, &ctx.cluster_kind) {
        (Some(c), Some(kind)) => {
            match objects::reference_to(c, "spec.infrastructureRef", &kind.group, &kind.kind) {
                Some(name) => objects::read(&api(&ctx.client, kind, &ns), &name).await?,
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
        patch::conditions(&own, &obj, &[c, conditions::not_paused()]).await?;
        return Ok(Action::requeue(Duration::from_secs(10)));
    };
    // Whose infrastructure this is: proven by the manager's MAC, never by what a user
    // wrote. Unproven, the plugin is not called at all.
    let write_id = match ctx.ownership.verify(&ctx.resource, &obj).await {
        Ownership::Proven { id, write } => (id, write),
        Ownership::Unproven { message } => {
            return ownership::refuse(&ctx, &own, &obj, message).await;
        }
    };
    let (machine_id, write_id) = write_id;
    let cluster_kind = ctx
        .cluster_kind
        .as_ref()
        .expect("an InfraCluster was found");
    let cluster_id = match ctx.ownership.verify(cluster_kind, &infra_cluster).await {
        Ownership::Proven { id, .. } => id,
        Ownership::Unproven { .. } => {
            let message = format!(
                "the ownership id of {} {} does not verify (see its Ready condition); nothing is done for its machines until it does",
                cluster_kind.kind,
                infra_cluster.name_any()
            );
            return ownership::refuse(&ctx, &own, &obj, message).await;
        }
    };
    let bootstrap = async {
        match &machine {
            Some(m) if !deleting => bootstrap_data(&ctx, m).await,
            _ => Ok(None),
        }
    };
    let (creds, bootstrap) =
        match tokio::try_join!(credentials::for_cluster(&ctx, &infra_cluster), bootstrap) {
            Ok(found) => found,
            Err(e) => return fail(&ctx, &own, &obj, e).await,
        };
    let mut req = MachineRequest {
        machine: object_ref(&obj, &machine_id),
        cluster: object_ref(&infra_cluster, &cluster_id),
        spec: obj
            .data
            .get("spec")
            .cloned()
            .unwrap_or(json!({}))
            .to_string(),
        cluster_spec: infra_cluster
            .data
            .get("spec")
            .cloned()
            .unwrap_or(json!({}))
            .to_string(),
        state: str_field(&obj, "status.pluginState").map(str::to_string),
        bootstrap: None,
        failure_domain: machine
            .as_ref()
            .and_then(|m| str_field(m, "spec.failureDomain"))
            .map(str::to_string),
        addresses,
        credentials: creds.primary,
        more_credentials: creds.more,
    };

    if deleting {
        return delete(&ctx, &own, &obj, &req).await;
    }
    if objects::failed_this_generation(&obj) {
        return Ok(Action::await_change());
    }
    patch::take_ownership(&own, &obj, &finalizer(&ctx.plugin), write_id.as_deref()).await?;
    req.bootstrap = bootstrap;

    let provisioned = objects::field(&obj, "status.initialization.provisioned")
        .and_then(Value::as_bool)
        == Some(true);
    let result = if provisioned {
        ctx.metrics
            .plugin_call(
                ctx.plugin.name(),
                "machine.describe",
                ctx.plugin.describe_machine(&req),
            )
            .await
    } else {
        ctx.metrics
            .plugin_call(
                ctx.plugin.name(),
                "machine.create",
                ctx.plugin.create_machine(&req),
            )
            .await
    };
    let status = match outcome::of(result) {
        Outcome::Done(status) => status,
        Outcome::Failed(err) => return fail(&ctx, &own, &obj, err).await,
    };
    // Addresses the plugin needs: claim them now, hand them over on the next call.
    let mut addresses_pending = false;
    let mut addresses_new = false;
    if !status.address_requests.is_empty() {
        let infra_cluster_name = infra_cluster.name_any();
        let bound = ipam::ensure_claims(
            &ctx,
            &obj,
            &cluster_name,
            &infra_cluster_name,
            &status.address_requests,
        )
        .await?;
        // The IPAM provider binds claims asynchronously and we do not watch them:
        // come back soon while any is unbound.
        addresses_pending = bound.len() < status.address_requests.len();
        // Bound since this call's request was made: nothing else will bring us back
        // (claims are not watched, and the plugin's answer changes no watched object).
        addresses_new = bound.len() > req.addresses.len();
    }
    if let (true, Some(id)) = (status.ready, &status.provider_id) {
        patch::spec_field(&own, &obj, "providerID", json!(id)).await?;
    }
    if status.ready {
        // Blobs (bootstrap media) are for provisioning only: once provisioned, gone.
        ctx.plugin
            .runtime()
            .blobs()
            .withdraw_object(&req.machine.uid);
    }
    persist(&ctx, &own, &obj, &status, provisioned).await?;
    ctx.backoff.reset(&key(&obj));
    Ok(match status.progress.requeue_after_ms {
        Some(ms) => Action::requeue(Duration::from_millis(ms.max(50))),
        None if addresses_new => Action::requeue(Duration::from_millis(100)),
        None if addresses_pending => Action::requeue(Duration::from_secs(1)),
        None if status.ready => Action::requeue(ctx.options.resync),
        None => Action::await_change(),
    })
}

async fn delete(
    ctx: &Context,
    own: &Api<DynamicObject>,
    obj: &DynamicObject,
    req: &MachineRequest,
) -> Result<Action> {
    if !obj
        .finalizers()
        .iter()
        .any(|f| *f == finalizer(&ctx.plugin))
    {
        return Ok(Action::await_change());
    }
    let result = ctx
        .metrics
        .plugin_call(
            ctx.plugin.name(),
            "machine.delete",
            ctx.plugin.delete_machine(req),
        )
        .await;
    match outcome::of(result) {
        Outcome::Done(None) => {
            ipam::release_claims(ctx, obj).await?;
            // What the plugin published or claimed for this object dies with it, even
            // if the plugin forgot to give it up.
            let uid = &req.machine.uid;
            let runtime = ctx.plugin.runtime();
            runtime.blobs().withdraw_object(uid);
            runtime
                .claims()
                .release_all(uid)
                .await
                .map_err(Error::Dependency)?;
            publish(
                ctx,
                obj,
                "Deleted",
                "the infrastructure is confirmed gone",
                false,
            )
            .await;
            patch::remove_finalizer(own, obj, &finalizer(&ctx.plugin)).await?;
            Ok(Action::await_change())
        }
        Outcome::Done(Some(progress)) => {
            let mut fields = patch::progress_fields(&progress);
            fields.insert(
                "conditions".into(),
                conditions::merge(
                    obj.data.get("status").and_then(|s| s.get("conditions")),
                    &[Condition::new(
                        READY,
                        false,
                        &progress.phase,
                        &progress.message,
                    )],
                    obj.metadata.generation.unwrap_or(0),
                ),
            );
            patch::status(own, obj, fields).await?;
            Ok(Action::requeue(Duration::from_millis(
                progress.requeue_after_ms.unwrap_or(2_000).max(50),
            )))
        }
        Outcome::Failed(err) => fail(ctx, own, obj, err).await,
    }
}

/// Write the plugin's report: state first of all, then what CAPI reads.
async fn persist(
    ctx: &Context,
    own: &Api<DynamicObject>,
    obj: &DynamicObject,
    status: &MachineStatus,
    was_provisioned: bool,
) -> Result<()> {
    let generation = obj.metadata.generation.unwrap_or(0);
    let mut fields = patch::progress_fields(&status.progress);
    let provisioned = status.ready || was_provisioned;
    let (ready_reason, ready_message) = match &status.drift {
        Some(drift) => (reasons::DRIFT.to_string(), format!("{drift:?}")),
        None if status.ready => (
            reasons::PROVISIONED.to_string(),
            status.progress.message.clone(),
        ),
        None if status.needs_bootstrap => (
            reasons::WAITING_FOR_BOOTSTRAP_DATA.to_string(),
            status.progress.message.clone(),
        ),
        None => (
            status.progress.phase.clone(),
            status.progress.message.clone(),
        ),
    };
    let ready = status.ready && status.drift.is_none();
    let updates = [
        Condition::new(READY, ready, &ready_reason, &ready_message),
        Condition::new(
            PROVISIONED,
            provisioned,
            &status.progress.phase,
            &status.progress.message,
        ),
        conditions::not_paused(),
    ];
    let existing = obj.data.get("status").and_then(|s| s.get("conditions"));
    fields.insert(
        "conditions".into(),
        conditions::merge(existing, &updates, generation),
    );
    fields.insert("observedGeneration".into(), json!(generation));
    if status.ready {
        fields.insert("initialization".into(), json!({"provisioned": true}));
        fields.insert("ready".into(), json!(true));
        let addresses: Vec<Value> = status
            .addresses
            .iter()
            .map(|a| json!({"type": address_type(a.address_type), "address": a.address}))
            .collect();
        fields.insert("addresses".into(), json!(addresses));
    }
    if let Some(fd) = &status.failure_domain {
        fields.insert("failureDomain".into(), json!(fd));
    }
    let details: Map<String, Value> = status
        .details
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    fields.insert("details".into(), Value::Object(details));
    fields.insert("failedGeneration".into(), Value::Null);
    if let Some(drift) = &status.drift {
        publish(ctx, obj, reasons::DRIFT, &format!("{drift:?}"), true).await;
    }
    // Events mark milestones (provisioned, deleted, failures, drift); the phases in
    // between are in status.phase and the Ready condition's reason, and an event per
    // phase would double the writes of every machine's lifecycle.
    if status.ready && !was_provisioned {
        publish(
            ctx,
            obj,
            &status.progress.phase,
            &status.progress.message,
            false,
        )
        .await;
    }
    patch::status(own, obj, fields).await?;
    Ok(())
}

/// Errors: terminal ones become conditions and stop retries for this generation;
/// the rest go to the error policy's backoff. Shared by every kind.
pub(super) async fn fail(
    ctx: &Context,
    own: &Api<DynamicObject>,
    obj: &DynamicObject,
    err: Error,
) -> Result<Action> {
    let generation = obj.metadata.generation.unwrap_or(0);
    let (reason, message, terminal) = match &err {
        Error::Terminal { reason, message } => (reason.clone(), message.clone(), true),
        other => (
            reasons::TRANSIENT_ERROR.to_string(),
            other.to_string(),
            false,
        ),
    };
    let existing = obj.data.get("status").and_then(|s| s.get("conditions"));
    let mut fields = Map::new();
    fields.insert(
        "conditions".into(),
        conditions::merge(
            existing,
            &[Condition::new(READY, false, &reason, &message)],
            generation,
        ),
    );
    if terminal {
        fields.insert("failedGeneration".into(), json!(generation));
        fields.insert("phase".into(), json!(reason));
        publish(ctx, obj, &reason, &message, true).await;
        patch::status(own, obj, fields).await?;
        return Ok(Action::await_change());
    }
    patch::status(own, obj, fields).await?;
    Err(err)
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

pub async fn publish(ctx: &Context, obj: &DynamicObject, reason: &str, note: &str, warning: bool) {
    super::events::publish(ctx, obj, reason, note, warning).await;
}

fn address_type(t: AddressType) -> &'static str {
    match t {
        AddressType::InternalIp => "InternalIP",
        AddressType::ExternalIp => "ExternalIP",
        AddressType::Hostname => "Hostname",
        AddressType::InternalDns => "InternalDNS",
        AddressType::ExternalDns => "ExternalDNS",
    }
}

/// The object as the plugin sees it, with `id` (a proven ownership id, or a UID the
/// API server assigned) as its `uid`.
pub fn object_ref(obj: &DynamicObject, id: &str) -> ObjectRef {
    ObjectRef {
        namespace: obj.namespace().unwrap_or_default(),
        name: obj.name_any(),
        uid: id.to_string(),
    }
}

pub fn key(obj: &DynamicObject) -> String {
    format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any())
}
