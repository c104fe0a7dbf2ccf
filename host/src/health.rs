//! `/healthz`, `/readyz` and `/metrics` over plain HTTP, served by the manager's accept
//! loop (`listen`) within [`Bounds::probes`].
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use crate::listen::{self, Bounds, Transport};
use crate::metrics::Metrics;

#[derive(Clone)]
pub struct Health {
    pub ready: Arc<AtomicBool>,
    pub metrics: Arc<Metrics>,
}

/// Serve `/healthz`, `/readyz` and `/metrics` on `addr` within `bounds`.
pub async fn serve(addr: SocketAddr, health: Health, bounds: Bounds) -> anyhow::Result<()> {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(health);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    listen::serve(listener, Transport::Plain, app, bounds).await
}

async fn readyz(State(h): State<Health>) -> (StatusCode, &'static str) {
    if h.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting")
    }
}

async fn metrics(State(h): State<Health>) -> String {
    h.metrics.encode()
}
