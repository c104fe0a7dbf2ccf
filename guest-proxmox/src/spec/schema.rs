//! CRD schemas of the four kinds in each version: each spec from its Rust model, with
//! what the CRD says beyond the types (CAPMOX's CEL rules, defaults, list types and
//! limits) listed here, version by version; and the Proxmox status fields, which the
//! host adds to its own status schema so the API server keeps them on adopted objects.
//!
//! Where our API is wider than CAPMOX's on purpose, its rule is left out:
//! - ProxmoxCluster: CAPMOX requires `dnsServers` and an `ipv4Config` or `ipv6Config`;
//!   a cluster of DHCP machines has neither. A pool's `gateway` is optional (an
//!   isolated network has none).
//! - ProxmoxMachine: CAPMOX requires `network` (unset: the template's NICs as they
//!   are) and, in `v1alpha1`, a pool reference on every additional device (without
//!   one, the device takes the cluster's pools).
//! - Templates do not get the machine's "templateID or templateSelector" rules: a
//!   ClusterClass's templates are completed by its patches, after validation.
//! - `v1alpha1` keeps what its manifests always meant: no default `matchPolicy` (a
//!   selector matches templates carrying at least its tags), no default or required
//!   pool `metric` (no metric on the route), `memoryMiB` any number of MiB, additional
//!   NICs named `net1` ... `net31`.
use schemars::JsonSchema;
use serde_json::{Value, json};

use super::common::TAG_PATTERN;
use super::convert::{Kind, Version};
use super::{v1alpha1 as v1, v1alpha2 as v2};
use guest_kit::schema::crd_schema;

/// The `spec` schema of `kind` in `version`; for templates, the templated resource's
/// spec (the host puts it at `spec.template.spec`).
pub fn spec_schema(kind: Kind, version: Version) -> Value {
    match (kind, version) {
        (Kind::Cluster | Kind::ClusterTemplate, Version::V1alpha1) => cluster_v1(),
        (Kind::Cluster | Kind::ClusterTemplate, Version::V1alpha2) => cluster_v2(),
        (Kind::Machine, Version::V1alpha1) => machine_v1(Role::Machine),
        (Kind::MachineTemplate, Version::V1alpha1) => machine_v1(Role::Template),
        (Kind::Machine, Version::V1alpha2) => machine_v2(Role::Machine),
        (Kind::MachineTemplate, Version::V1alpha2) => machine_v2(Role::Template),
    }
}

/// The Proxmox fields of `kind`'s status in `version` (an object schema to merge into
/// the host's `status`); none for templates.
pub fn status_schema(kind: Kind, version: Version) -> Option<Value> {
    let props = match (kind, version) {
        (Kind::Cluster, Version::V1alpha1) => json!({
            "inClusterIpPoolRef": pool_refs(false),
            "nodeLocations": node_locations(false),
            "failureReason": string(),
            "failureMessage": string(),
        }),
        (Kind::Cluster, Version::V1alpha2) => json!({
            "inClusterIPPoolRef": pool_refs(true),
            "inClusterZoneRef": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["zone"],
                "items": {"type": "object", "properties": {
                    "zone": {"type": "string", "default": "default", "pattern": ZONE},
                    "inClusterIPPoolRefV4": local_ref(),
                    "inClusterIPPoolRefV6": local_ref(),
                }},
            },
            "nodeLocations": node_locations(true),
        }),
        (Kind::Machine, Version::V1alpha1) => json!({
            "vmStatus": string(),
            "bootstrapDataProvided": {"type": "boolean"},
            "ipAddresses": {"type": "object", "additionalProperties": {
                "type": "object",
                "properties": {"ipv4": string(), "ipv6": string()},
            }},
            "network": network_status(false),
            "proxmoxNode": string(),
            "taskRef": string(),
            "retryAfter": {"type": "string", "format": "date-time"},
            "failureReason": string(),
            "failureMessage": string(),
        }),
        (Kind::Machine, Version::V1alpha2) => json!({
            "vmStatus": string(),
            "bootstrapDataProvided": {"type": "boolean"},
            "ipAddresses": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["net"],
                "items": {"type": "object", "required": ["net"], "properties": {
                    "net": {"type": "string", "minLength": 4, "pattern": "^(net[0-9]+|default)$"},
                    "ipv4": string_set(),
                    "ipv6": string_set(),
                }},
            },
            "network": network_status(true),
            "proxmoxNode": string(),
            "taskRef": string(),
            "retryAfter": {"type": "string", "format": "date-time"},
        }),
        _ => return None,
    };
    Some(json!({"type": "object", "properties": props}))
}

