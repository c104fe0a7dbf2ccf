//! Cloud-init endpoints: `GET/PUT .../cloudinit` and `GET .../cloudinit/dump`.
//!
//! The dump renders what PVE's NoCloud generator would put on the cloud-init drive
//! (network-config v1, user-data, meta-data) from the VM config; close to, not
//! byte-identical with, PVE's output.

use serde_json::{Value, json};
use sha1::{Digest, Sha1};

use super::{Call, vm_on};
use crate::envelope::ApiResult;
use crate::params::{parse_ipconfig, split_indexed};
use crate::state::Vm;

fn is_ci_key(k: &str) -> bool {
    matches!(
        k,
        "cicustom"
            | "cipassword"
            | "citype"
            | "ciupgrade"
            | "ciuser"
            | "nameserver"
            | "searchdomain"
            | "sshkeys"
    ) || matches!(split_indexed(k), Some(("ipconfig", _)))
}

/// `GET .../cloudinit`: the cloud-init keys (no pending changes are modelled).
pub fn get(c: &mut Call) -> ApiResult {
    let w = c.shared.lock();
    let vm = vm_on(&w, c.node(), c.vmid())?;
    Ok(Value::Array(
        vm.config
            .iter()
            .filter(|(k, _)| is_ci_key(k))
            .map(|(k, v)| json!({"key": k, "value": v}))
            .collect(),
    ))
}

/// `PUT .../cloudinit`: regenerate the drive (nothing to do here).
pub fn regenerate(c: &mut Call) -> ApiResult {
    let w = c.shared.lock();
    vm_on(&w, c.node(), c.vmid())?;
    Ok(Value::Null)
}

fn netmask(prefix: u8) -> String {
    let m: u32 = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix.min(32))
    };
    std::net::Ipv4Addr::from(m).to_string()
}

fn network(vm: &Vm) -> String {
    let mut s = String::from("version: 1\nconfig:\n");
    let mut nets: Vec<(u32, &String)> = vm
        .config
        .iter()
        .filter_map(|(k, v)| match split_indexed(k) {
            Some(("net", i)) => Some((i, v)),
            _ => None,
        })
        .collect();
    nets.sort_by_key(|(i, _)| *i);
    for (i, net) in nets {
        let mac = net
            .split(',')
            .next()
            .and_then(|p| p.split_once('='))
            .map(|(_, m)| m.to_lowercase())
            .unwrap_or_default();
        s.push_str(&format!(
            "    - type: physical\n      name: eth{i}\n      mac_address: '{mac}'\n      subnets:\n"
        ));
        let ip = vm
            .config
            .get(&format!("ipconfig{i}"))
            .and_then(|v| parse_ipconfig(v).ok())
            .unwrap_or_default();
        match ip.ip.as_deref() {
            Some(cidr) if cidr != "dhcp" => {
                let (a, p) = cidr.split_once('/').unwrap_or((cidr, "24"));
                s.push_str(&format!(
                    "      - type: static\n        address: '{a}'\n        netmask: '{}'\n",
                    netmask(p.parse().unwrap_or(24))
                ));
                if let Some(gw) = ip.gw {
                    s.push_str(&format!("        gateway: '{gw}'\n"));
                }
            }
            _ => s.push_str("      - type: dhcp4\n"),
        }
        if let Some(ip6) = ip.ip6.as_deref() {
            match ip6 {
                "dhcp" => s.push_str("      - type: dhcp6\n"),
                "auto" => s.push_str("      - type: ipv6_slaac\n"),
                cidr => {
                    s.push_str(&format!(
                        "      - type: static6\n        address: '{cidr}'\n"
                    ));
                    if let Some(gw) = ip.gw6 {
                        s.push_str(&format!("        gateway: '{gw}'\n"));
                    }
                }
            }
        }
    }
    if let Some(ns) = vm.config.get("nameserver") {
        s.push_str("    - type: nameserver\n      address:\n");
        for a in ns.split([' ', ',', ';']).filter(|a| !a.is_empty()) {
            s.push_str(&format!("      - '{a}'\n"));
        }
    }
    s
}

fn percent_decode(s: &str) -> String {
    crate::params::decode_urlencoded(&format!(
        "x={}",
        s.replace('&', "%26")
            .replace(';', "%3B")
            .replace('=', "%3D")
    ))
    .remove("x")
    .unwrap_or_default()
}

fn user(vm: &Vm) -> String {
    let name = vm.name();
    let mut s = format!("#cloud-config\nhostname: {name}\nmanage_etc_hosts: true\nfqdn: {name}\n");
    if let Some(u) = vm.config.get("ciuser") {
        s.push_str(&format!("user: {u}\n"));
    }
    if vm.config.contains_key("cipassword") {
        s.push_str("password: **********\n");
    }
    if let Some(keys) = vm.config.get("sshkeys") {
        s.push_str("ssh_authorized_keys:\n");
        for k in percent_decode(keys)
            .lines()
            .filter(|l| !l.trim().is_empty())
        {
            s.push_str(&format!("  - {k}\n"));
        }
    }
    s.push_str("chpasswd:\n  expire: False\nusers:\n  - default\n");
    let upgrade = vm.config.get("ciupgrade").is_none_or(|v| v == "1");
    s.push_str(&format!("package_upgrade: {upgrade}\n"));
    s
}

/// `GET .../cloudinit/dump?type=user|network|meta`.
pub fn dump(c: &mut Call) -> ApiResult {
    let w = c.shared.lock();
    let vm = vm_on(&w, c.node(), c.vmid())?;
    let text = match c.p("type").unwrap_or("user") {
        "network" => network(vm),
        "meta" => {
            let h = Sha1::digest(format!("{}{}", user(vm), network(vm)).as_bytes());
            let id: String = h.iter().map(|b| format!("{b:02x}")).collect();
            format!("instance-id: {id}\n")
        }
        _ => user(vm),
    };
    Ok(json!(text))
}
