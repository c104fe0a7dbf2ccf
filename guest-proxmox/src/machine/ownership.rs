//! The ownership marker and adoption (see the module doc of `machine`).

use std::collections::BTreeSet;

use guest_kit::machine::MachineRequest;
use guest_kit::types::PluginError;
use guest_kit::{log, terminal, transient};
use serde_json::Value;

use super::context::Ctx;
use super::properties::str_of;
use super::state::State;
use super::{RETRY_MS, SHORT_MS};
use crate::api::percent_encode;
use crate::spec::MachineSpec;

/// How the marker line of a machine starts in its VM's description.
const MACHINE_MARKER: &str = "hyperplug.machine-uid=";
/// How the line naming the machine's cluster starts.
const CLUSTER_MARKER: &str = "hyperplug.cluster-uid=";
/// How the tag carrying a machine's UID starts.
const UID_TAG_PREFIX: &str = "hp-";

/// The marker line in the VM description.
pub(super) fn marker(uid: &str) -> String {
    format!("{MACHINE_MARKER}{uid}")
}

/// Whether `text` has a line of the forms only the provider writes (a machine's marker,
/// its cluster's line): a user's description with one could pass for another machine's
/// VM.
pub(super) fn has_marker_line(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .any(|l| l.starts_with(MACHINE_MARKER) || l.starts_with(CLUSTER_MARKER))
}

/// Whether `tag` is of the form only the provider writes (a machine's UID tag).
pub(super) fn is_marker_tag(tag: &str) -> bool {
    tag.to_ascii_lowercase().starts_with(UID_TAG_PREFIX)
}

/// A tag carrying the machine UID (PVE tags: `[a-z0-9_][a-z0-9_+.-]*`).
pub(super) fn uid_tag(uid: &str) -> String {
    let clean: String = uid
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("{UID_TAG_PREFIX}{clean}")
}

pub(super) fn owned_by(config: &Value, uid: &str) -> bool {
    let m = marker(uid);
    config
        .get("description")
        .and_then(Value::as_str)
        .is_some_and(|d| d.lines().any(|l| l.trim() == m))
}

pub(super) fn description(spec: &MachineSpec, req: &MachineRequest) -> String {
    let mut d = String::new();
    if let Some(user) = &spec.description {
        d.push_str(user.trim_end());
        d.push_str("\n\n");
    }
    d.push_str(&format!(
        "Managed by hyperplug for machine {}/{} of cluster {}; do not edit the lines below.\n",
        req.machine.namespace, req.machine.name, req.cluster.name
    ));
    d.push_str(&format!("hyperplug.cluster-uid={}\n", req.cluster.uid));
    d.push_str(&marker(&req.machine.uid));
    d
}

/// A VM the cluster lists on a node that has no config for it: it is between nodes.
fn moving(vmid: u32, node: &str) -> PluginError {
    transient(
        format!(
            "VM {vmid} is listed on {node} but is not there (moving between nodes); looking again"
        ),
        Some(SHORT_MS),
    )
}

/// What a recorded VMID holds now.
pub(super) enum Located {
    /// This machine's VM (the state's node follows it when it migrated).
    Ours(Value),
    /// A clone in its first phase: PVE's temporary config (`lock: clone` alone) shows
    /// no owner until the first disk is copied.
    Cloning,
    /// Another VM.
    Foreign(Value),
    /// No VM with this VMID (or none that is ours on another node).
    Gone,
}

/// PVE's temporary clone config: locked, and nothing else yet.
pub(super) fn is_unreadable_clone(config: &Value) -> bool {
    str_of(config, "lock").as_deref() == Some("clone") && config.get("name").is_none()
}

impl<'a> Ctx<'a> {
    fn located(&self, config: Value) -> Located {
        if owned_by(&config, self.uid()) {
            Located::Ours(config)
        } else if is_unreadable_clone(&config) {
            Located::Cloning
        } else {
            Located::Foreign(config)
        }
    }

