//! The manager's webhook server: HTTPS, the CRD conversion webhook at `/convert` and the
//! finalizer webhook (`admission`) at `/finalizer`.
//!
//! The API server calls it for every object it reads or writes in a version other than
//! the stored one, so it serves every replica (leader or not). Its certificate is read
//! from a directory (`tls.crt`, `tls.key`: what a cert-manager Secret mounts) and read
//! again when the files change, so a renewed certificate needs no restart.
use std::cell::Cell;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use anyhow::Context as _;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use kube::core::Status;
use kube::core::conversion::{ConversionResponse, ConversionReview};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use hyperplug_kinds::crds::{CONVERSION_PATH, FINALIZER_PATH};
use kube::api::DynamicObject;
use kube::core::admission::AdmissionReview;

use crate::admission::Finalizers;
use crate::conversion::Conversions;
use crate::listen::{self, Bounds, ServerArgs, Transport};

/// Objects one conversion review may hold: each is a plugin call.
pub const MAX_REVIEW_OBJECTS: usize = 4096;
/// JSON values one review may hold (every scalar, array, object and key counts one),
/// counted before anything of it is kept: a parsed value takes 32 to 56 bytes, so 8 MiB
/// of tiny values would take hundreds of MiB. A Kubernetes object's JSON holds a value
/// every 11 or 12 bytes (managed fields included): this is about 6 MiB of objects,
/// 2,000 ProxmoxMachines, and at most 28 MiB parsed.
pub const MAX_REVIEW_VALUES: usize = 1 << 19;
/// JSON values of the reviews being parsed and answered at once: one of the largest,
/// or many small ones (the API server's reviews of single objects hold a few hundred).
/// A review that finds no room within 5 s is refused.
pub const VALUES_IN_FLIGHT: usize = MAX_REVIEW_VALUES;

/// Where the serving certificate is: `tls.crt` and `tls.key` in `dir`.
#[derive(Debug, Clone)]
pub struct CertDir {
    pub dir: PathBuf,
}

impl CertDir {
    fn cert(&self) -> PathBuf {
        self.dir.join("tls.crt")
    }
    fn key(&self) -> PathBuf {
        self.dir.join("tls.key")
    }

    /// The certificate and key as rustls signs with them; errors name the file.
    fn load(&self) -> anyhow::Result<CertifiedKey> {
        let (cert, key) = (self.cert(), self.key());
        let chain = CertificateDer::pem_file_iter(&cert)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .with_context(|| format!("reading the webhook certificate {}", cert.display()))?;
        anyhow::ensure!(!chain.is_empty(), "{} holds no certificate", cert.display());
        let key = PrivateKeyDer::from_pem_file(&key)
            .with_context(|| format!("reading the webhook key {}", key.display()))?;
        let signer = rustls::crypto::ring::sign::any_supported_type(&key)
            .with_context(|| format!("the key in {} cannot sign", self.key().display()))?;
        Ok(CertifiedKey::new(chain, signer))
    }

    fn modified(&self) -> Option<SystemTime> {
        let times = [self.cert(), self.key()].map(|p| p.metadata().and_then(|m| m.modified()));
        match times {
            [Ok(a), Ok(b)] => Some(a.max(b)),
            _ => None,
        }
    }
}

/// The certificate of the last handshake, read again when the files' times change.
#[derive(Debug)]
struct Reloading {
    certs: CertDir,
    current: Mutex<(Option<SystemTime>, Arc<CertifiedKey>)>,
}

impl Reloading {
    fn new(certs: CertDir) -> anyhow::Result<Self> {
        let modified = certs.modified();
        let key = Arc::new(certs.load()?);
        Ok(Self {
            certs,
            current: Mutex::new((modified, key)),
        })
    }
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let modified = self.certs.modified();
        if modified.is_some() && modified != current.0 {
            // A half-written pair fails to load: keep serving the old one until the next
            // handshake finds both files complete.
            match self.certs.load() {
                Ok(key) => {
                    tracing::info!(dir = %self.certs.dir.display(), "webhook certificate reloaded");
                    *current = (modified, Arc::new(key));
                }
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "webhook certificate not reloaded")
                }
            }
        }
        Some(current.1.clone())
    }
}

/// The webhook server, bound and with its certificate read: a manager that cannot
/// convert would fail every request of a client that speaks another version, so a
/// missing or bad certificate is an error at start, naming the file. It is served by
/// the manager's accept loop (`listen`) within [`Bounds::webhook`].
pub struct Server {
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    app: Router,
    bounds: Bounds,
}

