//! NoCloud (`cidata`) images for cloud-init and Ignition, shared by hyperplug plugins.
//!
//! A NoCloud seed is an ISO 9660 volume labelled `cidata` whose root holds `user-data`
//! (the bootstrap data: a `#cloud-config` document, or an Ignition config, which
//! Ignition's `proxmoxve` and similar platforms read from the same file), `meta-data`
//! (instance id, hostname, provider id) and optionally `network-config` (netplan-style
//! version 2). This crate writes those files and the image; it has no dependencies and
//! does no I/O, so it builds for `wasm32-wasip2` plugins and natively for tests.
mod iso;

pub use iso::{IsoError, SECTOR, build as build_iso};

/// The volume label cloud-init looks for.
pub const LABEL: &str = "cidata";

/// `meta-data`: what identifies the instance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaData {
    /// Changes only when the machine is a new one (cloud-init reruns per instance).
    pub instance_id: String,
    /// `local-hostname`.
    pub hostname: String,
    /// The Kubernetes provider ID (e.g. `proxmox://<uuid>`), for tooling that reads it.
    pub provider_id: Option<String>,
}

/// One interface of `network-config`, matched by MAC address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interface {
    /// Name the guest gives the interface (`set-name`), e.g. `eth0`.
    pub name: String,
    /// MAC address (any case).
    pub mac: String,
    pub dhcp4: bool,
    pub dhcp6: bool,
    /// Static addresses in CIDR form (`10.0.0.5/24`, `fd00::5/64`).
    pub addresses: Vec<String>,
    pub gateway4: Option<String>,
    pub gateway6: Option<String>,
    pub mtu: Option<u32>,
    /// Route metric for the default routes.
    pub metric: Option<u32>,
}

/// `network-config` (version 2).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkConfig {
    pub interfaces: Vec<Interface>,
    /// Nameservers for every interface with static addresses.
    pub dns_servers: Vec<String>,
}

/// The files of a seed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seed {
    pub user_data: Vec<u8>,
    pub meta_data: MetaData,
    /// None: the guest's own default (usually DHCP on the first interface).
    pub network: Option<NetworkConfig>,
}

impl Seed {
    /// The files as (name, contents), in the order cloud-init documents them.
    pub fn files(&self) -> Vec<(&'static str, Vec<u8>)> {
        let mut files = vec![
            ("meta-data", self.meta_data.render().into_bytes()),
            ("user-data", self.user_data.clone()),
        ];
        if let Some(net) = &self.network {
            files.push(("network-config", net.render().into_bytes()));
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
        out
    }
}

impl NetworkConfig {
    pub fn render(&self) -> String {
        let mut out = String::from("version: 2\nethernets:\n");
        for i in &self.interfaces {
            out.push_str(&format!("  {}:\n", quote(&i.name)));
            out.push_str(&format!(
                "    match:\n      macaddress: {}\n",
                quote(&i.mac.to_ascii_lowercase())
            ));
            out.push_str(&format!("    set-name: {}\n", quote(&i.name)));
            out.push_str(&format!("    dhcp4: {}\n", i.dhcp4));
            out.push_str(&format!("    dhcp6: {}\n", i.dhcp6));
            if let Some(mtu) = i.mtu {
                out.push_str(&format!("    mtu: {mtu}\n"));
            }
            if !i.addresses.is_empty() {
                out.push_str("    addresses:\n");
                for a in &i.addresses {
                    out.push_str(&format!("      - {}\n", quote(a)));
                }
            }
            let routes: Vec<(&str, &String)> = [("0.0.0.0/0", &i.gateway4), ("::/0", &i.gateway6)]
                .into_iter()
                .filter_map(|(to, via)| via.as_ref().map(|v| (to, v)))
                .collect();
            if !routes.is_empty() {
                out.push_str("    routes:\n");
                for (to, via) in routes {
                    out.push_str(&format!(
                        "      - to: {}\n        via: {}\n",
                        quote(to),
                        quote(via)
                    ));
                    if let Some(m) = i.metric {
                        out.push_str(&format!("        metric: {m}\n"));
                    }
                }
            }
            if !self.dns_servers.is_empty() && !i.addresses.is_empty() {
                out.push_str("    nameservers:\n      addresses:\n");
                for d in &self.dns_servers {
                    out.push_str(&format!("        - {}\n", quote(d)));
                }
            }
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
                instance_id: "uid-1".into(),
                hostname: "worker-1".into(),
                provider_id: Some("proxmox://1234".into()),
            },
            network: Some(NetworkConfig {
                interfaces: vec![
                    Interface {
                        name: "eth0".into(),
                        mac: "BC:24:11:00:00:01".into(),
                        addresses: vec!["10.0.0.5/24".into()],
                        gateway4: Some("10.0.0.1".into()),
                        mtu: Some(9000),
                        ..Interface::default()
                    },
                    Interface {
                        name: "eth1".into(),
                        mac: "BC:24:11:00:00:02".into(),
                        dhcp4: true,
                        ..Interface::default()
                    },
                ],
                dns_servers: vec!["10.0.0.53".into()],
            }),
        }
    }

    #[test]
    fn network_config_is_netplan_v2() {
        let text = seed().network.unwrap().render();
        assert!(text.starts_with("version: 2\nethernets:\n"), "{text}");
        assert!(text.contains("macaddress: \"bc:24:11:00:00:01\""), "{text}");
        assert!(text.contains("- \"10.0.0.5/24\""), "{text}");
        assert!(
            text.contains("to: \"0.0.0.0/0\"\n        via: \"10.0.0.1\""),
            "{text}"
        );
        assert!(text.contains("mtu: 9000"), "{text}");
        assert!(text.contains("- \"10.0.0.53\""), "{text}");
        assert!(text.contains("\"eth1\":\n    match:\n      macaddress: \"bc:24:11:00:00:02\"\n    set-name: \"eth1\"\n    dhcp4: true"), "{text}");
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
    fn empty_user_data_is_allowed() {
        let s = Seed {
            user_data: vec![],
            ..seed()
        };
        assert!(s.iso().is_ok());
    }
}
