//! A machine's IPAddressClaims: one per address it requests, owned by the InfraMachine,
//! read once per reconcile with their bound addresses, written only where missing, and
//! released with the machine.
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::applied::{FIELD_MANAGER, owner_ref};
use super::pools::{IN_CLUSTER_POOL, IPAM_GROUP, pool_name};
use crate::controller::error::{Error, Result};
use crate::controller::objects::{self, api, field, ip_address, ip_address_claim, str_field};
use hyperplug_runtime::bindings::machine::{AddressPool, AddressRequest, AllocatedAddress};

/// Label of a claim: its machine (by name, or a digest of a name too long for a label).
const OWNER_LABEL: &str = "infrastructure.hyperplug.dev/owner";
/// Annotation of a claim: the device it is for, as the plugin named it.
const DEVICE_ANNOTATION: &str = "infrastructure.hyperplug.dev/device";
/// Longest Kubernetes label value and object name.
const MAX_LABEL: usize = 63;
const MAX_NAME: usize = 253;

/// A Cluster API IPAM pool, as a claim's `spec.poolRef` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolRef {
    pub api_group: String,
    pub kind: String,
    pub name: String,
}

impl PoolRef {
    /// The pool an address request names: one the InfraCluster `infra_cluster`
    /// reported in its `ip-pools` (`ipv4`: the InClusterIPPool `<infra_cluster>-ipv4`),
    /// or any pool by reference (e.g. a `GlobalInClusterIPPool`).
    pub fn of(infra_cluster: &str, pool: &AddressPool) -> PoolRef {
        match pool {
            AddressPool::Reference(r) => PoolRef {
                api_group: r.api_group.clone(),
                kind: r.kind.clone(),
                name: r.name.clone(),
            },
            AddressPool::Reported(name) => PoolRef {
                api_group: IPAM_GROUP.into(),
                kind: IN_CLUSTER_POOL.into(),
                name: pool_name(infra_cluster, name),
            },
        }
    }
}

/// The claim names of a machine's requests: `<machine>-<claim-suffix>` when the
/// plugin names it, else `<machine>-<device>`, or, for a device with several requests
/// (a dual-stack NIC), `<machine>-<device>-<pool>`; each made a valid object name
/// (lower case, `[a-z0-9.-]`, at most 253 characters: a longer one ends in a digest
/// of the whole).
pub fn claim_names(machine: &str, requests: &[AddressRequest]) -> Vec<String> {
    requests
        .iter()
        .map(|r| {
            let shared = requests.iter().filter(|o| o.device == r.device).count() > 1;
            let raw = match &r.claim_suffix {
                Some(suffix) => format!("{machine}-{suffix}"),
                None if shared => format!("{machine}-{}-{}", r.device, r.pool.label()),
                None => format!("{machine}-{}", r.device),
            };
            object_name(&raw)
        })
        .collect()
}

fn object_name(raw: &str) -> String {
    let mut name: String = raw
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '.' | '-') => c,
            _ => '-',
        })
        .collect();
    if name.len() > MAX_NAME {
        let digest = hex::encode(&Sha256::digest(raw.as_bytes())[..8]);
        name.truncate(MAX_NAME - digest.len() - 1);
        name = format!("{}-{digest}", name.trim_end_matches(['-', '.']));
    }
    name.trim_matches(['-', '.']).to_string()
}

/// The owner label's value for a machine: its name, or a digest when the name does not
/// fit a label value.
fn owner_label(machine: &str) -> String {
    if machine.len() <= MAX_LABEL {
        machine.to_string()
    } else {
        format!(
            "sha256-{}",
            hex::encode(&Sha256::digest(machine.as_bytes())[..16])
        )
    }
}

/// One of a machine's claims as read.
#[derive(Debug, Clone)]
pub struct Claim {
    pub name: String,
    /// The device it is for.
    pub device: String,
    /// The IPAM pool it names.
    pub pool: PoolRef,
    /// Whether it is owned by the machine's current UID (not a stale one).
    pub owned: bool,
    /// The address bound to it, once the IPAM provider has.
    pub address: Option<AllocatedAddress>,
}

