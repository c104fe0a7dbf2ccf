//! What a booted guest looks like from the inside: interface names, addresses, hostname.
//!
//! Per `netN`, in order of precedence:
//! 1. `ipconfigN` when the VM has a cloud-init drive (`...:vm-N-cloudinit`): a static
//!    `ip=`/`ip6=` address, or a DHCP lease for `ip=dhcp`;
//! 2. the `network-config` of an attached NoCloud ISO (a CD-ROM holding an uploaded
//!    `cidata` image), matched by MAC, else by position;
//! 3. a DHCP lease from the configured range.
//!
//! Every interface also gets its IPv6 link-local address (EUI-64 from the MAC), and the
//! guest has `lo`. Interfaces are named `ens18`, `ens19`, ... unless the network config
//! names them.

use crate::nocloud::NoCloud;
use crate::params::{parse_ipconfig, split_indexed};
use crate::state::{GuestIface, Vm, World, drive_options, is_drive_key};

fn link_local(mac: &str) -> Option<String> {
    let b: Vec<u8> = mac
        .split(':')
        .map(|x| u8::from_str_radix(x, 16))
        .collect::<Result<_, _>>()
        .ok()?;
    if b.len() != 6 {
        return None;
    }
    Some(format!(
        "fe80::{:x}:{:x}:{:x}:{:x}",
        u16::from_be_bytes([b[0] ^ 2, b[1]]),
        u16::from_be_bytes([b[2], 0xff]),
        u16::from_be_bytes([0xfe, b[3]]),
        u16::from_be_bytes([b[4], b[5]])
    ))
}

/// The NoCloud data of the first CD-ROM holding an uploaded `cidata` ISO.
pub fn attached_nocloud(w: &World, vm: &Vm) -> Option<NoCloud> {
    vm.config
        .iter()
        .filter(|(k, _)| is_drive_key(k))
        .find_map(|(_, v)| {
            let o = drive_options(v);
            let (sid, name) = o.get("file")?.split_once(':')?;
            w.storage(&vm.node, sid)?.volumes.get(name)?.nocloud.clone()
        })
}

fn has_cloudinit_drive(vm: &Vm) -> bool {
    vm.config.iter().any(|(k, v)| {
        is_drive_key(k) && v.split(',').next().is_some_and(|f| f.contains("cloudinit"))
    })
}

/// Computes interfaces and hostname for a VM that boots now.
pub fn guest_view(w: &mut World, vm: &Vm) -> (Vec<GuestIface>, String) {
    let nocloud = attached_nocloud(w, vm);
    let cloudinit = has_cloudinit_drive(vm);
    let mut nets: Vec<(u32, String)> = vm
        .config
        .iter()
        .filter_map(|(k, v)| match split_indexed(k) {
            Some(("net", i)) => Some((i, v.clone())),
            _ => None,
        })
        .collect();
    nets.sort_by_key(|(i, _)| *i);
    let mut ifaces = vec![GuestIface {
        name: "lo".into(),
        mac: "00:00:00:00:00:00".into(),
        ipv4: vec![("127.0.0.1".into(), 8)],
        ipv6: vec![("::1".into(), 128)],
    }];
    for (pos, (i, net)) in nets.iter().enumerate() {
        let mac = net
            .split(',')
            .next()
            .and_then(|p| p.split_once('='))
            .map(|(_, m)| m.to_uppercase())
            .unwrap_or_default();
        let mut ifc = GuestIface {
            name: format!("ens{}", 18 + i),
            mac: mac.to_lowercase(),
            ipv4: vec![],
            ipv6: vec![],
        };
        let ipcfg = vm
            .config
            .get(&format!("ipconfig{i}"))
            .filter(|_| cloudinit)
            .and_then(|v| parse_ipconfig(v).ok());
        let nc_if = nocloud.as_ref().and_then(|nc| {
            nc.interfaces
                .iter()
                .find(|n| n.mac.as_deref() == Some(mac.as_str()))
                .or_else(|| nc.interfaces.iter().filter(|n| n.mac.is_none()).nth(pos))
        });
        let mut dhcp = true;
        if let Some(c) = ipcfg {
            dhcp = c.ip.as_deref().is_none_or(|ip| ip == "dhcp") && c.ip6.is_none();
            if let Some((a, p)) = c.ip.as_deref().and_then(|ip| ip.split_once('/')) {
                ifc.ipv4.push((a.into(), p.parse().unwrap_or(24)));
            }
            if c.ip.as_deref() == Some("dhcp") {
                dhcp = true;
            }
            if let Some((a, p)) = c.ip6.as_deref().and_then(|ip| ip.split_once('/')) {
                ifc.ipv6.push((a.into(), p.parse().unwrap_or(64)));
            }
        } else if let Some(n) = nc_if {
            if let Some(name) = &n.name {
                ifc.name = name.clone();
            }
            dhcp = n.dhcp4;
            for (a, p) in &n.addresses {
                if a.contains(':') {
                    ifc.ipv6.push((a.clone(), *p));
                } else {
                    ifc.ipv4.push((a.clone(), *p));
                }
            }
        }
        if dhcp && let Some(ip) = w.lease(&mac) {
            ifc.ipv4.push((ip.to_string(), w.dhcp_prefix));
        }
        if let Some(ll) = link_local(&mac) {
            ifc.ipv6.push((ll, 64));
        }
        ifaces.push(ifc);
    }
    let hostname = nocloud
        .and_then(|n| n.hostname)
        .unwrap_or_else(|| vm.name());
    (ifaces, hostname)
}

