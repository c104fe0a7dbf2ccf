//! What every plugin result must be, whatever the input: the WIT contract's shapes
//! (CamelCase reasons and phases, an invalid spec naming its field) within the bounds the
//! host writes, and never a secret. A broken rule panics, which the fuzzer reports.
use guest_kit::machine::{AddressPool, MachineStatus};
use guest_kit::types::{PluginError, Progress};

/// The secret of the credentials every fuzzed call gets
/// (`guest_kit::testing::credentials`): it must show nowhere.
pub const SECRET: &str = "test-secret";

/// The bounds the host applies to a plugin's result before writing it
/// (`host/src/controller/call/output.rs`), in bytes as the status stores them (JSON-encoded:
/// [`stored_len`]): a result beyond them is refused whole, so a plugin that exceeds
/// them leaves its object failed.
pub mod bounds {
    /// `progress.state`, kept in `status.pluginState`.
    pub const MAX_STATE_BYTES: usize = 256 << 10;
    /// Entries of any list (details, addresses, address requests, ...).
    pub const MAX_ENTRIES: usize = 64;
    /// A detail's key, a device or pool name.
    pub const MAX_KEY_BYTES: usize = 128;
    /// Any other value (a detail, an address, a provider ID, a phase).
    pub const MAX_VALUE_BYTES: usize = 4096;
}

/// The bytes `text` takes JSON-encoded, without its quotes (what the host counts).
pub fn stored_len(text: &str) -> usize {
    serde_json::to_string(text).map_or(usize::MAX, |j| j.len() - 2)
}

/// A Kubernetes condition reason (metav1.Condition): CamelCase words, at most 1024.
pub fn is_reason(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 1024
        && b[0].is_ascii_alphabetic()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"_,:".contains(c))
        && !b"_,:".contains(&b[b.len() - 1])
}

/// A plugin error: a terminal one has a reason, an invalid spec names a field under
/// one of `roots` (e.g. `spec`, `cluster.spec`).
pub fn error(e: &PluginError, roots: &[&str]) {
    match e {
        PluginError::Terminal(t) => {
            assert!(
                is_reason(&t.reason),
                "terminal reason {:?} is not CamelCase",
                t.reason
            );
            no_secret("terminal message", &t.message);
        }
        PluginError::InvalidSpec(i) => {
            assert!(
                roots
                    .iter()
                    .any(|r| i.field == *r || i.field.starts_with(&format!("{r}."))),
                "invalid spec names {:?}, not a field under {roots:?}",
                i.field
            );
            assert!(
                !i.message.trim().is_empty(),
                "invalid spec {:?} without a message",
                i.field
            );
            no_secret("invalid-spec message", &i.message);
        }
        PluginError::Transient(t) => no_secret("transient message", &t.message),
    }
}

/// A progress report.
pub fn progress(p: &Progress) {
    assert!(
        p.phase.is_empty() || is_reason(&p.phase),
        "phase {:?} is not CamelCase",
        p.phase
    );
    assert!(
        stored_len(&p.phase) <= bounds::MAX_VALUE_BYTES,
        "phase of {} bytes",
        p.phase.len()
    );
    assert!(
        stored_len(&p.state) <= bounds::MAX_STATE_BYTES,
        "state of {} bytes, more than the host keeps",
        p.state.len()
    );
    no_secret("state", &p.state);
    no_secret("message", &p.message);
}

/// A machine's status, as the host would write it.
pub fn machine_status(s: &MachineStatus) {
    progress(&s.progress);
    entries("details", &s.details);
    assert!(
        s.addresses.len() <= bounds::MAX_ENTRIES,
        "{} addresses, more than the host writes",
        s.addresses.len()
    );
    for a in &s.addresses {
        assert!(
            stored_len(&a.address) <= bounds::MAX_VALUE_BYTES,
            "address of {} bytes",
            a.address.len()
        );
    }
    assert!(s.address_requests.len() <= bounds::MAX_ENTRIES);
    for r in &s.address_requests {
        key("address request device", &r.device);
        key("address request pool", &pool_name(&r.pool));
    }
    if let Some(id) = &s.provider_id {
        assert!(
            stored_len(id) <= bounds::MAX_VALUE_BYTES,
            "provider ID of {} bytes",
            id.len()
        );
    }
    if let Some(fd) = &s.failure_domain {
        key("failure domain", fd);
    }
}

/// Key/value lists (details, capacity).
pub fn entries(what: &str, list: &[(String, String)]) {
    assert!(
        list.len() <= bounds::MAX_ENTRIES,
        "{what}: {} entries",
        list.len()
    );
    for (k, v) in list {
        key(what, k);
        assert!(
            stored_len(v) <= bounds::MAX_VALUE_BYTES,
            "{what}.{k}: {} bytes",
            v.len()
        );
        no_secret(what, v);
    }
}

fn key(what: &str, k: &str) {
    assert!(
        !k.is_empty() && stored_len(k) <= bounds::MAX_KEY_BYTES,
        "{what}: a key of {} bytes",
        k.len()
    );
}

/// Text the plugin wrote (a message, a log line, a request it sent) that must not
/// carry the credentials' secret.
pub fn no_secret(what: &str, text: &str) {
    assert!(
        !text.contains(SECRET),
        "the secret shows in a {what}: {text:?}"
    );
}

/// A reported pool by its name, a referenced one as `<Kind>/<name>`.
pub fn pool_name(pool: &AddressPool) -> String {
    match pool {
        AddressPool::Reported(name) => name.clone(),
        AddressPool::Reference(p) => format!("{}/{}", p.kind, p.name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_camel_case_words() {
        for ok in ["Ready", "VMMissing", "TLSVerificationFailed", "A", "x_1"] {
            assert!(is_reason(ok), "{ok}");
        }
        for bad in ["", "Not ready", "1Ready", "Ready:", "Ready.", "ready-now"] {
            assert!(!is_reason(bad), "{bad}");
        }
    }
}
