//! One machine's life: describe, create, adopt, delete; and the final leak check.
use hyperplug_runtime::bindings::machine::{Drift, MachineStatus};

use serde_json::Value;

use super::needs_main;
use crate::kit::{Kit, MainRun, gone};
use crate::report::{Verdict, calls};

fn drift_text(d: &Option<Drift>) -> String {
    match d {
        None => "none".into(),
        Some(Drift::Missing(m)) => format!("missing ({m})"),
        Some(Drift::Foreign(m)) => format!("foreign ({m})"),
        Some(Drift::Changed(m)) => format!("changed ({m})"),
    }
}

fn seen(s: &MachineStatus) -> String {
    format!(
        "ready={} provider-id={} drift={}",
        s.ready,
        s.provider_id.as_deref().unwrap_or("none"),
        drift_text(&s.drift)
    )
}

pub async fn describe_before(kit: &mut Kit) -> Verdict {
    let req = kit.machine("main").req.clone();
    match kit.describe(&req).await {
        Err(e) => Verdict::Fail(format!(
            "describe of an object never created failed ({e}); it must report that nothing is there"
        )),
        Ok(s) if !gone(&s) => Verdict::Fail(format!(
            "describe of an object never created reports {}",
            seen(&s)
        )),
        Ok(s) => Verdict::Pass(format!(
            "nothing there: phase {}, drift {}",
            s.progress.phase,
            drift_text(&s.drift)
        )),
    }
}

pub async fn create_converges(kit: &mut Kit) -> Verdict {
    let mut drive = match kit.drive_create("main", None, true).await {
        Ok(d) => d,
        Err((d, msg)) => {
            kit.describes_during = d.describes;
            return Verdict::Fail(msg);
        }
    };
    let status = drive.last.clone().expect("a ready drive has a status");
    kit.describes_during = std::mem::take(&mut drive.describes);
    let Some(pid) = status.provider_id.clone() else {
        return Verdict::Fail(format!(
            "ready after {} without a provider-id",
            calls(drive.calls)
        ));
    };
    kit.main = Some(MainRun {
        provider_id: pid.clone(),
        calls: drive.calls,
        asked_addresses: drive.asked_addresses,
    });
    for i in 1..=kit.repeat {
        let req = kit.machine("main").req.clone();
        match kit.create(&req).await {
            Ok(s) if s.ready && s.provider_id.as_deref() == Some(pid.as_str()) => {
                kit.machine_mut("main").req.state = Some(s.progress.state.clone());
            }
            Ok(s) => {
                return Verdict::Fail(format!(
                    "repeat {i} of create reports {}; expected ready with {pid}",
                    seen(&s)
                ));
            }
            Err(e) => return Verdict::Fail(format!("repeat {i} of create failed: {e}")),
        }
    }
    // A lookup by ownership (no state) must find this resource, not another one.
    let mut probe = kit.machine("main").req.clone();
    probe.state = None;
    let lookup = match kit.describe(&probe).await {
        Ok(s) => match s.provider_id {
            Some(other) if other != pid => {
                return Verdict::Fail(format!(
                    "describe without state finds {other}, not {pid}: a second resource?"
                ));
            }
            Some(_) => "describe without state finds the same one",
            None => "describe without state names no provider-id",
        },
        Err(e) => return Verdict::Fail(format!("describe without state failed: {e}")),
    };
    Verdict::Pass(format!(
        "ready after {} ({}){}; {} more creates: same provider-id {pid}; {lookup}",
        calls(drive.calls),
        drive.phases(),
        if drive.transient > 0 {
            format!(", {} transient errors retried", drive.transient)
        } else {
            String::new()
        },
        kit.repeat
    ))
}

