//! Small vocabulary types shared by the rule model, the text formats and evaluation: tables,
//! hooks, policies, IPv4 prefixes as iptables parses and prints them, interface patterns,
//! protocol and service names, and the `ctime()` timestamp of the iptables-save header.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

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

/// The address family of a ruleset: `iptables` (IPv4) or `ip6tables` (IPv6). Each family has
/// its own tables, chains and counters in the kernel (`NFPROTO_IPV4` / `NFPROTO_IPV6`), and
/// its own text: the addresses a rule takes, `-m icmp` against `-m icmp6`, the
/// `--reject-with` names, the `iptables-save` / `ip6tables-save` header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// `iptables`: IPv4 packets.
    #[default]
    Ipv4,
    /// `ip6tables`: IPv6 packets.
    Ipv6,
}

impl Family {
    /// The command's name: `iptables` or `ip6tables`.
    pub fn command(self) -> &'static str {
        match self {
            Family::Ipv4 => "iptables",
            Family::Ipv6 => "ip6tables",
        }
    }

    /// The family of an address.
    pub fn of(addr: IpAddr) -> Family {
        match addr {
            IpAddr::V4(_) => Family::Ipv4,
            IpAddr::V6(_) => Family::Ipv6,
        }
    }

    /// What a listing prints for a rule without `-s` / `-d`: `0.0.0.0/0` or `::/0`.
    pub fn any_net(self) -> &'static str {
        match self {
            Family::Ipv4 => "0.0.0.0/0",
            Family::Ipv6 => "::/0",
        }
    }
}

/// An IPv6 address with a netmask, as ip6tables' `-s`/`-d` and `--ctorigdst` take it.
///
/// The mask need not be contiguous (`fd00::/ffff:0:ffff::` is legal and printed as an
/// address).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv6Net {
    /// The address as a 128-bit number (network byte order, most significant first).
    pub addr: u128,
    /// The mask.
    pub mask: u128,
}

impl Ipv6Net {
    /// A prefix `addr/len` (the address is not masked).
    pub fn new(addr: Ipv6Addr, len: u8) -> Ipv6Net {
        Ipv6Net {
            addr: u128::from(addr),
            mask: prefix_mask6(len.min(128)),
        }
    }

    /// Whether `ip` is inside: `(ip & mask) == (addr & mask)`.
    #[inline]
    pub fn contains(&self, ip: u128) -> bool {
        (ip ^ self.addr) & self.mask == 0
    }

    /// The prefix length if the mask is contiguous (`xtables_ip6mask_to_cidr`).
    pub fn prefix_len(&self) -> Option<u8> {
        let m = self.mask;
        if m.leading_ones() + m.trailing_zeros() == 128 {
            Some(m.leading_ones() as u8)
        } else {
            None
        }
    }

    /// The same network with host bits cleared (what `-s`/`-d` store).
    pub fn masked(self) -> Ipv6Net {
        Ipv6Net {
            addr: self.addr & self.mask,
            mask: self.mask,
        }
    }

    /// The address as `Ipv6Addr`.
    pub fn ip(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.addr)
    }

    /// How ip6tables-save prints it: `addr/len` (also `/128`), or `addr/mask` for an odd
    /// mask (`save_ipv6_addr` in iptables' `nft-ipv6.c`).
    pub fn save_form(&self) -> String {
        match self.prefix_len() {
            Some(l) => format!("{}/{}", ipv6_to_numeric(self.ip()), l),
            None => format!(
                "{}/{}",
                ipv6_to_numeric(self.ip()),
                ipv6_to_numeric(Ipv6Addr::from(self.mask))
            ),
        }
    }

    /// How listings print it: the bare address for /128, else with `/len` or `/mask`
    /// (`xtables_ip6mask_to_numeric`).
    pub fn list_form(&self) -> String {
        match self.prefix_len() {
            Some(128) => ipv6_to_numeric(self.ip()),
            _ => self.save_form(),
        }
    }
}

/// An address with a netmask of either family: what a rule of an `iptables` ruleset
/// ([`IpNet::V4`]) or an `ip6tables` ruleset ([`IpNet::V6`]) holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpNet {
    /// An IPv4 network.
    V4(Ipv4Net),
    /// An IPv6 network.
    V6(Ipv6Net),
}

