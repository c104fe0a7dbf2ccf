//! Holding a key of the plugin's own among the manager's concurrent calls (the
//! `reservations` import): e.g. an identifier about to be created, so two machines never
//! propose the same one. Advisory; the infrastructure's own check stays the arbiter.

/// Hold `key` for this call's object for `ttl_ms` (the host caps it): true when held
/// (also when this object held it already), false while another object holds it.
pub fn reserve(key: &str, ttl_ms: u32) -> bool {
    // A fuzzed call is the only one: every key is free.
    #[cfg(all(feature = "fuzzing", not(target_arch = "wasm32")))]
    if crate::fuzzing::installed() {
        return true;
    }
    crate::reservations::reserve(key, ttl_ms)
}

/// Let `key` go if this call's object holds it.
pub fn release(key: &str) {
    #[cfg(all(feature = "fuzzing", not(target_arch = "wasm32")))]
    if crate::fuzzing::installed() {
        return;
    }
    crate::reservations::release(key)
}
