//! Endpoints the kit points a plugin at to see how it fails: a closed port, a server
//! that answers every request with 503, and a black hole that accepts connections and
//! never answers. They speak the target's scheme (a self-signed certificate, pinned by
//! fingerprint, for `https`) so a plugin is judged on the failure, not on its TLS setup.
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use hyperplug_runtime::Credentials;
use hyperplug_runtime::tls::format_fingerprint;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The running fixtures; their tasks end when this is dropped.
pub struct Fixtures {
    pub closed: Credentials,
    pub unavailable: Credentials,
    pub black_hole: Credentials,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Fixtures {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The target's credentials pointed at `127.0.0.1:port` (same scheme and path).
fn pointed_at(target: &Credentials, port: u16, fingerprint: Option<String>) -> Credentials {
    let endpoint = match url::Url::parse(&target.endpoint) {
        Ok(mut u) => {
            let _ = u.set_host(Some("127.0.0.1"));
            let _ = u.set_port(Some(port));
            u.to_string().trim_end_matches('/').to_string()
        }
        Err(_) => format!("https://127.0.0.1:{port}"),
    };
    let tls = fingerprint.is_some();
    Credentials {
        endpoint,
        fingerprint: fingerprint.or_else(|| target.fingerprint.clone()),
        // The fixtures' certificate is pinned; the target's CA means nothing here.
        ca_bundle: if tls { None } else { target.ca_bundle.clone() },
        insecure: if tls { false } else { target.insecure },
        ..target.clone()
    }
}

pub async fn start(target: &Credentials) -> anyhow::Result<Fixtures> {
    let https = target.endpoint.starts_with("https://");
    // A port that was just free and is closed again: connections are refused.
    let closed_port = {
        let l = TcpListener::bind("127.0.0.1:0").await?;
        l.local_addr()?.port()
    };
    let mut tasks = Vec::new();

    let unavailable = TcpListener::bind("127.0.0.1:0").await?;
    let unavailable_port = unavailable.local_addr()?.port();
    let (acceptor, fingerprint) = if https {
        let (acceptor, fp) = self_signed().context("creating the 503 server's certificate")?;
        (Some(acceptor), Some(fp))
    } else {
        (None, None)
    };
    tasks.push(tokio::spawn(serve_unavailable(unavailable, acceptor)));

    let hole = TcpListener::bind("127.0.0.1:0").await?;
    let hole_port = hole.local_addr()?.port();
    tasks.push(tokio::spawn(black_hole(hole)));

    Ok(Fixtures {
        closed: pointed_at(target, closed_port, None),
        unavailable: pointed_at(target, unavailable_port, fingerprint),
        // Nothing ever answers, TLS handshake included: no certificate to pin.
        black_hole: pointed_at(target, hole_port, None),
        tasks,
    })
}

fn self_signed() -> anyhow::Result<(tokio_rustls::TlsAcceptor, String)> {
    let key = rcgen::KeyPair::generate()?;
    let params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?;
    let cert = params.self_signed(&key)?;
    let der = cert.der().clone();
    let fingerprint = format_fingerprint(&Sha256::digest(der.as_ref()));
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(vec![der], key)?;
    Ok((
        tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        fingerprint,
    ))
}

const UNAVAILABLE: &str = "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\nretry-after: 1\r\ncontent-length: 52\r\nconnection: close\r\n\r\nservice unavailable (hyperplug conformance fixture)\n";

async fn serve_unavailable(listener: TcpListener, tls: Option<tokio_rustls::TlsAcceptor>) {
    while let Ok((tcp, _)) = listener.accept().await {
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                Some(acceptor) => {
                    if let Ok(stream) = acceptor.accept(tcp).await {
                        answer_503(stream).await;
                    }
                }
                None => answer_503(tcp).await,
            }
        });
    }
}

/// Read the request (head and a declared body, bounded) and answer 503.
async fn answer_503<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut stream: S) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let read_all = async {
        loop {
            let n = stream.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            if let Some(end) = find(&buf, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let body_len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                if buf.len() >= end + 4 + body_len.min(1 << 20) {
                    break;
                }
            }
            if buf.len() > 2 << 20 {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), read_all).await;
    let _ = stream.write_all(UNAVAILABLE.as_bytes()).await;
    let _ = stream.shutdown().await;
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Accept and hold every connection without reading or writing a byte.
async fn black_hole(listener: TcpListener) {
    let mut held = Vec::new();
    while let Ok((tcp, _)) = listener.accept().await {
        held.push(tcp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Credentials {
        Credentials {
            endpoint: "https://infra.example:8443".into(),
            token: "t".into(),
            secret: "s".into(),
            ca_bundle: Some("PEM".into()),
            fingerprint: None,
            insecure: false,
        }
    }

    #[tokio::test]
    async fn fixtures_keep_the_scheme_and_pin_their_own_certificate() {
        let f = start(&target()).await.unwrap();
        assert!(f.closed.endpoint.starts_with("https://127.0.0.1:"));
        assert!(f.unavailable.fingerprint.is_some());
        assert!(f.unavailable.ca_bundle.is_none());
        assert_eq!(f.unavailable.token, "t");
    }

    #[tokio::test]
    async fn the_plain_fixture_answers_503() {
        let plain = Credentials {
            endpoint: "http://h:1".into(),
            ..target()
        };
        let f = start(&plain).await.unwrap();
        let addr = f
            .unavailable
            .endpoint
            .trim_start_matches("http://")
            .to_string();
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 503"), "{out}");
    }
}
