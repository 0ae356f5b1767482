//! The rule model: what one `-A CHAIN …` line means once parsed.
//!
//! A [`Rule`] is the IP-header part ([`IpMatch`]: `-s`, `-d`, `-i`, `-o`, `-p`, `-f`), a list of
//! extension matches in the order they were given ([`Match`]), and a [`Target`]. Values are kept
//! the way the kernel stores them (a probability as `round(p × 2^31)`, MARK as value/mask), so
//! printing them back gives what `iptables-save` prints and evaluation does what the kernel
//! does. Where iptables-save needs to know how a value was spelled (`-m state` vs
//! `-m conntrack --ctstate`, `-j NOTRACK` vs `-j CT --notrack`), the rule keeps that too.

use std::net::IpAddr;

use crate::types::{ip_to_numeric, Counters, Family, IfacePattern, IpNet, PortRange};

/// A binding resolved by the ruleset when the rule is committed (a chain id, a `recent`
/// table, a counter slot). It never takes part in comparing rules (`-D` by specification).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Bind {
    pub idx: u32,
    pub uid: u64,
}

impl PartialEq for Bind {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for Bind {}

/// One rule.
#[derive(Clone, Debug)]
pub struct Rule {
    /// The IP header part.
    pub ip: IpMatch,
    /// Extension matches, in order.
    pub matches: Vec<Match>,
    /// What to do when everything matches.
    pub target: Target,
    /// Counters given with `-c` or `[p:b]` in a restore with counters: the starting values.
    pub initial_counters: Counters,
    /// The counter slot of this rule in a `RulesetState`.
    pub(crate) slot: Bind,
}

impl Rule {
    /// Whether two rules are the same specification (what `-D CHAIN rule-spec` compares):
    /// everything but counters.
    pub fn same_spec(&self, other: &Rule) -> bool {
        self.ip == other.ip && self.matches == other.matches && self.target == other.target
    }

    /// The chain this rule jumps or goes to, if any.
    pub fn jump_target(&self) -> Option<&str> {
        match &self.target {
            Target::Jump(c) | Target::Goto(c) => Some(&c.name),
            _ => None,
        }
    }
}

/// The IP-header part of a rule (`struct ipt_ip`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IpMatch {
    /// `-s`, with host bits cleared (of the ruleset's family).
    pub src: Option<IpNet>,
    /// `! -s`.
    pub src_inv: bool,
    /// `-d`, with host bits cleared.
    pub dst: Option<IpNet>,
    /// `! -d`.
    pub dst_inv: bool,
    /// `-i`.
    pub iif: Option<IfacePattern>,
    /// `! -i`.
    pub iif_inv: bool,
    /// `-o`.
    pub oif: Option<IfacePattern>,
    /// `! -o`.
    pub oif_inv: bool,
    /// `-p`; 0 means any protocol.
    pub proto: u8,
    /// `! -p`.
    pub proto_inv: bool,
    /// `-f` (`Some(false)`) or `! -f` (`Some(true)`); IPv4 only (ip6tables refuses it).
    pub frag: Option<bool>,
}

/// An extension match (`-m NAME …`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Match {
    /// `-m tcp` (also loaded implicitly by `-p tcp --dport …`).
    Tcp(TcpMatch),
    /// `-m udp`.
    Udp(PortsMatch),
    /// `-m sctp` (ports only).
    Sctp(PortsMatch),
    /// `-m icmp --icmp-type` (iptables).
    Icmp(IcmpMatch),
    /// `-m icmp6 --icmpv6-type` (ip6tables).
    Icmp6(IcmpMatch),
    /// `-m multiport`.
    Multiport(MultiportMatch),
    /// `-m statistic`.
    Statistic(StatisticMatch),
    /// `-m mark`.
    Mark(MarkMatch),
    /// `-m conntrack` (and `-m state`, which iptables implements as an alias of it).
    Conntrack(Box<ConntrackMatch>),
    /// `-m addrtype`.
    Addrtype(AddrtypeMatch),
    /// `-m comment --comment`.
    Comment(String),
    /// `-m recent`.
    Recent(Box<RecentMatch>),
    /// `-m nfacct --nfacct-name`.
    Nfacct(NfacctMatch),
    /// `-m set --match-set NAME FLAGS` (xt_set): the packet's element is in an ipset.
    Set(Box<SetMatch>),
    /// `-m physdev`: the bridge ports of a bridged packet (xt_physdev).
    Physdev(PhysdevMatch),
}

