//! The world model: nodes, storages and their volumes, VMs with their PVE config, pools,
//! tasks, DHCP leases, tickets, counters and faults. One `World` lives behind one mutex.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use sha1::{Digest, Sha1};

use crate::config::{Config, StorageType};
use crate::faults::Faults;
use crate::nocloud::NoCloud;
use crate::params::{parse_property_string, split_indexed};
use crate::tasks::Task;

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Unix time in milliseconds (task timelines for benchmarks).
pub fn unix_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A cluster node.
#[derive(Debug, Clone, Serialize)]
pub struct Node {
    pub name: String,
    pub cpus: u32,
    pub memory: u64,
    pub base_memory_used: u64,
    pub ip: String,
    pub online: bool,
}

/// A volume on a storage.
#[derive(Debug, Clone, Serialize)]
pub struct Volume {
    /// Volume name without the storage prefix (`iso/x.iso`, `vm-100-disk-0`).
    pub name: String,
    /// Content type (`iso`, `images`, `vztmpl`, ...).
    pub content: String,
    pub format: String,
    pub size: u64,
    pub vmid: Option<u32>,
    pub ctime: u64,
    /// Base volume of a linked clone.
    pub parent: Option<String>,
    /// NoCloud data found in an uploaded `cidata` ISO.
    pub nocloud: Option<NoCloud>,
}

/// A storage instance (per node, or one for a shared storage).
#[derive(Debug, Clone, Serialize)]
pub struct Storage {
    pub id: String,
    pub kind: StorageType,
    pub content: Vec<String>,
    pub total: u64,
    pub shared: bool,
    pub volumes: BTreeMap<String, Volume>,
}

impl Storage {
    pub fn used(&self) -> u64 {
        self.volumes.values().map(|v| v.size).sum()
    }
    pub fn has_content(&self, c: &str) -> bool {
        self.content.iter().any(|x| x == c)
    }
}

/// A guest network interface as the guest agent reports it.
#[derive(Debug, Clone, Serialize)]
pub struct GuestIface {
    pub name: String,
    pub mac: String,
    /// `(address, prefix)`.
    pub ipv4: Vec<(String, u8)>,
    pub ipv6: Vec<(String, u8)>,
}

/// How long after its start task a guest boots, its agent answers and cloud-init is done
/// (milliseconds, already scaled).
#[derive(Debug, Clone, Copy, Default)]
pub struct GuestDelays {
    pub boot_ms: u64,
    pub agent_ms: u64,
    pub cloud_init_ms: u64,
}

/// Runtime state of a running VM.
#[derive(Debug, Clone)]
pub struct RunState {
    pub since: Instant,
    pub started_unix: u64,
    pub pid: u32,
    pub booted_at: Instant,
    pub agent_at: Instant,
    /// When cloud-init has finished in the guest.
    pub cloud_init_at: Instant,
    pub interfaces: Vec<GuestIface>,
    pub hostname: String,
    /// Processes started through the guest agent (`agent/exec`), by guest PID.
    pub processes: BTreeMap<u32, crate::guest::Process>,
}

/// A VM or template.
#[derive(Debug, Clone)]
pub struct Vm {
    pub vmid: u32,
    pub node: String,
    /// PVE config, one entry per config line (`lock` included when locked).
    pub config: BTreeMap<String, String>,
    pub run: Option<RunState>,
}

/// Keys holding drives.
pub fn is_drive_key(key: &str) -> bool {
    if key == "efidisk0" || key == "tpmstate0" {
        return true;
    }
    matches!(
        split_indexed(key),
        Some(("ide" | "sata" | "scsi" | "virtio", _))
    )
}

