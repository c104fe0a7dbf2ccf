//! The one accept loop of every server the manager runs: the webhook server (HTTPS),
//! `/metrics`, `/healthz` and `/readyz`, and the blob server. Each server has its own
//! [`Bounds`], so a flood of one port cannot take the file descriptors, memory or
//! connection slots the others (and the Kubernetes client, and every plugin's requests)
//! need:
//!
//! - **connections**: at most `max_connections` at once. At the cap, a new connection
//!   takes the slot of the one that has been waiting longest without a request in flight
//!   (still in its TLS handshake, idle between requests, or sending headers), which is
//!   closed; if every connection has a request in flight, the new one waits up to
//!   [`ADMIT_WAIT`] for a slot and is closed if none frees. Idle sockets therefore
//!   never keep a client out, and the server holds at most `max_connections + 1`
//!   descriptors.
//! - **timeouts**: the TLS handshake (`handshake_timeout`), an idle connection
//!   (`idle_timeout`: from its start or its last response to the first byte of the next
//!   request), a request's headers (`header_timeout`, from their first byte), its body
//!   (`body_timeout`: 408 past it) and the whole request (`request_timeout`: from its
//!   headers to its response's last byte; the connection is closed past it).
//! - **request bodies**: a body longer than `max_body` is answered 413 (one that says
//!   so in `Content-Length` before any of it is read), and bodies in flight share
//!   `body_budget` bytes: a request reserves its `Content-Length` (a body without one,
//!   `max_body`) before its body is read and keeps it until its response is written;
//!   one that finds no room within [`BUDGET_WAIT`] is answered 503 unread.
//!
//! Refusals close the connection (`Connection: close`), so an unread body is never
//! drained.
//!
//! Where things are: this file holds the bounds and the accept loop; `conn` a
//! connection's life (its state, the registry and admission at the cap, the watchdog,
//! the stream that notes a request's first bytes); `request` one request (its body
//! within the bounds and the budget, the app, the response that holds both until
//! written).
mod conn;
mod request;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use clap::builder::TypedValueParser as _;
use tokio::net::TcpListener;

use self::conn::Server;

/// How long a new connection waits for a slot when every slot has a request in flight.
pub const ADMIT_WAIT: Duration = Duration::from_secs(1);
/// How long a request waits for room in its server's body budget before it is refused.
pub const BUDGET_WAIT: Duration = Duration::from_secs(5);

/// Connections the webhook server holds at once (`--webhook-max-connections`).
pub const WEBHOOK_MAX_CONNECTIONS: usize = 128;
/// Request bodies the webhook server holds at once, in MiB
/// (`--webhook-body-budget-mib`): four reviews of the largest size.
pub const WEBHOOK_BODY_BUDGET_MIB: u64 = 32;
/// Connections the blob server holds at once (`--blob-max-connections`).
pub const BLOB_MAX_CONNECTIONS: usize = 128;
/// Connections the health server, and the metrics server, each hold at once (probes
/// and scrapes).
pub const PROBE_MAX_CONNECTIONS: usize = 32;
/// The largest request the webhook server reads: a review holds the objects of one
/// request, at most a few etcd objects (1.5 MiB each).
pub const WEBHOOK_MAX_BODY: usize = 8 << 20;
/// The largest request body of the servers that only answer GETs.
const GET_MAX_BODY: usize = 16 << 10;

