//! The one Redfish client: JSON over the plugin's HTTP helper, HTTP Basic
//! authentication with the BMC's credentials, errors classified for the host.
use base64::Engine as _;
use guest_kit::http::{self, HttpError};
use guest_kit::types::{Credentials, PluginError};
use guest_kit::{terminal, transient};
use serde_json::Value;

/// One BMC.
pub struct Redfish {
    base: String,
    auth: String,
}

#[derive(Debug)]
pub enum RedfishError {
    Http(HttpError),
    /// A non-2xx answer, with the BMC's own message when it gave one.
    Status {
        status: u16,
        message: String,
    },
    /// A 2xx answer that is not the JSON we expect.
    Body(String),
}

impl std::fmt::Display for RedfishError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RedfishError::Http(e) => write!(f, "{e}"),
            RedfishError::Status { status, message } => write!(f, "HTTP {status}: {message}"),
            RedfishError::Body(m) => write!(f, "unexpected answer: {m}"),
        }
    }
}

/// Retry hint for a BMC that is busy or unreachable.
const RETRY_MS: u64 = 5_000;

impl RedfishError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, RedfishError::Status { status: 404, .. })
    }

    /// The plugin error this is, `doing` saying what failed (e.g. `inserting media`).
    pub fn classify(&self, doing: &str) -> PluginError {
        let text = format!("{doing}: {self}");
        match self {
            RedfishError::Http(e) => e.classify(text, Some(RETRY_MS)),
            RedfishError::Status { status: 401, .. } => terminal("AuthenticationFailed", text),
            RedfishError::Status { status: 403, .. } => terminal("PermissionDenied", text),
            RedfishError::Status { status: 404, .. } => terminal("NotFound", text),
            RedfishError::Status { status, .. } if *status == 429 || *status >= 500 => {
                transient(text, Some(RETRY_MS))
            }
            RedfishError::Status { .. } => terminal("BmcRefused", text),
            RedfishError::Body(_) => transient(text, Some(RETRY_MS)),
        }
    }
}

pub type RedfishResult<T> = Result<T, RedfishError>;

impl Redfish {
    /// `endpoint` is the BMC's base URL (`https://10.0.0.21`); `token` and `secret` the
    /// user name and password.
    pub fn new(credentials: &Credentials) -> Redfish {
        let pair = format!("{}:{}", credentials.token, credentials.secret);
        Redfish {
            base: credentials.endpoint.trim_end_matches('/').to_string(),
            auth: format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            ),
        }
    }

    pub fn get(&self, path: &str) -> RedfishResult<Value> {
        self.send("GET", path, None)
    }

    pub fn post(&self, path: &str, body: &Value) -> RedfishResult<Value> {
        self.send("POST", path, Some(body))
    }

    pub fn patch(&self, path: &str, body: &Value) -> RedfishResult<Value> {
        self.send("PATCH", path, Some(body))
    }

    /// The `@odata.id` paths of a collection's members.
    pub fn members(&self, collection: &str) -> RedfishResult<Vec<String>> {
        let c = self.get(collection)?;
        Ok(c.get("Members")
            .and_then(Value::as_array)
            .map(|m| m.iter().filter_map(odata_id).collect())
            .unwrap_or_default())
    }

    fn send(&self, method: &str, path: &str, body: Option<&Value>) -> RedfishResult<Value> {
        let url = format!("{}{path}", self.base);
        let mut headers = vec![
            ("authorization", self.auth.clone()),
            ("accept", "application/json".to_string()),
            ("odata-version", "4.0".to_string()),
        ];
        if body.is_some() {
            headers.push(("content-type", "application/json".to_string()));
        }
        let response = http::send(http::Request {
            method,
            url: &url,
            headers,
            body: body.map(|b| b.to_string().into_bytes()),
        })
        .map_err(RedfishError::Http)?;
        let json: Option<Value> = serde_json::from_slice(&response.body).ok();
        if !(200..300).contains(&response.status) {
            let message = json
                .as_ref()
                .and_then(error_message)
                .or(response.reason)
                .unwrap_or_else(|| {
                    String::from_utf8_lossy(&response.body)
                        .chars()
                        .take(200)
                        .collect()
                });
            return Err(RedfishError::Status {
                status: response.status,
                message,
            });
        }
        if response.body.is_empty() {
            return Ok(Value::Null);
        }
        match json {
            Some(v) => Ok(v),
            // Actions may answer with text; only GETs must be JSON.
            None if method != "GET" => Ok(Value::Null),
            None => Err(RedfishError::Body(format!(
                "{method} {path} did not return JSON"
            ))),
        }
    }
}