impl Vm {
    pub fn is_template(&self) -> bool {
        self.config.get("template").is_some_and(|v| v == "1")
    }
    pub fn lock(&self) -> Option<&str> {
        self.config.get("lock").map(String::as_str)
    }
    pub fn name(&self) -> String {
        self.config
            .get("name")
            .cloned()
            .unwrap_or_else(|| format!("VM {}", self.vmid))
    }
    /// Memory in MiB (`memory` may be `2048` or `current=2048`).
    pub fn memory_mib(&self) -> u64 {
        self.config
            .get("memory")
            .map(|m| m.trim_start_matches("current="))
            .and_then(|m| m.split(',').next())
            .and_then(|m| m.parse().ok())
            .unwrap_or(512)
    }
    pub fn cpus(&self) -> u64 {
        let get = |k: &str, d: u64| self.config.get(k).and_then(|v| v.parse().ok()).unwrap_or(d);
        get("cores", 1) * get("sockets", 1)
    }
    pub fn agent_enabled(&self) -> bool {
        self.config.get("agent").is_some_and(|a| {
            let first = a.split(',').next().unwrap_or("");
            let v = first.strip_prefix("enabled=").unwrap_or(first);
            crate::params::parse_bool(v).unwrap_or(false)
        })
    }
    /// Drives (`key`, volid, options) excluding CD-ROMs.
    pub fn disks(&self) -> Vec<(String, String, BTreeMap<String, String>)> {
        self.config
            .iter()
            .filter(|(k, _)| is_drive_key(k))
            .filter_map(|(k, v)| {
                let opts = drive_options(v);
                if opts.get("media").is_some_and(|m| m == "cdrom") {
                    return None;
                }
                Some((k.clone(), opts.get("file").cloned()?, opts))
            })
            .collect()
    }
    /// Sum of disk sizes in bytes.
    pub fn maxdisk(&self) -> u64 {
        // hot in /cluster/resources: scan the drive strings without parsing them fully
        self.config
            .iter()
            .filter(|(k, v)| is_drive_key(k) && !v.contains("media=cdrom"))
            .filter_map(|(_, v)| {
                v.split(',')
                    .find_map(|p| p.strip_prefix("size="))
                    .and_then(crate::params::parse_size)
            })
            .sum()
    }
    /// The config file text, as PVE would write it (used for the digest).
    pub fn config_text(&self) -> String {
        let mut s = String::new();
        if let Some(d) = self.config.get("description") {
            for line in d.lines() {
                s.push('#');
                s.push_str(line);
                s.push('\n');
            }
        }
        for (k, v) in &self.config {
            if k != "description" {
                s.push_str(k);
                s.push_str(": ");
                s.push_str(v);
                s.push('\n');
            }
        }
        s
    }
    /// SHA-1 of the config text, as `digest` in `GET .../config`.
    pub fn digest(&self) -> String {
        let h = Sha1::digest(self.config_text().as_bytes());
        h.iter().map(|b| format!("{b:02x}")).collect()
    }
    pub fn status(&self) -> &'static str {
        if self.run.is_some() {
            "running"
        } else {
            "stopped"
        }
    }
    pub fn uptime(&self) -> u64 {
        self.run.as_ref().map_or(0, |r| r.since.elapsed().as_secs())
    }
}

/// Parses a drive string (`local-lvm:vm-100-disk-0,size=32G`) into options with `file`.
pub fn drive_options(v: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for (i, part) in v.split(',').enumerate() {
        match part.split_once('=') {
            _ if i == 0 && !part.contains('=') => {
                m.insert("file".into(), part.to_string());
            }
            Some((k, val)) => {
                m.insert(k.to_string(), val.to_string());
            }
            None => {
                m.insert("file".into(), part.to_string());
            }
        }
    }
    m
}

/// Joins drive options back, `file` first.
pub fn drive_string(opts: &BTreeMap<String, String>) -> String {
    let mut parts = vec![opts.get("file").cloned().unwrap_or_default()];
    parts.extend(
        opts.iter()
            .filter(|(k, _)| *k != "file")
            .map(|(k, v)| format!("{k}={v}")),
    );
    parts.join(",")
}

/// A VM a `qmdestroy` task removed: who destroyed it, when, and the config it had, so
/// tests can tell whose VMs a client destroyed (PVE keeps no such record; the task log
/// names only the volumes).
#[derive(Debug, Clone, Serialize)]
pub struct Destroyed {
    pub vmid: u32,
    pub node: String,
    /// The principal whose request started the task (`capmox@pve!capi`).
    pub user: String,
    /// Unix milliseconds when the VM was removed.
    pub at_ms: u64,
    pub config: BTreeMap<String, String>,
}

/// Requests per endpoint, keyed `"METHOD /path/template"`.
pub type Counters = BTreeMap<String, u64>;

/// Issued login tickets.
#[derive(Debug, Clone)]
pub struct Ticket {
    pub user: String,
    pub csrf: String,
}

