//! Conversion between `v1alpha1` and `v1alpha2` of the four kinds, lossless both ways.
//!
//! [`convert`] takes an object's `spec` and `status` (the rest of the object is the
//! host's) and gives them in the other version, with `preserved`: an opaque string
//! holding what the other version cannot say, which the host keeps with the object
//! (in the `cluster.x-k8s.io/conversion-data` annotation) and hands back on the next
//! conversion. Given back unchanged, it restores the object exactly:
//! `v1alpha1 → v1alpha2 → v1alpha1` and `v1alpha2 → v1alpha1 → v1alpha2` are identities.
//! When the object was edited in between, what the edit could not touch (e.g. a NIC's
//! `queues`, which `v1alpha1` lacks) is taken from it field by field. What CAPMOX's
//! conversion left in the annotation (the whole `v1alpha2` object) is read the same way,
//! so objects adopted from it come back whole.
//!
//! What each version lacks is in `machine.rs`, `cluster.rs` and `status.rs`. Fields the
//! plugin does not know (the host's `credentialsRef`, `credentialsRefs`; its status
//! fields) pass through as they are.
use guest_kit::types::PluginError;
use guest_kit::{invalid, parse_spec};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::{v1alpha1 as v1, v1alpha2 as v2};

mod cluster;
mod machine;
mod status;

pub use cluster::up as cluster_up;
pub use machine::up as machine_up;
#[cfg(test)]
mod tests;

/// The four kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Cluster,
    ClusterTemplate,
    Machine,
    MachineTemplate,
}

impl Kind {
    /// `ProxmoxCluster` ... `ProxmoxMachineTemplate`.
    pub fn from_name(kind: &str) -> Option<Kind> {
        Some(match kind {
            "ProxmoxCluster" => Kind::Cluster,
            "ProxmoxClusterTemplate" => Kind::ClusterTemplate,
            "ProxmoxMachine" => Kind::Machine,
            "ProxmoxMachineTemplate" => Kind::MachineTemplate,
            _ => return None,
        })
    }

    fn is_cluster(self) -> bool {
        matches!(self, Kind::Cluster | Kind::ClusterTemplate)
    }

    fn is_template(self) -> bool {
        matches!(self, Kind::ClusterTemplate | Kind::MachineTemplate)
    }
}

/// The API versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    V1alpha1,
    V1alpha2,
}

impl Version {
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1alpha1 => "v1alpha1",
            Version::V1alpha2 => "v1alpha2",
        }
    }

    pub fn parse(v: &str) -> Option<Version> {
        match v {
            "v1alpha1" => Some(Version::V1alpha1),
            "v1alpha2" => Some(Version::V1alpha2),
            _ => None,
        }
    }

    fn other(self) -> Version {
        match self {
            Version::V1alpha1 => Version::V1alpha2,
            Version::V1alpha2 => Version::V1alpha1,
        }
    }
}

/// An object in the version asked for, and what to keep with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Converted {
    /// `{"spec": ..., "status": ...}` (whichever the input had).
    pub object: Value,
    /// For the next conversion; none when the object says everything itself.
    pub preserved: Option<String>,
}

/// `object` (`{"spec": ..., "status": ...}` of a `kind` in version `from`) in version
/// `to`, with `preserved` as the previous conversion left it. A spec that does not
/// parse is an invalid-spec error naming the field.
pub fn convert(
    kind: Kind,
    from: Version,
    to: Version,
    object: &Value,
    preserved: Option<&str>,
) -> Result<Converted, PluginError> {
    if from == to {
        return Ok(Converted {
            object: object.clone(),
            preserved: preserved.map(str::to_string),
        });
    }
    let object = normalize(kind, from, object)?;
    let before = preserved.and_then(|p| kept(p, to));
    let naive_out = naive(kind, from, &object)?;
    let (out, exact) = match before {
        Some(before) if naive(kind, to, &before)? == object => (before, true),
        Some(before) => {
            let mut out = naive_out;
            restore(kind, from, &mut out, &object, &before)?;
            (out, false)
        }
        None => (naive_out, false),
    };
    let lossless = exact || naive(kind, to, &out)? == object;
    Ok(Converted {
        object: out,
        preserved: (!lossless).then(|| {
            let mut kept = Map::new();
            kept.insert(from.as_str().into(), object);
            Value::Object(kept).to_string()
        }),
    })
}

