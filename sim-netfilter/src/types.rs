//! Small vocabulary types shared by the rule model, the text formats and evaluation: tables,
//! hooks, policies, IPv4 prefixes as iptables parses and prints them, interface patterns,
//! protocol and service names, and the `ctime()` timestamp of the iptables-save header.

use std::fmt;
use std::net::Ipv4Addr;

/// An iptables table.
///
/// The declaration order is the order in which `iptables-save` (nf_tables backend) prints
/// tables: mangle, raw, filter, nat (iptables' `enum nft_table_type` order, security omitted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    /// `mangle`: packet alteration (MARK, CONNMARK).
    Mangle,
    /// `raw`: before conntrack (CT --notrack, TRACE).
    Raw,
    /// `filter`: ACCEPT / DROP / REJECT.
    Filter,
    /// `nat`: DNAT / SNAT / MASQUERADE / REDIRECT, consulted for a connection's first packet.
    Nat,
}

impl Table {
    /// All tables, in iptables-save order.
    pub const ALL: [Table; 4] = [Table::Mangle, Table::Raw, Table::Filter, Table::Nat];

    /// The table's name as `-t` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Table::Raw => "raw",
            Table::Mangle => "mangle",
            Table::Filter => "filter",
            Table::Nat => "nat",
        }
    }

    /// Parses a table name (`raw`, `mangle`, `filter`, `nat`).
    pub fn from_name(s: &str) -> Option<Table> {
        Some(match s {
            "raw" => Table::Raw,
            "mangle" => Table::Mangle,
            "filter" => Table::Filter,
            "nat" => Table::Nat,
            _ => return None,
        })
    }

    /// The hooks this table has a built-in chain for, in the order iptables lists them.
    pub fn hooks(self) -> &'static [Hook] {
        match self {
            Table::Raw => &[Hook::PreRouting, Hook::Output],
            Table::Mangle => &[
                Hook::PreRouting,
                Hook::Input,
                Hook::Forward,
                Hook::Output,
                Hook::PostRouting,
            ],
            Table::Filter => &[Hook::Input, Hook::Forward, Hook::Output],
            Table::Nat => &[
                Hook::PreRouting,
                Hook::Input,
                Hook::Output,
                Hook::PostRouting,
            ],
        }
    }

    /// Whether this table has a built-in chain at `hook`.
    pub fn has_hook(self, hook: Hook) -> bool {
        self.hooks().contains(&hook)
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A netfilter hook, named like the built-in chain that hangs off it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Hook {
    /// `PREROUTING` (NF_INET_PRE_ROUTING).
    PreRouting,
    /// `INPUT` (NF_INET_LOCAL_IN).
    Input,
    /// `FORWARD` (NF_INET_FORWARD).
    Forward,
    /// `OUTPUT` (NF_INET_LOCAL_OUT).
    Output,
    /// `POSTROUTING` (NF_INET_POST_ROUTING).
    PostRouting,
}

impl Hook {
    /// All hooks in the kernel's numbering order.
    pub const ALL: [Hook; 5] = [
        Hook::PreRouting,
        Hook::Input,
        Hook::Forward,
        Hook::Output,
        Hook::PostRouting,
    ];

    /// The built-in chain name (`PREROUTING`, …).
    pub fn chain_name(self) -> &'static str {
        match self {
            Hook::PreRouting => "PREROUTING",
            Hook::Input => "INPUT",
            Hook::Forward => "FORWARD",
            Hook::Output => "OUTPUT",
            Hook::PostRouting => "POSTROUTING",
        }
    }

    /// The hook whose built-in chain is called `name`.
    pub fn from_chain_name(name: &str) -> Option<Hook> {
        Some(match name {
            "PREROUTING" => Hook::PreRouting,
            "INPUT" => Hook::Input,
            "FORWARD" => Hook::Forward,
            "OUTPUT" => Hook::Output,
            "POSTROUTING" => Hook::PostRouting,
            _ => return None,
        })
    }

    /// The bit of this hook in a hook mask (`1 << NF_INET_*`).
    pub const fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.chain_name())
    }
}

/// The policy of a built-in chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    /// `ACCEPT`.
    Accept,
    /// `DROP`.
    Drop,
}

impl Policy {
    /// `ACCEPT` or `DROP`.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Accept => "ACCEPT",
            Policy::Drop => "DROP",
        }
    }
}

/// Packet and byte counters of a rule or a chain policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Counters {
    /// Packets counted.
    pub packets: u64,
    /// Bytes counted (IP total length of each packet, as the kernel's `skb->len`).
    pub bytes: u64,
}

