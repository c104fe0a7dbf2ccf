//! Machine lifecycle: one ProxmoxMachine is one VM cloned from a template.
//!
//! # The state machine
//!
//! Every call does a few short API calls and returns; waits (PVE tasks, boots) are
//! returned as progress with the task's UPID in the state and a small requeue hint.
//! Create walks `WaitingForAddresses` → `Cloning` → `Configuring` → `Resizing` →
//! `WaitingForBootstrapData` → `UploadingCloudInit` → `PoweringOn` →
//! `WaitingForGuestAgent` → `Ready`; delete walks `Stopping` → `Deleting` → `Deleted`.
//! A step whose PVE task failed is retried from its start (the message says why); a
//! synchronous PVE error is returned as the plugin error it classifies to, and the host
//! retries with the previous state, so every step is idempotent.
//!
//! The VM is cloned and configured before the bootstrap data exists (cloning is the slow
//! part); only the NoCloud ISO needs it, so the machine waits in
//! `WaitingForBootstrapData` with `needs-bootstrap` set. Static addresses, on the other
//! hand, are needed before anything is created (they go into the same ISO, and a VM
//! created for a machine that never gets an address would be a leak): until the host
//! passes one address per request, nothing is touched.
//!
//! # Ownership
//!
//! The clone call itself sets the VM's `name` (the machine's name) and a `description`
//! ending in a marker line `hyperplug.machine-uid=<machine UID>`; tags `hyperplug` and
//! `hp-<UID>` follow in the first config write. The description marker is the proof of
//! ownership: no stop, destroy or config write touches a VM whose description does not
//! carry this machine's UID. Because the marker is written atomically with the VM's
//! creation, a state lost right after the clone call (the host crashed before saving it)
//! is recovered by adoption: with no VMID in the state, create first lists the cluster's
//! VMs, checks those named like the machine or tagged with its UID, and adopts the one
//! whose marker matches, never cloning a second one.
//!
//! # VMID allocation
//!
//! `GET /cluster/nextid` does not reserve anything, and two clusters (or two machines)
//! asking at once get the same answer. The one atomic step PVE offers is the clone
//! itself: it refuses a `newid` whose config file exists ("unable to create VM N: config
//! file already exists", checked and created under PVE's cluster-wide lock). So the
//! plugin proposes an ID and lets the clone verify it: with `vmIDRange` it starts at an
//! offset derived from the machine UID (spreading concurrent machines over the range)
//! and walks the IDs the cluster does not list as used; without a range it asks
//! `nextid` and, after a collision, adds a UID-derived offset. On "already exists" it
//! tries the next candidate (a few per call). Two machines can therefore never share a
//! VM: the loser of a race is refused by PVE, and the winner's VM carries the winner's
//! marker.
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::api::{Pve, PveError, Task, classify_message, fnv1a, percent_encode};
use crate::bindings::exports::hyperplug::provider::machine::{
    AddressRequest, AddressType, AllocatedAddress, Drift, Guest, MachineAddress, MachineRequest,
    MachineStatus, TemplateRequest, TemplateStatus,
};
use crate::bindings::hyperplug::provider::log::Level;
use crate::bindings::hyperplug::provider::types::{
    PluginError, Progress, TerminalError, TransientError,
};
use crate::spec::{ClusterSpec, MachineSpec, NetworkDevice, NicModel};
use crate::{Plugin, invalid, log, parse_spec};

/// Requeue hints, in milliseconds.
const SHORT_MS: u64 = 1_000;
const BOOT_MS: u64 = 2_000;
const RETRY_MS: u64 = 5_000;
const BOOTSTRAP_MS: u64 = 10_000;
/// How many VMIDs one call tries before returning.
const VMID_TRIES: u32 = 8;
const MIB: u64 = 1 << 20;

