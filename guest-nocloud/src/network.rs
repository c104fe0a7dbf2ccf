//! The guest's network, renderer-agnostic: ethernets matched by MAC, VRFs, routes and
//! routing-policy rules. `netplan` renders it as cloud-init's `network-config`
//! (version 2), `networkd` as systemd-networkd units for Ignition; both check it with
//! [`NetworkConfig::validate`] first.
use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An address with its prefix length, as written (`10.0.0.5/24` keeps its host bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Prefix {
    pub addr: IpAddr,
    pub bits: u8,
}

impl Prefix {
    /// `a.b.c.d/n`, `x::y/n`, or a bare address (the host route: /32 or /128).
    pub fn parse(text: &str) -> Result<Prefix, String> {
        let (addr, bits) = match text.split_once('/') {
            Some((a, b)) => (a, Some(b)),
            None => (text, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("`{text}` is not an IP address or prefix"))?;
        let max = Self::max_bits(addr);
        let bits = match bits {
            None => max,
            Some(b) => b
                .parse::<u8>()
                .ok()
                .filter(|b| *b <= max)
                .ok_or_else(|| format!("`{text}`: the prefix length must be 0 to {max}"))?,
        };
        Ok(Prefix { addr, bits })
    }

    /// The default route of a family: `0.0.0.0/0` or `::/0`.
    pub fn default_route(v6: bool) -> Prefix {
        let addr = if v6 {
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        } else {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        };
        Prefix { addr, bits: 0 }
    }

    pub fn is_v6(&self) -> bool {
        self.addr.is_ipv6()
    }

    /// `0.0.0.0/0` or `::/0`.
    pub fn is_default_route(&self) -> bool {
        self.bits == 0 && self.addr.is_unspecified()
    }

    fn max_bits(addr: IpAddr) -> u8 {
        if addr.is_ipv6() { 128 } else { 32 }
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.bits)
    }
}

/// One route. A route without `via` is on-link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub to: Prefix,
    pub via: Option<IpAddr>,
    pub metric: Option<u32>,
    pub table: Option<u32>,
}

/// One routing-policy (FIB) rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rule {
    pub to: Option<Prefix>,
    pub from: Option<Prefix>,
    pub priority: Option<u64>,
    pub table: Option<u32>,
}

/// An ethernet device, matched by its MAC address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ethernet {
    /// The name renderers key it by, e.g. `eth0`.
    pub name: String,
    /// As the hypervisor reports it (e.g. `BC:24:11:00:00:01`).
    pub mac: String,
    pub dhcp4: bool,
    pub dhcp6: bool,
    /// Static addresses, in order.
    pub addresses: Vec<Prefix>,
    pub routes: Vec<Route>,
    pub rules: Vec<Rule>,
    pub dns_servers: Vec<String>,
    /// The link MTU inside the guest.
    pub mtu: Option<u32>,
}

/// A VRF (an l3mdev device) enslaving some ethernets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vrf {
    pub name: String,
    pub table: u32,
    /// Names of member ethernets (`eth2`).
    pub interfaces: Vec<String>,
    pub routes: Vec<Route>,
    pub rules: Vec<Rule>,
}

/// The whole network of a guest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkConfig {
    pub ethernets: Vec<Ethernet>,
    pub vrfs: Vec<Vrf>,
}

/// Why a network cannot be rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetworkError {
    /// No device at all.
    NoDevices,
    /// Two routes share table, destination and metric.
    ConflictingRoutes { device: String, route: String },
    /// A rule with neither `to` nor `from`, with mixed families, or without a table
    /// outside a VRF.
    MalformedRule { device: String, reason: String },
    /// A VRF names an interface that does not exist.
    UnknownVrfMember { vrf: String, member: String },
}

impl fmt::Display for NetworkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetworkError::NoDevices => write!(f, "the network has no device"),
            NetworkError::ConflictingRoutes { device, route } => write!(
                f,
                "{device}: a route to {route} with the same metric already exists in its routing table"
            ),
            NetworkError::MalformedRule { device, reason } => {
                write!(f, "{device}: routing policy rule {reason}")
            }
            NetworkError::UnknownVrfMember { vrf, member } => {
                write!(f, "VRF {vrf}: no interface {member}")
            }
        }
    }
}

