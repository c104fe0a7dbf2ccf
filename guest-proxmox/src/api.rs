//! The Proxmox VE API client: URL building, token auth, the `{"data": ...}` envelope and
//! PVE's error formats, classified into the host's three error classes.
use std::cell::RefCell;
use std::collections::HashMap;

use guest_kit::http::{self, HttpError};
use guest_kit::types::{Credentials, PluginError};
use guest_kit::{fnv1a, terminal, transient};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::machine::properties::is_drive_key;

/// One connection's worth of settings: where and who.
pub struct Pve {
    base: String,
    auth: String,
    /// VM configs this call read (`GET .../config`), kept until it writes anything or
    /// polls a task (either may change a config): one call's steps each read the
    /// config, and would otherwise read the same one several times.
    configs: RefCell<HashMap<String, Value>>,
}

/// A failed API call, with PVE's own words kept.
#[derive(Debug)]
pub enum PveError {
    /// PVE answered with an error status.
    Status {
        status: u16,
        message: String,
        errors: Option<Value>,
    },
    /// No answer: network, TLS, or the host refused the destination.
    Http(HttpError),
    /// An answer we cannot read.
    BadReply(String),
}

impl std::fmt::Display for PveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PveError::Status {
                status,
                message,
                errors,
            } => {
                write!(f, "Proxmox API returned {status}: {message}")?;
                if let Some(errors) = errors {
                    write!(f, " {errors}")?;
                }
                Ok(())
            }
            PveError::Http(e) => write!(f, "cannot reach the Proxmox API: {e}"),
            PveError::BadReply(m) => write!(f, "unreadable Proxmox API reply: {m}"),
        }
    }
}

impl PveError {
    /// PVE says "not found" with a 500 and this phrase.
    pub fn is_not_found(&self) -> bool {
        matches!(self, PveError::Status { status: 500, message, .. } if message.contains("does not exist"))
    }

    /// PVE does not know the task of a UPID (any more): 500 "no such task".
    pub fn is_no_such_task(&self) -> bool {
        matches!(self, PveError::Status { status: 500, message, .. } if message.contains("no such task"))
    }

    /// Map to the host's classes: retry what may pass by itself, stop on what won't.
    pub fn classify(self, context: &str) -> PluginError {
        let text = format!("{context}: {self}");
        match &self {
            PveError::Http(e) => e.classify(text, None),
            PveError::BadReply(_) => transient(text, None),
            PveError::Status { status: 401, .. } => terminal("AuthenticationFailed", text),
            PveError::Status { status: 403, .. } => terminal("PermissionDenied", text),
            PveError::Status { status: 400, .. } => terminal("InvalidConfiguration", text),
            PveError::Status { status: 501, .. } => terminal("UnsupportedAPI", text),
            PveError::Status {
                status: 500,
                message,
                ..
            } => match classify_message(message) {
                Some(reason) => terminal(reason, text),
                None => transient(text, None),
            },
            PveError::Status { .. } => transient(text, None),
        }
    }
}

/// Terminal reasons for PVE error texts (500s and task exit statuses) that will not go
/// away by retrying; everything else (lock timeouts, busy VMs, 5xx, 595) is transient.
pub fn classify_message(message: &str) -> Option<&'static str> {
    let m = message.to_ascii_lowercase();
    if m.contains("got timeout") || m.contains("is locked") || m.contains("already running") {
        return None;
    }
    if m.contains("permission check failed") || m.contains("permission denied") {
        return Some("PermissionDenied");
    }
    let config = [
        "storage '",
        "pool '",
        "hostname lookup",
        "does not support",
        "can't clone vm to node",
        "can't clone to non-shared storage",
        "linked clone feature is not supported",
        "not allowed for linked clones",
        "no such cluster node",
        "shrinking disks is not supported",
        "can't upload to storage",
        "you can't start a vm if it's a template",
        "no such",
        "protection mode enabled",
    ];
    config
        .iter()
        .any(|p| m.contains(p))
        .then_some("InvalidConfiguration")
}

