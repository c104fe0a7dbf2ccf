//! Reading PVE config values and property strings.

use serde_json::Value;

pub(super) fn str_of(v: &Value, key: &str) -> Option<String> {
    match v.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

pub(super) fn u64_of(v: &Value, key: &str) -> Option<u64> {
    match v.get(key)? {
        Value::Number(n) => n.as_u64().or_else(|| n.as_f64().map(|f| f as u64)),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// `key=value` options of a PVE property string (the first bare item under `""`).
pub(super) fn options(v: &str) -> Vec<(String, String)> {
    v.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (String::new(), p.to_string()),
        })
        .collect()
}

pub(super) fn option(v: &str, key: &str) -> Option<String> {
    options(v)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

/// `10G`, `512M`, `1T`, plain bytes → bytes.
pub(super) fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, unit) = match s.chars().last()? {
        c if c.is_ascii_alphabetic() => (&s[..s.len() - 1], c.to_ascii_uppercase()),
        _ => (s, 'B'),
    };
    let n: f64 = num.parse().ok()?;
    let mult = match unit {
        'B' => 1.0,
        'K' => 1024.0,
        'M' => 1024.0 * 1024.0,
        'G' => 1024.0 * 1024.0 * 1024.0,
        'T' => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some((n * mult) as u64)
}

pub(super) fn is_drive_key(k: &str) -> bool {
    ["ide", "sata", "scsi", "virtio", "efidisk", "tpmstate"]
        .iter()
        .any(|p| {
            k.strip_prefix(p)
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
}

pub(super) fn is_cloudinit_drive(v: &str) -> bool {
    v.split(',').next().is_some_and(|f| f.contains("cloudinit"))
}

pub(super) fn uuid_of(config: &Value) -> Option<String> {
    str_of(config, "smbios1").and_then(|s| option(&s, "uuid"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("10G"), Some(10 << 30));
        assert_eq!(parse_size("512M"), Some(512 << 20));
        assert_eq!(parse_size("4194304"), Some(4194304));
    }
}
