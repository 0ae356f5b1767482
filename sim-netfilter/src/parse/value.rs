//! One option's argument turned into a value (numbers, marks, TCP flags, ICMP types,
//! conntrack states, NAT ranges, log levels), with the error naming the option and what was
//! expected.

use crate::error::RuleErrorKind;
use crate::rule::*;
use crate::types::*;

/// An option name printed as `--name`, built only when an error needs it.
#[derive(Clone, Copy)]
pub(super) struct OptName(pub(super) &'static str);

impl std::fmt::Display for OptName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "--{}", self.0)
    }
}

pub(super) fn bad(
    option: impl std::fmt::Display,
    value: &str,
    expected: impl Into<String>,
) -> RuleErrorKind {
    RuleErrorKind::BadValue {
        option: option.to_string(),
        value: value.to_string(),
        expected: expected.into(),
    }
}

pub(super) fn invalid(msg: impl Into<String>) -> RuleErrorKind {
    RuleErrorKind::Invalid(msg.into())
}

pub(super) fn parse_u32(
    option: impl std::fmt::Display + Copy,
    s: &str,
) -> Result<u32, RuleErrorKind> {
    parse_c_uint(s)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| {
            bad(
                option,
                s,
                "an unsigned 32-bit integer (decimal, 0x hex or 0 octal)",
            )
        })
}

/// `value[/mask]` with a default mask of all ones (xtables `XTTYPE_MARKMASK32`).
pub(super) fn parse_markmask(
    option: impl std::fmt::Display + Copy,
    s: &str,
) -> Result<(u32, Option<u32>), RuleErrorKind> {
    let (v, m) = match s.split_once('/') {
        Some((v, m)) => (v, Some(m)),
        None => (s, None),
    };
    let value = parse_u32(option, v)?;
    let mask = m.map(|m| parse_u32(option, m)).transpose()?;
    Ok((value, mask))
}

/// TCP flag names as libxt_tcp takes them (ECE and CWR are not among them; ALL is 0x3f).
pub(super) fn parse_tcp_flag_list(
    option: impl std::fmt::Display + Copy,
    s: &str,
) -> Result<u8, RuleErrorKind> {
    let mut v = 0u8;
    for part in s.split(',') {
        v |= match part.to_ascii_uppercase().as_str() {
            "FIN" => 0x01,
            "SYN" => 0x02,
            "RST" => 0x04,
            "PSH" => 0x08,
            "ACK" => 0x10,
            "URG" => 0x20,
            "ALL" => 0x3f,
            "NONE" => 0,
            _ => {
                return Err(bad(
                    option,
                    part,
                    "a TCP flag: FIN, SYN, RST, PSH, ACK, URG, ALL or NONE",
                ))
            }
        };
    }
    Ok(v)
}

const ICMP_NAMES: &[(&str, u8, u8, u8)] = &[
    ("any", 0xff, 0, 0xff),
    ("echo-reply", 0, 0, 0xff),
    ("destination-unreachable", 3, 0, 0xff),
    ("network-unreachable", 3, 0, 0),
    ("host-unreachable", 3, 1, 1),
    ("protocol-unreachable", 3, 2, 2),
    ("port-unreachable", 3, 3, 3),
    ("fragmentation-needed", 3, 4, 4),
    ("source-route-failed", 3, 5, 5),
    ("network-unknown", 3, 6, 6),
    ("host-unknown", 3, 7, 7),
    ("network-prohibited", 3, 9, 9),
    ("host-prohibited", 3, 10, 10),
    ("TOS-network-unreachable", 3, 11, 11),
    ("TOS-host-unreachable", 3, 12, 12),
    ("communication-prohibited", 3, 13, 13),
    ("host-precedence-violation", 3, 14, 14),
    ("precedence-cutoff", 3, 15, 15),
    ("source-quench", 4, 0, 0xff),
    ("redirect", 5, 0, 0xff),
    ("network-redirect", 5, 0, 0),
    ("host-redirect", 5, 1, 1),
    ("TOS-network-redirect", 5, 2, 2),
    ("TOS-host-redirect", 5, 3, 3),
    ("echo-request", 8, 0, 0xff),
    ("router-advertisement", 9, 0, 0xff),
    ("router-solicitation", 10, 0, 0xff),
    ("time-exceeded", 11, 0, 0xff),
    ("ttl-zero-during-transit", 11, 0, 0),
    ("ttl-zero-during-reassembly", 11, 1, 1),
    ("parameter-problem", 12, 0, 0xff),
    ("ip-header-bad", 12, 0, 0),
    ("required-option-missing", 12, 1, 1),
    ("timestamp-request", 13, 0, 0xff),
    ("timestamp-reply", 14, 0, 0xff),
    ("address-mask-request", 17, 0, 0xff),
    ("address-mask-reply", 18, 0, 0xff),
];