/// A Redfish error body's most specific message.
fn error_message(v: &Value) -> Option<String> {
    let error = v.get("error")?;
    error
        .get("@Message.ExtendedInfo")
        .and_then(Value::as_array)
        .and_then(|infos| infos.iter().find_map(|i| i.get("Message")?.as_str()))
        .or_else(|| error.get("message")?.as_str())
        .map(str::to_string)
}

/// `{"@odata.id": "/redfish/v1/..."}` → the path.
pub fn odata_id(v: &Value) -> Option<String> {
    v.get("@odata.id")?.as_str().map(str::to_string)
}

/// The target of an action (`#ComputerSystem.Reset`) of a resource, or the
/// conventional path when the resource does not list it.
pub fn action_target(resource: &Value, path: &str, action: &str) -> String {
    resource
        .get("Actions")
        .and_then(|a| a.get(format!("#{action}")))
        .and_then(|a| a.get("target"))
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| format!("{}/Actions/{action}", path.trim_end_matches('/')))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// `terminal:<reason>` or `transient`.
    fn class(e: RedfishError) -> String {
        match e.classify("doing") {
            PluginError::Terminal(t) => format!("terminal:{}", t.reason),
            PluginError::Transient(t) => {
                assert_eq!(t.retry_after_ms, Some(RETRY_MS));
                "transient".into()
            }
            PluginError::InvalidSpec(i) => format!("invalid:{}", i.field),
        }
    }

    fn status(status: u16) -> RedfishError {
        RedfishError::Status {
            status,
            message: "m".into(),
        }
    }

    #[test]
    fn bmc_errors_are_retried_only_when_they_may_pass() {
        assert_eq!(class(status(401)), "terminal:AuthenticationFailed");
        assert_eq!(class(status(403)), "terminal:PermissionDenied");
        assert_eq!(class(status(404)), "terminal:NotFound");
        assert_eq!(class(status(400)), "terminal:BmcRefused");
        assert_eq!(class(status(429)), "transient");
        assert_eq!(class(status(503)), "transient");
        assert_eq!(class(RedfishError::Body("html".into())), "transient");
        assert_eq!(
            class(RedfishError::Http(HttpError::Transport("reset".into()))),
            "transient"
        );
        assert_eq!(
            class(RedfishError::Http(HttpError::Denied("no".into()))),
            "terminal:EndpointNotAllowed"
        );
        // As the Proxmox plugin does, through the kit: credentials must change.
        assert_eq!(
            class(RedfishError::Http(HttpError::Tls(
                "TLS verification failed: certificate fingerprint mismatch".into()
            ))),
            "terminal:TLSVerificationFailed"
        );
    }

    #[test]
    fn the_most_specific_message_of_an_error_body_is_kept() {
        let extended = json!({"error": {
            "message": "A general error has occurred.",
            "@Message.ExtendedInfo": [{"Message": "The resource is in use."}],
        }});
        assert_eq!(
            error_message(&extended).as_deref(),
            Some("The resource is in use.")
        );
        let plain = json!({"error": {"message": "Bad request"}});
        assert_eq!(error_message(&plain).as_deref(), Some("Bad request"));
        assert_eq!(error_message(&json!({"Name": "x"})), None);
    }

    #[test]
    fn links_and_action_targets_are_read_from_resources() {
        assert_eq!(
            odata_id(&json!({"@odata.id": "/redfish/v1/Systems/1"})).as_deref(),
            Some("/redfish/v1/Systems/1")
        );
        assert_eq!(odata_id(&json!({})), None);
        let listed = json!({"Actions": {"#ComputerSystem.Reset": {"target": "/custom/reset"}}});
        assert_eq!(
            action_target(&listed, "/redfish/v1/Systems/1", "ComputerSystem.Reset"),
            "/custom/reset"
        );
        assert_eq!(
            action_target(&json!({}), "/redfish/v1/Systems/1/", "ComputerSystem.Reset"),
            "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"
        );
    }

    #[test]
    fn basic_auth_is_built_from_the_user_and_password() {
        let credentials = Credentials {
            endpoint: "https://bmc1.test/".into(),
            token: "admin".into(),
            secret: "password".into(),
            ca_bundle: None,
            fingerprint: None,
            insecure: false,
        };
        let client = Redfish::new(&credentials);
        assert_eq!(client.base, "https://bmc1.test");
        assert_eq!(client.auth, "Basic YWRtaW46cGFzc3dvcmQ=");
    }
}
