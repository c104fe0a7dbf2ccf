//! NoCloud (`cidata`) images for cloud-init and Ignition, shared by hyperplug plugins.
//!
//! A NoCloud seed is an ISO 9660 volume labelled `cidata` whose root holds `user-data`
//! (the bootstrap data: a `#cloud-config` document, or an Ignition config, which
//! Ignition's `proxmoxve` and similar platforms read from the same file), `meta-data`
//! (instance id, hostname, provider id, ...) and `network-config` (netplan version 2,
//! [`NetworkConfig::render`]). For Ignition guests the same network is written as
//! systemd-networkd units ([`NetworkConfig::networkd_units`]) added to the config
//! ([`ignition::append`]). This crate writes those files and the image and does no
//! I/O, so it builds for `wasm32-wasip2` plugins and natively for tests.
pub mod ignition;
mod iso;
mod netplan;
mod network;
mod networkd;

pub use iso::{IsoError, SECTOR, build as build_iso};
pub use network::{Ethernet, NetworkConfig, NetworkError, Prefix, Route, Rule, Vrf};

/// The volume label cloud-init looks for.
pub const LABEL: &str = "cidata";

/// The `network-config` of a guest whose network is configured otherwise (Ignition):
/// netplan version 1 with nothing in it.
pub const EMPTY_NETWORK_CONFIG: &str = "version: 1\nconfig: []\n";

/// `meta-data`: what identifies the instance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaData {
    /// Changes only when the machine is a new one (cloud-init reruns per instance);
    /// templates read it as `ds.meta_data.instance_id`.
    pub instance_id: String,
    /// `local-hostname` and `hostname`.
    pub hostname: String,
    /// The Kubernetes provider ID (e.g. `proxmox://<uuid>`), for templates that read it.
    pub provider_id: Option<String>,
    /// The Kubernetes version the machine runs.
    pub kubernetes_version: Option<String>,
    /// Further keys (e.g. where the machine runs), in order, after the standard ones.
    pub extra: Vec<(String, String)>,
}

/// The files of a seed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seed {
    pub user_data: Vec<u8>,
    pub meta_data: MetaData,
    /// The `network-config` document as is (e.g. [`NetworkConfig::render`]); none: the
    /// guest's own default (usually DHCP on the first interface).
    pub network_config: Option<String>,
}

impl Seed {
    /// The files as (name, contents), in the order cloud-init documents them.
    pub fn files(&self) -> Vec<(&'static str, Vec<u8>)> {
        let mut files = vec![
            ("meta-data", self.meta_data.render().into_bytes()),
            ("user-data", self.user_data.clone()),
        ];
        if let Some(net) = &self.network_config {
            files.push(("network-config", net.clone().into_bytes()));
        }
        files
    }

    /// The `cidata` ISO image.
    pub fn iso(&self) -> Result<Vec<u8>, IsoError> {
        let files = self.files();
        let refs: Vec<(&str, &[u8])> = files.iter().map(|(n, d)| (*n, d.as_slice())).collect();
        build_iso(LABEL, &refs)
    }
}

