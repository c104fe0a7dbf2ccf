//! Progress lines on stderr (`[quickstart 12.3s] ...`), shown by the demo and kept in
//! test output.
use std::sync::OnceLock;
use std::time::Instant;

fn start() -> Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    *START.get_or_init(Instant::now)
}

/// Prints one progress line.
pub fn say(msg: impl AsRef<str>) {
    eprintln!(
        "[quickstart {:>6.1}s] {}",
        start().elapsed().as_secs_f64(),
        msg.as_ref()
    );
}
