//! Shared helpers: start a simulator, an HTTPS client trusting its CA, task polling, and
//! checks of response bodies against the official schema's `returns`.

use std::path::PathBuf;
use std::time::Duration;

use pve_sim::{Config, ListenOpts, RunningSim, Simulator};
use reqwest::{Client, Method, Response, StatusCode};
use serde_json::Value;

pub const TOKEN: &str = "PVEAPIToken=capmox@pve!capi=REDACTED-SIM-SECRET";

pub struct Sim {
    pub sim: RunningSim,
    pub http: Client,
}

pub async fn start(config: Config) -> Sim {
    let sim = Simulator::start(
        config,
        ListenOpts {
            addr: "127.0.0.1:0".into(),
            tls: true,
        },
    )
    .await
    .expect("simulator starts");
    let ca = reqwest::Certificate::from_pem(sim.ca_pem().as_bytes()).expect("CA parses");
    let http = Client::builder()
        .add_root_certificate(ca)
        .tls_built_in_root_certs(false)
        .build()
        .expect("client");
    Sim { sim, http }
}

pub async fn start_fast() -> Sim {
    start(Config::fast()).await
}

pub struct Reply {
    pub status: StatusCode,
    pub reason: String,
    pub text: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text))
    }
    pub fn data(&self) -> Value {
        assert_eq!(
            self.status,
            StatusCode::OK,
            "expected 200, got {} {}: {}",
            self.status,
            self.reason,
            self.text
        );
        self.json()["data"].clone()
    }
    pub fn message(&self) -> String {
        self.json()["message"].as_str().unwrap_or("").to_string()
    }
}

async fn reply(r: Response) -> Reply {
    let status = r.status();
    // reqwest exposes the canonical reason only; read the raw one from the extension.
    let reason = r
        .extensions()
        .get::<hyper::ext::ReasonPhrase>()
        .map(|p| String::from_utf8_lossy(p.as_bytes()).into_owned())
        .unwrap_or_default();
    let text = r.text().await.expect("body");
    Reply {
        status,
        reason,
        text,
    }
}

impl Sim {
    pub fn url(&self, path: &str) -> String {
        format!("{}/api2/json{path}", self.sim.base_url())
    }

    /// A request with the default token; `form` goes to the query for GET/DELETE and to an
    /// urlencoded body otherwise.
    pub async fn call(&self, method: Method, path: &str, form: &[(&str, &str)]) -> Reply {
        let mut rb = self
            .http
            .request(method.clone(), self.url(path))
            .header("Authorization", TOKEN);
        if method == Method::GET || method == Method::DELETE {
            rb = rb.query(form);
        } else {
            let body = form
                .iter()
                .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
                .collect::<Vec<_>>()
                .join("&");
            rb = rb
                .header("Content-Type", "application/x-www-form-urlencoded")
                .body(body);
        }
        reply(rb.send().await.expect("request")).await
    }

    pub async fn send(&self, rb: reqwest::RequestBuilder) -> Reply {
        reply(rb.send().await.expect("request")).await
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.call(Method::GET, path, &[]).await
    }

