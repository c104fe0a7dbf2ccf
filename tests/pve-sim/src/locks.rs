//! Config file locks: PVE's `flock` on `/var/lock/qemu-server/lock-<vmid>.conf`.
//!
//! A task worker takes the lock of the VM it works on for its whole run (a clone takes its
//! source's shared, or exclusive when the source runs, and its target's exclusive). A
//! synchronous config write takes it for the instant of the write. Whoever finds it held
//! waits (PVE: 10 s for config writes and most tasks, 1 s for a clone's locks) and then
//! fails with "can't lock file '/var/lock/qemu-server/lock-N.conf' - got timeout".
//!
//! This is distinct from the `lock:` line of a VM config (`lock: clone`, `lock: migrate`,
//! `lock: backup`), which PVE checks after taking the flock ("VM is locked (clone)").

use std::time::Duration;

use serde::Serialize;

use crate::server::Shared;
use crate::state::World;

/// How a lock is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    Shared,
    Exclusive,
}

/// Holders of one VM's config file lock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Flock {
    pub exclusive: bool,
    pub shared: u32,
}

/// PVE's message when the config file lock cannot be had in time.
pub fn lock_timeout_message(vmid: u32) -> String {
    format!("can't lock file '/var/lock/qemu-server/lock-{vmid}.conf' - got timeout")
}

impl World {
    /// Takes the lock if it is free for `mode` now.
    pub fn try_flock(&mut self, vmid: u32, mode: LockMode) -> bool {
        let f = self.flocks.entry(vmid).or_default();
        match mode {
            LockMode::Exclusive if !f.exclusive && f.shared == 0 => f.exclusive = true,
            LockMode::Shared if !f.exclusive => f.shared += 1,
            _ => return false,
        }
        true
    }

    /// Releases a lock taken with `try_flock` (waiters are woken by `Shared::unlocked`).
    pub fn release_flock(&mut self, vmid: u32, mode: LockMode) {
        if let Some(f) = self.flocks.get_mut(&vmid) {
            match mode {
                LockMode::Exclusive => f.exclusive = false,
                LockMode::Shared => f.shared = f.shared.saturating_sub(1),
            }
            if *f == Flock::default() {
                self.flocks.remove(&vmid);
            }
        }
    }

    /// Whether nobody holds the VM's lock.
    pub fn flock_free(&self, vmid: u32) -> bool {
        !self.flocks.contains_key(&vmid)
    }
}

/// Retries `attempt` (under the world lock) whenever a lock is released, until it holds
/// or `wait` has passed.
async fn wait_until(
    shared: &Shared,
    wait: Duration,
    mut attempt: impl FnMut(&mut World) -> bool,
) -> bool {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let released = shared.unlocked.notified();
        tokio::pin!(released);
        released.as_mut().enable();
        if attempt(&mut shared.lock()) {
            return true;
        }
        if tokio::time::timeout_at(deadline, released).await.is_err() {
            return attempt(&mut shared.lock());
        }
    }
}

/// Waits up to `wait` for the VM's lock and takes it; `false` on timeout.
pub async fn flock(shared: &Shared, vmid: u32, mode: LockMode, wait: Duration) -> bool {
    wait_until(shared, wait, |w| w.try_flock(vmid, mode)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_locks_stack_and_exclude_an_exclusive_one() {
        let mut w = World::new(&crate::Config::fast()).unwrap();
        assert!(w.try_flock(9000, LockMode::Shared));
        assert!(w.try_flock(9000, LockMode::Shared));
        assert!(!w.try_flock(9000, LockMode::Exclusive));
        w.release_flock(9000, LockMode::Shared);
        assert!(!w.flock_free(9000));
        w.release_flock(9000, LockMode::Shared);
        assert!(w.flock_free(9000));
        assert!(w.try_flock(9000, LockMode::Exclusive));
        assert!(!w.try_flock(9000, LockMode::Shared));
    }
}
