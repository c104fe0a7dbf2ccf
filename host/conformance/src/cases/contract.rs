//! What the plugin declares, and the cluster-wide calls.
use std::collections::BTreeMap;
use std::time::Instant;

use hyperplug_runtime::bindings::conversion::ConversionRequest;
use hyperplug_runtime::bindings::identity::KindRole;
use hyperplug_runtime::bindings::machine::TemplateRequest;

use serde_json::{Value, json};

use crate::drive::flatten;
use crate::kit::Kit;
use crate::report::{self, Verdict, calls};

/// Capabilities the host and this kit know; others are reported, not refused.
const KNOWN_CAPABILITIES: &[&str] = &["adoption", "ip-pools", "failure-domains"];

fn camel_case(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && s.chars().all(|c| c.is_ascii_alphanumeric())
}

fn api_version_ok(v: &str) -> bool {
    let Some(rest) = v.strip_prefix('v') else {
        return false;
    };
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    let (major, tail) = rest.split_at(digits);
    if major.is_empty() || major.starts_with('0') {
        return false;
    }
    tail.is_empty()
        || ["alpha", "beta"].iter().any(|p| {
            tail.strip_prefix(p)
                .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        })
}

pub async fn identity(kit: &mut Kit) -> Verdict {
    let info = &kit.info;
    let mut problems = Vec::new();
    if info.version.trim().is_empty() {
        problems.push("version is empty".to_string());
    }
    if !info.group.contains('.') || info.group != info.group.to_ascii_lowercase() {
        problems.push(format!(
            "group `{}` must be a lower-case DNS name",
            info.group
        ));
    }
    if !api_version_ok(&info.api_version) {
        problems.push(format!(
            "api-version `{}` must look like v1, v1beta2 or v1alpha1",
            info.api_version
        ));
    }
    let mut by_role: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for k in &info.kinds {
        if !camel_case(&k.kind) {
            problems.push(format!("kind `{}` must be CamelCase", k.kind));
        }
        by_role
            .entry(k.role.name())
            .or_default()
            .push(k.kind.as_str());
    }
    for (role, kinds) in &by_role {
        if kinds.len() > 1 {
            problems.push(format!("{role} is served by {} kinds", kinds.join(", ")));
        }
    }
    let has = |r: KindRole| by_role.contains_key(r.name());
    if !has(KindRole::InfraMachine) {
        problems.push("no InfraMachine kind: nothing to provision machines with".into());
    }
    if has(KindRole::InfraMachine) && !has(KindRole::InfraMachineTemplate) {
        problems.push(
            "an InfraMachine kind without an InfraMachineTemplate kind: MachineDeployments and control planes clone machines from templates".into(),
        );
    }
    if has(KindRole::InfraClusterTemplate) && !has(KindRole::InfraCluster) {
        problems.push("an InfraClusterTemplate kind without an InfraCluster kind".into());
    }
    let unknown: Vec<&str> = info
        .capabilities
        .iter()
        .map(String::as_str)
        .filter(|c| !KNOWN_CAPABILITIES.contains(c))
        .collect();
    if !problems.is_empty() {
        return Verdict::Fail(problems.join("; "));
    }
    let kinds: Vec<String> = info
        .kinds
        .iter()
        .map(|k| format!("{} ({})", k.kind, k.role.name()))
        .collect();
    let mut detail = format!(
        "{} {}, {}/{}; kinds {}; capabilities {}",
        info.name,
        info.version,
        info.group,
        info.api_version,
        kinds.join(", "),
        if info.capabilities.is_empty() {
            "none".to_string()
        } else {
            info.capabilities.join(", ")
        }
    );
    if !unknown.is_empty() {
        detail.push_str(&format!(
            " (not known to this kit: {}; no case gates on them)",
            unknown.join(", ")
        ));
    }
    Verdict::Pass(detail)
}

