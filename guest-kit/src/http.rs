//! The plugins' one HTTP helper, over the host's `wasi:http/outgoing-handler`.
//!
//! Calls block the plugin (not the host: the host runs plugins asynchronously), and
//! the host decides where they may go. Bodies are read whole: API replies are small.
use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, Method, OutgoingBody, OutgoingRequest, RequestOptions, Scheme,
};
use wasip2::io::streams::StreamError;

use crate::errors::{terminal, transient};
use crate::types::PluginError;

/// A request to send.
pub struct Request<'a> {
    pub method: &'a str,
    /// Full URL: `https://host:port/path?query`.
    pub url: &'a str,
    pub headers: Vec<(&'a str, String)>,
    pub body: Option<Vec<u8>>,
}

/// A response, read whole.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// The HTTP reason phrase, which the host passes in `x-hyperplug-reason-phrase`
    /// (wasi:http has no field for it; some APIs put their error message there).
    pub reason: Option<String>,
    pub body: Vec<u8>,
}

/// Why a request did not produce a response.
#[derive(Debug)]
pub enum HttpError {
    /// The host refused the destination (only the credentials' endpoints are allowed).
    Denied(String),
    /// Connection or protocol trouble: worth retrying.
    Transport(String),
    /// The endpoint's TLS did not verify as its credentials say (an unknown issuer, a
    /// fingerprint that does not match): retrying will not help, the credentials must
    /// change.
    Tls(String),
    /// The request itself is malformed (a plugin bug or a bad endpoint).
    Invalid(String),
}

/// How the host words a TLS verification failure (`wasi:http` has no error code that
/// carries the detail).
const TLS_FAILURE: &str = "TLS verification failed";

/// What makes an untrusted certificate pass: the keys of the host's credentials Secret.
/// Secrets made for other providers often have none of them (some skip verification
/// when `insecure` is absent; the host verifies unless the Secret says otherwise).
const TLS_HINT: &str = "the credentials Secret can trust it with `ca.crt` (the CA's PEM) or `fingerprint` (SHA-256 of the certificate), or skip verification with `insecure: \"true\"` (a Secret without `insecure` is verified)";

impl HttpError {
    /// The plugin error this is, `message` saying what failed: a refused destination, a
    /// malformed request and a TLS verification failure will not pass by retrying
    /// (terminal: `EndpointNotAllowed`, `InvalidEndpoint`, `TLSVerificationFailed`, the
    /// last saying how the credentials Secret can make it pass); transport trouble is
    /// transient (`retry_after_ms` is the hint).
    pub fn classify(&self, message: String, retry_after_ms: Option<u64>) -> PluginError {
        match self {
            HttpError::Denied(_) => terminal("EndpointNotAllowed", message),
            HttpError::Invalid(_) => terminal("InvalidEndpoint", message),
            HttpError::Tls(_) => {
                terminal("TLSVerificationFailed", format!("{message}; {TLS_HINT}"))
            }
            HttpError::Transport(_) => transient(message, retry_after_ms),
        }
    }
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpError::Denied(m) => write!(f, "the host denied the request: {m}"),
            HttpError::Transport(m) => write!(f, "transport error: {m}"),
            HttpError::Tls(m) => write!(f, "{m}"),
            HttpError::Invalid(m) => write!(f, "invalid request: {m}"),
        }
    }
}

const CHUNK: u64 = 64 * 1024;
/// Most bytes a response buffer is sized for up front from `content-length`; a larger
/// body grows it as it comes.
const RESERVE_AT_MOST: usize = 16 << 20;
/// Connect and first-byte timeouts, in nanoseconds: the host's call deadline is the
/// real bound; these keep one dead endpoint from eating all of it.
const CONNECT_TIMEOUT_NS: u64 = 5_000_000_000;
const FIRST_BYTE_TIMEOUT_NS: u64 = 20_000_000_000;

/// Send a request and read the response.
pub fn send(req: Request<'_>) -> Result<Response, HttpError> {
    #[cfg(all(feature = "fuzzing", not(target_arch = "wasm32")))]
    if let Some(reply) = crate::fuzzing::http(&req) {
        return reply;
    }
    send_wasi(req)
}

