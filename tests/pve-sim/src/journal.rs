//! The requests the API served, in order, kept for a post-mortem (a chaos run that
//! breaks an invariant writes them beside its logs): who asked (`user`: the
//! authenticated user or token, empty when authentication failed), what was asked and
//! what was answered, including the faults injected. Bounded: the oldest go first.
use std::collections::VecDeque;
use std::sync::Mutex;

use bytes::Bytes;
use hyper::http::request::Parts;
use serde_json::{Value, json};

use crate::envelope::{ApiResult, Data};

/// Requests kept; older ones are dropped.
pub const CAPACITY: usize = 200_000;
/// Characters kept of a request's parameters and of an answer.
const EXCERPT: usize = 240;

#[derive(Default)]
pub struct Journal(Mutex<VecDeque<Value>>);

/// A request as it arrived.
pub struct Entry {
    at_ms: u64,
    method: String,
    path: String,
    params: String,
    /// The authenticated principal (`user@realm` or `user@realm!token`), once known.
    pub user: String,
}

impl Entry {
    pub fn begin(parts: &Parts, body: &Bytes) -> Entry {
        let mut params = parts.uri.query().unwrap_or("").to_string();
        if !body.is_empty() {
            params.push(' ');
            params.push_str(&String::from_utf8_lossy(&body[..body.len().min(EXCERPT)]));
        }
        Entry {
            at_ms: crate::state::unix_now_ms(),
            method: parts.method.to_string(),
            path: parts.uri.path().to_string(),
            params: excerpt(&params),
            user: String::new(),
        }
    }
}

fn excerpt(s: &str) -> String {
    s.chars().take(EXCERPT).collect()
}

impl Journal {
    pub fn record(&self, e: Entry, res: &ApiResult<Data>) {
        let (status, answer) = match res {
            Ok(Data::Value(v)) => (200, excerpt(&v.to_string())),
            Ok(_) => (200, String::new()),
            Err(err) => (err.status, excerpt(&err.message)),
        };
        let v = json!({
            "at_ms": e.at_ms,
            "done_ms": crate::state::unix_now_ms(),
            "method": e.method,
            "path": e.path,
            "user": e.user,
            "params": e.params,
            "status": status,
            "answer": answer,
        });
        let mut q = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() == CAPACITY {
            q.pop_front();
        }
        q.push_back(v);
    }

    pub fn entries(&self) -> Vec<Value> {
        let q = self.0.lock().unwrap_or_else(|p| p.into_inner());
        q.iter().cloned().collect()
    }
}
