//! CPU time from `/proc`: of one process, and of the whole machine (how busy its cores
//! were over a stretch of a run).
use anyhow::{Context, Result};

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64
}

/// User + system CPU seconds process `pid` has used so far.
pub fn process_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) start at state, field 3.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("malformed /proc/PID/stat")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field =
        |i: usize| -> Result<u64> { Ok(f.get(i).context("short /proc/PID/stat")?.parse::<u64>()?) };
    // utime and stime, fields 14 and 15.
    let ticks = field(11)? + field(12)?;
    Ok(ticks as f64 / ticks_per_second())
}

/// The machine's CPU counters at one moment (`/proc/stat`, all cores together).
#[derive(Debug, Clone, Copy)]
pub struct MachineCpu {
    busy: u64,
    total: u64,
    /// The cores `/proc/stat` counts (its `cpuN` lines): what the busy share is of.
    pub cores: usize,
}

impl MachineCpu {
    pub fn now() -> Result<MachineCpu> {
        let stat = std::fs::read_to_string("/proc/stat")?;
        let line = stat
            .lines()
            .find(|l| l.starts_with("cpu "))
            .context("no cpu line in /proc/stat")?;
        let f: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(str::parse)
            .collect::<Result<_, _>>()
            .context("malformed /proc/stat")?;
        // user nice system idle iowait irq softirq steal (guest time is within user).
        let idle = f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0);
        let total: u64 = f.iter().take(8).sum();
        let cores = stat
            .lines()
            .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
            .count();
        Ok(MachineCpu {
            busy: total.saturating_sub(idle),
            total,
            cores,
        })
    }

    /// The share of the cores' time spent busy since `earlier` (0 to 1).
    pub fn busy_since(&self, earlier: &MachineCpu) -> f64 {
        let total = self.total.saturating_sub(earlier.total);
        self.busy.saturating_sub(earlier.busy) as f64 / total.max(1) as f64
    }
}
