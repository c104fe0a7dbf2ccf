//! The same network as systemd-networkd units, for guests configured by Ignition
//! (Flatcar), which reads no `network-config`: one `.netdev` per VRF, then one
//! `.network` per ethernet and per VRF, named by their position
//! (`00-vrf0.netdev`, `00-eth0.network`, ..., `03-vrf3.network`).
use crate::network::{NetworkConfig, NetworkError, Route, Rule};

impl NetworkConfig {
    /// `(file name, contents)` of every unit, sorted by name; validated first.
    pub fn networkd_units(&self) -> Result<Vec<(String, String)>, NetworkError> {
        self.validate()?;
        let mut units = vec![];
        for (n, v) in self.vrfs.iter().enumerate() {
            units.push((
                format!("{n:02}-vrf{n}.netdev"),
                format!(
                    "[NetDev]\nName={}\nKind=vrf\n[VRF]\nTable={}\n",
                    v.name, v.table
                ),
            ));
        }
        for (i, e) in self.ethernets.iter().enumerate() {
            let mut lines = vec!["[Match]".to_string(), format!("MACAddress={}", e.mac)];
            if let Some(mtu) = e.mtu {
                lines.push("[Link]".into());
                lines.push(format!("MTUBytes={mtu}"));
            }
            lines.push("[Network]".into());
            if let Some(vrf) = self
                .vrfs
                .iter()
                .find(|v| v.interfaces.iter().any(|m| m == &e.name))
            {
                lines.push(format!("VRF={}", vrf.name));
            }
            match (e.dhcp4, e.dhcp6) {
                (true, true) => lines.push("DHCP=yes".into()),
                (true, false) => lines.push("DHCP=ipv4".into()),
                (false, true) => lines.push("DHCP=ipv6".into()),
                (false, false) => {}
            }
            lines.extend(e.dns_servers.iter().map(|d| format!("DNS={d}")));
            for a in &e.addresses {
                lines.push("[Address]".into());
                lines.push(format!("Address={a}"));
            }
            routes(&mut lines, &e.routes, None);
            rules(&mut lines, &e.rules, None);
            units.push((format!("{i:02}-eth{i}.network"), lines.join("\n") + "\n"));
        }
        let offset = self.ethernets.len();
        for (k, v) in self.vrfs.iter().enumerate() {
            let i = offset + k;
            let mut lines = vec!["[Match]".to_string(), format!("Name={}", v.name)];
            // A VRF's own routes go to its table.
            routes(&mut lines, &v.routes, Some(v.table));
            rules(&mut lines, &v.rules, Some(v.table));
            units.push((format!("{i:02}-vrf{i}.network"), lines.join("\n") + "\n"));
        }
        units.sort();
        Ok(units)
    }
}

fn routes(lines: &mut Vec<String>, routes: &[Route], vrf_table: Option<u32>) {
    for r in routes {
        lines.push("[Route]".into());
        lines.push(format!("Destination={}", r.to));
        if let Some(via) = r.via {
            lines.push(format!("Gateway={via}"));
        }
        if let Some(m) = r.metric {
            lines.push(format!("Metric={m}"));
        }
        if let Some(t) = vrf_table.or(r.table) {
            lines.push(format!("Table={t}"));
        }
    }
}

fn rules(lines: &mut Vec<String>, rules: &[Rule], vrf_table: Option<u32>) {
    for r in rules {
        lines.push("[RoutingPolicyRule]".into());
        if let Some(to) = r.to {
            lines.push(format!("To={to}"));
        }
        if let Some(from) = r.from {
            lines.push(format!("From={from}"));
        }
        if let Some(p) = r.priority {
            lines.push(format!("Priority={p}"));
        }
        if let Some(t) = r.table.or(vrf_table) {
            lines.push(format!("Table={t}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::network::{Ethernet, Prefix, Vrf};

    use super::*;

    fn p(s: &str) -> Prefix {
        Prefix::parse(s).unwrap()
    }

    fn net() -> NetworkConfig {
        NetworkConfig {
            ethernets: vec![
                Ethernet {
                    name: "eth0".into(),
                    mac: "BC:24:11:00:00:01".into(),
                    addresses: vec![p("10.0.0.5/24")],
                    routes: vec![Route {
                        to: p("0.0.0.0/0"),
                        via: Some("10.0.0.1".parse().unwrap()),
                        metric: Some(100),
                        table: None,
                    }],
                    dns_servers: vec!["8.8.8.8".into()],
                    mtu: Some(9000),
                    ..Ethernet::default()
                },
                Ethernet {
                    name: "eth1".into(),
                    mac: "BC:24:11:00:00:02".into(),
                    dhcp4: true,
                    dhcp6: true,
                    ..Ethernet::default()
                },
            ],
            vrfs: vec![Vrf {
                name: "vrf-ext".into(),
                table: 500,
                interfaces: vec!["eth1".into()],
                routes: vec![Route {
                    to: p("0.0.0.0/0"),
                    via: Some("172.16.4.1".parse().unwrap()),
                    metric: None,
                    table: None,
                }],
                rules: vec![Rule {
                    from: Some(p("7.6.5.0/24")),
                    ..Rule::default()
                }],
            }],
        }
    }

    fn unit<'a>(units: &'a [(String, String)], name: &str) -> &'a str {
        &units
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("{name} in {units:?}"))
            .1
    }

    #[test]
    fn units_are_named_by_position_vrf_netdevs_first() {
        let units = net().networkd_units().unwrap();
        let names: Vec<&str> = units.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "00-eth0.network",
                "00-vrf0.netdev",
                "01-eth1.network",
                "02-vrf2.network"
            ]
        );
    }

    #[test]
    fn an_ethernet_unit_matches_by_mac_and_carries_its_addresses_routes_and_dns() {
        let units = net().networkd_units().unwrap();
        assert_eq!(
            unit(&units, "00-eth0.network"),
            "[Match]\nMACAddress=BC:24:11:00:00:01\n[Link]\nMTUBytes=9000\n[Network]\nDNS=8.8.8.8\n[Address]\nAddress=10.0.0.5/24\n[Route]\nDestination=0.0.0.0/0\nGateway=10.0.0.1\nMetric=100\n"
        );
        assert_eq!(
            unit(&units, "01-eth1.network"),
            "[Match]\nMACAddress=BC:24:11:00:00:02\n[Network]\nVRF=vrf-ext\nDHCP=yes\n"
        );
    }

    #[test]
    fn a_vrf_is_a_netdev_and_its_routes_and_rules_go_to_its_table() {
        let units = net().networkd_units().unwrap();
        assert_eq!(
            unit(&units, "00-vrf0.netdev"),
            "[NetDev]\nName=vrf-ext\nKind=vrf\n[VRF]\nTable=500\n"
        );
        assert_eq!(
            unit(&units, "02-vrf2.network"),
            "[Match]\nName=vrf-ext\n[Route]\nDestination=0.0.0.0/0\nGateway=172.16.4.1\nTable=500\n[RoutingPolicyRule]\nFrom=7.6.5.0/24\nTable=500\n"
        );
    }
}