impl Server {
    pub async fn bind(
        addr: SocketAddr,
        certs: CertDir,
        conversions: Conversions,
        finalizers: Finalizers,
    ) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("--webhook-addr: cannot listen on {addr}"))?;
        Self::on(listener, certs, conversions, finalizers)
    }

    /// On a bound listener (tests pick a free port), with the default bounds.
    pub fn on(
        listener: tokio::net::TcpListener,
        certs: CertDir,
        conversions: Conversions,
        finalizers: Finalizers,
    ) -> anyhow::Result<Self> {
        let resolver = Arc::new(Reloading::new(certs)?);
        let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let reviews = Arc::new(Reviews {
            conversions,
            finalizers,
            room: Arc::new(Semaphore::new(VALUES_IN_FLIGHT)),
        });
        let app = Router::new()
            .route(CONVERSION_PATH, post(convert))
            .route(FINALIZER_PATH, post(finalize))
            .with_state(reviews)
            // The accept loop reads at most `max_body` of a request, within its budget.
            .layer(DefaultBodyLimit::disable());
        Ok(Self {
            listener,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(tls)),
            app,
            bounds: Bounds::webhook(&ServerArgs::default()),
        })
    }

    /// The same server within `bounds`.
    pub fn bounded(self, bounds: Bounds) -> Self {
        Self { bounds, ..self }
    }

    /// `https://ADDR/convert`, what a CRD's conversion webhook calls.
    pub fn url(&self) -> std::io::Result<String> {
        Ok(format!(
            "https://{}{CONVERSION_PATH}",
            self.listener.local_addr()?
        ))
    }

    /// Serve until the process ends.
    pub async fn serve(self) -> anyhow::Result<()> {
        let transport = Transport::Tls(self.acceptor);
        listen::serve(self.listener, transport, self.app, self.bounds).await
    }
}

/// What both webhooks answer with, and the room their parsed reviews share.
struct Reviews {
    conversions: Conversions,
    finalizers: Finalizers,
    /// Permits are JSON values ([`VALUES_IN_FLIGHT`]).
    room: Arc<Semaphore>,
}

impl Reviews {
    /// Room for a review of `values` JSON values, or `None` if none frees in time.
    async fn room_for(&self, values: usize) -> Option<OwnedSemaphorePermit> {
        let wanted = self.room.clone().acquire_many_owned(values as u32);
        tokio::time::timeout(listen::BUDGET_WAIT, wanted)
            .await
            .ok()?
            .ok()
    }
}

/// What a review says of itself before any of its objects is kept: its `uid` (for a
/// refusal the API server can match) and how many objects it holds.
#[derive(Deserialize)]
struct Head {
    request: Option<HeadRequest>,
}

#[derive(Deserialize)]
struct HeadRequest {
    #[serde(default)]
    uid: String,
    #[serde(default)]
    objects: Elements,
}

/// The length of a JSON array, its elements skipped.
#[derive(Default)]
struct Elements(usize);

impl<'de> Deserialize<'de> for Elements {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Counting;
        impl<'de> Visitor<'de> for Counting {
            type Value = Elements;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Elements, A::Error> {
                let mut n = 0;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Elements(n))
            }
        }
        d.deserialize_seq(Counting)
    }
}