pub async fn describe_during(kit: &mut Kit) -> Verdict {
    if kit.describes_during.is_empty() {
        return match &kit.main {
            Some(m) => Verdict::Skip(format!(
                "create was ready on call {}: no step to describe in between",
                m.calls
            )),
            None => Verdict::Skip("create-converges made no step to describe".into()),
        };
    }
    let final_pid = kit.main.as_ref().map(|m| m.provider_id.clone());
    let mut phases = Vec::new();
    for (i, d) in kit.describes_during.iter().enumerate() {
        match d {
            Err(e) => return Verdict::Fail(format!("describe after create call {}: {e}", i + 1)),
            Ok(s) => {
                if let Some(Drift::Foreign(_)) = s.drift {
                    return Verdict::Fail(format!(
                        "describe after create call {} reports {}",
                        i + 1,
                        seen(s)
                    ));
                }
                if let (Some(p), Some(f)) = (&s.provider_id, &final_pid)
                    && p != f
                {
                    return Verdict::Fail(format!(
                        "describe after create call {} names provider-id {p}; create ended with {f}",
                        i + 1
                    ));
                }
                if phases.last() != Some(&s.progress.phase) {
                    phases.push(s.progress.phase.clone());
                }
            }
        }
    }
    Verdict::Pass(format!(
        "{} describes between create calls, none failed (phases {})",
        kit.describes_during.len(),
        phases.join(" → ")
    ))
}

pub async fn describe_after_ready(kit: &mut Kit) -> Verdict {
    if let Some(skip) = needs_main(kit) {
        return skip;
    }
    let pid = kit.main.as_ref().expect("main").provider_id.clone();
    let req = kit.machine("main").req.clone();
    match kit.describe(&req).await {
        Ok(s) if s.ready && s.provider_id.as_deref() == Some(pid.as_str()) && s.drift.is_none() => {
            Verdict::Pass(format!(
                "ready, {pid}, no drift ({}: {})",
                s.progress.phase, s.progress.message
            ))
        }
        Ok(s) => Verdict::Fail(format!(
            "expected ready with {pid} and no drift; got {}",
            seen(&s)
        )),
        Err(e) => Verdict::Fail(format!("describe failed: {e}")),
    }
}

pub async fn address_requests(kit: &mut Kit) -> Verdict {
    if let Some(skip) = needs_main(kit) {
        return skip;
    }
    let asked = kit.main.as_ref().expect("main").asked_addresses;
    let declared = kit.has_capability("ip-pools");
    match (asked > 0, declared) {
        (true, true) => Verdict::Pass(format!(
            "create asked for addresses {asked} times; answered from pools [{}]",
            kit.pools.names().join(", ")
        )),
        (true, false) => Verdict::Fail(
            "create asked for addresses, but the plugin does not declare the `ip-pools` capability".into(),
        ),
        (false, true) => Verdict::Skip(
            "the plugin declares `ip-pools` but asked for no address with this spec and cluster spec".into(),
        ),
        (false, false) => Verdict::Skip(
            "the plugin does not declare `ip-pools` and asked for no address".into(),
        ),
    }
}

fn adoption_gate(kit: &Kit) -> Option<Verdict> {
    (!kit.has_capability("adoption")).then(|| {
        Verdict::Skip(
            "the plugin does not declare `adoption`: a lost state may leave a duplicate".into(),
        )
    })
}

pub async fn adoption_after_ready(kit: &mut Kit) -> Verdict {
    if let Some(skip) = adoption_gate(kit).or_else(|| needs_main(kit)) {
        return skip;
    }
    let pid = kit.main.as_ref().expect("main").provider_id.clone();
    kit.machine_mut("main").req.state = None;
    match kit.drive_create("main", None, false).await {
        Ok(d) => {
            let s = d.last.expect("ready");
            if s.provider_id.as_deref() == Some(pid.as_str()) {
                Verdict::Pass(format!(
                    "state dropped after ready; create adopted {pid} in {}",
                    calls(d.calls)
                ))
            } else {
                Verdict::Fail(format!(
                    "state dropped after ready; create converged on {} instead of adopting {pid}",
                    s.provider_id.as_deref().unwrap_or("no provider-id")
                ))
            }
        }
        Err((_, msg)) => Verdict::Fail(format!("state dropped after ready: {msg}")),
    }
}

pub async fn adoption_mid_way(kit: &mut Kit) -> Verdict {
    if let Some(skip) = adoption_gate(kit).or_else(|| needs_main(kit)) {
        return skip;
    }
    // Drop the state right after the first calls (where a resource has just been
    // made and its record may not be saved yet) and half-way; each on its own object.
    let calls = kit.main.as_ref().expect("main").calls;
    let mut points: Vec<usize> = vec![1, 2, calls / 2];
    points.retain(|p| *p >= 1 && *p < calls);
    points.sort_unstable();
    points.dedup();
    if points.is_empty() {
        return Verdict::Skip(format!(
            "create was ready on call {calls}: no point mid-way to drop the state"
        ));
    }
    let mut seen = Vec::new();
    for point in points {
        match drop_state_at(kit, point).await {
            Ok(line) => seen.push(line),
            Err(e) => return Verdict::Fail(e),
        }
    }
    Verdict::Pass(format!(
        "{}; duplicates would show in no-leaks",
        seen.join("; ")
    ))
}