    /// Waits until a task has stopped; returns its status object.
    pub async fn wait_task(&self, upid: &str) -> Value {
        let node = upid.split(':').nth(1).expect("node in UPID");
        let path = format!("/nodes/{node}/tasks/{}/status", enc(upid));
        for _ in 0..2000 {
            let st = self.get(&path).await.data();
            if st["status"] == "stopped" {
                return st;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("task {upid} did not finish");
    }

    /// Runs a task-returning call and waits for it; returns the final status.
    pub async fn task(&self, method: Method, path: &str, form: &[(&str, &str)]) -> Value {
        let r = self.call(method, path, form).await;
        let upid = r.data().as_str().expect("UPID").to_string();
        self.wait_task(&upid).await
    }

    pub async fn sim_get(&self, path: &str) -> Value {
        self.http
            .get(format!("{}{path}", self.sim.base_url()))
            .send()
            .await
            .expect("inspection request")
            .json()
            .await
            .expect("inspection JSON")
    }

    /// Polls until `f` holds (at most ~10 s).
    pub async fn eventually<F: Fn(&Value) -> bool>(&self, path: &str, f: F) -> Value {
        for _ in 0..2000 {
            let r = self.get(path).await;
            if r.status == StatusCode::OK {
                let d = r.data();
                if f(&d) {
                    return d;
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("condition on {path} never held");
    }
}

/// Percent-encodes everything but unreserved characters.
pub fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

// ---- schema checks ----

/// A file of the PVE reference data kept in the repository (`tests/pve-sim/reference/`,
/// see its README).
pub fn reference_path(file: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/reference")).join(file)
}

pub fn reference(file: &str) -> Value {
    let path = reference_path(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reference file {}: {e}", path.display()));
    serde_json::from_str(&text).expect("reference JSON")
}

/// The official schema: the subset in `reference/`, plus `schema/official-extra.json`
/// (the same source's entries for the further endpoints pve-sim serves).
pub fn schema() -> &'static Value {
    static S: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        let mut all = reference("pve-api-schema-capi-subset.json");
        let extra: Value =
            serde_json::from_str(include_str!("../../../schema/official-extra.json"))
                .expect("official-extra.json");
        for (version, eps) in extra["endpoints"].as_object().expect("versions") {
            let into = all["endpoints"][version]
                .as_object_mut()
                .expect("version in the subset");
            for (ep, def) in eps.as_object().expect("endpoints") {
                into.insert(ep.clone(), def.clone());
            }
        }
        all
    })
}

/// Fields real PVE returns although the schema does not declare them (seen in real
/// captures, `reference/real-pve9-captures.json` and the go-proxmox ones of the shared
/// reference set, not kept here: `/nodes` has `disk`, `id`, `maxdisk`, `type`; content
/// listings have `content`; the qemu lists have `disk`; `cpuinfo` of node status has
/// `flags`, `hvm`, `mhz`, `user_hz` in the go-proxmox capture; the ticket answer has `cap`,
/// the capabilities the web UI reads). Undeclared fields are flagged only
/// against the newest (9.1.3) schema: older schemas leave out fields those versions
/// return (`tags`, `template`, `diskread`, ... in `/cluster/resources`).
const UNDECLARED_BUT_REAL: &[&str] = &[
    "disk", "id", "maxdisk", "type", "content", "flags", "hvm", "mhz", "user_hz", "cap",
];

fn truthy(v: &Value) -> bool {
    match v {
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => s == "1",
        _ => false,
    }
}

fn check(schema: &Value, v: &Value, path: &str, errs: &mut Vec<String>, strict: bool) {
    let ty = schema["type"].as_str().unwrap_or("any");
    let ok = match ty {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean() || v.as_u64().is_some_and(|n| n <= 1),
        "null" => v.is_null(),
        _ => true,
    };
    if !ok {
        errs.push(format!("{path}: expected {ty}, got {v}"));
        return;
    }
    if let Some(en) = schema["enum"].as_array()
        && v.is_string()
        && !en.contains(v)
    {
        errs.push(format!("{path}: {v} not in enum {en:?}"));
    }
    match ty {
        "object" => {
            let obj = v.as_object().expect("object");
            if let Some(props) = schema["properties"].as_object() {
                for (k, p) in props.iter().filter(|(k, _)| !k.ends_with("[n]")) {
                    match obj.get(k) {
                        Some(x) => check(p, x, &format!("{path}.{k}"), errs, strict),
                        None if !truthy(&p["optional"]) => {
                            errs.push(format!("{path}.{k}: missing (not optional)"))
                        }
                        None => {}
                    }
                }
                let extra_ok = schema.get("additionalProperties").is_some_and(truthy);
                for (k, x) in obj.iter().filter(|(k, _)| !props.contains_key(*k)) {
                    // indexed keys (net0 -> net[n])
                    let base = k.trim_end_matches(|c: char| c.is_ascii_digit());
                    if base.len() < k.len()
                        && let Some(p) = props.get(&format!("{base}[n]"))
                    {
                        check(p, x, &format!("{path}.{k}"), errs, strict);
                    } else if strict && !extra_ok && !UNDECLARED_BUT_REAL.contains(&k.as_str()) {
                        errs.push(format!("{path}.{k}: not declared in the schema"));
                    }
                }
            }
        }
        "array" => {
            if let Some(items) = schema.get("items") {
                for (i, x) in v.as_array().expect("array").iter().enumerate() {
                    check(items, x, &format!("{path}[{i}]"), errs, strict);
                }
            }
        }
        _ => {}
    }
}

/// Checks `data` against the `returns` of `endpoint` ("GET /nodes/{node}/status") in the
/// official schema of `version`; returns the violations.
pub fn violations(version: &str, endpoint: &str, data: &Value) -> Vec<String> {
    let ep = &schema()["endpoints"][version][endpoint];
    assert!(ep.is_object(), "{endpoint} not in the {version} schema");
    let mut errs = vec![];
    check(&ep["returns"], data, "data", &mut errs, version == "9.1.3");
    errs
}

/// Panics unless `data` matches the 9.1.3 schema of `endpoint`.
pub fn assert_shape(endpoint: &str, data: &Value) {
    let errs = violations("9.1.3", endpoint, data);
    assert!(
        errs.is_empty(),
        "{endpoint} response does not match the schema:\n{}",
        errs.join("\n")
    );
}
