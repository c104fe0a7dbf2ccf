//! The manager's webhook server: HTTPS, the CRD conversion webhook at `/convert` and the
//! finalizer webhook (`admission`) at `/finalizer`.
//!
//! The API server calls it for every object it reads or writes in a version other than
//! the stored one, so it serves every replica (leader or not). Its certificate is read
//! from a directory (`tls.crt`, `tls.key`: what a cert-manager Secret mounts) and read
//! again when the files change, so a renewed certificate needs no restart.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use kube::core::conversion::ConversionReview;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::Semaphore;

use hyperplug_runtime::crds::{CONVERSION_PATH, FINALIZER_PATH};
use kube::api::DynamicObject;
use kube::core::admission::AdmissionReview;

use crate::admission::Finalizers;
use crate::conversion::Conversions;

/// A review holds the objects of one request: at most a few etcd objects (1.5 MiB each).
const MAX_REVIEW_BYTES: usize = 8 << 20;
/// Connections served at once; more wait in the kernel's backlog.
const MAX_CONNECTIONS: usize = 64;
/// A TLS handshake that takes longer is dropped (a client that opens and stalls).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A request's headers must arrive within this, and an idle kept-alive connection is
/// closed after it: a client cannot hold a connection slot by saying nothing.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// No connection lives longer (the API server opens another).
const CONNECTION_LIFETIME: Duration = Duration::from_secs(300);

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
/// missing or bad certificate is an error at start, naming the file.
pub struct Server {
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    app: Router,
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

    /// On a bound listener (tests pick a free port).
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
        let app = Router::new()
            .route(CONVERSION_PATH, post(convert))
            .with_state(Arc::new(conversions))
            .merge(
                Router::new()
                    .route(FINALIZER_PATH, post(finalize))
                    .with_state(Arc::new(finalizers)),
            )
            .layer(DefaultBodyLimit::max(MAX_REVIEW_BYTES));
        Ok(Self {
            listener,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(tls)),
            app,
        })
    }

    /// `https://ADDR/convert`, what a CRD's conversion webhook calls.
    pub fn url(&self) -> std::io::Result<String> {
        Ok(format!(
            "https://{}{CONVERSION_PATH}",
            self.listener.local_addr()?
        ))
    }

    /// Serve until the listener fails.
    pub async fn serve(self) -> anyhow::Result<()> {
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        tracing::info!(addr = %self.listener.local_addr()?, "serving the conversion webhook");
        loop {
            let permit = slots.clone().acquire_owned().await?;
            let (stream, peer) = self.listener.accept().await?;
            let (acceptor, app) = (self.acceptor.clone(), self.app.clone());
            tokio::spawn(async move {
                let _permit = permit;
                let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream))
                    .await
                {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(e)) => {
                        return tracing::debug!(%peer, error = %e, "webhook TLS handshake failed");
                    }
                    Err(_) => return tracing::debug!(%peer, "webhook TLS handshake timed out"),
                };
                let service = TowerToHyperService::new(app);
                let connection = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), service);
                match tokio::time::timeout(CONNECTION_LIFETIME, connection).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "webhook connection ended"),
                    Err(_) => tracing::debug!(%peer, "webhook connection closed at its lifetime"),
                }
            });
        }
    }
}

async fn convert(State(conversions): State<Arc<Conversions>>, body: Bytes) -> Response {
    let review: ConversionReview = match serde_json::from_slice(&body) {
        Ok(review) => review,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("the body is not a ConversionReview: {e}"),
            )
                .into_response();
        }
    };
    let answer = conversions.review(review).await;
    match serde_json::to_vec(&answer) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn finalize(State(finalizers): State<Arc<Finalizers>>, body: Bytes) -> Response {
    let answer = serde_json::from_slice::<AdmissionReview<DynamicObject>>(&body)
        .ok()
        .and_then(|review| finalizers.review(review));
    let Some(answer) = answer else {
        return (
            StatusCode::BAD_REQUEST,
            "the body is not an AdmissionReview request",
        )
            .into_response();
    };
    match serde_json::to_vec(&answer) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}
