//! The keys of a credentials Secret. The controllers read them from Secrets and
//! `hyperplug conformance` from its credentials file, so both accept the same keys, read
//! the same way.
use super::Credentials;

pub const URL: &str = "url";
pub const TOKEN: &str = "token";
pub const SECRET: &str = "secret";
pub const CA: &str = "ca.crt";
pub const FINGERPRINT: &str = "fingerprint";
pub const INSECURE: &str = "insecure";

/// The credentials in the keys of the Secret (or file) `name`; `get` gives a key's raw
/// value. Values are trimmed and an empty one counts as missing; the error names the
/// missing key.
pub fn from_keys<'a>(
    name: &str,
    get: impl Fn(&str) -> Option<&'a [u8]>,
) -> Result<Credentials, String> {
    let text = |key: &str| -> Option<String> {
        get(key)
            .map(|v| String::from_utf8_lossy(v).trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let required =
        |key: &str| text(key).ok_or_else(|| format!("credentials Secret {name} has no `{key}`"));
    Ok(Credentials {
        endpoint: required(URL)?,
        token: required(TOKEN)?,
        secret: required(SECRET)?,
        ca_bundle: text(CA),
        fingerprint: text(FINGERPRINT),
        insecure: text(INSECURE).is_some_and(|v| v == "true" || v == "1"),
    })
}
