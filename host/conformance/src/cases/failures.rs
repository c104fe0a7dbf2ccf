//! How the plugin fails: bad specs, unreachable or failing endpoints, deadlines.
use std::time::{Duration, Instant};

use hyperplug_runtime::bindings::identity::KindRole;
use hyperplug_runtime::{CallError, Credentials, Plugin, PluginError};
use serde_json::Value;

use crate::Options;
use crate::drive::{Failure, flatten};
use crate::kit::Kit;
use crate::mutate::{self, Mutation};
use crate::report::Verdict;

/// Create calls a probe makes (answering the plugin's needs) before it must have hit
/// the endpoint.
const PROBE_CALLS: usize = 4;

#[derive(Clone, Copy)]
pub enum Breakage {
    MissingRequired,
    WrongType,
}

fn machine_schema(kit: &Kit) -> Option<Value> {
    let kind = kit
        .info
        .kinds
        .iter()
        .find(|k| k.role == KindRole::InfraMachine)?;
    serde_json::from_str(&kind.spec_schema).ok()
}

pub async fn invalid_spec(kit: &mut Kit, breakage: Breakage) -> Verdict {
    let Some(schema) = machine_schema(kit) else {
        return Verdict::Skip("no InfraMachine kind with a JSON schema".into());
    };
    let (mutation, key): (Option<Mutation>, _) = match breakage {
        Breakage::MissingRequired => (
            mutate::drop_required(&schema, &kit.spec),
            "invalid-required",
        ),
        Breakage::WrongType => (mutate::wrong_type(&schema, &kit.spec), "invalid-type"),
    };
    let Some(m) = mutation else {
        return Verdict::Skip(match breakage {
            Breakage::MissingRequired => {
                "the schema requires no property that the given spec sets (add one to --spec to cover this)".into()
            }
            Breakage::WrongType => {
                "the given spec sets no top-level property with a plain schema type".into()
            }
        });
    };
    let creds = kit.creds.clone();
    kit.new_machine(key, &m.spec, &creds);
    let req = kit.machine(key).req.clone();
    let expected = m.field();
    match kit.create(&req).await {
        Err(Failure::Plugin(PluginError::InvalidSpec(e))) if m.named_by(&e.field, &e.message) => {
            Verdict::Pass(format!(
                "{}: invalid-spec at `{}`: {}",
                m.how, e.field, e.message
            ))
        }
        Err(Failure::Plugin(PluginError::InvalidSpec(e))) => Verdict::Fail(format!(
            "{}: invalid-spec names `{}` ({}), not `{expected}`",
            m.how, e.field, e.message
        )),
        Err(e) => Verdict::Fail(format!(
            "{}: expected invalid-spec naming `{expected}`, got {e}",
            m.how
        )),
        Ok(s) => {
            kit.machine_mut(key).req.state = Some(s.progress.state.clone());
            Verdict::Fail(format!(
                "{}: create accepted it ({}: {}); expected invalid-spec naming `{expected}`",
                m.how, s.progress.phase, s.progress.message
            ))
        }
    }
}

/// Create on a fresh object against `creds` until a call fails, answering the plugin's
/// needs (a plugin may ask for addresses before it touches the endpoint). Returns the
/// failure and how long that call took.
async fn first_failure(
    kit: &mut Kit,
    plugin: &Plugin,
    key: &str,
    creds: &Credentials,
) -> Result<(Failure, Duration), String> {
    let spec = kit.spec.clone();
    kit.new_machine(key, &spec, creds);
    for _ in 0..PROBE_CALLS {
        let req = kit.machine(key).req.clone();
        let started = Instant::now();
        let result = flatten(plugin.create_machine(&req).await);
        let took = started.elapsed();
        match result {
            Err(f) => return Ok((f, took)),
            Ok(s) if s.ready => {
                return Err(format!(
                    "create reported ready ({}) without a working endpoint",
                    s.progress.message
                ));
            }
            Ok(s) => {
                kit.machine_mut(key).req.state = Some(s.progress.state.clone());
                kit.answer_needs(key, &s)?;
            }
        }
    }
    Err(format!(
        "create answered {PROBE_CALLS} calls without an error; it never reached the endpoint"
    ))
}

pub async fn transient(kit: &mut Kit, label: &str, creds: &Credentials) -> Verdict {
    let mut seen = Vec::new();
    if kit.has_role(KindRole::InfraCluster) {
        let req = kit.cluster_request(creds);
        match kit.reconcile_cluster(&req).await {
            Err(f) if f.is_transient() => seen.push(format!("cluster.reconcile: {f}")),
            Err(f) => {
                return Verdict::Fail(format!(
                    "cluster.reconcile: expected a transient error, got {f}"
                ));
            }
            Ok(s) => {
                return Verdict::Fail(format!(
                    "cluster.reconcile succeeded (ready={}) against {}",
                    s.ready, creds.endpoint
                ));
            }
        }
    }
    let plugin = kit.plugin.clone();
    match first_failure(kit, &plugin, &format!("probe-{label}"), creds).await {
        Ok((f, _)) if f.is_transient() => seen.push(format!("machine.create: {f}")),
        Ok((f, _)) => {
            return Verdict::Fail(format!(
                "machine.create: expected a transient error, got {f}"
            ));
        }
        Err(e) => return Verdict::Fail(format!("machine.create: {e}")),
    }
    Verdict::Pass(seen.join("; "))
}

pub async fn deadline(kit: &mut Kit, opts: &Options, creds: &Credentials) -> Verdict {
    let limit = opts.deadline;
    // The kit's own guard: a call that outlives this has hung.
    let guard = limit * 4 + Duration::from_secs(10);
    let plugin = opts.deadline_plugin.clone();
    let probe = first_failure(kit, &plugin, "probe-deadline", creds);
    let (failure, took) = match tokio::time::timeout(guard, probe).await {
        Err(_) => {
            return Verdict::Fail(format!(
                "the call still had not returned after {guard:?} (deadline {limit:?})"
            ));
        }
        Ok(Err(e)) => return Verdict::Fail(e),
        Ok(Ok(r)) => r,
    };
    // The runtime's timer fires at the deadline; allow for scheduling on a busy machine.
    let slack = Duration::from_secs(3).max(limit / 2);
    let class = match &failure {
        Failure::Call(CallError::Timeout { .. }) => "ended by the runtime's deadline",
        f if f.is_transient() => "the plugin gave up with a transient error",
        _ => {
            return Verdict::Fail(format!(
                "expected a timeout or a transient error, got {failure}"
            ));
        }
    };
    if took > limit + slack {
        return Verdict::Fail(format!(
            "returned after {took:.1?}, past the {limit:?} deadline: {failure}"
        ));
    }
    Verdict::Pass(format!(
        "returned after {took:.1?} (deadline {limit:?}): {class}"
    ))
}