/// The whole simulated cluster.
pub struct World {
    pub version: (u32, u32),
    pub nodes: BTreeMap<String, Node>,
    /// `(node, storage id) -> storage`; shared storages use node `""`.
    pub storages: BTreeMap<(String, String), Storage>,
    pub vms: BTreeMap<u32, Vm>,
    pub pools: BTreeMap<String, BTreeSet<u32>>,
    pub tasks: HashMap<String, Task>,
    pub task_order: Vec<String>,
    /// How to interrupt a running task's worker, by UPID.
    pub task_cancel: HashMap<String, std::sync::Arc<tokio::sync::Notify>>,
    pub leases: HashMap<String, Ipv4Addr>,
    /// Leased addresses (as integers), for allocation.
    pub leased: std::collections::HashSet<u32>,
    /// MACs handed out, to keep generated ones unique.
    pub macs: std::collections::HashSet<String>,
    pub counters: Counters,
    /// Every VM destroyed so far, oldest first.
    pub destroyed: Vec<Destroyed>,
    pub faults: Faults,
    pub rng: fastrand::Rng,
    pub tickets: HashMap<String, Ticket>,
    /// Config file locks (flock) held by running tasks, by VMID.
    pub flocks: HashMap<u32, crate::locks::Flock>,
    /// Per fault rule: requests matched, skipped and faulted (aligned with `faults.rules`).
    pub fault_hits: Vec<crate::faults::RuleHits>,
    pub next_pid: u32,
    pub boot: Instant,
    pub boot_unix: u64,
    pub dhcp_start: u32,
    pub dhcp_end: u32,
    pub dhcp_prefix: u8,
}

impl World {
    /// Builds the world a config describes.
    pub fn new(cfg: &Config) -> anyhow::Result<Self> {
        let rng = match cfg.seed {
            Some(s) => fastrand::Rng::with_seed(s),
            None => fastrand::Rng::new(),
        };
        let dhcp_start: Ipv4Addr = cfg.dhcp.start.parse()?;
        let dhcp_end: Ipv4Addr = cfg.dhcp.end.parse()?;
        let mut w = World {
            version: cfg.version_tuple(),
            nodes: BTreeMap::new(),
            storages: BTreeMap::new(),
            vms: BTreeMap::new(),
            pools: BTreeMap::new(),
            tasks: HashMap::new(),
            task_order: Vec::new(),
            task_cancel: HashMap::new(),
            leases: HashMap::new(),
            leased: Default::default(),
            macs: Default::default(),
            counters: BTreeMap::new(),
            destroyed: Vec::new(),
            faults: cfg.faults.clone(),
            rng,
            tickets: HashMap::new(),
            flocks: HashMap::new(),
            fault_hits: vec![crate::faults::RuleHits::default(); cfg.faults.rules.len()],
            next_pid: 0,
            boot: Instant::now(),
            boot_unix: unix_now(),
            dhcp_start: u32::from(dhcp_start),
            dhcp_end: u32::from(dhcp_end),
            dhcp_prefix: cfg.dhcp.prefix,
        };
        w.next_pid = 100_000 + w.rng.u32(0..400_000);
        for n in &cfg.nodes {
            w.nodes.insert(
                n.name.clone(),
                Node {
                    name: n.name.clone(),
                    cpus: n.cpus,
                    memory: n.memory,
                    base_memory_used: n.base_memory_used,
                    ip: n.ip.clone(),
                    online: n.online,
                },
            );
        }
        anyhow::ensure!(!w.nodes.is_empty(), "config has no nodes");
        for s in &cfg.storages {
            let st = Storage {
                id: s.id.clone(),
                kind: s.kind,
                content: s.content.clone(),
                total: s.total,
                shared: s.shared,
                volumes: BTreeMap::new(),
            };
            if s.shared {
                w.storages.insert((String::new(), s.id.clone()), st);
            } else {
                for n in w.nodes.keys() {
                    if s.nodes.is_empty() || s.nodes.contains(n) {
                        w.storages.insert((n.clone(), s.id.clone()), st.clone());
                    }
                }
            }
        }
        for p in &cfg.pools {
            w.pools.insert(p.clone(), BTreeSet::new());
        }
        for seed in &cfg.vms {
            anyhow::ensure!(
                w.nodes.contains_key(&seed.node),
                "VM {} is on unknown node {}",
                seed.vmid,
                seed.node
            );
            let mut vm = Vm {
                vmid: seed.vmid,
                node: seed.node.clone(),
                config: seed.config.clone(),
                run: None,
            };
            w.fill_generated(&mut vm);
            for (_, volid, opts) in vm.disks() {
                let size = opts
                    .get("size")
                    .and_then(|s| crate::params::parse_size(s))
                    .unwrap_or(0);
                w.ensure_volume(&vm.node, &volid, seed.vmid, size);
            }
            // An ISO a seeded VM has in a CD drive is in its storage (as on a real node,
            // where PVE refuses to attach one that is not).
            let isos: Vec<String> = vm
                .config
                .iter()
                .filter(|(k, _)| is_drive_key(k))
                .map(|(_, v)| drive_options(v))
                .filter(|o| o.get("media").is_some_and(|m| m == "cdrom"))
                .filter_map(|o| o.get("file").filter(|f| f.contains(":iso/")).cloned())
                .collect();
            for file in isos {
                w.ensure_iso(&vm.node, &file, 1 << 20);
            }
            if let Some(p) = &seed.pool {
                w.pools.entry(p.clone()).or_default().insert(seed.vmid);
            }
            let running = seed.running && !vm.is_template();
            w.vms.insert(seed.vmid, vm);
            if running {
                w.boot_vm(seed.vmid, GuestDelays::default());
            }
        }
        for set in &cfg.vm_sets {
            w.add_vm_set(set)?;
        }
        Ok(w)
    }

