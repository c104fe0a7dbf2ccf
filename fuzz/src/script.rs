//! A fuzz input as a plugin's world: the request's inputs (header lines) and what the
//! infrastructure API answers (routes, each with the replies it gives in turn).
//!
//! The format is line-based text, so seeds are readable, recorded from pve-sim or
//! written from real captures, and a mutation of one line leaves the others intact:
//!
//! ```text
//! # a comment
//! spec {"templateID":9000,"sourceNode":"pve1"}
//! cluster {"allowedNodes":["pve1"]}
//! @ GET /nodes/pve1/tasks/*/status
//! 200 {"data":{"status":"running"}}
//! 200 {"data":{"status":"stopped","exitstatus":"OK"}}
//! @ POST /nodes/pve1/qemu/9000/clone
//! 500	VM is locked (clone)	{"data":null}
//! !transport connection reset by peer
//! ```
//!
//! A header line is a key and the rest of the line. A route (`@ METHOD PATH`) matches
//! the request's path below the API root (`/api2/json` for PVE), without the query, one
//! segment at a time (`*` is any one segment); its replies are given in order, the last
//! one again and again. A reply is `STATUS BODY` or `STATUS<tab>REASON<tab>BODY` (the
//! reason phrase, which PVE puts its error in), or a request that got no answer:
//! `!transport`, `!denied` or `!invalid` with a message. A request no route matches gets
//! PVE's answer to an unknown path: 501 "Method '... ' not implemented".
// The format separates a reply's fields with tabs, and so does its example above.
#![allow(clippy::tabs_in_doc_comments)]
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use guest_kit::fuzzing::Host;
use guest_kit::http::{HttpError, Request, Response};
use guest_kit::log::Level;

/// Most requests one input answers: a plugin that loops on replies ends there (with
/// transport errors), and the fuzzer's time goes to the next input.
const MAX_REQUESTS: usize = 2_000;

/// A parsed input.
#[derive(Debug, Clone, Default)]
pub struct Script {
    headers: BTreeMap<String, Vec<String>>,
    routes: Vec<Route>,
}

#[derive(Debug, Clone)]
struct Route {
    method: String,
    segments: Vec<String>,
    replies: Vec<Reply>,
}

/// One reply of a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Http {
        status: u16,
        reason: Option<String>,
        body: Vec<u8>,
    },
    Transport(String),
    Denied(String),
    Invalid(String),
}

impl Script {
    /// Parse an input; what is not understood is left out (never an error).
    pub fn parse(input: &[u8]) -> Script {
        let mut script = Script::default();
        for line in input.split(|b| *b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() || line[0] == b'#' {
                continue;
            }
            if let Some(route) = line.strip_prefix(b"@ ") {
                let route = String::from_utf8_lossy(route);
                let mut words = route.split_whitespace();
                let (Some(method), Some(path)) = (words.next(), words.next()) else {
                    continue;
                };
                script.routes.push(Route {
                    method: method.to_string(),
                    segments: segments(path),
                    replies: vec![],
                });
            } else if let Some(reply) = Reply::parse(line) {
                if let Some(route) = script.routes.last_mut() {
                    route.replies.push(reply);
                }
            } else {
                let text = String::from_utf8_lossy(line);
                let (key, value) = text.split_once(' ').unwrap_or((&text, ""));
                script
                    .headers
                    .entry(key.to_string())
                    .or_default()
                    .push(value.to_string());
            }
        }
        script
    }

    /// The first header line with this key.
    pub fn header(&self, key: &str) -> Option<&str> {
        self.headers
            .get(key)
            .and_then(|v| v.first())
            .map(String::as_str)
    }

    /// Every header line with this key, in order.
    pub fn headers(&self, key: &str) -> &[String] {
        self.headers.get(key).map_or(&[], Vec::as_slice)
    }

    /// The script as the host a plugin's calls talk to, and a handle on what it saw.
    pub fn into_host(self) -> (ScriptedHost, Rc<RefCell<Seen>>) {
        let seen = Rc::new(RefCell::new(Seen::default()));
        let host = ScriptedHost {
            routes: self.routes.into_iter().map(|r| (r, 0)).collect(),
            seen: seen.clone(),
        };
        (host, seen)
    }
}

impl Reply {
    fn parse(line: &[u8]) -> Option<Reply> {
        if let Some(rest) = line.strip_prefix(b"!") {
            let text = String::from_utf8_lossy(rest);
            let (kind, message) = text.split_once(' ').unwrap_or((&text, ""));
            let message = message.to_string();
            return match kind {
                "transport" => Some(Reply::Transport(message)),
                "denied" => Some(Reply::Denied(message)),
                "invalid" => Some(Reply::Invalid(message)),
                _ => None,
            };
        }
        let digits = line.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 || digits > 5 {
            return None;
        }
        let status: u16 = std::str::from_utf8(&line[..digits]).ok()?.parse().ok()?;
        let rest = &line[digits..];
        if let Some(rest) = rest.strip_prefix(b"\t") {
            let end = rest.iter().position(|b| *b == b'\t').unwrap_or(rest.len());
            let reason = String::from_utf8_lossy(&rest[..end]).into_owned();
            let body = rest.get(end + 1..).unwrap_or_default().to_vec();
            return Some(Reply::Http {
                status,
                reason: Some(reason),
                body,
            });
        }
        let body = rest.strip_prefix(b" ").unwrap_or(rest).to_vec();
        Some(Reply::Http {
            status,
            reason: None,
            body,
        })
    }

