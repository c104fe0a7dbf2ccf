//! `/api2/json`: routing, authentication, fault injection, parameter decoding and
//! validation, then one handler per endpoint (one module per area).

mod access;
mod agent;
mod cloudinit;
mod cluster;
mod lxc;
mod nodes;
pub(crate) mod qemu;
mod storage;
mod tasks;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::http::request::Parts;
use serde_json::Value;

use crate::envelope::{self, ApiError, ApiResult, Data, Resp};
use crate::params::{self, Params};
use crate::server::Shared;
use crate::state::{Vm, World};

/// One API call being handled.
pub struct Call<'a> {
    pub shared: &'a Arc<Shared>,
    pub endpoint: &'static str,
    pub params: Params,
    /// The authenticated principal (`root@pam`, `capmox@pve!capi`).
    pub user: String,
    /// The uploaded file of a multipart request: `(filename, contents)`.
    pub file: Option<(String, Bytes)>,
    /// A fault a rule decided for this request, for the handler or the task it starts.
    pub fault: Option<crate::faults::TaskFault>,
}

impl Call<'_> {
    pub fn p(&self, k: &str) -> Option<&str> {
        self.params.get(k).map(String::as_str)
    }
    pub fn node(&self) -> &str {
        self.p("node").unwrap_or("")
    }
    pub fn vmid(&self) -> u32 {
        self.p("vmid").and_then(|v| v.parse().ok()).unwrap_or(0)
    }
    pub fn flag(&self, k: &str) -> bool {
        self.p(k).and_then(params::parse_bool).unwrap_or(false)
    }
    pub fn ms(&self, kind: &str) -> u64 {
        self.shared.config.task_duration_ms(kind)
    }
    /// Whether the caller has `privilege` on `path` (for filtering listings).
    pub fn can(&self, w: &World, path: &str, privilege: &str) -> bool {
        self.shared.access.has(w, &self.user, path, privilege)
    }
    /// PVE's `check`: the caller holds every one of `privs` on `path`.
    pub fn require(&self, w: &World, path: &str, privs: &[&str]) -> ApiResult<()> {
        self.shared.access.require(w, &self.user, path, privs)
    }
    /// PVE's `check_any`: the caller holds one of `privs` on `path`.
    pub fn require_any(&self, w: &World, path: &str, privs: &[&str]) -> ApiResult<()> {
        self.shared.access.require_any(w, &self.user, path, privs)
    }
}

type Handler = fn(&mut Call) -> ApiResult<Data>;

struct Route {
    method: &'static str,
    template: &'static str,
    handler: Handler,
}

macro_rules! routes {
    ($($m:literal $t:literal => $h:path,)*) => {
        &[$(Route { method: $m, template: $t, handler: |c| $h(c).map(Into::into) },)*]
    };
}

