//! Taking over a VM another provider made (CAPMOX): a machine that carries its
//! provider ID and VMID but whose VM carries no marker of ours.
//!
//! What the machine's spec names is what a tenant wrote, so it is followed only where
//! an administrator granted adoption for this machine (the `grants` import, decided by
//! the host from the manager's flags); elsewhere nothing of the named VM is read or
//! touched (`AdoptionNotGranted`). Granted, the plugin adopts the VM only if everything
//! the other provider left agrees with what is in PVE:
//!
//! * the VM is at `spec.virtualMachineID`, on `status.proxmoxNode` (or, migrated since,
//!   on the node the cluster lists it on) and is not a template;
//! * its name is the machine's name;
//! * its SMBIOS UUID is the one in `spec.providerID` (`proxmox://<uuid>`): set by the
//!   clone that made it;
//! * it carries no hyperplug marker of another machine.
//!
//! A VM that passes gets this machine's marker (the description line and tags a clone of
//! ours gets) and nothing else: no clone, no restart, no reconfiguration. Its NoCloud
//! ISO (`user-data-<vmid>.iso`, on `ide0`) is recorded so that deleting the machine
//! removes it with the VM. A VM that fails is refused (`AdoptionRefused`) and never
//! touched; no other VM is cloned in its place. The refusal the machine shows says no
//! more than that: which check failed (the VM's name, its UUID, another machine's
//! marker, "no such VM") would tell the tenant facts of a VM that may not be its own,
//! one probe per spec edit. The check goes to the manager's log only.

use guest_kit::terminal;
use guest_kit::types::PluginError;
use serde_json::Value;

use super::context::Ctx;
use super::ownership::{marker, uid_tag};
use super::properties::{str_of, uuid_of};
use super::state::{State, Step};
use crate::api::percent_encode;

/// Condition reason of a machine whose VM another provider made and that does not
/// prove to be this machine's.
pub(super) const REFUSED: &str = "AdoptionRefused";
/// Condition reason of a machine naming a VM it has no record of, where adoption is
/// not granted (the host's own gate has the same name).
pub(super) const NOT_GRANTED: &str = "AdoptionNotGranted";

/// What another provider recorded on the machine.
#[derive(Debug, PartialEq)]
pub(super) struct Claimed {
    pub(super) vmid: u32,
    pub(super) uuid: String,
    /// `status.proxmoxNode`, when the status still has it.
    pub(super) node: Option<String>,
}

