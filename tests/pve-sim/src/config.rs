//! The simulator's configuration: the world it starts with, its timings and its faults.
//!
//! Everything is deserializable from TOML (see the crate README for an example) and every
//! field has a default, so a config file only needs the parts it changes.
//! `Config::default()` is the default world described in the crate docs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::faults::Faults;

/// The documented default API token secret (override with `--token` or `tokens`).
pub const DEFAULT_TOKEN_SECRET: &str = "REDACTED-SIM-SECRET";
/// The documented default API token: `capmox@pve!capi=REDACTED-SIM-SECRET`.
pub const DEFAULT_TOKEN: &str = "capmox@pve!capi=REDACTED-SIM-SECRET";
/// The documented default password of `root@pam` for `POST /access/ticket`.
pub const DEFAULT_ROOT_PASSWORD: &str = "REDACTED-SIM-PASSWORD";

/// Full simulator configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// PVE version to present (`/version`; `message` in error bodies from 8.3 on;
    /// which schema version validates parameters: 8.0.5, 8.4.0 or 9.1.3).
    pub pve_version: String,
    /// Cluster name shown by `/cluster/status` and tickets.
    pub cluster_name: String,
    /// Cluster nodes.
    pub nodes: Vec<NodeConfig>,
    /// Storages; each one exists on every node listed in its `nodes` (empty = all nodes).
    pub storages: Vec<StorageConfig>,
    /// VMs and templates existing at start.
    pub vms: Vec<VmSeed>,
    /// Bulk VMs made at start (for benchmarks): full copies of a seeded VM.
    pub vm_sets: Vec<VmSet>,
    /// Resource pools existing at start.
    pub pools: Vec<String>,
    /// Accepted API tokens, each `USER@REALM!TOKENID=SECRET`, privilege-separated
    /// (`privsep = 1`, the default of `pveum user token add`).
    pub tokens: Vec<String>,
    /// Further API tokens with their settings (`privsep`); accepted like `tokens`.
    pub api_tokens: Vec<ApiToken>,
    /// Custom roles beside PVE's built-in ones: `name -> [privilege, ...]`.
    pub roles: BTreeMap<String, Vec<String>>,
    /// Access control entries. A user that no entry names, neither itself nor any of its
    /// tokens, is unrestricted with its tokens (the default world has no entries).
    pub acls: Vec<AclEntry>,
    /// Users that may log in with `POST /access/ticket`: `userid -> password`.
    pub users: BTreeMap<String, String>,
    /// Task durations in milliseconds, by task type (`qmclone`, `qmstart`, `qmstop`,
    /// `qmshutdown`, `qmreboot`, `qmdestroy`, `resize`, `qmconfig`, `qmcreate`, `qmigrate`,
    /// `imgcopy`, `imgdel`), scaled by `time_scale`.
    /// Types not listed use `default_task_ms`.
    pub task_ms: BTreeMap<String, u64>,
    /// Duration of task types not in `task_ms`.
    pub default_task_ms: u64,
    /// How many tasks may run at once on one node; further tasks queue (status `running`).
    pub node_task_concurrency: usize,
    /// Delay before answering a failed authentication (PVE waits about 3 s; default 0).
    pub auth_failure_delay_ms: u64,
    /// How long an operation waits for a VM's config file lock held by a running task
    /// before failing with "can't lock file ... - got timeout" (PVE: 10 s for config
    /// writes, start, stop, ...).
    pub lock_wait_ms: u64,
    /// How long a clone task waits for the config file locks of its source and target
    /// (PVE's `qmclone` worker: 1 s each).
    pub clone_lock_wait_ms: u64,
    /// Multiplies every duration and wait of the simulator: task durations, boot, agent
    /// and cloud-init delays, lock waits (`0.1` = ten times faster than configured).
    pub time_scale: f64,
    /// Milliseconds from the end of a start task until the guest has booted and holds its
    /// addresses.
    pub boot_delay_ms: u64,
    /// Further milliseconds after boot until the QEMU guest agent answers.
    pub agent_delay_ms: u64,
    /// Milliseconds from boot until cloud-init has finished (`cloud-init status` says
    /// `running` before, `done` after).
    pub cloud_init_delay_ms: u64,
    /// Refuse to start a VM whose memory does not fit in its node's free memory (real PVE
    /// overcommits and fails only when the host really runs out; off by default).
    pub strict_memory: bool,
    /// DHCP pool handing out leases to interfaces configured for DHCP (or not configured).
    pub dhcp: DhcpConfig,
    /// Fault injection at start (change at runtime with `PUT /_sim/faults`).
    pub faults: Faults,
    /// Seed for MACs, UUIDs and fault dice; `None` = random.
    pub seed: Option<u64>,
    /// Largest accepted request body in bytes (uploads included).
    pub max_body_bytes: usize,
}

