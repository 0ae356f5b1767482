//! The typed packet every layer of nfsim works on.
//!
//! Bytes are parsed into a [`Packet`] once, at the edge (see [`crate::wire`]), and everything
//! above works on this small validated value: addresses, the L4 header fields netfilter and
//! conntrack look at, the IP length, the skb mark and the interfaces. Tests build packets from
//! the constructors here (`Packet::udp(src, dst)`), or from the text form
//! `"udp 10.244.2.9:40000 -> 10.96.0.10:53"` that `nfsim trace --packet` takes.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

/// IP protocol number of ICMP.
pub const IPPROTO_ICMP: u8 = 1;
/// IP protocol number of TCP.
pub const IPPROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;
/// IP protocol number of ICMPv6.
pub const IPPROTO_ICMPV6: u8 = 58;
/// IP protocol number of SCTP.
pub const IPPROTO_SCTP: u8 = 132;

/// The lower-case protocol name iptables and conntrack print for a protocol number
/// (`udp`, `tcp`, …), or `None` for one without a name.
pub fn proto_name(proto: u8) -> Option<&'static str> {
    Some(match proto {
        IPPROTO_ICMP => "icmp",
        IPPROTO_TCP => "tcp",
        IPPROTO_UDP => "udp",
        IPPROTO_ICMPV6 => "ipv6-icmp",
        IPPROTO_SCTP => "sctp",
        2 => "igmp",
        4 => "ipip",
        41 => "ipv6",
        47 => "gre",
        50 => "esp",
        51 => "ah",
        136 => "udplite",
        _ => return None,
    })
}

/// An interface name, at most 15 bytes (the kernel's `IFNAMSIZ` of 16 with its NUL).
///
/// Stored inline so that a [`Packet`] is `Copy`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IfName {
    len: u8,
    bytes: [u8; 15],
}

/// Why an interface name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IfNameError {
    /// Empty names do not exist.
    #[error("empty interface name")]
    Empty,
    /// Longer than 15 bytes.
    #[error("interface name {0:?} is longer than 15 bytes (IFNAMSIZ)")]
    TooLong(String),
    /// `/`, whitespace, `:` or a NUL byte in the name.
    #[error("interface name {0:?} contains '/', ':', whitespace or NUL")]
    BadChar(String),
}

impl IfName {
    /// Validates and stores `name`.
    pub fn new(name: &str) -> Result<IfName, IfNameError> {
        if name.is_empty() {
            return Err(IfNameError::Empty);
        }
        if name.len() > 15 {
            return Err(IfNameError::TooLong(name.to_string()));
        }
        if name
            .bytes()
            .any(|b| b == b'/' || b == b':' || b == 0 || b.is_ascii_whitespace())
        {
            return Err(IfNameError::BadChar(name.to_string()));
        }
        let mut bytes = [0u8; 15];
        bytes[..name.len()].copy_from_slice(name.as_bytes());
        Ok(IfName {
            len: name.len() as u8,
            bytes,
        })
    }
    /// The name as text.
    pub fn as_str(&self) -> &str {
        // Only ever built from a &str in `new`, so this is valid UTF-8.
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("")
    }
}

impl fmt::Display for IfName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}
impl fmt::Debug for IfName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}
impl FromStr for IfName {
    type Err = IfNameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        IfName::new(s)
    }
}

/// TCP header flags, bit for bit as on the wire (FIN = 0x01 … CWR = 0x80).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    /// No flag.
    pub const NONE: TcpFlags = TcpFlags(0);
    /// FIN.
    pub const FIN: TcpFlags = TcpFlags(0x01);
    /// SYN.
    pub const SYN: TcpFlags = TcpFlags(0x02);
    /// RST.
    pub const RST: TcpFlags = TcpFlags(0x04);
    /// PSH.
    pub const PSH: TcpFlags = TcpFlags(0x08);
    /// ACK.
    pub const ACK: TcpFlags = TcpFlags(0x10);
    /// URG.
    pub const URG: TcpFlags = TcpFlags(0x20);
    /// ECE.
    pub const ECE: TcpFlags = TcpFlags(0x40);
    /// CWR.
    pub const CWR: TcpFlags = TcpFlags(0x80);
    /// All eight flags (iptables' `ALL`).
    pub const ALL: TcpFlags = TcpFlags(0xff);

    const NAMES: [(&'static str, u8); 8] = [
        ("FIN", 0x01),
        ("SYN", 0x02),
        ("RST", 0x04),
        ("PSH", 0x08),
        ("ACK", 0x10),
        ("URG", 0x20),
        ("ECE", 0x40),
        ("CWR", 0x80),
    ];

    /// Whether every flag of `other` is set in `self`.
    pub const fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }
    /// The union of both sets.
    pub const fn union(self, other: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | other.0)
    }
    /// Parses a comma-separated list as iptables takes it: `SYN,ACK`, `ALL`, `NONE`
    /// (case-insensitive).
    pub fn parse_list(s: &str) -> Result<TcpFlags, String> {
        let mut v = 0u8;
        for part in s.split(',') {
            let p = part.trim().to_ascii_uppercase();
            match p.as_str() {
                "ALL" => v = 0xff,
                "NONE" => {}
                _ => match Self::NAMES.iter().find(|(n, _)| *n == p) {
                    Some((_, b)) => v |= b,
                    None => {
                        return Err(format!(
                            "unknown TCP flag {part:?}: expected FIN, SYN, RST, PSH, ACK, URG, ECE, CWR, ALL or NONE"
                        ))
                    }
                },
            }
        }
        Ok(TcpFlags(v))
    }
}

