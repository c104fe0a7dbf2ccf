//! Kubernetes writes made by one user, from the API server's audit log (JSON lines, one
//! event per completed write; see `kube_world::AUDIT_WRITES_POLICY`).
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use anyhow::Result;
use serde_json::Value;

/// The log's current length: a mark to count from.
pub fn mark(log: &Path) -> u64 {
    std::fs::metadata(log).map(|m| m.len()).unwrap_or(0)
}

/// Writes by `user` between two marks, by `verb resource[/subresource]`.
pub fn writes_by(log: &Path, user: &str, from: u64, to: u64) -> Result<BTreeMap<String, u64>> {
    let mut f = std::fs::File::open(log)?;
    f.seek(SeekFrom::Start(from))?;
    let mut text = String::new();
    f.take(to.saturating_sub(from)).read_to_string(&mut text)?;
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Ok(ev) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if ev["stage"] != "ResponseComplete" || ev["user"]["username"] != user {
            continue;
        }
        let r = &ev["objectRef"];
        let mut what = r["resource"].as_str().unwrap_or("?").to_string();
        if let Some(sub) = r["subresource"].as_str() {
            what = format!("{what}/{sub}");
        }
        let verb = ev["verb"].as_str().unwrap_or("?");
        *out.entry(format!("{verb} {what}")).or_default() += 1;
    }
    Ok(out)
}
