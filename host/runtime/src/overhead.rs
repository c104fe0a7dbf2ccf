//! Plugin call overhead: what a call costs the host when the plugin itself does nothing
//! (fresh sandbox, call, drop). One measurement shared by `benches/plugin_call.rs` and
//! the scale benchmark (`tests/scale-bench`), so both print the same figure.
use std::future::Future;
use std::time::{Duration, Instant};

/// Calls in flight for the throughput figure (many reconciles at once on few workers).
pub const CONCURRENT_CALLS: usize = 64;

/// Latency percentiles of sequential calls and the throughput of concurrent ones.
#[derive(Debug, Clone)]
pub struct CallOverhead {
    pub calls: usize,
    pub p50: Duration,
    pub p90: Duration,
    pub p99: Duration,
    pub max: Duration,
    /// Calls per second with [`CONCURRENT_CALLS`] in flight.
    pub per_sec_concurrent: f64,
}

/// Times `iters` sequential calls of `call` (after a warm-up), then runs batches of
/// [`CONCURRENT_CALLS`] spawned calls for the throughput. `call` should do no I/O, or the
/// figure measures the I/O. Must run inside a Tokio runtime.
pub async fn measure<F, Fut>(iters: usize, call: F) -> CallOverhead
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let iters = iters.max(1);
    for _ in 0..iters.min(1_000) {
        call().await;
    }
    let mut samples = Vec::with_capacity(iters);
    for _ in 0..iters {
        let start = Instant::now();
        call().await;
        samples.push(start.elapsed());
    }
    samples.sort();
    let start = Instant::now();
    let rounds = (iters / CONCURRENT_CALLS).max(1);
    for _ in 0..rounds {
        let tasks: Vec<_> = (0..CONCURRENT_CALLS)
            .map(|_| tokio::spawn(call.clone()()))
            .collect();
        for t in tasks {
            let _ = t.await;
        }
    }
    let per_sec_concurrent = (rounds * CONCURRENT_CALLS) as f64 / start.elapsed().as_secs_f64();
    let at = |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize];
    CallOverhead {
        calls: iters,
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
        max: at(1.0),
        per_sec_concurrent,
    }
}

/// Microseconds, for tables.
pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