/// What a previous conversion kept of the object as it was in version `to`: ours
/// (`{"<version>": object}`), or CAPMOX's (the whole object, `apiVersion` included, as
/// its down-conversion leaves it in the annotation).
fn kept(preserved: &str, to: Version) -> Option<Value> {
    let p: Value = serde_json::from_str(preserved).ok()?;
    if let Some(object) = p.get(to.as_str()) {
        return Some(object.clone());
    }
    let version = p.get("apiVersion")?.as_str()?.rsplit('/').next()?;
    if version != to.as_str() {
        return None;
    }
    let mut object = Map::new();
    for key in ["spec", "status"] {
        if let Some(v) = p.get(key) {
            object.insert(key.into(), v.clone());
        }
    }
    Some(Value::Object(object))
}

/// The object in the other version, field by field (what that version cannot say is lost).
fn naive(kind: Kind, from: Version, object: &Value) -> Result<Value, PluginError> {
    let mut out = object.clone();
    if let Some(spec) = object.get("spec") {
        out["spec"] = match kind.is_template() {
            false => spec_to(kind, from, spec, "spec")?,
            true => template_to(kind, from, spec)?,
        };
    }
    if !kind.is_template()
        && let Some(Value::Object(status)) = out.get_mut("status")
    {
        match (kind, from) {
            (Kind::Machine, Version::V1alpha1) => status::machine_up(status),
            (Kind::Machine, Version::V1alpha2) => status::machine_down(status),
            (_, Version::V1alpha1) => status::cluster_up(status),
            (_, Version::V1alpha2) => status::cluster_down(status),
        }
    }
    Ok(out)
}

/// `spec.template`: its `spec` converted, its `metadata` kept (`v1alpha2` refuses an
/// empty one).
fn template_to(kind: Kind, from: Version, spec: &Value) -> Result<Value, PluginError> {
    let mut out = spec.clone();
    if let Some(inner) = spec.pointer("/template/spec") {
        out["template"]["spec"] = spec_to(kind, from, inner, "spec.template.spec")?;
    }
    if from == Version::V1alpha1
        && out.pointer("/template/metadata") == Some(&json!({}))
        && let Some(t) = out.get_mut("template").and_then(Value::as_object_mut)
    {
        t.remove("metadata");
    }
    Ok(out)
}

fn spec_to(kind: Kind, from: Version, spec: &Value, root: &str) -> Result<Value, PluginError> {
    let converted = match (kind.is_cluster(), from) {
        (true, Version::V1alpha1) => to_value(&cluster::up(&typed(spec, root)?)),
        (true, Version::V1alpha2) => to_value(&cluster::down(&typed(spec, root)?)),
        (false, Version::V1alpha1) => to_value(&machine::up(&typed(spec, root)?)),
        (false, Version::V1alpha2) => to_value(&machine::down(&typed(spec, root)?)),
    };
    Ok(with_unknown_keys(converted, spec, known_keys(kind, from)))
}

/// After a naive conversion of `object`, what only version `to` says, from `before`
/// (the object as it was in `to`).
fn restore(
    kind: Kind,
    from: Version,
    out: &mut Value,
    object: &Value,
    before: &Value,
) -> Result<(), PluginError> {
    let path = if kind.is_template() {
        "/spec/template/spec"
    } else {
        "/spec"
    };
    if let (Some(spec), Some(source), Some(old)) = (
        out.pointer(path).cloned(),
        object.pointer(path),
        before.pointer(path),
    ) {
        let root = path.trim_start_matches('/').replace('/', ".");
        let restored = match (kind.is_cluster(), from) {
            (true, Version::V1alpha1) => {
                let mut s: v2::ClusterSpec = typed(&spec, &root)?;
                cluster::restore_up(&mut s, &typed(source, &root)?, &typed(old, &root)?);
                to_value(&s)
            }
            (true, Version::V1alpha2) => {
                let mut s: v1::ClusterSpec = typed(&spec, &root)?;
                cluster::restore_down(&mut s, &typed(source, &root)?, &typed(old, &root)?);
                to_value(&s)
            }
            (false, Version::V1alpha1) => {
                let mut s: v2::MachineSpec = typed(&spec, &root)?;
                machine::restore_up(&mut s, &typed(source, &root)?, &typed(old, &root)?);
                to_value(&s)
            }
            (false, Version::V1alpha2) => {
                let mut s: v1::MachineSpec = typed(&spec, &root)?;
                machine::restore_down(&mut s, &typed(source, &root)?, &typed(old, &root)?);
                to_value(&s)
            }
        };
        let restored = with_unknown_keys(restored, &spec, known_keys(kind, from.other()));
        if let Some(slot) = out.pointer_mut(path) {
            *slot = restored;
        }
    }
    if !kind.is_template()
        && let (Some(Value::Object(status)), Some(Value::Object(old))) =
            (out.get_mut("status"), before.get("status"))
    {
        match from {
            Version::V1alpha1 => status::restore_up(status, old),
            Version::V1alpha2 => status::restore_down(status, old),
        }
    }
    Ok(())
}