/// Where a machine spec is: a machine's, a template's (`spec.template.spec`), or one
/// of a `v1alpha1` cluster's `cloneSpec.machineSpec` values.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Machine,
    Template,
    CloneSpec,
}

const ZONE: &str = r"^[a-z0-9A-Z](?:[a-z0-9A-Z-_.]{0,61}[a-z0-9A-Z])?$";
const NET_NAME: &str = "^net[0-9]+$";
const MTU_RULE: &str = "self == 1 || (self >= 576 && self <= 65520)";
const PRIORITY_RULE: &str = "(self > 0 && self < 32765) || (self > 32766)";
const PRIORITY_MESSAGE: &str = "Cowardly refusing to insert FIB rule matching kernel rules";
const VRF_TABLE_RULE: &str = "(self > 0 && self < 254) || (self > 255)";
const VRF_TABLE_MESSAGE: &str = "Cowardly refusing to insert l3mdev rules into kernel tables";
const UINT32_MAX: u64 = 4_294_967_295;

fn machine_v2(role: Role) -> Value {
    let mut s = base::<v2::MachineSpec>();
    let one_of = "must define either a SourceNode with a TemplateID or a TemplateSelector";
    if role == Role::Machine {
        cel(
            &mut s,
            "",
            "[has(self.sourceNode), has(self.templateSelector)].exists_one(c, c)",
            one_of,
        );
        cel(
            &mut s,
            "",
            "[has(self.templateID), has(self.templateSelector)].exists_one(c, c)",
            one_of,
        );
    }
    full_only(&mut s);
    if role == Role::Machine {
        cel(
            &mut s,
            "",
            "has(self.templateSelector) || (has(self.templateID) && has(self.sourceNode))",
            "Must specify either templateID or templateSelector",
        );
    }
    machine_common(&mut s, role);
    set(
        &mut s,
        "templateSelector.matchPolicy",
        json!({"default": "exact"}),
    );
    set(
        &mut s,
        "providerID",
        json!({"minLength": 46, "maxLength": 46,
        "pattern": "^proxmox://[a-fA-F0-9]{8}-[a-fA-F0-9]{4}-[a-fA-F0-9]{4}-[a-fA-F0-9]{4}-[a-fA-F0-9]{12}$"}),
    );
    set(&mut s, "memoryMiB", json!({"minimum": 0, "multipleOf": 8}));
    set(
        &mut s,
        "allowedNodes",
        json!({"x-kubernetes-list-type": "set"}),
    );
    cel(&mut s, "tags", "self == oldSelf", "tags are immutable");
    set(
        &mut s,
        "metadataSettings",
        json!({"required": ["providerIDInjection"]}),
    );
    set(&mut s, "network", json!({"required": ["networkDevices"]}));
    unset(&mut s, "network.networkDevices", "default");
    set(&mut s, "network.zone", json!({"pattern": ZONE}));
    set(
        &mut s,
        "network.networkDevices",
        json!({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}),
    );
    let dev = "network.networkDevices[]";
    set(
        &mut s,
        &format!("{dev}.name"),
        json!({"minLength": 4, "pattern": NET_NAME}),
    );
    set(&mut s, &format!("{dev}.bridge"), json!({"minLength": 1}));
    set(
        &mut s,
        &format!("{dev}.queues"),
        json!({"minimum": 1, "maximum": 65535}),
    );
    set(
        &mut s,
        &format!("{dev}.ipPoolRef"),
        json!({"x-kubernetes-list-type": "atomic"}),
    );
    pool_ref_rules(&mut s, &format!("{dev}.ipPoolRef[]"), "ipPoolRef");
    device_common(&mut s, dev, true);
    set(
        &mut s,
        "network.vrfs",
        json!({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}),
    );
    set(
        &mut s,
        "network.vrfs[].interfaces",
        json!({"x-kubernetes-list-type": "atomic"}),
    );
    set(
        &mut s,
        "network.vrfs[].interfaces[]",
        json!({"minLength": 4, "pattern": NET_NAME}),
    );
    set(&mut s, "network.vrfs[].table", json!({"minimum": 1}));
    vrf_common(&mut s, true);
    s
}

