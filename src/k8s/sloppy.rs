//! Addresses as kube-proxy reads them from Services and EndpointSlices:
//! `k8s.io/utils/net` `ParseIPSloppy` / `ParseCIDRSloppy`, the forked parser of Go before
//! 1.17 (`parseIPv4`, `parseIPv6`, `dtoi`, `xtoi` in `k8s.io/utils/internal/third_party/forked/golang/net/ip.go`).
//! It differs from a strict parser in one way: a number may have leading zeros (IPv4 octets,
//! IPv6 groups, the prefix length), read as decimal (octets, prefix) or hex (groups) —
//! `172.30.0.041` is 172.30.0.41, `203.0.113.000/025` is 203.0.113.0/25. The API server has
//! accepted such addresses in the past, so objects holding them exist, and kube-proxy writes
//! rules for their canonical form (upstream's `TestBadIPs`).

use super::Cidr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `dtoi`: the decimal digits at the start of `s` (at least one) and how many there were;
/// `None` past 0xFFFFFF (`big`).
fn dtoi(s: &str) -> Option<(u32, usize)> {
    let mut n: u32 = 0;
    let mut i = 0;
    for b in s.bytes() {
        if !b.is_ascii_digit() {
            break;
        }
        n = n * 10 + u32::from(b - b'0');
        if n >= 0xFF_FFFF {
            return None;
        }
        i += 1;
    }
    (i > 0).then_some((n, i))
}

/// `parseIPv4`: four decimal octets separated by dots, each at most 255, leading zeros
/// allowed.
fn parse_ipv4(s: &str) -> Option<Ipv4Addr> {
    let mut rest = s;
    let mut p = [0u8; 4];
    for (i, octet) in p.iter_mut().enumerate() {
        if i > 0 {
            rest = rest.strip_prefix('.')?;
        }
        let (n, c) = dtoi(rest)?;
        *octet = u8::try_from(n).ok()?;
        rest = &rest[c..];
    }
    rest.is_empty().then(|| Ipv4Addr::from(p))
}

/// `parseIPv6`: as the strict parser once each group is cut to its value (a group may have
/// more than four hex digits when the extra ones are leading zeros) and an embedded IPv4 tail
/// is read by [`parse_ipv4`].
fn parse_ipv6(s: &str) -> Option<Ipv6Addr> {
    let (head, tail) = match s.rfind(':') {
        Some(i) if s[i + 1..].contains('.') => (&s[..=i], Some(parse_ipv4(&s[i + 1..])?)),
        _ => (s, None),
    };
    let mut canon = String::with_capacity(s.len());
    for (i, group) in head.split(':').enumerate() {
        if i > 0 {
            canon.push(':');
        }
        if group.is_empty() {
            continue;
        }
        if !group.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let digits = group.trim_start_matches('0');
        if digits.len() > 4 {
            return None;
        }
        canon.push_str(if digits.is_empty() { "0" } else { digits });
    }
    if let Some(v4) = tail {
        canon.push_str(&v4.to_string());
    }
    canon.parse().ok()
}

/// `ParseIPSloppy`: an IPv4 or IPv6 address, numbers with leading zeros allowed; `None` when
/// kube-proxy would not read it either.
pub fn parse_ip_sloppy(s: &str) -> Option<IpAddr> {
    match s.bytes().find(|b| *b == b'.' || *b == b':') {
        Some(b'.') => parse_ipv4(s).map(IpAddr::V4),
        Some(_) => parse_ipv6(s).map(IpAddr::V6),
        None => None,
    }
}

/// `ParseCIDRSloppy`: `ADDRESS/PREFIX` with [`parse_ip_sloppy`]'s address and a decimal
/// prefix length (leading zeros allowed), masked to the network as Go returns it.
pub fn parse_cidr_sloppy(s: &str) -> Option<Cidr> {
    let (addr, mask) = s.split_once('/')?;
    let ip = parse_ipv4(addr)
        .map(IpAddr::V4)
        .or_else(|| parse_ipv6(addr).map(IpAddr::V6))?;
    let (n, c) = dtoi(mask)?;
    if c != mask.len() {
        return None;
    }
    Cidr::new(ip, u8::try_from(n).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_zeros_are_decimal_octets() {
        let ip = |s: &str| parse_ip_sloppy(s).map(|i| i.to_string());
        assert_eq!(ip("172.30.0.041").as_deref(), Some("172.30.0.41"));
        assert_eq!(ip("10.180.00.001").as_deref(), Some("10.180.0.1"));
        assert_eq!(ip("192.168.099.022").as_deref(), Some("192.168.99.22"));
        assert_eq!(ip("1.2.3.004").as_deref(), Some("1.2.3.4"));
        assert_eq!(
            ip("010.0.0.1").as_deref(),
            Some("10.0.0.1"),
            "decimal, not octal"
        );
        assert_eq!(ip("1.2.3.4").as_deref(), Some("1.2.3.4"));
        for bad in [
            "1.2.3",
            "1.2.3.256",
            "1.2.3.4.5",
            "1.2.3.-4",
            "1.2.3.4 ",
            "",
            "a.b.c.d",
        ] {
            assert_eq!(ip(bad), None, "{bad:?}");
        }
        assert_eq!(ip("fd00::0041").as_deref(), Some("fd00::41"));
        assert_eq!(ip("fd00::000041").as_deref(), Some("fd00::41"));
        assert_eq!(ip("::ffff:1.2.3.004").as_deref(), Some("::ffff:1.2.3.4"));
        assert_eq!(ip("fd00::10041"), None, "a group over 0xFFFF");
        assert_eq!(ip("fd00::1::2"), None);
    }

    #[test]
    fn cidrs_take_leading_zeros_in_the_prefix_too() {
        let c = |s: &str| parse_cidr_sloppy(s).map(|c| c.to_string());
        assert_eq!(c("203.0.113.000/025").as_deref(), Some("203.0.113.0/25"));
        assert_eq!(c("203.0.113.5/25").as_deref(), Some("203.0.113.0/25"));
        assert_eq!(c("fd00:10:96::/0112").as_deref(), Some("fd00:10:96::/112"));
        for bad in [
            "203.0.113.0/33",
            "203.0.113.0/",
            "203.0.113.0",
            "203.0.113.0/2x",
        ] {
            assert_eq!(c(bad), None, "{bad:?}");
        }
    }
}