impl std::ops::BitOr for TcpFlags {
    type Output = TcpFlags;
    fn bitor(self, rhs: TcpFlags) -> TcpFlags {
        self.union(rhs)
    }
}

impl fmt::Display for TcpFlags {
    /// `SYN,ACK` in wire-bit order; `NONE` for no flag.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("NONE");
        }
        let mut first = true;
        for (n, b) in Self::NAMES {
            if self.0 & b != 0 {
                if !first {
                    f.write_str(",")?;
                }
                f.write_str(n)?;
                first = false;
            }
        }
        Ok(())
    }
}
impl fmt::Debug for TcpFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The header of the packet an ICMP error quotes: enough to find the connection it is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InnerHeader {
    /// Source address of the quoted packet.
    pub src: IpAddr,
    /// Destination address of the quoted packet.
    pub dst: IpAddr,
    /// Its IP protocol number.
    pub proto: u8,
    /// Its source port (ICMP: the echo id), 0 where there is none.
    pub sport: u16,
    /// Its destination port (ICMP: 0), 0 where there is none.
    pub dport: u16,
    /// For a quoted ICMP packet, its type; else 0.
    pub icmp_type: u8,
    /// The quoted packet's TTL / hop limit, as the host that sent the error received it
    /// (the quote is a copy of the packet's first bytes: `__icmp_send` copies from the
    /// offending packet's network header).
    pub ttl: u8,
}

/// What follows the type and code of an ICMP or ICMPv6 message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IcmpBody {
    /// Echo/timestamp/info-style queries and replies carry an identifier and a sequence.
    Query {
        /// Identifier (conntrack's key for the flow).
        id: u16,
        /// Sequence number.
        seq: u16,
    },
    /// Errors (destination unreachable, time exceeded, parameter problem, …) quote the header of
    /// the packet that caused them.
    Error(InnerHeader),
    /// Anything else.
    Other,
}

/// The layer-4 part of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum L4 {
    /// TCP with the fields conntrack's tracker reads.
    Tcp {
        /// Source port.
        sport: u16,
        /// Destination port.
        dport: u16,
        /// Header flags.
        flags: TcpFlags,
        /// Sequence number.
        seq: u32,
        /// Acknowledgement number.
        ack: u32,
        /// The window field as on the wire (unscaled).
        win: u16,
        /// The header length and the options conntrack's window tracking reads.
        opts: TcpOpts,
    },
    /// UDP.
    Udp {
        /// Source port.
        sport: u16,
        /// Destination port.
        dport: u16,
    },
    /// SCTP (ports only; chunk tracking is not modelled).
    Sctp {
        /// Source port.
        sport: u16,
        /// Destination port.
        dport: u16,
    },
    /// ICMP (IPv4) or ICMPv6, by the packet's family.
    Icmp {
        /// Message type.
        icmp_type: u8,
        /// Message code.
        code: u8,
        /// Id/sequence of a query, or the quoted header of an error.
        body: IcmpBody,
    },
    /// Any other protocol, handled by conntrack's generic tracker.
    Other {
        /// IP protocol number.
        proto: u8,
    },
}

/// What of a TCP header beyond ports, flags, sequence numbers and window conntrack reads
/// (`tcp_options`, `tcp_sack` in nf_conntrack_proto_tcp.c), and the header's length, which
/// says how much of the packet is payload (`segment_seq_plus_len`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TcpOpts {
    /// The header length in bytes (data offset × 4): 20 without options, at most 60.
    pub hdr_len: u8,
    /// The window scale option's shift count (`TCPOPT_WINDOW`), as sent (the tracker caps it
    /// at 14).
    pub wscale: Option<u8>,
    /// The SACK-permitted option (`TCPOPT_SACK_PERM`).
    pub sack_perm: bool,
    /// The highest right edge among the segment's SACK blocks (`TCPOPT_SACK`), if any.
    pub sack: Option<u32>,
}