fn machine_v1(role: Role) -> Value {
    let mut s = base::<v1::MachineSpec>();
    if role == Role::Machine {
        cel(
            &mut s,
            "",
            "[has(self.sourceNode), has(self.templateSelector)].exists_one(c, c)",
            "must define either SourceNode with TemplateID, OR TemplateSelector",
        );
        cel(
            &mut s,
            "",
            "[has(self.templateID), has(self.templateSelector)].exists_one(c, c)",
            "must define either SourceNode with TemplateID, OR TemplateSelector.",
        );
    }
    full_only(&mut s);
    machine_common(&mut s, role);
    for dev in ["network.default", "network.additionalDevices[]"] {
        set(&mut s, &format!("{dev}.bridge"), json!({"minLength": 1}));
        for family in ["ipv4PoolRef", "ipv6PoolRef"] {
            pool_ref_rules(&mut s, &format!("{dev}.{family}"), family);
        }
        device_common(&mut s, dev, false);
    }
    set(
        &mut s,
        "network.additionalDevices",
        json!({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}),
    );
    set(
        &mut s,
        "network.vrfs",
        json!({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}),
    );
    vrf_common(&mut s, false);
    s
}

/// What both versions' machine specs say alike.
fn machine_common(s: &mut Value, role: Role) {
    if role == Role::Template {
        cel(
            s,
            "",
            "!has(self.providerID)",
            "providerID cannot be set in templates",
        );
    }
    set(s, "sourceNode", json!({"minLength": 1}));
    set(
        s,
        "templateID",
        json!({"minimum": 100, "maximum": 999_999_999}),
    );
    set(
        s,
        "templateSelector.matchTags",
        json!({"minItems": 1, "x-kubernetes-list-type": "set"}),
    );
    set(
        s,
        "templateSelector.matchTags[]",
        json!({"pattern": TAG_PATTERN}),
    );
    set(s, "full", json!({"default": true}));
    set(s, "numSockets", json!({"minimum": 1, "maximum": 4}));
    set(s, "numCores", json!({"minimum": 1, "maximum": 512}));
    set(
        s,
        "tags",
        json!({"minItems": 1, "x-kubernetes-list-type": "set"}),
    );
    set(s, "tags[]", json!({"pattern": TAG_PATTERN}));
    cel(
        s,
        "disks.bootVolume",
        "self == oldSelf",
        "Value is immutable",
    );
    cel(
        s,
        "vmIDRange",
        "self.end >= self.start",
        "end should be greater than or equal to start",
    );
}

/// `full: false` excludes `format` and `storage` (CAPMOX's rules 3 and 4).
fn full_only(s: &mut Value) {
    cel(
        s,
        "",
        "self.full || !has(self.format)",
        "Must set full=true when specifying format",
    );
    cel(
        s,
        "",
        "self.full || !has(self.storage)",
        "Must set full=true when specifying storage",
    );
}

fn device_common(s: &mut Value, dev: &str, v2: bool) {
    set(s, &format!("{dev}.model"), json!({"default": "virtio"}));
    cel(s, &format!("{dev}.mtu"), MTU_RULE, "invalid MTU value");
    cel(s, &format!("{dev}.linkMtu"), MTU_RULE, "invalid MTU value");
    set(
        s,
        &format!("{dev}.vlan"),
        json!({"minimum": 1, "maximum": 4094}),
    );
    let list = |extra: Value| {
        let mut v = json!({"minItems": 1});
        if v2 {
            v["x-kubernetes-list-type"] = extra;
        }
        v
    };
    set(s, &format!("{dev}.dnsServers"), list(json!("set")));
    set(s, &format!("{dev}.routes"), list(json!("atomic")));
    set(s, &format!("{dev}.routingPolicy"), list(json!("atomic")));
    rule_limits(s, &format!("{dev}.routingPolicy[]"));
}