const COLUMN_TYPES: &[&str] = &["string", "integer", "number", "boolean", "date"];

pub async fn schemas(kit: &mut Kit) -> Verdict {
    let crds = match hyperplug_kinds::crds::crds(&kit.info) {
        Ok(c) => c,
        Err(e) => return Verdict::Fail(e),
    };
    let mut problems = Vec::new();
    for k in &kit.info.kinds {
        for c in &k.columns {
            if !COLUMN_TYPES.contains(&c.column_type.as_str()) {
                problems.push(format!(
                    "{} column `{}`: type `{}` is not one of {}",
                    k.kind,
                    c.name,
                    c.column_type,
                    COLUMN_TYPES.join(", ")
                ));
            }
            if !c.json_path.starts_with('.') {
                problems.push(format!(
                    "{} column `{}`: json-path `{}` must start with `.`",
                    k.kind, c.name, c.json_path
                ));
            }
        }
    }
    if !problems.is_empty() {
        return Verdict::Fail(problems.join("; "));
    }
    Verdict::Pass(format!("{} structural CRDs", crds.len()))
}

/// The given specs (the machine's and the cluster's, bare or templated as the role
/// says) from the plugin's `api-version` to every other version of their kind and back,
/// handing back what each conversion preserved: a round trip must be the identity.
pub async fn conversion_round_trip(kit: &mut Kit) -> Verdict {
    let from = kit.info.api_version.clone();
    let mut checked = Vec::new();
    let mut problems = Vec::new();
    for kind in kit.info.kinds.iter().filter(|k| k.versions.len() > 1) {
        let spec = match kind.role {
            KindRole::InfraMachine | KindRole::InfraMachineTemplate => &kit.spec,
            KindRole::InfraCluster | KindRole::InfraClusterTemplate => &kit.cluster_spec,
        };
        let object = match kind.role {
            KindRole::InfraMachine | KindRole::InfraCluster => json!({"spec": spec}),
            _ => json!({"spec": {"template": {"spec": spec}}}),
        };
        for to in kind.versions.iter().filter(|v| v.name != from) {
            match round_trip(kit, &kind.kind, &from, &to.name, &object).await {
                Ok(()) => checked.push(format!("{} {from}→{}→{from}", kind.kind, to.name)),
                Err(e) => problems.push(format!("{} {from}→{}: {e}", kind.kind, to.name)),
            }
        }
    }
    if !problems.is_empty() {
        return Verdict::Fail(problems.join("; "));
    }
    if checked.is_empty() {
        return Verdict::Skip("every kind has one API version".into());
    }
    Verdict::Pass(checked.join(", "))
}

async fn round_trip(
    kit: &Kit,
    kind: &str,
    from: &str,
    to: &str,
    object: &Value,
) -> Result<(), String> {
    let convert =
        |from: &str, to: &str, object: String, preserved: Option<String>| ConversionRequest {
            kind: kind.to_string(),
            from_version: from.to_string(),
            to_version: to.to_string(),
            object,
            preserved,
        };
    let there = flatten(
        kit.plugin
            .convert(&convert(from, to, object.to_string(), None))
            .await,
    )
    .map_err(|e| format!("converting there: {e}"))?;
    let back = flatten(
        kit.plugin
            .convert(&convert(to, from, there.object, there.preserved))
            .await,
    )
    .map_err(|e| format!("converting back: {e}"))?;
    let back: Value = serde_json::from_str(&back.object)
        .map_err(|e| format!("the object converted back is not JSON: {e}"))?;
    if &back != object {
        return Err(format!("came back as {back}, not as {object}"));
    }
    Ok(())
}