impl Match {
    /// The name after `-m` in iptables-save output.
    pub fn name(&self) -> &'static str {
        match self {
            Match::Tcp(_) => "tcp",
            Match::Udp(_) => "udp",
            Match::Sctp(_) => "sctp",
            Match::Icmp(_) => "icmp",
            Match::Icmp6(_) => "icmp6",
            Match::Multiport(_) => "multiport",
            Match::Statistic(_) => "statistic",
            Match::Mark(_) => "mark",
            Match::Conntrack(c) if c.state_alias => "state",
            Match::Conntrack(_) => "conntrack",
            Match::Addrtype(_) => "addrtype",
            Match::Comment(_) => "comment",
            Match::Recent(_) => "recent",
            Match::Nfacct(_) => "nfacct",
            Match::Set(_) => "set",
            Match::Physdev(_) => "physdev",
        }
    }
}

/// `-m physdev` (xt_physdev, `struct xt_physdev_info`): each option present with its `!`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PhysdevMatch {
    /// `--physdev-in NAME` (`+` a wildcard suffix), inverted.
    pub physdev_in: Option<(IfacePattern, bool)>,
    /// `--physdev-out NAME`, inverted.
    pub physdev_out: Option<(IfacePattern, bool)>,
    /// `--physdev-is-in`, inverted.
    pub is_in: Option<bool>,
    /// `--physdev-is-out`, inverted.
    pub is_out: Option<bool>,
    /// `--physdev-is-bridged`, inverted.
    pub is_bridged: Option<bool>,
}

/// `-m tcp` (xt_tcpudp).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpMatch {
    /// `--sport`.
    pub sport: PortRange,
    /// `! --sport`.
    pub sport_inv: bool,
    /// `--dport`.
    pub dport: PortRange,
    /// `! --dport`.
    pub dport_inv: bool,
    /// `--tcp-flags MASK COMP` (or `--syn`): (mask, comp, inverted).
    pub flags: Option<(u8, u8, bool)>,
}

/// `-m udp` / `-m sctp`: ports only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortsMatch {
    /// `--sport`.
    pub sport: PortRange,
    /// `! --sport`.
    pub sport_inv: bool,
    /// `--dport`.
    pub dport: PortRange,
    /// `! --dport`.
    pub dport_inv: bool,
}

/// `-m icmp --icmp-type T[/C]` or `-m icmp6 --icmpv6-type T[/C]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IcmpMatch {
    /// Type, 0xff meaning `any`.
    pub icmp_type: u8,
    /// Lowest code.
    pub code_min: u8,
    /// Highest code.
    pub code_max: u8,
    /// `! --icmp-type`.
    pub inv: bool,
}

/// Which ports `-m multiport` looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MultiportKind {
    /// `--sports`.
    Source,
    /// `--dports`.
    Destination,
    /// `--ports`: either.
    Either,
}

/// `-m multiport` (revision 1: ranges and inversion).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultiportMatch {
    /// Which port to compare.
    pub kind: MultiportKind,
    /// The ports and ranges, at most 15 slots (a range takes two).
    pub ports: Vec<PortRange>,
    /// `!`.
    pub inv: bool,
}

/// The mode of `-m statistic`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatisticMode {
    /// `--mode random --probability p`, stored as `round(p × 2^31)`.
    Random {
        /// The quantized probability.
        probability: u32,
    },
    /// `--mode nth --every n --packet p`.
    Nth {
        /// n (at least 1).
        every: u32,
        /// p (below n).
        packet: u32,
    },
}

/// `-m statistic`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatisticMatch {
    /// Random or nth.
    pub mode: StatisticMode,
    /// `! --probability` / `! --every`.
    pub inv: bool,
    /// The per-rule counter of nth mode.
    pub(crate) slot: Bind,
}