/// The plugin's opaque state, handed back by the host on the next call.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
struct State {
    #[serde(default)]
    step: Step,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    vmid: Option<u32>,
    /// The PVE task being waited for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    upid: Option<String>,
    /// SMBIOS UUID (the provider ID's tail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    uuid: Option<String>,
    /// Volume ID of the NoCloud ISO while it exists (`local:iso/hyperplug-...iso`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    iso: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cd_slot: Option<String>,
    /// Addresses learnt from the guest agent (DHCP), `device` → addresses.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    dhcp: BTreeMap<String, Vec<String>>,
    /// Delete progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    delete: Option<DeleteStep>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
enum Step {
    #[default]
    Start,
    Cloning,
    Configuring,
    Resizing,
    UploadingCloudInit,
    Attaching,
    PoweringOn,
    WaitingForGuestAgent,
    Ejecting,
    Ready,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
enum DeleteStep {
    Stopping,
    Deleting,
    Confirming,
    RemovingIso,
}

/// One NIC as the spec wants it.
#[derive(Debug, Clone)]
struct Nic {
    device: String,
    /// None: keep the template's NIC as it is.
    dev: Option<NetworkDevice>,
    /// Static address from the `ipv4` / `ipv6` pool.
    v4: bool,
    v6: bool,
    dhcp4: bool,
    dhcp6: bool,
}

/// What a call works with.
struct Ctx<'a> {
    req: &'a MachineRequest,
    spec: MachineSpec,
    cluster: ClusterSpec,
    nics: Vec<Nic>,
    pve: Pve,
}

fn terminal(reason: &str, message: impl Into<String>) -> PluginError {
    PluginError::Terminal(TerminalError {
        reason: reason.into(),
        message: message.into(),
    })
}

fn transient(message: impl Into<String>, retry_after_ms: Option<u64>) -> PluginError {
    PluginError::Transient(TransientError {
        message: message.into(),
        retry_after_ms,
    })
}

/// The marker line in the VM description.
fn marker(uid: &str) -> String {
    format!("hyperplug.machine-uid={uid}")
}

/// A tag carrying the machine UID (PVE tags: `[a-z0-9_][a-z0-9_+.-]*`).
fn uid_tag(uid: &str) -> String {
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

fn owned_by(config: &Value, uid: &str) -> bool {
    let m = marker(uid);
    config
        .get("description")
        .and_then(Value::as_str)
        .is_some_and(|d| d.lines().any(|l| l.trim() == m))
}

fn description(spec: &MachineSpec, req: &MachineRequest) -> String {
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

fn str_of(v: &Value, key: &str) -> Option<String> {
    match v.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn u64_of(v: &Value, key: &str) -> Option<u64> {
    match v.get(key)? {
        Value::Number(n) => n.as_u64().or_else(|| n.as_f64().map(|f| f as u64)),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// `key=value` options of a PVE property string (the first bare item under `""`).
fn options(v: &str) -> Vec<(String, String)> {
    v.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (String::new(), p.to_string()),
        })
        .collect()
}

fn option(v: &str, key: &str) -> Option<String> {
    options(v)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

/// `10G`, `512M`, `1T`, plain bytes → bytes.
fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, unit) = match s.chars().last()? {
        c if c.is_ascii_alphabetic() => (&s[..s.len() - 1], c.to_ascii_uppercase()),
        _ => (s, 'B'),
    };
    let n: f64 = num.parse().ok()?;
    let mult = match unit {
        'B' => 1.0,
        'K' => 1024.0,
        'M' => 1024.0 * 1024.0,
        'G' => 1024.0 * 1024.0 * 1024.0,
        'T' => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some((n * mult) as u64)
}

fn is_drive_key(k: &str) -> bool {
    ["ide", "sata", "scsi", "virtio", "efidisk", "tpmstate"]
        .iter()
        .any(|p| {
            k.strip_prefix(p)
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
}

fn is_cloudinit_drive(v: &str) -> bool {
    v.split(',').next().is_some_and(|f| f.contains("cloudinit"))
}

fn uuid_of(config: &Value) -> Option<String> {
    str_of(config, "smbios1").and_then(|s| option(&s, "uuid"))
}

fn mac_of(net: &str) -> Option<String> {
    options(net).into_iter().find_map(|(k, v)| {
        let model = matches!(
            k.as_str(),
            "virtio" | "e1000" | "rtl8139" | "vmxnet3" | "e1000e" | "macaddr"
        );
        (model && v.contains(':')).then_some(v)
    })
}

fn model_name(m: NicModel) -> &'static str {
    match m {
        NicModel::E1000 => "e1000",
        NicModel::Virtio => "virtio",
        NicModel::Rtl8139 => "rtl8139",
        NicModel::Vmxnet3 => "vmxnet3",
    }
}

/// The machine's NICs: `net0` (the default device, or the template's NIC when the spec
/// has no network) and the additional devices.
fn plan_nics(spec: &MachineSpec, cluster: &ClusterSpec) -> Vec<Nic> {
    let has4 = cluster.ipv4_config.is_some();
    let has6 = cluster.ipv6_config.is_some();
    let nic = |device: String, dev: Option<NetworkDevice>| {
        let dhcp4 = dev.as_ref().and_then(|d| d.dhcp4).unwrap_or(!has4);
        let dhcp6 = dev.as_ref().and_then(|d| d.dhcp6).unwrap_or(false);
        Nic {
            device,
            v4: has4 && !dhcp4,
            v6: has6 && !dhcp6,
            dhcp4,
            dhcp6,
            dev,
        }
    };
    let net = spec.network.clone().unwrap_or_default();
    let mut nics = vec![nic("net0".into(), net.default.clone())];
    for extra in &net.additional_devices {
        nics.push(nic(extra.name.clone(), Some(extra.device.clone())));
    }
    nics
}

/// Checks the plugin can make (the schema has the rest).
fn validate(spec: &MachineSpec, cluster: &ClusterSpec) -> Result<(), PluginError> {
    match (&spec.template_id, &spec.template_selector) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "spec.templateSelector",
                "set either templateID (with sourceNode) or templateSelector, not both",
            ));
        }
        (None, None) => {
            return Err(invalid(
                "spec.templateID",
                "a template is required: templateID with sourceNode, or templateSelector",
            ));
        }
        (Some(_), None) if spec.source_node.as_deref().is_none_or(str::is_empty) => {
            return Err(invalid(
                "spec.sourceNode",
                "required with templateID: the node holding the template",
            ));
        }
        (None, Some(sel)) if sel.match_tags.is_empty() => {
            return Err(invalid(
                "spec.templateSelector.matchTags",
                "at least one tag is required",
            ));
        }
        _ => {}
    }
    if let Some(r) = &spec.vm_id_range {
        if r.start < 100 {
            return Err(invalid("spec.vmIDRange.start", "must be at least 100"));
        }
        if r.end < r.start {
            return Err(invalid(
                "spec.vmIDRange.end",
                format!("must not be below start ({})", r.start),
            ));
        }
    }
    if spec.full == Some(false) && (spec.storage.is_some() || spec.format.is_some()) {
        let field = if spec.storage.is_some() {
            "spec.storage"
        } else {
            "spec.format"
        };
        return Err(invalid(
            field,
            "only full clones (full: true) take a target storage or format",
        ));
    }
    for (i, t) in spec.tags.iter().enumerate() {
        let ok = t
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            && t.bytes().all(|b| {
                b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || matches!(b, b'_' | b'-' | b'.' | b'+')
            });
        if !ok {
            return Err(invalid(
                &format!("spec.tags[{i}]"),
                format!(
                    "`{t}` is not a Proxmox tag (lower-case letters, digits, `_`, `-`, `.`, `+`)"
                ),
            ));
        }
    }
    let drive = |d: &str| {
        ["ide", "sata", "scsi", "virtio"]
            .iter()
            .any(|p| d.strip_prefix(p).is_some_and(|n| n.parse::<u32>().is_ok()))
    };
    if let Some(disks) = &spec.disks {
        if let Some(b) = &disks.boot_volume
            && !drive(&b.disk)
        {
            return Err(invalid(
                "spec.disks.bootVolume.disk",
                format!("`{}` is not a disk device (e.g. scsi0)", b.disk),
            ));
        }
        let mut seen = BTreeSet::new();
        for (i, v) in disks.additional_volumes.iter().enumerate() {
            if !drive(&v.disk) || !seen.insert(v.disk.clone()) {
                return Err(invalid(
                    &format!("spec.disks.additionalVolumes[{i}].disk"),
                    format!("`{}` is not a free disk device (e.g. scsi1)", v.disk),
                ));
            }
        }
    }
    if let Some(net) = &spec.network {
        let mut seen = BTreeSet::from(["net0".to_string()]);
        for (i, d) in net.additional_devices.iter().enumerate() {
            if !seen.insert(d.name.clone()) || !d.name.starts_with("net") {
                return Err(invalid(
                    &format!("spec.network.additionalDevices[{i}].name"),
                    format!("`{}` is not a free NIC name (net1 ... net31)", d.name),
                ));
            }
        }
        let devices = net
            .default
            .iter()
            .map(|d| ("spec.network.default".to_string(), d))
            .chain(
                net.additional_devices
                    .iter()
                    .enumerate()
                    .map(|(i, d)| (format!("spec.network.additionalDevices[{i}]"), &d.device)),
            );
        for (path, d) in devices {
            if d.bridge.is_empty() {
                return Err(invalid(
                    &format!("{path}.bridge"),
                    "a bridge is required (e.g. vmbr0)",
                ));
            }
            if d.dhcp4 == Some(false) && cluster.ipv4_config.is_none() {
                return Err(invalid(
                    &format!("{path}.dhcp4"),
                    "static IPv4 needs the cluster's ipv4Config",
                ));
            }
            if d.dhcp6 == Some(false) && cluster.ipv6_config.is_none() {
                return Err(invalid(
                    &format!("{path}.dhcp6"),
                    "static IPv6 needs the cluster's ipv6Config",
                ));
            }
        }
    }
    if let Some(ci) = &spec.cloud_init
        && let Some(slot) = &ci.cd_slot
        && !(["ide", "sata", "scsi"].iter().any(|p| {
            slot.strip_prefix(p)
                .is_some_and(|n| n.parse::<u32>().is_ok())
        }))
    {
        return Err(invalid(
            "spec.cloudInit.cdSlot",
            format!("`{slot}` is not a CD slot (ide0-3, sata0-5, scsi0-30)"),
        ));
    }
    Ok(())
}

impl<'a> Ctx<'a> {
    fn new(req: &'a MachineRequest) -> Result<Ctx<'a>, PluginError> {
        let spec: MachineSpec = parse_spec(&req.spec, "spec")?;
        let cluster: ClusterSpec = if req.cluster_spec.trim().is_empty() {
            ClusterSpec::default()
        } else {
            parse_spec(&req.cluster_spec, "cluster.spec")?
        };
        validate(&spec, &cluster)?;
        let nics = plan_nics(&spec, &cluster);
        Ok(Ctx {
            req,
            spec,
            cluster,
            nics,
            pve: Pve::new(&req.credentials),
        })
    }

    fn uid(&self) -> &str {
        &self.req.machine.uid
    }

    fn address_requests(&self) -> Vec<AddressRequest> {
        let mut out = vec![];
        for n in &self.nics {
            if n.v4 {
                out.push(AddressRequest {
                    device: n.device.clone(),
                    pool: "ipv4".into(),
                });
            }
            if n.v6 {
                out.push(AddressRequest {
                    device: n.device.clone(),
                    pool: "ipv6".into(),
                });
            }
        }
        out
    }

    /// The allocated address for (device, v6?).
    fn allocated(&self, device: &str, v6: bool) -> Option<&AllocatedAddress> {
        self.req
            .addresses
            .iter()
            .find(|a| a.device == device && a.address.contains(':') == v6)
    }

    fn missing_addresses(&self) -> Vec<String> {
        let mut missing = vec![];
        for n in &self.nics {
            if n.v4 && self.allocated(&n.device, false).is_none() {
                missing.push(format!("{}/ipv4", n.device));
            }
            if n.v6 && self.allocated(&n.device, true).is_none() {
                missing.push(format!("{}/ipv6", n.device));
            }
        }
        missing
    }

    fn config_path(&self, st: &State) -> String {
        format!(
            "/nodes/{}/qemu/{}",
            percent_encode(st.node.as_deref().unwrap_or_default()),
            st.vmid.unwrap_or_default()
        )
    }

    fn get_config(&self, st: &State) -> Result<Value, PveError> {
        self.pve.get(&format!("{}/config", self.config_path(st)))
    }

    /// The VM's config, or an error when it is gone or not ours.
    fn owned_config(&self, st: &State, context: &str) -> Result<Value, PluginError> {
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
    fn find_owned(&self) -> Result<Option<(String, u32, Value)>, PluginError> {
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

    fn details(&self, st: &State) -> Vec<(String, String)> {
        let mut d = vec![];
        if let Some(n) = &st.node {
            d.push(("node".into(), n.clone()));
        }
        if let Some(v) = st.vmid {
            d.push(("vmid".into(), v.to_string()));
        }
        d
    }

    fn addresses(&self, st: &State) -> Vec<MachineAddress> {
        let mut out = vec![];
        for n in &self.nics {
            for v6 in [false, true] {
                if (!v6 && n.v4 || v6 && n.v6)
                    && let Some(a) = self.allocated(&n.device, v6)
                {
                    out.push(MachineAddress {
                        address_type: AddressType::InternalIp,
                        address: a.address.clone(),
                    });
                }
            }
            for a in st.dhcp.get(&n.device).into_iter().flatten() {
                out.push(MachineAddress {
                    address_type: AddressType::InternalIp,
                    address: a.clone(),
                });
            }
        }
        out.push(MachineAddress {
            address_type: AddressType::Hostname,
            address: self.req.machine.name.clone(),
        });
        out
    }

    fn status(
        &self,
        st: &State,
        phase: &str,
        message: impl Into<String>,
        requeue: Option<u64>,
    ) -> MachineStatus {
        let ready = st.step == Step::Ready;
        MachineStatus {
            progress: Progress {
                state: serde_json::to_string(st).unwrap_or_default(),
                phase: phase.into(),
                message: message.into(),
                requeue_after_ms: requeue,
            },
            ready,
            provider_id: if ready {
                st.uuid.as_ref().map(|u| format!("proxmox://{u}"))
            } else {
                None
            },
            addresses: if ready { self.addresses(st) } else { vec![] },
            failure_domain: st.node.clone(),
            address_requests: self.address_requests(),
            needs_bootstrap: false,
            drift: None,
            details: self.details(st),
        }
    }
}

fn load_state(req: &MachineRequest) -> State {
    req.state
        .as_deref()
        .filter(|s| !s.trim().is_empty())
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default()
}

/// A task poll: `Ok(true)` done, `Ok(false)` still running, `Err(text)` failed.
fn poll(pve: &Pve, upid: &str, context: &str) -> Result<Result<bool, String>, PluginError> {
    match pve.task(upid) {
        Ok(Task::Running) => Ok(Ok(false)),
        Ok(Task::Done) => Ok(Ok(true)),
        Ok(Task::Failed(msg)) => Ok(Err(msg)),
        Err(e) => Err(e.classify(context)),
    }
}

/// A failed task: terminal when PVE's text says retrying will not help.
fn task_failed(context: &str, msg: &str) -> Option<PluginError> {
    classify_message(msg).map(|reason| terminal(reason, format!("{context}: {msg}")))
}

fn upid_of(v: Value) -> Option<String> {
    v.as_str()
        .map(str::to_string)
        .filter(|s| s.starts_with("UPID:"))
}

// ---------------------------------------------------------------------------------
// create
// ---------------------------------------------------------------------------------

fn create(req: &MachineRequest) -> Result<MachineStatus, PluginError> {
    let cx = Ctx::new(req)?;
    let mut st = load_state(req);
    let missing = cx.missing_addresses();
    if !missing.is_empty() && st.vmid.is_none() {
        return Ok(cx.status(
            &st,
            "WaitingForAddresses",
            format!("waiting for IPAM addresses: {}", missing.join(", ")),
            None,
        ));
    }
    // Bounded: every arm either advances the step or returns.
    for _ in 0..12 {
        match st.step {
            Step::Start => {
                if let Some(s) = start(&cx, &mut st)? {
                    return Ok(s);
                }
            }
            Step::Cloning => {
                if let Some(s) = cloning(&cx, &mut st)? {
                    return Ok(s);
                }
            }
            Step::Configuring => configuring(&cx, &mut st)?,
            Step::Resizing => {
                if let Some(s) = resizing(&cx, &mut st)? {
                    return Ok(s);
                }
            }
            Step::UploadingCloudInit => {
                if let Some(s) = uploading(&cx, &mut st)? {
                    return Ok(s);
                }
            }
            Step::Attaching => attaching(&cx, &mut st)?,
            Step::PoweringOn => {
                if let Some(s) = powering_on(&cx, &mut st)? {
                    return Ok(s);
                }
            }
            Step::WaitingForGuestAgent => {
                if let Some(s) = waiting_for_agent(&cx, &mut st)? {
                    return Ok(s);
                }
            }
            Step::Ejecting => ejecting(&cx, &mut st)?,
            Step::Ready => {
                let msg = format!(
                    "VM {} running on {}",
                    st.vmid.unwrap_or_default(),
                    st.node.as_deref().unwrap_or_default()
                );
                return Ok(cx.status(&st, "Ready", msg, None));
            }
        }
    }
    Ok(cx.status(&st, "Configuring", "continuing", Some(SHORT_MS)))
}

/// No VM recorded: adopt ours if it exists, else pick a node and a VMID and clone.
fn start(cx: &Ctx, st: &mut State) -> Result<Option<MachineStatus>, PluginError> {
    if let Some((node, vmid, config)) = cx.find_owned()? {
        log(
            Level::Info,
            "adopting the existing VM of this machine",
            &[("vmid", vmid.to_string()), ("node", node.clone())],
        );
        st.node = Some(node);
        st.vmid = Some(vmid);
        st.uuid = uuid_of(&config);
        st.upid = None;
        st.step = if str_of(&config, "lock").as_deref() == Some("clone") {
            Step::Cloning
        } else {
            Step::Configuring
        };
        // A running VM has booted from its seed already: only its addresses are missing.
        if st.step == Step::Configuring {
            let current = cx
                .pve
                .get(&format!("{}/status/current", cx.config_path(st)))
                .map_err(|e| e.classify("reading the adopted VM's status"))?;
            if str_of(&current, "status").as_deref() == Some("running") {
                st.step = Step::WaitingForGuestAgent;
            }
        }
        return Ok(None);
    }
    let (src_node, template) = resolve_template(cx)?;
    let node = pick_node(cx)?;
    let full = cx.spec.full.unwrap_or(true);
    let mut form: Vec<(&str, String)> = vec![
        ("name", cx.req.machine.name.clone()),
        ("description", description(&cx.spec, cx.req)),
        ("full", if full { "1" } else { "0" }.into()),
    ];
    if node != src_node {
        form.push(("target", node.clone()));
    }
    if full {
        if let Some(s) = &cx.spec.storage {
            form.push(("storage", s.clone()));
        }
        if let Some(f) = cx.spec.format {
            let f = serde_json::to_value(f)
                .ok()
                .and_then(|v| v.as_str().map(String::from));
            form.push(("format", f.unwrap_or_default()));
        }
    }
    if let Some(p) = &cx.spec.pool {
        form.push(("pool", p.clone()));
    }
    if let Some(s) = &cx.spec.snap_name {
        form.push(("snapname", s.clone()));
    }
    let path = format!("/nodes/{}/qemu/{template}/clone", percent_encode(&src_node));
    let mut tried = BTreeSet::new();
    for attempt in 0..VMID_TRIES {
        let Some(vmid) = next_vmid(cx, attempt, &tried)? else {
            break;
        };
        tried.insert(vmid);
        let mut f = form.clone();
        f.push(("newid", vmid.to_string()));
        match cx.pve.post(&path, &f) {
            Ok(v) => {
                log(
                    Level::Info,
                    "cloning",
                    &[
                        ("vmid", vmid.to_string()),
                        ("node", node.clone()),
                        ("template", template.to_string()),
                    ],
                );
                st.node = Some(node);
                st.vmid = Some(vmid);
                st.upid = upid_of(v);
                st.step = Step::Cloning;
                return Ok(None);
            }
            Err(e) if vmid_taken(&e) => {
                log(
                    Level::Debug,
                    "VMID taken, trying another",
                    &[("vmid", vmid.to_string())],
                );
                continue;
            }
            Err(e) if e.is_not_found() && e.to_string().contains(&format!("/{template}.conf")) => {
                return Err(terminal(
                    "TemplateNotFound",
                    format!("cloning template {template} on {src_node}: {e}"),
                ));
            }
            Err(e) => return Err(e.classify(&format!("cloning template {template} to VM {vmid}"))),
        }
    }
    Err(transient(
        format!(
            "no free VMID after {} tries ({})",
            tried.len(),
            match &cx.spec.vm_id_range {
                Some(r) => format!("vmIDRange {}-{}", r.start, r.end),
                None => "cluster nextid".into(),
            }
        ),
        Some(RETRY_MS),
    ))
}

fn vmid_taken(e: &PveError) -> bool {
    match e {
        PveError::Status {
            message, errors, ..
        } => {
            message.contains("already exists")
                || errors
                    .as_ref()
                    .is_some_and(|e| e.to_string().contains("already exists"))
        }
        _ => false,
    }
}

/// The next VMID to propose (the clone verifies it).
fn next_vmid(cx: &Ctx, attempt: u32, tried: &BTreeSet<u32>) -> Result<Option<u32>, PluginError> {
    let spread = fnv1a(cx.uid().as_bytes());
    if let Some(r) = &cx.spec.vm_id_range {
        let used = used_vmids(cx)?;
        let size = u64::from(r.end - r.start) + 1;
        let offset = spread % size;
        let pick = (0..size)
            .map(|i| r.start + ((offset + i) % size) as u32)
            .find(|id| !used.contains(id) && !tried.contains(id));
        if pick.is_none() && attempt == 0 {
            return Err(transient(
                format!(
                    "vmIDRange {}-{} is exhausted: every ID is in use",
                    r.start, r.end
                ),
                Some(RETRY_MS * 6),
            ));
        }
        return Ok(pick);
    }
    let next = cx
        .pve
        .get("/cluster/nextid")
        .map_err(|e| e.classify("asking for the next free VMID"))?;
    let base: u32 = match &next {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_u64().map(|n| n as u32),
        _ => None,
    }
    .ok_or_else(|| transient(format!("unreadable nextid reply {next}"), None))?;
    let mut id = if attempt == 0 {
        base
    } else {
        base + ((spread >> (attempt % 16)) % u64::from(4 * attempt)) as u32
    };
    while tried.contains(&id) {
        id += 1;
    }
    Ok(Some(id))
}

fn used_vmids(cx: &Ctx) -> Result<BTreeSet<u32>, PluginError> {
    let vms = cx
        .pve
        .get("/cluster/resources?type=vm")
        .map_err(|e| e.classify("listing VMs"))?;
    Ok(vms
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| u64_of(v, "vmid").map(|n| n as u32))
        .collect())
}

/// (node, VMID) of the template to clone.
fn resolve_template(cx: &Ctx) -> Result<(String, u32), PluginError> {
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

/// The node for a new VM: CAPI's failure domain if given, else the allowed node with
/// the most free memory (node memory × memoryAdjustment% minus the memory of its VMs;
/// 0 disables the check) that has at least as many CPUs as the VM.
fn pick_node(cx: &Ctx) -> Result<String, PluginError> {
    if let Some(fd) = &cx.req.failure_domain
        && !fd.is_empty()
    {
        return Ok(fd.clone());
    }
    let allowed: Vec<String> = if !cx.spec.allowed_nodes.is_empty() {
        cx.spec.allowed_nodes.clone()
    } else {
        cx.cluster.allowed_nodes.clone()
    };
    let all = cx
        .pve
        .get("/cluster/resources")
        .map_err(|e| e.classify("reading cluster resources"))?;
    let items: Vec<&Value> = all.as_array().into_iter().flatten().collect();
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
    for n in items
        .iter()
        .filter(|v| v.get("type").and_then(Value::as_str) == Some("node"))
    {
        let Some(name) = str_of(n, "node") else {
            continue;
        };
        if !allowed.is_empty() && !allowed.contains(&name) {
            continue;
        }
        if str_of(n, "status").as_deref() != Some("online") {
            refused.push(format!("{name}: offline"));
            continue;
        }
        let cpus = u64_of(n, "maxcpu").unwrap_or(0);
        if cpus > 0 && need_cpu > cpus {
            refused.push(format!("{name}: {cpus} CPUs < {need_cpu}"));
            continue;
        }
        let total = u64_of(n, "maxmem").unwrap_or(0);
        let used: u64 = items
            .iter()
            .filter(|v| matches!(v.get("type").and_then(Value::as_str), Some("qemu" | "lxc")))
            .filter(|v| str_of(v, "node").as_deref() == Some(name.as_str()))
            .filter(|v| u64_of(v, "template") != Some(1))
            .filter_map(|v| u64_of(v, "maxmem"))
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

fn cloning(cx: &Ctx, st: &mut State) -> Result<Option<MachineStatus>, PluginError> {
    if let Some(upid) = st.upid.clone() {
        match poll(&cx.pve, &upid, "following the clone task")? {
            Ok(false) => {
                return Ok(Some(cx.status(
                    st,
                    "Cloning",
                    "clone task running",
                    Some(SHORT_MS),
                )));
            }
            Ok(true) => {}
            Err(msg) => {
                if let Some(e) = task_failed("clone task failed", &msg) {
                    return Err(e);
                }
                let vmid = st.vmid.unwrap_or_default();
                *st = State::default();
                return Ok(Some(cx.status(
                    st,
                    "Cloning",
                    format!("clone to VM {vmid} failed ({msg}); retrying with a new clone"),
                    Some(RETRY_MS),
                )));
            }
        }
    }
    // Adopted mid-clone (or the task is done): the VM is ready once the lock is gone.
    match cx.get_config(st) {
        Ok(c) if str_of(&c, "lock").as_deref() == Some("clone") => {
            st.upid = None;
            Ok(Some(cx.status(
                st,
                "Cloning",
                "VM still locked by its clone",
                Some(SHORT_MS),
            )))
        }
        Ok(c) => {
            st.uuid = uuid_of(&c);
            st.upid = None;
            st.step = Step::Configuring;
            Ok(None)
        }
        Err(e) if e.is_not_found() => {
            // The clone failed and PVE removed the VM: start over.
            *st = State::default();
            Ok(Some(cx.status(
                st,
                "Cloning",
                "the cloned VM is gone; cloning again",
                Some(SHORT_MS),
            )))
        }
        Err(e) => Err(e.classify("reading the cloned VM")),
    }
}

/// CPU, memory, NICs, tags, description, extra disks, cloud-init drive out; picks the
/// CD slot for the NoCloud ISO.
fn configuring(cx: &Ctx, st: &mut State) -> Result<(), PluginError> {
    let config = cx.owned_config(st, "configuring the VM")?;
    st.uuid = uuid_of(&config);
    let mut form: Vec<(&str, String)> = vec![];
    if let Some(v) = cx.spec.num_sockets {
        form.push(("sockets", v.to_string()));
    }
    if let Some(v) = cx.spec.num_cores {
        form.push(("cores", v.to_string()));
    }
    if let Some(v) = cx.spec.memory_mib {
        form.push(("memory", v.to_string()));
    }
    let mut nets: Vec<(String, String)> = vec![];
    for nic in &cx.nics {
        let Some(dev) = &nic.dev else { continue };
        let model = model_name(dev.model.unwrap_or(NicModel::Virtio));
        let existing = str_of(&config, &nic.device).unwrap_or_default();
        let mut value = match mac_of(&existing) {
            Some(mac) => format!("{model}={mac}"),
            None => model.to_string(),
        };
        value.push_str(&format!(",bridge={}", dev.bridge));
        if let Some(v) = dev.vlan {
            value.push_str(&format!(",tag={v}"));
        }
        if let Some(m) = dev.mtu {
            value.push_str(&format!(",mtu={m}"));
        }
        if option(&existing, "firewall").as_deref() == Some("1") {
            value.push_str(",firewall=1");
        }
        nets.push((nic.device.clone(), value));
    }
    let mut tags: BTreeSet<String> = cx
        .spec
        .tags
        .iter()
        .map(|t| t.to_ascii_lowercase())
        .collect();
    tags.insert("hyperplug".into());
    tags.insert(uid_tag(cx.uid()));
    form.push(("tags", tags.into_iter().collect::<Vec<_>>().join(";")));
    // PVE's own cloud-init drive would be a second, conflicting datasource.
    let delete: Vec<String> = config
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, v)| is_drive_key(k) && v.as_str().is_some_and(is_cloudinit_drive))
        .map(|(k, _)| k.clone())
        .collect();
    if cx
        .spec
        .checks
        .as_ref()
        .and_then(|c| c.skip_qemu_guest_agent)
        != Some(true)
        && config.get("agent").is_none()
    {
        form.push(("agent", "1".into()));
    }
    let boot_storage = cx
        .spec
        .disks
        .as_ref()
        .and_then(|d| d.boot_volume.as_ref())
        .and_then(|b| str_of(&config, &b.disk))
        .or_else(|| {
            config.as_object().into_iter().flatten().find_map(|(k, v)| {
                let v = v.as_str()?;
                (is_drive_key(k) && !v.contains("media=cdrom")).then(|| v.to_string())
            })
        })
        .and_then(|v| {
            v.split(',')
                .next()
                .and_then(|f| f.split_once(':'))
                .map(|(s, _)| s.to_string())
        });
    let mut extra: Vec<(String, String)> = vec![];
    for (i, vol) in cx
        .spec
        .disks
        .as_ref()
        .map(|d| d.additional_volumes.as_slice())
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        if config.get(&vol.disk).is_some() {
            continue;
        }
        let storage = vol
            .storage
            .clone()
            .or_else(|| cx.spec.storage.clone())
            .or_else(|| boot_storage.clone())
            .ok_or_else(|| {
                invalid(
                    &format!("spec.disks.additionalVolumes[{i}].storage"),
                    "no storage given and none can be derived from the boot disk",
                )
            })?;
        let mut value = format!("{storage}:{}", vol.size_gb);
        if let Some(f) = cx.spec.format {
            let f = serde_json::to_value(f)
                .ok()
                .and_then(|v| v.as_str().map(String::from));
            if let Some(f) = f {
                value.push_str(&format!(",format={f}"));
            }
        }
        extra.push((vol.disk.clone(), value));
    }
    // The CD slot: the spec's, else ide2 when free (or only PVE's cloud-init drive),
    // else the first free IDE/SATA slot.
    let free = |k: &str| config.get(k).is_none() || delete.iter().any(|d| d == k);
    let slot = match cx.spec.cloud_init.as_ref().and_then(|c| c.cd_slot.clone()) {
        Some(s) => {
            let current = str_of(&config, &s).unwrap_or_default();
            if !free(&s) && !current.contains("media=cdrom") {
                return Err(invalid(
                    "spec.cloudInit.cdSlot",
                    format!("{s} holds a disk ({current}) in the template"),
                ));
            }
            s
        }
        None => [
            "ide2", "ide0", "ide1", "ide3", "sata0", "sata1", "sata2", "sata3", "sata4", "sata5",
        ]
        .iter()
        .find(|k| free(k) || str_of(&config, k).is_some_and(|v| v.starts_with("none,")))
        .map(|s| s.to_string())
        .ok_or_else(|| {
            terminal(
                "NoFreeCDSlot",
                "no free IDE or SATA slot for the cloud-init ISO; set spec.cloudInit.cdSlot",
            )
        })?,
    };
    st.cd_slot = Some(slot);
    let mut f: Vec<(&str, String)> = form;
    let nets_ref: Vec<(&str, String)> = nets.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    f.extend(nets_ref);
    let extra_ref: Vec<(&str, String)> =
        extra.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    f.extend(extra_ref);
    if !delete.is_empty() {
        f.push(("delete", delete.join(",")));
    }
    if let Some(d) = str_of(&config, "digest") {
        f.push(("digest", d));
    }
    cx.pve
        .put(&format!("{}/config", cx.config_path(st)), &f)
        .map_err(|e| e.classify("configuring the VM"))?;
    st.step = Step::Resizing;
    Ok(())
}

fn resizing(cx: &Ctx, st: &mut State) -> Result<Option<MachineStatus>, PluginError> {
    let Some(boot) = cx.spec.disks.as_ref().and_then(|d| d.boot_volume.clone()) else {
        st.step = Step::UploadingCloudInit;
        return Ok(None);
    };
    if let Some(upid) = st.upid.clone() {
        match poll(&cx.pve, &upid, "following the resize task")? {
            Ok(false) => {
                return Ok(Some(cx.status(
                    st,
                    "Resizing",
                    format!("growing {}", boot.disk),
                    Some(SHORT_MS),
                )));
            }
            Ok(true) => {
                st.upid = None;
                st.step = Step::UploadingCloudInit;
                return Ok(None);
            }
            Err(msg) => {
                if let Some(e) = task_failed(&format!("resizing {}", boot.disk), &msg) {
                    return Err(e);
                }
                st.upid = None;
                return Ok(Some(cx.status(
                    st,
                    "Resizing",
                    format!("resizing {} failed ({msg}); retrying", boot.disk),
                    Some(RETRY_MS),
                )));
            }
        }
    }
    let config = cx.owned_config(st, "resizing the boot disk")?;
    let Some(drive) = str_of(&config, &boot.disk) else {
        return Err(invalid(
            "spec.disks.bootVolume.disk",
            format!("the VM has no disk {}", boot.disk),
        ));
    };
    let current = option(&drive, "size")
        .and_then(|s| parse_size(&s))
        .unwrap_or(0);
    let want = u64::from(boot.size_gb) << 30;
    if current >= want {
        st.step = Step::UploadingCloudInit;
        return Ok(None);
    }
    let v = cx
        .pve
        .put(
            &format!("{}/resize", cx.config_path(st)),
            &[
                ("disk", boot.disk.clone()),
                ("size", format!("{}G", boot.size_gb)),
            ],
        )
        .map_err(|e| e.classify(&format!("resizing {}", boot.disk)))?;
    match upid_of(v) {
        // PVE before 8 resizes synchronously.
        None => {
            st.step = Step::UploadingCloudInit;
            Ok(None)
        }
        Some(upid) => {
            st.upid = Some(upid);
            Ok(None)
        }
    }
}

/// The ISO's storage: the spec's, else the node's first (by name) active file-based
/// storage with `iso` content.
fn iso_storage(cx: &Ctx, node: &str) -> Result<String, PluginError> {
    if let Some(s) = cx
        .spec
        .cloud_init
        .as_ref()
        .and_then(|c| c.iso_storage.clone())
    {
        return Ok(s);
    }
    let list = cx
        .pve
        .get(&format!(
            "/nodes/{}/storage?content=iso",
            percent_encode(node)
        ))
        .map_err(|e| e.classify("listing ISO storages"))?;
    let mut names: Vec<String> = list
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| u64_of(s, "active").unwrap_or(1) == 1 && u64_of(s, "enabled").unwrap_or(1) == 1)
        .filter(|s| {
            matches!(
                str_of(s, "type").as_deref(),
                Some("dir" | "nfs" | "cifs" | "cephfs" | "glusterfs" | "btrfs")
            )
        })
        .filter(|s| str_of(s, "content").is_some_and(|c| c.split(',').any(|x| x == "iso")))
        .filter_map(|s| str_of(s, "storage"))
        .collect();
    names.sort();
    names.into_iter().next().ok_or_else(|| {
        terminal(
            "NoISOStorage",
            format!("node {node} has no directory storage with `iso` content; set spec.cloudInit.isoStorage"),
        )
    })
}

fn iso_name(cx: &Ctx, vmid: u32) -> String {
    let uid = uid_tag(cx.uid());
    format!("hyperplug-{vmid}-{}.iso", &uid[3..])
}

/// Builds the NoCloud seed for this machine from the VM's config (MACs, UUID).
fn seed(cx: &Ctx, config: &Value, bootstrap: Vec<u8>, uuid: &str) -> guest_nocloud::Seed {
    let mut interfaces = vec![];
    for (i, nic) in cx.nics.iter().enumerate() {
        let mac = str_of(config, &nic.device)
            .and_then(|n| mac_of(&n))
            .unwrap_or_default();
        let mut iface = guest_nocloud::Interface {
            name: format!("eth{i}"),
            mac,
            dhcp4: nic.dhcp4,
            dhcp6: nic.dhcp6,
            mtu: nic.dev.as_ref().and_then(|d| d.mtu),
            ..Default::default()
        };
        for v6 in [false, true] {
            if !(if v6 { nic.v6 } else { nic.v4 }) {
                continue;
            }
            if let Some(a) = cx.allocated(&nic.device, v6) {
                iface.addresses.push(format!("{}/{}", a.address, a.prefix));
                // The default route only on the first NIC with a gateway.
                let gw = a.gateway.clone().filter(|g| !g.is_empty());
                let first = !interfaces.iter().any(|x: &guest_nocloud::Interface| {
                    if v6 {
                        x.gateway6.is_some()
                    } else {
                        x.gateway4.is_some()
                    }
                });
                if first {
                    if v6 {
                        iface.gateway6 = gw;
                    } else {
                        iface.gateway4 = gw;
                        iface.metric = cx.cluster.ipv4_config.as_ref().and_then(|c| c.metric);
                    }
                }
            }
        }
        interfaces.push(iface);
    }
    guest_nocloud::Seed {
        user_data: bootstrap,
        meta_data: guest_nocloud::MetaData {
            instance_id: cx.uid().to_string(),
            hostname: cx.req.machine.name.clone(),
            provider_id: Some(format!("proxmox://{uuid}")),
        },
        network: Some(guest_nocloud::NetworkConfig {
            interfaces,
            dns_servers: cx.cluster.dns_servers.clone(),
        }),
    }
}

fn uploading(cx: &Ctx, st: &mut State) -> Result<Option<MachineStatus>, PluginError> {
    let node = st.node.clone().unwrap_or_default();
    if let Some(upid) = st.upid.clone() {
        match poll(&cx.pve, &upid, "following the ISO upload")? {
            Ok(false) => {
                return Ok(Some(cx.status(
                    st,
                    "UploadingCloudInit",
                    "uploading the NoCloud ISO",
                    Some(SHORT_MS),
                )));
            }
            Ok(true) => {
                st.upid = None;
                st.step = Step::Attaching;
                return Ok(None);
            }
            Err(msg) => {
                if let Some(e) = task_failed("uploading the NoCloud ISO", &msg) {
                    return Err(e);
                }
                st.upid = None;
                return Ok(Some(cx.status(
                    st,
                    "UploadingCloudInit",
                    format!("ISO upload failed ({msg}); retrying"),
                    Some(RETRY_MS),
                )));
            }
        }
    }
    let Some(bootstrap) = &cx.req.bootstrap else {
        let mut s = cx.status(
            st,
            "WaitingForBootstrapData",
            "VM cloned and configured; waiting for the bootstrap data",
            Some(BOOTSTRAP_MS),
        );
        s.needs_bootstrap = true;
        return Ok(Some(s));
    };
    if !matches!(bootstrap.format.as_str(), "cloud-config" | "ignition") {
        return Err(terminal(
            "UnsupportedBootstrapFormat",
            format!(
                "bootstrap format `{}`: only cloud-config and ignition are supported",
                bootstrap.format
            ),
        ));
    }
    let config = cx.owned_config(st, "building the NoCloud ISO")?;
    let uuid = uuid_of(&config)
        .ok_or_else(|| transient("the VM has no smbios1 uuid yet", Some(SHORT_MS)))?;
    st.uuid = Some(uuid.clone());
    let storage = iso_storage(cx, &node)?;
    let name = iso_name(cx, st.vmid.unwrap_or_default());
    let volid = format!("{storage}:iso/{name}");
    let image = seed(cx, &config, bootstrap.value.clone(), &uuid)
        .iso()
        .map_err(|e| terminal("CloudInitISO", e.to_string()))?;
    // An ISO left by an earlier attempt (lost state) is replaced: its content may differ.
    let content = cx
        .pve
        .get(&format!(
            "/nodes/{}/storage/{}/content?content=iso",
            percent_encode(&node),
            percent_encode(&storage)
        ))
        .map_err(|e| e.classify("listing ISO images"))?;
    let exists = content
        .as_array()
        .into_iter()
        .flatten()
        .any(|v| str_of(v, "volid").as_deref() == Some(volid.as_str()));
    if exists {
        let attached = config
            .as_object()
            .into_iter()
            .flatten()
            .any(|(_, v)| v.as_str().is_some_and(|s| s.starts_with(&volid)));
        if attached {
            st.iso = Some(volid);
            st.step = Step::Attaching;
            return Ok(None);
        }
        delete_volume(&cx.pve, &node, &volid)?;
    }
    st.iso = Some(volid);
    let v = cx
        .pve
        .upload(&node, &storage, "iso", &name, &image)
        .map_err(|e| e.classify(&format!("uploading the NoCloud ISO to {storage}")))?;
    match upid_of(v) {
        Some(upid) => st.upid = Some(upid),
        None => st.step = Step::Attaching,
    }
    Ok(None)
}

fn delete_volume(pve: &Pve, node: &str, volid: &str) -> Result<(), PluginError> {
    let storage = volid.split(':').next().unwrap_or_default();
    match pve.delete(
        &format!(
            "/nodes/{}/storage/{}/content/{}",
            percent_encode(node),
            percent_encode(storage),
            percent_encode(volid)
        ),
        &[],
    ) {
        Ok(_) => Ok(()),
        Err(e) if e.to_string().contains("does not exist") => Ok(()),
        Err(e) => Err(e.classify(&format!("deleting {volid}"))),
    }
}

fn attaching(cx: &Ctx, st: &mut State) -> Result<(), PluginError> {
    let config = cx.owned_config(st, "attaching the NoCloud ISO")?;
    let slot = st.cd_slot.clone().unwrap_or_else(|| "ide2".into());
    let volid = st.iso.clone().unwrap_or_default();
    let mut form = vec![(slot.as_str(), format!("{volid},media=cdrom"))];
    if let Some(d) = str_of(&config, "digest") {
        form.push(("digest", d));
    }
    cx.pve
        .put(&format!("{}/config", cx.config_path(st)), &form)
        .map_err(|e| e.classify("attaching the NoCloud ISO"))?;
    st.step = Step::PoweringOn;
    Ok(())
}

fn powering_on(cx: &Ctx, st: &mut State) -> Result<Option<MachineStatus>, PluginError> {
    if let Some(upid) = st.upid.clone() {
        match poll(&cx.pve, &upid, "following the start task")? {
            Ok(false) => {
                return Ok(Some(cx.status(
                    st,
                    "PoweringOn",
                    "start task running",
                    Some(SHORT_MS),
                )));
            }
            Ok(true) => {
                st.upid = None;
                st.step = Step::WaitingForGuestAgent;
                return Ok(None);
            }
            Err(msg) => {
                if let Some(e) = task_failed("starting the VM", &msg) {
                    return Err(e);
                }
                st.upid = None;
                return Ok(Some(cx.status(
                    st,
                    "PoweringOn",
                    format!("start failed ({msg}); retrying"),
                    Some(RETRY_MS),
                )));
            }
        }
    }
    let current = cx
        .pve
        .get(&format!("{}/status/current", cx.config_path(st)))
        .map_err(|e| e.classify("reading the VM status"))?;
    if str_of(&current, "status").as_deref() == Some("running") {
        st.step = Step::WaitingForGuestAgent;
        return Ok(None);
    }
    cx.owned_config(st, "starting the VM")?;
    let v = cx
        .pve
        .post(&format!("{}/status/start", cx.config_path(st)), &[])
        .map_err(|e| e.classify("starting the VM"))?;
    st.upid = upid_of(v);
    Ok(None)
}

fn waiting_for_agent(cx: &Ctx, st: &mut State) -> Result<Option<MachineStatus>, PluginError> {
    let checks = cx.spec.checks.clone().unwrap_or_default();
    if checks.skip_qemu_guest_agent == Some(true) {
        // Without the agent nothing tells when the guest has read the ISO: keep it
        // attached (delete removes it).
        st.step = Step::Ready;
        return Ok(None);
    }
    let base = cx.config_path(st);
    let wait = |st: &State, msg: String| {
        Ok(Some(cx.status(
            st,
            "WaitingForGuestAgent",
            msg,
            Some(BOOT_MS),
        )))
    };
    let ifaces = match cx.pve.get(&format!("{base}/agent/network-get-interfaces")) {
        Ok(v) => v,
        Err(PveError::Status {
            status: 500,
            message,
            ..
        }) => {
            return wait(st, format!("guest agent not answering yet: {message}"));
        }
        Err(e) => return Err(e.classify("asking the guest agent")),
    };
    let list: Vec<Value> = ifaces
        .get("result")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let config = cx.owned_config(st, "reading the VM's NICs")?;
    let mut dhcp = BTreeMap::new();
    for nic in cx.nics.iter().filter(|n| n.dhcp4 || n.dhcp6) {
        let Some(mac) = str_of(&config, &nic.device).and_then(|n| mac_of(&n)) else {
            continue;
        };
        let addrs: Vec<String> = list
            .iter()
            .filter(|i| str_of(i, "hardware-address").is_some_and(|m| m.eq_ignore_ascii_case(&mac)))
            .flat_map(|i| {
                i.get("ip-addresses")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|a| {
                let ip = str_of(&a, "ip-address")?;
                let v6 = str_of(&a, "ip-address-type").as_deref() == Some("ipv6");
                let wanted = if v6 { nic.dhcp6 } else { nic.dhcp4 };
                (wanted && !ip.starts_with("fe80") && !ip.starts_with("127.") && ip != "::1")
                    .then_some(ip)
            })
            .collect();
        if addrs.is_empty() {
            return wait(st, format!("waiting for a DHCP address on {}", nic.device));
        }
        dhcp.insert(nic.device.clone(), addrs);
    }
    if checks.skip_cloud_init_status != Some(true) {
        // cloud-init applied our meta-data once the guest carries its hostname.
        let host = cx
            .pve
            .get(&format!("{base}/agent/get-host-name"))
            .ok()
            .and_then(|v| v.get("result").and_then(|r| str_of(r, "host-name")));
        let want = &cx.req.machine.name;
        if host.as_deref().map(|h| h.split('.').next().unwrap_or(h)) != Some(want.as_str()) {
            return wait(
                st,
                format!(
                    "waiting for cloud-init to apply the hostname {want} (guest says {})",
                    host.as_deref().unwrap_or("nothing")
                ),
            );
        }
    }
    st.dhcp = dhcp;
    st.step = Step::Ejecting;
    Ok(None)
}

/// Booted: eject the ISO (media change works on a running VM) and delete it.
fn ejecting(cx: &Ctx, st: &mut State) -> Result<(), PluginError> {
    let node = st.node.clone().unwrap_or_default();
    if let Some(volid) = st.iso.clone() {
        let config = cx.owned_config(st, "ejecting the NoCloud ISO")?;
        let slot = st.cd_slot.clone().unwrap_or_else(|| "ide2".into());
        if str_of(&config, &slot).is_some_and(|v| v.starts_with(&volid)) {
            cx.pve
                .put(
                    &format!("{}/config", cx.config_path(st)),
                    &[(slot.as_str(), "none,media=cdrom".to_string())],
                )
                .map_err(|e| e.classify("ejecting the NoCloud ISO"))?;
        }
        delete_volume(&cx.pve, &node, &volid)?;
        st.iso = None;
    }
    st.step = Step::Ready;
    Ok(())
}

// ---------------------------------------------------------------------------------
// describe
// ---------------------------------------------------------------------------------

fn describe(req: &MachineRequest) -> Result<MachineStatus, PluginError> {
    let cx = Ctx::new(req)?;
    let mut st = load_state(req);
    let phase = phase_of(st.step);
    let Some(vmid) = st.vmid else {
        return match cx.find_owned()? {
            Some((node, vmid, _)) => {
                let probe = State {
                    node: Some(node),
                    vmid: Some(vmid),
                    ..State::default()
                };
                {
                    let mut s = cx.status(
                        &probe,
                        "Pending",
                        "this machine's VM exists but is not recorded: create adopts it",
                        None,
                    );
                    // Describe changes nothing: the state handed back is the one given.
                    s.progress.state = serde_json::to_string(&st).unwrap_or_default();
                    Ok(s)
                }
            }
            None => Ok(cx.status(&st, phase, "no VM yet", None)),
        };
    };
    let config = match cx.get_config(&st) {
        Ok(c) => c,
        Err(e) if e.is_not_found() => {
            // Moved to another node (migration)?
            let moved = cx
                .pve
                .get("/cluster/resources?type=vm")
                .map_err(|e| e.classify("listing VMs"))?
                .as_array()
                .into_iter()
                .flatten()
                .find(|v| u64_of(v, "vmid") == Some(u64::from(vmid)))
                .and_then(|v| str_of(v, "node"));
            match moved {
                Some(n) => {
                    st.node = Some(n);
                    cx.get_config(&st)
                        .map_err(|e| e.classify("reading the VM"))?
                }
                None => {
                    let mut s = cx.status(&st, phase, format!("VM {vmid} does not exist"), None);
                    s.ready = false;
                    s.drift = Some(Drift::Missing(format!(
                        "VM {vmid} no longer exists on {}: {e}",
                        st.node.as_deref().unwrap_or_default()
                    )));
                    return Ok(s);
                }
            }
        }
        Err(e) => return Err(e.classify("reading the VM")),
    };
    if !owned_by(&config, cx.uid()) {
        let mut s = cx.status(
            &st,
            phase,
            format!("VM {vmid} belongs to someone else"),
            None,
        );
        s.ready = false;
        s.provider_id = None;
        s.addresses = vec![];
        s.drift = Some(Drift::Foreign(format!(
            "VM {vmid} does not carry {}: its name is {}",
            marker(cx.uid()),
            str_of(&config, "name").unwrap_or_default()
        )));
        return Ok(s);
    }
    let current = cx
        .pve
        .get(&format!("{}/status/current", cx.config_path(&st)))
        .map_err(|e| e.classify("reading the VM status"))?;
    let power = str_of(&current, "status").unwrap_or_else(|| "unknown".into());
    let mut s = cx.status(&st, phase, format!("VM {vmid} is {power}"), None);
    s.details.push(("power".into(), power.clone()));
    if st.step == Step::Ready && power != "running" {
        s.drift = Some(Drift::Changed(format!("VM {vmid} is {power}, not running")));
    }
    Ok(s)
}

fn phase_of(step: Step) -> &'static str {
    match step {
        Step::Start => "Pending",
        Step::Cloning => "Cloning",
        Step::Configuring => "Configuring",
        Step::Resizing => "Resizing",
        Step::UploadingCloudInit | Step::Attaching => "UploadingCloudInit",
        Step::PoweringOn => "PoweringOn",
        Step::WaitingForGuestAgent | Step::Ejecting => "WaitingForGuestAgent",
        Step::Ready => "Ready",
    }
}

// ---------------------------------------------------------------------------------
// delete
// ---------------------------------------------------------------------------------

fn delete(req: &MachineRequest) -> Result<Option<Progress>, PluginError> {
    // A spec that no longer parses must not block deletion: only the UIDs are needed.
    let pve = Pve::new(&req.credentials);
    let cx = match Ctx::new(req) {
        Ok(cx) => cx,
        Err(_) => Ctx {
            req,
            spec: MachineSpec::default(),
            cluster: ClusterSpec::default(),
            nics: vec![],
            pve,
        },
    };
    let mut st = load_state(req);
    let progress = |st: &State, phase: &str, msg: String, ms: u64| {
        Ok(Some(Progress {
            state: serde_json::to_string(st).unwrap_or_default(),
            phase: phase.into(),
            message: msg,
            requeue_after_ms: Some(ms),
        }))
    };
    for _ in 0..6 {
        match st.delete {
            None => {
                // Locate this machine's VM: the recorded one if it is ours, else by marker.
                let recorded = match (st.vmid, &st.node) {
                    (Some(vmid), Some(_)) => match cx.get_config(&st) {
                        Ok(c) if owned_by(&c, cx.uid()) => true,
                        Ok(c) => {
                            log(
                                Level::Warn,
                                "the recorded VMID belongs to another VM; leaving it alone",
                                &[
                                    ("vmid", vmid.to_string()),
                                    ("name", str_of(&c, "name").unwrap_or_default()),
                                ],
                            );
                            false
                        }
                        Err(e) if e.is_not_found() => false,
                        Err(e) => return Err(e.classify("reading the VM to delete")),
                    },
                    _ => false,
                };
                if !recorded {
                    match cx.find_owned()? {
                        Some((node, vmid, _)) => {
                            st.node = Some(node);
                            st.vmid = Some(vmid);
                        }
                        None => {
                            st.vmid = None;
                            st.delete = Some(DeleteStep::RemovingIso);
                            continue;
                        }
                    }
                }
                st.delete = Some(DeleteStep::Stopping);
            }
            Some(DeleteStep::Stopping) => {
                if let Some(upid) = st.upid.clone() {
                    match poll(&cx.pve, &upid, "following the stop task")? {
                        Ok(false) => {
                            return progress(&st, "Stopping", "stop task running".into(), SHORT_MS);
                        }
                        Ok(true) => st.upid = None,
                        Err(msg) => {
                            st.upid = None;
                            return progress(
                                &st,
                                "Stopping",
                                format!("stop failed ({msg}); retrying"),
                                RETRY_MS,
                            );
                        }
                    }
                }
                let current = match cx
                    .pve
                    .get(&format!("{}/status/current", cx.config_path(&st)))
                {
                    Ok(c) => c,
                    Err(e) if e.is_not_found() => {
                        st.delete = Some(DeleteStep::Confirming);
                        continue;
                    }
                    Err(e) => return Err(e.classify("reading the VM status")),
                };
                if let Some(lock) = str_of(&current, "lock") {
                    return progress(
                        &st,
                        "Stopping",
                        format!("VM is locked ({lock}); waiting"),
                        SHORT_MS,
                    );
                }
                if str_of(&current, "status").as_deref() == Some("stopped") {
                    st.delete = Some(DeleteStep::Deleting);
                    continue;
                }
                cx.owned_config(&st, "stopping the VM")?;
                let v = cx
                    .pve
                    .post(&format!("{}/status/stop", cx.config_path(&st)), &[])
                    .map_err(|e| e.classify("stopping the VM"))?;
                st.upid = upid_of(v);
                return progress(&st, "Stopping", "stopping the VM".into(), SHORT_MS);
            }
            Some(DeleteStep::Deleting) => {
                if let Some(upid) = st.upid.clone() {
                    match poll(&cx.pve, &upid, "following the destroy task")? {
                        Ok(false) => {
                            return progress(
                                &st,
                                "Deleting",
                                "destroy task running".into(),
                                SHORT_MS,
                            );
                        }
                        Ok(true) => {
                            st.upid = None;
                            st.delete = Some(DeleteStep::Confirming);
                            continue;
                        }
                        Err(msg) => {
                            st.upid = None;
                            if let Some(e) = task_failed("destroying the VM", &msg) {
                                return Err(e);
                            }
                            // Started again meanwhile, locked...: go back to stopping.
                            st.delete = Some(DeleteStep::Stopping);
                            return progress(
                                &st,
                                "Deleting",
                                format!("destroy failed ({msg}); retrying"),
                                RETRY_MS,
                            );
                        }
                    }
                }
                match cx.owned_config(&st, "destroying the VM") {
                    Ok(_) => {}
                    Err(PluginError::Transient(_))
                        if cx.get_config(&st).is_err_and(|e| e.is_not_found()) =>
                    {
                        st.delete = Some(DeleteStep::Confirming);
                        continue;
                    }
                    Err(e) => return Err(e),
                }
                let v = cx
                    .pve
                    .delete(
                        &cx.config_path(&st),
                        &[
                            ("purge", "1".into()),
                            ("destroy-unreferenced-disks", "1".into()),
                        ],
                    )
                    .map_err(|e| e.classify("destroying the VM"))?;
                st.upid = upid_of(v);
                return progress(&st, "Deleting", "destroying the VM".into(), SHORT_MS);
            }
            Some(DeleteStep::Confirming) => match cx.get_config(&st) {
                Err(e) if e.is_not_found() => st.delete = Some(DeleteStep::RemovingIso),
                Ok(c) if !owned_by(&c, cx.uid()) => st.delete = Some(DeleteStep::RemovingIso),
                Ok(_) => {
                    st.delete = Some(DeleteStep::Deleting);
                    return progress(
                        &st,
                        "Deleting",
                        "the VM is still there; destroying again".into(),
                        SHORT_MS,
                    );
                }
                Err(e) => return Err(e.classify("confirming the VM is gone")),
            },
            Some(DeleteStep::RemovingIso) => {
                if let (Some(volid), Some(node)) = (st.iso.clone(), st.node.clone()) {
                    delete_volume(&cx.pve, &node, &volid)?;
                }
                st.iso = None;
                return Ok(None);
            }
        }
    }
    progress(&st, "Deleting", "continuing".into(), SHORT_MS)
}

impl Guest for Plugin {
    fn create(req: MachineRequest) -> Result<MachineStatus, PluginError> {
        create(&req)
    }

    fn describe(req: MachineRequest) -> Result<MachineStatus, PluginError> {
        describe(&req)
    }

    fn delete(req: MachineRequest) -> Result<Option<Progress>, PluginError> {
        delete(&req)
    }

    fn describe_template(req: TemplateRequest) -> Result<TemplateStatus, PluginError> {
        let spec: MachineSpec = parse_spec(&req.spec, "spec.template.spec")?;
        validate(&spec, &ClusterSpec::default()).or_else(|e| match e {
            // Static addressing depends on the cluster, which a template does not see.
            PluginError::InvalidSpec(ref i)
                if i.field.ends_with(".dhcp4") || i.field.ends_with(".dhcp6") =>
            {
                Ok(())
            }
            other => Err(other),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("10G"), Some(10 << 30));
        assert_eq!(parse_size("512M"), Some(512 << 20));
        assert_eq!(parse_size("4194304"), Some(4194304));
    }

    #[test]
    fn macs_are_found_in_net_strings() {
        assert_eq!(
            mac_of("virtio=BC:24:11:00:00:01,bridge=vmbr0").as_deref(),
            Some("BC:24:11:00:00:01")
        );
        assert_eq!(mac_of("virtio,bridge=vmbr0"), None);
    }
}
