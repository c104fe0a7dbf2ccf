//! cloud-init's `network-config`, netplan version 2 under a top-level `network:` key,
//! rendered by systemd-networkd: one `ethN` per ethernet matched by MAC (no
//! `set-name`), `dhcp4`/`dhcp6` always written, then addresses, routes, routing
//! policy, nameservers and MTU; VRFs under `vrfs:`. Routes and rules are one flow
//! mapping per line, the layout the Proxmox provider's existing users already have on
//! their machines, so a machine moved over sees the same file.
use crate::network::{NetworkConfig, NetworkError, Route, Rule, plain_or_quoted, single_quoted};

impl NetworkConfig {
    /// The `network-config` document; the network is validated first.
    pub fn render(&self) -> Result<String, NetworkError> {
        self.validate()?;
        let mut out = String::from("network:\n  version: 2\n  renderer: networkd\n  ethernets:\n");
        for e in &self.ethernets {
            out.push_str(&format!("    {}:\n", plain_or_quoted(&e.name)));
            out.push_str(&format!(
                "      match:\n        macaddress: {}\n",
                plain_or_quoted(&e.mac)
            ));
            out.push_str(&format!(
                "      dhcp4: {}\n      dhcp6: {}\n",
                e.dhcp4, e.dhcp6
            ));
            if !e.addresses.is_empty() {
                out.push_str("      addresses:\n");
                for a in &e.addresses {
                    out.push_str(&format!("        - {}\n", single_quoted(&a.to_string())));
                }
            }
            routes(&mut out, &e.routes);
            rules(&mut out, &e.rules);
            if !e.dns_servers.is_empty() {
                out.push_str("      nameservers:\n        addresses:\n");
                for d in &e.dns_servers {
                    out.push_str(&format!("          - {}\n", single_quoted(d)));
                }
            }
            if let Some(mtu) = e.mtu {
                out.push_str(&format!("      mtu: {mtu}\n"));
            }
        }
        if !self.vrfs.is_empty() {
            out.push_str("  vrfs:\n");
            for v in &self.vrfs {
                out.push_str(&format!(
                    "    {}:\n      table: {}\n",
                    plain_or_quoted(&v.name),
                    v.table
                ));
                routes(&mut out, &v.routes);
                rules(&mut out, &v.rules);
                if !v.interfaces.is_empty() {
                    out.push_str("      interfaces:\n");
                    for i in &v.interfaces {
                        out.push_str(&format!("        - {}\n", single_quoted(i)));
                    }
                }
            }
        }
        Ok(out)
    }
}

/// `{ "k": v,  "k2": v2, }`: each present item as ` "k": v, `.
fn flow(items: &[(&str, String)]) -> String {
    let body: String = items
        .iter()
        .map(|(k, v)| format!(" \"{k}\": {v}, "))
        .collect();
    format!("{{{body}}}")
}

fn routes(out: &mut String, routes: &[Route]) {
    if routes.is_empty() {
        return;
    }
    out.push_str("      routes:\n");
    for r in routes {
        let mut items = vec![("to", format!("\"{}\"", r.to))];
        if let Some(via) = r.via {
            items.push(("via", format!("\"{via}\"")));
        }
        if let Some(m) = r.metric {
            items.push(("metric", m.to_string()));
        }
        if let Some(t) = r.table {
            items.push(("table", t.to_string()));
        }
        out.push_str(&format!("        - {}\n", flow(&items)));
    }
}

fn rules(out: &mut String, rules: &[Rule]) {
    if rules.is_empty() {
        return;
    }
    out.push_str("      routing-policy:\n");
    for r in rules {
        let mut items = vec![];
        if let Some(to) = r.to {
            items.push(("to", format!("\"{to}\"")));
        }
        if let Some(from) = r.from {
            items.push(("from", format!("\"{from}\"")));
        }
        if let Some(p) = r.priority {
            items.push(("priority", p.to_string()));
        }
        if let Some(t) = r.table {
            items.push(("table", t.to_string()));
        }
        out.push_str(&format!("        - {}\n", flow(&items)));
    }
}

#[cfg(test)]
mod tests {
    use crate::network::{Ethernet, Prefix, Vrf};

    use super::*;

    fn p(s: &str) -> Prefix {
        Prefix::parse(s).unwrap()
    }

    fn via(to: &str, via: &str, metric: Option<u32>, table: Option<u32>) -> Route {
        Route {
            to: p(to),
            via: Some(via.parse().unwrap()),
            metric,
            table,
        }
    }