/// One cluster node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    pub name: String,
    pub cpus: u32,
    /// Memory in bytes.
    pub memory: u64,
    /// Memory the host itself uses, in bytes (added to the VMs' memory in `mem`).
    pub base_memory_used: u64,
    /// Address shown in `/cluster/status`.
    pub ip: String,
    /// `false` makes the node `offline` and every request proxied to it a 595.
    pub online: bool,
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            name: "pve1".into(),
            cpus: 16,
            memory: 64 << 30,
            base_memory_used: 2 << 30,
            ip: "192.0.2.11".into(),
            online: true,
        }
    }
}

/// Storage backends the simulator knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StorageType {
    /// Directory storage: file-based, accepts uploads (iso, vztmpl, import).
    Dir,
    /// LVM-thin: block volumes only, no uploads, `raw` only.
    Lvmthin,
    /// ZFS pool: block volumes only.
    Zfspool,
}

impl StorageType {
    pub fn as_str(self) -> &'static str {
        match self {
            StorageType::Dir => "dir",
            StorageType::Lvmthin => "lvmthin",
            StorageType::Zfspool => "zfspool",
        }
    }
    /// Whether the storage has a file-system path (uploads need one).
    pub fn is_file_based(self) -> bool {
        matches!(self, StorageType::Dir)
    }
}

/// One storage definition.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: StorageType,
    /// Content types, e.g. `["iso", "vztmpl", "backup", "snippets"]`.
    pub content: Vec<String>,
    /// Capacity in bytes (per node).
    pub total: u64,
    /// Nodes having this storage; empty = every node.
    pub nodes: Vec<String>,
    pub shared: bool,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            id: "local".into(),
            kind: StorageType::Dir,
            content: vec!["iso".into(), "vztmpl".into(), "backup".into()],
            total: 100 << 30,
            nodes: vec![],
            shared: false,
        }
    }
}

/// A VM (or template) present at start. `config` holds raw PVE config lines
/// (`key -> value`); a missing `smbios1`/`vmgenid` is generated, and `netN` without MAC
/// gets one.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VmSeed {
    pub vmid: u32,
    pub node: String,
    pub config: BTreeMap<String, String>,
    /// Start the VM (templates never run).
    pub running: bool,
    pub pool: Option<String>,
}

impl Default for VmSeed {
    fn default() -> Self {
        Self {
            vmid: 100,
            node: "pve1".into(),
            config: BTreeMap::new(),
            running: false,
            pool: None,
        }
    }
}

/// `count` VMs copied from VM `clone_of` at start, VMIDs from `first_vmid`, spread
/// round-robin over `nodes` (empty = all nodes), named `name_prefix` + index.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VmSet {
    pub count: u32,
    pub clone_of: u32,
    pub first_vmid: u32,
    pub nodes: Vec<String>,
    pub running: bool,
    pub name_prefix: String,
    pub pool: Option<String>,
}

