//! The one gate of all plugin network egress: the wasi-http `send_request` hook.
//!
//! A call may reach exactly the scheme://host:port of the endpoints in its credentials
//! (the primary ones and any the InfraCluster names besides), each with the TLS policy
//! of its own credentials; everything else is refused with `HTTP-request-denied`.
//! Redirects are not followed (they would bypass the gate).
//!
//! What a call's requests cost the host is bounded here too: requests in flight per
//! call (more fail the call) and per plugin (more wait), the request body it buffers,
//! the response body it hands over, the refusals it logs, and the CPU the requests
//! take (charged to the call).
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use tokio::sync::Semaphore;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use super::bindings::types::Credentials;
use super::limits::{Breach, size};
use super::memory::PluginBudget;
use super::meter::{CallMeter, Metered};
use super::text::one_line;
use super::tls::{TlsPolicy, client_config};

/// Idle connections kept per endpoint between calls.
const IDLE_PER_HOST: usize = 4;
/// Longest refused URL logged.
const MAX_LOGGED_URL: usize = 256;

/// Told of each request a plugin sends: (plugin, method, path).
pub type HttpObserver = Arc<dyn Fn(&str, &str, &str) + Send + Sync>;

/// Response header carrying the HTTP reason phrase to the plugin.
pub const REASON_HEADER: &str = "x-hyperplug-reason-phrase";

/// `scheme://host:port` of the one endpoint a call may reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub scheme: String,
    pub host: String,
    pub port: u16,
}

impl Origin {
    pub fn parse(endpoint: &str) -> Result<Origin, String> {
        let url = url::Url::parse(endpoint).map_err(|e| format!("endpoint `{endpoint}`: {e}"))?;
        let scheme = url.scheme().to_string();
        if scheme != "https" && scheme != "http" {
            return Err(format!(
                "endpoint `{endpoint}`: scheme must be https or http"
            ));
        }
        let host = url
            .host_str()
            .ok_or_else(|| format!("endpoint `{endpoint}` has no host"))?
            .trim_matches(['[', ']'])
            .to_ascii_lowercase();
        let port = url.port_or_known_default().unwrap_or(443);
        Ok(Origin { scheme, host, port })
    }

    fn matches(&self, uri: &http::Uri) -> bool {
        let scheme = uri.scheme_str().unwrap_or("");
        let Some(authority) = uri.authority() else {
            return false;
        };
        let default_port = if scheme == "https" { 443 } else { 80 };
        let host = authority
            .host()
            .trim_matches(['[', ']'])
            .to_ascii_lowercase();
        scheme == self.scheme
            && host == self.host
            && authority.port_u16().unwrap_or(default_port) == self.port
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
    }
}

/// An endpoint a call may reach: its origin, and the HTTP client of its TLS policy
/// (shared by every call to it, so connections are pooled across calls).
pub struct Endpoint {
    pub origin: Origin,
    /// The client, or why its TLS policy makes none (a bad CA bundle or fingerprint:
    /// each request then fails saying so).
    client: Result<reqwest::Client, String>,
}

/// Most endpoints kept (past it the cache starts over): credentials are the tenants',
/// so what they may make the host keep is bounded.
const MAX_ENDPOINTS: usize = 256;
/// Most bytes of endpoint URLs and TLS policies kept (past it the cache starts over):
/// bounds count bytes, as a few endpoints with large CA bundles weigh more than many
/// small ones.
const MAX_ENDPOINT_BYTES: usize = 4 << 20;

/// Endpoints whose keys share a hash: each with the endpoint URL and TLS policy it was
/// made for.
type Bucket = Vec<(String, TlsPolicy, Arc<Endpoint>)>;

/// The endpoints of the credentials calls are made with, each parsed once with its
/// client: a call neither parses its credentials again nor looks a client up per
/// request.
#[derive(Default)]
pub struct EndpointCache {
    /// By a hash of the endpoint and TLS policy; entries whose key only collides are
    /// told apart by the key they keep.
    entries: Mutex<HashMap<u64, Bucket>>,
}

/// The bytes an entry's key keeps.
fn key_bytes(url: &str, tls: &TlsPolicy) -> usize {
    url.len()
        + tls.ca_bundle.as_ref().map_or(0, String::len)
        + tls.fingerprint.as_ref().map_or(0, String::len)
}

