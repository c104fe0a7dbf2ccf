//! Request parameters: PVE's form/query decoding and schema-based validation.
//!
//! Decoding follows pve-http-server: pairs are split on `&` *and* `;`, and each pair on
//! every `=` keeping the first two fields, so an unescaped `=` inside a value truncates it
//! (the "form encoding trap" of the reference notes).
//!
//! Validation uses the parameter definitions of the official API schema
//! (`schema/params.json`, trimmed by `scripts/trim-schema.py` from
//! `reference/pve-api-schema-capi-subset.json` and `schema/official-extra.json`,
//! the official entries of the further endpoints pve-sim serves) for the PVE version the simulator presents: unknown
//! parameters, missing required ones, types, enums, bounds, lengths, patterns, property
//! strings (`net0`, `scsi0`, `agent`, ...) and the common named formats. Error texts follow
//! PVE's JSONSchema.pm where known; a few format messages are approximations.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use regex::Regex;
use serde_json::{Map, Value};

use crate::envelope::ApiError;

/// Decoded request parameters.
pub type Params = BTreeMap<String, String>;

const SCHEMA_JSON: &str = include_str!("../schema/params.json");

fn schema() -> &'static Value {
    static S: OnceLock<Value> = OnceLock::new();
    S.get_or_init(|| serde_json::from_str(SCHEMA_JSON).expect("embedded schema parses"))
}

/// The schema version used for a presented PVE version.
pub fn schema_version(version: (u32, u32)) -> &'static str {
    if version >= (9, 0) {
        "9.1.3"
    } else if version >= (8, 4) {
        "8.4.0"
    } else {
        "8.0.5"
    }
}

/// The official permission check of an endpoint (`"METHOD /template"`), if it has one.
pub fn permission_check(version: (u32, u32), endpoint: &str) -> Option<&'static Value> {
    schema()[schema_version(version)]
        .get(endpoint)
        .and_then(|e| e.get("permission_check"))
}

/// The value types of `GET .../config` returns (`integer`, `boolean`, `string`, ...).
pub fn config_return_types(version: (u32, u32)) -> &'static Map<String, Value> {
    static EMPTY: OnceLock<Map<String, Value>> = OnceLock::new();
    schema()[schema_version(version)]["GET /nodes/{node}/qemu/{vmid}/config"]["return_types"]
        .as_object()
        .unwrap_or_else(|| EMPTY.get_or_init(Map::new))
}

/// The type a config key has in `GET .../config` (indexed keys like `net0` map to `net[n]`).
pub fn config_key_type(version: (u32, u32), key: &str) -> &'static str {
    let types = config_return_types(version);
    let t = types.get(key).or_else(|| {
        let (base, _) = split_indexed(key)?;
        types.get(&format!("{base}[n]"))
    });
    t.and_then(Value::as_str).unwrap_or("string")
}

/// Decodes `application/x-www-form-urlencoded` data (body or query) the way PVE does.
pub fn decode_urlencoded(data: &str) -> Params {
    let mut res = Params::new();
    for kv in data.split(['&', ';']) {
        if kv.is_empty() {
            continue;
        }
        let mut it = kv.split('=');
        let k = unescape(it.next().unwrap_or(""));
        let Some(v) = it.next() else { continue };
        let v = unescape(v);
        match res.get_mut(&k) {
            Some(old) => {
                old.push('\0');
                old.push_str(&v);
            }
            None => {
                res.insert(k, v);
            }
        }
    }
    res
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Splits `net12` into `("net", 12)`.
pub fn split_indexed(key: &str) -> Option<(&str, u32)> {
    let pos = key.find(|c: char| c.is_ascii_digit())?;
    let (base, idx) = key.split_at(pos);
    if base.is_empty() || !idx.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    Some((base, idx.parse().ok()?))
}

/// Highest index PVE allows for an indexed config key.
fn max_index(base: &str) -> u32 {
    match base {
        "net" | "ipconfig" => 31,
        "scsi" => 30,
        "ide" => 3,
        "sata" => 5,
        "virtio" | "hostpci" => 15,
        "unused" => 255,
        "serial" | "usb" => 4,
        "parallel" => 2,
        "numa" => 7,
        "virtiofs" => 9,
        _ => 31,
    }
}

/// Validates `params` (path parameters included) against the endpoint's schema.
/// Endpoints without a definition accept anything.
pub fn validate(version: (u32, u32), endpoint: &str, params: &Params) -> Result<(), ApiError> {
    let def = schema()[schema_version(version)].get(endpoint);
    let Some(props) = def.and_then(|d| d["properties"].as_object()) else {
        return Ok(());
    };
    let mut errors = BTreeMap::new();
    for (k, v) in params {
        let prop = props.get(k).or_else(|| {
            let (base, idx) = split_indexed(k)?;
            if idx > max_index(base) {
                return None;
            }
            props.get(&format!("{base}[n]"))
        });
        match prop {
            None => {
                errors.insert(
                    k.clone(),
                    "property is not defined in schema and the schema does not allow additional properties".into(),
                );
            }
            Some(p) => {
                if let Err(e) = check_value(p, v) {
                    errors.insert(k.clone(), e);
                }
            }
        }
    }
    for (k, p) in props {
        if k.ends_with("[n]") || is_optional(p) || params.contains_key(k) {
            continue;
        }
        errors.insert(
            k.clone(),
            "property is missing and it is not optional".into(),
        );
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::params(errors))
    }
}

