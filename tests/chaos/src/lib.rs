//! # chaos: the invariants under real failure modes
//!
//! Creates and deletes machines in waves across clusters through the real management
//! plane, pve-sim and two leader-elected `hyperplug run` replicas, while:
//!
//! * pve-sim fails the way PVE fails ([`faults`]): 500 and 595 replies (some after the
//!   request was carried out), failed and slow tasks, lock timeouts, clones that lose
//!   their VMID inside the task; VMs migrate under the manager ([`migrations`]);
//! * the leading manager is SIGKILLed at moments the seed picks and restarts
//!   ([`replicas`], [`supervisor`]);
//! * other clients write the same objects ([`writers`]);
//! * an administrator destroys one machine's VM, powers another off, and plants a
//!   foreign VM in the managed VMID range ([`pve`]).
//!
//! At the end, from the simulator's state and records and the API server, it judges
//! the invariants ([`verdict`]) and prints them as a table: every row must read 0 or
//! yes. `scripts/chaos.sh` runs it; `tests/it` runs the CI size.

pub mod faults;
pub mod ledger;
pub mod migrations;
pub mod observe;
pub mod pve;
pub mod replicas;
mod run;
pub mod supervisor;
pub mod verdict;
pub mod writers;

pub use run::{Args, Outcome, run};