impl IpNet {
    /// Whether `ip` is inside; an address of the other family never is.
    #[inline]
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self, ip) {
            (IpNet::V4(n), IpAddr::V4(a)) => n.contains(u32::from(a)),
            (IpNet::V6(n), IpAddr::V6(a)) => n.contains(u128::from(a)),
            _ => false,
        }
    }

    /// Whether the mask is empty (`0.0.0.0/0`, `::/0`: every address).
    pub fn is_any(&self) -> bool {
        match self {
            IpNet::V4(n) => n.mask == 0,
            IpNet::V6(n) => n.mask == 0,
        }
    }

    /// Whether the mask selects one address (`/32`, `/128`).
    pub fn is_host(&self) -> bool {
        match self {
            IpNet::V4(n) => n.mask == u32::MAX,
            IpNet::V6(n) => n.mask == u128::MAX,
        }
    }

    /// The prefix length if the mask is contiguous.
    pub fn prefix_len(&self) -> Option<u8> {
        match self {
            IpNet::V4(n) => n.prefix_len(),
            IpNet::V6(n) => n.prefix_len(),
        }
    }

    /// The same network with host bits cleared.
    pub fn masked(self) -> IpNet {
        match self {
            IpNet::V4(n) => IpNet::V4(n.masked()),
            IpNet::V6(n) => IpNet::V6(n.masked()),
        }
    }

    /// The family of the network.
    pub fn family(&self) -> Family {
        match self {
            IpNet::V4(_) => Family::Ipv4,
            IpNet::V6(_) => Family::Ipv6,
        }
    }

    /// The IPv4 network, if it is one.
    pub fn v4(&self) -> Option<Ipv4Net> {
        match self {
            IpNet::V4(n) => Some(*n),
            IpNet::V6(_) => None,
        }
    }

    /// The save form of its family ([`Ipv4Net::save_form`], [`Ipv6Net::save_form`]).
    pub fn save_form(&self) -> String {
        match self {
            IpNet::V4(n) => n.save_form(),
            IpNet::V6(n) => n.save_form(),
        }
    }

    /// The listing form of its family.
    pub fn list_form(&self) -> String {
        match self {
            IpNet::V4(n) => n.list_form(),
            IpNet::V6(n) => n.list_form(),
        }
    }
}

impl From<Ipv4Net> for IpNet {
    fn from(n: Ipv4Net) -> IpNet {
        IpNet::V4(n)
    }
}

impl From<Ipv6Net> for IpNet {
    fn from(n: Ipv6Net) -> IpNet {
        IpNet::V6(n)
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.save_form())
    }
}

/// The netmask of an IPv6 prefix length 0..=128.
pub fn prefix_mask6(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len.min(128)))
    }
}

/// An IPv6 address as glibc's `inet_ntop(AF_INET6)` prints it, which is what every
/// iptables, ip6tables-save and conntrack text uses: lower-case hex, the longest run of two
/// or more zero groups (the first of equal runs) as `::`, and the last 32 bits dotted for
/// IPv4-mapped (`::ffff:a.b.c.d`) and IPv4-compatible (`::a.b.c.d`) addresses
/// (`inet_ntop6` in glibc's `resolv/inet_ntop.c`).
pub fn ipv6_to_numeric(a: Ipv6Addr) -> String {
    let w = a.segments();
    // The longest run of zero words of length >= 2 (glibc: best.len < 2 means none).
    let (mut best, mut cur): ((usize, usize), Option<(usize, usize)>) = ((0, 0), None);
    for (i, &x) in w.iter().enumerate() {
        if x == 0 {
            cur = Some(match cur {
                Some((b, l)) => (b, l + 1),
                None => (i, 1),
            });
        } else {
            cur = None;
        }
        if let Some((b, l)) = cur {
            if l > best.1 {
                best = (b, l);
            }
        }
    }
    let run = (best.1 >= 2).then_some(best);
    let in_run = |i: usize| run.is_some_and(|(b, l)| i >= b && i < b + l);
    let mut s = String::with_capacity(39);
    for i in 0..8 {
        if in_run(i) {
            if run.is_some_and(|(b, _)| b == i) {
                s.push(':');
            }
            continue;
        }
        if i != 0 {
            s.push(':');
        }
        // An embedded IPv4 address: ::a.b.c.d or ::ffff:a.b.c.d.
        if i == 6 && run.is_some_and(|(b, l)| b == 0 && (l == 6 || (l == 5 && w[5] == 0xffff))) {
            let _ = fmt::Write::write_fmt(
                &mut s,
                format_args!(
                    "{}.{}.{}.{}",
                    w[6] >> 8,
                    w[6] & 0xff,
                    w[7] >> 8,
                    w[7] & 0xff
                ),
            );
            return s;
        }
        let _ = fmt::Write::write_fmt(&mut s, format_args!("{:x}", w[i]));
    }
    if run.is_some_and(|(b, l)| b + l == 8) {
        s.push(':');
    }
    s
}