pub(super) fn parse_icmp_type(s: &str) -> Result<(u8, u8, u8), RuleErrorKind> {
    parse_icmp_like(
        ICMP_NAMES,
        "--icmp-type",
        s,
        "an ICMP type name (echo-request, port-unreachable, any, …) or TYPE[/CODE]",
    )
}

/// libip6t_icmp6's `icmpv6_codes`: name, type, lowest and highest code.
const ICMPV6_NAMES: &[(&str, u8, u8, u8)] = &[
    ("destination-unreachable", 1, 0, 0xff),
    ("no-route", 1, 0, 0),
    ("communication-prohibited", 1, 1, 1),
    ("beyond-scope", 1, 2, 2),
    ("address-unreachable", 1, 3, 3),
    ("port-unreachable", 1, 4, 4),
    ("failed-policy", 1, 5, 5),
    ("reject-route", 1, 6, 6),
    ("packet-too-big", 2, 0, 0xff),
    ("time-exceeded", 3, 0, 0xff),
    ("ttl-exceeded", 3, 0, 0xff),
    ("ttl-zero-during-transit", 3, 0, 0),
    ("ttl-zero-during-reassembly", 3, 1, 1),
    ("parameter-problem", 4, 0, 0xff),
    ("bad-header", 4, 0, 0),
    ("unknown-header-type", 4, 1, 1),
    ("unknown-option", 4, 2, 2),
    ("echo-request", 128, 0, 0xff),
    ("ping", 128, 0, 0xff),
    ("echo-reply", 129, 0, 0xff),
    ("pong", 129, 0, 0xff),
    ("router-solicitation", 133, 0, 0xff),
    ("router-advertisement", 134, 0, 0xff),
    ("neighbour-solicitation", 135, 0, 0xff),
    ("neighbor-solicitation", 135, 0, 0xff),
    ("neighbour-advertisement", 136, 0, 0xff),
    ("neighbor-advertisement", 136, 0, 0xff),
    ("redirect", 137, 0, 0xff),
];

/// `--icmpv6-type NAME|TYPE[/CODE]` (libip6t_icmp6 `parse_icmpv6`).
pub(super) fn parse_icmpv6_type(s: &str) -> Result<(u8, u8, u8), RuleErrorKind> {
    parse_icmp_like(
        ICMPV6_NAMES,
        "--icmpv6-type",
        s,
        "an ICMPv6 type name (echo-request, destination-unreachable, neighbour-solicitation, …) or TYPE[/CODE]",
    )
}

/// A type name (exact, else a unique case-insensitive prefix) from `names`, or
/// `TYPE[/CODE]`; a bare type takes every code.
fn parse_icmp_like(
    names: &[(&str, u8, u8, u8)],
    option: &str,
    s: &str,
    expected: &str,
) -> Result<(u8, u8, u8), RuleErrorKind> {
    let lower = s.to_ascii_lowercase();
    if let Some(&(_, t, a, b)) = names.iter().find(|(n, ..)| n.to_ascii_lowercase() == lower) {
        return Ok((t, a, b));
    }
    let prefixed: Vec<_> = names
        .iter()
        .filter(|(n, ..)| n.to_ascii_lowercase().starts_with(&lower))
        .collect();
    if prefixed.len() == 1 {
        let &(_, t, a, b) = prefixed[0];
        return Ok((t, a, b));
    }
    let (t, c) = match s.split_once('/') {
        Some((t, c)) => (t, Some(c)),
        None => (s, None),
    };
    let t: u8 = t.parse().map_err(|_| bad(option, s, expected))?;
    match c {
        Some(c) => {
            let c: u8 = c.parse().map_err(|_| bad(option, s, expected))?;
            Ok((t, c, c))
        }
        None => Ok((t, 0, 0xff)),
    }
}

