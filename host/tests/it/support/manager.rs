//! `hyperplug run` as a process of a test: killed when dropped, its peak memory read
//! from /proc (what the flood tests hold against their goal).
use std::process::Child;

pub struct Manager(pub Child);

impl Drop for Manager {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Manager {
    /// Peak resident set size (VmHWM) in MiB.
    pub fn peak_rss_mib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.0.id())).unwrap();
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM");
        kib / 1024
    }
}
