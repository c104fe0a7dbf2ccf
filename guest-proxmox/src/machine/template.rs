//! Finding the template to clone.

use std::collections::BTreeSet;

use guest_kit::terminal;
use guest_kit::types::PluginError;

use super::context::Ctx;
use super::properties::{is_drive_key, str_of, u64_of};
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
    let mut found: Vec<(String, u32)> = cx
        .qemu_vms()?
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
    let storages = cx
        .pve
        .get(&format!("/nodes/{n}/storage"))
        .map_err(|e| e.classify(&format!("listing the storages of {node}")))?;
    let shared: BTreeSet<String> = storages
        .as_array()
        .into_iter()
        .flatten()
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