/// `-m mark --mark v[/m]`: matches `(mark & m) == v`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkMatch {
    /// v.
    pub value: u32,
    /// m.
    pub mask: u32,
    /// `!`.
    pub inv: bool,
}

/// Conntrack states as xt_conntrack numbers them (`XT_CONNTRACK_STATE_*`).
pub mod ctstate {
    /// `INVALID`: no conntrack entry.
    pub const INVALID: u16 = 1 << 0;
    /// `ESTABLISHED` (`XT_CONNTRACK_STATE_BIT(IP_CT_ESTABLISHED)`).
    pub const ESTABLISHED: u16 = 1 << 1;
    /// `RELATED`.
    pub const RELATED: u16 = 1 << 2;
    /// `NEW`.
    pub const NEW: u16 = 1 << 3;
    /// `SNAT`: the entry's status has IPS_SRC_NAT.
    pub const SNAT: u16 = 1 << 6;
    /// `DNAT`: the entry's status has IPS_DST_NAT.
    pub const DNAT: u16 = 1 << 7;
    /// `UNTRACKED`: CT --notrack.
    pub const UNTRACKED: u16 = 1 << 8;
    /// Names in the order iptables prints them.
    pub const NAMES: [(&str, u16); 7] = [
        ("INVALID", INVALID),
        ("NEW", NEW),
        ("RELATED", RELATED),
        ("ESTABLISHED", ESTABLISHED),
        ("UNTRACKED", UNTRACKED),
        ("SNAT", SNAT),
        ("DNAT", DNAT),
    ];
}

/// Conntrack entry status bits (`IPS_*`), as `--ctstatus` and [`crate::CtInfo`] use them.
pub mod ctstatus {
    /// `IPS_EXPECTED`.
    pub const EXPECTED: u32 = 1 << 0;
    /// `IPS_SEEN_REPLY`.
    pub const SEEN_REPLY: u32 = 1 << 1;
    /// `IPS_ASSURED`.
    pub const ASSURED: u32 = 1 << 2;
    /// `IPS_CONFIRMED`.
    pub const CONFIRMED: u32 = 1 << 3;
    /// `IPS_SRC_NAT`: the original source was rewritten.
    pub const SRC_NAT: u32 = 1 << 4;
    /// `IPS_DST_NAT`: the original destination was rewritten.
    pub const DST_NAT: u32 = 1 << 5;
    /// Names `--ctstatus` takes and prints, in print order.
    pub const NAMES: [(&str, u32); 4] = [
        ("EXPECTED", EXPECTED),
        ("SEEN_REPLY", SEEN_REPLY),
        ("ASSURED", ASSURED),
        ("CONFIRMED", CONFIRMED),
    ];
}

/// Direction of a packet relative to its conntrack entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CtDirection {
    /// Same direction as the packet that created the entry.
    Original,
    /// The other way.
    Reply,
}

/// `-m conntrack` (revision 3) or `-m state`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConntrackMatch {
    /// Written as `-m state --state` (iptables' alias); printed back that way.
    pub state_alias: bool,
    /// `--ctstate` mask of [`ctstate`] bits, inverted.
    pub state: Option<(u16, bool)>,
    /// `--ctproto`.
    pub proto: Option<(u8, bool)>,
    /// `--ctorigsrc`.
    pub orig_src: Option<(IpNet, bool)>,
    /// `--ctorigdst`.
    pub orig_dst: Option<(IpNet, bool)>,
    /// `--ctreplsrc`.
    pub repl_src: Option<(IpNet, bool)>,
    /// `--ctrepldst`.
    pub repl_dst: Option<(IpNet, bool)>,
    /// `--ctorigsrcport`.
    pub orig_src_port: Option<(PortRange, bool)>,
    /// `--ctorigdstport`.
    pub orig_dst_port: Option<(PortRange, bool)>,
    /// `--ctreplsrcport`.
    pub repl_src_port: Option<(PortRange, bool)>,
    /// `--ctrepldstport`.
    pub repl_dst_port: Option<(PortRange, bool)>,
    /// `--ctstatus` mask of [`ctstatus`] bits, inverted.
    pub status: Option<(u32, bool)>,
    /// `--ctexpire min[:max]` in seconds, inverted.
    pub expires: Option<(u32, u32, bool)>,
    /// `--ctdir`.
    pub dir: Option<CtDirection>,
}

