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

pub(crate) fn is_drive_key(k: &str) -> bool {
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
    use serde_json::json;

    use super::*;

    #[test]
    fn config_values_read_as_strings_or_numbers_whichever_pve_sent() {
        let config =
            json!({"name": "m1", "cores": 4, "memory": "2048", "balloon": 1.0, "onboot": true});
        assert_eq!(str_of(&config, "name").as_deref(), Some("m1"));
        assert_eq!(str_of(&config, "cores").as_deref(), Some("4"));
        assert_eq!(str_of(&config, "onboot"), None);
        assert_eq!(u64_of(&config, "cores"), Some(4));
        assert_eq!(u64_of(&config, "memory"), Some(2048));
        assert_eq!(u64_of(&config, "balloon"), Some(1));
        assert_eq!(u64_of(&config, "name"), None);
        assert_eq!(u64_of(&config, "missing"), None);
    }

    #[test]
    fn property_strings_split_into_options_with_the_bare_first_item_unnamed() {
        let drive = "local-lvm:vm-100-disk-0,cache=writeback,size=32G";
        assert_eq!(
            options(drive),
            [
                (String::new(), "local-lvm:vm-100-disk-0".to_string()),
                ("cache".to_string(), "writeback".to_string()),
                ("size".to_string(), "32G".to_string()),
            ]
        );
        assert_eq!(option(drive, "size").as_deref(), Some("32G"));
        assert_eq!(option(drive, "iothread"), None);
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("10G"), Some(10 << 30));
        assert_eq!(parse_size("512M"), Some(512 << 20));
        assert_eq!(parse_size("4194304"), Some(4194304));
        assert_eq!(parse_size("64K"), Some(64 << 10));
        assert_eq!(parse_size("2T"), Some(2 << 40));
        assert_eq!(parse_size("1.5G"), Some(3 << 29));
        assert_eq!(parse_size("8g"), Some(8 << 30));
    }

    #[test]
    fn sizes_that_are_not_sizes_do_not_parse() {
        for text in ["", "G", "10X", "ten", "10 GB"] {
            assert_eq!(parse_size(text), None, "{text:?}");
        }
    }

    #[test]
    fn drive_keys_are_a_bus_and_a_number() {
        for key in [
            "scsi0",
            "virtio15",
            "ide2",
            "sata5",
            "efidisk0",
            "tpmstate0",
        ] {
            assert!(is_drive_key(key), "{key}");
        }
        for key in ["scsihw", "ide", "net0", "scsi0a", "vmgenid"] {
            assert!(!is_drive_key(key), "{key}");
        }
    }

    #[test]
    fn pves_cloud_init_drive_is_told_from_other_drives() {
        assert!(is_cloudinit_drive("local-lvm:vm-100-cloudinit,media=cdrom"));
        assert!(!is_cloudinit_drive("local-lvm:vm-100-disk-0,size=10G"));
    }

    #[test]
    fn the_uuid_comes_from_smbios1() {
        let config =
            json!({"smbios1": "uuid=5c1a8a5e-0000-4000-8000-000000000001,manufacturer=QEMU"});
        assert_eq!(
            uuid_of(&config).as_deref(),
            Some("5c1a8a5e-0000-4000-8000-000000000001")
        );
        assert_eq!(uuid_of(&json!({})), None);
    }
}