impl TcpOpts {
    /// A 20-byte header without options.
    pub const NONE: TcpOpts = TcpOpts {
        hdr_len: 20,
        wscale: None,
        sack_perm: false,
        sack: None,
    };
}

impl Default for TcpOpts {
    fn default() -> Self {
        TcpOpts::NONE
    }
}

/// The window a TCP packet built by [`Packet::tcp`] or read from text without `win=` carries:
/// 65535, the largest unscaled window (what nfsim has always written to captures).
pub const DEFAULT_TCP_WINDOW: u16 = 65535;

/// ICMP types used by name in nfsim.
pub mod icmp {
    /// ICMPv4 echo reply.
    pub const ECHO_REPLY: u8 = 0;
    /// ICMPv4 destination unreachable.
    pub const DEST_UNREACH: u8 = 3;
    /// ICMPv4 echo request.
    pub const ECHO_REQUEST: u8 = 8;
    /// ICMPv4 time exceeded.
    pub const TIME_EXCEEDED: u8 = 11;
    /// ICMPv4 parameter problem.
    pub const PARAMETER_PROB: u8 = 12;
    /// ICMPv4 timestamp request.
    pub const TIMESTAMP: u8 = 13;
    /// ICMPv4 timestamp reply.
    pub const TIMESTAMP_REPLY: u8 = 14;
    /// ICMPv4 information request.
    pub const INFO_REQUEST: u8 = 15;
    /// ICMPv4 information reply.
    pub const INFO_REPLY: u8 = 16;
    /// ICMPv4 address mask request.
    pub const ADDRESS: u8 = 17;
    /// ICMPv4 address mask reply.
    pub const ADDRESS_REPLY: u8 = 18;
    /// Destination-unreachable code: network unreachable.
    pub const CODE_NET_UNREACH: u8 = 0;
    /// Destination-unreachable code: host unreachable.
    pub const CODE_HOST_UNREACH: u8 = 1;
    /// Destination-unreachable code: protocol unreachable.
    pub const CODE_PROT_UNREACH: u8 = 2;
    /// Destination-unreachable code: port unreachable.
    pub const CODE_PORT_UNREACH: u8 = 3;
    /// Destination-unreachable code: network prohibited.
    pub const CODE_NET_PROHIBITED: u8 = 9;
    /// Destination-unreachable code: host prohibited.
    pub const CODE_HOST_PROHIBITED: u8 = 10;
    /// Destination-unreachable code: administratively prohibited.
    pub const CODE_ADMIN_PROHIBITED: u8 = 13;
    /// ICMPv6 destination unreachable.
    pub const V6_DEST_UNREACH: u8 = 1;
    /// ICMPv6 packet too big.
    pub const V6_PACKET_TOO_BIG: u8 = 2;
    /// ICMPv6 time exceeded.
    pub const V6_TIME_EXCEEDED: u8 = 3;
    /// ICMPv6 parameter problem.
    pub const V6_PARAM_PROB: u8 = 4;
    /// ICMPv6 echo request.
    pub const V6_ECHO_REQUEST: u8 = 128;
    /// ICMPv6 echo reply.
    pub const V6_ECHO_REPLY: u8 = 129;
    /// ICMPv6 destination-unreachable code: port unreachable.
    pub const V6_CODE_PORT_UNREACH: u8 = 4;

    /// Whether `icmp_type` is destination unreachable in its family: type 3 for ICMP, type 1
    /// for ICMPv6 (RFC 4443 §3.1; in ICMPv6, type 3 is time exceeded).
    pub const fn is_dest_unreach(ipv6: bool, icmp_type: u8) -> bool {
        if ipv6 {
            icmp_type == V6_DEST_UNREACH
        } else {
            icmp_type == DEST_UNREACH
        }
    }

    /// The destination-unreachable type and port-unreachable code of a family: what a host
    /// sends for a datagram to a port no socket is bound to (`__udp4_lib_rcv` →
    /// `icmp_send(ICMP_DEST_UNREACH, ICMP_PORT_UNREACH)`; `__udp6_lib_rcv` →
    /// `icmpv6_send(ICMPV6_DEST_UNREACH, ICMPV6_PORT_UNREACH)`).
    pub const fn port_unreach(ipv6: bool) -> (u8, u8) {
        if ipv6 {
            (V6_DEST_UNREACH, V6_CODE_PORT_UNREACH)
        } else {
            (DEST_UNREACH, CODE_PORT_UNREACH)
        }
    }
}