impl EndpointCache {
    /// The endpoint of `credentials` (its URL and TLS policy), parsed and given its
    /// client on first use.
    pub fn endpoint(&self, credentials: &Credentials) -> Result<Arc<Endpoint>, String> {
        let c = credentials;
        let key = (
            c.endpoint.as_str(),
            c.ca_bundle.as_deref(),
            c.fingerprint.as_deref(),
            c.insecure,
        );
        let hash = {
            use std::hash::{DefaultHasher, Hash, Hasher};
            let mut h = DefaultHasher::new();
            key.hash(&mut h);
            h.finish()
        };
        let same = |(url, tls, _): &&(String, TlsPolicy, Arc<Endpoint>)| {
            (
                url.as_str(),
                tls.ca_bundle.as_deref(),
                tls.fingerprint.as_deref(),
                tls.insecure,
            ) == key
        };
        let mut entries = self.entries.lock().expect("endpoint cache poisoned");
        if let Some((_, _, endpoint)) = entries.get(&hash).and_then(|list| list.iter().find(same)) {
            return Ok(endpoint.clone());
        }
        let origin = Origin::parse(&c.endpoint)?;
        let tls = TlsPolicy {
            ca_bundle: c.ca_bundle.clone(),
            fingerprint: c.fingerprint.clone(),
            insecure: c.insecure,
        };
        // Endpoints of one TLS policy share its client (and so its connection pool).
        let client = entries
            .values()
            .flatten()
            .find(|(_, t, _)| *t == tls)
            .map(|(_, _, e)| e.client.clone())
            .unwrap_or_else(|| client(&tls));
        let endpoint = Arc::new(Endpoint { origin, client });
        let (count, bytes) = entries
            .values()
            .flatten()
            .fold((0, 0), |(n, b), (url, tls, _)| {
                (n + 1, b + key_bytes(url, tls))
            });
        if count >= MAX_ENDPOINTS || bytes + key_bytes(&c.endpoint, &tls) > MAX_ENDPOINT_BYTES {
            entries.clear();
        }
        entries
            .entry(hash)
            .or_default()
            .push((c.endpoint.clone(), tls, endpoint.clone()));
        Ok(endpoint)
    }
}

fn client(policy: &TlsPolicy) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .use_preconfigured_tls(client_config(policy)?)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .pool_idle_timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(IDLE_PER_HOST)
        .build()
        .map_err(|e| e.to_string())
}

/// The request body bytes one call may have the host buffer, all its requests together
/// (in flight at once, they would otherwise add up), and its plugin's budget for all
/// its calls' bodies buffered at once.
#[derive(Clone)]
pub struct RequestBodies {
    pub limit: usize,
    pub taken: Arc<std::sync::atomic::AtomicUsize>,
    pub plugin: Arc<PluginBudget>,
}

impl RequestBodies {
    pub fn new(limit: usize, plugin: Arc<PluginBudget>) -> RequestBodies {
        RequestBodies {
            limit,
            taken: Default::default(),
            plugin,
        }
    }

    /// Take `bytes` more for `held`; the limit broken, if one is.
    fn take(&self, bytes: usize, held: &mut Held) -> Result<(), Breach> {
        let before = self
            .taken
            .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
        if before.saturating_add(bytes) > self.limit {
            return Err(Breach::new(
                format!("{} of HTTP request bodies per call", size(self.limit)),
                "--plugin-request-body-mib",
            ));
        }
        if !self.plugin.take(bytes) {
            return Err(Breach::new(
                format!(
                    "{} of HTTP request bodies buffered for all its calls at once",
                    size(self.plugin.limit)
                ),
                "--plugin-request-body-per-plugin-mib",
            ));
        }
        held.bytes += bytes;
        Ok(())
    }
}

/// What one request's buffered body holds of its plugin's budget, until it is sent.
struct Held {
    plugin: Arc<PluginBudget>,
    bytes: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.plugin.give_back(self.bytes);
    }
}

/// One call's egress policy and what it observed.
pub struct Egress {
    /// The endpoints this call may reach; the first whose origin matches serves it.
    pub allowed: Vec<Arc<Endpoint>>,
    /// Largest response body handed to the plugin.
    pub max_body: usize,
    /// Request body bytes the host buffers for all of this call's requests together,
    /// and what they have taken so far.
    pub request_bodies: RequestBodies,
    /// Requests this call may have in flight (more fail the call), and its limit.
    pub in_flight: Arc<Semaphore>,
    pub in_flight_limit: u32,
    /// Requests all calls of the plugin may have in flight (more wait).
    pub plugin_in_flight: Arc<Semaphore>,
    /// Refusals this call may still log (one more fails it), and the limit.
    pub denials_left: u32,
    pub denials_limit: u32,
    /// Refusals during this call, for the summary at its end.
    pub denied: Arc<Mutex<Vec<String>>>,
    /// Told of every request the gate lets through (metrics).
    pub observer: Option<HttpObserver>,
    /// The plugin making the call, for the observer.
    pub plugin: Arc<str>,
    /// Where the requests' CPU time is charged and limits broken are recorded.
    pub meter: Arc<CallMeter>,
}

