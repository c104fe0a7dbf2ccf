//! The InfraMachineTemplate reconciler: `status.capacity` and `status.nodeInfo`, so the
//! cluster autoscaler can scale a MachineDeployment from zero.
use std::sync::Arc;

use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use serde_json::json;

use super::context::Context;
use crate::controller::call::outcome::{self, Outcome};
use crate::controller::call::versions;
use crate::controller::error::{Error, Result};
use crate::controller::objects::{api, object_ref};
use crate::controller::schedule::requeue;
use crate::status::{InfraMachineTemplateStatus, NodeInfo};
use hyperplug_runtime::bindings::machine::TemplateRequest;

pub async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action> {
    let own = api(
        &ctx.client,
        &ctx.resource,
        &obj.namespace().unwrap_or_default(),
    );
    let spec = match versions::spec_for_plugin(
        ctx.converter(),
        &ctx.kind.kind,
        &ctx.resource.version,
        &obj,
    )
    .await
    {
        Ok(spec) => spec,
        Err(e) => {
            tracing::warn!(template = %obj.name_any(), error = %e, "cannot convert the template's spec");
            return Ok(Action::requeue(requeue::TEMPLATE_RETRY));
        }
    };
    let spec = spec
        .get("template")
        .and_then(|t| t.get("spec"))
        .cloned()
        .unwrap_or(json!({}));
    // A template makes nothing and owns nothing: its own UID names it.
    let req = TemplateRequest {
        template: object_ref(&obj, &obj.uid().unwrap_or_default()),
        spec: spec.to_string(),
        credentials: None,
    };
    let result = ctx
        .metrics
        .plugin_call(
            ctx.plugin.name(),
            "machine.describe-template",
            ctx.plugin.describe_template(&req),
        )
        .await;
    match outcome::of(ctx.plugin.name(), "machine.describe-template", result) {
        Outcome::Done(status) => {
            let info = |key: &str| {
                status
                    .node_info
                    .iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| v.clone())
            };
            let next = InfraMachineTemplateStatus {
                capacity: status.capacity.iter().cloned().collect(),
                node_info: NodeInfo {
                    architecture: info("architecture"),
                    operating_system: info("operating-system").or_else(|| info("operatingSystem")),
                },
            };
            ctx.writes.status(&own, &obj, &next).await?;
            Ok(Action::await_change())
        }
        // A ClusterClass's templates are often incomplete until its patches fill them in
        // per cluster: what the plugin refuses waits for a change of the spec.
        Outcome::Failed(e @ Error::Terminal { .. }) => {
            tracing::debug!(template = %obj.name_any(), error = %e, "template not described until its spec changes");
            Ok(Action::await_change())
        }
        Outcome::Failed(e) => {
            tracing::warn!(template = %obj.name_any(), error = %e, "cannot describe template");
            Ok(Action::requeue(requeue::TEMPLATE_RETRY))
        }
    }
}