impl std::error::Error for NetworkError {}

/// The kernel's main routing table, where routes without a table go.
const MAIN_TABLE: u32 = 254;

impl NetworkConfig {
    /// Checks what holds for every renderer: at least one device; routes unique by
    /// (effective table, destination, metric), where a VRF member's routes go to its
    /// VRF's table (as systemd-networkd and the kernel place them); rules that match
    /// something, in one address family, with a table unless on a VRF; VRF members
    /// that exist. (No default route is required: an isolated network is legitimate.)
    pub fn validate(&self) -> Result<(), NetworkError> {
        if self.ethernets.is_empty() && self.vrfs.is_empty() {
            return Err(NetworkError::NoDevices);
        }
        let mut seen = BTreeSet::new();
        for vrf in &self.vrfs {
            for member in &vrf.interfaces {
                if !self.ethernets.iter().any(|e| &e.name == member) {
                    return Err(NetworkError::UnknownVrfMember {
                        vrf: vrf.name.clone(),
                        member: member.clone(),
                    });
                }
            }
        }
        let vrf_of = |eth: &str| {
            self.vrfs
                .iter()
                .find(|v| v.interfaces.iter().any(|i| i == eth))
                .map(|v| v.table)
        };
        let devices = self
            .ethernets
            .iter()
            .map(|e| (&e.name, &e.routes, &e.rules, vrf_of(&e.name), false))
            .chain(
                self.vrfs
                    .iter()
                    .map(|v| (&v.name, &v.routes, &v.rules, Some(v.table), true)),
            );
        for (device, routes, rules, table, is_vrf) in devices {
            for r in routes {
                let key = (
                    r.table.or(table).unwrap_or(MAIN_TABLE),
                    r.to,
                    r.metric.unwrap_or(0),
                );
                if !seen.insert(key) {
                    return Err(NetworkError::ConflictingRoutes {
                        device: device.clone(),
                        route: r.to.to_string(),
                    });
                }
            }
            for rule in rules {
                let malformed = |reason: &str| NetworkError::MalformedRule {
                    device: device.clone(),
                    reason: reason.into(),
                };
                if rule.to.is_none() && rule.from.is_none() {
                    return Err(malformed("needs `to` or `from`"));
                }
                if rule.table.unwrap_or(0) == 0 && !is_vrf {
                    return Err(malformed("needs a table"));
                }
                if let (Some(to), Some(from)) = (rule.to, rule.from)
                    && to.is_v6() != from.is_v6()
                {
                    return Err(malformed("mixes IPv4 and IPv6"));
                }
            }
        }
        Ok(())
    }
}