impl Ctx<'_> {
    /// The VM another provider recorded for this machine: `spec.virtualMachineID` and
    /// `spec.providerID`, both set. None: it records none (a machine of ours, or new).
    pub(super) fn claimed_by_another_provider(&self) -> Option<Claimed> {
        let vmid = u32::try_from(self.spec.virtual_machine_id?).ok()?;
        let uuid = self
            .spec
            .provider_id
            .as_deref()?
            .strip_prefix("proxmox://")?
            .to_string();
        let node = self
            .req
            .plugin_status
            .as_deref()
            .and_then(|s| serde_json::from_str::<Value>(s).ok())
            .and_then(|s| str_of(&s, "proxmoxNode"));
        Some(Claimed { vmid, uuid, node })
    }

    /// Adopt the VM `claimed` names if adoption is granted and it proves to be this
    /// machine's: its state then records it (ready when running). Not granted, the VM
    /// is not even read.
    pub(super) fn take_over(&self, claimed: &Claimed, st: &mut State) -> Result<(), PluginError> {
        if !guest_kit::grants::adoption_allowed() {
            return Err(terminal(
                NOT_GRANTED,
                "spec.providerID and spec.virtualMachineID name a VM this machine has no record of, and adoption is not granted for it: nothing is read, adopted, touched or replaced. An administrator grants adoption with hyperplug run --adopt-namespace; or delete the machine's providerID and virtualMachineID to make a new VM",
            ));
        }
        let (node, config) = self.claimed_vm(claimed)?;
        if let Some(why) = disproof(&config, claimed, &self.req.machine.name, self.uid()) {
            return Err(refused(claimed, &node, &why));
        }
        let mut description = str_of(&config, "description").unwrap_or_default();
        if !description.is_empty() && !description.ends_with('\n') {
            description.push('\n');
        }
        description.push_str(&format!(
            "Adopted by hyperplug for machine {}/{} of cluster {}; do not edit the lines below.\n{}",
            self.req.machine.namespace,
            self.req.machine.name,
            self.req.cluster.name,
            marker(self.uid())
        ));
        let mut tags: Vec<String> = str_of(&config, "tags")
            .unwrap_or_default()
            .split([';', ',', ' '])
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect();
        for t in ["hyperplug".to_string(), uid_tag(self.uid())] {
            if !tags.contains(&t) {
                tags.push(t);
            }
        }
        let path = format!(
            "/nodes/{}/qemu/{}/config",
            percent_encode(&node),
            claimed.vmid
        );
        self.pve
            .put(
                &path,
                &[("description", description), ("tags", tags.join(";"))],
            )
            .map_err(|e| e.classify("marking the adopted VM as this machine's"))?;
        guest_kit::log::info(
            "adopted a VM another provider made",
            &[("vmid", claimed.vmid.to_string()), ("node", node.clone())],
        );
        if let Some((slot, volid)) = other_providers_iso(&config, claimed.vmid) {
            st.cd_slot = Some(slot);
            st.iso = Some(volid);
            st.iso_node = Some(node.clone());
        }
        // As the provider ID has it (the proof compared it ignoring case): the provider
        // ID the machine and its Node carry stays exactly as it is.
        st.uuid = Some(claimed.uuid.clone());
        st.vmid = Some(claimed.vmid);
        let running = self
            .pve
            .get(&format!(
                "/nodes/{}/qemu/{}/status/current",
                percent_encode(&node),
                claimed.vmid
            ))
            .map_err(|e| e.classify("reading the adopted VM's status"))?;
        st.node = Some(node);
        st.step = if str_of(&running, "status").as_deref() == Some("running") {
            Step::Ready
        } else {
            Step::PoweringOn
        };
        Ok(())
    }

    /// The claimed VM's node and config: on the recorded node, else where the cluster
    /// lists its VMID.
    fn claimed_vm(&self, claimed: &Claimed) -> Result<(String, Value), PluginError> {
        let read = |node: &str| {
            self.pve.get(&format!(
                "/nodes/{}/qemu/{}/config",
                percent_encode(node),
                claimed.vmid
            ))
        };
        if let Some(node) = &claimed.node {
            match read(node) {
                Ok(c) => return Ok((node.clone(), c)),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.classify("reading the VM to adopt")),
            }
        }
        let listed = self
            .qemu_vms()?
            .find(|v| v.vmid32() == Some(claimed.vmid))
            .and_then(|v| v.node.as_deref().map(str::to_string));
        let Some(node) = listed else {
            let on = claimed.node.as_deref().unwrap_or("any node");
            return Err(refused(claimed, on, "there is no VM with that VMID"));
        };
        match read(&node) {
            Ok(c) => Ok((node, c)),
            Err(e) if e.is_not_found() => Err(guest_kit::transient(
                "the VM named for adoption is moving between nodes; looking again",
                Some(super::SHORT_MS),
            )),
            Err(e) => Err(e.classify("reading the VM to adopt")),
        }
    }
}

/// Why `config` does not prove to be the VM of machine `name` (UID `uid`), if it does not.
pub(super) fn disproof(config: &Value, claimed: &Claimed, name: &str, uid: &str) -> Option<String> {
    if super::properties::u64_of(config, "template") == Some(1) {
        return Some("it is a template".into());
    }
    let vm_name = str_of(config, "name").unwrap_or_default();
    if vm_name != name {
        return Some(format!(
            "its name is `{vm_name}`, not the machine's name `{name}`"
        ));
    }
    match uuid_of(config) {
        Some(u) if u.eq_ignore_ascii_case(&claimed.uuid) => {}
        Some(u) => {
            return Some(format!(
                "its SMBIOS UUID is {u}, not the one in spec.providerID ({})",
                claimed.uuid
            ));
        }
        None => return Some("it has no SMBIOS UUID to match spec.providerID".into()),
    }
    let description = str_of(config, "description").unwrap_or_default();
    let mine = marker(uid);
    if let Some(other) = description
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("hyperplug.machine-uid=") && *l != mine)
    {
        return Some(format!("it carries another machine's marker ({other})"));
    }
    None
}