/// The object with its spec as the typed model writes it (no empty lists, no nulls).
fn normalize(kind: Kind, version: Version, object: &Value) -> Result<Value, PluginError> {
    if !object.is_object() {
        return Err(invalid(
            "object",
            "the object to convert is not a JSON object",
        ));
    }
    let path = if kind.is_template() {
        "/spec/template/spec"
    } else {
        "/spec"
    };
    let mut out = object.clone();
    if let Some(spec) = object.pointer(path) {
        let root = path.trim_start_matches('/').replace('/', ".");
        let typed = match (kind.is_cluster(), version) {
            (true, Version::V1alpha1) => to_value(&typed::<v1::ClusterSpec>(spec, &root)?),
            (true, Version::V1alpha2) => to_value(&typed::<v2::ClusterSpec>(spec, &root)?),
            (false, Version::V1alpha1) => to_value(&typed::<v1::MachineSpec>(spec, &root)?),
            (false, Version::V1alpha2) => to_value(&typed::<v2::MachineSpec>(spec, &root)?),
        };
        let typed = with_unknown_keys(typed, spec, known_keys(kind, version));
        if let Some(slot) = out.pointer_mut(path) {
            *slot = typed;
        }
    }
    Ok(out)
}

/// The spec's top-level properties the model of `kind` in `version` knows. Spelled
/// out rather than read from the models' schemas: generating those on every conversion
/// (a fresh plugin instance per call, nothing cached) cost milliseconds per object. A
/// test holds them to the schemas.
pub(super) fn known_keys(kind: Kind, version: Version) -> &'static [&'static str] {
    const CLUSTER_V1: &[&str] = &[
        "allowedNodes",
        "cloneSpec",
        "controlPlaneEndpoint",
        "dnsServers",
        "externalManagedControlPlane",
        "ipv4Config",
        "ipv6Config",
        "schedulerHints",
    ];
    const CLUSTER_V2: &[&str] = &[
        "allowedNodes",
        "controlPlaneEndpoint",
        "dnsServers",
        "externalManagedControlPlane",
        "ipv4Config",
        "ipv6Config",
        "schedulerHints",
        "zoneConfig",
    ];
    const MACHINE_V1: &[&str] = &[
        "allowedNodes",
        "checks",
        "cloudInit",
        "description",
        "disks",
        "format",
        "full",
        "memoryMiB",
        "metadataSettings",
        "network",
        "numCores",
        "numSockets",
        "pool",
        "providerID",
        "snapName",
        "sourceNode",
        "storage",
        "tags",
        "target",
        "templateID",
        "templateSelector",
        "virtualMachineID",
        "vmIDRange",
    ];
    const MACHINE_V2: &[&str] = &[
        "allowedNodes",
        "checks",
        "cloudInit",
        "description",
        "disks",
        "format",
        "full",
        "memoryMiB",
        "metadataSettings",
        "network",
        "numCores",
        "numSockets",
        "pool",
        "providerID",
        "snapName",
        "sourceNode",
        "storage",
        "tags",
        "templateID",
        "templateSelector",
        "virtualMachineID",
        "vmIDRange",
    ];
    match (kind.is_cluster(), version) {
        (true, Version::V1alpha1) => CLUSTER_V1,
        (true, Version::V1alpha2) => CLUSTER_V2,
        (false, Version::V1alpha1) => MACHINE_V1,
        (false, Version::V1alpha2) => MACHINE_V2,
    }
}

/// `converted` plus the keys of `source` no model knows (e.g. the host's
/// `credentialsRef`), as they were.
fn with_unknown_keys(mut converted: Value, source: &Value, known: &[&str]) -> Value {
    if let (Some(out), Some(source)) = (converted.as_object_mut(), source.as_object()) {
        for (k, v) in source {
            if !known.contains(&k.as_str()) {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    converted
}

fn typed<T: DeserializeOwned>(spec: &Value, root: &str) -> Result<T, PluginError> {
    parse_spec(&spec.to_string(), root)
}

fn to_value<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or_else(|_| Value::Object(Map::new()))
}
