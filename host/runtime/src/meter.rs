//! What one call spends on the host, wherever the host spends it: the CPU time of
//! every poll of the call (Wasm and the host imports it runs) and of the HTTP work done
//! for it, against the call's CPU budget; and the first limit it broke, which fails it.
//!
//! Shared (`Arc`) by the call's store, its egress hook and the futures that run on its
//! behalf, so a limit broken in a spawned request still fails the call.
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use super::limits::Breach;

pub struct CallMeter {
    budget_ns: u64,
    /// CPU time of finished polls, in nanoseconds.
    spent_ns: AtomicU64,
    /// Thread CPU time when the current poll of the call began (valid during it).
    poll_began_ns: AtomicU64,
    breach: Mutex<Option<Breach>>,
}

/// Why the meter stops a call.
#[derive(Debug, Clone)]
pub enum Stop {
    Cpu,
    Breach(Breach),
}

impl CallMeter {
    pub fn new(budget: Duration) -> Arc<CallMeter> {
        Arc::new(CallMeter {
            budget_ns: budget.as_nanos().min(u64::MAX as u128) as u64,
            spent_ns: AtomicU64::new(0),
            poll_began_ns: AtomicU64::new(0),
            breach: Mutex::new(None),
        })
    }

    /// Record that the call broke `breach` (the first one is reported).
    pub fn breach(&self, breach: Breach) {
        let mut first = self.breach.lock().expect("breach");
        if first.is_none() {
            *first = Some(breach);
        }
    }

    pub fn breached(&self) -> Option<Breach> {
        self.breach.lock().expect("breach").clone()
    }

    /// CPU time charged so far, including the poll in progress on this thread.
    pub fn spent_in_poll(&self) -> Duration {
        let now = thread_cpu_ns();
        let current = now.saturating_sub(self.poll_began_ns.load(Ordering::Relaxed));
        Duration::from_nanos(self.spent_ns.load(Ordering::Relaxed) + current)
    }

    /// CPU time charged by finished polls.
    pub fn spent(&self) -> Duration {
        Duration::from_nanos(self.spent_ns.load(Ordering::Relaxed))
    }

    /// Whether the call must stop now: a limit broken, or the budget spent. Checked
    /// at every epoch tick inside Wasm and after every poll.
    pub fn check(&self, in_poll: bool) -> Option<Stop> {
        if let Some(b) = self.breached() {
            return Some(Stop::Breach(b));
        }
        let spent = if in_poll {
            self.spent_in_poll()
        } else {
            self.spent()
        };
        (spent.as_nanos() > self.budget_ns as u128).then_some(Stop::Cpu)
    }

    fn charge(&self, ns: u64) {
        self.spent_ns.fetch_add(ns, Ordering::Relaxed);
    }
}

/// CPU time this thread has used. Host work and Wasm of one poll run on one thread (a
/// Wasm fiber runs on the thread that polls it), so a difference is the poll's cost.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write into; the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// The call itself: every poll is charged, and the call ends as soon as the meter says
/// stop (after the poll that broke the limit).
pub struct Metered<F> {
    inner: Pin<Box<F>>,
    meter: Arc<CallMeter>,
    /// Whether this is the call's own future (its polls are what the epoch callback
    /// sees as "in progress") or work done for it elsewhere (an HTTP request).
    call: bool,
}

impl<F> Metered<F> {
    /// The call's own future.
    pub fn call(inner: F, meter: Arc<CallMeter>) -> Metered<F> {
        Metered {
            inner: Box::pin(inner),
            meter,
            call: true,
        }
    }

    /// Work done on the call's behalf in another task: charged, never stopped here
    /// (the call stops at its next check).
    pub fn on_behalf(inner: F, meter: Arc<CallMeter>) -> Metered<F> {
        Metered {
            inner: Box::pin(inner),
            meter,
            call: false,
        }
    }
}

impl<F: Future> Future for Metered<F> {
    type Output = Result<F::Output, Stop>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let began = thread_cpu_ns();
        if self.call {
            self.meter.poll_began_ns.store(began, Ordering::Relaxed);
        }
        let polled = self.inner.as_mut().poll(cx);
        self.meter.charge(thread_cpu_ns().saturating_sub(began));
        if self.call
            && let Some(stop) = self.meter.check(false)
        {
            return Poll::Ready(Err(stop));
        }
        polled.map(Ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn burn(d: Duration) {
        let start = thread_cpu_ns();
        while thread_cpu_ns() - start < d.as_nanos() as u64 {
            std::hint::black_box(0u64);
        }
    }

    #[tokio::test]
    async fn host_work_inside_a_call_counts_against_its_budget() {
        let meter = CallMeter::new(Duration::from_millis(20));
        let call = Metered::call(
            async {
                for _ in 0..100 {
                    burn(Duration::from_millis(5));
                    tokio::task::yield_now().await;
                }
            },
            meter.clone(),
        );
        assert!(matches!(call.await, Err(Stop::Cpu)));
        assert!(meter.spent() >= Duration::from_millis(20));
        assert!(meter.spent() < Duration::from_millis(100), "stopped early");
    }

    #[tokio::test]
    async fn a_breach_recorded_elsewhere_stops_the_call_at_its_next_poll() {
        let meter = CallMeter::new(Duration::from_secs(60));
        let recorder = meter.clone();
        let call = Metered::call(
            async move {
                recorder.breach(Breach::new("1 thing", "--things"));
                tokio::task::yield_now().await;
                "finished"
            },
            meter,
        );
        match call.await {
            Err(Stop::Breach(b)) => assert_eq!(b.flag, "--things"),
            other => panic!("{other:?}"),
        }
    }
}