/// What became of a machine's address requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Claimed {
    /// Claims were written just now (the IPAM provider binds them in a moment), or the
    /// cached read missed addresses already bound: either way, a reconcile soon.
    pub written: bool,
    /// Some request has no bound address yet.
    pub pending: bool,
}

/// A machine's claims, read once per reconcile.
#[derive(Debug, Clone, Default)]
pub struct MachineClaims {
    pub claims: Vec<Claim>,
}

impl MachineClaims {
    /// The machine's claims and their bound addresses, from the API server's watch cache
    /// (like every read of a reconcile, `objects::read`). No IPAM installed: none.
    pub async fn read(client: &Client, machine: &DynamicObject) -> Result<MachineClaims> {
        Self::read_as(client, machine, true).await
    }

    /// As [`Self::read`], from the watch cache (`cached`) or as the API server has them
    /// now (a consistent list: it includes a claim written a moment ago).
    async fn read_as(
        client: &Client,
        machine: &DynamicObject,
        cached: bool,
    ) -> Result<MachineClaims> {
        let ns = machine.namespace().unwrap_or_default();
        let mut params = ListParams::default().labels(&format!(
            "{OWNER_LABEL}={}",
            owner_label(&machine.name_any())
        ));
        if cached {
            params = params.match_any();
        }
        let list = match api(client, &ip_address_claim(), &ns).list(&params).await {
            Ok(list) => list.items,
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(MachineClaims::default()),
            Err(e) => return Err(e.into()),
        };
        let addresses = api(client, &ip_address(), &ns);
        let uid = machine.uid().unwrap_or_default();
        let claims = futures::future::try_join_all(list.into_iter().map(|claim| {
            let addresses = addresses.clone();
            let uid = uid.clone();
            let machine = machine.name_any();
            async move {
                let device = claim
                    .annotations()
                    .get(DEVICE_ANNOTATION)
                    .cloned()
                    // Claims made before one per request: `<machine>-<device>`.
                    .unwrap_or_else(|| {
                        let name = claim.name_any();
                        name.strip_prefix(&format!("{machine}-"))
                            .unwrap_or(&name)
                            .to_string()
                    });
                let address = match str_field(&claim, "status.addressRef.name") {
                    Some(name) => objects::read(&addresses, name)
                        .await?
                        .and_then(|a| allocated(&a, &device)),
                    None => None,
                };
                let text = |path: &str| str_field(&claim, path).unwrap_or_default().to_string();
                Ok::<_, kube::Error>(Claim {
                    name: claim.name_any(),
                    pool: PoolRef {
                        api_group: str_field(&claim, "spec.poolRef.apiGroup")
                            .unwrap_or(IPAM_GROUP)
                            .to_string(),
                        kind: text("spec.poolRef.kind"),
                        name: text("spec.poolRef.name"),
                    },
                    owned: claim.owner_references().iter().any(|o| o.uid == uid),
                    device,
                    address,
                })
            }
        }))
        .await?;
        Ok(MachineClaims { claims })
    }

    /// The addresses bound so far, for the plugin.
    pub fn bound(&self) -> Vec<AllocatedAddress> {
        self.claims
            .iter()
            .filter_map(|c| c.address.clone())
            .collect()
    }

    /// The claim answering `request` from the InfraCluster `infra_cluster`'s pools.
    fn answering(&self, infra_cluster: &str, request: &AddressRequest) -> Option<&Claim> {
        let pool = PoolRef::of(infra_cluster, &request.pool);
        self.claims
            .iter()
            .find(|c| c.device == request.device && c.pool == pool)
    }

