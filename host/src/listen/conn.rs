//! One connection's life: its state (one word, so a change and its time are seen
//! together), the server's registry of connections and admission at the cap, the
//! watchdog that closes what overstays its state, and the stream that notes when a
//! request's first bytes arrive.
use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::{ADMIT_WAIT, Bounds, Transport};
use crate::telemetry::WarnLimit;

/// A connection's state and when it began, in one word so that a change and its time
/// are seen together: milliseconds since the server's start, shifted, and the state.
pub(super) const OPEN: u64 = 0;
pub(super) const HEAD: u64 = 1;
pub(super) const BUSY: u64 = 2;
const CLOSING: u64 = 3;

fn pack(state: u64, ms: u64) -> u64 {
    ms << 2 | state
}

fn unpack(word: u64) -> (u64, u64) {
    (word & 3, word >> 2)
}

/// One connection as the accept loop and its watchdog see it.
pub(super) struct Conn {
    /// [`pack`]ed: `OPEN` (handshaking, or no request since the last response), `HEAD`
    /// (a request's first bytes arrived), `BUSY` (a request in flight), `CLOSING`.
    word: AtomicU64,
    changed: Notify,
}

impl Conn {
    /// Move from one of `from` to `to` at `ms`; false if the state is none of `from`.
    pub(super) fn shift(&self, from: &[u64], to: u64, ms: u64) -> bool {
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            if !from.contains(&unpack(word).0) {
                return false;
            }
            match self.word.compare_exchange_weak(
                word,
                pack(to, ms),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.changed.notify_waiters();
                    return true;
                }
                Err(now) => word = now,
            }
        }
    }
}

pub(super) struct Server {
    slots: Arc<Semaphore>,
    pub(super) budget: Arc<Semaphore>,
    epoch: Instant,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
    /// The warnings' bound: at most one per [`WARN_EVERY`].
    pub(super) warned: WarnLimit,
    transport: Transport,
    pub(super) app: Router,
    pub(super) bounds: Bounds,
}

/// Warnings of one kind are logged at most this often per server.
const WARN_EVERY: Duration = Duration::from_secs(60);

impl Server {
    pub(super) fn new(transport: Transport, app: Router, bounds: Bounds) -> Self {
        Server {
            slots: Arc::new(Semaphore::new(bounds.max_connections)),
            budget: Arc::new(Semaphore::new(bounds.body_budget.max(bounds.max_body))),
            epoch: Instant::now(),
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            warned: WarnLimit::new(WARN_EVERY, 1),
            transport,
            app,
            bounds,
        }
    }

    pub(super) fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// A slot for a new connection: a free one, else the slot of the longest-idle
    /// connection (closed for it), else one that frees within [`ADMIT_WAIT`].
    pub(super) async fn admit(&self) -> Option<OwnedSemaphorePermit> {
        if let Ok(slot) = self.slots.clone().try_acquire_owned() {
            return Some(slot);
        }
        let evicted = self.evict_idlest();
        if self.warned.may_warn_now() {
            tracing::warn!(
                server = self.bounds.name,
                max_connections = self.bounds.max_connections,
                evicted,
                "at the connection cap"
            );
        }
        tokio::time::timeout(ADMIT_WAIT, self.slots.clone().acquire_owned())
            .await
            .ok()
            .and_then(Result::ok)
    }

    /// Close the connection that has waited longest with no request in flight (of
    /// those that began waiting in the same millisecond, the oldest).
    fn evict_idlest(&self) -> bool {
        let mut idle: Vec<(u64, u64, Arc<Conn>)> = {
            let conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
            conns
                .iter()
                .filter_map(|(id, c)| {
                    let (state, since) = unpack(c.word.load(Ordering::Acquire));
                    (state == OPEN || state == HEAD).then(|| (since, *id, c.clone()))
                })
                .collect()
        };
        idle.sort_unstable_by_key(|(since, id, _)| (*since, *id));
        idle.iter()
            .any(|(since, _, c)| c.shift(&[OPEN, HEAD], CLOSING, *since))
    }

    pub(super) async fn connection(
        self: Arc<Self>,
        tcp: TcpStream,
        peer: SocketAddr,
        _slot: OwnedSemaphorePermit,
    ) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            word: AtomicU64::new(pack(OPEN, self.now())),
            changed: Notify::new(),
        });
        self.conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, conn.clone());
        let _registered = Registered(&self, id);
        let _ = tcp.set_nodelay(true);
        tokio::select! {
            ended = self.clone().serve_connection(tcp, conn.clone()) => {
                if let Err(e) = ended {
                    tracing::debug!(server = self.bounds.name, %peer, error = %e, "connection ended");
                }
            }
            why = self.watch(&conn) => {
                tracing::debug!(server = self.bounds.name, %peer, why, "connection closed");
            }
        }
    }

    async fn serve_connection(
        self: Arc<Self>,
        tcp: TcpStream,
        conn: Arc<Conn>,
    ) -> anyhow::Result<()> {
        let stream: Box<dyn Stream> = match &self.transport {
            Transport::Plain => Box::new(tcp),
            Transport::Tls(acceptor) => {
                match tokio::time::timeout(self.bounds.handshake_timeout, acceptor.accept(tcp))
                    .await
                {
                    Ok(Ok(stream)) => Box::new(stream),
                    Ok(Err(e)) => anyhow::bail!("TLS handshake failed: {e}"),
                    Err(_) => anyhow::bail!(
                        "TLS handshake timed out ({:?})",
                        self.bounds.handshake_timeout
                    ),
                }
            }
        };
        let io = TokioIo::new(Watched {
            inner: stream,
            conn: conn.clone(),
            server: self.clone(),
        });
        let service = hyper::service::service_fn(move |req| {
            let (server, conn) = (self.clone(), conn.clone());
            async move { Ok::<_, Infallible>(server.request(conn, req).await) }
        });
        hyper::server::conn::http1::Builder::new()
            // The watchdog times headers (from their first byte) and idle connections.
            .header_read_timeout(None)
            .serve_connection(io, service)
            .await?;
        Ok(())
    }

    /// Until the connection overstays its state: why it is closed.
    async fn watch(&self, conn: &Conn) -> &'static str {
        loop {
            let changed = conn.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let word = conn.word.load(Ordering::Acquire);
            let (state, since) = unpack(word);
            let (limit, why) = match state {
                OPEN => (self.bounds.idle_timeout, "idle timeout"),
                HEAD => (self.bounds.header_timeout, "header timeout"),
                BUSY => (self.bounds.request_timeout, "request timeout"),
                _ => return "taken by a new connection at the cap",
            };
            let deadline = self.epoch + Duration::from_millis(since) + limit;
            tokio::select! {
                _ = tokio::time::sleep_until(deadline.into()) => {
                    // Closed only if nothing moved since (a request that just began wins).
                    if conn
                        .word
                        .compare_exchange(word, pack(CLOSING, since), Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        return why;
                    }
                }
                _ = &mut changed => {}
            }
        }
    }
}

/// Takes a connection out of its server's registry when it ends.
struct Registered<'a>(&'a Server, u64);

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.0
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.1);
    }
}

/// A connection's byte stream, TLS or not.
trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// The stream hyper reads, noting when a request's first bytes arrive.
struct Watched {
    inner: Box<dyn Stream>,
    conn: Arc<Conn>,
    server: Arc<Server>,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before && unpack(this.conn.word.load(Ordering::Relaxed)).0 == OPEN {
            this.conn.shift(&[OPEN], HEAD, this.server.now());
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
