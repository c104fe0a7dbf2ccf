//! Permissions, evaluated as Proxmox VE evaluates them.
//!
//! Sources: the admin guide's "User Management" chapter (`pveum.adoc`) for the rules, the
//! official API schema (`permissions` of each endpoint, see `params`) for what each
//! endpoint checks, and pve-access-control's privilege groups for the built-in roles.
//!
//! * **Roles**: PVE's built-in roles for the presented version (`Administrator`,
//!   `NoAccess`, `PVEAdmin`, `PVEAuditor`, `PVE<Group>Admin`, `PVE<Group>User`,
//!   `PVETemplateUser`), plus the config's custom `roles`. PVE 9 has the
//!   `VM.GuestAgent.*` privileges and `VM.Replicate` and no `VM.Monitor`; PVE 8 the
//!   reverse.
//! * **Paths**: the roles of a principal on a path come from its ACL entries on the path
//!   and its ancestors, walked from `/` down: at each level where the principal has
//!   entries that apply (the level is the path itself, or the entry propagates), those
//!   entries replace everything inherited from above. `NoAccess` among them grants
//!   nothing. A VM in a pool also gets the roles the principal has on `/pool/<pool>`
//!   (the pool's own entries apply whether they propagate or not), unless the VM's own
//!   roles say `NoAccess`; a `NoAccess` on the pool wins over the VM's other roles.
//! * **Tokens**: a token with privilege separation (the default) has the privileges its
//!   own entries grant on a path, and of those only the ones its user has there too;
//!   without it, exactly its user's. The propagate flag of a privilege is the AND of
//!   both.
//! * **Compatibility**: a user that no ACL entry names, neither itself nor any of its
//!   tokens, is unrestricted with its tokens, so the default world needs no ACLs;
//!   `root@pam` is always unrestricted.
//!
//! A failed check is PVE's 403 "Permission check failed (PATH, PRIVILEGE)" (`PRIV1|PRIV2`
//! when any one would do), or a bare "Permission check failed" for an `or` none of whose
//! branches passed and for a missing `require_param`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::config::Config;
use crate::envelope::ApiError;
use crate::params::Params;
use crate::state::World;

/// A privilege and its propagate flag, as `GET /access/permissions` shows them.
pub type Privs = BTreeMap<String, bool>;

/// One of pve-access-control's privilege groups, split by who may hold them.
struct Group {
    name: &'static str,
    root: &'static [&'static str],
    admin: &'static [&'static str],
    user: &'static [&'static str],
    audit: &'static [&'static str],
}