impl Egress {
    /// Refuse a request outside the call's endpoints: logged (a bounded number of
    /// times); one refusal past the limit fails the call.
    fn deny(&mut self, uri: &http::Uri) -> HttpError {
        if self.denials_left == 0 {
            self.meter.breach(Breach::new(
                format!(
                    "{} refused requests to hosts outside its endpoints per call",
                    self.denials_limit
                ),
                "--plugin-egress-denials",
            ));
            return HttpError::HttpRequestDenied;
        }
        self.denials_left -= 1;
        let target = one_line(&uri.to_string(), MAX_LOGGED_URL);
        let allowed: Vec<String> = self.allowed.iter().map(|e| e.origin.to_string()).collect();
        tracing::warn!(
            plugin = %self.plugin,
            target = %target,
            allowed = %if allowed.is_empty() { "nothing".into() } else { allowed.join(", ") },
            "plugin egress denied"
        );
        self.denied.lock().expect("denied list").push(target);
        HttpError::HttpRequestDenied
    }
}

impl WasiHttpHooks for Egress {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<
        dyn Future<
                Output = Result<
                    (
                        http::Response<WasiBody>,
                        Box<dyn Future<Output = Result<(), HttpError>> + Send>,
                    ),
                    HttpError,
                >,
            > + Send,
    > {
        drop(fut);
        let client = self
            .allowed
            .iter()
            .find(|e| e.origin.matches(request.uri()))
            .map(|e| e.client.clone());
        let Some(client) = client else {
            let denied = self.deny(request.uri());
            return Box::new(async { Err(denied) });
        };
        // A slot of the call's own: a call that holds too many fails.
        let Ok(call_slot) = self.in_flight.clone().try_acquire_owned() else {
            self.meter.breach(Breach::new(
                format!("{} HTTP requests in flight per call", self.in_flight_limit),
                "--plugin-http-in-flight",
            ));
            return Box::new(async { Err(HttpError::HttpRequestDenied) });
        };
        tracing::debug!(method = %request.method(), path = request.uri().path(), "plugin request");
        if let Some(observe) = &self.observer {
            observe(
                &self.plugin,
                request.method().as_str(),
                request.uri().path(),
            );
        }
        let (max_body, bodies) = (self.max_body, self.request_bodies.clone());
        let plugin_slots = self.plugin_in_flight.clone();
        let meter = self.meter.clone();
        let work = async move {
            // The plugin's slots are shared by its calls: wait for one.
            let plugin_slot = plugin_slots
                .acquire_owned()
                .await
                .map_err(|e| HttpError::InternalError(Some(e.to_string())))?;
            let client = client.map_err(|e| HttpError::InternalError(Some(e)))?;
            let response = forward(client, request, options, &bodies, &meter).await?;
            let response = response.map(|body| {
                // The slots are held until the plugin drops the response body.
                let slots = (call_slot, plugin_slot);
                Limited::new(body, max_body)
                    .map_err(|e| HttpError::InternalError(Some(format!("response body: {e}"))))
                    .map_frame(move |frame| {
                        let _ = &slots;
                        frame
                    })
                    .boxed_unsync()
            });
            let io = async { Ok(()) };
            Ok((response, Box::new(io) as Box<dyn Future<Output = _> + Send>))
        };
        let meter = self.meter.clone();
        Box::new(async move {
            Metered::on_behalf(work, meter)
                .await
                .unwrap_or(Err(HttpError::HttpRequestDenied))
        })
    }
}