pub async fn describe_template(kit: &mut Kit) -> Verdict {
    if !kit.has_role(KindRole::InfraMachineTemplate) {
        return Verdict::Skip("the plugin declares no InfraMachineTemplate kind".into());
    }
    let req = TemplateRequest {
        template: kit.object("template"),
        spec: kit.spec.to_string(),
        credentials: Some(kit.creds.clone()),
    };
    match flatten(kit.plugin.describe_template(&req).await) {
        Ok(s) => {
            let capacity: Vec<String> =
                s.capacity.iter().map(|(k, v)| format!("{k}={v}")).collect();
            Verdict::Pass(format!(
                "capacity {}",
                if capacity.is_empty() {
                    "none reported".to_string()
                } else {
                    capacity.join(", ")
                }
            ))
        }
        Err(e) => Verdict::Fail(e.to_string()),
    }
}

pub async fn cluster_reconcile(kit: &mut Kit) -> Verdict {
    if !kit.has_role(KindRole::InfraCluster) {
        return Verdict::Skip(
            "the plugin declares no InfraCluster kind; machines get an empty cluster spec".into(),
        );
    }
    let started = Instant::now();
    let (status, n_calls) = match kit.drive_cluster().await {
        Ok(r) => r,
        Err(e) => return Verdict::Fail(e),
    };
    let endpoint = |s: &hyperplug_runtime::bindings::cluster::ClusterStatus| {
        s.control_plane_endpoint
            .as_ref()
            .map(|e| format!("{}:{}", e.host, e.port))
    };
    let first = endpoint(&status);
    // Pools the plugin reports are where machine addresses come from (a file's win).
    let reported: Vec<_> = status.ip_pools.iter().map(Into::into).collect();
    if let Err(e) = kit.pools.add(&reported) {
        return Verdict::Fail(format!("the reported ip-pools do not parse: {e}"));
    }
    for i in 1..=kit.repeat {
        let req = kit.cluster_request(&kit.creds);
        match kit.reconcile_cluster(&req).await {
            Ok(s) if s.ready && endpoint(&s) == first => {
                kit.cluster_state = Some(s.progress.state.clone());
            }
            Ok(s) => {
                return Verdict::Fail(format!(
                    "repeat {i}: ready={} endpoint {:?}, expected ready with {first:?}",
                    s.ready,
                    endpoint(&s)
                ));
            }
            Err(e) => return Verdict::Fail(format!("repeat {i}: {e}")),
        }
    }
    let domains: Vec<&str> = status
        .failure_domains
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    let pools: Vec<&str> = status.ip_pools.iter().map(|p| p.name.as_str()).collect();
    Verdict::Pass(format!(
        "ready after {} ({:.1?}); endpoint {}; failure domains [{}]; ip-pools [{}]; {} repeats agree",
        calls(n_calls),
        started.elapsed(),
        first.unwrap_or_else(|| "none".into()),
        domains.join(", "),
        pools.join(", "),
        kit.repeat
    ))
}

pub async fn cluster_delete(kit: &mut Kit) -> Verdict {
    if !kit.has_role(KindRole::InfraCluster) {
        return Verdict::Skip("the plugin declares no InfraCluster kind".into());
    }
    let mut rounds = Vec::new();
    for round in 0..2 {
        let deadline = Instant::now() + kit.pacing.drive_timeout;
        let mut calls = 0;
        loop {
            let req = kit.cluster_request(&kit.creds);
            calls += 1;
            match flatten(kit.plugin.delete_cluster(&req).await) {
                Ok(None) => break,
                Ok(Some(p)) => {
                    kit.cluster_state = Some(p.state.clone());
                    if Instant::now() > deadline {
                        return Verdict::Fail(format!(
                            "not done after {calls} calls: {}: {}",
                            p.phase, p.message
                        ));
                    }
                    tokio::time::sleep(kit.pacing.wait(p.requeue_after_ms, 2_000)).await;
                }
                Err(e) => return Verdict::Fail(format!("round {}: {e}", round + 1)),
            }
        }
        rounds.push(report::calls(calls));
    }
    Verdict::Pass(format!(
        "done in {}, then again in {}",
        rounds[0], rounds[1]
    ))
}
