//! Exponential backoff with jitter, per object, reset on success.
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use rand::Rng;

pub struct Backoff {
    attempts: Mutex<HashMap<String, u32>>,
    base: Duration,
    max: Duration,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Backoff {
        Backoff {
            attempts: Mutex::new(HashMap::new()),
            base,
            max,
        }
    }

    /// The delay before the next attempt for `key`: base·2ⁿ capped at max, then a random
    /// 50–100 % of it so objects failing together do not retry together.
    pub fn next(&self, key: &str) -> Duration {
        let mut attempts = self.attempts.lock().expect("backoff");
        let n = attempts.entry(key.to_string()).or_insert(0);
        let exp = self.base.saturating_mul(1u32 << (*n).min(16)).min(self.max);
        *n += 1;
        exp.mul_f64(rand::rng().random_range(0.5..=1.0))
    }

    pub fn reset(&self, key: &str) {
        self.attempts.lock().expect("backoff").remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_then_cap_and_reset() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        let first = b.next("a");
        assert!(first <= Duration::from_millis(100) && first >= Duration::from_millis(50));
        for _ in 0..10 {
            b.next("a");
        }
        let capped = b.next("a");
        assert!(capped <= Duration::from_secs(2) && capped >= Duration::from_secs(1));
        b.reset("a");
        assert!(b.next("a") <= Duration::from_millis(100));
        assert!(
            b.next("b") <= Duration::from_millis(100),
            "keys are independent"
        );
    }
}