static ROUTES: &[Route] = routes! {
    "GET" "/version" => access::version,
    "POST" "/access/ticket" => access::ticket,
    "GET" "/access/permissions" => access::permissions,
    "GET" "/cluster/status" => cluster::status,
    "GET" "/cluster/nextid" => cluster::nextid,
    "GET" "/cluster/resources" => cluster::resources,
    "GET" "/cluster/tasks" => tasks::cluster,
    "GET" "/pools" => cluster::pools,
    "GET" "/nodes" => nodes::list,
    "GET" "/nodes/{node}/status" => nodes::status,
    "GET" "/nodes/{node}/certificates/info" => nodes::certificates,
    "GET" "/nodes/{node}/qemu" => qemu::list,
    "POST" "/nodes/{node}/qemu" => qemu::create,
    "GET" "/nodes/{node}/qemu/{vmid}/cloudinit" => cloudinit::get,
    "PUT" "/nodes/{node}/qemu/{vmid}/cloudinit" => cloudinit::regenerate,
    "GET" "/nodes/{node}/qemu/{vmid}/cloudinit/dump" => cloudinit::dump,
    "GET" "/nodes/{node}/qemu/{vmid}/config" => qemu::get_config,
    "POST" "/nodes/{node}/qemu/{vmid}/config" => qemu::post_config,
    "PUT" "/nodes/{node}/qemu/{vmid}/config" => qemu::put_config,
    "GET" "/nodes/{node}/qemu/{vmid}/pending" => qemu::pending,
    "POST" "/nodes/{node}/qemu/{vmid}/clone" => qemu::clone,
    "PUT" "/nodes/{node}/qemu/{vmid}/resize" => qemu::resize,
    "GET" "/nodes/{node}/qemu/{vmid}/status/current" => qemu::status_current,
    "POST" "/nodes/{node}/qemu/{vmid}/status/start" => qemu::start,
    "POST" "/nodes/{node}/qemu/{vmid}/status/stop" => qemu::stop,
    "POST" "/nodes/{node}/qemu/{vmid}/status/shutdown" => qemu::shutdown,
    "POST" "/nodes/{node}/qemu/{vmid}/status/reboot" => qemu::reboot,
    "DELETE" "/nodes/{node}/qemu/{vmid}" => qemu::destroy,
    "POST" "/nodes/{node}/qemu/{vmid}/migrate" => qemu::migrate,
    "GET" "/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces" => agent::network_get_interfaces,
    "GET" "/nodes/{node}/qemu/{vmid}/agent/get-osinfo" => agent::get_osinfo,
    "GET" "/nodes/{node}/qemu/{vmid}/agent/get-host-name" => agent::get_host_name,
    "POST" "/nodes/{node}/qemu/{vmid}/agent/ping" => agent::ping,
    "POST" "/nodes/{node}/qemu/{vmid}/agent/exec" => agent::exec,
    "GET" "/nodes/{node}/qemu/{vmid}/agent/exec-status" => agent::exec_status,
    "GET" "/nodes/{node}/lxc" => lxc::list,
    "GET" "/nodes/{node}/tasks" => tasks::list,
    "GET" "/nodes/{node}/tasks/{upid}/status" => tasks::status,
    "GET" "/nodes/{node}/tasks/{upid}/log" => tasks::log,
    "DELETE" "/nodes/{node}/tasks/{upid}" => tasks::stop,
    "GET" "/nodes/{node}/storage" => storage::list,
    "GET" "/nodes/{node}/storage/{storage}/content" => storage::content,
    "POST" "/nodes/{node}/storage/{storage}/upload" => storage::upload,
    "GET" "/nodes/{node}/storage/{storage}/content/{volume}" => storage::volume_info,
    "DELETE" "/nodes/{node}/storage/{storage}/content/{volume}" => storage::delete_volume,
};

/// All endpoint templates the simulator serves, as `"METHOD /path/template"`.
pub fn endpoints() -> Vec<String> {
    ROUTES
        .iter()
        .map(|r| format!("{} {}", r.method, r.template))
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Finds the route for a method and path, with the path parameters it captures.
fn find_route(method: &str, path: &str) -> Option<(&'static Route, Params)> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    'routes: for r in ROUTES {
        if r.method != method {
            continue;
        }
        let tsegs: Vec<&str> = r.template.trim_matches('/').split('/').collect();
        if tsegs.len() != segs.len() {
            continue;
        }
        let mut caps = Params::new();
        for (t, s) in tsegs.iter().zip(&segs) {
            if let Some(name) = t.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
                if s.is_empty() {
                    continue 'routes;
                }
                caps.insert(name.to_string(), percent_decode(s));
            } else if t != s {
                continue 'routes;
            }
        }
        return Some((r, caps));
    }
    None
}

/// Parses `PVEAPIToken=USER@REALM!TOKENID=SECRET` into `(tokenid, secret)`.
pub fn parse_token(s: &str) -> Option<(&str, &str)> {
    let (id, secret) = s.rsplit_once('=')?;
    if !id.contains('!') || !id.contains('@') {
        return None;
    }
    Some((id, secret))
}

enum Auth {
    Token(String),
    Ticket { user: String, csrf: String },
}

