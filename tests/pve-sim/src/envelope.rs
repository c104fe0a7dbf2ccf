//! PVE's response envelope and error format, in one place.
//!
//! Success: `200 OK`, body `{"data": ...}`. Errors: the HTTP reason phrase is the first line
//! of the message; the body is `{"data": null}`, plus `"errors"` for parameter errors, plus
//! `"message"` (the full text) on PVE >= 8.3. Authentication failures and 595s have an
//! empty body.

use std::collections::BTreeMap;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Response, StatusCode, header};
use serde_json::{Value, json};

/// The response type of every handler.
pub type Resp = Response<Full<Bytes>>;

/// An API error as PVE reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: u16,
    /// Full message text; its first line becomes the reason phrase.
    pub message: String,
    /// Parameter errors (`errors` in the body).
    pub errors: Option<BTreeMap<String, String>>,
    /// No JSON body at all (401, 595).
    pub empty_body: bool,
}

pub type ApiResult<T = Value> = Result<T, ApiError>;

/// What a handler returns as `data`: a JSON value, or JSON already serialized (for large
/// listings, to skip building a `Value` tree).
pub enum Data {
    Value(Value),
    Serialized(Vec<u8>),
    /// A page of a longer list, with PVE's `total` next to `data` (task logs and lists).
    Page {
        data: Value,
        total: usize,
    },
}

impl From<Value> for Data {
    fn from(v: Value) -> Self {
        Data::Value(v)
    }
}

impl Data {
    /// Serializes `v` now.
    pub fn serialize<T: serde::Serialize>(v: &T) -> Self {
        Data::Serialized(serde_json::to_vec(v).unwrap_or_else(|_| b"null".to_vec()))
    }
}

/// `200 OK` with `{"data": <data>}`.
pub fn ok_data(data: Data) -> Resp {
    match data {
        Data::Value(v) => ok(v),
        Data::Page { data, total } => {
            json_response(200, None, &json!({ "data": data, "total": total }))
        }
        Data::Serialized(bytes) => {
            let mut body = Vec::with_capacity(bytes.len() + 10);
            body.extend_from_slice(b"{\"data\":");
            body.extend_from_slice(&bytes);
            body.push(b'}');
            base(200)
                .header(header::CONTENT_TYPE, "application/json;charset=UTF-8")
                .body(Full::new(Bytes::from(body)))
                .expect("valid response")
        }
    }
}

impl ApiError {
    /// What Perl's `die "msg\n"` in an API handler produces: a 500 with that message.
    pub fn die(msg: impl Into<String>) -> Self {
        Self::with_status(500, msg)
    }

    /// An error with an explicit status; a trailing newline is added as PVE's `die` has one.
    pub fn with_status(status: u16, msg: impl Into<String>) -> Self {
        let mut message = msg.into();
        if !message.ends_with('\n') {
            message.push('\n');
        }
        ApiError {
            status,
            message,
            errors: None,
            empty_body: false,
        }
    }

    /// 400 "Parameter verification failed." with an `errors` map.
    pub fn params(errors: BTreeMap<String, String>) -> Self {
        ApiError {
            status: 400,
            message: "Parameter verification failed.\n".into(),
            errors: Some(errors),
            empty_body: false,
        }
    }

    /// 400 for one parameter.
    pub fn param(name: &str, msg: impl Into<String>) -> Self {
        Self::params([(name.to_string(), msg.into())].into_iter().collect())
    }

    /// 501 for an unknown path or method.
    pub fn not_implemented(method: &str, path: &str) -> Self {
        ApiError {
            status: 501,
            message: format!("Method '{method} {path}' not implemented"),
            errors: None,
            empty_body: false,
        }
    }

    /// 401 with an empty body.
    pub fn unauthorized(reason: &str) -> Self {
        ApiError {
            status: 401,
            message: reason.into(),
            errors: None,
            empty_body: true,
        }
    }

    /// 595: the node could not be reached (empty body).
    pub fn unreachable() -> Self {
        ApiError {
            status: 595,
            message: "No route to host".into(),
            errors: None,
            empty_body: true,
        }
    }

    /// `Configuration file 'nodes/<node>/qemu-server/<vmid>.conf' does not exist`.
    pub fn no_vm(node: &str, vmid: u32) -> Self {
        Self::die(format!(
            "Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist"
        ))
    }

    /// The reason phrase: first line of the message, restricted to what HTTP allows.
    pub fn reason(&self) -> String {
        let first = self.message.lines().next().unwrap_or("").trim_end();
        let cleaned: String = first
            .chars()
            .map(|c| {
                if c == '\t' || (' '..='~').contains(&c) {
                    c
                } else {
                    '?'
                }
            })
            .collect();
        if cleaned.is_empty() {
            "Error".into()
        } else {
            cleaned
        }
    }
}

fn base(status: u16) -> hyper::http::response::Builder {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::SERVER, "pve-api-daemon/3.0")
        .header(header::CACHE_CONTROL, "max-age=0")
        .header(header::PRAGMA, "no-cache")
}

/// `200 OK` with `{"data": data}`.
pub fn ok(data: Value) -> Resp {
    json_response(200, None, &json!({ "data": data }))
}

/// A JSON response with an optional custom reason phrase.
pub fn json_response(status: u16, reason: Option<String>, body: &Value) -> Resp {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut resp = base(status)
        .header(header::CONTENT_TYPE, "application/json;charset=UTF-8")
        .body(Full::new(Bytes::from(bytes)))
        .expect("valid response");
    if let Some(r) = reason
        && let Ok(rp) = hyper::ext::ReasonPhrase::try_from(r.into_bytes())
    {
        resp.extensions_mut().insert(rp);
    }
    resp
}

/// The response for an error; `with_message` adds the `message` key (PVE >= 8.3).
pub fn error(err: &ApiError, with_message: bool) -> Resp {
    if err.empty_body {
        let mut resp = base(err.status)
            .body(Full::new(Bytes::new()))
            .expect("valid response");
        if let Ok(rp) = hyper::ext::ReasonPhrase::try_from(err.reason().into_bytes()) {
            resp.extensions_mut().insert(rp);
        }
        return resp;
    }
    let mut body = json!({ "data": null });
    if let Some(errors) = &err.errors {
        body["errors"] = json!(errors);
    }
    if with_message {
        body["message"] = json!(err.message);
    }
    json_response(err.status, Some(err.reason()), &body)
}

/// A plain JSON document outside the PVE envelope (for `/_sim/`).
pub fn raw_json(status: u16, body: &Value) -> Resp {
    json_response(status, None, body)
}
