//! Addresses through Cluster API IPAM: the pools a plugin asks for become in-cluster
//! IPAM pools owned by the InfraCluster; each address a machine requests (a device and a
//! pool: a dual-stack NIC asks for two) gets one IPAddressClaim owned by the
//! InfraMachine, from one of those pools or any pool it names by kind; claims go when
//! the machine goes.
//!
//! A reconcile reads a machine's claims and their addresses once, from the API server's
//! watch cache ([`MachineClaims::read`]), hands the bound ones to the plugin, and writes
//! only the claims that are missing ([`MachineClaims::ensure`]).
//!
//! The pools are in `pools`, the claims in `claims` (each applied as `applied` says);
//! `asked` remembers which machines have claims to read at all.
//!
//! May import: `objects` and `error` only. Every room above it hands it what it needs
//! (the client, the owner's kind).
mod applied;
pub(crate) mod asked;
mod claims;
mod pools;

pub use claims::{Claimed, MachineClaims, release_claims};
pub use pools::{addresses_left, ensure_pools};