async fn convert(State(reviews): State<Arc<Reviews>>, body: Bytes) -> Response {
    let not_a_review = |e: serde_json::Error| {
        (
            StatusCode::BAD_REQUEST,
            format!("the body is not a ConversionReview: {e}"),
        )
            .into_response()
    };
    let head: Head = match serde_json::from_slice(&body) {
        Ok(head) => head,
        Err(e) => return not_a_review(e),
    };
    let (uid, objects) = head
        .request
        .map_or((String::new(), 0), |r| (r.uid, r.objects.0));
    if objects > MAX_REVIEW_OBJECTS {
        let message =
            format!("the ConversionReview holds {objects} objects; at most {MAX_REVIEW_OBJECTS}");
        return refused(uid, &message, "RequestEntityTooLarge");
    }
    let values = match count_values(&body, MAX_REVIEW_VALUES) {
        Ok(values) => values,
        Err(Uncounted::TooMany) => {
            let message =
                format!("the ConversionReview holds more than {MAX_REVIEW_VALUES} JSON values");
            return refused(uid, &message, "RequestEntityTooLarge");
        }
        Err(Uncounted::Invalid(e)) => return not_a_review(e),
    };
    let Some(_room) = reviews.room_for(values).await else {
        let message = "the webhook is converting as much as it may at once; retry";
        return refused(uid, message, "TooManyRequests");
    };
    let review: ConversionReview = match serde_json::from_slice(&body) {
        Ok(review) => review,
        Err(e) => return not_a_review(e),
    };
    drop(body);
    let answer = reviews.conversions.review(review).await;
    match serde_json::to_vec(&answer) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// A review refused before it was parsed: a failed ConversionResponse with its `uid`,
/// which the API server reports to its client.
fn refused(uid: String, message: &str, reason: &str) -> Response {
    let response = ConversionResponse {
        uid,
        ..ConversionResponse::invalid(Status::failure(message, reason))
    };
    match serde_json::to_vec(&response.into_review()) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn finalize(State(reviews): State<Arc<Reviews>>, body: Bytes) -> Response {
    // The finalizer webhook ignores its failures (`failurePolicy: Ignore`): a review it
    // will not parse is refused with a status, and the reconciler adds the finalizer.
    let values = match count_values(&body, MAX_REVIEW_VALUES) {
        Ok(values) => values,
        Err(Uncounted::TooMany) => {
            let message =
                format!("the AdmissionReview holds more than {MAX_REVIEW_VALUES} JSON values");
            return (StatusCode::PAYLOAD_TOO_LARGE, message).into_response();
        }
        Err(Uncounted::Invalid(_)) => return not_an_admission_review(),
    };
    let Some(_room) = reviews.room_for(values).await else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "the webhook is busy; retry",
        )
            .into_response();
    };
    let answer = serde_json::from_slice::<AdmissionReview<DynamicObject>>(&body)
        .ok()
        .and_then(|review| reviews.finalizers.review(review));
    drop(body);
    let Some(answer) = answer else {
        return not_an_admission_review();
    };
    match serde_json::to_vec(&answer) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

fn not_an_admission_review() -> Response {
    (
        StatusCode::BAD_REQUEST,
        "the body is not an AdmissionReview request",
    )
        .into_response()
}

/// Why a document's values were not counted.
#[derive(Debug)]
enum Uncounted {
    TooMany,
    Invalid(serde_json::Error),
}

/// The JSON values of `json` (every scalar, array, object and key counts one), none
/// kept; counting stops at the first past `max`. Nesting is bounded as in any parse
/// (serde_json's recursion limit, 128).
fn count_values(json: &[u8], max: usize) -> Result<usize, Uncounted> {
    let left = Cell::new(max);
    let over = Cell::new(false);
    let counter = Counter {
        left: &left,
        over: &over,
    };
    let mut de = serde_json::Deserializer::from_slice(json);
    let counted = counter.deserialize(&mut de).and_then(|()| de.end());
    match counted {
        Ok(()) => Ok(max - left.get()),
        Err(_) if over.get() => Err(Uncounted::TooMany),
        Err(e) => Err(Uncounted::Invalid(e)),
    }
}

/// Counts down `left` for every value it visits; sets `over` when there is none left.
#[derive(Clone, Copy)]
struct Counter<'a> {
    left: &'a Cell<usize>,
    over: &'a Cell<bool>,
}

impl Counter<'_> {
    fn one<E: de::Error>(self) -> Result<(), E> {
        match self.left.get().checked_sub(1) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => {
                self.over.set(true);
                Err(E::custom("too many JSON values"))
            }
        }
    }
}

impl<'de> DeserializeSeed<'de> for Counter<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Counter<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.one()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.one()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.one()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.one()
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.one()
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.one()
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.one()?;
        while seq.next_element_seed(self)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.one()?;
        while map.next_key::<IgnoredAny>()?.is_some() {
            self.one()?;
            map.next_value_seed(self)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_counted_without_being_kept() {
        let count = |json: &str| count_values(json.as_bytes(), 100);
        assert_eq!(count("0").unwrap(), 1);
        assert_eq!(count("[]").unwrap(), 1);
        assert_eq!(count(r#"[0, "a", null, true, 1.5, -2]"#).unwrap(), 7);
        // An object, its two keys and their values.
        assert_eq!(count(r#"{"a": {}, "b\n": [1]}"#).unwrap(), 6);
        assert!(matches!(count("[0, 0"), Err(Uncounted::Invalid(_))));
        assert!(matches!(count("[0] 1"), Err(Uncounted::Invalid(_))));
        let many = format!("[{}0]", "0,".repeat(99));
        assert!(matches!(count(&many), Err(Uncounted::TooMany)));
        assert_eq!(count(&format!("[{}0]", "0,".repeat(98))).unwrap(), 100);
        let deep = format!("{}{}", "[".repeat(50), "]".repeat(50));
        assert_eq!(count(&deep).unwrap(), 50);
        let too_deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(matches!(
            count_values(too_deep.as_bytes(), 1000),
            Err(Uncounted::Invalid(_))
        ));
    }

    #[test]
    fn a_review_says_its_uid_and_how_many_objects_it_holds() {
        let review = br#"{"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "u-1", "desiredAPIVersion": "g/v2", "objects": [{"a": [1, 2]}, {}, 3]}}"#;
        let head: Head = serde_json::from_slice(review).unwrap();
        let request = head.request.unwrap();
        assert_eq!((request.uid.as_str(), request.objects.0), ("u-1", 3));
    }

    #[tokio::test]
    async fn a_refused_review_keeps_its_uid() {
        let response = refused("u-9".into(), "too big", "RequestEntityTooLarge");
        assert_eq!(response.status(), StatusCode::OK);
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let review: ConversionReview = serde_json::from_slice(&body).unwrap();
        let response = review.response.unwrap();
        assert_eq!(response.uid, "u-9");
        assert_eq!(response.result.message, "too big");
        assert_eq!(response.result.reason, "RequestEntityTooLarge");
        assert!(response.converted_objects.is_empty());
    }
}
