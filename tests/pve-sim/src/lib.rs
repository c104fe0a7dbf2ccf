//! `pve-sim`: a Proxmox VE API simulator.
//!
//! It serves the subset of the PVE API (`/api2/json`) that a Cluster API provider uses,
//! over HTTPS with a CA generated at start (or plain HTTP), with PVE's envelope, errors,
//! asynchronous tasks (UPIDs), locks, digests, guest-agent behaviour, NoCloud ISOs, DHCP
//! leases, migration and fault injection. See `README.md` in this crate for what is
//! simulated and what is not.
//!
//! # Library API
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use pve_sim::{Config, ListenOpts, Simulator};
//!
//! // The default world (nodes pve1..pve3, storages local + local-lvm, template 9000),
//! // with every task duration and boot/agent delay at zero:
//! let sim = Simulator::start(Config::fast(), ListenOpts { addr: "127.0.0.1:0".into(), tls: true }).await?;
//! let base = sim.base_url().to_string(); // "https://127.0.0.1:PORT"; API under /api2/json
//! let ca = sim.ca_pem().to_string();     // PEM of the generated CA (also at sim.ca_path())
//! let fp = sim.fingerprint().to_string(); // leaf SHA-256, "AA:BB:..."
//! let token = pve_sim::DEFAULT_TOKEN; // "capmox@pve!capi=REDACTED-SIM-SECRET"
//! // header: Authorization: PVEAPIToken=capmox@pve!capi=REDACTED-SIM-SECRET
//! let state = sim.state();
//! let vms = state.vms();              // Vec<serde_json::Value>: node, status, config, ...
//! let hits = state.counters();        // {"POST /nodes/{node}/qemu/{vmid}/clone": 3, ...}
//! state.reset_counters();
//! state.set_faults(pve_sim::Faults { latency_ms: 20, ..Default::default() });
//! sim.shutdown().await;               // or just drop it
//! # let _ = (base, ca, fp, token, vms, hits); Ok(()) }
//! ```
//!
//! * [`Config`]: serde-deserializable from TOML (`Config::from_toml`); `Default` is the
//!   default world; `Config::fast()` zeroes durations and delays.
//! * [`Simulator::start`]`(config, ListenOpts) -> anyhow::Result<RunningSim>` (async, tokio).
//! * [`RunningSim`]: `base_url()`, `addr()`, `ca_pem()`, `ca_path()`, `fingerprint()`,
//!   `state()`, `shutdown().await`; stops when dropped.
//! * [`StateHandle`]: `vms()`, `vm(id)`, `counters()`, `reset_counters()`, `faults()`,
//!   `set_faults(f)`, `fault_hits()`, `tasks()`, `destroyed()`, `crash_vm(id)`, `migrate_vm(id, node)`,
//!   `dump()`.
//! * [`nocloud::build_cidata_iso`] builds a NoCloud ISO for tests.
//!
//! The same inspection is served unauthenticated under `/_sim/` (see [`inspect`]).
//!
//! # Modules
//!
//! | module | what |
//! |---|---|
//! | [`config`] | `Config` and its parts (TOML) |
//! | [`server`] | listener (HTTPS/HTTP), `Simulator`, `RunningSim`, `StateHandle` |
//! | [`tls`] | CA + leaf generation, fingerprint |
//! | [`api`] | routing, auth, faults, parameter handling; one submodule per area |
//! | [`envelope`] | PVE's `{"data": ...}` envelope and error format, in one place |
//! | [`params`] | PVE-style form decoding, schema-based validation |
//! | [`perms`] | ACLs and the official permission checks |
//! | [`state`] | the world model: nodes, storages, volumes, VMs, pools, leases |
//! | [`tasks`] | UPIDs, durations, per-node concurrency, task workers |
//! | [`locks`] | config file locks (flock): shared/exclusive, waits, timeouts |
//! | [`guest`] | what a booted guest reports: interfaces, addresses, hostname |
//! | [`nocloud`] | reading (and building) NoCloud `cidata` ISO images |
//! | [`faults`] | fault injection settings |
//! | [`inspect`] | `/_sim/` routes |

pub mod api;
pub mod config;
pub mod envelope;
pub mod faults;
pub mod guest;
pub mod inspect;
pub mod journal;
pub mod locks;
pub mod nocloud;
pub mod params;
pub mod perms;
pub mod server;
pub mod state;
pub mod tasks;
pub mod tls;

pub use config::{
    AclEntry, ApiToken, Config, DEFAULT_ROOT_PASSWORD, DEFAULT_TOKEN, DEFAULT_TOKEN_SECRET,
    DhcpConfig, NodeConfig, StorageConfig, StorageType, VmSeed, VmSet,
};
pub use faults::{FaultKind, FaultRule, Faults};
pub use server::{ListenOpts, RunningSim, Simulator, StateHandle};