    /// The requests that need a claim written: none answers them, or the one that does
    /// is not owned by this machine's current UID (it was moved).
    pub fn to_write<'a>(
        &self,
        infra_cluster: &str,
        requests: &'a [AddressRequest],
    ) -> Vec<&'a AddressRequest> {
        requests
            .iter()
            .filter(|r| !self.answering(infra_cluster, r).is_some_and(|c| c.owned))
            .collect()
    }

    /// Write the claims `requests` still need (nothing for those that have one), owned
    /// by `machine` (of kind `kind`).
    pub async fn ensure(
        &self,
        client: &Client,
        kind: &ApiResource,
        machine: &DynamicObject,
        cluster_name: &str,
        infra_cluster: &str,
        requests: &[AddressRequest],
    ) -> Result<Claimed> {
        // The watch cache may not show a claim written a moment ago (the reconcile after
        // a claim is written comes soon): before writing one again, the claims are
        // listed as the API server has them now.
        let fresh;
        let this = if self.to_write(infra_cluster, requests).is_empty() {
            self
        } else {
            fresh = Self::read_as(client, machine, false).await?;
            &fresh
        };
        // The cached read this reconcile handed the plugin missed bound addresses the API
        // server has (a claim taken over or labelled a moment ago): the plugin answered
        // without them, so the machine comes back soon, as after a write, rather than
        // at its resync (a ready machine would keep a status without its address).
        let stale = !std::ptr::eq(this, self) && this.bound().len() > self.bound().len();
        let ns = machine.namespace().unwrap_or_default();
        let claims = api(client, &ip_address_claim(), &ns);
        let to_write = this.to_write(infra_cluster, requests);
        let names = claim_names(&machine.name_any(), requests);
        for (req, name) in requests.iter().zip(names) {
            if !to_write.iter().any(|w| std::ptr::eq(*w, req)) {
                continue;
            }
            let pool = PoolRef::of(infra_cluster, &req.pool);
            // A claim made before, under another name, keeps its name.
            let name = this
                .answering(infra_cluster, req)
                .map_or(name, |c| c.name.clone());
            let wanted = json!({
                "clusterName": cluster_name,
                "poolRef": {"apiGroup": pool.api_group, "kind": pool.kind, "name": pool.name},
            });
            // A claim's spec is immutable: one that exists (moved, or made by another
            // provider and taken over) keeps its spec as written.
            let spec = match claims.get_opt(&name).await? {
                Some(existing) => kept_spec(&existing, &wanted)?,
                None => wanted,
            };
            let body = json!({
                "apiVersion": "ipam.cluster.x-k8s.io/v1beta2",
                "kind": "IPAddressClaim",
                "metadata": {
                    "name": name, "namespace": ns,
                    "labels": {OWNER_LABEL: owner_label(&machine.name_any()), objects::CLUSTER_NAME_LABEL: cluster_name},
                    "annotations": {DEVICE_ANNOTATION: req.device},
                    "ownerReferences": [owner_ref(machine, kind)],
                },
                "spec": spec,
            });
            // Forced: a claim another provider made for this machine (taken over, see
            // `adoption`) is this machine's now, its owner reference included.
            claims
                .patch(
                    &name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&body),
                )
                .await?;
        }
        let pending = requests.iter().any(|r| {
            this.answering(infra_cluster, r)
                .is_none_or(|c| c.address.is_none())
        });
        Ok(Claimed {
            written: !to_write.is_empty() || stale,
            pending,
        })
    }
}

/// The spec to apply to an existing claim `existing`: its own (a claim's spec is
/// immutable), provided it asks the pool `wanted` names for no other cluster (a claim
/// another provider made may name none).
fn kept_spec(existing: &DynamicObject, wanted: &serde_json::Value) -> Result<serde_json::Value> {
    let spec = existing.data.get("spec").cloned().unwrap_or_default();
    let pool =
        |v: &serde_json::Value, f: &str| v["poolRef"][f].as_str().unwrap_or_default().to_string();
    let same_pool = ["kind", "name"]
        .iter()
        .all(|f| pool(&spec, f) == pool(wanted, f));
    let cluster = spec["clusterName"].as_str().unwrap_or_default();
    let same_cluster = cluster.is_empty() || cluster == wanted["clusterName"];
    if !same_pool || !same_cluster {
        return Err(Error::Dependency(format!(
            "IPAddressClaim {} exists for pool {} {} of cluster {cluster:?}, not {} {} of {}: delete it, or give the device that pool",
            existing.name_any(),
            pool(&spec, "kind"),
            pool(&spec, "name"),
            pool(wanted, "kind"),
            pool(wanted, "name"),
            wanted["clusterName"],
        )));
    }
    Ok(spec)
}

