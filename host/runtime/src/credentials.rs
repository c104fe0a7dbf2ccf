//! The keys of a credentials Secret. The controllers read them from Secrets and
//! `hyperplug conformance` from its credentials file, so both accept the same keys, read
//! the same way.
use crate::bindings::types::Credentials;

pub const URL: &str = "url";
pub const TOKEN: &str = "token";
pub const SECRET: &str = "secret";
pub const CA: &str = "ca.crt";
pub const FINGERPRINT: &str = "fingerprint";
pub const INSECURE: &str = "insecure";

/// Most bytes of one credentials value (a CA bundle of a few dozen certificates fits):
/// the values are a tenant's, and the host keeps them.
pub const MAX_VALUE_BYTES: usize = 64 << 10;

/// The credentials in the keys of the Secret (or file) `name`; `get` gives a key's raw
/// value. Values are trimmed and an empty one counts as missing; the error names the
/// missing key, or the key whose value is over [`MAX_VALUE_BYTES`].
pub fn from_keys<'a>(
    name: &str,
    get: impl Fn(&str) -> Option<&'a [u8]>,
) -> Result<Credentials, String> {
    for key in [URL, TOKEN, SECRET, CA, FINGERPRINT, INSECURE] {
        if let Some(v) = get(key).filter(|v| v.len() > MAX_VALUE_BYTES) {
            return Err(format!(
                "credentials Secret {name}: `{key}` is {} bytes; at most {MAX_VALUE_BYTES} are read (a fixed bound)",
                v.len()
            ));
        }
    }
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

/// The bytes `credentials` keep in memory (their strings).
pub fn bytes(c: &Credentials) -> usize {
    c.endpoint.len()
        + c.token.len()
        + c.secret.len()
        + c.ca_bundle.as_ref().map_or(0, String::len)
        + c.fingerprint.as_ref().map_or(0, String::len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_over_the_bound_is_refused_naming_its_key() {
        let big = vec![b'a'; MAX_VALUE_BYTES + 1];
        let err = from_keys("ns/s", |k| match k {
            URL => Some(b"https://pve:8006".as_slice()),
            TOKEN | SECRET => Some(b"x".as_slice()),
            CA => Some(big.as_slice()),
            _ => None,
        })
        .unwrap_err();
        assert!(err.contains("`ca.crt` is 65537 bytes"), "{err}");
        let ok = from_keys("ns/s", |k| match k {
            URL => Some(b"https://pve:8006".as_slice()),
            TOKEN | SECRET => Some(b"x".as_slice()),
            _ => None,
        })
        .unwrap();
        assert_eq!(bytes(&ok), 18);
    }
}