/// Parses an IPv6 address the way `inet_pton(AF_INET6)` does (hex groups, one `::`, a
/// dotted IPv4 tail). Host names are not resolved.
pub fn parse_ipv6(s: &str) -> Option<Ipv6Addr> {
    s.parse().ok()
}

/// Parses `addr[/len|/mask]` for ip6tables (`xtables_ip6parse_any`: a mask is a prefix
/// length 0-128 or an address). The address is returned as given.
pub fn parse_ipv6_net(s: &str) -> Result<Ipv6Net, String> {
    let (a, m) = match s.split_once('/') {
        Some((a, m)) => (a, Some(m)),
        None => (s, None),
    };
    let addr = parse_ipv6(a).ok_or_else(|| {
        format!("{a:?} is not a numeric IPv6 address (host names are not resolved)")
    })?;
    let mask = match m {
        None => u128::MAX,
        Some(m) if m.contains(':') => {
            u128::from(parse_ipv6(m).ok_or_else(|| format!("{m:?} is not a valid netmask"))?)
        }
        Some(m) => {
            let len: u8 =
                m.parse().ok().filter(|l| *l <= 128).ok_or_else(|| {
                    format!("invalid mask `{m}' specified (a prefix length 0-128)")
                })?;
            prefix_mask6(len)
        }
    };
    Ok(Ipv6Net {
        addr: u128::from(addr),
        mask,
    })
}

/// Parses `addr[/mask]` of `family` ([`parse_ipv4_net`] or [`parse_ipv6_net`]).
pub fn parse_ip_net(family: Family, s: &str) -> Result<IpNet, String> {
    match family {
        Family::Ipv4 => parse_ipv4_net(s).map(IpNet::V4),
        Family::Ipv6 => parse_ipv6_net(s).map(IpNet::V6),
    }
}

/// Parses a bare address of `family`.
pub fn parse_ip(family: Family, s: &str) -> Option<IpAddr> {
    match family {
        Family::Ipv4 => parse_ipv4(s).map(IpAddr::V4),
        Family::Ipv6 => parse_ipv6(s).map(IpAddr::V6),
    }
}

/// An address as a number: an IPv4 address in the low 32 bits, an IPv6 address whole. A
/// ruleset holds addresses of one family, so the two never meet.
pub fn ip_num(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(v) => u128::from(u32::from(v)),
        IpAddr::V6(v) => u128::from(v),
    }
}

/// The address of `family` whose [`ip_num`] is `n`.
pub fn ip_from_num(family: Family, n: u128) -> IpAddr {
    match family {
        Family::Ipv4 => IpAddr::V4(Ipv4Addr::from(n as u32)),
        Family::Ipv6 => IpAddr::V6(Ipv6Addr::from(n)),
    }
}

/// An address as iptables prints it (dotted IPv4, [`ipv6_to_numeric`] for IPv6).
pub fn ip_to_numeric(a: IpAddr) -> String {
    match a {
        IpAddr::V4(v) => v.to_string(),
        IpAddr::V6(v) => ipv6_to_numeric(v),
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
    for (n, p) in s.split('.').enumerate() {
        if n == 4 || p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let v: u16 = p.parse().ok()?;
        if v > 255 {
            return None;
        }
        parts[n] = v as u8;
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
/// Stored inline (at most 15 bytes, IFNAMSIZ) so rules stay compact.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct IfacePattern {
    len: u8,
    bytes: [u8; 15],
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
        let mut bytes = [0u8; 15];
        bytes[..s.len()].copy_from_slice(s.as_bytes());
        Ok(IfacePattern {
            len: s.len() as u8,
            bytes,
        })
    }

    /// The pattern as given (`eth0`, `veth+`, `+`).
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("")
    }

    /// Whether the pattern matches `name` (kernel `ifname_compare`: prefix match for `+`).
    #[inline]
    pub fn matches(&self, name: &str) -> bool {
        let p = &self.bytes[..usize::from(self.len)];
        match p.split_last() {
            Some((b'+', prefix)) => name.as_bytes().starts_with(prefix),
            _ => name.as_bytes() == p,
        }
    }

    /// Whether this is the match-everything pattern `+`.
    pub fn is_any(&self) -> bool {
        self.len == 1 && self.bytes[0] == b'+'
    }
}