/// Checks an API token as PVE's `verify_token` does, with its messages (the 401's reason
/// phrase): the user must exist, the token exist for it, and the secret match.
fn verify_token(shared: &Shared, value: &str) -> Result<String, ApiError> {
    let deny = ApiError::unauthorized;
    let Some((id, secret)) = value.rsplit_once('=') else {
        return Err(deny("no tokenid specified"));
    };
    let Some((user, token)) = id
        .split_once('!')
        .filter(|(u, t)| u.contains('@') && !t.is_empty())
    else {
        return Err(deny(&format!(
            "'{id}' is not a valid token ID - not able to split into user and token parts"
        )));
    };
    let tokens: Vec<(&str, &str)> = shared
        .config
        .tokens
        .iter()
        .filter_map(|t| parse_token(t))
        .chain(
            shared
                .config
                .api_tokens
                .iter()
                .map(|t| (t.id.as_str(), t.secret.as_str())),
        )
        .collect();
    let user_exists = shared.config.users.contains_key(user)
        || tokens
            .iter()
            .any(|(t, _)| t.split('!').next() == Some(user));
    if !user_exists {
        return Err(deny(&format!("no such user ('{user}')")));
    }
    let Some((_, expected)) = tokens.iter().find(|(t, _)| *t == id) else {
        return Err(deny(&format!("no such token '{token}' for user '{user}'")));
    };
    if *expected != secret {
        return Err(deny("invalid token value!"));
    }
    Ok(id.to_string())
}

fn authenticate(shared: &Shared, parts: &Parts) -> Result<Auth, ApiError> {
    if let Some(h) = parts.headers.get(hyper::header::AUTHORIZATION) {
        let h = h.to_str().unwrap_or("");
        let Some(rest) = h.strip_prefix("PVEAPIToken") else {
            return Err(ApiError::unauthorized("authentication failure"));
        };
        let rest = rest.trim_start_matches(['=', ' ']);
        return verify_token(shared, rest).map(Auth::Token);
    }
    for c in parts.headers.get_all(hyper::header::COOKIE) {
        for kv in c.to_str().unwrap_or("").split(';') {
            if let Some(t) = kv.trim().strip_prefix("PVEAuthCookie=") {
                let ticket = percent_decode(t);
                return match shared.lock().tickets.get(&ticket) {
                    Some(t) => Ok(Auth::Ticket {
                        user: t.user.clone(),
                        csrf: t.csrf.clone(),
                    }),
                    None => Err(ApiError::unauthorized("invalid ticket")),
                };
            }
        }
    }
    Err(ApiError::unauthorized("No ticket"))
}

fn header<'a>(parts: &'a Parts, name: &str) -> &'a str {
    parts
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    (from..=hay.len() - needle.len()).find(|&i| &hay[i..i + needle.len()] == needle)
}

fn disposition_param(h: &str, key: &str) -> Option<String> {
    h.split(';').find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        (k.eq_ignore_ascii_case(key)).then(|| v.trim_matches('"').to_string())
    })
}

type Multipart = (Params, Option<(String, Bytes)>);

/// Parses `multipart/form-data`: text fields into params, the file part aside.
fn parse_multipart(ct: &str, body: &Bytes) -> Result<Multipart, ApiError> {
    let boundary = disposition_param(ct, "boundary")
        .ok_or_else(|| ApiError::with_status(400, "missing boundary in multipart content"))?;
    let delim = format!("--{boundary}");
    let mut params = Params::new();
    let mut file = None;
    let mut pos = find(body, delim.as_bytes(), 0)
        .ok_or_else(|| ApiError::with_status(400, "malformed multipart body"))?;
    loop {
        let start = pos + delim.len();
        if body.get(start..start + 2) == Some(b"--") {
            break;
        }
        let hstart = start + 2;
        let Some(hend) = find(body, b"\r\n\r\n", hstart) else {
            break;
        };
        let headers = String::from_utf8_lossy(&body[hstart..hend]).into_owned();
        let Some(next) = find(body, format!("\r\n{delim}").as_bytes(), hend + 4) else {
            break;
        };
        let content = body.slice(hend + 4..next);
        let disp = headers
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("content-disposition:"))
            .unwrap_or("");
        let name = disposition_param(disp, "name").unwrap_or_default();
        match disposition_param(disp, "filename") {
            Some(fname) => {
                params.insert(name, fname.clone());
                file = Some((fname, content));
            }
            None => {
                params.insert(name, String::from_utf8_lossy(&content).into_owned());
            }
        }
        pos = next + 2;
    }
    Ok((params, file))
}