    /// Adds the VMs of a bulk set (full copies of a seeded VM).
    fn add_vm_set(&mut self, set: &crate::config::VmSet) -> anyhow::Result<()> {
        let Some(src) = self.vms.get(&set.clone_of).cloned() else {
            anyhow::bail!("vm_sets: VM {} to copy does not exist", set.clone_of);
        };
        let nodes: Vec<String> = if set.nodes.is_empty() {
            self.nodes.keys().cloned().collect()
        } else {
            set.nodes.clone()
        };
        for i in 0..set.count {
            let vmid = set.first_vmid + i;
            anyhow::ensure!(
                !self.vms.contains_key(&vmid),
                "vm_sets: VM {vmid} exists twice"
            );
            let node = nodes[i as usize % nodes.len()].clone();
            anyhow::ensure!(
                self.nodes.contains_key(&node),
                "vm_sets: unknown node {node}"
            );
            let mut config = src.config.clone();
            config.remove("template");
            config.remove("smbios1");
            config.remove("vmgenid");
            config.insert("name".into(), format!("{}{i}", set.name_prefix));
            let mut volumes = vec![];
            for (k, v) in src.config.iter().filter(|(k, _)| is_drive_key(k)) {
                let mut o = drive_options(v);
                let Some((sid, name)) = o.get("file").and_then(|f| f.split_once(':')) else {
                    continue;
                };
                let (sid, name) = (sid.to_string(), name.to_string());
                let cdrom = o.get("media").is_some_and(|m| m == "cdrom");
                if cdrom && !name.contains("cloudinit") {
                    continue;
                }
                let nn = if cdrom {
                    format!("vm-{vmid}-cloudinit")
                } else {
                    format!("vm-{vmid}-disk-{}", volumes.len())
                };
                let size = o
                    .get("size")
                    .and_then(|s| crate::params::parse_size(s))
                    .unwrap_or(4 << 20);
                volumes.push((format!("{sid}:{nn}"), size));
                o.insert("file".into(), format!("{sid}:{nn}"));
                config.insert(k.clone(), drive_string(&o));
            }
            let nets: Vec<String> = config
                .keys()
                .filter(|k| matches!(split_indexed(k), Some(("net", _))))
                .cloned()
                .collect();
            for k in nets {
                let v = config[&k].clone();
                config.insert(k, self.normalize_net(&v, true));
            }
            let mut vm = Vm {
                vmid,
                node: node.clone(),
                config,
                run: None,
            };
            self.fill_generated(&mut vm);
            for (volid, size) in volumes {
                self.ensure_volume(&node, &volid, vmid, size);
            }
            self.vms.insert(vmid, vm);
            if let Some(p) = &set.pool {
                self.pools.entry(p.clone()).or_default().insert(vmid);
            }
            if set.running {
                self.boot_vm(vmid, GuestDelays::default());
            }
        }
        Ok(())
    }

    /// Generates `smbios1`, `vmgenid` and missing MACs.
    pub fn fill_generated(&mut self, vm: &mut Vm) {
        if !vm.config.contains_key("smbios1") {
            let u = self.uuid();
            vm.config.insert("smbios1".into(), format!("uuid={u}"));
        }
        if !vm.config.contains_key("vmgenid") {
            let u = self.uuid();
            vm.config.insert("vmgenid".into(), u);
        }
        let keys: Vec<String> = vm
            .config
            .keys()
            .filter(|k| matches!(split_indexed(k), Some(("net", _))))
            .cloned()
            .collect();
        for k in keys {
            let v = vm.config[&k].clone();
            vm.config.insert(k, self.normalize_net(&v, false));
        }
    }

