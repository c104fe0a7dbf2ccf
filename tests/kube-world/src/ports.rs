//! Loopback ports for the processes a test starts (etcd, kube-apiserver, managers, a
//! registry), chosen so that nothing else takes them between our choice and their bind.
//!
//! A port the kernel hands out for `127.0.0.1:0` is in its ephemeral range, which is also
//! where every outgoing connection gets its local port, and another test binary asking the
//! kernel the same way may be given it too: a manager's webhook port was taken in the
//! seconds before the manager bound it ("address already in use", CI at stop 50). So ports
//! come from just below the ephemeral range, and a port
//! is claimed across test processes (several test binaries run at once) by an advisory
//! lock on a file named after it, held until this process exits.

use std::fs::{File, OpenOptions};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Mutex;

use anyhow::{Context, Result, bail};

/// How many ports below the ephemeral range we draw from.
const POOL: u16 = 12_000;

/// Lock files of the ports this process claimed; dropped (unlocked) when it exits.
static CLAIMED: Mutex<Vec<File>> = Mutex::new(Vec::new());

/// A loopback TCP port that is free now, outside the kernel's ephemeral range, and that
/// no other test process (using this function) and no earlier call here was given.
pub fn free_port() -> Result<u16> {
    let (low, high) = pool();
    let span = u32::from(high - low) + 1;
    let dir = std::env::temp_dir().join("kube-world-ports");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut claimed = CLAIMED.lock().expect("claimed ports");
    // Start at a different place in each process and call, so concurrent processes rarely
    // contend for the same lock file.
    let start = seed() % span;
    for step in 0..span {
        let port = low + ((start + step) % span) as u16;
        let Some(lock) = claim(&dir.join(port.to_string()))? else {
            continue;
        };
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            claimed.push(lock);
            return Ok(port);
        }
    }
    bail!("no free loopback port in {low}..={high} that another test process has not claimed")
}

/// The lock on one port's file, or None when another process (or this one) holds it.
fn claim(path: &PathBuf) -> Result<Option<File>> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("locking {}", path.display()))
        }
    }
}

/// The ports just below the kernel's ephemeral range (Linux default 32768..60999).
fn pool() -> (u16, u16) {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let high = ephemeral_low.saturating_sub(1).max(2_048);
    let low = high.saturating_sub(POOL).max(1_024);
    (low, high)
}

/// A start point that differs between processes and calls; no randomness crate needed.
fn seed() -> u32 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one((std::process::id(), std::time::Instant::now())) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_below_the_ephemeral_range_and_locked_against_other_processes() {
        let (low, high) = pool();
        let ports: Vec<u16> = (0..20).map(|_| free_port().unwrap()).collect();
        let mut unique = ports.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), ports.len(), "{ports:?}");
        assert!(ports.iter().all(|p| (low..=high).contains(p)), "{ports:?}");
        // A second open file description of a claimed port's file cannot take the lock:
        // exactly what another test process would see.
        let dir = std::env::temp_dir().join("kube-world-ports");
        assert!(claim(&dir.join(ports[0].to_string())).unwrap().is_none());
    }
}