/// Drive a new object `point` calls, drop its state, and drive it to ready again.
async fn drop_state_at(kit: &mut Kit, point: usize) -> Result<String, String> {
    let key = format!("midway-{point}");
    let (spec, creds) = (kit.spec.clone(), kit.creds.clone());
    kit.new_machine(&key, &spec, &creds);
    let first = kit
        .drive_create(&key, Some(point), false)
        .await
        .map_err(|(_, msg)| format!("before the state was dropped at call {point}: {msg}"))?;
    let last = first.last.as_ref().expect("a status");
    if last.ready {
        return Ok(format!(
            "ready at call {point}, before the state could be dropped"
        ));
    }
    let at = last.progress.phase.clone();
    kit.machine_mut(&key).req.state = None;
    let pid = kit
        .drive_create(&key, None, false)
        .await
        .map_err(|(_, msg)| format!("state dropped after call {point} ({at}), then: {msg}"))?
        .last
        .and_then(|s| s.provider_id)
        .ok_or_else(|| {
            format!("state dropped after call {point} ({at}): ready without a provider-id")
        })?;
    // The lookup must find the adopted resource, not another one.
    let mut probe = kit.machine(&key).req.clone();
    probe.state = None;
    match kit.describe(&probe).await {
        Ok(s) if s.provider_id.as_ref().is_some_and(|p| *p != pid) => Err(format!(
            "state dropped after call {point} ({at}): after adoption, describe without state finds {} besides {pid}",
            s.provider_id.unwrap_or_default()
        )),
        Ok(_) => Ok(format!(
            "dropped after call {point} ({at}): converged on {pid}"
        )),
        Err(e) => Err(format!("describe without state failed: {e}")),
    }
}

/// A new object whose spec names the main object's provider-id, granted nothing (as a
/// tenant would write it to reach another's infrastructure, and as the host calls a
/// plugin that asks what is granted): it must not become ready on it, and nothing the plugin tells it may carry a fact of the main object's (its
/// name or UID, which a marker or a holder would show).
pub async fn foreign_facts(kit: &mut Kit) -> Verdict {
    if let Some(skip) = needs_main(kit) {
        return skip;
    }
    if !kit.plugin.asks_grants() {
        return Verdict::Skip(
            "the plugin imports no `grants` (WIT 0.3.1): the host never calls it for an object naming what it has no record of, unless adoption is granted".into(),
        );
    }
    let main = kit.machine("main").req.machine.clone();
    let pid = kit.main.as_ref().expect("main").provider_id.clone();
    let mut spec = kit.spec.clone();
    if let Some(fields) = spec.as_object_mut() {
        fields.insert("providerID".into(), Value::String(pid.clone()));
    }
    let creds = kit.creds.clone();
    kit.new_machine("prober", &spec, &creds);
    let (last, mut told) = match kit.drive_create("prober", Some(5), false).await {
        Ok(d) => (d.last, String::new()),
        Err((d, msg)) => (d.last, msg),
    };
    if let Some(s) = &last {
        told.push_str(&format!(" {} {:?}", s.progress.message, s.details));
    }
    if last.as_ref().is_some_and(|s| s.ready) {
        let _ = kit.drive_delete("prober").await;
        return Verdict::Fail(format!(
            "an object naming {pid} with nothing granted became ready: it took, or made again, what another object's provider-id names"
        ));
    }
    match [main.name.as_str(), main.uid.as_str()]
        .into_iter()
        .find(|fact| told.contains(fact))
    {
        Some(fact) => Verdict::Fail(format!(
            "what the plugin told an object naming {pid} carries `{fact}`, a fact of the object that owns it: {told}"
        )),
        None => Verdict::Pass(format!(
            "an object naming {pid} was refused without a fact of its owner: {}",
            told.trim()
        )),
    }
}