/// A YAML single-quoted scalar (`'` doubled): how addresses and nameservers are written.
pub(crate) fn single_quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// `s` as a plain YAML scalar when it needs no quoting (names, MACs), else double-quoted.
pub(crate) fn plain_or_quoted(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
        && !s.ends_with(':');
    if plain {
        s.to_string()
    } else {
        crate::quote(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Prefix {
        Prefix::parse(s).unwrap()
    }

    fn eth(name: &str) -> Ethernet {
        Ethernet {
            name: name.into(),
            mac: "BC:24:11:00:00:01".into(),
            ..Ethernet::default()
        }
    }

    fn route(to: &str, metric: Option<u32>, table: Option<u32>) -> Route {
        Route {
            to: p(to),
            via: None,
            metric,
            table,
        }
    }

    #[test]
    fn prefixes_keep_their_host_bits_and_bare_addresses_are_host_routes() {
        assert_eq!(p("10.0.0.5/24").to_string(), "10.0.0.5/24");
        assert_eq!(p("10.0.0.5").to_string(), "10.0.0.5/32");
        assert_eq!(p("2001:db8::5").to_string(), "2001:db8::5/128");
        assert!(p("::/0").is_default_route() && p("::/0").is_v6());
        assert_eq!(Prefix::default_route(false).to_string(), "0.0.0.0/0");
        for bad in ["10.0.0.5/33", "fd00::/129", "default", "10.0.0/8", ""] {
            assert!(Prefix::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_network_needs_a_device() {
        assert_eq!(
            NetworkConfig::default().validate(),
            Err(NetworkError::NoDevices)
        );
    }

    #[test]
    fn routes_collide_only_in_the_same_table_with_the_same_metric() {
        let mut e = eth("eth0");
        e.routes = vec![
            route("0.0.0.0/0", Some(100), None),
            route("0.0.0.0/0", Some(200), None),
            route("0.0.0.0/0", Some(100), Some(500)),
        ];
        let mut net = NetworkConfig {
            ethernets: vec![e],
            vrfs: vec![],
        };
        assert_eq!(net.validate(), Ok(()));
        net.ethernets[0]
            .routes
            .push(route("0.0.0.0/0", Some(100), Some(254)));
        assert!(matches!(
            net.validate(),
            Err(NetworkError::ConflictingRoutes { .. })
        ));
    }

    #[test]
    fn a_vrf_members_routes_live_in_the_vrfs_table() {
        let mut e = eth("eth1");
        e.routes = vec![route("10.0.0.0/8", None, None)];
        let vrf = Vrf {
            name: "vrf-ext".into(),
            table: 500,
            interfaces: vec!["eth1".into()],
            routes: vec![route("10.0.0.0/8", None, None)],
            rules: vec![],
        };
        let net = NetworkConfig {
            ethernets: vec![e],
            vrfs: vec![vrf],
        };
        assert!(matches!(
            net.validate(),
            Err(NetworkError::ConflictingRoutes { .. })
        ));
    }

    #[test]
    fn rules_need_a_match_one_family_and_a_table_outside_a_vrf() {
        let check = |rule: Rule, on_vrf: bool| {
            let mut net = NetworkConfig {
                ethernets: vec![eth("eth0")],
                vrfs: vec![],
            };
            if on_vrf {
                net.vrfs.push(Vrf {
                    name: "vrf0".into(),
                    table: 500,
                    rules: vec![rule],
                    ..Vrf::default()
                });
            } else {
                net.ethernets[0].rules.push(rule);
            }
            net.validate()
        };
        let from = |s: &str| Rule {
            from: Some(p(s)),
            ..Rule::default()
        };
        assert!(check(Rule::default(), true).is_err());
        assert!(check(from("10.0.0.0/8"), false).is_err(), "no table");
        assert_eq!(check(from("10.0.0.0/8"), true), Ok(()));
        let mixed = Rule {
            to: Some(p("fd00::/64")),
            from: Some(p("10.0.0.0/8")),
            table: Some(500),
            ..Rule::default()
        };
        assert!(check(mixed, false).is_err());
    }

    #[test]
    fn a_vrf_member_must_exist() {
        let net = NetworkConfig {
            ethernets: vec![eth("eth0")],
            vrfs: vec![Vrf {
                name: "vrf0".into(),
                table: 500,
                interfaces: vec!["eth3".into()],
                ..Vrf::default()
            }],
        };
        assert_eq!(
            net.validate(),
            Err(NetworkError::UnknownVrfMember {
                vrf: "vrf0".into(),
                member: "eth3".into()
            })
        );
    }

    #[test]
    fn yaml_scalars_are_plain_when_safe_and_quoted_otherwise() {
        assert_eq!(plain_or_quoted("eth0"), "eth0");
        assert_eq!(plain_or_quoted("BC:24:11:00:00:01"), "BC:24:11:00:00:01");
        assert_eq!(plain_or_quoted("vrf: x"), "\"vrf: x\"");
        assert_eq!(plain_or_quoted("-x"), "\"-x\"");
        assert_eq!(single_quoted("8.8.8.8"), "'8.8.8.8'");
        assert_eq!(single_quoted("it's"), "'it''s'");
    }
}