/// An IPv4 address with a netmask, as `-s`/`-d` and `--ctorigdst` take it.
///
/// The mask need not be contiguous (`10.0.0.0/255.0.255.0` is legal and printed dotted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv4Net {
    /// The address, in host byte order.
    pub addr: u32,
    /// The mask, in host byte order.
    pub mask: u32,
}

impl Ipv4Net {
    /// `0.0.0.0/0`.
    pub const ANY: Ipv4Net = Ipv4Net { addr: 0, mask: 0 };

    /// A prefix `addr/len` (the address is not masked).
    pub fn new(addr: Ipv4Addr, len: u8) -> Ipv4Net {
        Ipv4Net {
            addr: u32::from(addr),
            mask: prefix_mask(len.min(32)),
        }
    }

    /// Whether `ip` is inside: `(ip & mask) == (addr & mask)`.
    #[inline]
    pub fn contains(&self, ip: u32) -> bool {
        (ip ^ self.addr) & self.mask == 0
    }

    /// The prefix length if the mask is contiguous.
    pub fn prefix_len(&self) -> Option<u8> {
        let m = self.mask;
        if m.leading_ones() + m.trailing_zeros() == 32 {
            Some(m.leading_ones() as u8)
        } else {
            None
        }
    }

    /// The same network with host bits cleared (what `-s`/`-d` store).
    pub fn masked(self) -> Ipv4Net {
        Ipv4Net {
            addr: self.addr & self.mask,
            mask: self.mask,
        }
    }

    /// The address as `Ipv4Addr`.
    pub fn ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.addr)
    }

    /// How iptables-save prints it: `a.b.c.d/len`, or `a.b.c.d/m.m.m.m` for an odd mask
    /// (iptables' `mask_to_str`).
    pub fn save_form(&self) -> String {
        match self.prefix_len() {
            Some(l) => format!("{}/{}", self.ip(), l),
            None => format!("{}/{}", self.ip(), Ipv4Addr::from(self.mask)),
        }
    }

    /// How listings print it: `a.b.c.d` for /32, else with `/len` (`xtables_ipmask_to_numeric`).
    pub fn list_form(&self) -> String {
        match self.prefix_len() {
            Some(32) => self.ip().to_string(),
            Some(l) => format!("{}/{}", self.ip(), l),
            None => format!("{}/{}", self.ip(), Ipv4Addr::from(self.mask)),
        }
    }
}

impl fmt::Display for Ipv4Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.save_form())
    }
}

/// The netmask of a prefix length 0..=32.
pub fn prefix_mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len.min(32)))
    }
}

/// Parses an IPv4 address the way iptables' `xtables_numeric_to_ipaddr` does: one to four
/// dotted decimal parts of 0-255, missing trailing parts are zero (`10.1` is `10.1.0.0`).
/// Host names are not resolved.
pub fn parse_ipv4(s: &str) -> Option<Ipv4Addr> {
    if s.is_empty() {
        return None;
    }
    let mut parts = [0u8; 4];
    let mut n = 0;
    for p in s.split('.') {
        if n == 4 || p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let v: u16 = p.parse().ok()?;
        if v > 255 {
            return None;
        }
        parts[n] = v as u8;
        n += 1;
    }
    Some(Ipv4Addr::from(parts))
}

/// Parses `addr[/len|/mask]` (iptables `xtables_ipparse_any`). The address is returned as
/// given; callers mask it where iptables does.
pub fn parse_ipv4_net(s: &str) -> Result<Ipv4Net, String> {
    let (a, m) = match s.split_once('/') {
        Some((a, m)) => (a, Some(m)),
        None => (s, None),
    };
    let addr = parse_ipv4(a).ok_or_else(|| {
        format!("{a:?} is not a numeric IPv4 address (host names are not resolved)")
    })?;
    let mask = match m {
        None => u32::MAX,
        Some(m) if m.contains('.') => {
            u32::from(parse_ipv4(m).ok_or_else(|| format!("{m:?} is not a valid netmask"))?)
        }
        Some(m) => {
            let len: u8 = m
                .parse()
                .ok()
                .filter(|l| *l <= 32)
                .ok_or_else(|| format!("{m:?} is not a prefix length 0-32"))?;
            prefix_mask(len)
        }
    };
    Ok(Ipv4Net {
        addr: u32::from(addr),
        mask,
    })
}