impl fmt::Debug for IfacePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl fmt::Display for IfacePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
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
    // strtoul skips leading white space and takes one `+`.
    let s = s.trim_start();
    let s = s.strip_prefix('+').unwrap_or(s);
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

/// Service names of `/etc/services` (netbase), with the protocols each is defined for
/// (`T`cp, `U`dp, `S`ctp): `getservbyname(name, proto)` for ports given by name.
const SERVICES: &[(&str, u16, &str)] = &[
    ("tcpmux", 1, "T"),
    ("echo", 7, "TU"),
    ("discard", 9, "TU"),
    ("sink", 9, "TU"),
    ("null", 9, "TU"),
    ("systat", 11, "T"),
    ("users", 11, "T"),
    ("daytime", 13, "TU"),
    ("netstat", 15, "T"),
    ("qotd", 17, "T"),
    ("quote", 17, "T"),
    ("chargen", 19, "TU"),
    ("ttytst", 19, "TU"),
    ("source", 19, "TU"),
    ("ftp-data", 20, "T"),
    ("ftp", 21, "T"),
    ("fsp", 21, "U"),
    ("fspd", 21, "U"),
    ("ssh", 22, "T"),
    ("telnet", 23, "T"),
    ("smtp", 25, "T"),
    ("mail", 25, "T"),
    ("time", 37, "TU"),
    ("timserver", 37, "TU"),
    ("whois", 43, "T"),
    ("nicname", 43, "T"),
    ("tacacs", 49, "TU"),
    ("domain", 53, "TU"),
    ("bootps", 67, "U"),
    ("bootpc", 68, "U"),
    ("tftp", 69, "U"),
    ("gopher", 70, "T"),
    ("finger", 79, "T"),
    ("http", 80, "T"),
    ("www", 80, "T"),
    ("kerberos", 88, "TU"),
    ("kerberos5", 88, "TU"),
    ("krb5", 88, "TU"),
    ("kerberos-sec", 88, "TU"),
    ("iso-tsap", 102, "T"),
    ("tsap", 102, "T"),
    ("acr-nema", 104, "T"),
    ("dicom", 104, "T"),
    ("pop3", 110, "T"),
    ("pop-3", 110, "T"),
    ("sunrpc", 111, "TU"),
    ("portmapper", 111, "TU"),
    ("auth", 113, "T"),
    ("authentication", 113, "T"),
    ("tap", 113, "T"),
    ("ident", 113, "T"),
    ("nntp", 119, "T"),
    ("readnews", 119, "T"),
    ("untp", 119, "T"),
    ("ntp", 123, "U"),
    ("epmap", 135, "T"),
    ("loc-srv", 135, "T"),
    ("netbios-ns", 137, "U"),
    ("netbios-dgm", 138, "U"),
    ("netbios-ssn", 139, "T"),
    ("imap2", 143, "T"),
    ("imap", 143, "T"),
    ("snmp", 161, "TU"),
    ("snmp-trap", 162, "TU"),
    ("snmptrap", 162, "TU"),
    ("cmip-man", 163, "TU"),
    ("cmip-agent", 164, "TU"),
    ("mailq", 174, "T"),
    ("xdmcp", 177, "U"),
    ("bgp", 179, "T"),
    ("smux", 199, "T"),
    ("qmtp", 209, "T"),
    ("z3950", 210, "T"),
    ("wais", 210, "T"),
    ("ipx", 213, "U"),
    ("ptp-event", 319, "U"),
    ("ptp-general", 320, "U"),
    ("pawserv", 345, "T"),
    ("zserv", 346, "T"),
    ("rpc2portmap", 369, "TU"),
    ("codaauth2", 370, "TU"),
    ("clearcase", 371, "U"),
    ("Clearcase", 371, "U"),
    ("ldap", 389, "TU"),
    ("svrloc", 427, "TU"),
    ("https", 443, "TU"),
    ("snpp", 444, "T"),
    ("microsoft-ds", 445, "T"),
    ("kpasswd", 464, "TU"),
    ("submissions", 465, "T"),
    ("ssmtp", 465, "T"),
    ("smtps", 465, "T"),
    ("urd", 465, "T"),
    ("saft", 487, "T"),
    ("isakmp", 500, "U"),
    ("rtsp", 554, "TU"),
    ("nqs", 607, "T"),
    ("asf-rmcp", 623, "U"),
    ("qmqp", 628, "T"),
    ("ipp", 631, "T"),
    ("ldp", 646, "TU"),
    ("exec", 512, "T"),
    ("biff", 512, "U"),
    ("comsat", 512, "U"),
    ("login", 513, "T"),
    ("who", 513, "U"),
    ("whod", 513, "U"),
    ("shell", 514, "T"),
    ("cmd", 514, "T"),
    ("syslog", 514, "TU"),
    ("printer", 515, "T"),
    ("spooler", 515, "T"),
    ("talk", 517, "U"),
    ("ntalk", 518, "U"),
    ("route", 520, "U"),
    ("router", 520, "U"),
    ("routed", 520, "U"),
    ("gdomap", 538, "TU"),
    ("uucp", 540, "T"),
    ("uucpd", 540, "T"),
    ("klogin", 543, "T"),
    ("kshell", 544, "T"),
    ("krcmd", 544, "T"),
    ("dhcpv6-client", 546, "U"),
    ("dhcpv6-server", 547, "U"),
    ("afpovertcp", 548, "T"),
    ("nntps", 563, "T"),
    ("snntp", 563, "T"),
    ("submission", 587, "T"),
    ("ldaps", 636, "TU"),
    ("tinc", 655, "TU"),
    ("silc", 706, "T"),
    ("kerberos-adm", 749, "T"),
    ("domain-s", 853, "TU"),
    ("rsync", 873, "T"),
    ("ftps-data", 989, "T"),
    ("ftps", 990, "T"),
    ("telnets", 992, "T"),
    ("imaps", 993, "T"),
    ("pop3s", 995, "T"),
    ("socks", 1080, "T"),
    ("proofd", 1093, "T"),
    ("rootd", 1094, "T"),
    ("openvpn", 1194, "TU"),
    ("rmiregistry", 1099, "T"),
    ("lotusnote", 1352, "T"),
    ("lotusnotes", 1352, "T"),
    ("ms-sql-s", 1433, "T"),
    ("ms-sql-m", 1434, "U"),
    ("ingreslock", 1524, "T"),
    ("datametrics", 1645, "TU"),
    ("old-radius", 1645, "TU"),
    ("sa-msg-port", 1646, "TU"),
    ("old-radacct", 1646, "TU"),
    ("kermit", 1649, "T"),
    ("groupwise", 1677, "T"),
    ("l2f", 1701, "U"),
    ("l2tp", 1701, "U"),
    ("radius", 1812, "TU"),
    ("radius-acct", 1813, "TU"),
    ("radacct", 1813, "TU"),
    ("cisco-sccp", 2000, "T"),
    ("nfs", 2049, "TU"),
    ("gnunet", 2086, "TU"),
    ("rtcm-sc104", 2101, "TU"),
    ("gsigatekeeper", 2119, "T"),
    ("gris", 2135, "T"),
    ("cvspserver", 2401, "T"),
    ("venus", 2430, "TU"),
    ("venus-se", 2431, "TU"),
    ("codasrv", 2432, "TU"),
    ("codasrv-se", 2433, "TU"),
    ("mon", 2583, "TU"),
    ("dict", 2628, "T"),
    ("f5-globalsite", 2792, "T"),
    ("gsiftp", 2811, "T"),
    ("gpsd", 2947, "T"),
    ("gds-db", 3050, "T"),
    ("gds_db", 3050, "T"),
    ("icpv2", 3130, "U"),
    ("icp", 3130, "U"),
    ("isns", 3205, "TU"),
    ("iscsi-target", 3260, "T"),
    ("mysql", 3306, "T"),
    ("ms-wbt-server", 3389, "T"),
    ("nut", 3493, "TU"),
    ("distcc", 3632, "T"),
    ("daap", 3689, "T"),
    ("svn", 3690, "T"),
    ("subversion", 3690, "T"),
    ("suucp", 4031, "T"),
    ("sysrqd", 4094, "T"),
    ("sieve", 4190, "T"),
    ("epmd", 4369, "T"),
    ("remctl", 4373, "T"),
    ("f5-iquery", 4353, "T"),
    ("ntske", 4460, "T"),
    ("ipsec-nat-t", 4500, "U"),
    ("iax", 4569, "U"),
    ("mtn", 4691, "T"),
    ("radmin-port", 4899, "T"),
    ("sip", 5060, "TU"),
    ("sip-tls", 5061, "TU"),
    ("xmpp-client", 5222, "T"),
    ("jabber-client", 5222, "T"),
    ("xmpp-server", 5269, "T"),
    ("jabber-server", 5269, "T"),
    ("cfengine", 5308, "T"),
    ("mdns", 5353, "U"),
    ("postgresql", 5432, "T"),
    ("postgres", 5432, "T"),
    ("freeciv", 5556, "T"),
    ("rptp", 5556, "T"),
    ("amqps", 5671, "T"),
    ("amqp", 5672, "TS"),
    ("x11", 6000, "T"),
    ("x11-0", 6000, "T"),
    ("x11-1", 6001, "T"),
    ("x11-2", 6002, "T"),
    ("x11-3", 6003, "T"),
    ("x11-4", 6004, "T"),
    ("x11-5", 6005, "T"),
    ("x11-6", 6006, "T"),
    ("x11-7", 6007, "T"),
    ("gnutella-svc", 6346, "TU"),
    ("gnutella-rtr", 6347, "TU"),
    ("redis", 6379, "T"),
    ("sge-qmaster", 6444, "T"),
    ("sge_qmaster", 6444, "T"),
    ("sge-execd", 6445, "T"),
    ("sge_execd", 6445, "T"),
    ("mysql-proxy", 6446, "T"),
    ("babel", 6696, "U"),
    ("ircs-u", 6697, "T"),
    ("bbs", 7000, "T"),
    ("afs3-fileserver", 7000, "U"),
    ("afs3-callback", 7001, "U"),
    ("afs3-prserver", 7002, "U"),
    ("afs3-vlserver", 7003, "U"),
    ("afs3-kaserver", 7004, "U"),
    ("afs3-volser", 7005, "U"),
    ("afs3-bos", 7007, "U"),
    ("afs3-update", 7008, "U"),
    ("afs3-rmtsys", 7009, "U"),
    ("font-service", 7100, "T"),
    ("xfs", 7100, "T"),
    ("http-alt", 8080, "T"),
    ("webcache", 8080, "T"),
    ("puppet", 8140, "T"),
    ("bacula-dir", 9101, "T"),
    ("bacula-fd", 9102, "T"),
    ("bacula-sd", 9103, "T"),
    ("xmms2", 9667, "T"),
    ("nbd", 10809, "T"),
    ("zabbix-agent", 10050, "T"),
    ("zabbix-trapper", 10051, "T"),
    ("amanda", 10080, "T"),
    ("dicom", 11112, "T"),
    ("hkp", 11371, "T"),
    ("db-lsp", 17500, "T"),
    ("dcap", 22125, "T"),
    ("gsidcap", 22128, "T"),
    ("wnn6", 22273, "T"),
    ("kerberos4", 750, "TU"),
    ("kerberos-iv", 750, "TU"),
    ("kdc", 750, "TU"),
    ("kerberos-master", 751, "TU"),
    ("kerberos_master", 751, "U"),
    ("passwd-server", 752, "U"),
    ("passwd_server", 752, "U"),
    ("krb-prop", 754, "T"),
    ("krb_prop", 754, "T"),
    ("krb5_prop", 754, "T"),
    ("hprop", 754, "T"),
    ("zephyr-srv", 2102, "U"),
    ("zephyr-clt", 2103, "U"),
    ("zephyr-hm", 2104, "U"),
    ("iprop", 2121, "T"),
    ("supfilesrv", 871, "T"),
    ("supfiledbg", 1127, "T"),
    ("poppassd", 106, "T"),
    ("moira-db", 775, "T"),
    ("moira_db", 775, "T"),
    ("moira-update", 777, "T"),
    ("moira_update", 777, "T"),
    ("moira-ureg", 779, "U"),
    ("moira_ureg", 779, "U"),
    ("spamd", 783, "T"),
    ("skkserv", 1178, "T"),
    ("predict", 1210, "U"),
    ("rmtcfg", 1236, "T"),
    ("xtel", 1313, "T"),
    ("xtelw", 1314, "T"),
    ("zebrasrv", 2600, "T"),
    ("zebra", 2601, "T"),
    ("ripd", 2602, "T"),
    ("ripngd", 2603, "T"),
    ("ospfd", 2604, "T"),
    ("bgpd", 2605, "T"),
    ("ospf6d", 2606, "T"),
    ("ospfapi", 2607, "T"),
    ("isisd", 2608, "T"),
    ("fax", 4557, "T"),
    ("hylafax", 4559, "T"),
    ("munin", 4949, "T"),
    ("lrrd", 4949, "T"),
    ("rplay", 5555, "U"),
    ("nrpe", 5666, "T"),
    ("nsca", 5667, "T"),
    ("canna", 5680, "T"),
    ("syslog-tls", 6514, "T"),
    ("sane-port", 6566, "T"),
    ("sane", 6566, "T"),
    ("saned", 6566, "T"),
    ("ircd", 6667, "T"),
    ("zope-ftp", 8021, "T"),
    ("tproxy", 8081, "T"),
    ("omniorb", 8088, "T"),
    ("clc-build-daemon", 8990, "T"),
    ("xinetd", 9098, "T"),
    ("git", 9418, "T"),
    ("zope", 9673, "T"),
    ("webmin", 10000, "T"),
    ("kamanda", 10081, "T"),
    ("amandaidx", 10082, "T"),
    ("amidxtape", 10083, "T"),
    ("sgi-cmsd", 17001, "U"),
    ("sgi-crsd", 17002, "U"),
    ("sgi-gcd", 17003, "U"),
    ("sgi-cad", 17004, "T"),
    ("binkp", 24554, "T"),
    ("asp", 27374, "TU"),
    ("csync2", 30865, "T"),
    ("dircproxy", 57000, "T"),
    ("tfido", 60177, "T"),
    ("fido", 60179, "T"),
];

