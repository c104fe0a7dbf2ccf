//! Kubernetes requests made by one user, from the API server's audit log (JSON lines, one
//! event per completed write, and per read of one object by the manager; see the
//! `kube_world::audit_writes_and_gets_by`).
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use anyhow::Result;
use serde_json::Value;

/// The log's current length: a mark to count from.
pub fn mark(log: &Path) -> u64 {
    std::fs::metadata(log).map(|m| m.len()).unwrap_or(0)
}

/// The requests by `user` between two marks (read and parsed once; the figures below
/// are taken from them).
pub fn events_of(log: &Path, user: &str, from: u64, to: u64) -> Result<Vec<Value>> {
    let mut f = std::fs::File::open(log)?;
    f.seek(SeekFrom::Start(from))?;
    let mut text = String::new();
    f.take(to.saturating_sub(from)).read_to_string(&mut text)?;
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|ev| ev["stage"] == "ResponseComplete" && ev["user"]["username"] == user)
        .collect())
}

/// When `user` first wrote each object of `resource` or its status (for a machine, what
/// its first reconcile writes: the finalizer, or with the finalizer webhook the status
/// its first plugin call leaves) between two marks: Unix ms by `namespace/name`.
pub fn first_writes(events: &[Value], resource: &str) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    for ev in events {
        let r = &ev["objectRef"];
        if r["resource"] != resource {
            continue;
        }
        let at = ev["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
        let (Some(ns), Some(name), Some(at)) = (r["namespace"].as_str(), r["name"].as_str(), at)
        else {
            continue;
        };
        out.entry(format!("{ns}/{name}"))
            .or_insert(at.as_millisecond() as u64);
    }
    out
}

/// How long the API server took to answer each successful `verb` of `resource` among
/// `events` (received → response complete, admission and conversion webhooks
/// included), in ms.
pub fn durations(events: &[Value], verb: &str, resource: &str) -> Vec<i64> {
    let ms = |ev: &Value, field: &str| {
        ev[field]
            .as_str()
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .map(|t| t.as_millisecond())
    };
    events
        .iter()
        .filter(|ev| ev["verb"] == verb && ev["objectRef"]["resource"] == resource)
        .filter(|ev| {
            ev["responseStatus"]["code"]
                .as_u64()
                .is_some_and(|c| c < 400)
        })
        .filter_map(|ev| Some(ms(ev, "stageTimestamp")? - ms(ev, "requestReceivedTimestamp")?))
        .collect()
}

/// The requests among `events` counted by `verb resource[/subresource]`.
pub fn by_request(events: &[Value]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for ev in events {
        let r = &ev["objectRef"];
        let mut what = r["resource"].as_str().unwrap_or("?").to_string();
        if let Some(sub) = r["subresource"].as_str() {
            what = format!("{what}/{sub}");
        }
        let verb = ev["verb"].as_str().unwrap_or("?");
        *out.entry(format!("{verb} {what}")).or_default() += 1;
    }
    out
}
