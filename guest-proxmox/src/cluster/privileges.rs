//! The permission preflight: one `GET /access/permissions` for the cluster's token,
//! compared with what its machines will need, so that a token missing a privilege is
//! told at once, on the InfraCluster, instead of by a 403 in the middle of a machine's
//! provisioning.
//!
//! Each requirement comes from the `permissions` of an endpoint the plugin calls
//! (the official API schema, `tests/pve-sim/reference/`) or from the check its handler
//! makes (qemu-server, pve-storage):
//!
//! | privilege | where | endpoint |
//! |---|---|---|
//! | `Sys.Audit` | `/nodes/<node>`, each allowed node | `GET /cluster/resources` shows a node's memory and CPUs only with it (placement) |
//! | `VM.Clone` | the templates | `POST …/{vmid}/clone` |
//! | `VM.Allocate` | `/vms` or the machines' pool | `POST …/clone` (`/vms/{newid}` or `/pool/{pool}`), `DELETE …/qemu/{vmid}` |
//! | `VM.Audit` | the templates, the machines' VMs | `GET …/config`, `GET …/status/current`, the VM listings |
//! | `VM.Config.Options`, `VM.Config.CDROM` | the machines' VMs | `PUT …/config` (`tags`, `agent`; the NoCloud ISO's CD-ROM) |
//! | `VM.PowerMgmt` | the machines' VMs | `POST …/status/start`, `…/status/stop` |
//! | `Datastore.AllocateSpace` | a storage | the disks a clone copies and new disks |
//! | `Datastore.AllocateTemplate`, `Datastore.Allocate` | the ISO storage | `POST …/storage/{storage}/upload`, `DELETE …/content/{volume}` |
//! | `SDN.Use` | the bridges (`/sdn/zones/localnetwork/<bridge>`) | a clone's and a config write's NICs |
//!
//! Only advised (in the cluster's status message), since machines may not need them:
//! `VM.Config.CPU`, `VM.Config.Memory`, `VM.Config.Network`, `VM.Config.Disk` (the
//! spec's sockets and cores, memory, NICs, disks and resize), `VM.Config.Cloudinit` (the
//! template's cloud-init drive is removed), and the guest agent's privilege
//! (`VM.GuestAgent.Audit` or `VM.GuestAgent.Unrestricted` from PVE 9, `VM.Monitor`
//! before; not needed with `checks.skipQemuGuestAgent`).
//!
//! The cluster sees no machine spec: where a privilege is needed on the templates, the
//! machines' VMs, a storage or a bridge, it is taken as held when the token holds it
//! there through inheritance (`/vms`, `/storage`, `/sdn`, `/`) or on any such object
//! listed (a pool, a VM, a storage, a bridge). Node privileges are checked on each node.

use std::collections::BTreeMap;

use serde_json::Value;

/// `GET /access/permissions`: path -> privilege -> propagate flag.
pub(crate) type Perms = BTreeMap<String, BTreeMap<String, Value>>;

/// Where a privilege is needed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    /// This path.
    Path(String),
    /// The machines' new VMs: `/vms/<id>` (inherited) or a pool they may be put in.
    NewVms,
    /// The templates: as [`Scope::NewVms`], or a VM's own path.
    Templates,
    /// Some object under `prefix` (`/storage`, `/sdn/zones`): inherited, or its own.
    Under(&'static str),
}

impl Scope {
    /// How the path reads in a message.
    fn describe(&self) -> String {
        match self {
            Scope::Path(p) => p.clone(),
            Scope::NewVms => "/vms or the machines' pool (/pool/<pool>)".into(),
            Scope::Templates => "the templates (/vms/<templateID>, /vms, or their pool)".into(),
            Scope::Under("/storage") => "the storages the machines use (/storage/<storage>)".into(),
            Scope::Under("/sdn/zones") => {
                "the bridges the machines use (/sdn/zones/localnetwork/<bridge>)".into()
            }
            Scope::Under(p) => format!("{p}/..."),
        }
    }
}

/// A privilege (any one of `privs`) needed in `scope`, and what for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Need {
    pub privs: Vec<&'static str>,
    pub scope: Scope,
    pub why: &'static str,
}