/// A YAML double-quoted scalar (JSON string escaping is valid YAML). Characters YAML
/// does not allow raw (C0 and C1 controls, DEL, U+FFFE/U+FFFF, a BOM) and those YAML
/// 1.1 readers such as cloud-init's take for line breaks (NEL, U+2028, U+2029) are
/// escaped, so any value reads back as it was.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            '\u{80}'..='\u{9f}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{feff}'
            | '\u{fffe}'
            | '\u{ffff}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl MetaData {
    pub fn render(&self) -> String {
        let mut out = format!(
            "instance-id: {}\nlocal-hostname: {}\nhostname: {}\n",
            quote(&self.instance_id),
            quote(&self.hostname),
            quote(&self.hostname)
        );
        if let Some(p) = &self.provider_id {
            out.push_str(&format!("provider-id: {}\n", quote(p)));
        }
        if let Some(v) = &self.kubernetes_version {
            out.push_str(&format!("kubernetes-version: {}\n", quote(v)));
        }
        for (k, v) in &self.extra {
            out.push_str(&format!("{}: {}\n", network::plain_or_quoted(k), quote(v)));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// Found by fuzzing (`fuzz/`, target `nocloud_iso`): an instance ID with a DEL made
    /// meta-data that YAML readers refuse ("control characters are not allowed").
    #[test]
    fn characters_yaml_refuses_raw_or_reads_as_line_breaks_are_escaped() {
        assert_eq!(
            quote("a\u{7f}b\u{85}c\u{9f}d\u{2028}e\u{feff}f\u{ffff}"),
            r#""a\x7fb\u0085c\u009fd\u2028e\ufefff\uffff""#
        );
        assert_eq!(quote("é ✓ 🙂"), "\"é ✓ 🙂\"");
    }

    fn seed() -> Seed {
        Seed {
            user_data: b"#cloud-config\nruncmd: [\"echo hi\"]\n".to_vec(),
            meta_data: MetaData {
                instance_id: "5c1a8a5e-0000-4000-8000-000000000001".into(),
                hostname: "worker-1".into(),
                provider_id: Some("proxmox://5c1a8a5e-0000-4000-8000-000000000001".into()),
                kubernetes_version: Some("v1.33.0".into()),
                extra: vec![("proxmox_node".into(), "pve1".into())],
            },
            network_config: Some(EMPTY_NETWORK_CONFIG.into()),
        }
    }

    #[test]
    fn meta_data_names_the_instance_its_host_and_what_templates_read() {
        assert_eq!(
            seed().meta_data.render(),
            "instance-id: \"5c1a8a5e-0000-4000-8000-000000000001\"\n\
             local-hostname: \"worker-1\"\n\
             hostname: \"worker-1\"\n\
             provider-id: \"proxmox://5c1a8a5e-0000-4000-8000-000000000001\"\n\
             kubernetes-version: \"v1.33.0\"\n\
             proxmox_node: \"pve1\"\n"
        );
    }

    #[test]
    fn meta_data_without_the_optional_keys_has_only_the_identity() {
        let meta = MetaData {
            instance_id: "i-1".into(),
            hostname: "m1".into(),
            ..MetaData::default()
        };
        assert_eq!(
            meta.render(),
            "instance-id: \"i-1\"\nlocal-hostname: \"m1\"\nhostname: \"m1\"\n"
        );
    }

    #[test]
    fn quoting_escapes_yaml_specials() {
        assert_eq!(quote("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
        assert_eq!(quote("yes"), "\"yes\"");
    }

    /// An independent reader (the `iso9660` crate) sees the files and their contents.
    #[test]
    fn seed_image_reads_back_with_an_independent_reader() {
        let seed = seed();
        let img = seed.iso().unwrap();
        let iso = iso9660::ISO9660::new(std::io::Cursor::new(img.clone())).unwrap();
        let mut found = std::collections::BTreeMap::new();
        for entry in iso.root.contents() {
            if let iso9660::DirectoryEntry::File(f) = entry.unwrap() {
                let mut data = Vec::new();
                f.read().read_to_end(&mut data).unwrap();
                found.insert(f.identifier.clone(), data);
            }
        }
        let names: Vec<&str> = found.keys().map(String::as_str).collect();
        assert!(
            names.iter().all(|n| n.starts_with("META_DATA")
                || n.starts_with("USER_DATA")
                || n.starts_with("NETWORK_CONFIG")),
            "{names:?}"
        );
        assert_eq!(names.len(), 3, "{names:?}");
        let user = found
            .iter()
            .find(|(k, _)| k.starts_with("USER_DATA"))
            .unwrap()
            .1;
        assert_eq!(user, &seed.user_data);
        // The label, straight from the primary volume descriptor.
        assert_eq!(
            String::from_utf8_lossy(&img[16 * SECTOR + 40..16 * SECTOR + 72]).trim_end(),
            "cidata"
        );
    }

    #[test]
    fn empty_user_data_and_no_network_config_are_allowed() {
        let s = Seed {
            user_data: vec![],
            network_config: None,
            ..seed()
        };
        assert_eq!(s.files().len(), 2);
        assert!(s.iso().is_ok());
    }
}