fn vrf_common(s: &mut Value, v2: bool) {
    set(s, "network.vrfs[].name", json!({"minLength": 3}));
    set(s, "network.vrfs[].table", json!({"maximum": UINT32_MAX}));
    cel(s, "network.vrfs[].table", VRF_TABLE_RULE, VRF_TABLE_MESSAGE);
    for list in ["routes", "routingPolicy"] {
        let mut v = json!({"minItems": 1});
        if v2 {
            v["x-kubernetes-list-type"] = json!("atomic");
        }
        set(s, &format!("network.vrfs[].{list}"), v);
    }
    rule_limits(s, "network.vrfs[].routingPolicy[]");
}

fn rule_limits(s: &mut Value, rule: &str) {
    set(
        s,
        &format!("{rule}.priority"),
        json!({"maximum": UINT32_MAX}),
    );
    cel(
        s,
        &format!("{rule}.priority"),
        PRIORITY_RULE,
        PRIORITY_MESSAGE,
    );
}

/// An IPAM pool reference: CAPMOX's two rules, under the field's own name.
fn pool_ref_rules(s: &mut Value, path: &str, name: &str) {
    set(s, path, json!({"x-kubernetes-map-type": "atomic"}));
    cel(
        s,
        path,
        "self.apiGroup == 'ipam.cluster.x-k8s.io'",
        &format!("{name} allows only IPAM apiGroup ipam.cluster.x-k8s.io"),
    );
    cel(
        s,
        path,
        "self.kind == 'InClusterIPPool' || self.kind == 'GlobalInClusterIPPool'",
        &format!("{name} allows either InClusterIPPool or GlobalInClusterIPPool"),
    );
}

fn cluster_v2() -> Value {
    let mut s = base::<v2::ClusterSpec>();
    endpoint(&mut s, true);
    set(
        &mut s,
        "externalManagedControlPlane",
        json!({"default": false}),
    );
    set(
        &mut s,
        "allowedNodes",
        json!({"x-kubernetes-list-type": "set"}),
    );
    set(
        &mut s,
        "dnsServers",
        json!({"minItems": 1, "x-kubernetes-list-type": "set"}),
    );
    for (path, name) in [
        ("ipv4Config", "IPv4Config"),
        ("ipv6Config", "IPv6Config"),
        ("zoneConfig[].ipv4Config", "IPv4Config"),
        ("zoneConfig[].ipv6Config", "IPv6Config"),
    ] {
        ip_config(&mut s, path, name, true);
    }
    set(
        &mut s,
        "zoneConfig",
        json!({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["zone"]}),
    );
    set(
        &mut s,
        "zoneConfig[]",
        json!({"required": ["dnsServers", "zone"]}),
    );
    set(
        &mut s,
        "zoneConfig[].dnsServers",
        json!({"minItems": 1, "x-kubernetes-list-type": "set"}),
    );
    s
}

fn cluster_v1() -> Value {
    let mut s = base::<v1::ClusterSpec>();
    set(
        &mut s,
        "cloneSpec.machineSpec",
        json!({"additionalProperties": machine_v1(Role::CloneSpec)}),
    );
    endpoint(&mut s, false);
    set(&mut s, "dnsServers", json!({"minItems": 1}));
    ip_config(&mut s, "ipv4Config", "IPv4Config", false);
    ip_config(&mut s, "ipv6Config", "IPv6Config", false);
    s
}

fn endpoint(s: &mut Value, v2: bool) {
    set(s, "controlPlaneEndpoint.host", json!({"maxLength": 512}));
    cel(
        s,
        "controlPlaneEndpoint",
        "self.port > 0 && self.port < 65536",
        "port must be within 1-65535",
    );
    if v2 {
        set(s, "controlPlaneEndpoint", json!({"minProperties": 1}));
        set(s, "controlPlaneEndpoint.host", json!({"minLength": 1}));
    }
}

