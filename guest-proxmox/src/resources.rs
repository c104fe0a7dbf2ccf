//! `GET /cluster/resources`: every node, VM and storage of a Proxmox cluster in one
//! reply. At 10,000 VMs the reply is a few MB of JSON; parsed into a tree of JSON values
//! it took about five times that per call, and a manager's concurrent first steps ran a
//! plugin past its memory limit. So it is parsed straight into [`Resource`], which keeps
//! only the fields the plugin reads (everything else is skipped while parsing).
use serde::{Deserialize, Deserializer, de};

use crate::api::{Pve, PveResult};

/// One entry of the listing (`type` says which fields it has).
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
pub struct Resource {
    /// `qemu`, `lxc`, `node`, `storage`, `pool`, `sdn`, ...
    #[serde(rename = "type", default, deserialize_with = "text")]
    pub kind: Option<Box<str>>,
    #[serde(default, deserialize_with = "text")]
    pub node: Option<Box<str>>,
    #[serde(default, deserialize_with = "number")]
    pub vmid: Option<u64>,
    #[serde(default, deserialize_with = "text")]
    pub name: Option<Box<str>>,
    /// `;`-joined, as PVE stores them.
    #[serde(default, deserialize_with = "text")]
    pub tags: Option<Box<str>>,
    /// `1` for a template.
    #[serde(default, deserialize_with = "number")]
    pub template: Option<u64>,
    /// A VM's config lock (`clone`, `backup`, `migrate`, ...).
    #[serde(default, deserialize_with = "text")]
    pub lock: Option<Box<str>>,
    /// `running`/`stopped` for a guest, `online` for a node, `available` for a storage.
    #[serde(default, deserialize_with = "text")]
    pub status: Option<Box<str>>,
    /// Bytes: a guest's configured memory, a node's total.
    #[serde(default, deserialize_with = "number")]
    pub maxmem: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    pub maxcpu: Option<u64>,
    /// A storage entry's ID, storage type, content types (`,`-joined) and whether it
    /// is shared between the nodes it is configured on.
    #[serde(default, deserialize_with = "text")]
    pub storage: Option<Box<str>>,
    #[serde(default, deserialize_with = "text")]
    pub plugintype: Option<Box<str>>,
    #[serde(default, deserialize_with = "text")]
    pub content: Option<Box<str>>,
    #[serde(default, deserialize_with = "number")]
    pub shared: Option<u64>,
}

impl Resource {
    pub fn is(&self, kind: &str) -> bool {
        self.kind.as_deref() == Some(kind)
    }

    pub fn is_template(&self) -> bool {
        self.template == Some(1)
    }

    /// Whether its tags hold `tag` (PVE joins them with `;`; older ones with `,` or
    /// spaces).
    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags
            .as_deref()
            .is_some_and(|t| t.split([';', ',', ' ']).any(|x| x == tag))
    }

    /// Its VMID as PVE's API takes it.
    pub fn vmid32(&self) -> Option<u32> {
        self.vmid.and_then(|v| u32::try_from(v).ok())
    }
}

/// `GET path` (`/cluster/resources`, optionally `?type=...`) as [`Resource`]s.
pub fn list(pve: &Pve, path: &str) -> PveResult<Vec<Resource>> {
    pve.get_as(path)
}

/// An array where a scalar was expected: skipped, read as absent.
fn ignored<'de, A: de::SeqAccess<'de>, V>(mut seq: A) -> Result<Option<V>, A::Error> {
    while seq.next_element::<de::IgnoredAny>()?.is_some() {}
    Ok(None)
}

/// An object where a scalar was expected: skipped, read as absent.
fn ignored_map<'de, A: de::MapAccess<'de>, V>(mut map: A) -> Result<Option<V>, A::Error> {
    while map
        .next_entry::<de::IgnoredAny, de::IgnoredAny>()?
        .is_some()
    {}
    Ok(None)
}

/// A listing written as JSON (tests).
#[cfg(test)]
pub fn parsed(listing: serde_json::Value) -> Vec<Resource> {
    serde_json::from_value(listing).expect("a listing of the usual shape")
}

/// A string, or a number given where a string is usual (PVE's Perl answers either);
/// anything else is absent: one odd value must not make the whole listing unreadable.
fn text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Box<str>>, D::Error> {
    struct Text;
    impl<'de> de::Visitor<'de> for Text {
        type Value = Option<Box<str>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a string or a number")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(v.into()))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v.to_string().into()))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(v.to_string().into()))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Ok(Some(v.to_string().into()))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
            ignored(seq)
        }
        fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            ignored_map(map)
        }
    }
    d.deserialize_any(Text)
}

/// A whole number, given as a number (possibly with a fraction, cut off) or a numeric
/// string (PVE's Perl may quote numbers); anything else is absent.
fn number<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    struct Number;
    impl<'de> de::Visitor<'de> for Number {
        type Value = Option<u64>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a number or a numeric string")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(u64::try_from(v).ok())
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Ok((v >= 0.0).then_some(v as u64))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(v.trim().parse().ok())
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
            ignored(seq)
        }
        fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            ignored_map(map)
        }
    }
    d.deserialize_any(Number)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn numbers_and_strings_are_read_either_way_and_other_fields_skipped() {
        let listed: Vec<Resource> = serde_json::from_value(json!([
            {"type": "qemu", "vmid": "101", "node": "pve1", "maxmem": 2147483648.0,
             "template": 1, "tags": "a;b", "disk": 0, "netin": 12, "uptime": 3},
            {"type": "node", "node": 7, "status": "online", "maxcpu": "8", "cpu": 0.25},
            {"type": "storage", "storage": "local", "shared": 0, "content": "iso,vztmpl",
             "lock": null, "name": true}
        ]))
        .unwrap();
        assert_eq!(listed[0].vmid32(), Some(101));
        assert_eq!(listed[0].maxmem, Some(2 << 30));
        assert!(listed[0].is_template() && listed[0].has_tag("b") && !listed[0].has_tag("c"));
        assert_eq!(listed[1].node.as_deref(), Some("7"));
        assert_eq!(listed[1].maxcpu, Some(8));
        assert!(listed[2].is("storage"));
        assert_eq!(
            (listed[2].lock.as_deref(), listed[2].name.as_deref()),
            (None, None)
        );
    }

    #[test]
    fn an_odd_value_is_absent_and_the_rest_is_read() {
        let listed = parsed(json!([
            {"type": ["qemu"], "vmid": {"n": 1}, "node": "pve1", "maxmem": [1, 2]},
            {"type": "qemu", "vmid": 102}
        ]));
        assert_eq!((listed[0].kind.as_deref(), listed[0].vmid), (None, None));
        assert_eq!(
            (listed[0].node.as_deref(), listed[0].maxmem),
            (Some("pve1"), None)
        );
        assert_eq!(listed[1].vmid32(), Some(102));
    }

    #[test]
    fn a_listing_of_the_wrong_shape_is_an_error_not_a_panic() {
        let bad = serde_json::from_value::<Vec<Resource>>(json!({"type": "qemu"}));
        assert!(bad.is_err());
    }
}