/// Send a request the gate admitted, through the pooled client.
async fn forward(
    client: reqwest::Client,
    request: http::Request<WasiBody>,
    options: Option<RequestOptions>,
    bodies: &RequestBodies,
    meter: &CallMeter,
) -> Result<http::Response<reqwest::Body>, HttpError> {
    let (parts, mut body) = request.into_parts();
    // Plugin request bodies are small (API forms, an ISO of a few hundred KiB): buffer,
    // up to what the call and its plugin may still have buffered, until it is sent.
    let mut buffered = bytes::BytesMut::new();
    let mut held = Held {
        plugin: bodies.plugin.clone(),
        bytes: 0,
    };
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        if let Err(breach) = bodies.take(data.len(), &mut held) {
            meter.breach(breach);
            return Err(HttpError::HttpRequestBodySize(Some(bodies.limit as u64)));
        }
        buffered.extend_from_slice(&data);
    }
    let body: Bytes = buffered.freeze();
    let mut builder = client
        .request(parts.method, parts.uri.to_string())
        .body(body);
    for (name, value) in parts.headers.iter() {
        if name != http::header::HOST {
            builder = builder.header(name, value);
        }
    }
    let timeout = options
        .and_then(|o| o.first_byte_timeout.or(o.connect_timeout))
        .unwrap_or(Duration::from_secs(60));
    let response = builder.timeout(timeout).send().await.map_err(classify);
    // The body is sent (or never will be): its bytes go back to the plugin's budget.
    drop(held);
    let mut response = http::Response::from(response?);
    // wasi:http has no field for the reason phrase, and some APIs put their error
    // message there: pass it on as a header.
    let reason = response
        .extensions()
        .get::<hyper::ext::ReasonPhrase>()
        .cloned();
    if let Some(value) = reason.and_then(|r| http::HeaderValue::from_bytes(r.as_bytes()).ok()) {
        response.headers_mut().insert(REASON_HEADER, value);
    }
    Ok(response)
}

fn classify(err: reqwest::Error) -> HttpError {
    let detail = error_chain(&err);
    if err.is_timeout() {
        HttpError::ConnectionTimeout
    } else if detail.contains("certificate") || detail.contains("fingerprint") {
        tracing::warn!(error = %detail, "TLS verification of the plugin endpoint failed");
        // wasi:http's TLS error codes carry no detail; guest-kit's HTTP helper knows this
        // prefix and makes it a TLS failure (terminal), not transport trouble.
        HttpError::InternalError(Some(format!("TLS verification failed: {detail}")))
    } else if err.is_connect() {
        tracing::debug!(error = %detail, "connect failed");
        HttpError::ConnectionRefused
    } else {
        HttpError::InternalError(Some(detail))
    }
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_matches_only_its_own_scheme_host_and_port() {
        let origin = Origin::parse("https://api.example:8443/v1").unwrap();
        assert!(origin.matches(&"https://api.example:8443/v1/version".parse().unwrap()));
        assert!(origin.matches(&"https://API.example:8443/x".parse().unwrap()));
        assert!(!origin.matches(&"http://api.example:8443/x".parse().unwrap()));
        assert!(!origin.matches(&"https://api.example:8444/x".parse().unwrap()));
        assert!(!origin.matches(&"https://evil.example:8443/x".parse().unwrap()));
        assert!(!origin.matches(&"https://api.example.evil:8443/x".parse().unwrap()));
    }

    #[test]
    fn origin_defaults_the_port_from_the_scheme() {
        let origin = Origin::parse("https://api.example").unwrap();
        assert_eq!(origin.port, 443);
        assert!(origin.matches(&"https://api.example/x".parse().unwrap()));
    }

    #[test]
    fn an_endpoint_is_parsed_once_and_shares_its_policys_client() {
        let cache = EndpointCache::default();
        let creds = |url: &str| Credentials {
            endpoint: url.into(),
            token: "t".into(),
            secret: "s".into(),
            ca_bundle: None,
            fingerprint: None,
            insecure: false,
        };
        let a = cache.endpoint(&creds("https://pve.example:8006")).unwrap();
        let again = cache.endpoint(&creds("https://pve.example:8006")).unwrap();
        assert!(Arc::ptr_eq(&a, &again), "parsed once");
        let b = cache
            .endpoint(&creds("https://other.example:8006"))
            .unwrap();
        assert!(!Arc::ptr_eq(&a, &b));
        assert_eq!(b.origin.host, "other.example");
        let pinned = Credentials {
            fingerprint: Some("AA".into()),
            ..creds("https://pve.example:8006")
        };
        let c = cache.endpoint(&pinned).unwrap();
        assert!(
            !Arc::ptr_eq(&a, &c),
            "another TLS policy is another endpoint"
        );
        assert!(c.client.is_err(), "a bad fingerprint makes no client");
        assert!(cache.endpoint(&creds("ftp://x")).is_err());
        for i in 0..MAX_ENDPOINTS * 2 {
            cache
                .endpoint(&creds(&format!("https://h{i}.example")))
                .unwrap();
        }
        let kept: usize = cache.entries.lock().unwrap().values().map(Vec::len).sum();
        assert!(kept <= MAX_ENDPOINTS, "{kept}");
    }

    #[test]
    fn origin_refuses_other_schemes() {
        assert!(Origin::parse("ftp://api.example").is_err());
    }
}
