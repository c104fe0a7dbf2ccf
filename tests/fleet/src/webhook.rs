//! The manager's webhook Service as the release has it, on loopback: a TCP forwarder the
//! CRDs' conversion webhook points at, passing each connection to a live replica's
//! webhook port (TLS end to end, the replicas' certificate from the plane's CA). A killed
//! replica refuses connections and the next one serves, and while none listens yet the
//! connection waits, as a Service's ready endpoints would.
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use kube_world::Plane;
use tokio::net::{TcpListener, TcpStream};

/// The forwarder; clones share its replicas.
#[derive(Debug, Clone)]
pub struct Service {
    /// What the CRDs' conversion webhook calls.
    pub url: String,
    /// The serving certificate every replica reads (`--webhook-cert-dir`).
    pub cert_dir: PathBuf,
    ports: Arc<Mutex<Vec<u16>>>,
}

impl Service {
    pub async fn start(plane: &Plane) -> Result<Service> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("https://{}/convert", listener.local_addr()?);
        let ports: Arc<Mutex<Vec<u16>>> = Arc::default();
        let backends = ports.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let backends = backends.clone();
                tokio::spawn(async move {
                    if let Some(mut upstream) = connect(&backends).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                });
            }
        });
        Ok(Service {
            url,
            cert_dir: plane.webhook_cert_dir("hyperplug-webhook")?,
            ports,
        })
    }

    /// A port for one more replica's webhook server (`--webhook-addr`). The replica is
    /// reached once it listens.
    pub fn add_replica(&self) -> Result<u16> {
        let port = kube_world::free_port()?;
        self.ports.lock().unwrap().push(port);
        Ok(port)
    }
}

/// A connection to a replica that listens: the newest first (older ones may have been
/// killed), waiting while none does yet (a replica starting, or restarting after a
/// kill), as a Service's ready endpoints come and go. `None` after `READY_WAIT`.
async fn connect(backends: &Mutex<Vec<u16>>) -> Option<TcpStream> {
    const READY_WAIT: Duration = Duration::from_secs(30);
    let deadline = Instant::now() + READY_WAIT;
    loop {
        let candidates = backends.lock().unwrap().clone();
        for port in candidates.iter().rev() {
            if let Ok(upstream) = TcpStream::connect(("127.0.0.1", *port)).await {
                return Some(upstream);
            }
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
