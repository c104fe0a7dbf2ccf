//! The manager's webhook Service as the release has it, on loopback: a TCP forwarder the
//! CRDs' conversion webhook points at, passing each connection to a live replica's
//! webhook port (TLS end to end, the replicas' certificate from the plane's CA). A killed
//! replica refuses connections and the next one serves, as a Service's endpoints would.
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

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
                let candidates = backends.lock().unwrap().clone();
                tokio::spawn(async move {
                    // The newest replica first: the older ones may have been killed.
                    for port in candidates.iter().rev() {
                        if let Ok(mut upstream) = TcpStream::connect(("127.0.0.1", *port)).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                            return;
                        }
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

    /// A port for one more replica's webhook server (`--webhook-addr`).
    pub fn add_replica(&self) -> Result<u16> {
        let port = kube_world::free_port()?;
        self.ports.lock().unwrap().push(port);
        Ok(port)
    }
}