    /// The reply as one line of the format.
    pub fn to_line(&self) -> String {
        match self {
            Reply::Http {
                status,
                reason: Some(reason),
                body,
            } => format!("{status}\t{reason}\t{}", String::from_utf8_lossy(body)),
            Reply::Http { status, body, .. } => {
                format!("{status} {}", String::from_utf8_lossy(body))
            }
            Reply::Transport(m) => format!("!transport {m}"),
            Reply::Denied(m) => format!("!denied {m}"),
            Reply::Invalid(m) => format!("!invalid {m}"),
        }
    }

    fn answer(&self) -> Result<Response, HttpError> {
        match self {
            Reply::Http {
                status,
                reason,
                body,
            } => Ok(Response {
                status: *status,
                reason: reason.clone(),
                body: body.clone(),
            }),
            Reply::Transport(m) => Err(HttpError::Transport(m.clone())),
            Reply::Denied(m) => Err(HttpError::Denied(m.clone())),
            Reply::Invalid(m) => Err(HttpError::Invalid(m.clone())),
        }
    }
}

/// What the plugin asked and said during the calls.
#[derive(Debug, Default)]
pub struct Seen {
    /// `METHOD path` (below the API root, with the query) of every request, in order.
    pub requests: Vec<String>,
    /// The request bodies, in the same order (empty when there was none).
    pub bodies: Vec<Vec<u8>>,
    /// Every log line: the message, then its fields' values.
    pub logs: Vec<String>,
}

/// The host of a script: answers HTTP from its routes and keeps the log.
pub struct ScriptedHost {
    routes: Vec<(Route, usize)>,
    seen: Rc<RefCell<Seen>>,
}

impl Host for ScriptedHost {
    fn http(&mut self, request: &Request<'_>) -> Result<Response, HttpError> {
        let path = api_path(request.url);
        let mut seen = self.seen.borrow_mut();
        if seen.requests.len() >= MAX_REQUESTS {
            return Err(HttpError::Transport(
                "the fuzz input's request budget is spent".into(),
            ));
        }
        seen.requests.push(format!("{} {path}", request.method));
        seen.bodies.push(request.body.clone().unwrap_or_default());
        drop(seen);
        let wanted = segments(path.split('?').next().unwrap_or_default());
        let route = self.routes.iter_mut().find(|(r, _)| {
            r.method == request.method
                && r.segments.len() == wanted.len()
                && r.segments
                    .iter()
                    .zip(&wanted)
                    .all(|(p, s)| p == "*" || p == s)
        });
        match route {
            Some((r, next)) if !r.replies.is_empty() => {
                let reply = &r.replies[(*next).min(r.replies.len() - 1)];
                *next += 1;
                reply.answer()
            }
            _ => {
                let message = format!("Method '{} {path}' not implemented", request.method);
                Ok(Response {
                    status: 501,
                    reason: Some(message.clone()),
                    body: serde_json::json!({"data": null, "message": message})
                        .to_string()
                        .into_bytes(),
                })
            }
        }
    }

    fn log(&mut self, _level: Level, message: &str, fields: &[(&str, String)]) {
        let mut line = message.to_string();
        for (k, v) in fields {
            line.push_str(&format!(" {k}={v}"));
        }
        self.seen.borrow_mut().logs.push(line);
    }
}

/// The path of `url` below its authority and, for PVE, below `/api2/json`.
pub fn api_path(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let path = rest.find('/').map_or("/", |i| &rest[i..]);
    path.strip_prefix("/api2/json").unwrap_or(path)
}

fn segments(path: &str) -> Vec<String> {
    path.split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request<'a>(method: &'a str, url: &'a str) -> Request<'a> {
        Request {
            method,
            url,
            headers: vec![],
            body: None,
        }
    }

    #[test]
    fn a_route_gives_its_replies_in_turn_then_repeats_the_last() {
        let script = Script::parse(
            b"spec {}\n@ GET /nodes/*/tasks/*/status\n200 {\"data\":{\"status\":\"running\"}}\n200\tOK\t{\"data\":{\"status\":\"stopped\"}}\n",
        );
        assert_eq!(script.header("spec"), Some("{}"));
        let (mut host, seen) = script.into_host();
        let url = "https://pve.test:8006/api2/json/nodes/pve1/tasks/UPID%3Ax/status";
        let bodies: Vec<String> = (0..3)
            .map(|_| {
                let r = host.http(&request("GET", url)).unwrap();
                String::from_utf8(r.body).unwrap()
            })
            .collect();
        assert!(bodies[0].contains("running"));
        assert!(bodies[1].contains("stopped") && bodies[2].contains("stopped"));
        assert_eq!(
            seen.borrow().requests[0],
            "GET /nodes/pve1/tasks/UPID%3Ax/status"
        );
    }

    #[test]
    fn an_unknown_path_gets_pves_501_and_a_dead_route_a_transport_error() {
        let (mut host, _) = Script::parse(b"@ POST /a\n!transport reset\n").into_host();
        let r = host
            .http(&request("GET", "https://h/api2/json/x?y=1"))
            .unwrap();
        assert_eq!(r.status, 501);
        assert_eq!(
            r.reason.as_deref(),
            Some("Method 'GET /x?y=1' not implemented")
        );
        assert!(matches!(
            host.http(&request("POST", "https://h/a")),
            Err(HttpError::Transport(m)) if m == "reset"
        ));
    }

    #[test]
    fn replies_print_back_as_the_lines_they_were_parsed_from() {
        for line in [
            "200 {\"data\":1}",
            "500\tVM is locked\t{}",
            "!denied no",
            "404 ",
        ] {
            assert_eq!(Reply::parse(line.as_bytes()).unwrap().to_line(), line);
        }
    }
}