/// An interface pattern of `-i`/`-o`: an exact name, or a prefix when it ends with `+`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IfacePattern {
    /// The text as given (`eth0`, `veth+`, `+`).
    pub text: String,
}

impl IfacePattern {
    /// Validates an interface pattern (at most 15 bytes, iptables' IFNAMSIZ check).
    pub fn parse(s: &str) -> Result<IfacePattern, String> {
        if s.is_empty() {
            return Err("empty interface name".into());
        }
        if s.len() > 15 {
            return Err(format!(
                "interface name {s:?} must be shorter than IFNAMSIZ (15)"
            ));
        }
        Ok(IfacePattern {
            text: s.to_string(),
        })
    }

    /// Whether the pattern matches `name` (kernel `ifname_compare`: prefix match for `+`).
    #[inline]
    pub fn matches(&self, name: &str) -> bool {
        match self.text.strip_suffix('+') {
            Some(prefix) => name.starts_with(prefix),
            None => self.text == name,
        }
    }

    /// Whether this is the match-everything pattern `+`.
    pub fn is_any(&self) -> bool {
        self.text == "+"
    }
}

/// Protocol names as iptables reads `-p` (its own table first, then `/etc/protocols`).
const PROTO_NAMES: &[(&str, u8)] = &[
    ("tcp", 6),
    ("sctp", 132),
    ("udp", 17),
    ("udplite", 136),
    ("icmp", 1),
    ("icmpv6", 58),
    ("ipv6-icmp", 58),
    ("esp", 50),
    ("ah", 51),
    ("ipv6-mh", 135),
    ("mh", 135),
    ("ip", 0),
    ("hopopt", 0),
    ("igmp", 2),
    ("ggp", 3),
    ("ipencap", 4),
    ("st", 5),
    ("egp", 8),
    ("igp", 9),
    ("pup", 12),
    ("hmp", 20),
    ("xns-idp", 22),
    ("rdp", 27),
    ("iso-tp4", 29),
    ("dccp", 33),
    ("xtp", 36),
    ("ddp", 37),
    ("idpr-cmtp", 38),
    ("ipv6", 41),
    ("ipv6-route", 43),
    ("ipv6-frag", 44),
    ("idrp", 45),
    ("rsvp", 46),
    ("gre", 47),
    ("skip", 57),
    ("ipv6-nonxt", 59),
    ("ipv6-opts", 60),
    ("rspf", 73),
    ("vmtp", 81),
    ("eigrp", 88),
    ("ospf", 89),
    ("ax.25", 93),
    ("ipip", 94),
    ("etherip", 97),
    ("encap", 98),
    ("pim", 103),
    ("ipcomp", 108),
    ("vrrp", 112),
    ("l2tp", 115),
    ("isis", 124),
    ("fc", 133),
    ("mobility-header", 135),
    ("mpls-in-ip", 137),
    ("manet", 138),
    ("hip", 139),
    ("shim6", 140),
    ("wesp", 141),
    ("rohc", 142),
    ("ethernet", 143),
];

/// Parses a protocol as `-p` takes it: a number 0-255 (any base, like `strtoul(…, 0)`), `all`,
/// or a name (case-insensitive). Returns 0 for "all protocols".
pub fn parse_protocol(s: &str) -> Result<u8, String> {
    if let Some(n) = parse_c_uint(s) {
        return u8::try_from(n).map_err(|_| format!("unknown protocol {s:?} specified"));
    }
    let lower = s.to_ascii_lowercase();
    if lower == "all" {
        return Ok(0);
    }
    PROTO_NAMES
        .iter()
        .find(|(n, _)| *n == lower)
        .map(|(_, p)| *p)
        .ok_or_else(|| format!("unknown protocol {s:?} specified"))
}

/// The name iptables-save prints for a protocol number (`proto_to_name(proto, nolookup=true)`
/// then `getprotobynumber`), or `None` to print the number.
pub fn protocol_save_name(p: u8) -> Option<&'static str> {
    match p {
        6 => Some("tcp"),
        132 => Some("sctp"),
        17 => Some("udp"),
        136 => Some("udplite"),
        1 => Some("icmp"),
        58 => Some("ipv6-icmp"),
        50 => Some("esp"),
        51 => Some("ah"),
        135 => Some("mh"),
        0 => None,
        _ => PROTO_NAMES
            .iter()
            .skip(11)
            .find(|(_, n)| *n == p)
            .map(|(name, _)| *name),
    }
}