pub(super) fn parse_state_list(
    option: impl std::fmt::Display + Copy,
    s: &str,
    with_nat: bool,
) -> Result<u16, RuleErrorKind> {
    // libxt_conntrack compares each item with strncasecmp(item, NAME, len(item)), trying the
    // names in this order, so an unambiguous-looking prefix ("E") is accepted.
    let order: &[(&str, u16)] = &[
        ("INVALID", ctstate::INVALID),
        ("NEW", ctstate::NEW),
        ("ESTABLISHED", ctstate::ESTABLISHED),
        ("RELATED", ctstate::RELATED),
        ("UNTRACKED", ctstate::UNTRACKED),
        ("SNAT", ctstate::SNAT),
        ("DNAT", ctstate::DNAT),
    ];
    let names = if with_nat { order } else { &order[..5] };
    let mut mask = 0;
    for item in s.split(',') {
        let up = item.to_ascii_uppercase();
        let found = (!item.is_empty())
            .then(|| names.iter().find(|(n, _)| n.starts_with(&up)))
            .flatten();
        match found {
            Some((_, bit)) => mask |= bit,
            None => {
                return Err(bad(
                    option,
                    s,
                    if with_nat {
                        "a comma-separated list of INVALID, NEW, RELATED, ESTABLISHED, UNTRACKED, SNAT, DNAT"
                    } else {
                        "a comma-separated list of INVALID, NEW, RELATED, ESTABLISHED, UNTRACKED"
                    },
                ))
            }
        }
    }
    Ok(mask)
}

pub(super) fn parse_status_list(s: &str) -> Result<u32, RuleErrorKind> {
    let order: &[(&str, u32)] = &[
        ("NONE", 0),
        ("EXPECTED", ctstatus::EXPECTED),
        ("SEEN_REPLY", ctstatus::SEEN_REPLY),
        ("ASSURED", ctstatus::ASSURED),
        ("CONFIRMED", ctstatus::CONFIRMED),
    ];
    let mut mask = 0;
    for item in s.split(',') {
        let up = item.to_ascii_uppercase();
        match (!item.is_empty())
            .then(|| order.iter().find(|(n, _)| n.starts_with(&up)))
            .flatten()
        {
            Some((_, bit)) => mask |= bit,
            None => {
                return Err(bad(
                    "--ctstatus",
                    s,
                    "a comma-separated list of NONE, EXPECTED, SEEN_REPLY, ASSURED, CONFIRMED",
                ))
            }
        }
    }
    Ok(mask)
}

pub(super) fn parse_addrtype_list(
    option: impl std::fmt::Display + Copy,
    s: &str,
) -> Result<u16, RuleErrorKind> {
    let mut mask = 0;
    for item in s.split(',') {
        match AddrType::ALL
            .iter()
            .find(|t| t.name().eq_ignore_ascii_case(item))
        {
            Some(t) => mask |= t.bit(),
            None => return Err(bad(option, s, "a comma-separated list of UNSPEC, UNICAST, LOCAL, BROADCAST, ANYCAST, MULTICAST, BLACKHOLE, UNREACHABLE, PROHIBIT, THROW, NAT, XRESOLVE")),
        }
    }
    Ok(mask)
}

/// A conntrack address (`--ctorigdst 10.0.0.0/8`, `fd00::/64` in ip6tables): kept unmasked,
/// as iptables prints it.
pub(super) fn parse_ct_addr(
    family: Family,
    option: impl std::fmt::Display + Copy,
    s: &str,
) -> Result<IpNet, RuleErrorKind> {
    let n = parse_ip_net(family, s).map_err(|e| bad(option, s, e))?;
    if n.prefix_len().is_none() {
        return Err(bad(
            option,
            s,
            "an address with a prefix length (non-contiguous masks are not modelled here)",
        ));
    }
    Ok(n)
}

/// A conntrack port or range `a[:b]` (revision 3 takes ranges; reversed ranges are accepted
/// and never match).
pub(super) fn parse_ct_ports(
    option: impl std::fmt::Display + Copy,
    s: &str,
) -> Result<PortRange, RuleErrorKind> {
    let p = |x: &str| parse_port_decimal(x).map_err(|e| bad(option, s, e));
    match s.split_once(':') {
        None => Ok(PortRange::single(p(s)?)),
        Some((a, b)) => Ok(PortRange {
            min: if a.is_empty() { 0 } else { p(a)? },
            max: if b.is_empty() { u16::MAX } else { p(b)? },
        }),
    }
}

