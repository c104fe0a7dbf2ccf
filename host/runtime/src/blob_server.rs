//! The routes of the HTTP server of published blobs (`runtime::blobs`):
//! `GET /blobs/<token>/<name>`. The host serves them on its bounded accept loop
//! (`hyperplug::listen`, with its connection cap and timeouts), as it serves every
//! other port.
//!
//! The token is the secret: a request names no object, and an unknown, withdrawn or
//! expired token gets the same 404. Paths are never logged.
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::blobs::BlobStore;

/// The routes, serving `store`.
pub fn router(store: Arc<BlobStore>) -> Router {
    Router::new()
        .route("/blobs/{token}/{name}", get(blob))
        .with_state(store)
}

async fn blob(
    State(store): State<Arc<BlobStore>>,
    Path((token, name)): Path<(String, String)>,
) -> Response {
    match store.get(&token, &name) {
        Some(content) => {
            tracing::debug!(bytes = content.len(), "blob served");
            (
                [
                    (header::CONTENT_TYPE, "application/octet-stream"),
                    (header::CACHE_CONTROL, "no-store"),
                ],
                Body::from(content),
            )
                .into_response()
        }
        None => (StatusCode::NOT_FOUND, "no such blob").into_response(),
    }
}