    /// The recorded VM, on its recorded node or, when it is not there (migrated, or still
    /// on its template's node mid-clone), where the cluster lists its VMID. The state's
    /// node follows this machine's VM; another VM elsewhere with the VMID is not followed.
    pub(super) fn locate(&self, st: &mut State) -> Result<Located, PluginError> {
        let Some(vmid) = st.vmid else {
            return Ok(Located::Gone);
        };
        match self.get_config(st) {
            Ok(c) => return Ok(self.located(c)),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.classify("reading the VM")),
        }
        // Listed on the recorded node too: it moved away and back since the read above
        // (a migration goes both ways), so it is read again where it is listed.
        let listed = self
            .qemu_vms()?
            .find(|v| v.vmid == Some(u64::from(vmid)))
            .and_then(|v| v.node.as_deref().map(str::to_string));
        let Some(node) = listed else {
            return Ok(Located::Gone);
        };
        let path = format!("/nodes/{}/qemu/{vmid}/config", percent_encode(&node));
        let config = match self.pve.get(&path) {
            Ok(c) => c,
            // Listed, yet not where listed: moving between nodes (the listing is read once
            // per call). Never "gone" while the cluster lists it: looked at again.
            Err(e) if e.is_not_found() => return Err(moving(vmid, &node)),
            Err(e) => return Err(e.classify("reading the VM on its new node")),
        };
        match self.located(config) {
            Located::Ours(c) if Some(&node) == st.node.as_ref() => Ok(Located::Ours(c)),
            Located::Ours(c) => {
                log::info(
                    "following the VM to the node it is on now",
                    &[
                        ("vmid", vmid.to_string()),
                        ("from", st.node.clone().unwrap_or_default()),
                        ("to", node.clone()),
                    ],
                );
                st.node = Some(node);
                Ok(Located::Ours(c))
            }
            Located::Foreign(_) => Ok(Located::Gone),
            other => Ok(other),
        }
    }

    /// The VM's config, or an error when it is gone or not ours.
    pub(super) fn owned_config(&self, st: &mut State, context: &str) -> Result<Value, PluginError> {
        let vmid = st.vmid.unwrap_or_default();
        match self.locate(st)? {
            Located::Ours(c) => Ok(c),
            Located::Foreign(_) => Err(terminal(
                "VMNotOwned",
                format!(
                    "{context}: VM {vmid} on {} does not carry this machine's marker ({}); not touching it",
                    st.node.as_deref().unwrap_or_default(),
                    marker(self.uid())
                ),
            )),
            Located::Cloning => Err(transient(
                format!("{context}: VM {vmid} is still being cloned"),
                Some(SHORT_MS),
            )),
            Located::Gone => Err(transient(
                format!(
                    "{context}: VM {vmid} is gone from {} and not found on another node",
                    st.node.as_deref().unwrap_or_default()
                ),
                Some(RETRY_MS),
            )),
        }
    }

    /// This machine's VM anywhere in the cluster, found by its marker. Several VMs
    /// carrying it are an ambiguity, refused: which one is the machine's cannot be
    /// told, and taking "the first" could take (or destroy) a VM someone marked.
    pub(super) fn find_owned(&self) -> Result<Option<(String, u32, Value)>, PluginError> {
        let tag = uid_tag(self.uid());
        let name = &self.req.machine.name;
        let candidates: Vec<(String, u32)> = self
            .qemu_vms()?
            .filter(|v| !v.is_template())
            .filter(|v| v.name.as_deref() == Some(name.as_str()) || v.has_tag(&tag))
            .filter_map(|v| Some((v.node.as_deref()?.to_string(), v.vmid32()?)))
            .collect();
        let mut owned = Vec::new();
        for (node, vmid) in candidates {
            let path = format!("/nodes/{}/qemu/{vmid}/config", percent_encode(&node));
            match self.pve.get(&path) {
                Ok(c) if owned_by(&c, self.uid()) => owned.push((node, vmid, c)),
                Ok(_) => {}
                Err(e) if e.is_not_found() => return Err(moving(vmid, &node)),
                Err(e) => return Err(e.classify("checking a candidate VM")),
            }
        }
        if owned.len() > 1 {
            // Which VMs: the manager's log says; the machine is not told (some of them
            // may not be its tenant's).
            let vmids: Vec<String> = owned.iter().map(|(_, id, _)| id.to_string()).collect();
            log::warn(
                "several VMs carry one machine's marker",
                &[("vmids", vmids.join(", "))],
            );
            return Err(terminal(
                "AmbiguousOwnership",
                format!(
                    "{} VMs carry this machine's marker ({}): none is used, adopted or destroyed. The manager's log names them; remove the marker line from the descriptions of those that are not this machine's",
                    owned.len(),
                    marker(self.uid())
                ),
            ));
        }
        Ok(owned.pop())
    }

    /// Clones on `node` still in their first phase (no owner readable yet).
    pub(super) fn unreadable_clones(&self, node: &str) -> Result<BTreeSet<u32>, PluginError> {
        Ok(self
            .qemu_vms()?
            .filter(|v| v.node.as_deref() == Some(node) && v.lock.as_deref() == Some("clone"))
            .filter_map(|v| {
                let vmid = v.vmid32()?;
                (v.name.as_deref() == Some(format!("VM {vmid}").as_str())).then_some(vmid)
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::machine::testing::{UID, request, template_spec};

    #[test]
    fn marker_forms_are_recognised_in_any_line_and_tag_case() {
        assert!(has_marker_line(&format!("notes\n  {}\n", marker("x"))));
        assert!(has_marker_line("hyperplug.cluster-uid=c1"));
        assert!(!has_marker_line("about hyperplug.machine-uid=x in prose"));
        assert!(is_marker_tag(&uid_tag("Abc")) && is_marker_tag("HP-1"));
        assert!(!is_marker_tag("hyperplug") && !is_marker_tag("php-7"));
    }

    #[test]
    fn the_uid_tag_is_a_valid_lower_case_proxmox_tag() {
        assert_eq!(uid_tag("AbC-12_x.y:z"), "hp-abc-12_x-y-z");
    }

    #[test]
    fn the_description_keeps_the_users_text_and_ends_with_the_marker() {
        let mut spec: MachineSpec = serde_json::from_value(template_spec()).unwrap();
        spec.description = Some("web tier\n".into());
        let text = description(&spec, &request(template_spec(), json!({})));
        assert!(
            text.starts_with(
                "web tier\n\nManaged by hyperplug for machine default/m1 of cluster c1"
            ),
            "{text}"
        );
        assert!(text.contains("\nhyperplug.cluster-uid=c1-uid\n"), "{text}");
        assert_eq!(text.lines().last(), Some(marker(UID).as_str()));
    }

    #[test]
    fn a_vm_is_ours_only_when_a_line_of_its_description_is_our_marker() {
        let ours = json!({"description": format!("notes\n{}\n", marker("uid-1"))});
        assert!(owned_by(&ours, "uid-1"));
        assert!(!owned_by(&ours, "uid-2"));
        let quoted = json!({"description": format!("copied from {}", marker("uid-1"))});
        assert!(!owned_by(&quoted, "uid-1"));
        let prefix = json!({"description": marker("uid-10")});
        assert!(!owned_by(&prefix, "uid-1"));
        assert!(!owned_by(&json!({}), "uid-1"));
    }
}
