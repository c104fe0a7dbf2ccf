//! What the host accepts of a plugin's result before writing any of it: a plugin is
//! untrusted code, and what it returns ends up in an object's status (where an
//! oversized or malformed value would fail every write, leaving the object stuck) and in
//! conditions Cluster API mirrors (where a reason that is not CamelCase would fail its
//! writes). Pure functions, so a fuzzer can call them.
//!
//! Out-of-bounds results are refused whole (a terminal `InvalidPluginOutput` naming the
//! field and the bound); messages are only cut ([`crate::controller::write::conditions::MAX_MESSAGE`]) and
//! reasons replaced where they are used, since a long message or an odd phase is no
//! reason to stop.
//!
//! Sizes are counted as the status stores them, JSON-encoded: a control character takes
//! six bytes there, so a state of 256 KiB of them counted raw made a status past what
//! etcd stores in an object, and every status write of the object failed.
use hyperplug_runtime::bindings::cluster::ClusterStatus;
use hyperplug_runtime::bindings::conversion::Converted;
use hyperplug_runtime::bindings::machine::{AddressPool, MachineStatus, TemplateStatus};
use hyperplug_runtime::bindings::types::Progress;

/// Largest `progress.state` kept in `status.pluginState`.
pub const MAX_STATE_BYTES: usize = 256 << 10;
/// Most entries of any list a plugin reports (details, addresses, requests, domains,
/// pools, capacity).
pub const MAX_ENTRIES: usize = 64;
/// Longest key of a detail or capacity entry, or name (device, pool, failure domain).
pub const MAX_KEY_BYTES: usize = 128;
/// Longest other value (a detail, an address, a provider ID, a phase).
pub const MAX_VALUE_BYTES: usize = 4096;

/// A result the host will not write, and why (naming the field and the bound).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid(pub String);

/// Whether a result is within what the host writes.
pub trait Check {
    fn check(&self) -> Result<(), Invalid>;
}

impl Check for Progress {
    fn check(&self) -> Result<(), Invalid> {
        let size = stored_len(&self.state);
        if size > MAX_STATE_BYTES {
            return Err(Invalid(format!(
                "progress.state is {size} bytes; at most {MAX_STATE_BYTES} are kept in \
                 status.pluginState"
            )));
        }
        value("progress.phase", &self.phase)?;
        count("progress.waits", self.waits.len())?;
        for (i, w) in self.waits.iter().enumerate() {
            key(&format!("progress.waits[{i}].endpoint"), &w.endpoint)?;
            value(&format!("progress.waits[{i}].key"), &w.key)?;
        }
        Ok(())
    }
}

impl Check for Option<Progress> {
    fn check(&self) -> Result<(), Invalid> {
        self.as_ref().map_or(Ok(()), Check::check)
    }
}

impl Check for MachineStatus {
    fn check(&self) -> Result<(), Invalid> {
        self.progress.check()?;
        entries("details", &self.details)?;
        count("addresses", self.addresses.len())?;
        for (i, a) in self.addresses.iter().enumerate() {
            value(&format!("addresses[{i}].address"), &a.address)?;
        }
        count("address-requests", self.address_requests.len())?;
        for (i, r) in self.address_requests.iter().enumerate() {
            key(&format!("address-requests[{i}].device"), &r.device)?;
            match &r.pool {
                AddressPool::Reported(name) => key(&format!("address-requests[{i}].pool"), name)?,
                AddressPool::Reference(p) => {
                    key(
                        &format!("address-requests[{i}].pool.api-group"),
                        &p.api_group,
                    )?;
                    key(&format!("address-requests[{i}].pool.kind"), &p.kind)?;
                    key(&format!("address-requests[{i}].pool.name"), &p.name)?;
                }
            }
            if let Some(suffix) = &r.claim_suffix {
                key(&format!("address-requests[{i}].claim-suffix"), suffix)?;
            }
        }
        if let Some(id) = &self.provider_id {
            value("provider-id", id)?;
        }
        if let Some(fd) = &self.failure_domain {
            key("failure-domain", fd)?;
        }
        Ok(())
    }
}

impl Check for ClusterStatus {
    fn check(&self) -> Result<(), Invalid> {
        self.progress.check()?;
        entries("details", &self.details)?;
        count("failure-domains", self.failure_domains.len())?;
        for (i, d) in self.failure_domains.iter().enumerate() {
            key(&format!("failure-domains[{i}].name"), &d.name)?;
            entries(&format!("failure-domains[{i}].attributes"), &d.attributes)?;
        }
        count("ip-pools", self.ip_pools.len())?;
        for (i, p) in self.ip_pools.iter().enumerate() {
            key(&format!("ip-pools[{i}].name"), &p.name)?;
            count(&format!("ip-pools[{i}].addresses"), p.addresses.len())?;
        }
        if let Some(ep) = &self.control_plane_endpoint {
            value("control-plane-endpoint.host", &ep.host)?;
        }
        Ok(())
    }
}

impl Check for TemplateStatus {
    fn check(&self) -> Result<(), Invalid> {
        entries("capacity", &self.capacity)?;
        entries("node-info", &self.node_info)
    }
}

