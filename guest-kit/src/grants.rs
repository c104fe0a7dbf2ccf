//! What an administrator granted the call's object beyond what it made itself (the
//! `grants` import, WIT 0.3.1). The host decides from the manager's flags, which no
//! tenant can change; what a spec, an annotation or a status says is never a grant.

/// Whether this call may take over infrastructure another provider made for the call's
/// object. Without it a plugin finds only what carries its own marker of the object.
pub fn adoption_allowed() -> bool {
    // A fuzzed call explores every path, the takeover's included.
    #[cfg(all(feature = "fuzzing", not(target_arch = "wasm32")))]
    if crate::fuzzing::installed() {
        return true;
    }
    crate::bindings::hyperplug::provider::grants::adoption_allowed()
}