/// Parses an unsigned integer like C's `strtoul(s, &end, 0)` with the whole string consumed:
/// `0x` hex, leading-`0` octal, else decimal. No sign, no spaces.
pub fn parse_c_uint(s: &str) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let (digits, radix) = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (h, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// Well-known service names (`/etc/services`), for ports given by name.
const SERVICES: &[(&str, u16)] = &[
    ("tcpmux", 1),
    ("echo", 7),
    ("discard", 9),
    ("daytime", 13),
    ("ftp-data", 20),
    ("ftp", 21),
    ("ssh", 22),
    ("telnet", 23),
    ("smtp", 25),
    ("time", 37),
    ("whois", 43),
    ("tacacs", 49),
    ("domain", 53),
    ("bootps", 67),
    ("bootpc", 68),
    ("tftp", 69),
    ("gopher", 70),
    ("finger", 79),
    ("http", 80),
    ("kerberos", 88),
    ("pop3", 110),
    ("sunrpc", 111),
    ("auth", 113),
    ("nntp", 119),
    ("ntp", 123),
    ("netbios-ns", 137),
    ("netbios-dgm", 138),
    ("netbios-ssn", 139),
    ("imap2", 143),
    ("snmp", 161),
    ("snmp-trap", 162),
    ("bgp", 179),
    ("ldap", 389),
    ("https", 443),
    ("microsoft-ds", 445),
    ("isakmp", 500),
    ("syslog", 514),
    ("submission", 587),
    ("ldaps", 636),
    ("domain-s", 853),
    ("rsync", 873),
    ("imaps", 993),
    ("pop3s", 995),
    ("socks", 1080),
    ("openvpn", 1194),
    ("radius", 1812),
    ("nfs", 2049),
    ("mysql", 3306),
    ("ms-wbt-server", 3389),
    ("sip", 5060),
    ("mdns", 5353),
    ("postgresql", 5432),
    ("redis", 6379),
    ("http-alt", 8080),
    ("git", 9418),
];

/// Parses a port as iptables does (`xtables_parse_port`): a number 0-65535 in any C base, or
/// a service name.
pub fn parse_port(s: &str) -> Result<u16, String> {
    if let Some(n) = parse_c_uint(s) {
        return u16::try_from(n).map_err(|_| format!("port {s:?} is out of range 0-65535"));
    }
    SERVICES
        .iter()
        .find(|(n, _)| *n == s)
        .map(|(_, p)| *p)
        .ok_or_else(|| format!("invalid port/service {s:?} specified"))
}

/// An inclusive port range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PortRange {
    /// Lowest port.
    pub min: u16,
    /// Highest port.
    pub max: u16,
}

impl PortRange {
    /// Every port, `0:65535` (what an absent port option means).
    pub const ALL: PortRange = PortRange {
        min: 0,
        max: u16::MAX,
    };

    /// A single port.
    pub const fn single(p: u16) -> PortRange {
        PortRange { min: p, max: p }
    }

    /// Whether `p` is inside.
    #[inline]
    pub fn contains(&self, p: u16) -> bool {
        p >= self.min && p <= self.max
    }

    /// Whether this is `0:65535`.
    pub fn is_all(&self) -> bool {
        *self == PortRange::ALL
    }

    /// `p` or `min:max`, as iptables-save prints tcp/udp ports.
    pub fn colon_form(&self) -> String {
        if self.min == self.max {
            self.min.to_string()
        } else {
            format!("{}:{}", self.min, self.max)
        }
    }

    /// Parses `p`, `a:b`, `:b`, `a:` (libxt_tcp `parse_tcp_ports`), refusing min > max.
    pub fn parse_colon(s: &str) -> Result<PortRange, String> {
        match s.split_once(':') {
            None => Ok(PortRange::single(parse_port(s)?)),
            Some((a, b)) => {
                let min = if a.is_empty() { 0 } else { parse_port(a)? };
                let max = if b.is_empty() {
                    u16::MAX
                } else {
                    parse_port(b)?
                };
                if min > max {
                    return Err(format!("invalid portrange {s:?} (min > max)"));
                }
                Ok(PortRange { min, max })
            }
        }
    }
}

/// Formats a Unix time (seconds, UTC) like C's `ctime()` without the newline:
/// `Sun Nov 29 09:27:28 2026`. This is what the `# Generated by iptables-save …` line carries.
pub fn ctime(unix_secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = unix_secs / 86_400;
    let secs = unix_secs % 86_400;
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    let weekday = DAYS[(days % 7) as usize];
    // Civil-from-days (proleptic Gregorian), Howard Hinnant's algorithm.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if mo <= 2 { y + 1 } else { y };
    format!(
        "{weekday} {} {d:>2} {h:02}:{m:02}:{s:02} {y}",
        MONTHS[(mo - 1) as usize]
    )
}

