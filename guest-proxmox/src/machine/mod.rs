//! Machine lifecycle: one ProxmoxMachine is one VM cloned from a template.
//!
//! # The state machine
//!
//! Every call does a few short API calls and returns; waits (PVE tasks, boots) are
//! returned as progress with the task's UPID in the state and its wait named; the next
//! call checks the task's effect and reads its status only when that is missing.
//! Create walks `Cloning` → `Configuring` → `Resizing` → `WaitingForAddresses` →
//! `WaitingForBootstrapData` → `UploadingCloudInit` → `PoweringOn` →
//! `WaitingForGuestAgent` → `Ready`; delete walks `Stopping` → `Deleting` → `Confirming` →
//! `RemovingIso`.
//! A step whose PVE task failed is retried from its start (the message says why); a
//! synchronous PVE error is returned as the plugin error it classifies to, and the host
//! retries with the previous state, so every step is idempotent. PVE's lock timeouts
//! ("can't lock file '/var/lock/qemu-server/lock-N.conf' - got timeout", in a config write
//! or inside a task) and "VM is locked (…)" are transient: retried, never terminal.
//!
//! The VM is cloned and configured before the bootstrap data and the static addresses
//! exist (cloning is the slow part); only the NoCloud ISO needs them, so the machine
//! waits in `WaitingForAddresses` (its address requests stand from the first call on,
//! so the host's claims are allocated while the clone runs) and `WaitingForBootstrapData`
//! (with `needs-bootstrap` set). A VM of a machine whose address never comes is not a
//! leak: it carries the machine's ownership marker and goes with the machine.
//!
//! # Ownership
//!
//! The clone call itself sets the VM's `name` (the machine's name) and a `description`
//! ending in a marker line `hyperplug.machine-uid=<machine UID>`; tags `hyperplug` and
//! `hp-<UID>` follow in the first config write. The description marker is the proof of
//! ownership: no stop, destroy or config write touches a VM whose description does not
//! carry this machine's UID. PVE writes it with the clone's config once the first disk
//! is copied; until then the new VM holds a temporary config (`lock: clone` alone) that
//! shows no owner. So:
//!
//! * the VMID is chosen in one call and recorded in the state, and the clone is asked
//!   for in the next one: a result lost after the clone call (the host replays the state
//!   before) asks for the clone again, which PVE refuses while that VMID holds the first
//!   one; the refusal makes it look at the VMID, wait while it is an unreadable clone,
//!   and adopt it once it shows the marker;
//! * with no state at all (a first call, `clusterctl move`), create lists the cluster's
//!   VMs and adopts the one named like the machine or tagged with its UID whose marker
//!   matches; clones of the template still unreadable at that moment are waited for first
//!   (one of them may be this machine's), never later ones;
//! * delete and describe treat an unreadable clone at the recorded VMID as "not known
//!   yet" (delete waits), never as someone else's or as gone.
//!
//! A VM someone migrated to another node (PVE 9.2's load balancer, an admin) is followed
//! by its marker: when it is not on the recorded node, the node the cluster lists its
//! VMID on is checked for the marker and recorded; it is never reported missing, cloned
//! again, or left undestroyed.
//!
//! # VMID allocation
//!
//! `GET /cluster/nextid` does not reserve anything, and two clusters (or two machines)
//! asking at once get the same answer. The one atomic step PVE offers is the clone
//! itself: one config file per VMID. So the plugin proposes an ID and lets the clone
//! verify it: with `vmIDRange` it starts at an offset derived from the machine UID
//! (spreading concurrent machines over the range) and walks the IDs the cluster does not
//! list as used; without a range it asks `nextid` and, after a collision, adds a
//! UID-derived offset. PVE refuses a taken `newid` at once ("VM N already exists on node
//! 'X'"), or, when two clones race for it, accepts both and fails the loser inside its
//! task ("unable to create VM N: config file already exists", or a lock timeout on the
//! VMID's config lock).
//! Either way the plugin looks at VM N: its own clone is adopted, an unreadable clone is
//! waited for, anyone else's makes it record another VMID (and clone in the next call).
//! Two machines can therefore never share a VM, and one machine never gets two.
//!
//! # Placement
//!
//! PVE clones a template whose drives are not all on shared storage (CD-ROM images and
//! the cloud-init drive count) only on its own node ("can't clone VM to node 'X' (VM uses
//! local storage)"). The scheduler picks among the nodes the template reaches: a failure
//! domain it cannot reach (CAPI spreads machines over every node the cluster reports when
//! `allowedNodes` is unset) gives way to one it can, and `allowedNodes` that leave out the
//! template's node are a terminal `TemplateOnLocalStorage` saying how to fix it.
//!
//! # Layout
//!
//! One file per concern: `create` (the create step machine) drives `clone` (adoption,
//! `vmid`, `scheduler`, `template`), `configure`, `disks`, `cloudinit` and `boot`;
//! `delete` and `describe` are the other two calls. `state` is what the host hands back,
//! `context` what one call works with, `ownership` the marker, `tasks` PVE task polling,
//! `nics`/`addresses`/`network` the network side, `properties` PVE value parsing, `validate` spec
//! checks. What a step decides is kept apart from the API calls that feed it (e.g.
//! `configure::config_update`, `scheduler::choose_node`), so unit tests (`testing`
//! builds their requests) check it without a Proxmox.