fn send_wasi(req: Request<'_>) -> Result<Response, HttpError> {
    let (scheme, authority, path) = split_url(req.url)?;
    let entries: Vec<(String, Vec<u8>)> = req
        .headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect();
    let headers =
        Fields::from_list(&entries).map_err(|e| HttpError::Invalid(format!("headers: {e:?}")))?;
    let outgoing = OutgoingRequest::new(headers);
    let method = match req.method {
        "GET" => Method::Get,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        "PATCH" => Method::Patch,
        other => Method::Other(other.to_string()),
    };
    let bad = |what: &str| HttpError::Invalid(format!("{what} of {}", req.url));
    outgoing.set_method(&method).map_err(|_| bad("method"))?;
    outgoing
        .set_scheme(Some(&scheme))
        .map_err(|_| bad("scheme"))?;
    outgoing
        .set_authority(Some(authority))
        .map_err(|_| bad("authority"))?;
    outgoing
        .set_path_with_query(Some(path))
        .map_err(|_| bad("path"))?;

    let body = outgoing.body().map_err(|_| bad("body"))?;
    let options = RequestOptions::new();
    let _ = options.set_connect_timeout(Some(CONNECT_TIMEOUT_NS));
    let _ = options.set_first_byte_timeout(Some(FIRST_BYTE_TIMEOUT_NS));
    // Hand the request over first, then stream the body: the host only drains the
    // body stream once the request is on its way, so a body larger than the stream's
    // buffer (an ISO upload) written before `handle` would block forever.
    let pending = outgoing_handler::handle(outgoing, Some(options)).map_err(error_code)?;
    if let Some(bytes) = &req.body {
        let stream = body.write().map_err(|_| bad("body stream"))?;
        for chunk in bytes.chunks(4096) {
            stream
                .blocking_write_and_flush(chunk)
                .map_err(|e| HttpError::Transport(format!("writing the request body: {e:?}")))?;
        }
        drop(stream);
    }
    OutgoingBody::finish(body, None).map_err(error_code)?;

    pending.subscribe().block();
    let response = pending
        .get()
        .ok_or_else(|| HttpError::Transport("response not ready".into()))?
        .map_err(|_| HttpError::Transport("response already taken".into()))?
        .map_err(error_code)?;
    let status = response.status();
    let reason = response
        .headers()
        .get("x-hyperplug-reason-phrase")
        .first()
        .map(|v| String::from_utf8_lossy(v).into_owned());
    // Sized once from the announced length (bounded: the header is the server's word):
    // a body of several MB read into a growing buffer held twice its size at a time.
    let announced = response
        .headers()
        .get("content-length")
        .first()
        .and_then(|v| std::str::from_utf8(v).ok()?.trim().parse::<usize>().ok())
        .unwrap_or(0)
        .min(RESERVE_AT_MOST);
    let incoming = response
        .consume()
        .map_err(|_| HttpError::Transport("response body taken".into()))?;
    let stream = incoming
        .stream()
        .map_err(|_| HttpError::Transport("response stream taken".into()))?;
    let mut bytes = Vec::with_capacity(announced);
    loop {
        match stream.blocking_read(CHUNK) {
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(StreamError::Closed) => break,
            Err(StreamError::LastOperationFailed(e)) => {
                return Err(HttpError::Transport(format!(
                    "reading the response: {}",
                    e.to_debug_string()
                )));
            }
        }
    }
    Ok(Response {
        status,
        reason,
        body: bytes,
    })
}

fn error_code(code: ErrorCode) -> HttpError {
    match code {
        ErrorCode::HttpRequestDenied => {
            HttpError::Denied("only the endpoints of this call's credentials may be reached".into())
        }
        ErrorCode::HttpRequestUriInvalid | ErrorCode::HttpRequestMethodInvalid => {
            HttpError::Invalid(format!("{code:?}"))
        }
        ErrorCode::TlsCertificateError | ErrorCode::TlsProtocolError => {
            HttpError::Tls(format!("{TLS_FAILURE}: {code:?}"))
        }
        ErrorCode::TlsAlertReceived(alert) => HttpError::Tls(format!(
            "{TLS_FAILURE}: alert {}",
            alert.alert_message.as_deref().unwrap_or("received")
        )),
        ErrorCode::InternalError(Some(message)) if message.starts_with(TLS_FAILURE) => {
            HttpError::Tls(message)
        }
        ErrorCode::InternalError(Some(message)) => HttpError::Transport(message),
        other => HttpError::Transport(format!("{other:?}")),
    }
}

/// `https://h:p/x?y` → (scheme, `h:p`, `/x?y`).
fn split_url(url: &str) -> Result<(Scheme, &str, &str), HttpError> {
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (Scheme::Https, rest)
    } else if let Some(rest) = url.strip_prefix("http://") {
        (Scheme::Http, rest)
    } else {
        return Err(HttpError::Invalid(format!("`{url}` is not an http(s) URL")));
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        return Err(HttpError::Invalid(format!("`{url}` has no host")));
    }
    Ok((scheme, authority, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(url: &str) -> Result<(&'static str, &str, &str), String> {
        split_url(url)
            .map(|(scheme, authority, path)| {
                let scheme = match scheme {
                    Scheme::Http => "http",
                    Scheme::Https => "https",
                    Scheme::Other(_) => "other",
                };
                (scheme, authority, path)
            })
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_url_splits_into_scheme_authority_and_path_with_query() {
        assert_eq!(
            split("https://pve.test:8006/api2/json/nodes?type=vm"),
            Ok(("https", "pve.test:8006", "/api2/json/nodes?type=vm"))
        );
        assert_eq!(split("http://10.0.0.21"), Ok(("http", "10.0.0.21", "/")));
    }

    #[test]
    fn tls_failures_and_refusals_are_terminal_and_transport_trouble_is_not() {
        let class = |e: HttpError| match e.classify("doing".into(), Some(5)) {
            PluginError::Terminal(t) => format!("terminal:{}", t.reason),
            PluginError::Transient(t) => format!("transient:{:?}", t.retry_after_ms),
            PluginError::InvalidSpec(_) => "invalid".into(),
        };
        assert_eq!(
            class(error_code(ErrorCode::InternalError(Some(
                "TLS verification failed: certificate fingerprint mismatch".into()
            )))),
            "terminal:TLSVerificationFailed"
        );
        assert_eq!(
            class(error_code(ErrorCode::TlsCertificateError)),
            "terminal:TLSVerificationFailed"
        );
        assert_eq!(
            class(error_code(ErrorCode::InternalError(Some("reset".into())))),
            "transient:Some(5)"
        );
        assert_eq!(
            class(error_code(ErrorCode::ConnectionRefused)),
            "transient:Some(5)"
        );
        assert_eq!(
            class(error_code(ErrorCode::HttpRequestDenied)),
            "terminal:EndpointNotAllowed"
        );
        assert_eq!(
            class(HttpError::Invalid("bad".into())),
            "terminal:InvalidEndpoint"
        );
    }

    #[test]
    fn only_http_urls_with_a_host_are_sent() {
        assert_eq!(
            split("ftp://x/y"),
            Err("invalid request: `ftp://x/y` is not an http(s) URL".into())
        );
        assert_eq!(
            split("https:///path"),
            Err("invalid request: `https:///path` has no host".into())
        );
    }
}
