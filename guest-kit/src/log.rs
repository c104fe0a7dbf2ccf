//! Structured logs through the host's `tracing`: a message and key/value fields. Never
//! log a secret (credentials, bootstrap data, a blob URL).
pub use crate::bindings::hyperplug::provider::log::Level;

/// Log `message` at `level` with `fields`.
pub fn log(level: Level, message: &str, fields: &[(&str, String)]) {
    #[cfg(all(feature = "fuzzing", not(target_arch = "wasm32")))]
    if crate::fuzzing::log(level, message, fields) {
        return;
    }
    let fields: Vec<(String, String)> = fields
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    crate::bindings::hyperplug::provider::log::log(level, message, &fields);
}

pub fn debug(message: &str, fields: &[(&str, String)]) {
    log(Level::Debug, message, fields);
}

pub fn info(message: &str, fields: &[(&str, String)]) {
    log(Level::Info, message, fields);
}

pub fn warn(message: &str, fields: &[(&str, String)]) {
    log(Level::Warn, message, fields);
}