/// A packet as netfilter sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Packet {
    /// Source address. Same family as `dst` (constructors check it).
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// The layer-4 header.
    pub l4: L4,
    /// IP total length in bytes (header included), what rule byte counters add up.
    pub len: u16,
    /// Time to live / hop limit.
    pub ttl: u8,
    /// The skb mark (`-m mark`, `MARK`).
    pub mark: u32,
    /// The interface it was received on, if any (`-i`).
    pub iif: Option<IfName>,
    /// The interface it leaves by, once routed (`-o`).
    pub oif: Option<IfName>,
    /// An opaque tag the simulation uses to follow an application message (a query id); it
    /// is never looked at by netfilter and is written into the payload when emitted to pcap.
    pub tag: u64,
}

/// Default payload length of a packet built by the constructors (bytes after the L4 header).
pub const DEFAULT_PAYLOAD_LEN: u16 = 32;

impl Packet {
    fn with_l4(src: IpAddr, dst: IpAddr, l4: L4, l4_hdr_len: u16) -> Packet {
        let ip_hdr: u16 = if src.is_ipv4() { 20 } else { 40 };
        Packet {
            src,
            dst,
            l4,
            len: ip_hdr + l4_hdr_len + DEFAULT_PAYLOAD_LEN,
            ttl: 64,
            mark: 0,
            iif: None,
            oif: None,
            tag: 0,
        }
    }

    /// A UDP datagram from `src` to `dst` with a 32-byte payload.
    pub fn udp(src: SocketAddr, dst: SocketAddr) -> Packet {
        Packet::with_l4(
            src.ip(),
            dst.ip(),
            L4::Udp {
                sport: src.port(),
                dport: dst.port(),
            },
            8,
        )
    }

    /// A TCP segment from `src` to `dst` with `flags`, sequence numbers 0, window
    /// [`DEFAULT_TCP_WINDOW`], no options and a 32-byte payload.
    pub fn tcp(src: SocketAddr, dst: SocketAddr, flags: TcpFlags) -> Packet {
        Packet::with_l4(
            src.ip(),
            dst.ip(),
            L4::Tcp {
                sport: src.port(),
                dport: dst.port(),
                flags,
                seq: 0,
                ack: 0,
                win: DEFAULT_TCP_WINDOW,
                opts: TcpOpts::NONE,
            },
            20,
        )
    }

    /// The TCP payload length in bytes: the IP payload after the TCP header (0 for other
    /// protocols, or when `len` is shorter than the headers).
    pub fn tcp_payload_len(&self) -> u32 {
        match self.l4 {
            L4::Tcp { opts, .. } => {
                let ip: u16 = if self.is_ipv4() { 20 } else { 40 };
                u32::from(self.len.saturating_sub(ip + u16::from(opts.hdr_len)))
            }
            _ => 0,
        }
    }

    /// Sets the TCP payload length (the IP length follows); no effect on other protocols.
    pub fn set_tcp_payload_len(&mut self, payload: u16) {
        if let L4::Tcp { opts, .. } = self.l4 {
            let ip: u16 = if self.is_ipv4() { 20 } else { 40 };
            self.len = ip
                .saturating_add(u16::from(opts.hdr_len))
                .saturating_add(payload);
        }
    }

    /// An ICMP (or ICMPv6, by the addresses' family) echo request.
    pub fn icmp_echo_request(src: IpAddr, dst: IpAddr, id: u16, seq: u16) -> Packet {
        let t = if src.is_ipv4() {
            icmp::ECHO_REQUEST
        } else {
            icmp::V6_ECHO_REQUEST
        };
        Packet::with_l4(
            src,
            dst,
            L4::Icmp {
                icmp_type: t,
                code: 0,
                body: IcmpBody::Query { id, seq },
            },
            8,
        )
    }

    /// The ICMP error `icmp_type`/`code` that `router` sends back about `about`. It quotes
    /// as much of `about` as Linux does: up to a 576-byte error for IPv4 (`__icmp_send`), up
    /// to 1280 bytes for IPv6 (`icmp6_send`).
    pub fn icmp_error(router: IpAddr, about: &Packet, icmp_type: u8, code: u8) -> Packet {
        let inner = InnerHeader {
            src: about.src,
            dst: about.dst,
            proto: about.protocol(),
            sport: match about.l4 {
                L4::Icmp {
                    body: IcmpBody::Query { id, .. },
                    ..
                } => id,
                _ => about.sport().unwrap_or(0),
            },
            dport: about.dport().unwrap_or(0),
            icmp_type: match about.l4 {
                L4::Icmp { icmp_type, .. } => icmp_type,
                _ => 0,
            },
            ttl: about.ttl,
        };
        let mut p = Packet::with_l4(
            router,
            about.src,
            L4::Icmp {
                icmp_type,
                code,
                body: IcmpBody::Error(inner),
            },
            8,
        );
        // __icmp_send quotes as much of the offending datagram as fits in 576 bytes;
        // icmp6_send as much as fits in the IPv6 minimum MTU of 1280.
        let (hdr, limit): (u16, u16) = if about.src.is_ipv4() {
            (20, 576)
        } else {
            (40, 1280)
        };
        let quoted = about.len.min(limit - hdr - 8);
        p.len = hdr + 8 + quoted;
        p
    }