/// A process started through the guest agent (`agent/exec`).
#[derive(Debug, Clone)]
pub struct Process {
    /// When it exits.
    pub exits_at: std::time::Instant,
    pub exitcode: i64,
    pub out: String,
    pub err: String,
}

/// What a guest answers to a command run through its agent, as of `now`; `Err` when
/// nothing can be started (qemu-ga's "Failed to execute child process").
///
/// Simulated: `cloud-init status` (`--wait`, `--long`, `--format json`; `running` until
/// the guest's cloud-init is done, then `done`), `hostname`, `cat /etc/hostname`, `true`,
/// `false`.
pub fn run_command(
    argv: &[String],
    hostname: &str,
    now: std::time::Instant,
    cloud_init_done: std::time::Instant,
) -> Result<Process, String> {
    let ok = |out: String| Process {
        exits_at: now,
        exitcode: 0,
        out,
        err: String::new(),
    };
    let program = argv.first().map(String::as_str).unwrap_or_default();
    let args: Vec<&str> = argv.iter().skip(1).map(String::as_str).collect();
    match (
        program.rsplit('/').next().unwrap_or(program),
        args.as_slice(),
    ) {
        ("cloud-init", ["status", opts @ ..]) => {
            let wait = opts.contains(&"--wait") || opts.contains(&"-w");
            let at = if wait { now.max(cloud_init_done) } else { now };
            let status = if at >= cloud_init_done {
                "done"
            } else {
                "running"
            };
            let json = opts.windows(2).any(|w| w == ["--format", "json"])
                || opts.contains(&"--format=json");
            let out = if json {
                serde_json::json!({
                    "status": status, "extended_status": status,
                    "boot_status_code": "enabled-by-generator",
                    "detail": "DataSourceNoCloud [seed=/dev/sr0]",
                    "errors": [], "recoverable_errors": {},
                })
                .to_string()
                    + "\n"
            } else if opts.contains(&"--long") || opts.contains(&"-l") {
                format!(
                    "status: {status}\nextended_status: {status}\nboot_status_code: enabled-by-generator\ndetail: DataSourceNoCloud [seed=/dev/sr0]\nerrors: []\nrecoverable_errors: {{}}\n"
                )
            } else {
                format!("status: {status}\n")
            };
            Ok(Process {
                exits_at: at,
                ..ok(out)
            })
        }
        ("hostname", []) | ("cat", ["/etc/hostname"]) => Ok(ok(format!("{hostname}\n"))),
        ("true", _) => Ok(ok(String::new())),
        ("false", _) => Ok(Process {
            exitcode: 1,
            ..ok(String::new())
        }),
        _ => Err(format!(
            "Failed to execute child process \u{201c}{program}\u{201d} (No such file or directory)"
        )),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cloud_init_status_is_running_until_done_and_waits_with_wait() {
        let now = std::time::Instant::now();
        let later = now + std::time::Duration::from_secs(5);
        let argv = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let p = super::run_command(&argv(&["cloud-init", "status"]), "h", now, later).unwrap();
        assert_eq!(
            (p.out.as_str(), p.exitcode, p.exits_at),
            ("status: running\n", 0, now)
        );
        let p = super::run_command(&argv(&["cloud-init", "status", "--wait"]), "h", now, later)
            .unwrap();
        assert_eq!((p.out.as_str(), p.exits_at), ("status: done\n", later));
        assert!(super::run_command(&argv(&["nope"]), "h", now, later).is_err());
    }

    #[test]
    fn link_local_is_eui64() {
        assert_eq!(
            super::link_local("BC:24:11:11:75:0E").as_deref(),
            Some("fe80::be24:11ff:fe11:750e")
        );
    }
}
