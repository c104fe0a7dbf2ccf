//! Choosing the node for a new VM.

use guest_kit::types::PluginError;
use guest_kit::{log, terminal, transient};

use super::context::Ctx;
use super::template::Reach;
use super::{MIB, RETRY_MS};
use crate::resources::Resource;

/// The template a VM is cloned from, and where PVE lets it be cloned to.
pub(super) struct Source<'a> {
    pub(super) node: &'a str,
    pub(super) template: u32,
    pub(super) reach: &'a Reach,
}

/// The node for a new VM, among those the template can be cloned to (`reach`): CAPI's
/// failure domain if given and reachable, else the node `choose_node` picks. A failure
/// domain the template cannot reach (CAPI spreads machines over every node when
/// `allowedNodes` is unset) gives way to a node it can.
pub(super) fn pick_node(cx: &Ctx, source: &Source) -> Result<String, PluginError> {
    if let Some(fd) = &cx.req.failure_domain
        && !fd.is_empty()
    {
        if source.reach.allows(fd, source.node) {
            return Ok(fd.clone());
        }
        log::info(
            "the failure domain's node cannot take a clone of the template (local storage); placing the VM on a node that can",
            &[
                ("failureDomain", fd.clone()),
                ("template", source.template.to_string()),
                ("templateNode", source.node.to_string()),
            ],
        );
    }
    choose_node(cx, cx.resources()?, source)
}

/// The nodes a machine's VM may be placed on: the machine's list, else its cluster's
/// (empty: any node).
fn allowed_nodes<'a>(cx: &'a Ctx) -> &'a [String] {
    if cx.spec.allowed_nodes.is_empty() {
        &cx.cluster.allowed_nodes
    } else {
        &cx.spec.allowed_nodes
    }
}

/// Whether the machine's VM can only be placed on `node`: every allowed node is `node`,
/// and so is the failure domain Cluster API chose, if any.
pub(super) fn pinned_to(cx: &Ctx, node: &str) -> bool {
    let allowed = allowed_nodes(cx);
    !allowed.is_empty()
        && allowed.iter().all(|n| n == node)
        && cx
            .req
            .failure_domain
            .as_deref()
            .is_none_or(|fd| fd.is_empty() || fd == node)
}