    /// Any other protocol.
    pub fn other(src: IpAddr, dst: IpAddr, proto: u8) -> Packet {
        Packet::with_l4(src, dst, L4::Other { proto }, 0)
    }

    /// The IP protocol number.
    pub fn protocol(&self) -> u8 {
        match self.l4 {
            L4::Tcp { .. } => IPPROTO_TCP,
            L4::Udp { .. } => IPPROTO_UDP,
            L4::Sctp { .. } => IPPROTO_SCTP,
            L4::Icmp { .. } => {
                if self.src.is_ipv4() {
                    IPPROTO_ICMP
                } else {
                    IPPROTO_ICMPV6
                }
            }
            L4::Other { proto } => proto,
        }
    }

    /// The source port of TCP, UDP and SCTP.
    pub fn sport(&self) -> Option<u16> {
        match self.l4 {
            L4::Tcp { sport, .. } | L4::Udp { sport, .. } | L4::Sctp { sport, .. } => Some(sport),
            _ => None,
        }
    }

    /// The destination port of TCP, UDP and SCTP.
    pub fn dport(&self) -> Option<u16> {
        match self.l4 {
            L4::Tcp { dport, .. } | L4::Udp { dport, .. } | L4::Sctp { dport, .. } => Some(dport),
            _ => None,
        }
    }

    /// Rewrites the source port (TCP, UDP, SCTP); no effect on other protocols.
    pub fn set_sport(&mut self, port: u16) {
        match &mut self.l4 {
            L4::Tcp { sport, .. } | L4::Udp { sport, .. } | L4::Sctp { sport, .. } => *sport = port,
            _ => {}
        }
    }

    /// Rewrites the destination port (TCP, UDP, SCTP); no effect on other protocols.
    pub fn set_dport(&mut self, port: u16) {
        match &mut self.l4 {
            L4::Tcp { dport, .. } | L4::Udp { dport, .. } | L4::Sctp { dport, .. } => *dport = port,
            _ => {}
        }
    }

    /// The TCP flags, for TCP.
    pub fn tcp_flags(&self) -> Option<TcpFlags> {
        match self.l4 {
            L4::Tcp { flags, .. } => Some(flags),
            _ => None,
        }
    }

    /// Whether the addresses are IPv4.
    pub fn is_ipv4(&self) -> bool {
        self.src.is_ipv4()
    }

    /// Sets the tag (builder style).
    pub fn tagged(mut self, tag: u64) -> Packet {
        self.tag = tag;
        self
    }

    /// Sets the ingress interface (builder style).
    pub fn on_iif(mut self, iif: IfName) -> Packet {
        self.iif = Some(iif);
        self
    }
}

fn fmt_endpoint(f: &mut fmt::Formatter<'_>, ip: IpAddr, port: Option<u16>) -> fmt::Result {
    match (ip, port) {
        (IpAddr::V6(a), Some(p)) => write!(f, "[{a}]:{p}"),
        (a, Some(p)) => write!(f, "{a}:{p}"),
        (a, None) => write!(f, "{a}"),
    }
}