/// Address types of `-m addrtype`, as the kernel's `RTN_*` numbers (bit `1 << type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AddrType {
    /// RTN_UNSPEC.
    Unspec = 0,
    /// RTN_UNICAST: a gateway or direct route.
    Unicast = 1,
    /// RTN_LOCAL: an address of this host.
    Local = 2,
    /// RTN_BROADCAST.
    Broadcast = 3,
    /// RTN_ANYCAST.
    Anycast = 4,
    /// RTN_MULTICAST.
    Multicast = 5,
    /// RTN_BLACKHOLE.
    Blackhole = 6,
    /// RTN_UNREACHABLE.
    Unreachable = 7,
    /// RTN_PROHIBIT.
    Prohibit = 8,
    /// RTN_THROW.
    Throw = 9,
    /// RTN_NAT.
    Nat = 10,
    /// RTN_XRESOLVE.
    Xresolve = 11,
}

impl AddrType {
    /// All types in bit order (the order iptables prints them).
    pub const ALL: [AddrType; 12] = [
        AddrType::Unspec,
        AddrType::Unicast,
        AddrType::Local,
        AddrType::Broadcast,
        AddrType::Anycast,
        AddrType::Multicast,
        AddrType::Blackhole,
        AddrType::Unreachable,
        AddrType::Prohibit,
        AddrType::Throw,
        AddrType::Nat,
        AddrType::Xresolve,
    ];

    /// The upper-case name iptables uses.
    pub fn name(self) -> &'static str {
        match self {
            AddrType::Unspec => "UNSPEC",
            AddrType::Unicast => "UNICAST",
            AddrType::Local => "LOCAL",
            AddrType::Broadcast => "BROADCAST",
            AddrType::Anycast => "ANYCAST",
            AddrType::Multicast => "MULTICAST",
            AddrType::Blackhole => "BLACKHOLE",
            AddrType::Unreachable => "UNREACHABLE",
            AddrType::Prohibit => "PROHIBIT",
            AddrType::Throw => "THROW",
            AddrType::Nat => "NAT",
            AddrType::Xresolve => "XRESOLVE",
        }
    }

    /// The bit of this type in a type mask.
    pub const fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// `--limit-iface-in` / `--limit-iface-out`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitIface {
    /// Look the address up on the incoming interface only.
    In,
    /// On the outgoing interface only.
    Out,
}

/// `-m addrtype` (revision 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddrtypeMatch {
    /// `--src-type` mask of [`AddrType::bit`]s, inverted.
    pub src: Option<(u16, bool)>,
    /// `--dst-type` mask, inverted.
    pub dst: Option<(u16, bool)>,
    /// `--limit-iface-in|out`.
    pub limit: Option<LimitIface>,
}

/// What `-m recent` does with the address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecentCommand {
    /// `--set`: add or refresh, always matches.
    Set,
    /// `--rcheck`: match if present (within `--seconds`/`--hitcount`).
    Check,
    /// `--update`: like rcheck, and refresh on match.
    Update,
    /// `--remove`: match and remove if present.
    Remove,
}

/// `-m recent` (revision 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecentMatch {
    /// `--name` (default `DEFAULT`).
    pub name: String,
    /// The command.
    pub command: RecentCommand,
    /// `!`.
    pub inv: bool,
    /// `--seconds` (0 = not given).
    pub seconds: u32,
    /// `--reap`.
    pub reap: bool,
    /// `--hitcount` (0 = not given).
    pub hitcount: u32,
    /// `--rttl`.
    pub rttl: bool,
    /// `--rdest` (else `--rsource`).
    pub rdest: bool,
    /// `--mask` (default all ones of the ruleset's family: 255.255.255.255 or
    /// ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff).
    pub mask: IpAddr,
    /// The shared table this rule uses, resolved at commit.
    pub(crate) table: Bind,
}

/// `-m nfacct --nfacct-name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NfacctMatch {
    /// The accounting object's name.
    pub name: String,
    /// The object, resolved at commit.
    pub(crate) obj: Bind,
}