/// The address an IPAddress holds, for `device`.
fn allocated(address: &DynamicObject, device: &str) -> Option<AllocatedAddress> {
    let ip = str_field(address, "spec.address")?;
    let prefix = field(address, "spec.prefix").and_then(|p| p.as_u64())?;
    Some(AllocatedAddress {
        device: device.to_string(),
        address: ip.to_string(),
        prefix: u8::try_from(prefix).ok()?,
        gateway: str_field(address, "spec.gateway").map(str::to_string),
    })
}

/// Release a machine's claims (the IPAM provider then frees the addresses). A claim
/// that names this machine (its UID) as owner goes with it: the garbage collector
/// deletes it once the machine is gone, with no write of ours. One without that
/// reference (written for an earlier UID of the machine, before a move) would outlive
/// it, and is deleted here.
pub async fn release_claims(client: &Client, machine: &DynamicObject) -> Result<()> {
    let uid = machine.uid().unwrap_or_default();
    let ns = machine.namespace().unwrap_or_default();
    let claims = api(client, &ip_address_claim(), &ns);
    let list = match claims
        // From the API server's cache, like every read of a reconcile (objects::read).
        .list(
            &ListParams::default()
                .labels(&format!(
                    "{OWNER_LABEL}={}",
                    owner_label(&machine.name_any())
                ))
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
        let owned = claim.owner_references().iter().any(|o| o.uid == uid);
        if !owned && claim.meta().deletion_timestamp.is_none() {
            claims
                .delete(&claim.name_any(), &DeleteParams::default())
                .await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use hyperplug_runtime::bindings::machine::PoolRef as WitPoolRef;

    /// A reported pool by name, or `<Kind>/<name>` of an IPAM pool.
    fn pool(p: &str) -> AddressPool {
        match p.split_once('/') {
            Some((kind, name)) => AddressPool::Reference(WitPoolRef {
                api_group: IPAM_GROUP.into(),
                kind: kind.into(),
                name: name.into(),
            }),
            None => AddressPool::Reported(p.into()),
        }
    }

    fn request(device: &str, p: &str) -> AddressRequest {
        AddressRequest {
            device: device.into(),
            pool: pool(p),
            claim_suffix: None,
        }
    }

    fn claim(name: &str, device: &str, p: &str, owned: bool) -> Claim {
        Claim {
            name: name.into(),
            device: device.into(),
            pool: PoolRef::of("demo", &pool(p)),
            owned,
            address: None,
        }
    }

    fn names(requests: &[AddressRequest]) -> Vec<String> {
        claim_names("cp-0", requests)
    }

    #[test]
    fn an_existing_claim_keeps_its_spec_unless_it_is_for_another_pool_or_cluster() {
        let claim = |spec: serde_json::Value| {
            let mut c = DynamicObject::new("m-net0-inet", &ip_address_claim());
            c.data = json!({ "spec": spec });
            c
        };
        let pool_ref =
            json!({"apiGroup": IPAM_GROUP, "kind": "InClusterIPPool", "name": "c-v4-icip"});
        let wanted = json!({"clusterName": "c", "poolRef": pool_ref});
        // made by another provider, without a cluster name: kept as it is
        let capmox = json!({"poolRef": pool_ref});
        assert_eq!(kept_spec(&claim(capmox.clone()), &wanted).unwrap(), capmox);
        assert_eq!(kept_spec(&claim(wanted.clone()), &wanted).unwrap(), wanted);
        let other_pool =
            json!({"clusterName": "c", "poolRef": {"kind": "InClusterIPPool", "name": "x"}});
        let other_cluster = json!({"clusterName": "d", "poolRef": pool_ref});
        for spec in [other_pool, other_cluster] {
            let e = kept_spec(&claim(spec), &wanted).unwrap_err().to_string();
            assert!(
                e.contains("IPAddressClaim m-net0-inet exists for pool"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_device_with_two_requests_gets_a_claim_per_pool() {
        let dual = [request("net0", "ipv4"), request("net0", "ipv6")];
        assert_eq!(names(&dual), ["cp-0-net0-ipv4", "cp-0-net0-ipv6"]);
        let seen = MachineClaims {
            claims: vec![claim("cp-0-net0-ipv4", "net0", "ipv4", true)],
        };
        let to_write = seen.to_write("demo", &dual);
        assert_eq!(to_write.len(), 1);
        assert_eq!(to_write[0].pool.label(), "ipv6");
        // A request per device keeps the name `<machine>-<device>`.
        let apart = [
            request("net0-00-inet", "ipv4"),
            request("net0-01-inet", "ipv6"),
        ];
        assert_eq!(names(&apart), ["cp-0-net0-00-inet", "cp-0-net0-01-inet"]);
    }

    #[test]
    fn a_plugin_may_name_the_claim_itself() {
        let mut named = request("net0", "ipv4");
        named.claim_suffix = Some("net0-00-inet".into());
        assert_eq!(
            names(&[named, request("net0", "ipv6")]),
            ["cp-0-net0-00-inet", "cp-0-net0-ipv6"]
        );
    }

    #[test]
    fn a_request_names_a_reported_pool_or_any_pool_by_kind() {
        assert_eq!(
            PoolRef::of("demo", &pool("ipv4")),
            PoolRef {
                api_group: IPAM_GROUP.into(),
                kind: "InClusterIPPool".into(),
                name: "demo-ipv4".into()
            }
        );
        let other = AddressPool::Reference(WitPoolRef {
            api_group: "ipam.example.com".into(),
            kind: "VendorPool".into(),
            name: "shared".into(),
        });
        assert_eq!(
            PoolRef::of("demo", &other),
            PoolRef {
                api_group: "ipam.example.com".into(),
                kind: "VendorPool".into(),
                name: "shared".into()
            }
        );
    }

    #[test]
    fn claims_are_written_only_when_missing_or_not_this_machines() {
        let requests = [request("net0", "ipv4")];
        let owned = MachineClaims {
            claims: vec![claim("m-net0", "net0", "ipv4", true)],
        };
        assert!(owned.to_write("demo", &requests).is_empty());
        let moved = MachineClaims {
            claims: vec![claim("m-net0", "net0", "ipv4", false)],
        };
        assert_eq!(moved.to_write("demo", &requests).len(), 1);
        let other_pool = MachineClaims {
            claims: vec![claim("m-net0", "net0", "ipv6", true)],
        };
        assert_eq!(other_pool.to_write("demo", &requests).len(), 1);
    }

    #[test]
    fn names_and_labels_stay_valid_whatever_the_plugin_calls_things() {
        let odd = [
            request("Net_0/A", "x"),
            request("Net_0/A", "InClusterIPPool/y"),
        ];
        assert_eq!(
            names(&odd),
            ["cp-0-net-0-a-x", "cp-0-net-0-a-inclusterippool-y"]
        );
        let long = [
            request(&"n".repeat(250), "ipv4"),
            request(&"n".repeat(250), "ipv6"),
        ];
        let long = names(&long);
        assert!(long.iter().all(|n| n.len() <= MAX_NAME), "{long:?}");
        assert_ne!(long[0], long[1]);
        assert_eq!(owner_label("short"), "short");
        let digest = owner_label(&"x".repeat(100));
        assert!(digest.len() <= MAX_LABEL && digest.starts_with("sha256-"));
    }
}