/// The privilege groups of a PVE version.
fn groups(version: (u32, u32)) -> Vec<Group> {
    let pve9 = version.0 >= 9;
    let vm_admin: &'static [&'static str] = if pve9 {
        &[
            "VM.Config.Disk",
            "VM.Config.CPU",
            "VM.Config.Memory",
            "VM.Config.Network",
            "VM.Config.HWType",
            "VM.Config.Options",
            "VM.Allocate",
            "VM.Clone",
            "VM.GuestAgent.Unrestricted",
            "VM.Migrate",
            "VM.Replicate",
            "VM.Snapshot",
            "VM.Snapshot.Rollback",
        ]
    } else {
        &[
            "VM.Config.Disk",
            "VM.Config.CPU",
            "VM.Config.Memory",
            "VM.Config.Network",
            "VM.Config.HWType",
            "VM.Config.Options",
            "VM.Allocate",
            "VM.Clone",
            "VM.Migrate",
            "VM.Monitor",
            "VM.Snapshot",
            "VM.Snapshot.Rollback",
        ]
    };
    let vm_user: &'static [&'static str] = if pve9 {
        &[
            "VM.Config.CDROM",
            "VM.Config.Cloudinit",
            "VM.Console",
            "VM.Backup",
            "VM.GuestAgent.FileRead",
            "VM.GuestAgent.FileSystemMgmt",
            "VM.GuestAgent.FileWrite",
            "VM.PowerMgmt",
        ]
    } else {
        &[
            "VM.Config.CDROM",
            "VM.Config.Cloudinit",
            "VM.Console",
            "VM.Backup",
            "VM.PowerMgmt",
        ]
    };
    let vm_audit: &'static [&'static str] = if pve9 {
        &["VM.Audit", "VM.GuestAgent.Audit"]
    } else {
        &["VM.Audit"]
    };
    // Sys.AccessNetwork came with pve-access-control 8.1.2 (PVE 8.2)
    let sys_root: &'static [&'static str] = if version >= (8, 2) {
        &[
            "Sys.PowerMgmt",
            "Sys.Modify",
            "Sys.Incoming",
            "Sys.AccessNetwork",
        ]
    } else {
        &["Sys.PowerMgmt", "Sys.Modify", "Sys.Incoming"]
    };
    vec![
        Group {
            name: "VM",
            root: &[],
            admin: vm_admin,
            user: vm_user,
            audit: vm_audit,
        },
        Group {
            name: "Sys",
            root: sys_root,
            admin: &["Sys.Console", "Sys.Syslog"],
            user: &[],
            audit: &["Sys.Audit"],
        },
        Group {
            name: "Datastore",
            root: &[],
            admin: &["Datastore.Allocate", "Datastore.AllocateTemplate"],
            user: &["Datastore.AllocateSpace"],
            audit: &["Datastore.Audit"],
        },
        Group {
            name: "SDN",
            root: &[],
            admin: &["SDN.Allocate", "SDN.Audit"],
            user: &["SDN.Use"],
            audit: &["SDN.Audit"],
        },
        Group {
            name: "User",
            root: &["Realm.Allocate"],
            admin: &["User.Modify", "Group.Allocate", "Realm.AllocateUser"],
            user: &[],
            audit: &[],
        },
        Group {
            name: "Pool",
            root: &[],
            admin: &["Pool.Allocate"],
            user: &["Pool.Audit"],
            audit: &["Pool.Audit"],
        },
        Group {
            name: "Mapping",
            root: &[],
            admin: &["Mapping.Modify"],
            user: &["Mapping.Use"],
            audit: &["Mapping.Audit"],
        },
    ]
}

/// Every privilege the version knows.
pub fn valid_privs(version: (u32, u32)) -> BTreeSet<String> {
    let mut all: BTreeSet<String> = ["Permissions.Modify".to_string()].into();
    for g in groups(version) {
        for p in g.root.iter().chain(g.admin).chain(g.user).chain(g.audit) {
            all.insert(p.to_string());
        }
    }
    all
}

/// PVE's built-in roles for the version, with their privileges.
pub fn builtin_roles(version: (u32, u32)) -> BTreeMap<String, BTreeSet<String>> {
    let mut roles: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    roles.insert("NoAccess".into(), BTreeSet::new());
    roles.insert("Administrator".into(), valid_privs(version));
    for g in groups(version) {
        for p in g.admin.iter().chain(g.user).chain(g.audit) {
            for role in [format!("PVE{}Admin", g.name), "PVEAdmin".to_string()] {
                roles.entry(role).or_default().insert(p.to_string());
            }
        }
        if !g.user.is_empty() {
            for p in g.user.iter().chain(g.audit) {
                roles
                    .entry(format!("PVE{}User", g.name))
                    .or_default()
                    .insert(p.to_string());
            }
        }
        for p in g.audit {
            roles
                .entry("PVEAuditor".into())
                .or_default()
                .insert(p.to_string());
        }
    }
    // only Administrator and PVEMappingAdmin may modify mappings
    if let Some(admin) = roles.get_mut("PVEAdmin") {
        admin.remove("Mapping.Modify");
    }
    roles.insert(
        "PVETemplateUser".into(),
        ["VM.Clone", "VM.Audit"].map(String::from).into(),
    );
    roles
}

/// PVE's `normalize_path`: one leading slash, no doubled or trailing ones.
pub fn normalize(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    format!("/{}", parts.join("/"))
}

