//! The addresses of an IPAM pool as the in-cluster provider takes them: a range
//! `a-b`, a CIDR, or a single address.
use std::net::IpAddr;

/// One entry of a pool's `addresses`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Range {
    Span(IpAddr, IpAddr),
    Cidr(IpAddr, u8),
}

impl Range {
    pub fn parse(text: &str) -> Result<Range, String> {
        let text = text.trim();
        let ip = |s: &str| {
            s.trim()
                .parse::<IpAddr>()
                .map_err(|_| format!("`{text}` is not an address, a range or a CIDR"))
        };
        if let Some((a, b)) = text.split_once('-') {
            let (a, b) = (ip(a)?, ip(b)?);
            if a.is_ipv6() != b.is_ipv6() || b < a {
                return Err(format!(
                    "`{text}` is not a range from low to high in one family"
                ));
            }
            return Ok(Range::Span(a, b));
        }
        if let Some((a, bits)) = text.split_once('/') {
            let a = ip(a)?;
            let max = if a.is_ipv6() { 128 } else { 32 };
            let bits = bits
                .parse::<u8>()
                .ok()
                .filter(|b| *b <= max)
                .ok_or_else(|| format!("`{text}`: the prefix length must be 0 to {max}"))?;
            return Ok(Range::Cidr(a, bits));
        }
        let a = ip(text)?;
        Ok(Range::Span(a, a))
    }

    pub fn is_v6(&self) -> bool {
        match self {
            Range::Span(a, _) | Range::Cidr(a, _) => a.is_ipv6(),
        }
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        if ip.is_ipv6() != self.is_v6() {
            return false;
        }
        match *self {
            Range::Span(a, b) => a <= ip && ip <= b,
            Range::Cidr(net, bits) => {
                let (n, i, width) = (
                    bits128(net),
                    bits128(ip),
                    if net.is_ipv6() { 128 } else { 32 },
                );
                let shift = width - u32::from(bits);
                shift >= 128 || (n >> shift) == (i >> shift)
            }
        }
    }
}

fn bits128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ranges_cidrs_and_single_addresses_contain_what_they_should() {
        let span = Range::parse("10.0.0.10-10.0.0.20").unwrap();
        assert!(span.contains(ip("10.0.0.10")) && span.contains(ip("10.0.0.20")));
        assert!(!span.contains(ip("10.0.0.21")) && !span.contains(ip("fd00::10")));
        let cidr = Range::parse("10.1.0.0/16").unwrap();
        assert!(cidr.contains(ip("10.1.255.3")) && !cidr.contains(ip("10.2.0.1")));
        let all = Range::parse("0.0.0.0/0").unwrap();
        assert!(all.contains(ip("192.0.2.1")));
        let v6 = Range::parse("fd00::/64").unwrap();
        assert!(v6.contains(ip("fd00::5")) && v6.is_v6());
        assert!(Range::parse("10.0.0.5").unwrap().contains(ip("10.0.0.5")));
    }

    #[test]
    fn what_is_not_a_range_says_so() {
        for bad in [
            "10.0.0.20-10.0.0.10",
            "10.0.0.1-fd00::1",
            "10.0.0.0/33",
            "x",
            "",
        ] {
            assert!(Range::parse(bad).is_err(), "{bad}");
        }
    }
}