impl fmt::Display for Packet {
    /// The text form [`Packet::from_str`] reads: `udp 10.244.2.9:40000 -> 10.96.0.10:53`,
    /// `tcp 10.0.0.1:5000 -> 10.0.0.2:80 SYN,ACK`, `icmp 10.0.0.1 -> 10.0.0.2 echo-request id=1 seq=0`,
    /// `icmp 10.0.0.9 -> 10.0.0.1 unreachable code=3 (udp 10.0.0.1:5000 -> 10.0.0.2:53)`,
    /// `proto 47 10.0.0.1 -> 10.0.0.2`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.l4 {
            L4::Tcp { .. } => f.write_str("tcp ")?,
            L4::Udp { .. } => f.write_str("udp ")?,
            L4::Sctp { .. } => f.write_str("sctp ")?,
            L4::Icmp { .. } => f.write_str(if self.is_ipv4() { "icmp " } else { "icmpv6 " })?,
            L4::Other { proto } => write!(f, "proto {proto} ")?,
        }
        fmt_endpoint(f, self.src, self.sport())?;
        f.write_str(" -> ")?;
        fmt_endpoint(f, self.dst, self.dport())?;
        match self.l4 {
            L4::Tcp {
                flags,
                seq,
                ack,
                win,
                opts,
                ..
            } => {
                write!(f, " {flags}")?;
                // Only what differs from the text form's defaults, so that a packet read
                // without them prints as it was written.
                if seq != 0 {
                    write!(f, " seq={seq}")?;
                }
                if ack != 0 {
                    write!(f, " ack={ack}")?;
                }
                if win != DEFAULT_TCP_WINDOW {
                    write!(f, " win={win}")?;
                }
                let payload = self.tcp_payload_len();
                if payload != u32::from(DEFAULT_PAYLOAD_LEN) {
                    write!(f, " len={payload}")?;
                }
                if let Some(w) = opts.wscale {
                    write!(f, " wscale={w}")?;
                }
                if opts.sack_perm {
                    f.write_str(" sackok")?;
                }
                if let Some(s) = opts.sack {
                    write!(f, " sack={s}")?;
                }
                Ok(())
            }
            L4::Icmp {
                icmp_type,
                code,
                body,
            } => {
                let v4 = self.is_ipv4();
                let name = icmp_type_name(v4, icmp_type);
                match name {
                    Some(n) => write!(f, " {n}")?,
                    None => write!(f, " type={icmp_type}")?,
                }
                if code != 0 || matches!(body, IcmpBody::Error(_)) {
                    write!(f, " code={code}")?;
                }
                match body {
                    IcmpBody::Query { id, seq } => write!(f, " id={id} seq={seq}"),
                    IcmpBody::Error(inner) => {
                        let pname = proto_name(inner.proto).unwrap_or("proto");
                        let ports = matches!(inner.proto, IPPROTO_TCP | IPPROTO_UDP | IPPROTO_SCTP);
                        write!(f, " ({pname} ")?;
                        fmt_endpoint(f, inner.src, ports.then_some(inner.sport))?;
                        f.write_str(" -> ")?;
                        fmt_endpoint(f, inner.dst, ports.then_some(inner.dport))?;
                        f.write_str(")")
                    }
                    IcmpBody::Other => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }
}

/// The name nfsim prints for an ICMP type (`echo-request`, `unreachable`, …).
pub fn icmp_type_name(v4: bool, t: u8) -> Option<&'static str> {
    Some(match (v4, t) {
        (true, icmp::ECHO_REPLY) | (false, icmp::V6_ECHO_REPLY) => "echo-reply",
        (true, icmp::ECHO_REQUEST) | (false, icmp::V6_ECHO_REQUEST) => "echo-request",
        (true, icmp::DEST_UNREACH) | (false, icmp::V6_DEST_UNREACH) => "unreachable",
        (true, icmp::TIME_EXCEEDED) | (false, icmp::V6_TIME_EXCEEDED) => "time-exceeded",
        (true, icmp::PARAMETER_PROB) | (false, icmp::V6_PARAM_PROB) => "parameter-problem",
        (false, icmp::V6_PACKET_TOO_BIG) => "packet-too-big",
        (true, icmp::TIMESTAMP) => "timestamp-request",
        (true, icmp::TIMESTAMP_REPLY) => "timestamp-reply",
        _ => return None,
    })
}

/// Why the text form of a packet did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad packet {input:?}: {reason} (expected e.g. \"udp 10.244.2.9:40000 -> 10.96.0.10:53\", \"tcp 10.0.0.1:5000 -> 10.0.0.2:80 SYN\", \"icmp 10.0.0.1 -> 10.0.0.2 echo-request id=1\")")]
pub struct PacketParseError {
    /// The text given.
    pub input: String,
    /// What was wrong.
    pub reason: String,
}

fn parse_sock(s: &str) -> Result<SocketAddr, String> {
    s.parse::<SocketAddr>()
        .map_err(|_| format!("{s:?} is not an address:port (IPv6 as [addr]:port)"))
}

fn parse_ip(s: &str) -> Result<IpAddr, String> {
    s.parse::<IpAddr>()
        .map_err(|_| format!("{s:?} is not an IPv4 or IPv6 address"))
}