/// The user part of `user@realm!token`.
pub fn user_of(principal: &str) -> &str {
    principal.split('!').next().unwrap_or(principal)
}

/// An ACL entry resolved: its privileges, whether it is `NoAccess`, and its flag.
struct Entry {
    path: String,
    principal: String,
    privs: BTreeSet<String>,
    no_access: bool,
    propagate: bool,
}

/// The roles in effect on a path: the entries of the deepest level that applied.
struct Roles<'a>(Vec<&'a Entry>);

impl Roles<'_> {
    fn no_access(&self) -> bool {
        self.0.iter().any(|e| e.no_access)
    }
}

/// The config's access control, resolved once at start.
pub struct Access {
    all: BTreeSet<String>,
    entries: Vec<Entry>,
    /// Users that an entry names (itself or one of its tokens): PVE's rules apply.
    restricted: BTreeSet<String>,
    /// Token ID -> privilege separation.
    tokens: BTreeMap<String, bool>,
    /// Users that exist: logins, owners of tokens, principals of entries.
    users: BTreeSet<String>,
}

impl Access {
    /// Resolves roles and entries; refuses unknown roles and privileges, custom roles
    /// named like built-in ones, and malformed principals or paths.
    pub fn new(cfg: &Config) -> anyhow::Result<Access> {
        let version = cfg.version_tuple();
        let all = valid_privs(version);
        let mut roles = builtin_roles(version);
        for (name, privs) in &cfg.roles {
            if roles.contains_key(name) {
                anyhow::bail!("roles: '{name}' is a built-in role");
            }
            let mut set = BTreeSet::new();
            for p in privs {
                if !all.contains(p) {
                    anyhow::bail!("roles.{name}: invalid privilege '{p}'");
                }
                set.insert(p.clone());
            }
            roles.insert(name.clone(), set);
        }
        let mut entries = vec![];
        let mut restricted = BTreeSet::new();
        let mut users: BTreeSet<String> = cfg.users.keys().cloned().collect();
        for (i, a) in cfg.acls.iter().enumerate() {
            if !a.principal.contains('@') {
                anyhow::bail!(
                    "acls[{i}]: principal '{}' is neither a user (u@realm) nor a token (u@realm!id)",
                    a.principal
                );
            }
            if !a.path.starts_with('/') {
                anyhow::bail!("acls[{i}]: path '{}' does not start with '/'", a.path);
            }
            let mut privs = BTreeSet::new();
            if let Some(r) = &a.role {
                let Some(set) = roles.get(r) else {
                    anyhow::bail!("acls[{i}]: role '{r}' does not exist");
                };
                privs.extend(set.iter().cloned());
            }
            for p in &a.privs {
                if !all.contains(p) {
                    anyhow::bail!("acls[{i}]: invalid privilege '{p}'");
                }
                privs.insert(p.clone());
            }
            restricted.insert(user_of(&a.principal).to_string());
            users.insert(user_of(&a.principal).to_string());
            entries.push(Entry {
                path: normalize(&a.path),
                principal: a.principal.clone(),
                privs,
                no_access: a.role.as_deref() == Some("NoAccess"),
                propagate: a.propagate,
            });
        }
        let mut tokens = BTreeMap::new();
        for t in &cfg.tokens {
            if let Some((id, _)) = crate::api::parse_token(t) {
                tokens.insert(id.to_string(), true);
            }
        }
        for t in &cfg.api_tokens {
            tokens.insert(t.id.clone(), t.privsep);
        }
        users.extend(tokens.keys().map(|t| user_of(t).to_string()));
        Ok(Access {
            all,
            entries,
            restricted,
            tokens,
            users,
        })
    }

    /// Whether the principal is a user or token that exists.
    pub fn exists(&self, principal: &str) -> bool {
        if principal.contains('!') {
            self.tokens.contains_key(principal)
        } else {
            self.users.contains(principal)
        }
    }