    /// A random v4 UUID.
    pub fn uuid(&mut self) -> String {
        let mut b = [0u8; 16];
        for x in b.iter_mut() {
            *x = self.rng.u8(..);
        }
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        let h: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            h[0..4].concat(),
            h[4..6].concat(),
            h[6..8].concat(),
            h[8..10].concat(),
            h[10..16].concat()
        )
    }

    /// A MAC from Proxmox's OUI `BC:24:11`.
    pub fn mac(&mut self) -> String {
        loop {
            let mac = format!(
                "BC:24:11:{:02X}:{:02X}:{:02X}",
                self.rng.u8(..),
                self.rng.u8(..),
                self.rng.u8(..)
            );
            if self.macs.insert(mac.clone()) {
                return mac;
            }
        }
    }

    /// Normalizes a `netN` value: `model=MAC` first, a MAC generated when missing (or
    /// always when `regenerate`).
    pub fn normalize_net(&mut self, v: &str, regenerate: bool) -> String {
        let fmt = net_format();
        let Ok(mut opts) = parse_property_string(fmt, v) else {
            return v.to_string();
        };
        let model = opts.remove("model").unwrap_or_else(|| "virtio".into());
        let mac = match opts.remove("macaddr") {
            Some(m) if !regenerate => m.to_uppercase(),
            _ => self.mac(),
        };
        let mut parts = vec![format!("{model}={mac}")];
        parts.extend(opts.iter().map(|(k, v)| format!("{k}={v}")));
        parts.join(",")
    }

    /// The storage `id` as seen from `node`.
    pub fn storage(&self, node: &str, id: &str) -> Option<&Storage> {
        self.storages
            .get(&(node.to_string(), id.to_string()))
            .or_else(|| self.storages.get(&(String::new(), id.to_string())))
    }

    pub fn storage_mut(&mut self, node: &str, id: &str) -> Option<&mut Storage> {
        let key = (node.to_string(), id.to_string());
        if self.storages.contains_key(&key) {
            return self.storages.get_mut(&key);
        }
        self.storages.get_mut(&(String::new(), id.to_string()))
    }

    /// Storages visible on a node.
    pub fn node_storages(&self, node: &str) -> Vec<&Storage> {
        self.storages
            .iter()
            .filter(|((n, _), _)| n == node || n.is_empty())
            .map(|(_, s)| s)
            .collect()
    }

    /// Creates the volume behind `volid` if the storage exists and it is missing.
    pub fn ensure_volume(&mut self, node: &str, volid: &str, vmid: u32, size: u64) {
        let Some((sid, name)) = volid.split_once(':') else {
            return;
        };
        let now = unix_now();
        if let Some(st) = self.storage_mut(node, sid) {
            let format = if st.kind.is_file_based() {
                name.rsplit('.').next().unwrap_or("raw").to_string()
            } else {
                "raw".into()
            };
            let parent = name.split_once('/').map(|(p, _)| p.to_string());
            st.volumes
                .entry(name.to_string())
                .or_insert_with(|| Volume {
                    name: name.to_string(),
                    content: "images".into(),
                    format,
                    size,
                    vmid: Some(vmid),
                    ctime: now,
                    parent: parent.filter(|p| p.starts_with("base-")),
                    nocloud: None,
                });
        }
    }

    /// Creates the ISO image `volid` (`<storage>:iso/<file>`) if the storage exists and
    /// it is missing.
    pub fn ensure_iso(&mut self, node: &str, volid: &str, size: u64) {
        let Some((sid, name)) = volid.split_once(':') else {
            return;
        };
        let now = unix_now();
        if let Some(st) = self.storage_mut(node, sid) {
            st.volumes
                .entry(name.to_string())
                .or_insert_with(|| Volume {
                    name: name.to_string(),
                    content: "iso".into(),
                    format: "iso".into(),
                    size,
                    vmid: None,
                    ctime: now,
                    parent: None,
                    nocloud: None,
                });
        }
    }

    /// Next free volume name `vm-<vmid>-disk-<n>` on a storage.
    pub fn next_disk_name(
        &self,
        node: &str,
        sid: &str,
        vmid: u32,
        taken: &BTreeSet<String>,
    ) -> String {
        let st = self.storage(node, sid);
        let file = st.is_some_and(|s| s.kind.is_file_based());
        for n in 0.. {
            let name = if file {
                format!("{vmid}/vm-{vmid}-disk-{n}.qcow2")
            } else {
                format!("vm-{vmid}-disk-{n}")
            };
            let exists = st.is_some_and(|s| {
                s.volumes
                    .keys()
                    .any(|k| k == &name || k.ends_with(&format!("/{name}")))
            });
            if !exists && !taken.contains(&name) {
                return name;
            }
        }
        unreachable!()
    }

    /// Lowest free VMID from 100.
    pub fn next_free_vmid(&self) -> u32 {
        let mut id = 100;
        for k in self.vms.range(100..).map(|(k, _)| *k) {
            if k != id {
                break;
            }
            id += 1;
        }
        id
    }

    /// A new fake PID.
    pub fn pid(&mut self) -> u32 {
        self.next_pid += 1 + self.rng.u32(0..16);
        self.next_pid
    }

    /// A die roll in `0.0..1.0`.
    pub fn roll(&mut self) -> f64 {
        self.rng.f64()
    }

    /// Memory used on a node (host + running VMs), bytes.
    pub fn node_mem_used(&self, node: &str) -> u64 {
        let base = self.nodes.get(node).map_or(0, |n| n.base_memory_used);
        base + self
            .vms
            .values()
            .filter(|v| v.node == node && v.run.is_some())
            .map(|v| v.memory_mib() << 20)
            .sum::<u64>()
    }

    /// Marks a VM running and computes its guest view (addresses, hostname).
    pub fn boot_vm(&mut self, vmid: u32, delays: GuestDelays) {
        let pid = self.pid();
        let Some(vm) = self.vms.get(&vmid).cloned() else {
            return;
        };
        let (interfaces, hostname) = crate::guest::guest_view(self, &vm);
        let now = Instant::now();
        let ms = std::time::Duration::from_millis;
        let booted_at = now + ms(delays.boot_ms);
        let run = RunState {
            since: now,
            started_unix: unix_now(),
            pid,
            booted_at,
            agent_at: booted_at + ms(delays.agent_ms),
            cloud_init_at: booted_at + ms(delays.cloud_init_ms.max(delays.agent_ms)),
            interfaces,
            hostname,
            processes: BTreeMap::new(),
        };
        if let Some(vm) = self.vms.get_mut(&vmid) {
            vm.run = Some(run);
        }
    }

    /// A DHCP lease for a MAC (stable for the MAC).
    pub fn lease(&mut self, mac: &str) -> Option<Ipv4Addr> {
        let mac = mac.to_uppercase();
        if let Some(ip) = self.leases.get(&mac) {
            return Some(*ip);
        }
        let ip = (self.dhcp_start..=self.dhcp_end).find(|a| !self.leased.contains(a))?;
        self.leased.insert(ip);
        let ip = Ipv4Addr::from(ip);
        self.leases.insert(mac, ip);
        Some(ip)
    }

    /// Pool of a VM, if any.
    pub fn pool_of(&self, vmid: u32) -> Option<&str> {
        self.pools
            .iter()
            .find(|(_, m)| m.contains(&vmid))
            .map(|(p, _)| p.as_str())
    }

    /// Whether a node answers (online and not made unreachable by a fault).
    pub fn node_up(&self, node: &str) -> bool {
        self.nodes.get(node).is_some_and(|n| n.online)
            && !self.faults.unreachable_nodes.iter().any(|n| n == node)
    }

    /// Counts one request on an endpoint.
    pub fn count(&mut self, endpoint: &str) {
        *self.counters.entry(endpoint.to_string()).or_insert(0) += 1;
    }
}

/// The `net[n]` property-string format from the schema.
pub fn net_format() -> &'static serde_json::Map<String, serde_json::Value> {
    static F: std::sync::OnceLock<serde_json::Map<String, serde_json::Value>> =
        std::sync::OnceLock::new();
    F.get_or_init(|| {
        let s: serde_json::Value =
            serde_json::from_str(include_str!("../schema/params.json")).expect("schema");
        s["9.1.3"]["POST /nodes/{node}/qemu/{vmid}/config"]["properties"]["net[n]"]["format"]
            .as_object()
            .cloned()
            .unwrap_or_default()
    })
}
