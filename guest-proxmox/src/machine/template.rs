//! Finding the template to clone: by `templateID` on `sourceNode`, or by tags.
//!
//! A template selector's `matchTags` (any case) pick among the templates (VMs with
//! `template: 1` and tags) by `matchPolicy`: `exact` (the default) wants the very same
//! tags, `uniqueSubset` all of them and maybe more, `bestSubset` all of them and the
//! fewest others. Of several equally good templates the one on the failure domain's
//! node wins (a template replicated to every node); otherwise more than one is an
//! error naming them, whatever the order Proxmox lists them in.

use std::collections::BTreeSet;

use guest_kit::terminal;
use guest_kit::types::PluginError;

use super::context::Ctx;
use super::ownership::{has_marker_line, is_marker_tag};
use super::properties::{is_drive_key, str_of, u64_of};
use crate::api::percent_encode;
use crate::resources::Resource;
use crate::spec::{MatchPolicy, TemplateSelector};

/// (node, VMID) of the template to clone. Only a template may be a clone's source (PVE
/// full-clones any VM, a running one with its disks and secrets included), and not one
/// made from a machine's VM (it carries the machine's marker). What is refused is told
/// in one message whatever the reason, so the refusal says nothing of a VM that may not
/// be the tenant's.
pub(super) fn resolve_template(cx: &Ctx) -> Result<(String, u32), PluginError> {
    if let (Some(id), Some(node)) = (cx.spec.template_id, &cx.spec.source_node) {
        // Listed on its node by the cluster's listing this call reads anyway: judged from
        // it. Else its config is asked for (a listing can lag a new template).
        let listed = cx
            .qemu_vms()?
            .find(|v| v.vmid32() == Some(id) && v.node.as_deref() == Some(node.as_str()));
        if let Some(v) = listed {
            return match cloneable(v) {
                true => Ok((node.clone(), id)),
                false => Err(not_a_template(id, node)),
            };
        }
        let path = format!("/nodes/{}/qemu/{id}/config", percent_encode(node));
        return match cx.pve.get(&path) {
            Ok(c) if is_clean_template(&c) => Ok((node.clone(), id)),
            Ok(_) => Err(not_a_template(id, node)),
            Err(e) if e.is_not_found() => Err(not_a_template(id, node)),
            Err(e) => Err(e.classify(&format!("reading template {id} on {node}"))),
        };
    }
    let selector = cx.spec.template_selector.clone().unwrap_or_default();
    choose_template(&selector, cx.qemu_vms()?, cx.req.failure_domain.as_deref())
}

/// Whether a listed VM may be a clone's source: a template whose tags mark no machine.
fn cloneable(v: &Resource) -> bool {
    v.is_template()
        && !v
            .tags
            .as_deref()
            .unwrap_or_default()
            .split([';', ',', ' '])
            .any(is_marker_tag)
}

/// Whether a VM's config is a template's that marks no machine.
fn is_clean_template(config: &serde_json::Value) -> bool {
    u64_of(config, "template") == Some(1)
        && !str_of(config, "description").is_some_and(|d| has_marker_line(&d))
        && !str_of(config, "tags")
            .unwrap_or_default()
            .split([';', ',', ' '])
            .any(is_marker_tag)
}

/// The one refusal of a `templateID` that may not be cloned, whatever the reason.
fn not_a_template(id: u32, node: &str) -> PluginError {
    terminal(
        "TemplateNotFound",
        format!(
            "spec.templateID {id} on spec.sourceNode {node} is not a template this machine may clone: clone sources must be templates (template: 1) that are not a machine's VM, visible to the cluster's credentials. Nothing was cloned"
        ),
    )
}