    /// `root@pam`, and users (with their tokens) that no ACL entry names.
    pub fn unrestricted(&self, principal: &str) -> bool {
        principal == "root@pam"
            || (self.exists(principal) && !self.restricted.contains(user_of(principal)))
    }

    /// The roles `who` has on `path` from its own entries (no pools, no token rules):
    /// PVE's walk from `/` down, each level with applying entries replacing the rest.
    fn roles(&self, who: &str, path: &str) -> Roles<'_> {
        let mine: Vec<&Entry> = self.entries.iter().filter(|e| e.principal == who).collect();
        let mut current = vec![];
        if mine.is_empty() {
            return Roles(current);
        }
        let mut levels = vec!["/".to_string()];
        let mut at = String::new();
        for seg in path.split('/').filter(|s| !s.is_empty()) {
            at.push('/');
            at.push_str(seg);
            levels.push(at.clone());
        }
        let last = levels.len() - 1;
        for (i, level) in levels.iter().enumerate() {
            let applying: Vec<&Entry> = mine
                .iter()
                .copied()
                .filter(|e| e.path == *level && (i == last || e.propagate))
                .collect();
            if !applying.is_empty() {
                current = applying;
            }
        }
        Roles(current)
    }

    /// The privileges `who`'s own entries give on `path`, pools included (PVE's
    /// `compile_acl_path`, before the token intersection).
    fn compile(&self, w: &World, who: &str, path: &str) -> Privs {
        let roles = self.roles(who, path);
        let mut out = Privs::new();
        if roles.no_access() {
            return out;
        }
        for e in &roles.0 {
            for p in &e.privs {
                let flag = out.entry(p.clone()).or_insert(false);
                *flag |= e.propagate;
            }
        }
        if let Some(id) = path.strip_prefix("/vms/").and_then(|v| v.parse().ok())
            && let Some(pool) = w.pool_of(id)
        {
            let pool_roles = self.roles(who, &format!("/pool/{pool}"));
            if pool_roles.no_access() {
                return Privs::new();
            }
            for e in &pool_roles.0 {
                for p in &e.privs {
                    out.entry(p.clone()).or_insert(false);
                }
            }
        }
        out
    }

    /// Every privilege the principal holds on `path`, with its propagate flag.
    pub fn privileges(&self, w: &World, principal: &str, path: &str) -> Privs {
        let path = normalize(path);
        if self.unrestricted(principal) {
            return self.all.iter().map(|p| (p.clone(), true)).collect();
        }
        if !self.exists(principal) {
            return Privs::new();
        }
        if principal.contains('!') {
            let user = user_of(principal);
            let of_user = self.privileges(w, user, &path);
            if self.tokens.get(principal) == Some(&false) {
                return of_user;
            }
            return self
                .compile(w, principal, &path)
                .into_iter()
                .filter_map(|(p, flag)| of_user.get(&p).map(|u| (p, flag && *u)))
                .collect();
        }
        self.compile(w, principal, &path)
    }

    /// Whether the principal holds `privilege` on `path`.
    pub fn has(&self, w: &World, principal: &str, path: &str, privilege: &str) -> bool {
        self.unrestricted(principal) || self.privileges(w, principal, path).contains_key(privilege)
    }

    /// PVE's `check`: every privilege on `path`, the first missing one named.
    pub fn require(
        &self,
        w: &World,
        principal: &str,
        path: &str,
        privs: &[&str],
    ) -> Result<(), ApiError> {
        if self.unrestricted(principal) {
            return Ok(());
        }
        let held = self.privileges(w, principal, path);
        match privs.iter().find(|p| !held.contains_key(**p)) {
            Some(p) => Err(denied(&format!("{path}, {p}"))),
            None => Ok(()),
        }
    }

    /// PVE's `check_any`: one of the privileges on `path`, all named when none is held.
    pub fn require_any(
        &self,
        w: &World,
        principal: &str,
        path: &str,
        privs: &[&str],
    ) -> Result<(), ApiError> {
        if self.unrestricted(principal) {
            return Ok(());
        }
        let held = self.privileges(w, principal, path);
        if privs.iter().any(|p| held.contains_key(*p)) {
            Ok(())
        } else {
            Err(denied(&format!("{path}, {}", privs.join("|"))))
        }
    }

    /// `GET /access/permissions` without `path`: the top-level paths, every path an ACL
    /// entry names, and every pool member's path, each with the principal's privileges
    /// (paths without any left out).
    pub fn effective(&self, w: &World, principal: &str) -> BTreeMap<String, Privs> {
        let mut paths: BTreeSet<String> = [
            "/",
            "/access",
            "/access/groups",
            "/nodes",
            "/pool",
            "/sdn",
            "/storage",
            "/vms",
        ]
        .map(String::from)
        .into();
        paths.extend(self.entries.iter().map(|e| e.path.clone()));
        for members in w.pools.values() {
            paths.extend(members.iter().map(|id| format!("/vms/{id}")));
        }
        paths
            .into_iter()
            .filter_map(|p| {
                let privs = self.privileges(w, principal, &p);
                (!privs.is_empty()).then_some((p, privs))
            })
            .collect()
    }

    /// Checks `principal` against the endpoint's permission check expression.
    pub fn check(
        &self,
        w: &World,
        principal: &str,
        endpoint: &str,
        params: &Params,
    ) -> Result<(), ApiError> {
        if principal.is_empty() || self.unrestricted(principal) {
            return Ok(());
        }
        let check = crate::params::permission_check(w.version, endpoint)
            .cloned()
            .or_else(|| extra_check(endpoint));
        match check {
            Some(c) => self.eval(w, principal, &c, params),
            None => Ok(()),
        }
    }

    /// Evaluates a schema permission check expression (`and`, `or`, `perm` with `any`
    /// and `require_param`).
    fn eval(
        &self,
        w: &World,
        principal: &str,
        check: &Value,
        params: &Params,
    ) -> Result<(), ApiError> {
        let Some(items) = check.as_array() else {
            return Ok(());
        };
        match items.first().and_then(Value::as_str) {
            Some("and") => {
                for sub in &items[1..] {
                    self.eval(w, principal, sub, params)?;
                }
                Ok(())
            }
            Some("or") => {
                if items[1..]
                    .iter()
                    .any(|sub| self.eval(w, principal, sub, params).is_ok())
                {
                    Ok(())
                } else {
                    Err(denied_plain())
                }
            }
            Some("perm") => {
                let template = items.get(1).and_then(Value::as_str).unwrap_or("/");
                // the privileges: a list, or (in some entries of the schema) one name
                let privs: Vec<&str> = match items.get(2) {
                    Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
                    Some(Value::String(s)) => vec![s.as_str()],
                    _ => vec![],
                };
                let opts = &items[3.min(items.len())..];
                let opt = |name: &str| {
                    opts.chunks(2)
                        .find(|kv| kv[0].as_str() == Some(name))
                        .and_then(|kv| kv.get(1))
                };
                if let Some(p) = opt("require_param").and_then(Value::as_str)
                    && !params.contains_key(p)
                {
                    return Err(denied_plain());
                }
                let Some(path) = subst(template, params) else {
                    return Err(denied_plain());
                };
                let path = normalize(&path);
                if opt("any").and_then(Value::as_i64) == Some(1) {
                    self.require_any(w, principal, &path, &privs)
                } else {
                    self.require(w, principal, &path, &privs)
                }
            }
            _ => Ok(()),
        }
    }
}

