//! Bounds on warnings that others can cause at will (connections past the cap, objects
//! posted to the webhook): logged each time, they would flood the log and hide the rest.
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Subjects remembered as warned about (the oldest is forgotten first), so that posting
/// objects of ever new names costs bounded memory.
const REMEMBERED: usize = 256;

/// At most `per_window` warnings each `window`, and of one subject at most one each
/// `same_subject_every`; counts the warnings it held back.
pub struct WarnLimit {
    window: Duration,
    per_window: u32,
    /// Zero: subjects are not told apart (each is forgotten by the next warning).
    same_subject_every: Duration,
    state: Mutex<Warned>,
}

/// The warnings logged lately.
struct Warned {
    /// When the current window began.
    window_start: Option<Instant>,
    in_window: u32,
    /// Warnings not logged since the last one.
    quiet: u64,
    /// Subjects warned about, oldest first, with when.
    recent: VecDeque<(String, Instant)>,
}

impl WarnLimit {
    /// At most `per_window` warnings each `window`, whatever they are about.
    pub const fn new(window: Duration, per_window: u32) -> WarnLimit {
        WarnLimit {
            window,
            per_window,
            same_subject_every: Duration::ZERO,
            state: Mutex::new(Warned {
                window_start: None,
                in_window: 0,
                quiet: 0,
                recent: VecDeque::new(),
            }),
        }
    }

    /// And of one subject ([`WarnLimit::may_warn`]) at most one each `every`.
    pub const fn per_subject(mut self, every: Duration) -> WarnLimit {
        self.same_subject_every = every;
        self
    }

    /// Whether to warn now, for warnings told apart by no subject.
    pub fn may_warn_now(&self) -> bool {
        self.may_warn("", Instant::now()).is_some()
    }

    /// Whether to warn about `subject` at `now`, with how many warnings were not logged
    /// since the last one.
    pub fn may_warn(&self, subject: &str, now: Instant) -> Option<u64> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while st
            .recent
            .front()
            .is_some_and(|(_, at)| now.duration_since(*at) >= self.same_subject_every)
        {
            st.recent.pop_front();
        }
        if st
            .window_start
            .is_none_or(|m| now.duration_since(m) >= self.window)
        {
            st.window_start = Some(now);
            st.in_window = 0;
        }
        if st.in_window >= self.per_window || st.recent.iter().any(|(s, _)| s == subject) {
            st.quiet += 1;
            return None;
        }
        st.in_window += 1;
        if st.recent.len() == REMEMBERED {
            st.recent.pop_front();
        }
        st.recent.push_back((subject.to_string(), now));
        Some(std::mem::take(&mut st.quiet))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_a_window_is_the_first_at_once_then_one_each_window_after_the_last() {
        let every = Duration::from_secs(60);
        let limit = WarnLimit::new(every, 1);
        let t0 = Instant::now();
        assert_eq!(limit.may_warn("", t0), Some(0));
        assert_eq!(limit.may_warn("", t0 + every / 2), None);
        assert_eq!(limit.may_warn("", t0 + every), Some(1));
        assert_eq!(limit.may_warn("", t0 + every * 3 / 2), None);
    }
}