impl Default for VmSet {
    fn default() -> Self {
        Self {
            count: 0,
            clone_of: 9000,
            first_vmid: 10_000,
            nodes: vec![],
            running: false,
            name_prefix: "bulk-".into(),
            pool: None,
        }
    }
}

/// An API token with its settings: `id` is `USER@REALM!TOKENID`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiToken {
    pub id: String,
    pub secret: String,
    /// Privilege separation (PVE's default): the token has only what its own ACL
    /// entries grant, and of that only what its user has too. Without it the token has
    /// exactly its user's privileges.
    pub privsep: bool,
}

impl Default for ApiToken {
    fn default() -> Self {
        Self {
            id: String::new(),
            secret: String::new(),
            privsep: true,
        }
    }
}

/// One ACL entry: `principal` (a user `u@realm` or a token `u@realm!id`) gets `privs`
/// and the privileges of `role` (built-in or from `roles`) on `path` (`/`, `/vms/100`,
/// `/pool/capi`, `/storage/local`, `/nodes/pve1`, `/sdn/zones/localnetwork/vmbr0`, ...),
/// and below it with `propagate`, as PVE evaluates ACLs (see `perms`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AclEntry {
    pub path: String,
    pub principal: String,
    pub role: Option<String>,
    pub privs: Vec<String>,
    pub propagate: bool,
}

impl Default for AclEntry {
    fn default() -> Self {
        Self {
            path: "/".into(),
            principal: String::new(),
            role: None,
            privs: vec![],
            propagate: true,
        }
    }
}

/// DHCP range for leases (IPv4).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DhcpConfig {
    /// First address handed out.
    pub start: String,
    /// Last address handed out.
    pub end: String,
    /// Prefix length reported by the guest agent.
    pub prefix: u8,
    /// Gateway (informational).
    pub gateway: String,
}

impl Default for DhcpConfig {
    fn default() -> Self {
        Self {
            start: "10.10.0.100".into(),
            end: "10.10.0.250".into(),
            prefix: 24,
            gateway: "10.10.0.1".into(),
        }
    }
}