fn subst(template: &str, params: &Params) -> Option<String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}')? + start;
        out.push_str(params.get(&rest[start + 1..end])?);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    Some(out)
}

/// PVE's `raise_perm_exc(WHAT)`: 403 "Permission check failed (WHAT)".
pub fn denied(what: &str) -> ApiError {
    ApiError::with_status(403, format!("Permission check failed ({what})"))
}

/// PVE's `raise_perm_exc()` without a subject.
pub fn denied_plain() -> ApiError {
    ApiError::with_status(403, "Permission check failed")
}

/// Checks for endpoints the schema files carry none for.
fn extra_check(endpoint: &str) -> Option<Value> {
    let v = match endpoint {
        "POST /nodes/{node}/qemu/{vmid}/status/reboot" => {
            serde_json::json!(["perm", "/vms/{vmid}", ["VM.PowerMgmt"]])
        }
        "GET /cluster/status" => serde_json::json!(["perm", "/", ["Sys.Audit"]]),
        _ => return None,
    };
    Some(v)
}

/// The privileges a (non-drive) config key needs, any one of them for the cloud-init
/// keys: qemu-server's `check_vm_modify_config_perm` (drives are checked by their value,
/// see [`drive_privs`]). `None`: "only root can set 'KEY' config".
pub fn config_key_privs(key: &str) -> Option<&'static [&'static str]> {
    const CPU: &[&str] = &[
        "cores",
        "cpu",
        "runningcpu",
        "cpulimit",
        "cpuunits",
        "numa",
        "smp",
        "sockets",
        "vcpus",
    ];
    const MEMORY: &[&str] = &["memory", "balloon", "shares", "allow-ksm"];
    const HWTYPE: &[&str] = &[
        "acpi",
        "hotplug",
        "kvm",
        "machine",
        "runningmachine",
        "scsihw",
        "smbios1",
        "tablet",
        "vga",
        "watchdog",
        "audio0",
        "rng0",
    ];
    const OPTIONS: &[&str] = &[
        "agent",
        "autostart",
        "bios",
        "description",
        "keyboard",
        "localtime",
        "migrate_downtime",
        "migrate_speed",
        "name",
        "onboot",
        "ostype",
        "protection",
        "reboot",
        "startdate",
        "startup",
        "tdf",
        "template",
        // tags: their own check, which asks VM.Config.Options for unprivileged tags
        "tags",
    ];
    const DISK: &[&str] = &["boot", "bootdisk", "vmstatestorage"];
    const CLOUDINIT: &[&str] = &[
        "cicustom",
        "cipassword",
        "citype",
        "ciuser",
        "ciupgrade",
        "nameserver",
        "searchdomain",
        "sshkeys",
    ];
    let indexed = |base: &str| {
        key.strip_prefix(base)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    if CPU.contains(&key) || indexed("numa") {
        Some(&["VM.Config.CPU"])
    } else if MEMORY.contains(&key) {
        Some(&["VM.Config.Memory"])
    } else if HWTYPE.contains(&key) || indexed("serial") {
        Some(&["VM.Config.HWType"])
    } else if OPTIONS.contains(&key) {
        Some(&["VM.Config.Options"])
    } else if key == "freeze" {
        Some(&["VM.PowerMgmt"])
    } else if DISK.contains(&key) || indexed("unused") {
        Some(&["VM.Config.Disk"])
    } else if indexed("net") {
        Some(&["VM.Config.Network"])
    } else if CLOUDINIT.contains(&key) || indexed("ipconfig") {
        Some(&["VM.Config.Cloudinit", "VM.Config.Network"])
    } else {
        None
    }
}

/// The privileges a drive value needs (qemu-server's `check_drive_perms`): the
/// cloud-init drive `VM.Config.Cloudinit` and `VM.Config.CDROM`, other CD-ROMs
/// `VM.Config.CDROM`, disks `VM.Config.Disk`.
pub fn drive_privs(value: &str) -> &'static [&'static str] {
    let opts = crate::state::drive_options(value);
    let file = opts.get("file").map(String::as_str).unwrap_or("");
    let cdrom = opts.get("media").is_some_and(|m| m == "cdrom") || file == "cdrom";
    if file.contains("cloudinit") {
        &["VM.Config.Cloudinit", "VM.Config.CDROM"]
    } else if cdrom {
        &["VM.Config.CDROM"]
    } else {
        &["VM.Config.Disk"]
    }
}
