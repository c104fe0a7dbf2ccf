//! The InfraCluster's IP pools: one in-cluster IPAM pool per pool its plugin asks
//! for, owned by the InfraCluster, and the count of addresses its deletion waits for.
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::applied::{FIELD_MANAGER, owner_ref};
use crate::controller::error::Result;
use crate::controller::objects::{api, field, in_cluster_ip_pool};
use hyperplug_runtime::bindings::cluster::IpPool;

pub fn pool_name(infra_cluster: &str, pool: &str) -> String {
    format!("{infra_cluster}-{pool}")
}

/// The kind of the pools the host makes from an InfraCluster's `ip-pools`.
pub(super) const IN_CLUSTER_POOL: &str = "InClusterIPPool";
/// The API group of Cluster API's IPAM pools and claims.
pub(super) const IPAM_GROUP: &str = "ipam.cluster.x-k8s.io";

/// Apply one InClusterIPPool per pool the plugin wants, owned by `infra_cluster` (of
/// kind `kind`).
pub async fn ensure_pools(
    client: &Client,
    kind: &ApiResource,
    infra_cluster: &DynamicObject,
    pools: &[IpPool],
) -> Result<()> {
    let ns = infra_cluster.namespace().unwrap_or_default();
    let pools_api = api(client, &in_cluster_ip_pool(), &ns);
    for pool in pools {
        let name = pool_name(&infra_cluster.name_any(), &pool.name);
        let mut spec = json!({"addresses": pool.addresses, "prefix": pool.prefix});
        if let Some(gw) = &pool.gateway {
            spec["gateway"] = json!(gw);
        }
        // Every reconcile of the InfraCluster names its pools: a read that finds the
        // pool as wanted spares a write.
        if let Some(existing) = pools_api.get_opt(&name).await?
            && pool_is(&existing, &spec, infra_cluster)
        {
            continue;
        }
        let body = json!({
            "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2",
            "kind": "InClusterIPPool",
            "metadata": {"name": name, "namespace": ns, "ownerReferences": [owner_ref(infra_cluster, kind)]},
            "spec": spec,
        });
        pools_api
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await?;
    }
    Ok(())
}

/// How many addresses are still allocated from the pools `infra_cluster` owns (by UID,
/// whoever made them). Its deletion waits for them before its finalizer goes: the
/// garbage collector deletes the pools once the InfraCluster is gone, and the IPAM
/// provider refuses to delete a pool with addresses in it; refused, the collector backs
/// off exponentially, so a pool deleted while its machines' claims are still being
/// released lingers for a minute or more. No IPAM installed: none.
pub async fn addresses_left(client: &Client, infra_cluster: &DynamicObject) -> Result<u64> {
    let ns = infra_cluster.namespace().unwrap_or_default();
    let uid = infra_cluster.uid().unwrap_or_default();
    // The pools' own count of addresses in use (their status, kept by the IPAM
    // provider): one list of the namespace's pools (a few small objects per cluster),
    // from the watch cache, and no list of addresses, however many the namespace holds.
    let any = ListParams::default().match_any();
    let pools = match api(client, &in_cluster_ip_pool(), &ns).list(&any).await {
        Ok(list) => list,
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    Ok(pools
        .iter()
        .filter(|p| p.owner_references().iter().any(|r| r.uid == uid))
        .filter_map(|p| field(p, "status.ipAddresses.used").and_then(|v| v.as_u64()))
        .sum())
}

/// Whether `pool` has the fields we apply as `spec` says (others, e.g. defaults the
/// IPAM provider adds, are its own) and is owned by `owner`.
fn pool_is(pool: &DynamicObject, spec: &serde_json::Value, owner: &DynamicObject) -> bool {
    let has = &pool.data["spec"];
    let same = ["addresses", "prefix", "gateway"]
        .iter()
        .all(|k| has.get(k) == spec.get(k));
    let owned = owner.uid().is_some_and(|uid| {
        pool.owner_references()
            .iter()
            .any(|r| r.uid == uid && r.block_owner_deletion == Some(true))
    });
    same && owned
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_as_wanted_and_owned_needs_no_write() {
        let owner: DynamicObject =
            serde_json::from_value(json!({"metadata": {"name": "c", "uid": "u1"}})).unwrap();
        let pool = |spec: serde_json::Value, uid: &str| -> DynamicObject {
            serde_json::from_value(json!({
                "metadata": {"name": "c-ipv4", "ownerReferences": [{
                    "apiVersion": "v", "kind": "K", "name": "c", "uid": uid, "blockOwnerDeletion": true,
                }]},
                "spec": spec,
            }))
            .unwrap()
        };
        let want =
            json!({"addresses": ["10.0.0.1-10.0.0.9"], "prefix": 24, "gateway": "10.0.0.254"});
        // A field the IPAM provider keeps itself does not count.
        let mut seen = want.clone();
        seen["allocateReservedIPAddresses"] = json!(false);
        assert!(pool_is(&pool(seen, "u1"), &want, &owner));
        assert!(!pool_is(&pool(want.clone(), "u0"), &want, &owner));
        let mut moved = want.clone();
        moved["prefix"] = json!(16);
        assert!(!pool_is(&pool(moved, "u1"), &want, &owner));
        let no_gateway = json!({"addresses": ["10.0.0.1-10.0.0.9"], "prefix": 24});
        assert!(!pool_is(&pool(want.clone(), "u1"), &no_gateway, &owner));
    }
}