/// The TCP part of the text form after `SRC -> DST`: optional flags (default `SYN`), then
/// `seq=`, `ack=`, `win=`, `len=` (payload bytes), `wscale=`, `sackok`, `sack=` in any order.
fn parse_tcp_extra(s: SocketAddr, d: SocketAddr, extra: &[&str]) -> Result<Packet, String> {
    let mut words = extra;
    let mut flags = TcpFlags::SYN;
    if let Some((w, rest)) = extra.split_first() {
        if !w.contains('=') && !w.eq_ignore_ascii_case("sackok") {
            flags = TcpFlags::parse_list(w)?;
            words = rest;
        }
    }
    let mut p = Packet::tcp(s, d, flags);
    let mut payload = DEFAULT_PAYLOAD_LEN;
    let L4::Tcp {
        seq,
        ack,
        win,
        opts,
        ..
    } = &mut p.l4
    else {
        unreachable!("Packet::tcp builds a TCP packet")
    };
    fn num<T: FromStr>(key: &str, v: &str, what: &str) -> Result<T, String> {
        v.parse().map_err(|_| format!("{key}={v:?} is not {what}"))
    }
    for w in words {
        if w.eq_ignore_ascii_case("sackok") {
            opts.sack_perm = true;
            continue;
        }
        let Some((k, v)) = w.split_once('=') else {
            return Err(format!(
                "unexpected {w:?}: expected the flags first, then seq=, ack=, win=, len=, wscale=, sackok or sack="
            ));
        };
        match k {
            "seq" => *seq = num(k, v, "a sequence number 0-4294967295")?,
            "ack" => *ack = num(k, v, "an acknowledgement number 0-4294967295")?,
            "win" => *win = num(k, v, "a window 0-65535")?,
            "len" => payload = num(k, v, "a payload length in bytes 0-65475")?,
            "wscale" => {
                let n: u8 = num(k, v, "a window scale shift 0-14")?;
                if n > 14 {
                    return Err(format!("wscale={n} is not a window scale shift 0-14"));
                }
                opts.wscale = Some(n);
                opts.hdr_len += 4;
            }
            "sack" => {
                opts.sack = Some(num(k, v, "a sequence number 0-4294967295")?);
                opts.hdr_len += 12;
            }
            _ => {
                return Err(format!(
                    "unknown TCP field {k:?}: expected seq=, ack=, win=, len=, wscale=, sackok or sack="
                ))
            }
        }
    }
    if opts.sack_perm {
        opts.hdr_len += 4;
    }
    let ip: u16 = if s.is_ipv4() { 20 } else { 40 };
    if u32::from(payload) + u32::from(ip) + u32::from(opts.hdr_len) > 65535 {
        return Err(format!(
            "len={payload} makes the packet longer than 65535 bytes"
        ));
    }
    p.set_tcp_payload_len(payload);
    Ok(p)
}

impl FromStr for Packet {
    type Err = PacketParseError;