fn json_to_params(body: &[u8]) -> Result<Params, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::with_status(400, format!("unable to parse JSON body: {e}")))?;
    let Some(obj) = v.as_object() else {
        return Err(ApiError::with_status(400, "JSON body is not an object"));
    };
    Ok(obj
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| {
            let s = match v {
                Value::String(s) => s.clone(),
                Value::Bool(b) => if *b { "1" } else { "0" }.to_string(),
                // An array parameter (e.g. agent/exec's `command`, as go-proxmox sends
                // it): the same values as repeated form fields.
                Value::Array(items) => items
                    .iter()
                    .map(|i| i.as_str().map_or_else(|| i.to_string(), String::from))
                    .collect::<Vec<_>>()
                    .join("\0"),
                other => other.to_string(),
            };
            (k.clone(), s)
        })
        .collect())
}

/// Handles one `/api2/json` request.
pub async fn handle(shared: &Arc<Shared>, parts: Parts, body: Bytes) -> Resp {
    let with_message = shared.config.version_tuple() >= (8, 3);
    let mut entry = crate::journal::Entry::begin(&parts, &body);
    let res = handle_inner(shared, parts, body, &mut entry.user).await;
    shared.journal.record(entry, &res);
    match res {
        Ok(v) => envelope::ok_data(v),
        Err(e) => envelope::error(&e, with_message),
    }
}

/// Handles a request; `principal` is set to the caller once authenticated (for the
/// journal).
async fn handle_inner(
    shared: &Arc<Shared>,
    parts: Parts,
    body: Bytes,
    principal: &mut String,
) -> ApiResult<Data> {
    let method = parts.method.as_str().to_string();
    let full_path = parts.uri.path().to_string();
    let Some(path) = full_path.strip_prefix("/api2/json") else {
        return Err(ApiError::not_implemented(&method, &full_path));
    };
    let path = if path.is_empty() { "/" } else { path };
    let Some((route, caps)) = find_route(&method, path) else {
        shared.lock().count(&format!("{method} <unknown>"));
        return Err(ApiError::not_implemented(&method, path));
    };
    let endpoint: &'static str = route.template;
    let key = format!("{method} {endpoint}");
    shared.lock().count(&key);
    // authentication (PVE delays failures; `auth_failure_delay_ms`)
    let user = if endpoint == "/access/ticket" && method == "POST" {
        String::new()
    } else {
        let auth = match authenticate(shared, &parts) {
            Ok(a) => a,
            Err(e) => {
                let delay = shared.config.auth_failure_delay_ms;
                if delay > 0 {
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                }
                return Err(e);
            }
        };
        match auth {
            Auth::Token(id) => id,
            Auth::Ticket { user, csrf } => {
                if method != "GET" && header(&parts, "CSRFPreventionToken") != csrf {
                    return Err(ApiError::unauthorized(
                        "Permission denied - invalid csrf token",
                    ));
                }
                user
            }
        }
    };
    principal.clone_from(&user);
    // pve-http-server refuses a body on anything but POST/PUT, after authentication
    if method != "POST" && method != "PUT" && !body.is_empty() {
        return Err(ApiError::with_status(
            501,
            format!("Unexpected content for method '{method}'"),
        ));
    }
    // faults: latency, unreachable nodes, rules
    let (decision, unreachable) = {
        let mut w = shared.lock();
        let unreachable = caps.get("node").is_some_and(|n| {
            w.faults.unreachable_nodes.contains(n) || w.nodes.get(n).is_some_and(|n| !n.online)
        });
        let writes_vm =
            method != "GET" && caps.contains_key("vmid") && !endpoint.contains("/agent/");
        (w.decide_faults(&method, path, writes_vm), unreachable)
    };
    if decision.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(decision.delay_ms)).await;
    }
    if unreachable {
        return Err(ApiError::unreachable());
    }
    if let Some(e) = decision.error {
        return Err(e);
    }
    // parameters
    let ct = header(&parts, "content-type").to_ascii_lowercase();
    let mut params = params::decode_urlencoded(parts.uri.query().unwrap_or(""));
    let mut file = None;
    if method == "POST" || method == "PUT" {
        let body_params = if ct.starts_with("multipart/form-data") {
            let (p, f) = parse_multipart(header(&parts, "content-type"), &body)?;
            file = f;
            p
        } else if ct.starts_with("application/json") {
            json_to_params(&body)?
        } else {
            params::decode_urlencoded(&String::from_utf8_lossy(&body))
        };
        params.extend(body_params);
    }
    for (k, v) in caps {
        params.insert(k, v);
    }
    params::validate(shared.config.version_tuple(), &key, &params)?;
    if let Some(node) = params.get("node") {
        check_node(&shared.lock(), node)?;
    }
    shared.access.check(&shared.lock(), &user, &key, &params)?;
    // synchronous config writes hold the VM's config file lock while they write: wait for
    // the tasks holding it
    let mut write_lock = None;
    if endpoint == "/nodes/{node}/qemu/{vmid}/config"
        && method != "GET"
        && let Some(vmid) = params.get("vmid").and_then(|v| v.parse().ok())
    {
        let timeout = decision.task == Some(crate::faults::TaskFault::LockTimeout);
        let mode = crate::locks::LockMode::Exclusive;
        if timeout || !crate::locks::flock(shared, vmid, mode, shared.config.lock_wait()).await {
            return Err(ApiError::die(crate::locks::lock_timeout_message(vmid)));
        }
        write_lock = Some((vmid, mode));
    }
    let mut call = Call {
        shared,
        endpoint,
        params,
        user,
        file,
        fault: decision.task,
    };
    let res = (route.handler)(&mut call);
    if let Some((vmid, mode)) = write_lock {
        shared.lock().release_flock(vmid, mode);
        shared.unlocked.notify_waiters();
    }
    match decision.error_after {
        Some(lost) => Err(lost),
        None => res,
    }
}