/// A PVE task's state, from `GET /nodes/{node}/tasks/{upid}/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Task {
    Running,
    /// `exitstatus` "OK" or "WARNINGS: N".
    Done,
    /// Any other `exitstatus`: PVE's error text.
    Failed(String),
}

pub type PveResult<T> = Result<T, PveError>;

#[allow(dead_code)]
impl Pve {
    /// From the call's credentials: `endpoint` may be `https://host:8006` or already end
    /// in `/api2/json`; `token` is `USER@REALM!TOKENID`, `secret` the token's UUID.
    pub fn new(credentials: &Credentials) -> Pve {
        let mut base = credentials.endpoint.trim_end_matches('/').to_string();
        if !base.ends_with("/api2/json") {
            base.push_str("/api2/json");
        }
        let auth = format!("PVEAPIToken={}={}", credentials.token, credentials.secret);
        Pve {
            base,
            auth,
            configs: RefCell::default(),
        }
    }

    /// The API's base URL (`https://host:8006/api2/json`): which PVE cluster this is.
    pub fn base(&self) -> &str {
        &self.base
    }

    pub fn get(&self, path: &str) -> PveResult<Value> {
        self.call("GET", path, None)
    }

    /// GET `path`, its `data` parsed straight into `T` (no tree of JSON values on the
    /// way: a large listing is parsed once, into what its reader keeps). Not cached.
    /// A reply without `data` (or `data: null`) is a bad reply, never an empty `T`: an
    /// empty listing would read as "no such VM".
    pub fn get_as<T: DeserializeOwned>(&self, path: &str) -> PveResult<T> {
        let response = http::send(http::Request {
            method: "GET",
            url: &format!("{}{path}", self.base),
            headers: vec![("authorization", self.auth.clone())],
            body: None,
        })
        .map_err(PveError::Http)?;
        unwrap_envelope(response)?
            .ok_or_else(|| PveError::BadReply(format!("GET {path} answered without `data`")))
    }

    /// POST with form parameters (`application/x-www-form-urlencoded`).
    pub fn post(&self, path: &str, form: &[(&str, String)]) -> PveResult<Value> {
        self.call("POST", path, Some(encode_form(form)))
    }

    /// A config write (`PUT .../config`) keeps the config this call read, with the write
    /// applied, when PVE stores the written values as given (see [`written_config`]).
    pub fn put(&self, path: &str, form: &[(&str, String)]) -> PveResult<Value> {
        let before = self.configs.borrow().get(path).cloned();
        let result = self.call("PUT", path, Some(encode_form(form)));
        if result.is_ok()
            && let Some(after) = before.and_then(|c| written_config(c, form))
        {
            self.configs.borrow_mut().insert(path.to_string(), after);
        }
        result
    }

    /// DELETE with parameters in the query string (PVE refuses a body on DELETE).
    pub fn delete(&self, path: &str, query: &[(&str, String)]) -> PveResult<Value> {
        let path = if query.is_empty() {
            path.to_string()
        } else {
            format!("{path}?{}", encode_form(query))
        };
        self.call("DELETE", &path, None)
    }