fn need(privs: &[&'static str], scope: Scope, why: &'static str) -> Need {
    Need {
        privs: privs.to_vec(),
        scope,
        why,
    }
}

/// What the machines of a cluster whose nodes are `nodes` need, and what they may need.
pub(crate) fn needs(nodes: &[String], pve_major: u32) -> (Vec<Need>, Vec<Need>) {
    let mut required: Vec<Need> = nodes
        .iter()
        .map(|n| {
            need(
                &["Sys.Audit"],
                Scope::Path(format!("/nodes/{n}")),
                "to see the node's memory and CPUs for placement",
            )
        })
        .collect();
    required.extend([
        need(&["VM.Clone"], Scope::Templates, "to clone the templates"),
        need(&["VM.Audit"], Scope::Templates, "to read the templates"),
        need(
            &["VM.Allocate"],
            Scope::NewVms,
            "to create the machines' VMs and delete them",
        ),
        need(&["VM.Audit"], Scope::NewVms, "to read the machines' VMs"),
        need(
            &["VM.Config.Options"],
            Scope::NewVms,
            "to write the VMs' tags and agent option",
        ),
        need(
            &["VM.Config.CDROM"],
            Scope::NewVms,
            "to attach and eject the NoCloud ISO",
        ),
        need(
            &["VM.PowerMgmt"],
            Scope::NewVms,
            "to start and stop the VMs",
        ),
        need(
            &["Datastore.AllocateSpace"],
            Scope::Under("/storage"),
            "for the disks of clones",
        ),
        need(
            &["Datastore.AllocateTemplate"],
            Scope::Under("/storage"),
            "to upload the NoCloud ISO",
        ),
        need(
            &["Datastore.Allocate"],
            Scope::Under("/storage"),
            "to delete the NoCloud ISO",
        ),
        need(
            &["SDN.Use"],
            Scope::Under("/sdn/zones"),
            "for the NICs of clones",
        ),
    ]);
    let agent: &[&'static str] = if pve_major >= 9 {
        &["VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted"]
    } else {
        &["VM.Monitor"]
    };
    let advised = vec![
        need(
            &["VM.Config.CPU"],
            Scope::NewVms,
            "when machines set numSockets or numCores",
        ),
        need(
            &["VM.Config.Memory"],
            Scope::NewVms,
            "when machines set memoryMiB",
        ),
        need(
            &["VM.Config.Network"],
            Scope::NewVms,
            "when machines set network devices",
        ),
        need(
            &["VM.Config.Disk"],
            Scope::NewVms,
            "when machines set disks (sizes, additional volumes)",
        ),
        need(
            &["VM.Config.Cloudinit"],
            Scope::NewVms,
            "when the template has a cloud-init drive",
        ),
        need(
            agent,
            Scope::NewVms,
            "for the guest agent's addresses, unless machines set checks.skipQemuGuestAgent",
        ),
    ];
    (required, advised)
}

/// The parent of a normalized path (`/` has none).
fn parent(path: &str) -> Option<&str> {
    if path == "/" {
        return None;
    }
    match path.rfind('/') {
        Some(0) => Some("/"),
        Some(i) => Some(&path[..i]),
        None => None,
    }
}

/// Whether a propagate flag is set (PVE writes 1 or 0).
fn flag(v: &Value) -> bool {
    v.as_u64().map_or(v.as_bool() == Some(true), |n| n != 0)
}

/// Whether `privilege` holds on `path`: listed there, or else on the nearest listed
/// ancestor that passes privileges down (one with propagated privileges: those are
/// exactly what its children inherit; one without passes on what it inherited).
pub(crate) fn held(perms: &Perms, path: &str, privilege: &str) -> bool {
    if let Some(here) = perms.get(path) {
        return here.contains_key(privilege);
    }
    let mut at = parent(path);
    while let Some(p) = at {
        if let Some(privs) = perms.get(p)
            && privs.values().any(flag)
        {
            return privs.get(privilege).is_some_and(flag);
        }
        at = parent(p);
    }
    false
}

/// Whether any listed path under `prefix/` holds `privilege`.
fn listed_under(perms: &Perms, prefix: &str, privilege: &str) -> bool {
    let start = format!("{prefix}/");
    perms
        .range(start.clone()..)
        .take_while(|(k, _)| k.starts_with(&start))
        .any(|(_, privs)| privs.contains_key(privilege))
}

/// Whether the need is met.
pub(crate) fn met(perms: &Perms, need: &Need) -> bool {
    need.privs.iter().any(|p| match &need.scope {
        Scope::Path(path) => held(perms, path, p),
        // a path no real object has: what is inherited there
        Scope::NewVms => {
            held(perms, "/vms/\u{0}", p)
                || held(perms, "/pool/\u{0}", p)
                || listed_under(perms, "/pool", p)
        }
        Scope::Templates => {
            held(perms, "/vms/\u{0}", p)
                || held(perms, "/pool/\u{0}", p)
                || listed_under(perms, "/pool", p)
                || listed_under(perms, "/vms", p)
        }
        Scope::Under(prefix) => {
            held(perms, &format!("{prefix}/\u{0}"), p) || listed_under(perms, prefix, p)
        }
    })
}

/// `PRIV on WHERE (WHY)`, the privileges joined with `or`.
pub(crate) fn describe(need: &Need) -> String {
    format!(
        "{} on {} ({})",
        need.privs.join(" or "),
        need.scope.describe(),
        need.why
    )
}

/// The needs among `needs` that `perms` does not meet.
pub(crate) fn unmet<'a>(perms: &Perms, needs: &'a [Need]) -> Vec<&'a Need> {
    needs.iter().filter(|n| !met(perms, n)).collect()
}

