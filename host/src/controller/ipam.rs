//! Addresses through Cluster API IPAM: the pools a plugin asks for become in-cluster
//! IPAM pools owned by the InfraCluster; each machine device gets one IPAddressClaim
//! owned by the InfraMachine; claims go when the machine goes.
use hyperplug_runtime::bindings::cluster::IpPool;
use hyperplug_runtime::bindings::machine::{AddressRequest, AllocatedAddress};
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::context::Context;
use super::error::Result;
use super::objects::{api, field, in_cluster_ip_pool, ip_address, ip_address_claim, str_field};

const FIELD_MANAGER: &str = "hyperplug";
const OWNER_LABEL: &str = "infrastructure.hyperplug.dev/owner";

pub fn pool_name(infra_cluster: &str, pool: &str) -> String {
    format!("{infra_cluster}-{pool}")
}

fn owner_ref(obj: &DynamicObject, ctx: &Context) -> serde_json::Value {
    json!({
        "apiVersion": ctx.resource.api_version,
        "kind": ctx.resource.kind,
        "name": obj.name_any(),
        "uid": obj.uid().unwrap_or_default(),
        "blockOwnerDeletion": true,
    })
}

/// Apply one InClusterIPPool per pool the plugin wants.
pub async fn ensure_pools(
    ctx: &Context,
    infra_cluster: &DynamicObject,
    pools: &[IpPool],
) -> Result<()> {
    let ns = infra_cluster.namespace().unwrap_or_default();
    let pools_api = api(&ctx.client, &in_cluster_ip_pool(), &ns);
    for pool in pools {
        let name = pool_name(&infra_cluster.name_any(), &pool.name);
        let mut spec = json!({"addresses": pool.addresses, "prefix": pool.prefix});
        if let Some(gw) = &pool.gateway {
            spec["gateway"] = json!(gw);
        }
        let body = json!({
            "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2",
            "kind": "InClusterIPPool",
            "metadata": {"name": name, "namespace": ns, "ownerReferences": [owner_ref(infra_cluster, ctx)]},
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

/// Ensure a claim per request; return the addresses bound so far.
pub async fn ensure_claims(
    ctx: &Context,
    machine: &DynamicObject,
    cluster_name: &str,
    infra_cluster_name: &str,
    requests: &[AddressRequest],
) -> Result<Vec<AllocatedAddress>> {
    let ns = machine.namespace().unwrap_or_default();
    let claims = api(&ctx.client, &ip_address_claim(), &ns);
    let addresses = api(&ctx.client, &ip_address(), &ns);
    let mut bound = Vec::new();
    for req in requests {
        let name = format!("{}-{}", machine.name_any(), req.device);
        let body = json!({
            "apiVersion": "ipam.cluster.x-k8s.io/v1beta2",
            "kind": "IPAddressClaim",
            "metadata": {
                "name": name, "namespace": ns,
                "labels": {OWNER_LABEL: machine.name_any(), "cluster.x-k8s.io/cluster-name": cluster_name},
                "ownerReferences": [owner_ref(machine, ctx)],
            },
            "spec": {
                "clusterName": cluster_name,
                "poolRef": {
                    "apiGroup": "ipam.cluster.x-k8s.io",
                    "kind": "InClusterIPPool",
                    "name": pool_name(infra_cluster_name, &req.pool),
                },
            },
        });
        let claim = claims
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Apply(&body),
            )
            .await?;
        let Some(address_name) = str_field(&claim, "status.addressRef.name") else {
            continue;
        };
        let Some(address) = addresses.get_opt(address_name).await? else {
            continue;
        };
        let (Some(ip), Some(prefix)) = (
            str_field(&address, "spec.address"),
            field(&address, "spec.prefix").and_then(|p| p.as_u64()),
        ) else {
            continue;
        };
        bound.push(AllocatedAddress {
            device: req.device.clone(),
            address: ip.to_string(),
            prefix: prefix as u8,
            gateway: str_field(&address, "spec.gateway").map(str::to_string),
        });
    }
    Ok(bound)
}

/// The addresses already bound to a machine's claims (for calls that do not request).
pub async fn bound_addresses(
    ctx: &Context,
    machine: &DynamicObject,
) -> Result<Vec<AllocatedAddress>> {
    let ns = machine.namespace().unwrap_or_default();
    let claims = api(&ctx.client, &ip_address_claim(), &ns);
    let addresses = api(&ctx.client, &ip_address(), &ns);
    let list = claims
        // From the API server's cache, like every read of a reconcile (objects::read).
        .list(
            &ListParams::default()
                .labels(&format!("{OWNER_LABEL}={}", machine.name_any()))
                .match_any(),
        )
        .await?;
    let mut bound = Vec::new();
    for claim in list {
        let device = claim
            .name_any()
            .trim_start_matches(&format!("{}-", machine.name_any()))
            .to_string();
        let Some(address_name) = str_field(&claim, "status.addressRef.name") else {
            continue;
        };
        let Some(address) = addresses.get_opt(address_name).await? else {
            continue;
        };
        if let (Some(ip), Some(prefix)) = (
            str_field(&address, "spec.address"),
            field(&address, "spec.prefix").and_then(|p| p.as_u64()),
        ) {
            bound.push(AllocatedAddress {
                device,
                address: ip.to_string(),
                prefix: prefix as u8,
                gateway: str_field(&address, "spec.gateway").map(str::to_string),
            });
        }
    }
    Ok(bound)
}

/// Delete a machine's claims (the IPAM provider then frees the addresses).
pub async fn release_claims(ctx: &Context, machine: &DynamicObject) -> Result<()> {
    let ns = machine.namespace().unwrap_or_default();
    let claims = api(&ctx.client, &ip_address_claim(), &ns);
    let list = match claims
        // From the API server's cache, like every read of a reconcile (objects::read).
        .list(
            &ListParams::default()
                .labels(&format!("{OWNER_LABEL}={}", machine.name_any()))
                .match_any(),
        )
        .await
    {
        Ok(list) => list,
        // No IPAM installed: nothing to release.
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    for claim in list {
        if claim.meta().deletion_timestamp.is_none() {
            claims
                .delete(&claim.name_any(), &DeleteParams::default())
                .await?;
        }
    }
    Ok(())
}