/// The 2^31 scale of `-m statistic --probability`.
pub const STATISTIC_SCALE: u64 = 0x8000_0000;

/// Quantizes a probability like libxt_statistic: `lround(p * 2^31)`.
pub fn quantize_probability(p: f64) -> u32 {
    // f64::round rounds half away from zero, as lround does.
    (p * STATISTIC_SCALE as f64).round() as u32
}

/// Prints `stored / 2^31` with 11 decimals exactly as glibc's `printf("%.11f")` does
/// (exact decimal expansion, ties to even).
pub fn format_probability(stored: u32) -> String {
    // value = stored / 2^31; scaled = stored * 10^11 / 2^31 exactly, rounded half-even.
    let num = u128::from(stored) * 100_000_000_000u128;
    let den = 1u128 << 31;
    let mut q = num / den;
    let r = num % den;
    if r * 2 > den || (r * 2 == den && q % 2 == 1) {
        q += 1;
    }
    let int = q / 100_000_000_000;
    let frac = q % 100_000_000_000;
    format!("{int}.{frac:011}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probability_prints_like_iptables() {
        assert_eq!(
            format_probability(quantize_probability(0.3333333333)),
            "0.33333333349"
        );
        assert_eq!(
            format_probability(quantize_probability(0.5)),
            "0.50000000000"
        );
        assert_eq!(
            format_probability(quantize_probability(0.1)),
            "0.10000000009"
        );
        assert_eq!(
            format_probability(quantize_probability(0.25)),
            "0.25000000000"
        );
        assert_eq!(
            format_probability(quantize_probability(1.0)),
            "1.00000000000"
        );
        assert_eq!(
            format_probability(quantize_probability(0.2)),
            "0.20000000019"
        );
        // 2^-12 = 0.000244140625 is a tie at 11 decimals; glibc rounds to even.
        assert_eq!(format_probability(1 << 19), "0.00024414062");
    }

    #[test]
    fn ctime_matches_c() {
        // date -u -d @1795944448 → Sun Nov 29 09:27:28 UTC 2026
        assert_eq!(ctime(1_795_944_448), "Sun Nov 29 09:27:28 2026");
        assert_eq!(ctime(0), "Thu Jan  1 00:00:00 1970");
        assert_eq!(ctime(951_782_400), "Tue Feb 29 00:00:00 2000");
    }

    #[test]
    fn addresses_parse_like_iptables() {
        assert_eq!(parse_ipv4("10.1"), Some(Ipv4Addr::new(10, 1, 0, 0)));
        assert_eq!(parse_ipv4("10.0.0.256"), None);
        assert_eq!(parse_ipv4("a.b.c.d"), None);
        let n = parse_ipv4_net("10.1.2.3/255.255.0.0").unwrap().masked();
        assert_eq!(n.save_form(), "10.1.0.0/16");
        let odd = parse_ipv4_net("1.2.3.4/255.0.255.0").unwrap().masked();
        assert_eq!(odd.save_form(), "1.0.3.0/255.0.255.0");
        assert!(parse_ipv4_net("1.2.3.4/33").is_err());
        assert_eq!(
            Ipv4Net::new(Ipv4Addr::new(1, 2, 3, 4), 32).list_form(),
            "1.2.3.4"
        );
    }

    #[test]
    fn numbers_parse_like_strtoul() {
        assert_eq!(parse_c_uint("0x50"), Some(80));
        assert_eq!(parse_c_uint("010"), Some(8));
        assert_eq!(parse_c_uint("0"), Some(0));
        assert_eq!(parse_c_uint("-1"), None);
        assert_eq!(parse_port("domain"), Ok(53));
        assert!(parse_port("65536").is_err());
        assert_eq!(parse_protocol("TCP"), Ok(6));
        assert_eq!(parse_protocol("47"), Ok(47));
        assert_eq!(protocol_save_name(47), Some("gre"));
        assert_eq!(protocol_save_name(200), None);
        assert!(parse_protocol("256").is_err());
    }

    #[test]
    fn iface_patterns() {
        let p = IfacePattern::parse("veth+").unwrap();
        assert!(p.matches("veth1234"));
        assert!(!p.matches("eth0"));
        assert!(IfacePattern::parse("+").unwrap().matches("anything"));
        assert!(IfacePattern::parse("1234567890123456").is_err());
    }
}