/// Default task durations in milliseconds (moderately fast, still visibly asynchronous).
pub fn default_task_ms() -> BTreeMap<String, u64> {
    [
        ("qmclone", 300),
        ("qmstart", 200),
        ("qmstop", 100),
        ("qmshutdown", 300),
        ("qmreboot", 300),
        ("qmdestroy", 100),
        ("qmcreate", 100),
        ("qmigrate", 500),
        ("resize", 100),
        ("qmconfig", 20),
        ("imgcopy", 50),
        ("imgdel", 20),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

impl Default for Config {
    fn default() -> Self {
        let nodes = (1..=3)
            .map(|i| NodeConfig {
                name: format!("pve{i}"),
                ip: format!("192.0.2.1{i}"),
                ..NodeConfig::default()
            })
            .collect();
        let storages = vec![
            StorageConfig {
                id: "local".into(),
                kind: StorageType::Dir,
                content: ["iso", "vztmpl", "backup", "snippets"]
                    .map(String::from)
                    .to_vec(),
                total: 100 << 30,
                nodes: vec![],
                shared: false,
            },
            StorageConfig {
                id: "local-lvm".into(),
                kind: StorageType::Lvmthin,
                content: ["images", "rootdir"].map(String::from).to_vec(),
                total: 500 << 30,
                nodes: vec![],
                shared: false,
            },
        ];
        let template = VmSeed {
            vmid: 9000,
            node: "pve1".into(),
            config: [
                ("name", "ubuntu-2404-cloudinit"),
                ("template", "1"),
                ("tags", "cloudinit;ubuntu"),
                ("ostype", "l26"),
                ("cores", "2"),
                ("sockets", "1"),
                ("memory", "2048"),
                ("cpu", "x86-64-v2-AES"),
                ("scsihw", "virtio-scsi-single"),
                ("scsi0", "local-lvm:base-9000-disk-0,size=10G"),
                ("ide2", "local-lvm:vm-9000-cloudinit,media=cdrom"),
                ("net0", "virtio=BC:24:11:00:90:00,bridge=vmbr0"),
                ("agent", "1"),
                ("boot", "order=scsi0"),
                ("serial0", "socket"),
                ("vga", "serial0"),
                ("ipconfig0", "ip=dhcp"),
                ("description", "Ubuntu 24.04 cloud image, cloud-init ready"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            running: false,
            pool: None,
        };
        Config {
            pve_version: "9.1.3".into(),
            cluster_name: "sim".into(),
            nodes,
            storages,
            vms: vec![template],
            vm_sets: vec![],
            pools: vec!["capi".into()],
            tokens: vec![DEFAULT_TOKEN.into()],
            api_tokens: vec![],
            roles: BTreeMap::new(),
            acls: vec![],
            users: [("root@pam".to_string(), DEFAULT_ROOT_PASSWORD.to_string())]
                .into_iter()
                .collect(),
            task_ms: default_task_ms(),
            default_task_ms: 50,
            node_task_concurrency: 4,
            lock_wait_ms: 10_000,
            clone_lock_wait_ms: 1_000,
            time_scale: 1.0,
            auth_failure_delay_ms: 0,
            boot_delay_ms: 500,
            agent_delay_ms: 500,
            cloud_init_delay_ms: 1_000,
            strict_memory: false,
            dhcp: DhcpConfig::default(),
            faults: Faults::default(),
            seed: None,
            max_body_bytes: 512 << 20,
        }
    }
}

impl Config {
    /// The default world with every task duration, boot and agent delay at zero:
    /// what tests want.
    pub fn fast() -> Self {
        Config::default().with_fast()
    }

    /// Sets every task duration and the boot/agent delays to zero.
    pub fn with_fast(mut self) -> Self {
        for v in self.task_ms.values_mut() {
            *v = 0;
        }
        self.default_task_ms = 0;
        self.boot_delay_ms = 0;
        self.agent_delay_ms = 0;
        self.cloud_init_delay_ms = 0;
        self
    }

    /// Parses a TOML document; missing fields keep their defaults.
    pub fn from_toml(text: &str) -> anyhow::Result<Self> {
        Ok(toml::from_str(text)?)
    }

    /// `ms` scaled by `time_scale`.
    pub fn scaled(&self, ms: u64) -> u64 {
        let scale = if self.time_scale.is_finite() && self.time_scale >= 0.0 {
            self.time_scale
        } else {
            1.0
        };
        (ms as f64 * scale).round() as u64
    }

    /// Duration of a task type in milliseconds (scaled).
    pub fn task_duration_ms(&self, task_type: &str) -> u64 {
        self.scaled(
            self.task_ms
                .get(task_type)
                .copied()
                .unwrap_or(self.default_task_ms),
        )
    }

    /// The wait for a config file lock held by another task (scaled).
    pub fn lock_wait(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.scaled(self.lock_wait_ms))
    }

    /// The clone task's wait for its source's and target's locks (scaled).
    pub fn clone_lock_wait(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.scaled(self.clone_lock_wait_ms))
    }

    /// Start task end -> guest booted; -> agent answers; -> cloud-init done (scaled).
    pub fn guest_delays(&self) -> crate::state::GuestDelays {
        crate::state::GuestDelays {
            boot_ms: self.scaled(self.boot_delay_ms),
            agent_ms: self.scaled(self.agent_delay_ms),
            cloud_init_ms: self.scaled(self.cloud_init_delay_ms),
        }
    }

    /// `(major, minor)` of `pve_version`.
    pub fn version_tuple(&self) -> (u32, u32) {
        let mut it = self.pve_version.split('.').map(|p| p.parse().unwrap_or(0));
        (it.next().unwrap_or(9), it.next().unwrap_or(0))
    }
}