    /// Reads `PROTO SRC -> DST [extra]` with PROTO `udp`, `tcp`, `sctp`, `icmp`, `icmpv6` or
    /// `proto N`. TCP takes optional flags (`SYN`, `SYN,ACK`; default `SYN`), then optional
    /// `seq=N ack=N win=N len=N` (payload bytes, default 32), `wscale=N`, `sackok`, `sack=N`
    /// (the highest SACK right edge); ICMP takes a type
    /// name or `type=N`, and `code=`, `id=`, `seq=` (default `echo-request id=0 seq=0`).
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = |reason: String| PacketParseError {
            input: input.to_string(),
            reason,
        };
        let words: Vec<&str> = input.split_whitespace().collect();
        let (proto_word, rest) = match words.split_first() {
            Some(x) => x,
            None => return Err(err("empty".into())),
        };
        let (other_proto, rest) = if proto_word.eq_ignore_ascii_case("proto") {
            let (n, r) = rest
                .split_first()
                .ok_or_else(|| err("`proto` needs a protocol number".into()))?;
            let n: u8 = n
                .parse()
                .map_err(|_| err(format!("{n:?} is not a protocol number 0-255")))?;
            (Some(n), r)
        } else {
            (None, rest)
        };
        if rest.len() < 3 || rest[1] != "->" {
            return Err(err("expected `SRC -> DST` after the protocol".into()));
        }
        let (src_s, dst_s, extra) = (rest[0], rest[2], &rest[3..]);
        let proto = proto_word.to_ascii_lowercase();
        let pkt = match (other_proto, proto.as_str()) {
            (Some(n), _) => {
                let (s, d) = (parse_ip(src_s).map_err(err)?, parse_ip(dst_s).map_err(err)?);
                if !extra.is_empty() {
                    return Err(err(format!("unexpected {:?}", extra.join(" "))));
                }
                Packet::other(s, d, n)
            }
            (None, "udp") | (None, "sctp") => {
                let (s, d) = (
                    parse_sock(src_s).map_err(err)?,
                    parse_sock(dst_s).map_err(err)?,
                );
                if !extra.is_empty() {
                    return Err(err(format!("unexpected {:?}", extra.join(" "))));
                }
                let mut p = Packet::udp(s, d);
                if proto == "sctp" {
                    p.l4 = L4::Sctp {
                        sport: s.port(),
                        dport: d.port(),
                    };
                }
                p
            }
            (None, "tcp") => {
                let (s, d) = (
                    parse_sock(src_s).map_err(err)?,
                    parse_sock(dst_s).map_err(err)?,
                );
                parse_tcp_extra(s, d, extra).map_err(err)?
            }
            (None, "icmp") | (None, "icmpv6") => {
                let (s, d) = (parse_ip(src_s).map_err(err)?, parse_ip(dst_s).map_err(err)?);
                let v4 = s.is_ipv4();
                let mut t = if v4 {
                    icmp::ECHO_REQUEST
                } else {
                    icmp::V6_ECHO_REQUEST
                };
                let (mut code, mut id, mut seq) = (0u8, 0u16, 0u16);
                for w in extra {
                    if let Some(v) = w.strip_prefix("type=") {
                        t = v.parse().map_err(|_| err(format!("bad ICMP type {v:?}")))?;
                    } else if let Some(v) = w.strip_prefix("code=") {
                        code = v.parse().map_err(|_| err(format!("bad ICMP code {v:?}")))?;
                    } else if let Some(v) = w.strip_prefix("id=") {
                        id = v.parse().map_err(|_| err(format!("bad ICMP id {v:?}")))?;
                    } else if let Some(v) = w.strip_prefix("seq=") {
                        seq = v.parse().map_err(|_| err(format!("bad ICMP seq {v:?}")))?;
                    } else {
                        t = (0..=255u8)
                            .find(|&c| icmp_type_name(v4, c) == Some(*w))
                            .ok_or_else(|| err(format!("unknown ICMP type name {w:?}")))?;
                    }
                }
                let mut p = Packet::icmp_echo_request(s, d, id, seq);
                p.l4 = L4::Icmp {
                    icmp_type: t,
                    code,
                    body: IcmpBody::Query { id, seq },
                };
                p
            }
            (None, other) => {
                return Err(err(format!(
                    "unknown protocol {other:?}: expected udp, tcp, sctp, icmp, icmpv6 or `proto N`"
                )))
            }
        };
        if pkt.src.is_ipv4() != pkt.dst.is_ipv4() {
            return Err(err(
                "source and destination are of different IP families".into()
            ));
        }
        Ok(pkt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trips() {
        for s in [
            "udp 10.244.2.9:40000 -> 10.96.0.10:53",
            "tcp 10.0.0.1:5000 -> 10.0.0.2:80 SYN,ACK",
            "tcp 10.0.0.1:5000 -> 10.0.0.2:80 ACK seq=1001 ack=7 win=502 len=0",
            "tcp 10.0.0.1:5000 -> 10.0.0.2:80 SYN seq=4000000000 win=64240 len=0 wscale=7 sackok",
            "tcp 10.0.0.1:5000 -> 10.0.0.2:80 ACK ack=9 len=1448 sack=5000",
            "udp [fd00::1]:53 -> [fd00::2]:1000",
            "icmp 10.0.0.1 -> 10.0.0.2 echo-request id=7 seq=1",
            "proto 47 10.0.0.1 -> 10.0.0.2",
        ] {
            let p: Packet = s.parse().unwrap();
            assert_eq!(p.to_string(), s);
        }
    }

    #[test]
    fn bad_text_is_an_error() {
        for s in [
            "",
            "udp 10.0.0.1 -> 10.0.0.2:53",
            "udp 10.0.0.1:1 10.0.0.2:53",
            "foo 1.1.1.1:1 -> 2.2.2.2:2",
            "udp 10.0.0.1:1 -> [::1]:53",
            "tcp 10.0.0.1:1 -> 10.0.0.2:2 SYN,BOGUS",
            "tcp 10.0.0.1:1 -> 10.0.0.2:2 ACK seq=-1",
            "tcp 10.0.0.1:1 -> 10.0.0.2:2 ACK win=70000",
            "tcp 10.0.0.1:1 -> 10.0.0.2:2 ACK wscale=15",
            "tcp 10.0.0.1:1 -> 10.0.0.2:2 ACK mss=1460",
            "tcp 10.0.0.1:1 -> 10.0.0.2:2 ACK SYN",
            "udp 300.0.0.1:1 -> 10.0.0.2:53",
        ] {
            assert!(s.parse::<Packet>().is_err(), "{s}");
        }
    }

    #[test]
    fn ifname_limits() {
        assert!(IfName::new("eth0").is_ok());
        assert!(IfName::new("123456789012345").is_ok());
        assert!(IfName::new("1234567890123456").is_err());
        assert!(IfName::new("").is_err());
        assert!(IfName::new("a b").is_err());
    }

    #[test]
    fn icmp_error_quotes_the_packet() {
        let q = Packet::udp(
            "10.0.0.1:5000".parse().unwrap(),
            "10.0.0.2:53".parse().unwrap(),
        );
        let e = Packet::icmp_error(q.dst, &q, icmp::DEST_UNREACH, icmp::CODE_PORT_UNREACH);
        assert_eq!(
            e.to_string(),
            "icmp 10.0.0.2 -> 10.0.0.1 unreachable code=3 (udp 10.0.0.1:5000 -> 10.0.0.2:53)"
        );
    }
}