/// A converted spec is parsed where it is used (`versions::spec_for_plugin`), whose
/// error names the plugin and kind; its size is bounded by the plugin's memory limit.
impl Check for Converted {
    fn check(&self) -> Result<(), Invalid> {
        Ok(())
    }
}

fn count(field: &str, n: usize) -> Result<(), Invalid> {
    if n > MAX_ENTRIES {
        return Err(Invalid(format!(
            "{field} has {n} entries; at most {MAX_ENTRIES} are kept"
        )));
    }
    Ok(())
}

fn entries(field: &str, list: &[(String, String)]) -> Result<(), Invalid> {
    count(field, list.len())?;
    for (k, v) in list {
        key(&format!("{field} key"), k)?;
        value(&format!("{field}.{}", k), v)?;
    }
    Ok(())
}

fn key(field: &str, k: &str) -> Result<(), Invalid> {
    let size = stored_len(k);
    if k.is_empty() || size > MAX_KEY_BYTES {
        return Err(Invalid(format!(
            "{field} is {size} bytes long; it must have 1 to {MAX_KEY_BYTES}"
        )));
    }
    Ok(())
}

fn value(field: &str, v: &str) -> Result<(), Invalid> {
    let size = stored_len(v);
    if size > MAX_VALUE_BYTES {
        return Err(Invalid(format!(
            "{field} is {size} bytes long; at most {MAX_VALUE_BYTES} are kept"
        )));
    }
    Ok(())
}

/// The bytes `text` takes in the stored status: JSON-encoded, without its quotes (as
/// serde_json escapes: `\"`, `\\` and the short escapes take two bytes, other control
/// characters six).
fn stored_len(text: &str) -> usize {
    text.chars()
        .map(|c| match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            c if (c as u32) < 0x20 => 6,
            c => c.len_utf8(),
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(state: &str, phase: &str) -> Progress {
        Progress {
            state: state.into(),
            phase: phase.into(),
            message: String::new(),
            requeue_after_ms: None,
            waits: vec![],
            durable: true,
        }
    }

    fn machine() -> MachineStatus {
        MachineStatus {
            progress: progress("{}", "Ready"),
            ready: true,
            provider_id: Some("x://1".into()),
            addresses: vec![],
            failure_domain: None,
            address_requests: vec![],
            needs_bootstrap: false,
            drift: None,
            details: vec![("vmid".into(), "100".into())],
            plugin_status: None,
        }
    }

    #[test]
    fn a_sound_result_passes() {
        assert_eq!(machine().check(), Ok(()));
        assert_eq!(None::<Progress>.check(), Ok(()));
    }

    #[test]
    fn an_oversized_state_is_refused_naming_the_bound() {
        let big = "x".repeat(MAX_STATE_BYTES + 1);
        let err = progress(&big, "Cloning").check().unwrap_err();
        assert!(
            err.0.starts_with("progress.state is 262145 bytes"),
            "{err:?}"
        );
    }

    #[test]
    fn huge_detail_lists_and_values_are_refused_naming_the_field() {
        let mut m = machine();
        m.details = (0..1000).map(|i| (format!("k{i}"), "v".into())).collect();
        assert_eq!(
            m.check().unwrap_err().0,
            "details has 1000 entries; at most 64 are kept"
        );
        m.details = vec![("power".into(), "x".repeat(MAX_VALUE_BYTES + 1))];
        assert!(
            m.check()
                .unwrap_err()
                .0
                .starts_with("details.power is 4097")
        );
        m.details = vec![(String::new(), "v".into())];
        assert!(
            m.check()
                .unwrap_err()
                .0
                .starts_with("details key is 0 bytes")
        );
    }

    /// Found by the property test (`result_properties`): 256 KiB of control characters
    /// passed as a state of 256 KiB, and took 1.5 MiB in the status, past what etcd
    /// stores, so the object's status could never be written again.
    #[test]
    fn sizes_are_counted_as_the_status_stores_them() {
        let controls = "\u{1}".repeat(MAX_STATE_BYTES / 2);
        assert_eq!(
            progress(&controls, "Cloning").check().unwrap_err().0,
            "progress.state is 786432 bytes; at most 262144 are kept in status.pluginState"
        );
        let mut m = machine();
        m.details = vec![("power".into(), "\"".repeat(MAX_VALUE_BYTES / 2 + 1))];
        assert!(
            m.check()
                .unwrap_err()
                .0
                .starts_with("details.power is 4098 bytes long")
        );
        for text in ["plain", "é🙂", "a\"b\\c\n\t\u{7f}", "\u{0}\u{8}\u{c}\u{1f}"] {
            let encoded = serde_json::to_string(text).unwrap();
            assert_eq!(stored_len(text), encoded.len() - 2, "{text:?}");
        }
    }

    #[test]
    fn empty_messages_and_odd_phases_are_not_refused() {
        let mut m = machine();
        m.progress = progress("", "");
        assert_eq!(m.check(), Ok(()));
    }
}