/// A jump/goto destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainRef {
    /// The user chain's name.
    pub name: String,
    /// Resolved chain id.
    pub(crate) id: Bind,
}

/// `--reject-with`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RejectWith {
    /// `icmp-net-unreachable` (type 3 code 0).
    IcmpNetUnreachable,
    /// `icmp-host-unreachable` (3/1).
    IcmpHostUnreachable,
    /// `icmp-port-unreachable` (3/3), the default.
    IcmpPortUnreachable,
    /// `icmp-proto-unreachable` (3/2).
    IcmpProtoUnreachable,
    /// `icmp-net-prohibited` (3/9).
    IcmpNetProhibited,
    /// `icmp-host-prohibited` (3/10).
    IcmpHostProhibited,
    /// `icmp-admin-prohibited` (3/13).
    IcmpAdminProhibited,
    /// `tcp-reset`: a TCP RST (both families).
    TcpReset,
    /// ip6tables `icmp6-no-route` (ICMPv6 type 1 code 0).
    Icmp6NoRoute,
    /// ip6tables `icmp6-adm-prohibited` (1/1).
    Icmp6AdmProhibited,
    /// ip6tables `icmp6-addr-unreachable` (1/3).
    Icmp6AddrUnreachable,
    /// ip6tables `icmp6-port-unreachable` (1/4), its default.
    Icmp6PortUnreachable,
    /// ip6tables `icmp6-policy-fail` (1/5).
    Icmp6PolicyFail,
    /// ip6tables `icmp6-reject-route` (1/6).
    Icmp6RejectRoute,
}

impl RejectWith {
    /// The name iptables prints.
    pub fn name(self) -> &'static str {
        match self {
            RejectWith::IcmpNetUnreachable => "icmp-net-unreachable",
            RejectWith::IcmpHostUnreachable => "icmp-host-unreachable",
            RejectWith::IcmpPortUnreachable => "icmp-port-unreachable",
            RejectWith::IcmpProtoUnreachable => "icmp-proto-unreachable",
            RejectWith::IcmpNetProhibited => "icmp-net-prohibited",
            RejectWith::IcmpHostProhibited => "icmp-host-prohibited",
            RejectWith::IcmpAdminProhibited => "icmp-admin-prohibited",
            RejectWith::TcpReset => "tcp-reset",
            RejectWith::Icmp6NoRoute => "icmp6-no-route",
            RejectWith::Icmp6AdmProhibited => "icmp6-adm-prohibited",
            RejectWith::Icmp6AddrUnreachable => "icmp6-addr-unreachable",
            RejectWith::Icmp6PortUnreachable => "icmp6-port-unreachable",
            RejectWith::Icmp6PolicyFail => "icmp6-policy-fail",
            RejectWith::Icmp6RejectRoute => "icmp6-reject-route",
        }
    }

    /// The default of `-j REJECT` without `--reject-with` in `family`.
    pub fn default_for(family: Family) -> RejectWith {
        match family {
            Family::Ipv4 => RejectWith::IcmpPortUnreachable,
            Family::Ipv6 => RejectWith::Icmp6PortUnreachable,
        }
    }

    /// Whether the response is an ICMPv6 error (else ICMP, or a RST).
    pub fn is_icmp6(self) -> bool {
        matches!(
            self,
            RejectWith::Icmp6NoRoute
                | RejectWith::Icmp6AdmProhibited
                | RejectWith::Icmp6AddrUnreachable
                | RejectWith::Icmp6PortUnreachable
                | RejectWith::Icmp6PolicyFail
                | RejectWith::Icmp6RejectRoute
        )
    }

    /// The ICMP (type 3) or ICMPv6 (type 1, see [`RejectWith::is_icmp6`])
    /// destination-unreachable code, or `None` for `tcp-reset`.
    pub fn icmp_code(self) -> Option<u8> {
        Some(match self {
            RejectWith::IcmpNetUnreachable => 0,
            RejectWith::IcmpHostUnreachable => 1,
            RejectWith::IcmpProtoUnreachable => 2,
            RejectWith::IcmpPortUnreachable => 3,
            RejectWith::IcmpNetProhibited => 9,
            RejectWith::IcmpHostProhibited => 10,
            RejectWith::IcmpAdminProhibited => 13,
            RejectWith::Icmp6NoRoute => 0,
            RejectWith::Icmp6AdmProhibited => 1,
            RejectWith::Icmp6AddrUnreachable => 3,
            RejectWith::Icmp6PortUnreachable => 4,
            RejectWith::Icmp6PolicyFail => 5,
            RejectWith::Icmp6RejectRoute => 6,
            RejectWith::TcpReset => return None,
        })
    }

    /// Parses the names and short aliases libipt_REJECT (IPv4) or libip6t_REJECT (IPv6)
    /// accepts.
    pub fn parse_for(family: Family, s: &str) -> Option<RejectWith> {
        if family == Family::Ipv6 {
            return Some(match s {
                "icmp6-no-route" | "no-route" => RejectWith::Icmp6NoRoute,
                "icmp6-adm-prohibited" | "adm-prohibited" => RejectWith::Icmp6AdmProhibited,
                "icmp6-addr-unreachable" | "addr-unreach" => RejectWith::Icmp6AddrUnreachable,
                "icmp6-port-unreachable" | "port-unreach" => RejectWith::Icmp6PortUnreachable,
                "icmp6-policy-fail" | "policy-fail" => RejectWith::Icmp6PolicyFail,
                "icmp6-reject-route" | "reject-route" => RejectWith::Icmp6RejectRoute,
                "tcp-reset" => RejectWith::TcpReset,
                _ => return None,
            });
        }
        RejectWith::parse(s)
    }

    /// Parses the names and short aliases libipt_REJECT accepts.
    pub fn parse(s: &str) -> Option<RejectWith> {
        Some(match s {
            "icmp-net-unreachable" | "net-unreach" => RejectWith::IcmpNetUnreachable,
            "icmp-host-unreachable" | "host-unreach" => RejectWith::IcmpHostUnreachable,
            "icmp-port-unreachable" | "port-unreach" => RejectWith::IcmpPortUnreachable,
            "icmp-proto-unreachable" | "proto-unreach" => RejectWith::IcmpProtoUnreachable,
            "icmp-net-prohibited" | "net-prohib" => RejectWith::IcmpNetProhibited,
            "icmp-host-prohibited" | "host-prohib" => RejectWith::IcmpHostProhibited,
            "icmp-admin-prohibited" | "admin-prohib" => RejectWith::IcmpAdminProhibited,
            "tcp-reset" | "tcp-rst" => RejectWith::TcpReset,
            _ => return None,
        })
    }
}