    /// Three NICs and a VRF: a dual-stack default NIC, a second NIC with its own
    /// gateway, a route into table 500 and a rule, and a VRF member.
    fn sample() -> NetworkConfig {
        NetworkConfig {
            ethernets: vec![
                Ethernet {
                    name: "eth0".into(),
                    mac: "BC:24:11:00:00:01".into(),
                    addresses: vec![p("10.0.0.5/24"), p("2001:db8::5/64")],
                    routes: vec![
                        via("0.0.0.0/0", "10.0.0.1", Some(100), None),
                        via("::/0", "2001:db8::1", Some(100), None),
                    ],
                    dns_servers: vec!["8.8.8.8".into(), "8.8.4.4".into()],
                    ..Ethernet::default()
                },
                Ethernet {
                    name: "eth1".into(),
                    mac: "BC:24:11:00:00:02".into(),
                    addresses: vec![p("10.10.10.100/24")],
                    routes: vec![
                        via("0.0.0.0/0", "10.10.10.254", Some(200), None),
                        via("172.16.0.0/16", "10.10.10.253", None, Some(500)),
                    ],
                    rules: vec![Rule {
                        to: Some(p("172.16.0.0/16")),
                        priority: Some(100),
                        table: Some(500),
                        ..Rule::default()
                    }],
                    dns_servers: vec!["9.9.9.9".into()],
                    mtu: Some(9000),
                    ..Ethernet::default()
                },
                Ethernet {
                    name: "eth2".into(),
                    mac: "BC:24:11:00:00:03".into(),
                    addresses: vec![p("172.16.4.10/24")],
                    ..Ethernet::default()
                },
            ],
            vrfs: vec![Vrf {
                name: "vrf-ext".into(),
                table: 500,
                interfaces: vec!["eth2".into()],
                routes: vec![via("0.0.0.0/0", "172.16.4.1", None, None)],
                rules: vec![Rule {
                    from: Some(p("7.6.5.0/24")),
                    ..Rule::default()
                }],
            }],
        }
    }

    /// What the Proxmox provider's existing users' machines get for the same network
    /// (its renderer, run on `sample()`'s data), byte for byte but the final newline.
    const EXPECTED: &str = r#"network:
  version: 2
  renderer: networkd
  ethernets:
    eth0:
      match:
        macaddress: BC:24:11:00:00:01
      dhcp4: false
      dhcp6: false
      addresses:
        - '10.0.0.5/24'
        - '2001:db8::5/64'
      routes:
        - { "to": "0.0.0.0/0",  "via": "10.0.0.1",  "metric": 100, }
        - { "to": "::/0",  "via": "2001:db8::1",  "metric": 100, }
      nameservers:
        addresses:
          - '8.8.8.8'
          - '8.8.4.4'
    eth1:
      match:
        macaddress: BC:24:11:00:00:02
      dhcp4: false
      dhcp6: false
      addresses:
        - '10.10.10.100/24'
      routes:
        - { "to": "0.0.0.0/0",  "via": "10.10.10.254",  "metric": 200, }
        - { "to": "172.16.0.0/16",  "via": "10.10.10.253",  "table": 500, }
      routing-policy:
        - { "to": "172.16.0.0/16",  "priority": 100,  "table": 500, }
      nameservers:
        addresses:
          - '9.9.9.9'
      mtu: 9000
    eth2:
      match:
        macaddress: BC:24:11:00:00:03
      dhcp4: false
      dhcp6: false
      addresses:
        - '172.16.4.10/24'
  vrfs:
    vrf-ext:
      table: 500
      routes:
        - { "to": "0.0.0.0/0",  "via": "172.16.4.1", }
      routing-policy:
        - { "from": "7.6.5.0/24", }
      interfaces:
        - 'eth2'
"#;

    #[test]
    fn the_network_config_is_the_layout_existing_machines_have_byte_for_byte() {
        assert_eq!(sample().render().unwrap(), EXPECTED);
    }

    #[test]
    fn the_document_parses_as_yaml_with_the_values_in_place() {
        let text = sample().render().unwrap();
        let doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        let net = &doc["network"];
        assert_eq!(net["version"], 2);
        let eth1 = &net["ethernets"]["eth1"];
        assert_eq!(eth1["match"]["macaddress"], "BC:24:11:00:00:02");
        assert_eq!(eth1["routes"][1]["table"], 500);
        assert_eq!(eth1["routes"][1]["via"], "10.10.10.253");
        assert_eq!(eth1["routing-policy"][0]["priority"], 100);
        assert_eq!(eth1["nameservers"]["addresses"][0], "9.9.9.9");
        assert_eq!(eth1["mtu"], 9000);
        assert_eq!(net["vrfs"]["vrf-ext"]["interfaces"][0], "eth2");
        assert_eq!(net["ethernets"]["eth0"]["dhcp4"], false);
    }

    #[test]
    fn a_dhcp_nic_says_so_and_lists_nothing_else() {
        let net = NetworkConfig {
            ethernets: vec![Ethernet {
                name: "eth0".into(),
                mac: "BC:24:11:00:00:09".into(),
                dhcp4: true,
                ..Ethernet::default()
            }],
            vrfs: vec![],
        };
        assert_eq!(
            net.render().unwrap(),
            "network:\n  version: 2\n  renderer: networkd\n  ethernets:\n    eth0:\n      match:\n        macaddress: BC:24:11:00:00:09\n      dhcp4: true\n      dhcp6: false\n"
        );
    }

    #[test]
    fn an_invalid_network_is_not_rendered() {
        let mut net = sample();
        net.ethernets[1]
            .routes
            .push(via("0.0.0.0/0", "10.10.10.1", Some(200), None));
        assert!(net.render().is_err());
    }
}