use guest_kit::invalid;
use guest_kit::machine::{Guest, MachineRequest, MachineStatus, TemplateRequest, TemplateStatus};
use guest_kit::types::{PluginError, Progress};

use crate::Plugin;
use crate::api::{Pve, percent_encode};
use crate::spec::{ClusterSpec, machine_spec};
pub(crate) use nics::default_pool_name;
use nics::plan_nics;
use properties::u64_of;
use validate::validate;

mod addresses;
mod boot;
mod clone;
mod cloudinit;
mod configure;
mod context;
mod create;
mod delete;
mod describe;
mod disks;
mod network;
mod nics;
mod ownership;
pub(crate) mod properties;
mod scheduler;
mod state;
mod takeover;
mod tasks;
mod template;
#[cfg(test)]
mod testing;
mod validate;
mod vmid;

/// Requeue hints, in milliseconds.
const SHORT_MS: u64 = 1_000;
const BOOT_MS: u64 = 2_000;
const RETRY_MS: u64 = 5_000;
const BOOTSTRAP_MS: u64 = 10_000;
const MIB: u64 = 1 << 20;

impl Guest for Plugin {
    fn create(req: MachineRequest) -> Result<MachineStatus, PluginError> {
        create::create(&req)
    }

    fn describe(req: MachineRequest) -> Result<MachineStatus, PluginError> {
        describe::describe(&req)
    }

    fn delete(req: MachineRequest) -> Result<Option<Progress>, PluginError> {
        delete::delete(&req)
    }

    fn describe_template(req: TemplateRequest) -> Result<TemplateStatus, PluginError> {
        let spec = machine_spec(&req.spec, "spec.template.spec")?;
        // Addressing depends on the cluster (its pools, its zones), which a template
        // does not see: plan as if outside any zone, and let the machines tell.
        let mut unzoned = spec.clone();
        if let Some(n) = &mut unzoned.network {
            n.zone = None;
        }
        let cluster = ClusterSpec::default();
        let nics = plan_nics(&unzoned, &cluster)?;
        validate(&unzoned, &cluster, &nics).or_else(|e| match e {
            PluginError::InvalidSpec(ref i)
                if i.field.ends_with(".dhcp4") || i.field.ends_with(".dhcp6") =>
            {
                Ok(())
            }
            other => Err(templated(other)),
        })?;
        // What the spec leaves out comes from the template itself when it can be read
        // (credentials given); the clone keeps the template's values.
        let template = match (&req.credentials, spec.template_id, &spec.source_node) {
            (Some(c), Some(id), Some(node))
                if spec.num_sockets.is_none()
                    || spec.num_cores.is_none()
                    || spec.memory_mib.is_none() =>
            {
                Pve::new(c)
                    .get(&format!("/nodes/{}/qemu/{id}/config", percent_encode(node)))
                    .ok()
            }
            _ => None,
        };
        let from_template = |key: &str, default: u64| {
            template
                .as_ref()
                .and_then(|t| u64_of(t, key))
                .unwrap_or(default)
        };
        let sockets = spec
            .num_sockets
            .map_or_else(|| from_template("sockets", 1), u64::from);
        let cores = spec
            .num_cores
            .map_or_else(|| from_template("cores", 1), u64::from);
        let cpus = sockets * cores;
        let memory = spec
            .memory_mib
            .unwrap_or_else(|| from_template("memory", 2048));
        Ok(TemplateStatus {
            capacity: vec![
                ("cpu".into(), cpus.to_string()),
                ("memory".into(), format!("{memory}Mi")),
            ],
            node_info: vec![
                ("architecture".into(), "amd64".into()),
                ("operatingSystem".into(), "linux".into()),
            ],
        })
    }
}

/// A template's machine spec is at `spec.template.spec`: an invalid-spec error that
/// `validate` names under `spec` is named there.
fn templated(e: PluginError) -> PluginError {
    match e {
        PluginError::InvalidSpec(i) => match i.field.strip_prefix("spec") {
            Some(rest) if rest.is_empty() || rest.starts_with('.') => {
                invalid(&format!("spec.template.spec{rest}"), i.message)
            }
            _ => PluginError::InvalidSpec(i),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use guest_kit::machine::{Guest, TemplateRequest};
    use guest_kit::testing::object;
    use guest_kit::types::PluginError;

    use crate::Plugin;

    /// Found by fuzzing (`fuzz/`, target `specs`): a template spec without a template
    /// was blamed on `spec.templateID`, a field the template object does not have.
    #[test]
    fn an_invalid_template_spec_names_the_field_under_spec_template_spec() {
        let req = TemplateRequest {
            template: object("t1", "t1-uid"),
            spec: "{}".into(),
            credentials: None,
        };
        match Plugin::describe_template(req) {
            Err(PluginError::InvalidSpec(i)) => {
                assert_eq!(i.field, "spec.template.spec.templateID")
            }
            other => panic!("expected an invalid spec, got {other:?}"),
        }
    }
}