/// The range of `DNAT --to-destination` / `SNAT --to-source`
/// (`[ip[-ip]][:port[-port[/base]]]`) and its flags.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NatRange {
    /// Address range (first, last), if given; of the ruleset's family.
    pub addrs: Option<(IpAddr, IpAddr)>,
    /// Port range (first, last), if given.
    pub ports: Option<(u16, u16)>,
    /// `/base` port offset (NAT revision 2), if given.
    pub base_port: Option<u16>,
    /// `--random`.
    pub random: bool,
    /// `--random-fully` (SNAT only).
    pub random_fully: bool,
    /// `--persistent`.
    pub persistent: bool,
}

impl NatRange {
    /// The range as iptables prints it after `--to-destination` / `to:`; an IPv6 range
    /// with ports in brackets, `[fd00::1]:80` (libxt_NAT `print_range`).
    pub fn range_text(&self) -> String {
        let mut s = String::new();
        if let Some((a, b)) = self.addrs {
            let brackets = a.is_ipv6() && self.ports.is_some();
            if brackets {
                s.push('[');
            }
            s.push_str(&ip_to_numeric(a));
            if a != b {
                s.push('-');
                s.push_str(&ip_to_numeric(b));
            }
            if brackets {
                s.push(']');
            }
        }
        if let Some((p, q)) = self.ports {
            s.push(':');
            s.push_str(&p.to_string());
            if p != q {
                s.push('-');
                s.push_str(&q.to_string());
            }
            if let Some(base) = self.base_port {
                s.push('/');
                s.push_str(&base.to_string());
            }
        }
        s
    }
}