/// The refusal of `claimed`: `why` goes to the manager's log, the machine is told only
/// that the VM does not prove to be its own.
fn refused(claimed: &Claimed, node: &str, why: &str) -> PluginError {
    guest_kit::log::warn(
        "a VM named for adoption does not prove to be the machine's",
        &[
            ("vmid", claimed.vmid.to_string()),
            ("node", node.to_string()),
            ("why", why.to_string()),
        ],
    );
    terminal(
        REFUSED,
        "spec.virtualMachineID and spec.providerID do not prove to be this machine's VM: it is not adopted, touched or replaced (the manager's log says which check failed). Fix the machine's spec, or delete the machine and deal with the VM by hand",
    )
}

/// The other provider's NoCloud ISO on a CD drive of `config`: `(slot, volid)`.
fn other_providers_iso(config: &Value, vmid: u32) -> Option<(String, String)> {
    let file = format!("iso/user-data-{vmid}.iso");
    ["ide0", "ide1", "ide2", "ide3", "sata0", "scsi0"]
        .into_iter()
        .find_map(|slot| {
            let value = str_of(config, slot)?;
            let volid = value.split(',').next()?.to_string();
            volid
                .split_once(':')
                .is_some_and(|(_, path)| path == file)
                .then(|| (slot.to_string(), volid))
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn claimed() -> Claimed {
        Claimed {
            vmid: 104,
            uuid: "6c3fa683-bef9-4425-b413-eaa45a9d6191".into(),
            node: Some("pve2".into()),
        }
    }

    fn capmox_vm() -> Value {
        json!({
            "name": "m1",
            "smbios1": "uuid=6C3FA683-BEF9-4425-B413-EAA45A9D6191",
            "ide0": "local:iso/user-data-104.iso,media=cdrom",
            "tags": "ip_net0_10.0.0.5",
        })
    }

    #[test]
    fn a_vm_proves_to_be_the_machines_by_name_and_smbios_uuid() {
        assert_eq!(disproof(&capmox_vm(), &claimed(), "m1", "uid-1"), None);
        let why = disproof(&capmox_vm(), &claimed(), "m2", "uid-1").unwrap();
        assert!(why.contains("`m1`, not the machine's name `m2`"), "{why}");
        let mut other = claimed();
        other.uuid = "00000000-0000-0000-0000-000000000000".into();
        let why = disproof(&capmox_vm(), &other, "m1", "uid-1").unwrap();
        assert!(why.contains("SMBIOS UUID"), "{why}");
    }

    #[test]
    fn a_template_or_another_machines_vm_never_proves() {
        let mut template = capmox_vm();
        template["template"] = json!(1);
        assert!(disproof(&template, &claimed(), "m1", "uid-1").is_some());
        let mut taken = capmox_vm();
        taken["description"] = json!(format!("x\n{}", marker("uid-2")));
        let why = disproof(&taken, &claimed(), "m1", "uid-1").unwrap();
        assert!(why.contains("another machine's marker"), "{why}");
        let mut ours = capmox_vm();
        ours["description"] = json!(marker("uid-1"));
        assert_eq!(disproof(&ours, &claimed(), "m1", "uid-1"), None);
    }

    #[test]
    fn the_other_providers_iso_is_found_on_its_cd_drive() {
        assert_eq!(
            other_providers_iso(&capmox_vm(), 104),
            Some(("ide0".into(), "local:iso/user-data-104.iso".into()))
        );
        assert_eq!(other_providers_iso(&capmox_vm(), 105), None);
    }
}