    /// The state of the task `upid`, asked of the node named in the UPID.
    pub fn task(&self, upid: &str) -> PveResult<Task> {
        let node = upid
            .split(':')
            .nth(1)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| PveError::BadReply(format!("`{upid}` is not a UPID")))?;
        let status = self.get(&format!(
            "/nodes/{}/tasks/{}/status",
            percent_encode(node),
            percent_encode(upid)
        ))?;
        let running = status.get("status").and_then(Value::as_str) == Some("running");
        if running {
            return Ok(Task::Running);
        }
        let exit = status
            .get("exitstatus")
            .and_then(Value::as_str)
            .unwrap_or("unknown task exit status");
        if exit == "OK" || exit.starts_with("WARNINGS") {
            Ok(Task::Done)
        } else {
            Ok(Task::Failed(exit.to_string()))
        }
    }

    /// Upload `data` as `filename` to `storage` on `node` (`content` e.g. `iso`):
    /// multipart with the `content` field first and the file part last, as PVE wants.
    /// Returns the `imgcopy` task's UPID.
    pub fn upload(
        &self,
        node: &str,
        storage: &str,
        content: &str,
        filename: &str,
        data: &[u8],
    ) -> PveResult<Value> {
        let boundary = format!("hyperplug-{:016x}", fnv1a(data));
        let mut body = Vec::with_capacity(data.len() + 512);
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"content\"\r\n\r\n{content}\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"filename\"; filename=\"{filename}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(data);
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        self.send_raw(
            "POST",
            &format!(
                "/nodes/{}/storage/{}/upload",
                percent_encode(node),
                percent_encode(storage)
            ),
            format!("multipart/form-data; boundary={boundary}"),
            body,
        )
    }

    fn call(&self, method: &str, path: &str, form: Option<String>) -> PveResult<Value> {
        let config_read = method == "GET" && path.ends_with("/config");
        if config_read {
            if let Some(v) = self.configs.borrow().get(path) {
                return Ok(v.clone());
            }
        } else if method != "GET" || path.contains("/tasks/") {
            self.configs.borrow_mut().clear();
        }
        let result = self.send(method, path, form);
        if let (true, Ok(v)) = (config_read, &result) {
            self.configs
                .borrow_mut()
                .insert(path.to_string(), v.clone());
        }
        result
    }

    fn send(&self, method: &str, path: &str, form: Option<String>) -> PveResult<Value> {
        let url = format!("{}{path}", self.base);
        let mut headers = vec![("authorization", self.auth.clone())];
        if form.is_some() {
            headers.push(("content-type", "application/x-www-form-urlencoded".into()));
        }
        let response = http::send(http::Request {
            method,
            url: &url,
            headers,
            body: form.map(String::into_bytes),
        })
        .map_err(PveError::Http)?;
        Ok(unwrap_envelope(response)?.unwrap_or(Value::Null))
    }

    /// Send a prepared request (multipart uploads) through the same auth and envelope.
    pub fn send_raw(
        &self,
        method: &str,
        path: &str,
        content_type: String,
        body: Vec<u8>,
    ) -> PveResult<Value> {
        self.configs.borrow_mut().clear();
        let url = format!("{}{path}", self.base);
        let headers = vec![
            ("authorization", self.auth.clone()),
            ("content-type", content_type),
        ];
        let response = http::send(http::Request {
            method,
            url: &url,
            headers,
            body: Some(body),
        })
        .map_err(PveError::Http)?;
        Ok(unwrap_envelope(response)?.unwrap_or(Value::Null))
    }
}

/// `{"data": X}` → X (`None` when absent or `null`); errors keep PVE's message (body
/// `message` since 8.3, else the reason phrase the host passes along) and the
/// per-parameter `errors`.
fn unwrap_envelope<T: DeserializeOwned>(response: http::Response) -> PveResult<Option<T>> {
    if (200..300).contains(&response.status) {
        #[derive(Deserialize)]
        struct Envelope<T> {
            data: Option<T>,
        }
        // Only an object is an envelope (serde would also read `[x]` as one).
        if response.body.trim_ascii_start().first() != Some(&b'{') {
            return Err(PveError::BadReply(format!(
                "status {} with a body that is not a JSON object",
                response.status
            )));
        }
        return match serde_json::from_slice::<Envelope<T>>(&response.body) {
            Ok(e) => Ok(e.data),
            Err(e) if e.is_data() => Err(PveError::BadReply(format!(
                "expected {{\"data\": ...}} of the usual shape: {e}"
            ))),
            Err(e) => Err(PveError::BadReply(format!(
                "status {} with a body that is not JSON: {e}",
                response.status
            ))),
        };
    }
    let parsed: Option<Value> = serde_json::from_slice(&response.body).ok();
    let message = parsed
        .as_ref()
        .and_then(|b| b.get("message"))
        .and_then(Value::as_str)
        .map(|m| m.trim().to_string())
        .or_else(|| response.reason.clone())
        .unwrap_or_else(|| format!("HTTP {}", response.status));
    let errors = parsed
        .and_then(|mut b| b.get_mut("errors").map(Value::take))
        .filter(|e| !e.is_null());
    Err(PveError::Status {
        status: response.status,
        message,
        errors,
    })
}