/// The template `selector` picks among `vms` (the cluster's VMs as
/// `GET /cluster/resources` lists them), preferring `node`.
pub(super) fn choose_template<'v>(
    selector: &TemplateSelector,
    vms: impl IntoIterator<Item = &'v Resource>,
    node: Option<&str>,
) -> Result<(String, u32), PluginError> {
    let want: BTreeSet<String> = selector
        .match_tags
        .iter()
        .map(|t| t.trim().to_ascii_lowercase())
        .collect();
    let policy = selector.match_policy.unwrap_or(MatchPolicy::Exact);
    // (extra tags, node, VMID) of every template holding all wanted tags.
    let mut found: Vec<(usize, String, u32)> = vms
        .into_iter()
        .filter(|v| cloneable(v))
        .filter_map(|v| {
            let have: BTreeSet<String> = (v.tags.as_deref())
                .unwrap_or_default()
                .split([';', ',', ' '])
                .map(|t| t.trim().to_ascii_lowercase())
                .filter(|t| !t.is_empty())
                .collect();
            if have.is_empty() || !want.is_subset(&have) {
                return None;
            }
            Some((
                have.len() - want.len(),
                v.node.as_deref()?.to_string(),
                v.vmid32()?,
            ))
        })
        .collect();
    match policy {
        MatchPolicy::Exact => found.retain(|(extra, ..)| *extra == 0),
        MatchPolicy::UniqueSubset => {}
        MatchPolicy::BestSubset => {
            let best = found.iter().map(|(extra, ..)| *extra).min();
            found.retain(|(extra, ..)| Some(*extra) == best);
        }
    }
    found.sort();
    if let Some(n) = node
        && let [(_, node, id)] = found
            .iter()
            .filter(|(_, at, _)| at == n)
            .collect::<Vec<_>>()
            .as_slice()
    {
        return Ok((node.clone(), *id));
    }
    let tags: Vec<&String> = want.iter().collect();
    match found.as_slice() {
        [(_, node, id)] => Ok((node.clone(), *id)),
        [] => Err(terminal(
            "TemplateNotFound",
            format!(
                "no template matches the tags {tags:?} ({})",
                policy_name(policy)
            ),
        )),
        many => Err(terminal(
            "AmbiguousTemplate",
            format!(
                "{} templates match the tags {tags:?} ({}): {}; add a tag to pick one",
                many.len(),
                policy_name(policy),
                many.iter()
                    .map(|(_, n, id)| format!("{id} on {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

fn policy_name(p: MatchPolicy) -> &'static str {
    match p {
        MatchPolicy::Exact => "exact",
        MatchPolicy::UniqueSubset => "uniqueSubset",
        MatchPolicy::BestSubset => "bestSubset",
    }
}

/// Where a template can be cloned to.
pub(super) enum Reach {
    /// Every volume is on shared storage: any node.
    Anywhere,
    /// Its own node only; the non-shared storages that pin it there.
    OwnNode(Vec<String>),
}

impl Reach {
    pub(super) fn allows(&self, node: &str, template_node: &str) -> bool {
        matches!(self, Reach::Anywhere) || node == template_node
    }
}

/// The nodes PVE clones a template to: any node when all its drives (CD-ROM images and
/// the cloud-init drive included) are on shared storage, else only its own ("can't clone
/// VM to node 'X' (VM uses local storage)"); and only its own when a full clone goes to
/// a `storage` that is not shared ("can't clone to non-shared storage 'X'").
pub(super) fn template_reach(cx: &Ctx, node: &str, template: u32) -> Result<Reach, PluginError> {
    let n = percent_encode(node);
    let config = cx
        .pve
        .get(&format!("/nodes/{n}/qemu/{template}/config"))
        .map_err(|e| e.classify(&format!("reading template {template} on {node}")))?;
    // The listing showed a template; its config may show it made from a machine's VM.
    if !is_clean_template(&config) {
        return Err(not_a_template(template, node));
    }
    let shared: BTreeSet<String> = cx
        .node_storages(node)?
        .iter()
        .filter(|s| u64_of(s, "shared") == Some(1))
        .filter_map(|s| str_of(s, "storage"))
        .collect();
    let mut local: Vec<String> = config
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| is_drive_key(k))
        .filter_map(|(_, v)| v.as_str()?.split(',').next().map(str::to_string))
        .filter(|file| file != "none" && file != "cdrom")
        .map(|file| match file.split_once(':') {
            Some((sid, _)) => sid.to_string(),
            None => file,
        })
        .filter(|sid| !shared.contains(sid))
        .collect();
    if cx.spec.full.unwrap_or(true)
        && let Some(target) = &cx.spec.storage
        && !shared.contains(target)
    {
        local.push(target.clone());
    }
    local.sort();
    local.dedup();
    Ok(if local.is_empty() {
        Reach::Anywhere
    } else {
        Reach::OwnNode(local)
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use serde_json::Value;

    use super::*;

    fn template(vmid: u32, node: &str, tags: &str) -> Value {
        json!({"vmid": vmid, "node": node, "template": 1, "tags": tags, "type": "qemu"})
    }

    fn choose(
        tags: &[&str],
        policy: Option<MatchPolicy>,
        vms: Value,
        node: Option<&str>,
    ) -> Result<u32, String> {
        let selector = TemplateSelector {
            match_tags: tags.iter().map(|t| t.to_string()).collect(),
            match_policy: policy,
        };
        choose_template(&selector, &crate::resources::parsed(vms), node)
            .map(|(_, id)| id)
            .map_err(|e| match e {
                PluginError::Terminal(t) => t.reason,
                other => format!("{other:?}"),
            })
    }

    fn fleet() -> Value {
        json!([
            template(9000, "pve1", "k8s;ubuntu"),
            template(9001, "pve1", "k8s;ubuntu;v1.33"),
            template(9002, "pve2", "k8s;ubuntu;v1.33;gpu"),
            {"vmid": 100, "node": "pve1", "template": 0, "tags": "k8s;ubuntu"},
            template(9003, "pve3", ""),
        ])
    }

    #[test]
    fn exact_wants_the_very_same_tags_in_any_case() {
        assert_eq!(choose(&["Ubuntu", "k8s"], None, fleet(), None), Ok(9000));
        assert_eq!(
            choose(&["k8s", "v1.33"], Some(MatchPolicy::Exact), fleet(), None),
            Err("TemplateNotFound".into())
        );
    }

    #[test]
    fn unique_subset_wants_one_template_holding_all_the_tags() {
        assert_eq!(
            choose(&["gpu"], Some(MatchPolicy::UniqueSubset), fleet(), None),
            Ok(9002)
        );
        assert_eq!(
            choose(&["v1.33"], Some(MatchPolicy::UniqueSubset), fleet(), None),
            Err("AmbiguousTemplate".into())
        );
    }

    #[test]
    fn best_subset_takes_the_fewest_extra_tags_whatever_the_listing_order() {
        let best = Some(MatchPolicy::BestSubset);
        assert_eq!(choose(&["v1.33"], best, fleet(), None), Ok(9001));
        let mut reversed = fleet().as_array().unwrap().clone();
        reversed.reverse();
        assert_eq!(choose(&["v1.33"], best, json!(reversed), None), Ok(9001));
        assert_eq!(choose(&["k8s"], best, fleet(), None), Ok(9000));
    }

    #[test]
    fn of_equal_templates_the_failure_domains_node_wins_else_it_is_ambiguous() {
        let replicated = json!([template(9000, "pve1", "k8s"), template(9100, "pve2", "k8s"),]);
        assert_eq!(
            choose(&["k8s"], None, replicated.clone(), Some("pve2")),
            Ok(9100)
        );
        assert_eq!(
            choose(&["k8s"], None, replicated, None),
            Err("AmbiguousTemplate".into())
        );
    }

    #[test]
    fn a_template_made_from_a_machines_vm_never_matches() {
        let vms = json!([template(9005, "pve1", "k8s;hyperplug;hp-0b7e2f1c")]);
        assert_eq!(
            choose(&["k8s"], Some(MatchPolicy::UniqueSubset), vms, None),
            Err("TemplateNotFound".into())
        );
        let marked = json!({"template": 1, "description": "x\nhyperplug.machine-uid=u1"});
        assert!(!is_clean_template(&marked));
        assert!(!is_clean_template(&json!({"template": 0})));
        assert!(is_clean_template(&json!({"template": 1, "tags": "k8s"})));
    }

    #[test]
    fn vms_that_are_not_templates_or_have_no_tags_never_match() {
        let vms = json!([
            {"vmid": 100, "node": "pve1", "template": 0, "tags": "k8s"},
            template(9003, "pve3", ""),
        ]);
        assert_eq!(
            choose(&["k8s"], Some(MatchPolicy::UniqueSubset), vms, None),
            Err("TemplateNotFound".into())
        );
    }
}
