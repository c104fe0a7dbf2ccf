//! The ownership marker and adoption (see the module doc of `machine`).

use guest_kit::machine::MachineRequest;
use guest_kit::types::PluginError;
use guest_kit::{terminal, transient};
use serde_json::Value;

use super::RETRY_MS;
use super::context::Ctx;
use super::properties::{str_of, u64_of};
use super::state::State;
use crate::api::percent_encode;
use crate::spec::MachineSpec;

/// The marker line in the VM description.
pub(super) fn marker(uid: &str) -> String {
    format!("hyperplug.machine-uid={uid}")
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
    format!("hp-{clean}")
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

impl<'a> Ctx<'a> {
    /// The VM's config, or an error when it is gone or not ours.
    pub(super) fn owned_config(&self, st: &State, context: &str) -> Result<Value, PluginError> {
        match self.get_config(st) {
            Ok(c) if owned_by(&c, self.uid()) => Ok(c),
            Ok(_) => Err(terminal(
                "VMNotOwned",
                format!(
                    "{context}: VM {} on {} does not carry this machine's marker ({}); not touching it",
                    st.vmid.unwrap_or_default(),
                    st.node.as_deref().unwrap_or_default(),
                    marker(self.uid())
                ),
            )),
            Err(e) if e.is_not_found() => Err(transient(
                format!("{context}: the VM disappeared: {e}"),
                Some(RETRY_MS),
            )),
            Err(e) => Err(e.classify(context)),
        }
    }

    /// This machine's VM anywhere in the cluster, found by its marker.
    pub(super) fn find_owned(&self) -> Result<Option<(String, u32, Value)>, PluginError> {
        let vms = self
            .pve
            .get("/cluster/resources?type=vm")
            .map_err(|e| e.classify("listing VMs"))?;
        let tag = uid_tag(self.uid());
        let name = &self.req.machine.name;
        let candidates: Vec<(String, u32)> = vms
            .as_array()
            .into_iter()
            .flatten()
            .filter(|v| v.get("type").and_then(Value::as_str) != Some("lxc"))
            .filter(|v| u64_of(v, "template") != Some(1))
            .filter(|v| {
                str_of(v, "name").as_deref() == Some(name.as_str())
                    || str_of(v, "tags").is_some_and(|t| t.split([';', ',', ' ']).any(|x| x == tag))
            })
            .filter_map(|v| Some((str_of(v, "node")?, u64_of(v, "vmid")? as u32)))
            .collect();
        for (node, vmid) in candidates {
            let path = format!("/nodes/{}/qemu/{vmid}/config", percent_encode(&node));
            match self.pve.get(&path) {
                Ok(c) if owned_by(&c, self.uid()) => return Ok(Some((node, vmid, c))),
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.classify("checking a candidate VM")),
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::machine::testing::{UID, request, template_spec};

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