/// The flags of the servers' bounds that an operator may need to change; every other
/// bound is fixed (docs/security.md, "Limits").
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ServerArgs {
    /// Connections the webhook server (--webhook-addr) holds at once. At the cap a new
    /// connection takes the slot of the longest-idle one (handshaking, idle, or still
    /// sending headers); with every slot serving a request it waits 1 s for one, then
    /// is closed.
    #[arg(long, default_value_t = WEBHOOK_MAX_CONNECTIONS, env = "HYPERPLUG_WEBHOOK_MAX_CONNECTIONS", value_parser = clap::value_parser!(u64).range(1..=65536).map(|n| n as usize))]
    pub webhook_max_connections: usize,
    /// MiB of request bodies (reviews) the webhook server holds at once, at least one
    /// review (8 MiB). A review that finds no room within 5 s is answered 503 unread.
    #[arg(long, default_value_t = WEBHOOK_BODY_BUDGET_MIB, env = "HYPERPLUG_WEBHOOK_BODY_BUDGET_MIB", value_parser = clap::value_parser!(u64).range(8..=4096))]
    pub webhook_body_budget_mib: u64,
    /// Connections the blob server (--blob-listen-addr) holds at once; as
    /// --webhook-max-connections past the cap.
    #[arg(long, default_value_t = BLOB_MAX_CONNECTIONS, env = "HYPERPLUG_BLOB_MAX_CONNECTIONS", value_parser = clap::value_parser!(u64).range(1..=65536).map(|n| n as usize))]
    pub blob_max_connections: usize,
}

impl Default for ServerArgs {
    fn default() -> Self {
        Self {
            webhook_max_connections: WEBHOOK_MAX_CONNECTIONS,
            webhook_body_budget_mib: WEBHOOK_BODY_BUDGET_MIB,
            blob_max_connections: BLOB_MAX_CONNECTIONS,
        }
    }
}

/// What one server allows (module docs).
#[derive(Debug, Clone)]
pub struct Bounds {
    /// The server's name in logs.
    pub name: &'static str,
    pub max_connections: usize,
    pub handshake_timeout: Duration,
    pub idle_timeout: Duration,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub request_timeout: Duration,
    pub max_body: usize,
    pub body_budget: usize,
}

impl Bounds {
    /// The HTTPS webhook server: CRD conversion and the finalizer webhook.
    pub fn webhook(args: &ServerArgs) -> Self {
        Self {
            name: "webhook",
            max_connections: args.webhook_max_connections,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            max_body: WEBHOOK_MAX_BODY,
            body_budget: (args.webhook_body_budget_mib as usize) << 20,
        }
    }

    /// `/healthz` and `/readyz` (`name` "health"), or `/metrics` ("metrics"): GETs.
    pub fn probes(name: &'static str) -> Self {
        Self {
            name,
            max_connections: PROBE_MAX_CONNECTIONS,
            handshake_timeout: Duration::ZERO,
            idle_timeout: Duration::from_secs(60),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_body: GET_MAX_BODY,
            body_budget: PROBE_MAX_CONNECTIONS * GET_MAX_BODY,
        }
    }

    /// The blob server: GETs whose answers are up to `--blob-max-mib` (8 MiB), read by
    /// the infrastructure (a BMC's virtual media), maybe slowly.
    pub fn blobs(args: &ServerArgs) -> Self {
        Self {
            max_connections: args.blob_max_connections,
            request_timeout: Duration::from_secs(300),
            body_budget: args.blob_max_connections * GET_MAX_BODY,
            ..Self::probes("blobs")
        }
    }
}

/// What a connection speaks before HTTP.
pub enum Transport {
    Plain,
    Tls(tokio_rustls::TlsAcceptor),
}

/// Serve `app` on `listener` within `bounds` until the process ends. Accept errors (out
/// of descriptors included) are logged and retried; they never end the server.
pub async fn serve(
    listener: TcpListener,
    transport: Transport,
    app: Router,
    bounds: Bounds,
) -> anyhow::Result<()> {
    let server = Arc::new(Server::new(transport, app, bounds));
    tracing::info!(
        server = server.bounds.name,
        addr = %listener.local_addr()?,
        max_connections = server.bounds.max_connections,
        "serving"
    );
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                // Out of descriptors (EMFILE, ENFILE) or buffers: the connection stays in
                // the kernel's backlog; try again shortly rather than spin.
                if server.warned.may_warn_now() {
                    tracing::warn!(server = server.bounds.name, error = %e, "cannot accept connections");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(slot) = server.admit().await else {
            tracing::debug!(server = server.bounds.name, %peer, "connection refused at the cap");
            drop(tcp);
            continue;
        };
        tokio::spawn(server.clone().connection(tcp, peer, slot));
    }
}

fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Raise the soft limit of open files to the hard limit, logging both: the servers'
/// caps bound what they hold, and the Kubernetes client and every plugin's requests
/// need descriptors beyond them (container runtimes often start processes at 1,024).
pub fn raise_fd_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given, which lives on this stack.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        let error = io::Error::last_os_error();
        return tracing::warn!(%error, "cannot read the open-files limit");
    }
    let (soft, hard) = (limit.rlim_cur, limit.rlim_max);
    if soft >= hard {
        return tracing::info!(
            soft,
            hard,
            "open-files limit: the soft limit is the hard limit"
        );
    }
    limit.rlim_cur = limit.rlim_max;
    // SAFETY: setrlimit reads the struct it is given; raising the soft limit up to the
    // hard one needs no privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } == 0 {
        tracing::info!(
            from = soft,
            to = hard,
            hard,
            "open-files soft limit raised to the hard limit"
        );
    } else {
        let error = io::Error::last_os_error();
        tracing::warn!(soft, hard, %error, "cannot raise the open-files soft limit");
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Instant;

    use axum::body::Bytes;
    use axum::routing::{get, post};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    fn bounds(max_connections: usize) -> Bounds {
        Bounds {
            name: "test",
            max_connections,
            handshake_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(30),
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(30),
            max_body: 1000,
            body_budget: 1000,
        }
    }

    /// A plain server of `/` (GET: "ok") and `/echo` (POST: the body's length) within
    /// `bounds`; its address.
    async fn server(bounds: Bounds) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/", get(|| async { "ok" })).route(
            "/echo",
            post(|body: Bytes| async move { body.len().to_string() }),
        );
        tokio::spawn(serve(listener, Transport::Plain, app, bounds));
        addr
    }

    /// Write `request`, then read until the server closes or a whole response with a
    /// body arrived; what was read.
    async fn exchange(stream: &mut TcpStream, request: &[u8]) -> String {
        stream.write_all(request).await.unwrap();
        read_response(stream).await
    }

    async fn read_response(stream: &mut TcpStream) -> String {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf));
            match read.await.expect("an answer within 10 s") {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
            let text = String::from_utf8_lossy(&seen);
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head.lines().find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                });
                if length.is_some_and(|n| body.len() >= n) {
                    break;
                }
            }
        }
        String::from_utf8_lossy(&seen).into_owned()
    }

    async fn get_root(addr: SocketAddr) -> String {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        exchange(&mut stream, b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await
    }

    /// Whether the server closed `stream` (read returns end of file or an error).
    async fn closed(stream: &mut TcpStream, within: Duration) -> bool {
        let mut buf = [0u8; 64];
        matches!(
            tokio::time::timeout(within, stream.read(&mut buf)).await,
            Ok(Ok(0) | Err(_))
        )
    }

    #[tokio::test]
    async fn idle_connections_at_the_cap_give_way_to_a_new_one() {
        let addr = server(bounds(4)).await;
        let mut idle = Vec::new();
        for _ in 0..20 {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        let answer = get_root(addr).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("ok"), "{answer}");
        // The oldest idle ones were closed for the newer.
        assert!(closed(&mut idle[0], Duration::from_secs(5)).await);
    }

    #[tokio::test]
    async fn a_connection_serving_a_request_is_not_taken() {
        let addr = server(bounds(1)).await;
        let mut busy = TcpStream::connect(addr).await.unwrap();
        // Headers whole, the body still coming: a request in flight.
        busy.write_all(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\n\r\nab")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut late = TcpStream::connect(addr).await.unwrap();
        // The newcomer waits ADMIT_WAIT for the only slot, then is closed.
        assert!(closed(&mut late, ADMIT_WAIT * 3).await);
        let answer = exchange(&mut busy, b"cd").await;
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.ends_with("\r\n\r\n4"),
            "{answer}"
        );
    }

    #[tokio::test]
    async fn a_body_over_the_maximum_is_refused_unread() {
        let addr = server(bounds(4)).await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let answer = exchange(
            &mut stream,
            b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 1001\r\n\r\n",
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        assert!(
            answer.to_ascii_lowercase().contains("connection: close"),
            "{answer}"
        );
        // Chunked, the length unknown until it is too much.
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let chunk = format!("{:x}\r\n{}\r\n", 600, "a".repeat(600));
        let request = format!(
            "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n{chunk}{chunk}0\r\n\r\n"
        );
        let answer = exchange(&mut stream, request.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        // Within the maximum, chunked or not.
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n{chunk}0\r\n\r\n"
        );
        let answer = exchange(&mut stream, request.as_bytes()).await;
        assert!(answer.ends_with("\r\n\r\n600"), "{answer}");
    }

    #[tokio::test]
    async fn bodies_in_flight_share_the_budget() {
        let addr = server(bounds(4)).await;
        let mut first = TcpStream::connect(addr).await.unwrap();
        first
            .write_all(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 800\r\n\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        // 800 of 1000 bytes reserved: 300 more wait, and are refused after BUDGET_WAIT.
        let mut second = TcpStream::connect(addr).await.unwrap();
        let started = Instant::now();
        let answer = exchange(
            &mut second,
            b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 300\r\n\r\n",
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(started.elapsed() >= BUDGET_WAIT);
        // 200 fit.
        let mut third = TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 200\r\n\r\n{}",
            "b".repeat(200)
        );
        let answer = exchange(&mut third, request.as_bytes()).await;
        assert!(answer.ends_with("\r\n\r\n200"), "{answer}");
    }

    #[tokio::test]
    async fn slow_and_silent_clients_are_timed_out() {
        let addr = server(Bounds {
            idle_timeout: Duration::from_millis(300),
            header_timeout: Duration::from_millis(300),
            body_timeout: Duration::from_millis(300),
            ..bounds(8)
        })
        .await;
        // Silent: closed at the idle timeout.
        let mut silent = TcpStream::connect(addr).await.unwrap();
        assert!(closed(&mut silent, Duration::from_secs(5)).await);
        // Headers that never end: closed at the header timeout.
        let mut slow_head = TcpStream::connect(addr).await.unwrap();
        slow_head.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        assert!(closed(&mut slow_head, Duration::from_secs(5)).await);
        // A body that stalls: 408.
        let mut slow_body = TcpStream::connect(addr).await.unwrap();
        let answer = exchange(
            &mut slow_body,
            b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nab",
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        // Kept alive after an answer, then idle: closed.
        let mut kept = TcpStream::connect(addr).await.unwrap();
        let answer = exchange(&mut kept, b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
        assert!(answer.ends_with("ok"), "{answer}");
        assert!(closed(&mut kept, Duration::from_secs(5)).await);
    }

    #[test]
    fn flags_default_to_the_constants() {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            servers: ServerArgs,
        }
        let parsed = Cli::parse_from(["hyperplug"]).servers;
        let default = ServerArgs::default();
        assert_eq!(
            (
                parsed.webhook_max_connections,
                parsed.webhook_body_budget_mib,
                parsed.blob_max_connections
            ),
            (
                default.webhook_max_connections,
                default.webhook_body_budget_mib,
                default.blob_max_connections
            )
        );
        assert!(Cli::try_parse_from(["hyperplug", "--webhook-body-budget-mib", "4"]).is_err());
        assert!(Cli::try_parse_from(["hyperplug", "--webhook-max-connections", "0"]).is_err());
    }
}
