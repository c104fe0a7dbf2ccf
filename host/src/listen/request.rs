//! One request: its body read within the server's bounds and body budget, then the
//! app; the response holds the request's place and budget until it is written, and a
//! refusal closes the connection.
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::{Body as _, Frame, Incoming, SizeHint};
use hyper_util::service::TowerToHyperService;
use tokio::sync::OwnedSemaphorePermit;

use super::BUDGET_WAIT;
use super::conn::{BUSY, Conn, HEAD, OPEN, Server};

impl Server {
    /// One request: bounded body, then the app.
    pub(super) async fn request(
        self: Arc<Self>,
        conn: Arc<Conn>,
        req: Request<Incoming>,
    ) -> Response<Tracked> {
        if !conn.shift(&[OPEN, HEAD], BUSY, self.now()) {
            return refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "the connection is closing",
                Hold::none(),
            );
        }
        let done = Done {
            conn,
            server: self.clone(),
        };
        let (parts, body) = req.into_parts();
        let max = self.bounds.max_body;
        let declared = body.size_hint().exact();
        if let Some(n) = declared.filter(|n| *n > max as u64) {
            let message = format!("a request body of {n} bytes; at most {max}");
            return refusal(StatusCode::PAYLOAD_TOO_LARGE, &message, Hold::done(done));
        }
        let reserve = declared.map_or(max, |n| n as usize);
        let budget = self.budget.clone().acquire_many_owned(reserve as u32);
        let Ok(Ok(mut permit)) = tokio::time::timeout(BUDGET_WAIT, budget).await else {
            let mut refused = refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many request bodies in flight; retry",
                Hold::done(done),
            );
            refused
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return refused;
        };
        let read = tokio::time::timeout(self.bounds.body_timeout, read_body(body, declared, max));
        let bytes = match read.await {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(BodyError::TooLarge)) => {
                let message = format!("a request body of more than {max} bytes");
                return refusal(StatusCode::PAYLOAD_TOO_LARGE, &message, Hold::done(done));
            }
            Ok(Err(BodyError::Read(e))) => {
                let message = format!("the request body could not be read: {e}");
                return refusal(StatusCode::BAD_REQUEST, &message, Hold::done(done));
            }
            Err(_) => {
                let message = format!(
                    "the request body did not arrive within {:?}",
                    self.bounds.body_timeout
                );
                return refusal(StatusCode::REQUEST_TIMEOUT, &message, Hold::done(done));
            }
        };
        // A body of unknown length reserved the maximum: give back what it did not use.
        if bytes.len() < permit.num_permits() {
            drop(permit.split(permit.num_permits() - bytes.len()));
        }
        let req = Request::from_parts(parts, Body::from(bytes));
        let app = TowerToHyperService::new(self.app.clone());
        let response = match hyper::service::Service::call(&app, req).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        response.map(|inner| Tracked {
            inner,
            _hold: Hold {
                _done: Some(done),
                _permit: Some(permit),
            },
        })
    }
}

/// A request in flight: when its response is written (or dropped) the connection is
/// idle again.
struct Done {
    conn: Arc<Conn>,
    server: Arc<Server>,
}

impl Drop for Done {
    fn drop(&mut self) {
        self.conn.shift(&[BUSY], OPEN, self.server.now());
    }
}

/// What a response holds until it is written: its request's place and budget.
struct Hold {
    _done: Option<Done>,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Hold {
    fn none() -> Self {
        Hold {
            _done: None,
            _permit: None,
        }
    }
    fn done(done: Done) -> Self {
        Hold {
            _done: Some(done),
            _permit: None,
        }
    }
}

/// A response body that keeps its request's [`Hold`] until it is written.
pub struct Tracked {
    inner: Body,
    _hold: Hold,
}

impl hyper::body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A refusal that closes the connection (what is left of the body is never read).
fn refusal(status: StatusCode, message: &str, hold: Hold) -> Response<Tracked> {
    let mut response = Response::new(Tracked {
        inner: Body::from(format!("{message}\n")),
        _hold: hold,
    });
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

enum BodyError {
    TooLarge,
    Read(hyper::Error),
}

/// The whole body, at most `max` bytes, in one buffer.
async fn read_body(
    mut body: Incoming,
    declared: Option<u64>,
    max: usize,
) -> Result<Bytes, BodyError> {
    let mut buffer = Vec::with_capacity(declared.unwrap_or(0) as usize);
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let frame = frame.map_err(BodyError::Read)?;
        if let Ok(data) = frame.into_data() {
            if buffer.len() + data.len() > max {
                return Err(BodyError::TooLarge);
            }
            buffer.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(buffer))
}