/// Form-encode, percent-encoding everything outside the unreserved set: an unescaped
/// `=` or `&` inside a value would truncate it on the PVE side.
#[allow(dead_code)]
pub fn encode_form(pairs: &[(&str, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

#[allow(dead_code)]
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `config` after PVE applied the config write `form`, or `None` when PVE would store
/// something other than what was sent: a NIC without a MAC (PVE makes one up), a disk
/// given as a size or a cloud-init drive (PVE allocates a volume). The digest changes
/// with every write and is dropped (a later write in the call sends none).
fn written_config(mut config: Value, form: &[(&str, String)]) -> Option<Value> {
    let map = config.as_object_mut()?;
    map.remove("digest");
    for (key, value) in form {
        match *key {
            "digest" | "skiplock" | "background_delay" => {}
            "delete" => {
                for k in value.split([',', ';', ' ']).filter(|k| !k.is_empty()) {
                    map.remove(k);
                }
            }
            "revert" => return None,
            k if k.starts_with("net") && !value.split(',').next()?.contains('=') => return None,
            k if is_drive_key(k) && allocates(value) => return None,
            k => {
                map.insert(k.to_string(), Value::String(value.clone()));
            }
        }
    }
    Some(config)
}

/// A drive value PVE turns into a new volume (`local-lvm:32`, `local-lvm:cloudinit`).
fn allocates(value: &str) -> bool {
    let file = value.split(',').next().unwrap_or_default();
    file.split_once(':').is_some_and(|(_, rest)| {
        rest == "cloudinit" || (!rest.is_empty() && rest.parse::<f64>().is_ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: u16, body: &str) -> http::Response {
        http::Response {
            status,
            reason: None,
            body: body.as_bytes().to_vec(),
        }
    }

    /// A listing's `data` missing or `null` must not read as an empty cluster (no VMs:
    /// a delete would take its VM for gone), and only an object is an envelope.
    #[test]
    fn an_envelope_without_data_is_told_apart_from_empty_data() {
        let none = |body| unwrap_envelope::<Vec<u32>>(reply(200, body)).unwrap();
        assert_eq!(none("{}"), None);
        assert_eq!(none(r#"{"data": null}"#), None);
        assert_eq!(none(r#"{"data": []}"#), Some(vec![]));
        assert!(matches!(
            unwrap_envelope::<Vec<u32>>(reply(200, "[[1]]")),
            Err(PveError::BadReply(_))
        ));
        assert!(matches!(
            unwrap_envelope::<Value>(reply(500, r#"{"message": "VM 1 is locked"}"#)),
            Err(PveError::Status { status: 500, .. })
        ));
    }

    #[test]
    fn a_config_write_is_applied_to_the_config_read_unless_pve_would_store_other_values() {
        let read = serde_json::json!({
            "digest": "abc", "net0": "virtio=BC:24:11:00:00:01,bridge=vmbr0",
            "ide2": "local:iso/a.iso,media=cdrom", "tags": "x",
        });
        let after = written_config(
            read.clone(),
            &[
                ("tags", "hyperplug;x".into()),
                ("delete", "ide2".into()),
                ("digest", "abc".into()),
                ("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr1".into()),
            ],
        )
        .expect("kept");
        assert_eq!(
            after,
            serde_json::json!({"net0": "virtio=BC:24:11:00:00:01,bridge=vmbr1", "tags": "hyperplug;x"})
        );
        assert!(written_config(read.clone(), &[("net1", "virtio,bridge=vmbr2".into())]).is_none());
        assert!(written_config(read.clone(), &[("scsi1", "local-lvm:32".into())]).is_none());
        assert!(written_config(read, &[("ide0", "local-lvm:cloudinit".into())]).is_none());
    }

    fn status(status: u16, message: &str) -> PveError {
        PveError::Status {
            status,
            message: message.into(),
            errors: None,
        }
    }

    /// `terminal:<reason>` or `transient`.
    fn class(e: PveError) -> String {
        match e.classify("doing") {
            PluginError::Terminal(t) => format!("terminal:{}", t.reason),
            PluginError::Transient(_) => "transient".into(),
            PluginError::InvalidSpec(i) => format!("invalid:{}", i.field),
        }
    }

    #[test]
    fn pve_errors_are_terminal_only_when_retrying_cannot_help() {
        assert_eq!(
            class(status(401, "no ticket")),
            "terminal:AuthenticationFailed"
        );
        assert_eq!(
            class(status(403, "Permission check failed")),
            "terminal:PermissionDenied"
        );
        assert_eq!(
            class(status(400, "Parameter verification failed.")),
            "terminal:InvalidConfiguration"
        );
        assert_eq!(
            class(status(501, "Method not implemented")),
            "terminal:UnsupportedAPI"
        );
        assert_eq!(
            class(status(500, "storage 'fast' does not exist")),
            "terminal:InvalidConfiguration"
        );
        assert_eq!(
            class(status(
                500,
                "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout"
            )),
            "transient"
        );
        assert_eq!(class(status(503, "service unavailable")), "transient");
        assert_eq!(class(status(595, "Connection refused")), "transient");
        assert_eq!(class(PveError::BadReply("not json".into())), "transient");
    }

    #[test]
    fn transport_errors_are_transient_but_a_refused_destination_or_bad_tls_is_not() {
        let http = |e| class(PveError::Http(e));
        assert_eq!(
            http(HttpError::Transport("connection refused".into())),
            "transient"
        );
        assert_eq!(
            http(HttpError::Denied("no".into())),
            "terminal:EndpointNotAllowed"
        );
        assert_eq!(
            http(HttpError::Invalid("bad url".into())),
            "terminal:InvalidEndpoint"
        );
        assert_eq!(
            http(HttpError::Tls(
                "TLS verification failed: unknown issuer".into()
            )),
            "terminal:TLSVerificationFailed"
        );
    }

    #[test]
    fn an_untrusted_certificate_says_how_the_secret_can_trust_it() {
        let e = PveError::Http(HttpError::Tls(
            "TLS verification failed: unknown issuer".into(),
        ))
        .classify("checking the Proxmox API");
        let PluginError::Terminal(t) = e else {
            panic!("terminal expected");
        };
        for key in [
            "ca.crt",
            "fingerprint",
            "insecure: \"true\"",
            "without `insecure` is verified",
        ] {
            assert!(t.message.contains(key), "{key}: {}", t.message);
        }
    }

    #[test]
    fn task_exit_texts_that_will_not_pass_by_retrying_have_a_reason() {
        assert_eq!(classify_message("VM is locked (clone)"), None);
        assert_eq!(classify_message("VM 100 already running"), None);
        assert_eq!(
            classify_message("shrinking disks is not supported"),
            Some("InvalidConfiguration")
        );
        assert_eq!(
            classify_message("Permission check failed (/vms/100, VM.Allocate)"),
            Some("PermissionDenied")
        );
        assert_eq!(classify_message("some unexpected hiccup"), None);
    }

    #[test]
    fn not_found_is_pves_500_saying_it_does_not_exist() {
        assert!(
            status(
                500,
                "Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist"
            )
            .is_not_found()
        );
        assert!(!status(404, "not found").is_not_found());
        assert!(!status(500, "got timeout").is_not_found());
    }

    #[test]
    fn forms_escape_everything_that_could_end_a_value() {
        let form = encode_form(&[
            (
                "description",
                "a=b&c d\nhyperplug.machine-uid=x".to_string(),
            ),
            ("tags", "hyperplug;k8s".to_string()),
        ]);
        assert_eq!(
            form,
            "description=a%3Db%26c%20d%0Ahyperplug.machine-uid%3Dx&tags=hyperplug%3Bk8s"
        );
        assert_eq!(
            percent_encode("UPID:pve1:0000:~x"),
            "UPID%3Apve1%3A0000%3A~x"
        );
    }
}
