//! Permissions: ACLs per principal, evaluated with the official schema's permission checks.
//!
//! A principal (user `capmox@pve` or token `capmox@pve!capi`) without any `[[acls]]` entry
//! is unrestricted, so the default world needs no ACLs. Once a principal has entries, it has
//! exactly the privileges they grant: on the entry's path and, with `propagate` (default),
//! below it; an entry on `/pool/<pool>` also covers the pool's VMs (`/vms/<vmid>`). Entries
//! for a user also apply to its tokens. A failed check is PVE's 403 "Permission check
//! failed (PATH, PRIVILEGE)"; VM and storage listings only show what the principal may
//! audit.

use serde_json::Value;

use crate::config::AclEntry;
use crate::envelope::ApiError;
use crate::params::Params;
use crate::state::World;

/// Privileges of PVE's built-in roles (`VM.*` stands for every `VM.` privilege).
pub fn role_privs(role: &str) -> &'static [&'static str] {
    match role {
        "Administrator" => &["*"],
        "PVEAdmin" => &[
            "VM.*",
            "Datastore.*",
            "Sys.Audit",
            "Sys.Console",
            "Pool.*",
            "SDN.*",
        ],
        "PVEVMAdmin" => &["VM.*"],
        "PVEVMUser" => &[
            "VM.Audit",
            "VM.Console",
            "VM.Backup",
            "VM.PowerMgmt",
            "VM.Config.CDROM",
            "VM.Config.Cloudinit",
            "VM.GuestAgent.Audit",
        ],
        "PVEAuditor" => &[
            "VM.Audit",
            "Datastore.Audit",
            "Sys.Audit",
            "Pool.Audit",
            "SDN.Audit",
        ],
        "PVEDatastoreAdmin" => &["Datastore.*"],
        "PVEDatastoreUser" => &["Datastore.AllocateSpace", "Datastore.Audit"],
        "PVEPoolUser" => &["Pool.Audit"],
        _ => &[],
    }
}

fn priv_matches(granted: &str, wanted: &str) -> bool {
    granted == "*"
        || granted == wanted
        || granted
            .strip_suffix('*')
            .is_some_and(|prefix| wanted.starts_with(prefix))
}

/// The ACL entries that apply to a principal; `None` = unrestricted.
fn entries<'a>(acls: &'a [AclEntry], principal: &str) -> Option<Vec<&'a AclEntry>> {
    let user = principal.split('!').next().unwrap_or(principal);
    let e: Vec<&AclEntry> = acls
        .iter()
        .filter(|a| a.principal == principal || a.principal == user)
        .collect();
    (!e.is_empty()).then_some(e)
}

/// Paths whose ACLs apply to `path`: the path, its ancestors, and for a VM its pool.
fn covering_paths(w: &World, path: &str) -> Vec<(String, bool)> {
    let mut out = vec![(path.to_string(), true)];
    let mut p = path.to_string();
    while let Some(pos) = p.rfind('/') {
        p.truncate(pos);
        out.push((if p.is_empty() { "/".into() } else { p.clone() }, false));
        if p.is_empty() {
            break;
        }
    }
    if let Some(id) = path.strip_prefix("/vms/").and_then(|v| v.parse().ok())
        && let Some(pool) = w.pool_of(id)
    {
        out.push((format!("/pool/{pool}"), false));
        out.push(("/pool".into(), false));
    }
    out
}

/// Whether `principal` has `privilege` on `path`.
pub fn has(w: &World, acls: &[AclEntry], principal: &str, path: &str, privilege: &str) -> bool {
    let Some(mine) = entries(acls, principal) else {
        return true;
    };
    covering_paths(w, path).iter().any(|(p, exact)| {
        mine.iter().any(|a| {
            a.path == *p
                && (*exact || a.propagate)
                && a.granted().any(|g| priv_matches(g, privilege))
        })
    })
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

fn denied(what: &str) -> ApiError {
    ApiError::with_status(403, format!("Permission check failed ({what})"))
}

fn denied_plain() -> ApiError {
    ApiError::with_status(403, "Permission check failed")
}

/// Evaluates a schema permission check expression.
fn eval(
    w: &World,
    acls: &[AclEntry],
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
                eval(w, acls, principal, sub, params)?;
            }
            Ok(())
        }
        Some("or") => {
            if items[1..]
                .iter()
                .any(|sub| eval(w, acls, principal, sub, params).is_ok())
            {
                Ok(())
            } else {
                Err(denied_plain())
            }
        }
        Some("perm") => {
            let template = items.get(1).and_then(Value::as_str).unwrap_or("/");
            let privs: Vec<&str> = items
                .get(2)
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let opts: Vec<&str> = items[3.min(items.len())..]
                .iter()
                .filter_map(Value::as_str)
                .collect();
            if let Some(i) = opts.iter().position(|o| *o == "require_param")
                && let Some(p) = opts.get(i + 1)
                && !params.contains_key(*p)
            {
                return Err(denied_plain());
            }
            let Some(path) = subst(template, params) else {
                return Err(denied_plain());
            };
            let any = items[3.min(items.len())..]
                .windows(2)
                .any(|kv| kv[0].as_str() == Some("any") && kv[1].as_i64() == Some(1));
            if any {
                if privs.iter().any(|p| has(w, acls, principal, &path, p)) {
                    Ok(())
                } else {
                    Err(denied(&format!("{path}, {}", privs.join("|"))))
                }
            } else {
                match privs.iter().find(|p| !has(w, acls, principal, &path, p)) {
                    Some(p) => Err(denied(&format!("{path}, {p}"))),
                    None => Ok(()),
                }
            }
        }
        _ => Ok(()),
    }
}

/// Checks for endpoints outside the official subset.
fn extra_check(endpoint: &str) -> Option<Value> {
    let v = match endpoint {
        "POST /nodes/{node}/qemu/{vmid}/status/reboot" => {
            serde_json::json!(["perm", "/vms/{vmid}", ["VM.PowerMgmt"]])
        }
        "GET /nodes/{node}/qemu/{vmid}/agent/get-osinfo"
        | "GET /nodes/{node}/qemu/{vmid}/agent/get-host-name" => serde_json::json!([
            "perm",
            "/vms/{vmid}",
            ["VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted"],
            "any",
            1
        ]),
        "GET /cluster/status" => serde_json::json!(["perm", "/", ["Sys.Audit"]]),
        _ => return None,
    };
    Some(v)
}

/// Checks `principal` against the endpoint's permission check; unrestricted principals
/// always pass.
pub fn check(
    w: &World,
    acls: &[AclEntry],
    principal: &str,
    endpoint: &str,
    params: &Params,
) -> Result<(), ApiError> {
    if principal.is_empty() || entries(acls, principal).is_none() {
        return Ok(());
    }
    let check = crate::params::permission_check(w.version, endpoint)
        .cloned()
        .or_else(|| extra_check(endpoint));
    match check {
        Some(c) => eval(w, acls, principal, &c, params),
        None => Ok(()),
    }
}