fn is_optional(p: &Value) -> bool {
    match &p["optional"] {
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_i64() == Some(1),
        Value::String(s) => s == "1",
        _ => false,
    }
}

fn num(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn fmt_num(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// Parses a PVE boolean (`1`, `0`, `true`, `false`, `yes`, `no`, `on`, `off`).
pub fn parse_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// Checks one value against one property schema; the error is PVE's message.
pub fn check_value(p: &Value, v: &str) -> Result<(), String> {
    let ty = p["type"].as_str().unwrap_or("string");
    match ty {
        // repeated keys (`command=a&command=b`) arrive joined by NUL
        "array" => {
            for item in v.split('\0') {
                check_value(&p["items"], item)?;
            }
            return Ok(());
        }
        "boolean" => {
            if parse_bool(v).is_none() {
                return Err(format!("type check ('boolean') failed - got '{v}'"));
            }
        }
        "integer" | "number" => {
            let ok = if ty == "integer" {
                let t = v.strip_prefix(['+', '-']).unwrap_or(v);
                !t.is_empty() && t.chars().all(|c| c.is_ascii_digit())
            } else {
                v.parse::<f64>().is_ok()
            };
            if !ok {
                return Err(format!("type check ('{ty}') failed - got '{v}'"));
            }
            let x: f64 = v.parse().unwrap_or(0.0);
            if let Some(min) = num(&p["minimum"])
                && x < min
            {
                return Err(format!(
                    "value must have a minimum value of {}",
                    fmt_num(min)
                ));
            }
            if let Some(max) = num(&p["maximum"])
                && x > max
            {
                return Err(format!(
                    "value must have a maximum value of {}",
                    fmt_num(max)
                ));
            }
        }
        _ => {
            if let Some(max) = num(&p["maxLength"])
                && v.chars().count() as f64 > max
            {
                return Err(format!(
                    "value may only be {} characters long",
                    fmt_num(max)
                ));
            }
            if let Some(min) = num(&p["minLength"])
                && (v.chars().count() as f64) < min
            {
                return Err(format!(
                    "value must be at least {} characters long",
                    fmt_num(min)
                ));
            }
        }
    }
    if let Some(en) = p["enum"].as_array()
        && !en.iter().any(|e| e.as_str() == Some(v))
    {
        let list: Vec<&str> = en.iter().filter_map(Value::as_str).collect();
        return Err(format!(
            "value '{v}' does not have a value in the enumeration '{}'",
            list.join(", ")
        ));
    }
    if let Some(pat) = p["pattern"].as_str()
        && let Some(re) = compile_pattern(pat)
        && !re.is_match(v)
    {
        return Err("value does not match the regex pattern".into());
    }
    match &p["format"] {
        Value::String(name) => {
            check_named_format(name, v).map_err(|e| format!("invalid format - {e}"))?
        }
        Value::Object(sub) => {
            parse_property_string(sub, v).map_err(|e| format!("invalid format - {e}"))?;
        }
        _ => {}
    }
    Ok(())
}

fn compile_pattern(pat: &str) -> Option<Regex> {
    static CACHE: OnceLock<std::sync::Mutex<BTreeMap<String, Option<Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    c.entry(pat.to_string())
        .or_insert_with(|| {
            let p = pat.replace("(?^:", "(?:").replace("{,", "{0,");
            Regex::new(&format!("^(?:{p})$")).ok()
        })
        .clone()
}

/// Parses and checks a property string (`key=value,...`) against its format definition,
/// resolving the default key and key aliases (`virtio=MAC` is `model=virtio,macaddr=MAC`).
pub fn parse_property_string(
    fmt: &Map<String, Value>,
    v: &str,
) -> Result<BTreeMap<String, String>, String> {
    let default_key = fmt
        .iter()
        .find(|(_, p)| p.get("default_key").is_some_and(|d| num(d) == Some(1.0)))
        .map(|(k, _)| k.clone());
    let mut res: BTreeMap<String, String> = BTreeMap::new();
    for part in v.split(',') {
        if part.is_empty() {
            continue;
        }
        if let Some((k, val)) = part.split_once('=') {
            let mut k = k.to_string();
            if res.contains_key(&k) {
                return Err(format!(
                    "duplicate key in comma-separated list property: {k}"
                ));
            }
            let mut schema = fmt.get(&k);
            if let Some(alias) = schema.and_then(|s| s["alias"].as_str()) {
                if let Some(key_alias) = schema.and_then(|s| s["keyAlias"].as_str()) {
                    if res.contains_key(key_alias) {
                        return Err(format!("key alias '{key_alias}' is already defined"));
                    }
                    res.insert(key_alias.to_string(), k.clone());
                }
                k = alias.to_string();
                schema = fmt.get(&k);
            }
            let Some(schema) = schema else {
                return Err(format!("invalid key in comma-separated list property: {k}"));
            };
            check_value(schema, val).map_err(|e| format!("format error\n{k}: {e}"))?;
            res.insert(k, val.to_string());
        } else if let Some(dk) = &default_key {
            if res.contains_key(dk) {
                return Err(format!(
                    "duplicate key in comma-separated list property: {dk}"
                ));
            }
            check_value(&fmt[dk], part).map_err(|e| format!("format error\n{dk}: {e}"))?;
            res.insert(dk.clone(), part.to_string());
        } else {
            return Err("value without key, but schema does not define a default key".into());
        }
    }
    for (k, p) in fmt {
        if p.get("alias").is_some() || is_optional(p) || res.contains_key(k) {
            continue;
        }
        return Err(format!(
            "format error\n{k}: property is missing and it is not optional"
        ));
    }
    Ok(res)
}

fn re(pat: &'static str) -> Regex {
    Regex::new(pat).expect("static regex")
}

macro_rules! static_re {
    ($name:ident, $pat:expr) => {
        fn $name() -> &'static Regex {
            static R: OnceLock<Regex> = OnceLock::new();
            R.get_or_init(|| re($pat))
        }
    };
}

static_re!(re_node, r"^(?i:[a-z0-9](?:[a-z0-9\-]*[a-z0-9])?)$");
static_re!(re_storage, r"^(?i:[a-z][a-z0-9\-_.]*[a-z0-9])$");
static_re!(re_configid, r"^(?i:[a-z][a-z0-9_-]+)$");
static_re!(
    re_dns,
    r"^(?:(?:[a-zA-Z0-9](?:[a-zA-Z0-9\-]*[a-zA-Z0-9])?)\.)*(?:[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?)$"
);
static_re!(re_mac, r"^(?i:[a-f0-9][02468ace](?::[a-f0-9]{2}){5})$");
static_re!(re_bridge, r"^[-_.\w\d]+$");
static_re!(re_pool, r"^[A-Za-z0-9\-_]+(?:/[A-Za-z0-9\-_]+){0,2}$");
static_re!(re_tag, r"^(?i:[a-z0-9_][a-z0-9_\-+.]*)$");
static_re!(re_urlenc, r"^[-%a-zA-Z0-9_.!~*'()]*$");
static_re!(re_size, r"^\d+(?:\.\d+)?[KMGT]?$");
static_re!(
    re_uuid,
    r"^[a-fA-F0-9]{8}(?:-[a-fA-F0-9]{4}){3}-[a-fA-F0-9]{12}$"
);

/// Checks PVE's named string formats (unknown names pass).
pub fn check_named_format(name: &str, v: &str) -> Result<(), String> {
    let ok = |b: bool, msg: String| if b { Ok(()) } else { Err(msg) };
    match name {
        "pve-vmid" => ok(
            v.chars().all(|c| c.is_ascii_digit()) && !v.is_empty(),
            "value does not look like a valid VM ID".into(),
        ),
        "pve-node" => ok(
            re_node().is_match(v),
            "value does not look like a valid node name".into(),
        ),
        "pve-storage-id" => ok(
            re_storage().is_match(v),
            format!("storage ID '{v}' contains illegal characters"),
        ),
        "pve-configid" => ok(
            re_configid().is_match(v),
            format!("invalid configuration ID '{v}'"),
        ),
        "pve-configid-list" => {
            for id in v.split([',', ';', ' ']).filter(|s| !s.is_empty()) {
                if !re_configid().is_match(id) {
                    return Err(format!("invalid configuration ID '{id}'"));
                }
            }
            Ok(())
        }
        "dns-name" => ok(
            re_dns().is_match(v),
            "value does not look like a valid DNS name".into(),
        ),
        "mac-addr" => ok(
            re_mac().is_match(v),
            "value does not look like a valid unicast MAC address".into(),
        ),
        "pve-bridge-id" => ok(re_bridge().is_match(v), format!("invalid bridge ID '{v}'")),
        "pve-poolid" => ok(
            re_pool().is_match(v),
            format!("pool name '{v}' contains illegal characters"),
        ),
        "pve-tag-list" => {
            let tags: Vec<&str> = v.split([';', ',', ' ']).filter(|s| !s.is_empty()).collect();
            if tags.is_empty() && !v.is_empty() {
                return Err("empty tag list".into());
            }
            for t in tags {
                if !re_tag().is_match(t) {
                    return Err(format!("invalid tag '{t}'"));
                }
            }
            Ok(())
        }
        "urlencoded" => ok(
            re_urlenc().is_match(v),
            format!("invalid urlencoded string: {v}"),
        ),
        "disk-size" => ok(re_size().is_match(v), format!("unable to parse size '{v}'")),
        "pve-qm-ipconfig" => check_ipconfig(v),
        "pve-qm-smbios1" => {
            for part in v.split(',') {
                let (k, val) = part.split_once('=').unwrap_or(("", part));
                match k {
                    "uuid" => {
                        if !re_uuid().is_match(val) {
                            return Err(format!("invalid UUID '{val}'"));
                        }
                    }
                    "base64" | "family" | "manufacturer" | "product" | "serial" | "sku"
                    | "version" => {}
                    _ => {
                        return Err(format!("invalid key in comma-separated list property: {k}"));
                    }
                }
            }
            Ok(())
        }
        "address-list" => {
            for a in v.split([',', ';', ' ']).filter(|s| !s.is_empty()) {
                if a.parse::<std::net::IpAddr>().is_err() {
                    return Err(format!("unable to parse address '{a}'"));
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Parsed `ipconfigN`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IpConfig {
    pub ip: Option<String>,
    pub gw: Option<String>,
    pub ip6: Option<String>,
    pub gw6: Option<String>,
}

/// Parses `ip=CIDR|dhcp,gw=IP,ip6=CIDR|dhcp|auto,gw6=IP`.
pub fn parse_ipconfig(v: &str) -> Result<IpConfig, String> {
    let mut c = IpConfig::default();
    for part in v.split(',').filter(|s| !s.is_empty()) {
        let Some((k, val)) = part.split_once('=') else {
            return Err("value without key, but schema does not define a default key".into());
        };
        let slot = match k {
            "ip" => &mut c.ip,
            "gw" => &mut c.gw,
            "ip6" => &mut c.ip6,
            "gw6" => &mut c.gw6,
            _ => return Err(format!("invalid key in comma-separated list property: {k}")),
        };
        *slot = Some(val.to_string());
    }
    Ok(c)
}

fn check_cidr(v: &str, v6: bool) -> bool {
    let Some((addr, len)) = v.split_once('/') else {
        return false;
    };
    let Ok(len) = len.parse::<u8>() else {
        return false;
    };
    if v6 {
        addr.parse::<std::net::Ipv6Addr>().is_ok() && len <= 128
    } else {
        addr.parse::<std::net::Ipv4Addr>().is_ok() && len <= 32
    }
}

fn check_ipconfig(v: &str) -> Result<(), String> {
    let c = parse_ipconfig(v)?;
    if let Some(ip) = &c.ip
        && ip != "dhcp"
        && !check_cidr(ip, false)
    {
        return Err(format!(
            "format error\nip: invalid format - invalid IPv4 CIDR '{ip}'"
        ));
    }
    if let Some(ip) = &c.ip6
        && ip != "dhcp"
        && ip != "auto"
        && !check_cidr(ip, true)
    {
        return Err(format!(
            "format error\nip6: invalid format - invalid IPv6 CIDR '{ip}'"
        ));
    }
    if let Some(gw) = &c.gw {
        if gw.parse::<std::net::Ipv4Addr>().is_err() {
            return Err(format!(
                "format error\ngw: invalid format - invalid IPv4 address '{gw}'"
            ));
        }
        if c.ip.as_deref().is_none_or(|ip| ip == "dhcp") {
            return Err("gateway specified without specifying an IP address".into());
        }
    }
    if let Some(gw) = &c.gw6
        && gw.parse::<std::net::Ipv6Addr>().is_err()
    {
        return Err(format!(
            "format error\ngw6: invalid format - invalid IPv6 address '{gw}'"
        ));
    }
    Ok(())
}

/// Parses a PVE size (`32G`, `+10G`, `512M`, bare number = bytes... as PVE: bare = bytes
/// for resize) into bytes.
pub fn parse_size(v: &str) -> Option<u64> {
    let (num, unit) = match v.chars().last()? {
        c @ ('K' | 'M' | 'G' | 'T') => (&v[..v.len() - 1], Some(c)),
        _ => (v, None),
    };
    let x: f64 = num.parse().ok()?;
    let mult: f64 = match unit {
        Some('K') => 1024.0,
        Some('M') => 1024.0 * 1024.0,
        Some('G') => 1024.0 * 1024.0 * 1024.0,
        Some('T') => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => 1.0,
    };
    Some((x * mult) as u64)
}

/// Formats bytes the way PVE writes `size=` in drive strings (`32G`, `512M`, ...).
pub fn format_size(bytes: u64) -> String {
    const K: u64 = 1024;
    for (unit, m) in [
        ('T', K * K * K * K),
        ('G', K * K * K),
        ('M', K * K),
        ('K', K),
    ] {
        if bytes >= m && bytes.is_multiple_of(m) {
            return format!("{}{unit}", bytes / m);
        }
    }
    format!("{bytes}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescaped_equals_truncates_and_semicolon_splits() {
        let p = decode_urlencoded("a=b=c&tags=x;y&s=%2Bq+r");
        assert_eq!(p["a"], "b");
        assert_eq!(p["tags"], "x");
        assert_eq!(p["s"], "+q r");
    }

    #[test]
    fn net_property_string_resolves_key_alias() {
        let v = &schema()["9.1.3"]["POST /nodes/{node}/qemu/{vmid}/config"]["properties"]["net[n]"];
        let fmt = v["format"].as_object().unwrap();
        let r = parse_property_string(fmt, "virtio=BC:24:11:00:00:01,bridge=vmbr0,tag=5").unwrap();
        assert_eq!(r["model"], "virtio");
        assert_eq!(r["macaddr"], "BC:24:11:00:00:01");
        assert!(parse_property_string(fmt, "virtio,bridge=vmbr0,bogus=1").is_err());
    }

    #[test]
    fn sizes_round_trip() {
        assert_eq!(parse_size("10G"), Some(10 << 30));
        assert_eq!(format_size(10 << 30), "10G");
        assert_eq!(format_size(1536 << 20), "1536M");
    }
}
