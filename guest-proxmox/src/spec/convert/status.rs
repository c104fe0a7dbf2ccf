//! The Proxmox status fields (CAPMOX's) between `v1alpha1` and `v1alpha2`. The host's
//! own status fields (conditions, phase, details, addresses, ...) are the same in both
//! versions and pass through untouched.
//!
//! Machine: `ipAddresses` is a map `net → {ipv4, ipv6}` of single addresses in
//! `v1alpha1`, a list `[{net, ipv4: [...], ipv6: [...]}]` in `v1alpha2`.
//! Cluster: `inClusterIpPoolRef` (`v1alpha1`) is `inClusterIPPoolRef`; zones
//! (`inClusterZoneRef`, `nodeLocations[].zone`) are `v1alpha2`'s. Both: `ready` and
//! `initialization.provisioned` say the same; `failureReason`/`failureMessage` are
//! `v1alpha1`'s.
use serde_json::{Map, Value, json};

const V1_ONLY: [&str; 2] = ["failureReason", "failureMessage"];

pub fn machine_up(status: &mut Map<String, Value>) {
    common_up(status);
    if let Some(Value::Object(map)) = status.get("ipAddresses") {
        let mut nets: Vec<(&String, &Value)> = map.iter().collect();
        nets.sort_by_key(|(net, _)| (net.as_str() != "default", net.to_string()));
        let list: Vec<Value> = nets
            .into_iter()
            .map(|(net, a)| {
                let mut entry = json!({"net": net});
                for family in ["ipv4", "ipv6"] {
                    if let Some(ip) = a
                        .get(family)
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                    {
                        entry[family] = json!([ip]);
                    }
                }
                entry
            })
            .collect();
        status.insert("ipAddresses".into(), Value::Array(list));
    }
    if status.get("vmStatus").and_then(Value::as_str) == Some("") {
        status.remove("vmStatus");
    }
}

pub fn machine_down(status: &mut Map<String, Value>) {
    common_down(status);
    if let Some(Value::Array(list)) = status.get("ipAddresses") {
        let mut map = Map::new();
        for entry in list {
            let Some(net) = entry.get("net").and_then(Value::as_str) else {
                continue;
            };
            let mut a = Map::new();
            for family in ["ipv4", "ipv6"] {
                if let Some(ip) = entry.get(family).and_then(|l| l.get(0)) {
                    a.insert(family.into(), ip.clone());
                }
            }
            map.insert(net.into(), Value::Object(a));
        }
        status.insert("ipAddresses".into(), Value::Object(map));
    }
}

pub fn cluster_up(status: &mut Map<String, Value>) {
    common_up(status);
    if let Some(refs) = status.remove("inClusterIpPoolRef") {
        status.insert("inClusterIPPoolRef".into(), refs);
    }
}

pub fn cluster_down(status: &mut Map<String, Value>) {
    common_down(status);
    if let Some(refs) = status.remove("inClusterIPPoolRef") {
        status.insert("inClusterIpPoolRef".into(), refs);
    }
    status.remove("inClusterZoneRef");
    for role in ["controlPlane", "workers"] {
        if let Some(Value::Array(list)) = status
            .get_mut("nodeLocations")
            .and_then(|n| n.get_mut(role))
        {
            for entry in list.iter_mut().filter_map(Value::as_object_mut) {
                entry.remove("zone");
            }
        }
    }
}

/// What only `v1alpha2` says, from the status as it was (`hub`) before it went down.
pub fn restore_up(status: &mut Map<String, Value>, hub: &Map<String, Value>) {
    if let Some(zones) = hub.get("inClusterZoneRef") {
        status.insert("inClusterZoneRef".into(), zones.clone());
    }
    for role in ["controlPlane", "workers"] {
        let hub_list = hub
            .get("nodeLocations")
            .and_then(|n| n.get(role))
            .and_then(Value::as_array);
        let (Some(hub_list), Some(Value::Array(list))) = (
            hub_list,
            status
                .get_mut("nodeLocations")
                .and_then(|n| n.get_mut(role)),
        ) else {
            continue;
        };
        for entry in list.iter_mut() {
            let same = hub_list.iter().find(|h| {
                h.get("machine") == entry.get("machine") && h.get("node") == entry.get("node")
            });
            if let (Some(zone), Some(e)) = (same.and_then(|h| h.get("zone")), entry.as_object_mut())
            {
                e.insert("zone".into(), zone.clone());
            }
        }
    }
    // A net whose first addresses are still the hub's keeps the hub's whole lists.
    if let (Some(Value::Array(list)), Some(Value::Array(hub_list))) =
        (status.get_mut("ipAddresses"), hub.get("ipAddresses"))
    {
        for entry in list.iter_mut() {
            let Some(h) = hub_list.iter().find(|h| h.get("net") == entry.get("net")) else {
                continue;
            };
            let first = |v: &Value, f: &str| v.get(f).and_then(|l| l.get(0)).cloned();
            if first(entry, "ipv4") == first(h, "ipv4") && first(entry, "ipv6") == first(h, "ipv6")
            {
                *entry = h.clone();
            }
        }
    }
}

/// What only `v1alpha1` says, from the status as it was (`old`) before it went up.
pub fn restore_down(status: &mut Map<String, Value>, old: &Map<String, Value>) {
    for key in V1_ONLY {
        if let Some(v) = old.get(key) {
            status.insert(key.into(), v.clone());
        }
    }
}

fn common_up(status: &mut Map<String, Value>) {
    for key in V1_ONLY {
        status.remove(key);
    }
    if status.get("ready") == Some(&Value::Bool(true)) && status.get("initialization").is_none() {
        status.insert("initialization".into(), json!({"provisioned": true}));
    }
}

fn common_down(status: &mut Map<String, Value>) {
    if status.get("ready").is_none()
        && let Some(p) = status
            .get("initialization")
            .and_then(|i| i.get("provisioned"))
            .and_then(Value::as_bool)
    {
        status.insert("ready".into(), Value::Bool(p));
    }
}