/// The allowed node the template reaches with the most free memory (node memory ×
/// memoryAdjustment% minus the memory of its VMs; 0 disables the check) that has at least
/// as many CPUs as the VM, among `resources` (what `GET /cluster/resources` answered:
/// nodes and their VMs). Allowed nodes that exclude every node the template reaches are a
/// configuration error.
pub(super) fn choose_node(
    cx: &Ctx,
    resources: &[Resource],
    source: &Source,
) -> Result<String, PluginError> {
    let allowed = allowed_nodes(cx).to_vec();
    let Source {
        node: template_node,
        template,
        reach,
    } = source;
    if let Reach::OwnNode(local) = reach
        && !allowed.is_empty()
        && !allowed.iter().any(|n| n == template_node)
    {
        return Err(terminal(
            "TemplateOnLocalStorage",
            format!(
                "template {template} on {template_node} is cloned from or to node-local storage ({}), so Proxmox clones it only on {template_node}, which allowedNodes {allowed:?} leaves out: allow {template_node}, use a template per node (templateSelector), or use shared storage for the template's disks and spec.storage",
                local.join(", ")
            ),
        ));
    }
    let items = resources;
    let adjustment = cx
        .cluster
        .scheduler_hints
        .as_ref()
        .and_then(|h| h.memory_adjustment)
        .unwrap_or(100);
    let need_mem = cx.spec.memory_mib.unwrap_or(0) * MIB;
    let need_cpu = u64::from(cx.spec.num_sockets.unwrap_or(1) * cx.spec.num_cores.unwrap_or(1));
    let mut best: Option<(i128, String)> = None;
    let mut refused = vec![];
    for n in items.iter().filter(|v| v.is("node")) {
        let Some(name) = n.node.as_deref().map(str::to_string) else {
            continue;
        };
        if !allowed.is_empty() && !allowed.contains(&name) || !reach.allows(&name, template_node) {
            continue;
        }
        if n.status.as_deref() != Some("online") {
            refused.push(format!("{name}: offline"));
            continue;
        }
        let cpus = n.maxcpu.unwrap_or(0);
        if cpus > 0 && need_cpu > cpus {
            refused.push(format!("{name}: {cpus} CPUs < {need_cpu}"));
            continue;
        }
        let total = n.maxmem.unwrap_or(0);
        let used: u64 = items
            .iter()
            .filter(|v| v.is("qemu") || v.is("lxc"))
            .filter(|v| v.node.as_deref() == Some(name.as_str()) && !v.is_template())
            .filter_map(|v| v.maxmem)
            .sum();
        let free = (i128::from(total) * i128::from(adjustment)) / 100 - i128::from(used);
        if adjustment != 0 && free < i128::from(need_mem) {
            refused.push(format!(
                "{name}: {} MiB free of {}% < {} MiB",
                free.max(0) / i128::from(MIB),
                adjustment,
                need_mem / MIB
            ));
            continue;
        }
        let score = if adjustment == 0 {
            -i128::from(used)
        } else {
            free
        };
        if best.as_ref().is_none_or(|(s, _)| score > *s) {
            best = Some((score, name));
        }
    }
    match best {
        Some((_, n)) => Ok(n),
        None if refused.is_empty() => Err(terminal(
            "NoNodeAllowed",
            format!("none of the allowed nodes {allowed:?} exists in the Proxmox cluster"),
        )),
        None => Err(transient(
            format!("no node can take the VM now: {}", refused.join("; ")),
            Some(RETRY_MS * 6),
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use serde_json::Value;

    use super::*;
    use crate::machine::testing::{ctx, request, template_spec};
    use crate::resources::parsed;

    const GIB: u64 = 1 << 30;

    fn node(name: &str, status: &str, cpus: u64, memory_gib: u64) -> Value {
        json!({"type": "node", "node": name, "status": status, "maxcpu": cpus, "maxmem": memory_gib * GIB})
    }

    fn vm(node: &str, memory_gib: u64) -> Value {
        json!({"type": "qemu", "node": node, "maxmem": memory_gib * GIB, "template": 0})
    }

    fn choose(spec: Value, cluster: Value, resources: Value) -> Result<String, PluginError> {
        let mut machine = template_spec();
        for (k, v) in spec.as_object().unwrap() {
            machine[k] = v.clone();
        }
        let req = request(machine, cluster);
        let source = Source {
            node: "pve1",
            template: 9000,
            reach: &Reach::Anywhere,
        };
        choose_node(&ctx(&req), &parsed(resources), &source)
    }

    #[test]
    fn the_node_with_the_most_free_memory_wins() {
        let resources = json!([
            node("pve1", "online", 8, 64),
            node("pve2", "online", 8, 64),
            vm("pve1", 16),
            vm("pve2", 4),
        ]);
        assert_eq!(choose(json!({}), json!({}), resources).unwrap(), "pve2");
    }

    #[test]
    fn templates_take_no_memory() {
        let resources = json!([
            node("pve1", "online", 8, 64),
            node("pve2", "online", 8, 64),
            {"type": "qemu", "node": "pve1", "maxmem": 32 * GIB, "template": 1},
            vm("pve2", 4),
        ]);
        assert_eq!(choose(json!({}), json!({}), resources).unwrap(), "pve1");
    }

    #[test]
    fn only_allowed_nodes_are_considered_the_machines_list_before_the_clusters() {
        let resources = json!([
            node("pve1", "online", 8, 64),
            node("pve2", "online", 8, 16),
            node("pve3", "online", 8, 32),
        ]);
        let cluster = json!({"allowedNodes": ["pve2", "pve3"]});
        assert_eq!(
            choose(json!({}), cluster.clone(), resources.clone()).unwrap(),
            "pve3"
        );
        let machine = json!({"allowedNodes": ["pve2"]});
        assert_eq!(choose(machine, cluster, resources).unwrap(), "pve2");
    }

    #[test]
    fn offline_nodes_and_nodes_with_too_few_cpus_are_refused_saying_why() {
        let resources = json!([
            node("pve1", "offline", 64, 512),
            node("pve2", "online", 2, 512),
        ]);
        let spec = json!({"numSockets": 2, "numCores": 2});
        match choose(spec, json!({}), resources) {
            Err(PluginError::Transient(t)) => {
                assert!(t.message.contains("pve1: offline"), "{}", t.message);
                assert!(t.message.contains("pve2: 2 CPUs < 4"), "{}", t.message);
            }
            other => panic!("expected a transient refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_node_without_room_for_the_vms_memory_is_refused() {
        let resources = json!([node("pve1", "online", 8, 16), vm("pve1", 12)]);
        let spec = json!({"memoryMiB": 8192});
        match choose(spec, json!({}), resources) {
            Err(PluginError::Transient(t)) => {
                assert!(
                    t.message.contains("pve1: 4096 MiB free of 100% < 8192 MiB"),
                    "{}",
                    t.message
                )
            }
            other => panic!("expected a transient refusal, got {other:?}"),
        }
    }

    #[test]
    fn memory_adjustment_allows_overcommit() {
        let resources = json!([node("pve1", "online", 8, 16), vm("pve1", 12)]);
        let spec = json!({"memoryMiB": 8192});
        let cluster = json!({"schedulerHints": {"memoryAdjustment": 200}});
        assert_eq!(choose(spec, cluster, resources).unwrap(), "pve1");
    }

    #[test]
    fn memory_adjustment_zero_skips_the_check_and_picks_the_least_used_node() {
        let resources = json!([
            node("pve1", "online", 8, 128),
            node("pve2", "online", 8, 8),
            vm("pve1", 64),
            vm("pve2", 16),
        ]);
        let spec = json!({"memoryMiB": 65536});
        let cluster = json!({"schedulerHints": {"memoryAdjustment": 0}});
        assert_eq!(choose(spec, cluster, resources).unwrap(), "pve2");
    }

    #[test]
    fn a_machine_is_pinned_to_a_node_only_when_every_allowed_node_and_its_failure_domain_is_it() {
        let pinned = |machine: Value, cluster: Value, fd: Option<&str>| {
            let mut req = request(machine, cluster);
            req.failure_domain = fd.map(str::to_string);
            pinned_to(&ctx(&req), "pve1")
        };
        let with = |nodes: Value| {
            let mut spec = template_spec();
            spec["allowedNodes"] = nodes;
            spec
        };
        assert!(pinned(
            template_spec(),
            json!({"allowedNodes": ["pve1"]}),
            None
        ));
        assert!(pinned(
            with(json!(["pve1"])),
            json!({"allowedNodes": ["pve2"]}),
            Some("")
        ));
        assert!(
            !pinned(template_spec(), json!({}), None),
            "no list: any node"
        );
        assert!(!pinned(
            template_spec(),
            json!({"allowedNodes": ["pve1", "pve2"]}),
            None
        ));
        assert!(!pinned(
            template_spec(),
            json!({"allowedNodes": ["pve1"]}),
            Some("pve2")
        ));
    }

    #[test]
    fn allowed_nodes_that_do_not_exist_are_terminal() {
        let resources = json!([node("pve1", "online", 8, 64)]);
        let cluster = json!({"allowedNodes": ["pve9"]});
        match choose(json!({}), cluster, resources) {
            Err(PluginError::Terminal(t)) => assert_eq!(t.reason, "NoNodeAllowed"),
            other => panic!("expected NoNodeAllowed, got {other:?}"),
        }
    }

    #[test]
    fn the_failure_domain_cluster_api_chose_is_taken_as_is_when_the_template_reaches_it() {
        let mut req = request(template_spec(), json!({}));
        req.failure_domain = Some("pve7".into());
        let source = Source {
            node: "pve1",
            template: 9000,
            reach: &Reach::Anywhere,
        };
        assert_eq!(pick_node(&ctx(&req), &source).unwrap(), "pve7");
    }

    fn local_template() -> Reach {
        Reach::OwnNode(vec!["local-lvm".into()])
    }

    #[test]
    fn a_template_on_local_storage_is_cloned_on_its_node_though_others_have_more_room() {
        let resources = json!([
            node("pve1", "online", 8, 16),
            node("pve2", "online", 8, 64),
            vm("pve1", 8),
        ]);
        let req = request(template_spec(), json!({}));
        let reach = local_template();
        let source = Source {
            node: "pve1",
            template: 9000,
            reach: &reach,
        };
        let chosen = choose_node(&ctx(&req), &parsed(resources), &source);
        assert_eq!(chosen.unwrap(), "pve1");
    }

    #[test]
    fn allowed_nodes_without_the_local_templates_node_say_how_to_fix_it() {
        let resources = json!([node("pve1", "online", 8, 64), node("pve2", "online", 8, 64)]);
        let req = request(template_spec(), json!({"allowedNodes": ["pve2"]}));
        let reach = local_template();
        let source = Source {
            node: "pve1",
            template: 9000,
            reach: &reach,
        };
        match choose_node(&ctx(&req), &parsed(resources), &source) {
            Err(PluginError::Terminal(t)) => {
                assert_eq!(t.reason, "TemplateOnLocalStorage");
                for part in [
                    "local-lvm",
                    "allow pve1",
                    "templateSelector",
                    "shared storage",
                ] {
                    assert!(t.message.contains(part), "{part}: {}", t.message);
                }
            }
            other => panic!("expected TemplateOnLocalStorage, got {other:?}"),
        }
    }
}
