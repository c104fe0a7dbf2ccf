//! Addresses the kit hands out when a plugin asks for them (`address-requests`), as the
//! host does through Cluster API IPAM in production. Pools come from the cluster
//! reconcile's `ip-pools` or from an `--addresses` file; each address goes out once.
use std::collections::BTreeMap;
use std::net::IpAddr;

use hyperplug_runtime::bindings::cluster::IpPool;
use hyperplug_runtime::bindings::machine::AllocatedAddress;
use serde::Deserialize;

/// One pool as the `--addresses` file gives it (the shape of the WIT's `ip-pool`).
#[derive(Debug, Clone, Deserialize)]
pub struct PoolFile {
    pub name: String,
    /// Ranges (`a-b`), CIDRs (`10.0.0.0/28`) or single addresses.
    pub addresses: Vec<String>,
    pub prefix: u8,
    #[serde(default)]
    pub gateway: Option<String>,
}

impl From<&IpPool> for PoolFile {
    fn from(p: &IpPool) -> Self {
        PoolFile {
            name: p.name.clone(),
            addresses: p.addresses.clone(),
            prefix: p.prefix,
            gateway: p.gateway.clone(),
        }
    }
}

/// A pool with a cursor: the next address to hand out.
#[derive(Debug)]
struct Pool {
    ranges: Vec<(u128, u128, bool)>,
    prefix: u8,
    gateway: Option<String>,
    cursor: (usize, u128),
}

/// Every pool the kit knows, by name.
#[derive(Debug, Default)]
pub struct Pools {
    pools: BTreeMap<String, Pool>,
}

impl Pools {
    /// Add pools; a pool of a name already known keeps the first definition (files are
    /// added before what the plugin reports, so a file wins).
    pub fn add(&mut self, pools: &[PoolFile]) -> Result<(), String> {
        for p in pools {
            if self.pools.contains_key(&p.name) {
                continue;
            }
            let ranges = p
                .addresses
                .iter()
                .map(|a| parse_range(a).map_err(|e| format!("pool `{}`: {e}", p.name)))
                .collect::<Result<Vec<_>, _>>()?;
            self.pools.insert(
                p.name.clone(),
                Pool {
                    ranges,
                    prefix: p.prefix,
                    gateway: p.gateway.clone(),
                    cursor: (0, 0),
                },
            );
        }
        Ok(())
    }

    pub fn names(&self) -> Vec<&str> {
        self.pools.keys().map(String::as_str).collect()
    }

    /// The next free address of `pool` for `device`.
    pub fn allocate(&mut self, pool: &str, device: &str) -> Result<AllocatedAddress, String> {
        let known = self.names().join(", ");
        let p = self.pools.get_mut(pool).ok_or_else(|| {
            format!(
                "the plugin asked for an address from pool `{pool}` for device `{device}`, \
                 but no such pool is known (known: {}); pass --addresses FILE with a pool \
                 named `{pool}`, or a --cluster-spec whose reconcile reports it",
                if known.is_empty() { "none" } else { &known }
            )
        })?;
        let gateway: Option<IpAddr> = p.gateway.as_deref().and_then(|g| g.parse().ok());
        while let Some(&(start, end, v6)) = p.ranges.get(p.cursor.0) {
            let candidate = start + p.cursor.1;
            if candidate > end {
                p.cursor = (p.cursor.0 + 1, 0);
                continue;
            }
            p.cursor.1 += 1;
            let ip = to_ip(candidate, v6);
            if Some(ip) == gateway {
                continue;
            }
            return Ok(AllocatedAddress {
                device: device.to_string(),
                address: ip.to_string(),
                prefix: p.prefix,
                gateway: p.gateway.clone(),
            });
        }
        Err(format!("pool `{pool}` is exhausted"))
    }
}

fn to_number(ip: IpAddr) -> (u128, bool) {
    match ip {
        IpAddr::V4(v4) => (u128::from(u32::from(v4)), false),
        IpAddr::V6(v6) => (u128::from(v6), true),
    }
}

fn to_ip(n: u128, v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(n.into())
    } else {
        IpAddr::V4((n as u32).into())
    }
}

/// `a-b`, `net/prefix` (hosts only for IPv4) or `a`, as inclusive numbers.
fn parse_range(text: &str) -> Result<(u128, u128, bool), String> {
    let ip = |s: &str| -> Result<IpAddr, String> {
        s.trim()
            .parse()
            .map_err(|_| format!("`{s}` is not an IP address"))
    };
    if let Some((a, b)) = text.split_once('-') {
        let ((a, v6a), (b, v6b)) = (to_number(ip(a)?), to_number(ip(b)?));
        if v6a != v6b || a > b {
            return Err(format!("`{text}` is not a range from low to high"));
        }
        return Ok((a, b, v6a));
    }
    if let Some((net, bits)) = text.split_once('/') {
        let (n, v6) = to_number(ip(net)?);
        let width: u32 = if v6 { 128 } else { 32 };
        let bits: u32 = bits
            .parse()
            .ok()
            .filter(|b| *b <= width)
            .ok_or_else(|| format!("`{text}` has a bad prefix length"))?;
        let host_bits = width - bits;
        let size = if host_bits >= 128 {
            u128::MAX
        } else {
            (1u128 << host_bits) - 1
        };
        let first = n & !size;
        let last = first | size;
        // Network and broadcast addresses are no host's.
        return Ok(if !v6 && host_bits >= 2 {
            (first + 1, last - 1, v6)
        } else {
            (first, last, v6)
        });
    }
    let (n, v6) = to_number(ip(text)?);
    Ok((n, n, v6))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pools(addresses: &[&str], gateway: Option<&str>) -> Pools {
        let mut p = Pools::default();
        p.add(&[PoolFile {
            name: "ipv4".into(),
            addresses: addresses.iter().map(|s| s.to_string()).collect(),
            prefix: 24,
            gateway: gateway.map(str::to_string),
        }])
        .unwrap();
        p
    }

    #[test]
    fn ranges_cidrs_and_singles_are_walked_in_order_skipping_the_gateway() {
        let mut p = pools(
            &["10.0.0.1-10.0.0.2", "10.0.1.0/30", "10.0.2.9"],
            Some("10.0.0.2"),
        );
        let got: Vec<String> = (0..4)
            .map(|_| p.allocate("ipv4", "net0").unwrap().address)
            .collect();
        assert_eq!(got, ["10.0.0.1", "10.0.1.1", "10.0.1.2", "10.0.2.9"]);
        assert!(
            p.allocate("ipv4", "net0")
                .unwrap_err()
                .contains("exhausted")
        );
    }

    #[test]
    fn an_unknown_pool_says_how_to_provide_it() {
        let mut p = pools(&["10.0.0.1"], None);
        let err = p.allocate("ipv6", "net0").unwrap_err();
        assert!(err.contains("--addresses"), "{err}");
        assert!(err.contains("known: ipv4"), "{err}");
    }
}