/// PVE resolves the node name to proxy the request; an unknown node fails that way.
pub fn check_node(w: &World, node: &str) -> ApiResult<()> {
    if w.nodes.contains_key(node) {
        Ok(())
    } else {
        Err(ApiError::die(format!(
            "hostname lookup '{node}' failed - failed to get address info for: {node}: Name or service not known"
        )))
    }
}

/// The VM `vmid` if its config lives on `node`.
pub fn vm_on<'w>(w: &'w World, node: &str, vmid: u32) -> ApiResult<&'w Vm> {
    match w.vms.get(&vmid) {
        Some(vm) if vm.node == node => Ok(vm),
        _ => Err(ApiError::no_vm(node, vmid)),
    }
}

/// `VM is locked (<lock>)` unless `skiplock`.
pub fn check_lock(vm: &Vm, skiplock: bool) -> Result<(), String> {
    match vm.lock() {
        Some(l) if !skiplock => Err(format!("VM is locked ({l})")),
        _ => Ok(()),
    }
}

/// Turns config values into the JSON types the schema declares.
pub fn typed_config(
    version: (u32, u32),
    cfg: &BTreeMap<String, String>,
) -> serde_json::Map<String, Value> {
    cfg.iter()
        .map(|(k, v)| {
            let val = match params::config_key_type(version, k) {
                "integer" => v
                    .parse::<i64>()
                    .map(Value::from)
                    .unwrap_or(Value::from(v.clone())),
                "number" => v
                    .parse::<f64>()
                    .map(Value::from)
                    .unwrap_or(Value::from(v.clone())),
                "boolean" => params::parse_bool(v)
                    .map(|b| Value::from(u8::from(b)))
                    .unwrap_or(Value::from(v.clone())),
                _ => Value::from(v.clone()),
            };
            (k.clone(), val)
        })
        .collect()
}