/// `--to-destination`/`--to-source` (libxt_NAT `parse_to`). In ip6tables an address with
/// ports is written in brackets (`[fd00::1]:80`, `[fd00::1-fd00::3]:80-90`); without
/// brackets a text with more than one colon is all address.
pub(super) fn parse_nat_range(
    family: Family,
    option: impl std::fmt::Display + Copy,
    s: &str,
    ports_ok: bool,
) -> Result<NatRange, RuleErrorKind> {
    let mut r = NatRange::default();
    let form = match family {
        Family::Ipv4 => "ADDR[-ADDR][:PORT[-PORT]]",
        Family::Ipv6 => "ADDR[-ADDR] or [ADDR[-ADDR]][:PORT[-PORT]]",
    };
    let (ip_part, port_part) = match s.strip_prefix('[') {
        Some(rest) => {
            if family == Family::Ipv4 {
                return Err(bad(
                    option,
                    s,
                    "an IPv4 address without brackets (Invalid address format)",
                ));
            }
            let (inside, after) = rest.split_once(']').ok_or_else(|| bad(option, s, form))?;
            match after.strip_prefix(':') {
                Some(p) => (inside, Some(p)),
                None if after.is_empty() => (inside, None),
                None => return Err(bad(option, s, form)),
            }
        }
        None => match s.split_once(':') {
            // One colon is the port; more is an IPv6 address.
            Some((a, b)) if !b.contains(':') || family == Family::Ipv4 => (a, Some(b)),
            Some(_) => (s, None),
            None => (s, None),
        },
    };
    if !ip_part.is_empty() {
        let (a, b) = match ip_part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (ip_part, ip_part),
        };
        let pa = parse_ip(family, a).ok_or_else(|| bad(option, s, form))?;
        let pb = parse_ip(family, b).ok_or_else(|| bad(option, s, form))?;
        r.addrs = Some((pa, pb));
    }
    if let Some(pp) = port_part {
        if !ports_ok {
            return Err(invalid(
                "Need TCP, UDP, SCTP or DCCP with port specification (give -p tcp, udp, sctp or dccp)",
            ));
        }
        if pp.contains(':') {
            return Err(bad(option, s, "a port range written with a dash (80-90)"));
        }
        let (range, base) = match pp.split_once('/') {
            Some((r, b)) => (r, Some(b)),
            None => (pp, None),
        };
        let port = |x: &str| -> Result<u16, RuleErrorKind> {
            x.parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| bad(option, s, "ports 1-65535"))
        };
        let (a, b) = match range.split_once('-') {
            Some((a, b)) => (port(a)?, port(b)?),
            None => {
                let a = port(range)?;
                (a, a)
            }
        };
        if b < a {
            return Err(bad(option, s, "a port range with the low port first"));
        }
        r.ports = Some((a, b));
        if let Some(b) = base {
            r.base_port = Some(port(b)?);
        }
    }
    if r.addrs.is_none() && r.ports.is_none() {
        return Err(bad(option, s, form));
    }
    Ok(r)
}

pub(super) fn parse_to_ports(
    option: impl std::fmt::Display + Copy,
    s: &str,
) -> Result<(u16, u16), RuleErrorKind> {
    let port = |x: &str| -> Result<u16, RuleErrorKind> {
        parse_c_uint(x)
            .and_then(|v| u16::try_from(v).ok())
            .ok_or_else(|| bad(option, s, "PORT[-PORT] with ports 0-65535"))
    };
    let (a, b) = match s.split_once('-') {
        Some((a, b)) => (port(a)?, port(b)?),
        None => {
            let a = port(s)?;
            (a, a)
        }
    };
    if b < a {
        return Err(bad(option, s, "a port range with the low port first"));
    }
    Ok((a, b))
}

pub(super) fn parse_log_level(s: &str) -> Result<u8, RuleErrorKind> {
    if let Some(v) = parse_c_uint(s) {
        if v <= 7 {
            return Ok(v as u8);
        }
    }
    Ok(match s {
        "emerg" | "panic" => 0,
        "alert" => 1,
        "crit" => 2,
        "err" | "error" => 3,
        "warn" | "warning" => 4,
        "notice" => 5,
        "info" => 6,
        "debug" => 7,
        _ => {
            return Err(bad(
                "--log-level",
                s,
                "0-7 or emerg, alert, crit, error, warning, notice, info, debug",
            ))
        }
    })
}

pub(super) fn truncate_bytes(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}
