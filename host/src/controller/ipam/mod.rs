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
//! The pools are in `pools`, the claims in `claims`; `asked` remembers which machines
//! have claims to read at all.
pub(crate) mod asked;
mod claims;
mod pools;

use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use serde_json::json;

pub use claims::{Claimed, MachineClaims, release_claims};
pub use pools::{addresses_left, ensure_pools};

/// The field manager of the pools and claims the host applies.
const FIELD_MANAGER: &str = "hyperplug";

/// The owner reference to `obj`, of kind `owner`, that the pools and claims made for it
/// carry.
fn owner_ref(obj: &DynamicObject, owner: &ApiResource) -> serde_json::Value {
    json!({
        "apiVersion": owner.api_version,
        "kind": owner.kind,
        "name": obj.name_any(),
        "uid": obj.uid().unwrap_or_default(),
        "blockOwnerDeletion": true,
    })
}
