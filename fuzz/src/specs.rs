//! Spec parsing of both bundled plugins, through the calls the host makes: any text as
//! a machine, template or cluster spec gives a result or an error, and an invalid spec
//! names a field under its root that leads into what the user wrote.
use guest_kit::cluster::{ClusterRequest, Guest as ClusterGuest};
use guest_kit::machine::{Guest as MachineGuest, TemplateRequest};
use guest_kit::testing::{credentials, machine_request, object};
use guest_kit::types::PluginError;
use serde_json::Value;

use crate::lifecycle::{ENDPOINT, UID};
use crate::script::Script;
use crate::{Proxmox, Redfish, checks};

/// A machine spec both plugins accept, for the calls that fuzz the cluster spec.
const MACHINE: &str = r#"{"templateID":9000,"sourceNode":"pve1"}"#;

/// Run `input` as every spec of both plugins. No infrastructure answers (every
/// request gets PVE's 501): what is checked is what the plugins make of the spec.
pub fn run(input: &[u8]) {
    let text = String::from_utf8_lossy(input);
    let (host, _) = Script::default().into_host();
    let _installed = guest_kit::fuzzing::install(host);

    machine::<Proxmox>(&text, "{}");
    machine::<Proxmox>(MACHINE, &text);
    template::<Proxmox>(&text);
    cluster::<Proxmox>(&text);
    template::<Redfish>(&text);
    cluster::<Redfish>(&text);
}

fn machine<P: MachineGuest>(spec: &str, cluster_spec: &str) {
    let req = machine_request(UID, spec, cluster_spec, ENDPOINT);
    if let Err(e) = P::create(req) {
        named(&e, &[("spec", spec), ("cluster.spec", cluster_spec)]);
    }
}

fn template<P: MachineGuest>(spec: &str) {
    let req = TemplateRequest {
        template: object("t1", "t1-uid"),
        spec: spec.to_string(),
        credentials: Some(credentials(ENDPOINT)),
    };
    match P::describe_template(req) {
        Ok(s) => {
            checks::entries("capacity", &s.capacity);
            checks::entries("node info", &s.node_info);
        }
        Err(e) => named(&e, &[("spec.template.spec", spec)]),
    }
}

fn cluster<P: ClusterGuest>(spec: &str) {
    let req = ClusterRequest {
        cluster: object("c1", "c1-uid"),
        spec: spec.to_string(),
        plugin_status: None,
        state: None,
        credentials: credentials(ENDPOINT),
        more_credentials: vec![],
    };
    match P::reconcile(req) {
        Ok(s) => checks::progress(&s.progress),
        Err(e) => named(&e, &[("spec", spec)]),
    }
}

/// An error is well-formed ([`checks::error`]), and an invalid spec's field leads
/// into the spec it blames: all of the path but its last step is in the JSON (a
/// missing field is named at its parent or as the field itself).
fn named(e: &PluginError, specs: &[(&str, &str)]) {
    let roots: Vec<&str> = specs.iter().map(|(r, _)| *r).collect();
    checks::error(e, &roots);
    let PluginError::InvalidSpec(i) = e else {
        return;
    };
    // The longest root the field is under (`cluster.spec` before `spec`).
    let Some((root, text)) = specs
        .iter()
        .filter(|(r, _)| i.field == *r || i.field.starts_with(&format!("{r}.")))
        .max_by_key(|(r, _)| r.len())
    else {
        return;
    };
    let Ok(json) = serde_json::from_str::<Value>(text) else {
        return; // Not JSON: the path is where the parser stopped.
    };
    if has_duplicate_keys(text) {
        // `Value` keeps a repeated key's last value, the plugin's parser may have failed
        // on an earlier one: the path is not walkable. No spec the host sends has them
        // (it serializes an object the API server stored).
        return;
    }
    let steps = path(i.field[root.len()..].trim_start_matches('.'));
    let parent = &steps[..steps.len().saturating_sub(1)];
    let mut at = &json;
    for step in parent {
        if let Value::Object(m) = at
            && m.keys().any(|k| k.contains(['.', '[', ']']))
        {
            return; // A key the path cannot spell unambiguously.
        }
        at = match (step, at) {
            (Step::Key(k), Value::Object(m)) => m.get(k.as_str()),
            (Step::Index(n), Value::Array(a)) => a.get(*n),
            _ => None,
        }
        .unwrap_or_else(|| panic!("invalid spec names {:?}, which is not in {text}", i.field));
    }
}

/// Whether any object in the JSON `text` names a key twice.
fn has_duplicate_keys(text: &str) -> bool {
    serde_json::from_str::<NoDuplicates>(text).is_err()
}

/// Deserializes any JSON, failing on an object with a repeated key.
struct NoDuplicates;

impl<'de> serde::Deserialize<'de> for NoDuplicates {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NoDuplicatesVisitor)
    }
}

struct NoDuplicatesVisitor;

impl<'de> serde::de::Visitor<'de> for NoDuplicatesVisitor {
    type Value = NoDuplicates;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON without a repeated key")
    }

    fn visit_bool<E>(self, _: bool) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_i64<E>(self, _: i64) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_u64<E>(self, _: u64) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_f64<E>(self, _: f64) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_str<E>(self, _: &str) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_unit<E>(self) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<NoDuplicates, A::Error> {
        while seq.next_element::<NoDuplicates>()?.is_some() {}
        Ok(NoDuplicates)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<NoDuplicates, A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key) {
                return Err(serde::de::Error::custom("a repeated key"));
            }
            map.next_value::<NoDuplicates>()?;
        }
        Ok(NoDuplicates)
    }
}

enum Step {
    Key(String),
    Index(usize),
}

/// `a.b[2].c` as steps (the paths `serde_path_to_error` and the plugins write).
fn path(p: &str) -> Vec<Step> {
    let mut steps = vec![];
    for part in p.split('.').filter(|s| !s.is_empty()) {
        let mut rest = part;
        if let Some(i) = rest.find('[') {
            if i > 0 {
                steps.push(Step::Key(rest[..i].to_string()));
            }
            rest = &rest[i..];
            while let Some(close) = rest.find(']') {
                match rest[1..close].parse() {
                    Ok(n) => steps.push(Step::Index(n)),
                    Err(_) => steps.push(Step::Key(rest[1..close].to_string())),
                }
                rest = &rest[close + 1..];
            }
        } else {
            steps.push(Step::Key(rest.to_string()));
        }
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_key_is_seen_at_any_depth() {
        assert!(!has_duplicate_keys(
            r#"{"a":{"b":1,"c":[{"d":2}]},"e":"x"}"#
        ));
        assert!(has_duplicate_keys(r#"{"a":1,"a":2}"#));
        assert!(has_duplicate_keys(r#"{"a":[{"b":1,"b":{}}]}"#));
    }

    /// Found by CI's fuzz run: `network` twice, the plugin failing inside the first
    /// (an object), `Value` keeping the second (a string).
    #[test]
    fn a_spec_naming_a_key_twice_is_not_blamed_on_the_harness() {
        let spec = r#"{"network":{"default":{"bridge":"vmbr0","model":"virti-"}},"templateID":9000,"sourceNode":"pve1","network":"local-lvm"}"#;
        run(spec.as_bytes());
    }
}