pub async fn delete_repeated(kit: &mut Kit) -> Verdict {
    if let Some(skip) = needs_main(kit) {
        return skip;
    }
    let (n_calls, phases) = match kit.drive_delete("main").await {
        Ok(r) => r,
        Err(e) => return Verdict::Fail(e),
    };
    let last_state = kit.machine("main").req.state.clone();
    let mut again = Vec::new();
    for i in 1..=kit.repeat {
        // Alternate the last state and none: a host may have lost either.
        kit.machine_mut("main").req.state = if i % 2 == 1 { last_state.clone() } else { None };
        match kit.drive_delete("main").await {
            Ok((n, _)) => again.push(n.to_string()),
            Err(e) => return Verdict::Fail(format!("repeat {i} of delete: {e}")),
        }
    }
    Verdict::Pass(format!(
        "gone after {} ({}); {} more deletes confirmed it in [{}] calls",
        calls(n_calls),
        if phases.is_empty() {
            "at once".to_string()
        } else {
            phases.join(" → ")
        },
        kit.repeat,
        again.join(", ")
    ))
}

pub async fn describe_after_delete(kit: &mut Kit) -> Verdict {
    if let Some(skip) = needs_main(kit) {
        return skip;
    }
    if !kit.machine("main").deleted {
        return Verdict::Skip("delete-repeated did not confirm the resource gone".into());
    }
    let mut seen_ok = Vec::new();
    let ready_state = kit.machine("main").ready_state.clone();
    for (label, state) in [("the ready state", ready_state), ("no state", None)] {
        let mut req = kit.machine("main").req.clone();
        req.state = state;
        match kit.describe(&req).await {
            Ok(s) if gone(&s) => seen_ok.push(format!("{label}: drift {}", drift_text(&s.drift))),
            Ok(s) => return Verdict::Fail(format!("describe with {label} reports {}", seen(&s))),
            Err(e) => return Verdict::Fail(format!("describe with {label} failed: {e}")),
        }
    }
    Verdict::Pass(format!("missing; {}", seen_ok.join("; ")))
}

pub async fn delete_never_existed(kit: &mut Kit) -> Verdict {
    let (spec, creds) = (kit.spec.clone(), kit.creds.clone());
    kit.new_machine("never", &spec, &creds);
    match kit.drive_delete("never").await {
        Ok((n, _)) => Verdict::Pass(format!("confirmed gone in {}", calls(n))),
        Err(e) => Verdict::Fail(e),
    }
}

pub async fn no_leaks(kit: &mut Kit) -> Verdict {
    let keys: Vec<String> = kit
        .machines
        .iter()
        .filter(|(k, _)| !kit.is_probe(k))
        .map(|(k, _)| k.clone())
        .collect();
    let mut leaks = Vec::new();
    let mut names = Vec::new();
    for key in keys {
        let name = kit.machine(&key).req.machine.name.clone();
        names.push(name.clone());
        if !kit.machine(&key).deleted
            && let Err(e) = kit.drive_delete(&key).await
        {
            leaks.push(format!("{name}: cleanup delete failed: {e}"));
            continue;
        }
        // Look up with the valid spec: an invalid one may not even parse.
        let mut req = kit.machine(&key).req.clone();
        req.spec = kit.spec.to_string();
        let ready_state = kit.machine(&key).ready_state.clone();
        for state in std::iter::once(None).chain(ready_state.map(Some)) {
            let label = if state.is_some() {
                "ready state"
            } else {
                "no state"
            };
            req.state = state;
            match kit.describe(&req).await {
                Ok(s) if gone(&s) => {}
                Ok(s) => {
                    leaks.push(format!("{name} ({}, describe with {label})", seen(&s)));
                    break;
                }
                Err(e) => {
                    leaks.push(format!("{name}: cannot tell, describe failed: {e}"));
                    break;
                }
            }
        }
    }
    // What the plugin published for the target to download is gone with its objects.
    let blobs = kit.plugin.runtime().blobs().len();
    if blobs > 0 {
        leaks.push(format!("{blobs} published blobs still served"));
    }
    if leaks.is_empty() {
        Verdict::Pass(format!(
            "{} objects checked, none left: {}",
            names.len(),
            names.join(", ")
        ))
    } else {
        Verdict::Fail(format!("left behind: {}", leaks.join("; ")))
    }
}