fn service_port(name: &str, proto: Option<u8>) -> Option<u16> {
    let flag = match proto {
        None => None,
        Some(6) => Some('T'),
        Some(17) => Some('U'),
        Some(132) => Some('S'),
        Some(_) => Some('?'),
    };
    SERVICES
        .iter()
        .find(|(n, _, f)| *n == name && flag.is_none_or(|c| f.contains(c)))
        .map(|(_, p, _)| *p)
}

/// Parses a port as libxt_tcp, libxt_sctp and libxt_multiport do (`xtables_parse_port`): a
/// number 0-65535 in any C base, or a service name defined for protocol `proto`.
pub fn parse_port_for(s: &str, proto: Option<u8>) -> Result<u16, String> {
    if let Some(n) = parse_c_uint(s) {
        return u16::try_from(n).map_err(|_| format!("port {s:?} is out of range 0-65535"));
    }
    service_port(s, proto).ok_or_else(|| format!("invalid port/service {s:?} specified"))
}

/// [`parse_port_for`] with TCP service names.
pub fn parse_port(s: &str) -> Result<u16, String> {
    parse_port_for(s, Some(6))
}

/// Parses a port the way libxt_udp and libxt_conntrack do: decimal only (`010` is 10,
/// `0x50` is not a number), or a service name.
pub fn parse_port_decimal(s: &str) -> Result<u16, String> {
    let t = s.trim_start();
    let t = t.strip_prefix('+').unwrap_or(t);
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t
            .parse::<u16>()
            .map_err(|_| format!("port {s:?} is out of range 0-65535"));
    }
    service_port(s, None).ok_or_else(|| format!("port {s:?} does not resolve to anything"))
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

    /// Parses `p`, `a:b`, `:b`, `a:` (libxt_tcp `parse_tcp_ports`), refusing min > max,
    /// with service names of protocol `proto`.
    pub fn parse_colon(s: &str, proto: Option<u8>) -> Result<PortRange, String> {
        match s.split_once(':') {
            None => Ok(PortRange::single(parse_port_for(s, proto)?)),
            Some((a, b)) => {
                let min = if a.is_empty() {
                    0
                } else {
                    parse_port_for(a, proto)?
                };
                let max = if b.is_empty() {
                    u16::MAX
                } else {
                    parse_port_for(b, proto)?
                };
                if min > max {
                    return Err(format!("invalid portrange {s:?} (min > max)"));
                }
                Ok(PortRange { min, max })
            }
        }
    }
}

pub use sim_core::time::ctime;

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
