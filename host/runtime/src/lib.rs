//! The plugin runtime: loads WebAssembly components and calls them, each call in a
//! fresh sandbox with memory, CPU and wall-clock limits and one gated egress; serves
//! what plugins publish (`blob_server`). It knows no controller and no command line; the
//! Kubernetes shapes of the kinds a plugin declares (CRDs, typed status) are the
//! `hyperplug-kinds` crate's.
//!
//! Compile once (cached on disk), one `InstancePre` per plugin, a fresh `Store` per
//! call: no state survives a call, so nothing leaks between calls or clusters.
//!
//! Where things are: `engine` (the shared engine, linker and pools), `load` (a file
//! to a checked, linked, named [`Plugin`]), `plugin` (one method per export),
//! `exports` (the one place WIT versions differ; `compat` converts 0.2's shapes),
//! `call` (one call's slot, sandbox, limits and checks), `state` (what a call's store
//! holds and the imports it serves), `egress` (its one way out), `failure` (what
//! stopped it).
pub mod bindings;
pub mod blob_server;
pub mod blobs;
mod call;
pub mod claims;
mod compat;
pub mod credentials;
mod egress;
mod engine;
pub mod error;
mod exports;
mod failure;
pub mod limits;
mod load;
mod memory;
mod meter;
pub mod overhead;
mod plugin;
mod reservations;
mod slots;
mod state;
mod text;
pub mod tls;
mod wit;

pub use bindings::types::{Credentials, NamedCredentials, ObjectRef, PluginError};
pub use blobs::{BlobLimits, BlobStore};
pub use claims::{ClaimStore, MemoryClaims};
pub use egress::HttpObserver;
pub use engine::{EPOCH_TICK, OFFLINE_SLOTS, OFFLINE_WALL_PER_CPU, Runtime, RuntimeBuilder};
pub use error::{CallError, LoadError};
pub use limits::{Breach, Limits};
pub use load::private;
pub use plugin::Plugin;
pub use slots::tenant_share;
pub use state::Grants;
pub use wit::{WIT_COMPAT_VERSION, WIT_PACKAGE, WIT_VERSION, WitMajor};