/// MASQUERADE / REDIRECT options.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PortNat {
    /// `--to-ports p[-q]`.
    pub ports: Option<(u16, u16)>,
    /// `--random`.
    pub random: bool,
    /// `--random-fully` (MASQUERADE only).
    pub random_fully: bool,
}

/// What a CONNMARK target does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnmarkOp {
    /// `--set-xmark value/mask`: `ctmark = (ctmark & ~mask) ^ value`.
    Set {
        /// value.
        value: u32,
        /// mask.
        mask: u32,
    },
    /// `--save-mark`: `ctmark = (ctmark & ~ctmask) ^ (mark & nfmask)`.
    Save {
        /// nfmask.
        nfmask: u32,
        /// ctmask.
        ctmask: u32,
    },
    /// `--restore-mark`: `mark = (mark & ~nfmask) ^ (ctmark & ctmask)`.
    Restore {
        /// nfmask.
        nfmask: u32,
        /// ctmask.
        ctmask: u32,
    },
}

/// LOG options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogOptions {
    /// `--log-prefix` (at most 29 bytes).
    pub prefix: String,
    /// `--log-level` 0-7 (default 4, warning).
    pub level: u8,
    /// `--log-tcp-sequence` 0x01, `--log-tcp-options` 0x02, `--log-ip-options` 0x04,
    /// `--log-uid` 0x08, `--log-macdecode` 0x20.
    pub flags: u8,
}

/// What a rule does when it matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// No `-j`: the rule only counts.
    None,
    /// `ACCEPT`.
    Accept,
    /// `DROP`.
    Drop,
    /// `RETURN`.
    Return,
    /// `-j CHAIN`.
    Jump(ChainRef),
    /// `-g CHAIN`.
    Goto(ChainRef),
    /// `REJECT`.
    Reject(RejectWith),
    /// `DNAT`.
    Dnat(NatRange),
    /// `SNAT`.
    Snat(NatRange),
    /// `MASQUERADE`.
    Masquerade(PortNat),
    /// `REDIRECT`.
    Redirect(PortNat),
    /// `MARK` in its `--set-xmark value/mask` form: `mark = (mark & ~mask) ^ value`.
    Mark {
        /// value.
        value: u32,
        /// mask.
        mask: u32,
    },
    /// `CONNMARK`.
    Connmark(ConnmarkOp),
    /// `CT` (`notrack` set for `--notrack`) or `NOTRACK` (`alias`).
    Ct {
        /// `--notrack`.
        notrack: bool,
        /// Written as `-j NOTRACK`.
        alias: bool,
    },
    /// `LOG`.
    Log(LogOptions),
    /// `TRACE`.
    Trace,
}

impl Target {
    /// The name in the target column of a listing (`CT` for NOTRACK, empty for none).
    pub fn list_name(&self) -> &str {
        match self {
            Target::None => "",
            Target::Accept => "ACCEPT",
            Target::Drop => "DROP",
            Target::Return => "RETURN",
            Target::Jump(c) | Target::Goto(c) => &c.name,
            Target::Reject(_) => "REJECT",
            Target::Dnat(_) => "DNAT",
            Target::Snat(_) => "SNAT",
            Target::Masquerade(_) => "MASQUERADE",
            Target::Redirect(_) => "REDIRECT",
            Target::Mark { .. } => "MARK",
            Target::Connmark(_) => "CONNMARK",
            Target::Ct { .. } => "CT",
            Target::Log(_) => "LOG",
            Target::Trace => "TRACE",
        }
    }
}

/// `-m set` (xt_set, revision 4 as iptables 1.8.9 loads it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetMatch {
    /// The set's name.
    pub name: String,
    /// The `src`/`dst` flags, one per dimension tested (1-6).
    pub flags: Vec<crate::ipset::SetDir>,
    /// `! --match-set`.
    pub inv: bool,
    /// `--return-nomatch`: a hit on a `nomatch` element matches, a hit on a plain one does
    /// not (ipset(8)).
    pub return_nomatch: bool,
    /// `! --update-counters`.
    pub skip_counter_update: bool,
    /// `! --update-subcounters`.
    pub skip_subcounter_update: bool,
}
