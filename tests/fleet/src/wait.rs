//! Waiting for the world.
use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

/// Polls `check` every 200 ms until it is true. Fails as soon as `alive` does (a process
/// that must not die has died), or after `timeout`.
pub async fn until<A, F, Fut>(
    timeout: Duration,
    what: &str,
    mut alive: A,
    mut check: F,
) -> Result<()>
where
    A: FnMut() -> Result<()>,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        alive()?;
        if check().await? {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