fn ip_config(s: &mut Value, path: &str, name: &str, v2: bool) {
    cel(
        s,
        path,
        "self.addresses.size() > 0",
        &format!("{name} addresses must be provided"),
    );
    if v2 {
        set(
            s,
            &format!("{path}.addresses"),
            json!({"x-kubernetes-list-type": "set"}),
        );
        set(s, &format!("{path}.gateway"), json!({"minLength": 1}));
        set(s, &format!("{path}.metric"), json!({"default": 100}));
    }
}

fn string() -> Value {
    json!({"type": "string"})
}

fn string_set() -> Value {
    json!({"type": "array", "x-kubernetes-list-type": "set", "items": string()})
}

fn local_ref() -> Value {
    json!({"type": "object", "x-kubernetes-map-type": "atomic",
           "properties": {"name": {"type": "string", "default": ""}}})
}

/// A list; `v1alpha2` says how it merges (`atomic`).
fn list(items: Value, v2: bool) -> Value {
    let mut l = json!({"type": "array", "items": items});
    if v2 {
        l["x-kubernetes-list-type"] = json!("atomic");
    }
    l
}

fn pool_refs(v2: bool) -> Value {
    list(local_ref(), v2)
}

fn node_locations(v2: bool) -> Value {
    let mut location = json!({
        "type": "object",
        "required": ["machine", "node"],
        "properties": {"machine": local_ref(), "node": string()},
    });
    if v2 {
        location["properties"]["node"]["minLength"] = json!(1);
        location["properties"]["zone"] = json!({"type": "string", "pattern": ZONE});
    }
    json!({"type": "object", "properties": {
        "controlPlane": list(location.clone(), v2),
        "workers": list(location, v2),
    }})
}

fn network_status(v2: bool) -> Value {
    let mut item = json!({
        "type": "object",
        "required": ["macAddr"],
        "properties": {
            "connected": {"type": "boolean"},
            "ipAddrs": {"type": "array", "items": string()},
            "macAddr": string(),
            "networkName": string(),
        },
    });
    if v2 {
        item["required"] = json!(["connected", "macAddr"]);
        item["properties"]["ipAddrs"] = string_set();
        item["properties"]["macAddr"] = json!({"type": "string", "minLength": 17, "maxLength": 17,
            "pattern": "^([0-9A-Fa-f]{2}[:]){5}([0-9A-Fa-f]{2})$"});
        item["properties"]["networkName"] =
            json!({"type": "string", "minLength": 4, "pattern": NET_NAME});
    }
    list(item, v2)
}

/// The schema of `T` as a JSON value.
fn base<T: JsonSchema>() -> Value {
    serde_json::from_str(&crd_schema::<T>()).expect("schemas are JSON")
}

/// The schema node at `path` (`a.b[].c`: properties, `[]` an array's items); `""` is
/// the root. Panics on a path the model does not have: the lists here are checked by
/// the unit tests, so a renamed field fails them.
fn node<'a>(schema: &'a mut Value, path: &str) -> &'a mut Value {
    let mut at = schema;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (name, items) = match part.strip_suffix("[]") {
            Some(n) => (n, true),
            None => (part, false),
        };
        at = at
            .get_mut("properties")
            .and_then(|p| p.get_mut(name))
            .unwrap_or_else(|| panic!("no property `{name}` at `{path}`"));
        if items {
            at = at
                .get_mut("items")
                .unwrap_or_else(|| panic!("`{name}` at `{path}` is not a list"));
        }
    }
    at
}

/// Add `keys` to the schema at `path`.
fn set(schema: &mut Value, path: &str, keys: Value) {
    let at = node(schema, path);
    for (k, v) in keys.as_object().expect("keys are an object") {
        at[k] = v.clone();
    }
}

/// Remove `key` from the schema at `path`.
fn unset(schema: &mut Value, path: &str, key: &str) {
    if let Some(at) = node(schema, path).as_object_mut() {
        at.remove(key);
    }
}

/// Add a CEL rule to the schema at `path`.
fn cel(schema: &mut Value, path: &str, rule: &str, message: &str) {
    let at = node(schema, path);
    let rules = at
        .as_object_mut()
        .expect("an object schema")
        .entry("x-kubernetes-validations")
        .or_insert_with(|| json!([]));
    rules
        .as_array_mut()
        .expect("a list")
        .push(json!({"rule": rule, "message": message}));
}

#[cfg(test)]
mod tests;