/// The terminal error's message: each missing privilege with its path, and what to
/// grant.
pub(crate) fn missing_message(token: &str, missing: &[&Need]) -> String {
    let list: Vec<String> = missing.iter().map(|n| describe(n)).collect();
    format!(
        "the API token {token} lacks privileges its machines need: {}. Grant them with a role \
         on those paths to the token and, with privilege separation, to its user as well \
         (e.g. `pveum acl modify /pool/<pool> --tokens '{token}' --roles <role>`)",
        list.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn perms(v: Value) -> Perms {
        serde_json::from_value(v).unwrap()
    }

    fn nodes() -> Vec<String> {
        vec!["pve1".into(), "pve2".into()]
    }

    /// What a tenant gets with a pool, the template, a storage, an ISO storage, a
    /// bridge and its nodes, as `GET /access/permissions` lists it.
    fn tenant() -> Value {
        let vm = json!({
            "VM.Allocate": 1, "VM.Audit": 1, "VM.Clone": 1, "VM.Config.CDROM": 1,
            "VM.Config.Options": 1, "VM.Config.CPU": 1, "VM.Config.Memory": 1,
            "VM.Config.Network": 1, "VM.Config.Disk": 1, "VM.Config.Cloudinit": 1,
            "VM.PowerMgmt": 1, "VM.GuestAgent.Audit": 1, "Pool.Audit": 1
        });
        json!({
            "/pool/team-a": vm,
            "/vms/9000": {"VM.Audit": 1, "VM.Clone": 1},
            "/storage/local-lvm": {"Datastore.AllocateSpace": 1, "Datastore.Audit": 1},
            "/storage/iso-a": {"Datastore.Allocate": 1, "Datastore.AllocateTemplate": 1,
                               "Datastore.AllocateSpace": 1, "Datastore.Audit": 1},
            "/sdn/zones/localnetwork/vmbr0": {"SDN.Use": 1, "SDN.Audit": 1},
            "/nodes": {"Sys.Audit": 1},
        })
    }

    #[test]
    fn a_tenant_with_pool_template_storages_bridge_and_nodes_misses_nothing() {
        let (required, advised) = needs(&nodes(), 9);
        let p = perms(tenant());
        assert!(
            unmet(&p, &required).is_empty(),
            "{:?}",
            unmet(&p, &required)
        );
        assert!(unmet(&p, &advised).is_empty(), "{:?}", unmet(&p, &advised));
    }

    #[test]
    fn each_missing_privilege_is_named_with_its_path() {
        let mut t = tenant();
        t["/sdn/zones/localnetwork/vmbr0"] = json!({"SDN.Audit": 1});
        t["/storage/iso-a"]
            .as_object_mut()
            .unwrap()
            .remove("Datastore.Allocate");
        t.as_object_mut().unwrap().remove("/nodes");
        t["/nodes/pve1"] = json!({"Sys.Audit": 0});
        let (required, _) = needs(&nodes(), 9);
        let missing = unmet(&perms(t), &required);
        let text: Vec<String> = missing.iter().map(|n| describe(n)).collect();
        assert_eq!(
            text,
            [
                "Sys.Audit on /nodes/pve2 (to see the node's memory and CPUs for placement)",
                "Datastore.Allocate on the storages the machines use (/storage/<storage>) (to delete the NoCloud ISO)",
                "SDN.Use on the bridges the machines use (/sdn/zones/localnetwork/<bridge>) (for the NICs of clones)",
            ]
        );
        let m = missing_message("team-a@pve!capi", &missing);
        assert!(
            m.starts_with("the API token team-a@pve!capi lacks privileges"),
            "{m}"
        );
        assert!(m.contains("--tokens 'team-a@pve!capi'"), "{m}");
    }

    #[test]
    fn inheritance_follows_propagation_and_the_most_specific_path() {
        // /vms with propagation gives every VM; a more specific entry replaces it
        let p = perms(json!({
            "/": {"Sys.Audit": 1},
            "/vms": {"VM.Allocate": 1, "VM.Audit": 1},
            "/vms/100": {"VM.Audit": 1},
        }));
        assert!(held(&p, "/vms/123", "VM.Allocate"));
        assert!(!held(&p, "/vms/100", "VM.Allocate"));
        assert!(held(&p, "/nodes/pve1", "Sys.Audit"), "through /");
        // not propagated: /nodes only, its children inherit from above
        let p = perms(json!({
            "/": {"Sys.Console": 1},
            "/nodes": {"Sys.Audit": 0},
        }));
        assert!(held(&p, "/nodes", "Sys.Audit"));
        assert!(!held(&p, "/nodes/pve1", "Sys.Audit"));
        assert!(held(&p, "/nodes/pve1", "Sys.Console"));
        // propagated privileges replace what came from above
        let p = perms(json!({
            "/": {"Sys.Console": 1, "Sys.Audit": 1},
            "/nodes": {"Sys.Audit": 1},
        }));
        assert!(!held(&p, "/nodes/pve1", "Sys.Console"));
    }

    #[test]
    fn a_pool_member_privilege_or_a_pools_counts_for_the_machines_vms() {
        let allocate = need(&["VM.Allocate"], Scope::NewVms, "");
        // pool-derived privileges are listed unpropagated: still the pool's
        assert!(met(
            &perms(json!({"/pool/a": {"VM.Allocate": 0}})),
            &allocate
        ));
        assert!(met(&perms(json!({"/pool": {"VM.Allocate": 1}})), &allocate));
        assert!(!met(
            &perms(json!({"/vms/100": {"VM.Allocate": 0}})),
            &allocate
        ));
        // a template's own entry counts for cloning it
        let clone = need(&["VM.Clone"], Scope::Templates, "");
        assert!(met(&perms(json!({"/vms/9000": {"VM.Clone": 1}})), &clone));
        assert!(!met(&perms(json!({"/storage": {"VM.Clone": 1}})), &clone));
    }

    #[test]
    fn the_guest_agent_privilege_follows_the_version() {
        let p = perms(json!({"/vms": {"VM.Monitor": 1}}));
        let (_, advised9) = needs(&[], 9);
        let (_, advised8) = needs(&[], 8);
        let agent = |a: &[Need]| a.last().unwrap().clone();
        assert!(!met(&p, &agent(&advised9)));
        assert!(met(&p, &agent(&advised8)));
        let p = perms(json!({"/pool/a": {"VM.GuestAgent.Unrestricted": 0}}));
        assert!(met(&p, &agent(&advised9)), "either agent privilege does");
    }

    #[test]
    fn an_empty_answer_misses_everything() {
        let (required, _) = needs(&nodes(), 9);
        let p = Perms::new();
        assert_eq!(unmet(&p, &required).len(), required.len());
    }
}
