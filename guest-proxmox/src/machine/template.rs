//! Finding the template to clone.

use std::collections::BTreeSet;

use guest_kit::terminal;
use guest_kit::types::PluginError;

use super::context::Ctx;
use super::properties::{str_of, u64_of};
use crate::api::percent_encode;

/// (node, VMID) of the template to clone.
pub(super) fn resolve_template(cx: &Ctx) -> Result<(String, u32), PluginError> {
    if let (Some(id), Some(node)) = (cx.spec.template_id, &cx.spec.source_node) {
        let path = format!("/nodes/{}/qemu/{id}/config", percent_encode(node));
        return match cx.pve.get(&path) {
            Ok(_) => Ok((node.clone(), id)),
            Err(e) if e.is_not_found() => Err(terminal(
                "TemplateNotFound",
                format!("template {id} on node {node}: {e}"),
            )),
            Err(e) => Err(e.classify(&format!("reading template {id} on {node}"))),
        };
    }
    let tags = cx
        .spec
        .template_selector
        .as_ref()
        .map(|s| s.match_tags.clone())
        .unwrap_or_default();
    let vms = cx
        .pve
        .get("/cluster/resources?type=vm")
        .map_err(|e| e.classify("listing templates"))?;
    let mut found: Vec<(String, u32)> = vms
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| u64_of(v, "template") == Some(1))
        .filter(|v| {
            let have: BTreeSet<String> = str_of(v, "tags")
                .unwrap_or_default()
                .split([';', ',', ' '])
                .map(str::to_ascii_lowercase)
                .collect();
            tags.iter().all(|t| have.contains(&t.to_ascii_lowercase()))
        })
        .filter_map(|v| Some((str_of(v, "node")?, u64_of(v, "vmid")? as u32)))
        .collect();
    found.sort();
    let wanted = cx.req.failure_domain.clone();
    if let Some(n) = &wanted
        && let Some(t) = found.iter().find(|(node, _)| node == n)
    {
        return Ok(t.clone());
    }
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(terminal(
            "TemplateNotFound",
            format!("no template carries all the tags {tags:?}"),
        )),
        many => Err(terminal(
            "AmbiguousTemplate",
            format!(
                "{} templates carry the tags {tags:?} ({}); add a tag to pick one",
                many.len(),
                many.iter()
                    .map(|(n, id)| format!("{id} on {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}
