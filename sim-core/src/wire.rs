//! Packets to and from bytes (etherparse). Only the edges of nfsim use this module.
//!
//! # Parsing
//!
//! [`parse_ip`], [`parse_ethernet`] and [`parse_link`] read one frame into a [`Packet`]: the
//! addresses, the IP length (`len`: the IPv4 total length, or 40 + the IPv6 payload length,
//! extension headers included), the TTL / hop limit, and the layer-4 fields netfilter and
//! conntrack look at:
//!
//! - TCP: ports, flags, sequence and acknowledgement numbers;
//! - UDP and SCTP: ports (SCTP chunks are not read);
//! - ICMP / ICMPv6: type and code, then by type (as the kernel classifies them): the id and
//!   sequence of a query ([`IcmpBody::Query`]), the quoted header of an error
//!   ([`IcmpBody::Error`]), or nothing ([`IcmpBody::Other`]); see [`icmp_is_error`] and
//!   [`icmp_is_query`];
//! - anything else: [`L4::Other`] with the protocol number.
//!
//! The link layers read are Ethernet II (with any number of 802.1Q / 802.1ad VLAN tags), Linux
//! cooked captures (SLL and SLL2, what `tcpdump -i any` writes) and raw IP.
//! IPv6 extension headers (hop-by-hop, routing, destination options, fragment, AH) are skipped
//! the way the kernel's `ipv6_skip_exthdr()` does before conntrack picks the layer-4 protocol.
//!
//! **Fragments.** The kernel reassembles fragments (`nf_defrag_ipv4`/`nf_defrag_ipv6`) before
//! conntrack sees them; nfsim does not reassemble. The *first* fragment (offset 0, more
//! fragments set) is parsed like a whole packet, ports included (its layer-4 header must be in
//! it), with `len` the length of that fragment. A *later* fragment (offset > 0) has no layer-4
//! header, so it becomes [`L4::Other`] with the upper protocol's number (for IPv6, the fragment
//! header's next header): a protocol without ports.
//!
//! **What is not checked.** Checksums (IPv4 header, TCP, UDP, ICMP, SCTP) are not verified:
//! captures taken on the sending host carry unfilled checksums when the NIC offloads them.
//! Trailing bytes after the IP length (Ethernet padding, an FCS) are ignored, as the kernel
//! trims them.
//!
//! **Truncated input.** Every header nfsim reads must be present, or parsing fails with
//! [`WireError::Truncated`] naming the layer and its byte offset from the start of the buffer.
//! By default the whole IP packet must be present too; [`ParseOptions::allow_snapped`] accepts
//! a packet cut short after its headers, as a capture with a small snap length holds it (the
//! pcap reader sets it for records whose captured length is below the original length).
//!
//! **The tag.** [`Packet::tag`] is read from the first 8 bytes (big-endian) after the headers
//! nfsim models, when at least 8 are present, else it is 0 (see [`ParseOptions::read_tag`]).
//! For a real capture that is whatever the application wrote there; re-emitting the packet
//! writes the same 8 bytes back.
//!
//! # Emitting
//!
//! [`emit_ip`] writes a [`Packet`] as an IPv4 or IPv6 packet of exactly `len` bytes with valid
//! checksums: IPv4 with a 20-byte header (identification 0, don't-fragment set), IPv6 with a
//! 40-byte header and no extension header; TCP with its window and a header of
//! [`TcpOpts::hdr_len`] bytes, whose options are the window scale, SACK-permitted and one
//! SACK block that conntrack reads, then NOPs; UDP with 8 bytes; SCTP with its 12-byte common header (verification tag 0, CRC32c);
//! ICMP with its 8-byte header (for errors, the quoted header: an IP header with the quoted
//! packet's TTL, plus 8 bytes of its layer 4, as RFC 792 asks); the rest is zero-filled,
//! except that [`Packet::tag`] is written as 8 big-endian bytes at the start of the payload
//! when there is room. [`emit_ip_with_payload`] writes the same headers around a payload of
//! the caller's (for an ICMP error, the whole quoted packet). [`emit_ethernet`] puts an
//! Ethernet II header in front (no padding to 60 bytes, no FCS, as a capture on the sending
//! host shows it). Emitted packets are never fragments.
//!
//! Round trip: `parse_ip(&emit_ip(p)?)` gives `p` back, except for what is not on the wire
//! (`mark`, `iif` and `oif` come back as 0 / `None`), a `tag` without 8 bytes of payload to
//! carry it (comes back 0), an ICMP body that does not agree with its type (it is read back by
//! type), the ICMP rest-of-header of errors (redirect gateway, MTU, pointer: written as 0), and
//! TCP options nfsim does not keep (MSS, timestamps: written as NOPs; a SACK option's
//! blocks other than its highest right edge, which comes back as one block), and
//! an [`L4::Other`] whose number is one nfsim models (1, 6, 17, 58, 132) or an IPv6 extension
//! header (0, 43, 44, 51, 60).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use etherparse::checksum::Sum16BitWords;
use etherparse::{
    EtherType, Ethernet2Header, Ethernet2Slice, IpNumber, Ipv4Header, Ipv4HeaderSlice,
    Ipv6FlowLabel, Ipv6Header, Ipv6HeaderSlice, TcpHeader, TcpHeaderSlice, UdpHeader,
    UdpHeaderSlice,
};

use crate::packet::{
    icmp, IcmpBody, InnerHeader, Packet, TcpFlags, TcpOpts, IPPROTO_ICMP, IPPROTO_ICMPV6,
    IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP, L4,
};

/// Ether type of IPv4.
pub const ETH_P_IP: u16 = 0x0800;
/// Ether type of IPv6.
pub const ETH_P_IPV6: u16 = 0x86dd;
/// Ether type of ARP.
pub const ETH_P_ARP: u16 = 0x0806;
/// Ether type of an 802.1Q VLAN tag.
pub const ETH_P_8021Q: u16 = 0x8100;
/// Ether type of an 802.1ad (QinQ) service tag.
pub const ETH_P_8021AD: u16 = 0x88a8;
/// Ether type some switches use for QinQ before 802.1ad.
pub const ETH_P_QINQ1: u16 = 0x9100;

/// Length of an Ethernet II header.
pub const ETH_HLEN: usize = 14;
/// Length of a Linux cooked (SLL) header.
pub const SLL_HLEN: usize = 16;
/// Length of a Linux cooked v2 (SLL2) header.
pub const SLL2_HLEN: usize = 20;
/// Length of the SCTP common header.
pub const SCTP_HLEN: usize = 12;

/// IPv6 next-header numbers the kernel's `ipv6_skip_exthdr()` walks over.
const NEXTHDR_HOP: u8 = 0;
const NEXTHDR_ROUTING: u8 = 43;
const NEXTHDR_FRAGMENT: u8 = 44;
const NEXTHDR_AUTH: u8 = 51;
const NEXTHDR_DEST: u8 = 60;

/// Whether an ICMP (`v4`) or ICMPv6 type is an error message that quotes the packet it is
/// about. IPv4: destination unreachable, source quench, redirect, time exceeded, parameter
/// problem (the kernel's `icmp_is_err()`, used by `nf_conntrack_icmpv4_error()`). ICMPv6: every
/// type below 128 (`nf_conntrack_icmpv6_error()`: "is not error message?" for types >= 128).
pub fn icmp_is_error(v4: bool, icmp_type: u8) -> bool {
    if v4 {
        matches!(icmp_type, 3 | 4 | 5 | 11 | 12)
    } else {
        icmp_type < 128
    }
}

/// Whether an ICMP (`v4`) or ICMPv6 type is a query or its reply, carrying an identifier and
/// a sequence number in bytes 4..8 (what conntrack keys the flow by): IPv4 echo, timestamp,
/// information and address-mask requests and replies (the `invmap` of
/// `nf_conntrack_proto_icmp.c`); ICMPv6 echo and node-information queries and replies (the
/// `invmap` of `nf_conntrack_proto_icmpv6.c`).
pub fn icmp_is_query(v4: bool, icmp_type: u8) -> bool {
    if v4 {
        matches!(
            icmp_type,
            icmp::ECHO_REPLY
                | icmp::ECHO_REQUEST
                | icmp::TIMESTAMP
                | icmp::TIMESTAMP_REPLY
                | icmp::INFO_REQUEST
                | icmp::INFO_REPLY
                | icmp::ADDRESS
                | icmp::ADDRESS_REPLY
        )
    } else {
        matches!(
            icmp_type,
            icmp::V6_ECHO_REQUEST | icmp::V6_ECHO_REPLY | 139 | 140
        )
    }
}

/// The header a [`WireError`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layer {
    /// The Ethernet II header.
    Ethernet,
    /// An 802.1Q / 802.1ad VLAN tag.
    Vlan,
    /// The Linux cooked-capture (SLL) header.
    LinuxSll,
    /// The Linux cooked-capture v2 (SLL2) header.
    LinuxSll2,
    /// The first byte of an IP packet (its version).
    Ip,
    /// The IPv4 header.
    Ipv4,
    /// The IPv6 header.
    Ipv6,
    /// An IPv6 extension header.
    Ipv6Extension,
    /// The TCP header.
    Tcp,
    /// The UDP header.
    Udp,
    /// The SCTP common header.
    Sctp,
    /// The ICMP header.
    Icmp,
    /// The ICMPv6 header.
    Icmpv6,
    /// The IP header quoted in an ICMP error.
    QuotedIp,
    /// An IPv6 extension header quoted in an ICMPv6 error.
    QuotedIpv6Extension,
    /// The layer-4 bytes quoted in an ICMP error.
    QuotedL4,
}

impl std::fmt::Display for Layer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Layer::Ethernet => "Ethernet header",
            Layer::Vlan => "VLAN tag",
            Layer::LinuxSll => "Linux cooked (SLL) header",
            Layer::LinuxSll2 => "Linux cooked v2 (SLL2) header",
            Layer::Ip => "IP header",
            Layer::Ipv4 => "IPv4 header",
            Layer::Ipv6 => "IPv6 header",
            Layer::Ipv6Extension => "IPv6 extension header",
            Layer::Tcp => "TCP header",
            Layer::Udp => "UDP header",
            Layer::Sctp => "SCTP common header",
            Layer::Icmp => "ICMP header",
            Layer::Icmpv6 => "ICMPv6 header",
            Layer::QuotedIp => "IP header quoted in an ICMP error",
            Layer::QuotedIpv6Extension => "IPv6 extension header quoted in an ICMPv6 error",
            Layer::QuotedL4 => "layer-4 header quoted in an ICMP error",
        })
    }
}

/// Why bytes did not parse into a [`Packet`]. Offsets count from the start of the buffer given
/// to the parse function (the start of the frame).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The buffer ends before a header (or the packet its length field announces) does.
    #[error(
        "truncated {layer} at byte {offset}: need {needed} bytes there, only {available} present"
    )]
    Truncated {
        /// The header that is cut.
        layer: Layer,
        /// Where it starts.
        offset: usize,
        /// Bytes it needs from `offset`.
        needed: usize,
        /// Bytes present from `offset`.
        available: usize,
    },
    /// A field holds a value that is not allowed.
    #[error("malformed {layer} at byte {offset}: {reason}")]
    Malformed {
        /// The header that is wrong.
        layer: Layer,
        /// Where it starts.
        offset: usize,
        /// What is wrong, and what was expected.
        reason: String,
    },
    /// The frame carries something other than IPv4 or IPv6 (ARP, LLDP, …).
    #[error("not an IP packet: {what} at byte {offset} (expected ether type 0x0800 IPv4 or 0x86dd IPv6)")]
    NotIp {
        /// Where the protocol field is.
        offset: usize,
        /// What it says.
        what: String,
    },
}

/// Why a [`Packet`] could not be written as bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmitError {
    /// `src` and `dst` are of different families.
    #[error("source {src} and destination {dst} are of different IP families")]
    MixedFamilies {
        /// Source address.
        src: IpAddr,
        /// Destination address.
        dst: IpAddr,
    },
    /// `len` cannot hold the headers the packet needs.
    #[error("packet length {len} is less than the {needed} bytes its headers need ({what})")]
    TooShort {
        /// The packet's `len`.
        len: u16,
        /// The bytes its headers need.
        needed: usize,
        /// Which headers.
        what: String,
    },
    /// The headers and payload given to [`emit_ip_with_payload`] are more than an IP
    /// packet holds (65,535 bytes).
    #[error("{len} bytes of headers and payload is more than an IP packet holds (65535)")]
    TooLong {
        /// The length asked for.
        len: usize,
    },
    /// An ICMP error quotes a packet of the other IP family.
    #[error("an {outer} ICMP error cannot quote an {inner} packet ({src} -> {dst})")]
    QuotedFamily {
        /// The family of the error packet.
        outer: &'static str,
        /// The family of the quoted packet.
        inner: &'static str,
        /// Quoted source.
        src: IpAddr,
        /// Quoted destination.
        dst: IpAddr,
    },
}

/// How to parse. `ParseOptions::default()` is strict about length and reads the tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseOptions {
    /// Accept a packet whose bytes end before its IP length says, as long as every header nfsim
    /// reads is present (a capture cut at its snap length). `len` is still the IP length.
    pub allow_snapped: bool,
    /// Read [`Packet::tag`] from the first 8 bytes after the modelled headers (else 0).
    pub read_tag: bool,
}

impl Default for ParseOptions {
    fn default() -> Self {
        ParseOptions {
            allow_snapped: false,
            read_tag: true,
        }
    }
}

/// The link layer of a frame, by its pcap `LINKTYPE_*` number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkType {
    /// `LINKTYPE_ETHERNET` (1): Ethernet II, optionally VLAN-tagged.
    Ethernet,
    /// `LINKTYPE_RAW` (101, also DLT 12 and 14): an IPv4 or IPv6 packet, by its version.
    RawIp,
    /// `LINKTYPE_IPV4` (228): an IPv4 packet.
    Ipv4,
    /// `LINKTYPE_IPV6` (229): an IPv6 packet.
    Ipv6,
    /// `LINKTYPE_LINUX_SLL` (113): Linux cooked capture v1 (`tcpdump -i any` before 4.99).
    LinuxSll,
    /// `LINKTYPE_LINUX_SLL2` (276): Linux cooked capture v2 (`tcpdump -i any` since 4.99).
    LinuxSll2,
}

impl LinkType {
    /// The link type of a pcap `LINKTYPE_*` (or DLT) number, if nfsim reads it.
    pub fn from_linktype(n: u32) -> Option<LinkType> {
        Some(match n {
            1 => LinkType::Ethernet,
            101 | 12 | 14 => LinkType::RawIp,
            228 => LinkType::Ipv4,
            229 => LinkType::Ipv6,
            113 => LinkType::LinuxSll,
            276 => LinkType::LinuxSll2,
            _ => return None,
        })
    }
    /// Its `LINKTYPE_*` number, as written in a pcap header.
    pub fn linktype(self) -> u32 {
        match self {
            LinkType::Ethernet => 1,
            LinkType::RawIp => 101,
            LinkType::Ipv4 => 228,
            LinkType::Ipv6 => 229,
            LinkType::LinuxSll => 113,
            LinkType::LinuxSll2 => 276,
        }
    }
    /// The `LINKTYPE_*` name.
    pub fn name(self) -> &'static str {
        match self {
            LinkType::Ethernet => "LINKTYPE_ETHERNET",
            LinkType::RawIp => "LINKTYPE_RAW",
            LinkType::Ipv4 => "LINKTYPE_IPV4",
            LinkType::Ipv6 => "LINKTYPE_IPV6",
            LinkType::LinuxSll => "LINKTYPE_LINUX_SLL",
            LinkType::LinuxSll2 => "LINKTYPE_LINUX_SLL2",
        }
    }
}

/// The link types [`LinkType::from_linktype`] knows, for error messages.
pub const SUPPORTED_LINKTYPES: &str =
    "1 (Ethernet), 101 (raw IP), 228 (IPv4), 229 (IPv6), 113 (Linux SLL), 276 (Linux SLL2)";

// ---------------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------------

fn truncated(layer: Layer, offset: usize, needed: usize, available: usize) -> WireError {
    WireError::Truncated {
        layer,
        offset,
        needed,
        available,
    }
}

fn malformed(layer: Layer, offset: usize, reason: impl Into<String>) -> WireError {
    WireError::Malformed {
        layer,
        offset,
        reason: reason.into(),
    }
}

/// `buf[at..at+n]`, or a truncation error for `layer` at frame offset `base + at` (`buf` starts
/// at frame offset `base`).
fn need(buf: &[u8], at: usize, n: usize, layer: Layer, base: usize) -> Result<&[u8], WireError> {
    let have = buf.len().saturating_sub(at);
    if have < n {
        return Err(truncated(layer, base + at, n, have));
    }
    Ok(&buf[at..at + n])
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn ether_type_name(t: u16) -> String {
    let name = match t {
        ETH_P_ARP => " (ARP)",
        0x88cc => " (LLDP)",
        0x8035 => " (RARP)",
        0x8847 | 0x8848 => " (MPLS)",
        0x888e => " (EAPOL)",
        _ => "",
    };
    format!("ether type 0x{t:04x}{name}")
}

/// Parses a frame of link type `link`.
pub fn parse_link(link: LinkType, frame: &[u8], opts: &ParseOptions) -> Result<Packet, WireError> {
    match link {
        LinkType::Ethernet => parse_ethernet_with(frame, opts),
        LinkType::RawIp => parse_ip_at(frame, 0, opts, None),
        LinkType::Ipv4 => parse_ip_at(frame, 0, opts, Some(4)),
        LinkType::Ipv6 => parse_ip_at(frame, 0, opts, Some(6)),
        LinkType::LinuxSll => {
            // struct sll_header: pkttype, hatype, halen, addr[8], protocol (all big-endian).
            let h = need(frame, 0, SLL_HLEN, Layer::LinuxSll, 0)?;
            let hatype = be16(h, 2);
            let proto = be16(h, 14);
            ip_by_ether_type(frame, SLL_HLEN, proto, 14, hatype, opts)
        }
        LinkType::LinuxSll2 => {
            // struct sll2_header: protocol, reserved, if_index(4), hatype, pkttype, halen,
            // addr[8].
            let h = need(frame, 0, SLL2_HLEN, Layer::LinuxSll2, 0)?;
            let proto = be16(h, 0);
            let hatype = be16(h, 8);
            ip_by_ether_type(frame, SLL2_HLEN, proto, 0, hatype, opts)
        }
    }
}

/// Where the IP header starts in a frame of link type `link` (after the Ethernet header and
/// its VLAN tags, or the cooked-capture header), or `None` when the frame is too short to
/// say. It does not check that an IP packet follows: call it on frames that parsed.
pub fn ip_offset(link: LinkType, frame: &[u8]) -> Option<usize> {
    match link {
        LinkType::RawIp | LinkType::Ipv4 | LinkType::Ipv6 => Some(0),
        LinkType::LinuxSll => Some(SLL_HLEN),
        LinkType::LinuxSll2 => Some(SLL2_HLEN),
        LinkType::Ethernet => {
            let mut ether_type = be16(frame.get(..ETH_HLEN)?, 12);
            let mut at = ETH_HLEN;
            while matches!(ether_type, ETH_P_8021Q | ETH_P_8021AD | ETH_P_QINQ1) {
                ether_type = be16(frame.get(at..at + 4)?, 2);
                at += 4;
            }
            Some(at)
        }
    }
}

/// The IP packet's length by its header (IPv4 total length, or 40 + the IPv6 payload
/// length), or `None` when `ip` does not start with one.
pub fn ip_total_len(ip: &[u8]) -> Option<usize> {
    match ip.first()? >> 4 {
        4 => Some(usize::from(be16(ip.get(..4)?, 2))),
        6 => Some(40 + usize::from(be16(ip.get(..6)?, 4))),
        _ => None,
    }
}

/// ARPHRD_NETLINK: an SLL capture of netlink traffic, whose protocol field is a netlink family.
const ARPHRD_NETLINK: u16 = 824;

fn ip_by_ether_type(
    frame: &[u8],
    ip_at: usize,
    proto: u16,
    proto_at: usize,
    hatype: u16,
    opts: &ParseOptions,
) -> Result<Packet, WireError> {
    if hatype == ARPHRD_NETLINK {
        return Err(WireError::NotIp {
            offset: proto_at,
            what: format!("netlink family {proto} (ARPHRD_NETLINK)"),
        });
    }
    match proto {
        ETH_P_IP => parse_ip_at(frame, ip_at, opts, Some(4)),
        ETH_P_IPV6 => parse_ip_at(frame, ip_at, opts, Some(6)),
        other => Err(WireError::NotIp {
            offset: proto_at,
            what: ether_type_name(other),
        }),
    }
}

/// Parses an Ethernet II frame (VLAN tags skipped) holding an IPv4 or IPv6 packet, strictly
/// (see [`ParseOptions::default`]).
pub fn parse_ethernet(frame: &[u8]) -> Result<Packet, WireError> {
    parse_ethernet_with(frame, &ParseOptions::default())
}

/// [`parse_ethernet`] with options.
pub fn parse_ethernet_with(frame: &[u8], opts: &ParseOptions) -> Result<Packet, WireError> {
    let eth = Ethernet2Slice::from_slice_without_fcs(frame)
        .map_err(|e| truncated(Layer::Ethernet, 0, e.required_len, e.len))?;
    let mut ether_type = eth.ether_type().0;
    let mut type_at = 12;
    let mut at = ETH_HLEN;
    // 802.1Q / 802.1ad tags: TCI then the next ether type. The kernel's netfilter sees the
    // packet on the VLAN device, after the tags are stripped.
    while matches!(ether_type, ETH_P_8021Q | ETH_P_8021AD | ETH_P_QINQ1) {
        let tag = need(frame, at, 4, Layer::Vlan, 0)?;
        ether_type = be16(tag, 2);
        type_at = at + 2;
        at += 4;
    }
    if ether_type < 0x0600 {
        return Err(WireError::NotIp {
            offset: type_at,
            what: format!("802.3 length field {ether_type}"),
        });
    }
    match ether_type {
        ETH_P_IP => parse_ip_at(frame, at, opts, Some(4)),
        ETH_P_IPV6 => parse_ip_at(frame, at, opts, Some(6)),
        other => Err(WireError::NotIp {
            offset: type_at,
            what: ether_type_name(other),
        }),
    }
}

/// Parses a raw IPv4 or IPv6 packet (by its version nibble), strictly (see
/// [`ParseOptions::default`]).
pub fn parse_ip(bytes: &[u8]) -> Result<Packet, WireError> {
    parse_ip_at(bytes, 0, &ParseOptions::default(), None)
}

/// [`parse_ip`] with options.
pub fn parse_ip_with(bytes: &[u8], opts: &ParseOptions) -> Result<Packet, WireError> {
    parse_ip_at(bytes, 0, opts, None)
}

/// The parts of an IP packet the layer-4 parser needs.
struct IpView<'a> {
    src: IpAddr,
    dst: IpAddr,
    /// The IP length (`Packet::len`).
    len: u16,
    ttl: u8,
    /// The layer-4 protocol number.
    proto: u8,
    /// Bytes after the IP (and extension) headers, as far as they are present.
    l4: &'a [u8],
    /// Offset of `l4` in the frame.
    l4_at: usize,
    /// Offset 0 with more fragments to come: ports present, the UDP length may exceed `l4`.
    first_fragment: bool,
    /// Offset > 0: no layer-4 header.
    later_fragment: bool,
    /// Bytes are missing at the end (snapped capture).
    snapped: bool,
}

fn parse_ip_at(
    frame: &[u8],
    at: usize,
    opts: &ParseOptions,
    expect_version: Option<u8>,
) -> Result<Packet, WireError> {
    let buf = &frame[at.min(frame.len())..];
    let first = need(buf, 0, 1, Layer::Ip, at)?[0];
    let version = first >> 4;
    if let Some(v) = expect_version {
        if v != version {
            return Err(malformed(
                Layer::Ip,
                at,
                format!("IP version {version} where the link layer announced IPv{v}"),
            ));
        }
    }
    let view = match version {
        4 => ipv4_view(buf, at, opts)?,
        6 => ipv6_view(buf, at, opts)?,
        v => {
            return Err(malformed(
                Layer::Ip,
                at,
                format!("IP version {v} (expected 4 or 6)"),
            ))
        }
    };
    let (l4, tag_bytes) = parse_l4(&view)?;
    let tag = if opts.read_tag {
        tag_bytes.map_or(0, |b| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            u64::from_be_bytes(a)
        })
    } else {
        0
    };
    Ok(Packet {
        src: view.src,
        dst: view.dst,
        l4,
        len: view.len,
        ttl: view.ttl,
        mark: 0,
        iif: None,
        oif: None,
        tag,
    })
}

fn ipv4_view<'a>(buf: &'a [u8], at: usize, opts: &ParseOptions) -> Result<IpView<'a>, WireError> {
    use etherparse::err::ipv4::{HeaderError, HeaderSliceError};
    let h = Ipv4HeaderSlice::from_slice(buf).map_err(|e| match e {
        HeaderSliceError::Len(l) => truncated(Layer::Ipv4, at, l.required_len, l.len),
        HeaderSliceError::Content(HeaderError::UnexpectedVersion { version_number }) => malformed(
            Layer::Ipv4,
            at,
            format!("version {version_number} (expected 4)"),
        ),
        HeaderSliceError::Content(HeaderError::HeaderLengthSmallerThanHeader { ihl }) => malformed(
            Layer::Ipv4,
            at,
            format!("header length (IHL) {ihl} words (expected at least 5)"),
        ),
    })?;
    let hlen = h.slice().len();
    let total = usize::from(h.total_len());
    if total < hlen {
        return Err(malformed(
            Layer::Ipv4,
            at,
            format!("total length {total} is less than the header length {hlen}"),
        ));
    }
    let snapped = buf.len() < total;
    if snapped && !opts.allow_snapped {
        return Err(truncated(Layer::Ipv4, at, total, buf.len()));
    }
    let end = total.min(buf.len());
    let frag_off = h.fragments_offset().value();
    Ok(IpView {
        src: IpAddr::V4(h.source_addr()),
        dst: IpAddr::V4(h.destination_addr()),
        len: h.total_len(),
        ttl: h.ttl(),
        proto: h.protocol().0,
        l4: &buf[hlen..end],
        l4_at: at + hlen,
        first_fragment: frag_off == 0 && h.more_fragments(),
        later_fragment: frag_off != 0,
        snapped,
    })
}

/// Where the walk over IPv6 extension headers ended.
pub(crate) struct ExtWalk {
    /// The upper-layer protocol number.
    pub(crate) proto: u8,
    /// Offset of the upper-layer header from the start of the slice walked.
    pub(crate) l4_off: usize,
    /// A fragment header with offset 0 and M set was passed.
    first_fragment: bool,
    /// A fragment header with a non-zero offset was met (the walk stopped there).
    pub(crate) later_fragment: bool,
}

/// Walks IPv6 extension headers starting at `off` with next header `nh`, as the kernel's
/// `ipv6_skip_exthdr()` does: hop-by-hop, routing and destination options are `(len + 1) * 8`
/// bytes, AH is `(len + 2) * 4`, a fragment header 8; the walk stops at anything else (ESP and
/// "no next header" included), and at a fragment header whose offset is not zero.
pub(crate) fn walk_ipv6_ext(
    buf: &[u8],
    mut off: usize,
    mut nh: u8,
    layer: Layer,
    base: usize,
) -> Result<ExtWalk, WireError> {
    let mut first_fragment = false;
    loop {
        match nh {
            NEXTHDR_HOP | NEXTHDR_ROUTING | NEXTHDR_DEST | NEXTHDR_AUTH => {
                let h = need(buf, off, 2, layer, base)?;
                let len = if nh == NEXTHDR_AUTH {
                    (usize::from(h[1]) + 2) * 4
                } else {
                    (usize::from(h[1]) + 1) * 8
                };
                need(buf, off, len, layer, base)?;
                nh = h[0];
                off += len;
            }
            NEXTHDR_FRAGMENT => {
                let h = need(buf, off, 8, layer, base)?;
                let frag = be16(h, 2);
                let offset = frag & 0xfff8;
                let more = frag & 1 != 0;
                if offset != 0 {
                    return Ok(ExtWalk {
                        proto: h[0],
                        l4_off: off + 8,
                        first_fragment: false,
                        later_fragment: true,
                    });
                }
                first_fragment |= more;
                nh = h[0];
                off += 8;
            }
            _ => {
                return Ok(ExtWalk {
                    proto: nh,
                    l4_off: off,
                    first_fragment,
                    later_fragment: false,
                })
            }
        }
    }
}

fn ipv6_view<'a>(buf: &'a [u8], at: usize, opts: &ParseOptions) -> Result<IpView<'a>, WireError> {
    use etherparse::err::ipv6::{HeaderError, HeaderSliceError};
    let h = Ipv6HeaderSlice::from_slice(buf).map_err(|e| match e {
        HeaderSliceError::Len(l) => truncated(Layer::Ipv6, at, l.required_len, l.len),
        HeaderSliceError::Content(HeaderError::UnexpectedVersion { version_number }) => malformed(
            Layer::Ipv6,
            at,
            format!("version {version_number} (expected 6)"),
        ),
    })?;
    let total = Ipv6Header::LEN + usize::from(h.payload_length());
    let len = u16::try_from(total).map_err(|_| {
        malformed(
            Layer::Ipv6,
            at,
            format!(
                "payload length {} makes a {total}-byte packet, more than nfsim's 65535-byte limit",
                h.payload_length()
            ),
        )
    })?;
    let snapped = buf.len() < total;
    if snapped && !opts.allow_snapped {
        return Err(truncated(Layer::Ipv6, at, total, buf.len()));
    }
    let end = total.min(buf.len());
    let pkt = &buf[..end];
    let walk = walk_ipv6_ext(
        pkt,
        Ipv6Header::LEN,
        h.next_header().0,
        Layer::Ipv6Extension,
        at,
    )?;
    Ok(IpView {
        src: IpAddr::V6(h.source_addr()),
        dst: IpAddr::V6(h.destination_addr()),
        len,
        ttl: h.hop_limit(),
        proto: walk.proto,
        l4: &pkt[walk.l4_off.min(pkt.len())..],
        l4_at: at + walk.l4_off,
        first_fragment: walk.first_fragment,
        later_fragment: walk.later_fragment,
        snapped,
    })
}

/// The options of a TCP header (`hdr`: the whole header) that conntrack reads, parsed as
/// the kernel's `tcp_options` and `tcp_sack` parse them: EOL ends, NOP is skipped, a length
/// below 2 or beyond the header ends the walk; window scale (3, length 3), SACK-permitted
/// (4, length 2), SACK (5, length 2 + 8n): the highest right edge of its blocks.
fn tcp_opts(hdr: &[u8]) -> TcpOpts {
    let mut o = TcpOpts {
        hdr_len: hdr.len().min(60) as u8,
        ..TcpOpts::NONE
    };
    let mut opts = hdr.get(20..).unwrap_or(&[]);
    while let Some((&kind, rest)) = opts.split_first() {
        match kind {
            0 => break,
            1 => {
                opts = rest;
                continue;
            }
            _ => {}
        }
        let Some(&size) = rest.first() else { break };
        let size = usize::from(size);
        if size < 2 || size > opts.len() {
            break;
        }
        let body = &opts[2..size];
        match (kind, size) {
            (3, 3) => o.wscale = Some(body[0]),
            (4, 2) => o.sack_perm = true,
            (5, n) if n >= 10 && (n - 2) % 8 == 0 && o.sack.is_none() => {
                for block in body.chunks_exact(8) {
                    let right = u32::from_be_bytes([block[4], block[5], block[6], block[7]]);
                    // after(right, best): later in sequence space.
                    if o.sack
                        .is_none_or(|best| (right.wrapping_sub(best) as i32) > 0)
                    {
                        o.sack = Some(right);
                    }
                }
            }
            _ => {}
        }
        opts = &opts[size..];
    }
    o
}

/// The option bytes [`emit_ip`] writes for `o` in a header of `o.hdr_len` bytes: window
/// scale, SACK-permitted, one SACK block ending at `o.sack` (its left edge written equal to
/// its right: only the right edge is kept), then NOPs; options that do not fit are left out.
fn tcp_option_bytes(o: &TcpOpts) -> Vec<u8> {
    let room = usize::from(o.hdr_len).saturating_sub(20).min(40);
    let mut b = Vec::with_capacity(room);
    let mut put = |bytes: &[u8]| {
        if b.len() + bytes.len() <= room {
            b.extend_from_slice(bytes);
        }
    };
    if let Some(w) = o.wscale {
        put(&[3, 3, w]);
    }
    if o.sack_perm {
        put(&[4, 2]);
    }
    if let Some(r) = o.sack {
        let r = r.to_be_bytes();
        put(&[5, 10, r[0], r[1], r[2], r[3], r[0], r[1], r[2], r[3]]);
    }
    b.resize(room - room % 4, 1);
    b
}

/// The layer-4 header, and the 8 bytes after the modelled headers if present (the tag).
fn parse_l4<'a>(v: &IpView<'a>) -> Result<(L4, Option<&'a [u8]>), WireError> {
    let v4 = v.src.is_ipv4();
    let tag_at = |off: usize| v.l4.get(off..off + 8);
    if v.later_fragment {
        return Ok((L4::Other { proto: v.proto }, tag_at(0)));
    }
    match v.proto {
        IPPROTO_TCP => {
            use etherparse::err::tcp::{HeaderError, HeaderSliceError};
            let t = TcpHeaderSlice::from_slice(v.l4).map_err(|e| match e {
                HeaderSliceError::Len(l) => truncated(Layer::Tcp, v.l4_at, l.required_len, l.len),
                HeaderSliceError::Content(HeaderError::DataOffsetTooSmall { data_offset }) => {
                    malformed(
                        Layer::Tcp,
                        v.l4_at,
                        format!("data offset {data_offset} words (expected at least 5)"),
                    )
                }
            })?;
            let flags = TcpFlags(t.slice()[13]);
            let l4 = L4::Tcp {
                sport: t.source_port(),
                dport: t.destination_port(),
                flags,
                seq: t.sequence_number(),
                ack: t.acknowledgment_number(),
                win: t.window_size(),
                opts: tcp_opts(t.slice()),
            };
            Ok((l4, tag_at(t.slice().len())))
        }
        IPPROTO_UDP => {
            let u = UdpHeaderSlice::from_slice(v.l4)
                .map_err(|l| truncated(Layer::Udp, v.l4_at, l.required_len, l.len))?;
            let ulen = usize::from(u.length());
            // udp_error(): a length below the header or beyond the IP payload is malformed.
            // A first fragment carries only part of the datagram the length counts.
            if ulen < UdpHeader::LEN {
                return Err(malformed(
                    Layer::Udp,
                    v.l4_at,
                    format!("length field {ulen} is less than the 8-byte header"),
                ));
            }
            if ulen > v.l4.len() && !v.first_fragment && !v.snapped {
                return Err(malformed(
                    Layer::Udp,
                    v.l4_at,
                    format!(
                        "length field {ulen} exceeds the {} bytes of IP payload",
                        v.l4.len()
                    ),
                ));
            }
            let l4 = L4::Udp {
                sport: u.source_port(),
                dport: u.destination_port(),
            };
            let tag = tag_at(UdpHeader::LEN).filter(|_| ulen >= UdpHeader::LEN + 8);
            Ok((l4, tag))
        }
        IPPROTO_SCTP => {
            let h = need(v.l4, 0, SCTP_HLEN, Layer::Sctp, v.l4_at)?;
            let l4 = L4::Sctp {
                sport: be16(h, 0),
                dport: be16(h, 2),
            };
            Ok((l4, tag_at(SCTP_HLEN)))
        }
        IPPROTO_ICMP if v4 => parse_icmp(v, true).map(|l4| (l4, icmp_tag(v, &l4))),
        IPPROTO_ICMPV6 if !v4 => parse_icmp(v, false).map(|l4| (l4, icmp_tag(v, &l4))),
        proto => Ok((L4::Other { proto }, tag_at(0))),
    }
}

fn icmp_tag<'a>(v: &IpView<'a>, l4: &L4) -> Option<&'a [u8]> {
    match l4 {
        L4::Icmp {
            body: IcmpBody::Error(_),
            ..
        } => None,
        _ => v.l4.get(8..16),
    }
}

fn parse_icmp(v: &IpView<'_>, v4: bool) -> Result<L4, WireError> {
    let layer = if v4 { Layer::Icmp } else { Layer::Icmpv6 };
    let h = need(v.l4, 0, 8, layer, v.l4_at)?;
    let (icmp_type, code) = (h[0], h[1]);
    let body = if icmp_is_query(v4, icmp_type) {
        IcmpBody::Query {
            id: be16(h, 4),
            seq: be16(h, 6),
        }
    } else if icmp_is_error(v4, icmp_type) {
        IcmpBody::Error(parse_quote(&v.l4[8..], v.l4_at + 8, v4)?)
    } else {
        IcmpBody::Other
    };
    Ok(L4::Icmp {
        icmp_type,
        code,
        body,
    })
}

/// Reads the packet an ICMP error quotes: its IP header (same family as the error), then the
/// first bytes of its layer 4: ports for TCP, UDP and SCTP (4 bytes needed), type and id for
/// ICMP (8 bytes, as `icmp_pkt_to_tuple()` reads), nothing for other protocols or a quoted
/// later fragment.
fn parse_quote(q: &[u8], at: usize, v4: bool) -> Result<InnerHeader, WireError> {
    let (src, dst, proto, l4_off, later, ttl) = if v4 {
        use etherparse::err::ipv4::{HeaderError, HeaderSliceError};
        let h = Ipv4HeaderSlice::from_slice(q).map_err(|e| match e {
            HeaderSliceError::Len(l) => truncated(Layer::QuotedIp, at, l.required_len, l.len),
            HeaderSliceError::Content(HeaderError::UnexpectedVersion { version_number }) => {
                malformed(
                    Layer::QuotedIp,
                    at,
                    format!("version {version_number} (an ICMP error quotes an IPv4 header)"),
                )
            }
            HeaderSliceError::Content(HeaderError::HeaderLengthSmallerThanHeader { ihl }) => {
                malformed(
                    Layer::QuotedIp,
                    at,
                    format!("header length (IHL) {ihl} words (expected at least 5)"),
                )
            }
        })?;
        (
            IpAddr::V4(h.source_addr()),
            IpAddr::V4(h.destination_addr()),
            h.protocol().0,
            h.slice().len(),
            h.fragments_offset().value() != 0,
            h.ttl(),
        )
    } else {
        use etherparse::err::ipv6::{HeaderError, HeaderSliceError};
        let h = Ipv6HeaderSlice::from_slice(q).map_err(|e| match e {
            HeaderSliceError::Len(l) => truncated(Layer::QuotedIp, at, l.required_len, l.len),
            HeaderSliceError::Content(HeaderError::UnexpectedVersion { version_number }) => {
                malformed(
                    Layer::QuotedIp,
                    at,
                    format!("version {version_number} (an ICMPv6 error quotes an IPv6 header)"),
                )
            }
        })?;
        let walk = walk_ipv6_ext(
            q,
            Ipv6Header::LEN,
            h.next_header().0,
            Layer::QuotedIpv6Extension,
            at,
        )?;
        (
            IpAddr::V6(h.source_addr()),
            IpAddr::V6(h.destination_addr()),
            walk.proto,
            walk.l4_off,
            walk.later_fragment,
            h.hop_limit(),
        )
    };
    let mut inner = InnerHeader {
        src,
        dst,
        proto,
        sport: 0,
        dport: 0,
        icmp_type: 0,
        ttl,
    };
    if later {
        return Ok(inner);
    }
    let inner_icmp = if v4 { IPPROTO_ICMP } else { IPPROTO_ICMPV6 };
    match proto {
        IPPROTO_TCP | IPPROTO_UDP | IPPROTO_SCTP => {
            let p = need(q, l4_off, 4, Layer::QuotedL4, at)?;
            inner.sport = be16(p, 0);
            inner.dport = be16(p, 2);
        }
        p if p == inner_icmp => {
            let p = need(q, l4_off, 8, Layer::QuotedL4, at)?;
            inner.icmp_type = p[0];
            inner.sport = be16(p, 4);
        }
        _ => {}
    }
    Ok(inner)
}

// ---------------------------------------------------------------------------------------------
// Emitting
// ---------------------------------------------------------------------------------------------

/// The bytes [`emit_ip`] puts before the payload: IP header plus modelled layer-4 headers.
pub fn header_len(p: &Packet) -> usize {
    let ip = if p.is_ipv4() { 20 } else { 40 };
    ip + l4_header_len(p)
}

fn l4_header_len(p: &Packet) -> usize {
    match p.l4 {
        L4::Tcp { opts, .. } => TcpHeader::MIN_LEN + tcp_option_bytes(&opts).len(),
        L4::Udp { .. } => UdpHeader::LEN,
        L4::Sctp { .. } => SCTP_HLEN,
        L4::Icmp {
            body: IcmpBody::Error(inner),
            ..
        } => 8 + quote_len(&inner),
        L4::Icmp { .. } => 8,
        L4::Other { .. } => 0,
    }
}

fn quote_len(inner: &InnerHeader) -> usize {
    (if inner.src.is_ipv4() { 20 } else { 40 }) + 8
}

/// Writes `p` as an IPv4 or IPv6 packet of `p.len` bytes with valid checksums (see the module
/// documentation for what is written).
pub fn emit_ip(p: &Packet) -> Result<Vec<u8>, EmitError> {
    if p.src.is_ipv4() != p.dst.is_ipv4() {
        return Err(EmitError::MixedFamilies {
            src: p.src,
            dst: p.dst,
        });
    }
    if let L4::Icmp {
        body: IcmpBody::Error(inner),
        ..
    } = p.l4
    {
        let fam = |v4: bool| if v4 { "IPv4" } else { "IPv6" };
        if inner.src.is_ipv4() != p.is_ipv4() || inner.dst.is_ipv4() != p.is_ipv4() {
            return Err(EmitError::QuotedFamily {
                outer: fam(p.is_ipv4()),
                inner: fam(!p.is_ipv4()),
                src: inner.src,
                dst: inner.dst,
            });
        }
    }
    let total = usize::from(p.len);
    let hdrs = header_len(p);
    if total < hdrs {
        return Err(EmitError::TooShort {
            len: p.len,
            needed: hdrs,
            what: headers_what(p),
        });
    }
    let ip_len = if p.is_ipv4() { 20 } else { 40 };
    // The layer-4 part: headers (checksum fields zero for now) then the payload.
    let mut l4 = vec![0u8; total - ip_len];
    let l4h = l4_header_len(p);
    if !matches!(
        p.l4,
        L4::Icmp {
            body: IcmpBody::Error(_),
            ..
        }
    ) && l4.len() >= l4h + 8
    {
        l4[l4h..l4h + 8].copy_from_slice(&p.tag.to_be_bytes());
    }
    let proto = p.protocol();
    let mut out = Vec::with_capacity(total);
    match (p.src, p.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let ip = ipv4_header(s, d, p.ttl, proto, l4.len());
            fill_l4(p, &mut l4, &L4Pseudo::V4(&ip))?;
            out.extend_from_slice(&ip.to_bytes());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let ip = ipv6_header(s, d, p.ttl, proto, l4.len());
            fill_l4(p, &mut l4, &L4Pseudo::V6(&ip))?;
            out.extend_from_slice(&ip.to_bytes());
        }
        _ => unreachable!("families checked above"),
    }
    out.extend_from_slice(&l4);
    Ok(out)
}

/// Writes `p` as an IPv4 or IPv6 packet carrying `payload`: the headers [`emit_ip`] writes,
/// then `payload` after the layer-4 header (TCP 20 bytes, UDP 8, SCTP 12, ICMP 8: for an
/// ICMP error, `payload` is the quoted packet, written as given instead of the quote
/// [`emit_ip`] makes from the [`InnerHeader`]), with the IP length of headers plus payload
/// (`p.len` is not used) and every checksum computed over it. The tag is not written.
pub fn emit_ip_with_payload(p: &Packet, payload: &[u8]) -> Result<Vec<u8>, EmitError> {
    if p.src.is_ipv4() != p.dst.is_ipv4() {
        return Err(EmitError::MixedFamilies {
            src: p.src,
            dst: p.dst,
        });
    }
    let ip_len = if p.is_ipv4() { 20 } else { 40 };
    let l4h = match p.l4 {
        L4::Tcp { opts, .. } => TcpHeader::MIN_LEN + tcp_option_bytes(&opts).len(),
        L4::Udp { .. } => UdpHeader::LEN,
        L4::Sctp { .. } => SCTP_HLEN,
        L4::Icmp { .. } => 8,
        L4::Other { .. } => 0,
    };
    let total = ip_len + l4h + payload.len();
    if total > usize::from(u16::MAX) {
        return Err(EmitError::TooLong { len: total });
    }
    let mut l4 = vec![0u8; l4h + payload.len()];
    l4[l4h..].copy_from_slice(payload);
    // The quote is the payload: fill the ICMP header as for a message without a body.
    let mut head = *p;
    if let L4::Icmp {
        icmp_type, code, ..
    } = p.l4
    {
        head.l4 = L4::Icmp {
            icmp_type,
            code,
            body: match p.l4 {
                L4::Icmp {
                    body: b @ IcmpBody::Query { .. },
                    ..
                } => b,
                _ => IcmpBody::Other,
            },
        };
    }
    let proto = p.protocol();
    let mut out = Vec::with_capacity(total);
    match (p.src, p.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let ip = ipv4_header(s, d, p.ttl, proto, l4.len());
            fill_l4(&head, &mut l4, &L4Pseudo::V4(&ip))?;
            out.extend_from_slice(&ip.to_bytes());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let ip = ipv6_header(s, d, p.ttl, proto, l4.len());
            fill_l4(&head, &mut l4, &L4Pseudo::V6(&ip))?;
            out.extend_from_slice(&ip.to_bytes());
        }
        _ => unreachable!("families checked above"),
    }
    out.extend_from_slice(&l4);
    Ok(out)
}

fn headers_what(p: &Packet) -> String {
    let ip = if p.is_ipv4() {
        "20-byte IPv4 header"
    } else {
        "40-byte IPv6 header"
    };
    let l4 = match p.l4 {
        L4::Tcp { .. } => format!(" + {}-byte TCP header", l4_header_len(p)),
        L4::Udp { .. } => " + 8-byte UDP header".to_string(),
        L4::Sctp { .. } => " + 12-byte SCTP common header".to_string(),
        L4::Icmp {
            body: IcmpBody::Error(inner),
            ..
        } => format!(
            " + 8-byte ICMP header + {}-byte quoted header",
            quote_len(&inner)
        ),
        L4::Icmp { .. } => " + 8-byte ICMP header".to_string(),
        L4::Other { .. } => String::new(),
    };
    format!("{ip}{l4}")
}

/// Writes `p` as an Ethernet II frame from `src_mac` to `dst_mac`.
pub fn emit_ethernet(p: &Packet, src_mac: [u8; 6], dst_mac: [u8; 6]) -> Result<Vec<u8>, EmitError> {
    let ip = emit_ip(p)?;
    let eth = Ethernet2Header {
        source: src_mac,
        destination: dst_mac,
        ether_type: EtherType(if p.is_ipv4() { ETH_P_IP } else { ETH_P_IPV6 }),
    };
    let mut out = Vec::with_capacity(ETH_HLEN + ip.len());
    out.extend_from_slice(&eth.to_bytes());
    out.extend_from_slice(&ip);
    Ok(out)
}

fn ipv4_header(src: Ipv4Addr, dst: Ipv4Addr, ttl: u8, proto: u8, payload_len: usize) -> Ipv4Header {
    // payload_len <= 65535 - 20: the caller's total came from a u16.
    let mut ip = Ipv4Header {
        total_len: (payload_len + Ipv4Header::MIN_LEN) as u16,
        identification: 0,
        dont_fragment: true,
        more_fragments: false,
        time_to_live: ttl,
        protocol: IpNumber(proto),
        header_checksum: 0,
        source: src.octets(),
        destination: dst.octets(),
        ..Default::default()
    };
    ip.header_checksum = ip.calc_header_checksum();
    ip
}

fn ipv6_header(src: Ipv6Addr, dst: Ipv6Addr, hop: u8, proto: u8, payload_len: usize) -> Ipv6Header {
    Ipv6Header {
        traffic_class: 0,
        flow_label: Ipv6FlowLabel::ZERO,
        payload_length: payload_len as u16,
        next_header: IpNumber(proto),
        hop_limit: hop,
        source: src.octets(),
        destination: dst.octets(),
    }
}

enum L4Pseudo<'a> {
    V4(&'a Ipv4Header),
    V6(&'a Ipv6Header),
}

fn too_big(e: etherparse::err::ValueTooBigError<usize>) -> EmitError {
    EmitError::TooShort {
        len: 0,
        needed: e.actual,
        what: format!("layer-4 length over {}", e.max_allowed),
    }
}

/// Writes the layer-4 headers at the start of `l4` (whose payload part is already filled) and
/// their checksums.
fn fill_l4(p: &Packet, l4: &mut [u8], ip: &L4Pseudo<'_>) -> Result<(), EmitError> {
    match p.l4 {
        L4::Tcp {
            sport,
            dport,
            flags,
            seq,
            ack,
            win,
            opts,
        } => {
            let mut t = TcpHeader::new(sport, dport, seq, win);
            t.acknowledgment_number = ack;
            let ob = tcp_option_bytes(&opts);
            if !ob.is_empty() {
                t.set_options_raw(&ob).map_err(|_| EmitError::TooShort {
                    len: 0,
                    needed: 20 + ob.len(),
                    what: "TCP options".to_string(),
                })?;
            }
            let hl = t.header_len();
            t.fin = flags.contains(TcpFlags::FIN);
            t.syn = flags.contains(TcpFlags::SYN);
            t.rst = flags.contains(TcpFlags::RST);
            t.psh = flags.contains(TcpFlags::PSH);
            t.ack = flags.contains(TcpFlags::ACK);
            t.urg = flags.contains(TcpFlags::URG);
            t.ece = flags.contains(TcpFlags::ECE);
            t.cwr = flags.contains(TcpFlags::CWR);
            let payload = &l4[hl..];
            t.checksum = match ip {
                L4Pseudo::V4(h) => t.calc_checksum_ipv4(h, payload),
                L4Pseudo::V6(h) => t.calc_checksum_ipv6(h, payload),
            }
            .map_err(too_big)?;
            l4[..hl].copy_from_slice(&t.to_bytes());
        }
        L4::Udp { sport, dport } => {
            let payload = &l4[UdpHeader::LEN..];
            let u = match ip {
                L4Pseudo::V4(h) => UdpHeader::with_ipv4_checksum(sport, dport, h, payload),
                L4Pseudo::V6(h) => UdpHeader::with_ipv6_checksum(sport, dport, h, payload),
            }
            .map_err(too_big)?;
            l4[..UdpHeader::LEN].copy_from_slice(&u.to_bytes());
        }
        L4::Sctp { sport, dport } => {
            l4[0..2].copy_from_slice(&sport.to_be_bytes());
            l4[2..4].copy_from_slice(&dport.to_be_bytes());
            // Verification tag 0, checksum field 0 while the CRC is computed; the kernel's
            // sctp_compute_cksum() stores the CRC32c little-endian.
            let crc = crc32c(l4);
            l4[8..12].copy_from_slice(&crc.to_le_bytes());
        }
        L4::Icmp {
            icmp_type,
            code,
            body,
        } => {
            l4[0] = icmp_type;
            l4[1] = code;
            match body {
                IcmpBody::Query { id, seq } => {
                    l4[4..6].copy_from_slice(&id.to_be_bytes());
                    l4[6..8].copy_from_slice(&seq.to_be_bytes());
                }
                IcmpBody::Error(inner) => write_quote(&inner, &mut l4[8..]),
                IcmpBody::Other => {}
            }
            let sum = match ip {
                L4Pseudo::V4(_) => Sum16BitWords::new().add_slice(l4).ones_complement(),
                L4Pseudo::V6(h) => Sum16BitWords::new()
                    .add_16bytes(h.source)
                    .add_16bytes(h.destination)
                    .add_4bytes((l4.len() as u32).to_be_bytes())
                    .add_2bytes([0, IPPROTO_ICMPV6])
                    .add_slice(l4)
                    .ones_complement(),
            };
            // Sum16BitWords adds native-endian words: `to_be()` gives the value whose
            // big-endian bytes are the checksum (as etherparse's own headers do).
            l4[2..4].copy_from_slice(&sum.to_be().to_be_bytes());
        }
        L4::Other { .. } => {}
    }
    Ok(())
}

/// Writes the quoted header of an ICMP error: an IP header whose length covers just the quote,
/// then 8 bytes of layer 4 (ports; for ICMP, type and id).
fn write_quote(inner: &InnerHeader, out: &mut [u8]) {
    let ip_len = match (inner.src, inner.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let h = ipv4_header(s, d, inner.ttl, inner.proto, 8).to_bytes();
            out[..h.len()].copy_from_slice(&h);
            h.len()
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let h = ipv6_header(s, d, inner.ttl, inner.proto, 8).to_bytes();
            out[..h.len()].copy_from_slice(&h);
            h.len()
        }
        // Mixed families are refused by emit_ip before this point.
        _ => return,
    };
    let l4 = &mut out[ip_len..ip_len + 8];
    match inner.proto {
        IPPROTO_TCP | IPPROTO_SCTP => {
            l4[0..2].copy_from_slice(&inner.sport.to_be_bytes());
            l4[2..4].copy_from_slice(&inner.dport.to_be_bytes());
        }
        IPPROTO_UDP => {
            l4[0..2].copy_from_slice(&inner.sport.to_be_bytes());
            l4[2..4].copy_from_slice(&inner.dport.to_be_bytes());
            l4[4..6].copy_from_slice(&8u16.to_be_bytes());
        }
        p if (p == IPPROTO_ICMP && inner.src.is_ipv4())
            || (p == IPPROTO_ICMPV6 && inner.src.is_ipv6()) =>
        {
            l4[0] = inner.icmp_type;
            l4[4..6].copy_from_slice(&inner.sport.to_be_bytes());
        }
        _ => {}
    }
}

/// CRC-32C (Castagnoli), as SCTP uses it (RFC 4960 appendix B): reflected polynomial
/// 0x82F63B78, initial value and final XOR 0xFFFFFFFF.
pub fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0x82F6_3B78 & mask);
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::SocketAddr;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// What survives the wire: everything but mark and interfaces.
    fn on_wire(mut p: Packet) -> Packet {
        p.mark = 0;
        p.iif = None;
        p.oif = None;
        p
    }

    fn ones_sum_ok(bytes: &[u8]) -> bool {
        Sum16BitWords::new().add_slice(bytes).ones_complement() == 0
    }

    #[test]
    fn udp_v4_bytes_are_what_the_kernel_would_send() {
        let p = Packet::udp(sa("10.244.2.9:40000"), sa("10.96.0.10:53")).tagged(0x0102030405060708);
        let b = emit_ip(&p).unwrap();
        assert_eq!(b.len(), 60);
        assert_eq!(b[0], 0x45);
        assert_eq!(u16::from_be_bytes([b[2], b[3]]), 60);
        assert_eq!(b[6] & 0x40, 0x40, "DF set");
        assert_eq!(b[8], 64);
        assert_eq!(b[9], 17);
        assert!(ones_sum_ok(&b[..20]), "IPv4 header checksum");
        assert_eq!(&b[12..16], &[10, 244, 2, 9]);
        assert_eq!(&b[16..20], &[10, 96, 0, 10]);
        assert_eq!(u16::from_be_bytes([b[20], b[21]]), 40000);
        assert_eq!(u16::from_be_bytes([b[22], b[23]]), 53);
        assert_eq!(u16::from_be_bytes([b[24], b[25]]), 40);
        assert_eq!(&b[28..36], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert!(b[36..].iter().all(|&x| x == 0));
        // UDP checksum over the pseudo-header verifies to zero.
        let pseudo = Sum16BitWords::new()
            .add_slice(&b[12..20])
            .add_2bytes([0, 17])
            .add_2bytes(40u16.to_be_bytes())
            .add_slice(&b[20..]);
        assert_eq!(pseudo.ones_complement(), 0);
        assert_eq!(parse_ip(&b).unwrap(), p);
    }

    #[test]
    fn tcp_flags_seq_ack_survive() {
        let mut p = Packet::tcp(
            sa("10.0.0.1:5000"),
            sa("10.0.0.2:80"),
            TcpFlags::SYN | TcpFlags::ACK | TcpFlags::ECE,
        );
        p.l4 = L4::Tcp {
            sport: 5000,
            dport: 80,
            flags: TcpFlags::SYN | TcpFlags::ACK | TcpFlags::ECE,
            seq: 0xdeadbeef,
            ack: 7,
            win: 502,
            opts: TcpOpts {
                hdr_len: 36,
                wscale: Some(7),
                sack_perm: true,
                sack: Some(0x1234_5678),
            },
        };
        let b = emit_ip(&p).unwrap();
        assert_eq!(b[20 + 12] >> 4, 9, "a 36-byte header");
        assert_eq!(u16::from_be_bytes([b[20 + 14], b[20 + 15]]), 502);
        assert_eq!(b[20 + 13], 0x52);
        let q = parse_ip(&b).unwrap();
        assert_eq!(q, p);
        assert_eq!(
            q.to_string(),
            "tcp 10.0.0.1:5000 -> 10.0.0.2:80 SYN,ACK,ECE seq=3735928559 ack=7 win=502 len=16 wscale=7 sackok sack=305419896"
        );
    }

    #[test]
    fn icmp_error_quotes_and_parses_back() {
        let q = Packet::udp(sa("10.0.0.1:5000"), sa("10.0.0.2:53"));
        let e = Packet::icmp_error(q.dst, &q, icmp::DEST_UNREACH, icmp::CODE_PORT_UNREACH);
        let b = emit_ip(&e).unwrap();
        // 20 + 8 + the whole 60-byte datagram, as __icmp_send quotes it.
        assert_eq!(b.len(), 88);
        assert!(ones_sum_ok(&b[20..]), "ICMP checksum");
        assert!(ones_sum_ok(&b[28..48]), "quoted IPv4 header checksum");
        assert_eq!(parse_ip(&b).unwrap(), e);

        let q6 = Packet::tcp(sa("[fd00::1]:5000"), sa("[fd00::2]:80"), TcpFlags::SYN);
        let e6 = Packet::icmp_error(q6.dst, &q6, icmp::V6_DEST_UNREACH, 4);
        let b6 = emit_ip(&e6).unwrap();
        assert_eq!(parse_ip(&b6).unwrap(), e6);
        let ping = Packet::icmp_echo_request(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.9".parse().unwrap(),
            77,
            3,
        );
        let mut te = Packet::icmp_error("10.0.0.5".parse().unwrap(), &ping, icmp::TIME_EXCEEDED, 0);
        // The quoted echo's id goes where a port would (InnerHeader::sport); Packet::icmp_error
        // leaves it 0, so set it here.
        if let L4::Icmp {
            body: IcmpBody::Error(ref mut inner),
            ..
        } = te.l4
        {
            inner.sport = 77;
        }
        let back = parse_ip(&emit_ip(&te).unwrap()).unwrap();
        match back.l4 {
            L4::Icmp {
                body: IcmpBody::Error(inner),
                ..
            } => {
                assert_eq!(inner.icmp_type, icmp::ECHO_REQUEST);
                assert_eq!(inner.sport, 77);
                assert_eq!(inner.proto, IPPROTO_ICMP);
            }
            other => panic!("expected an ICMP error, got {other:?}"),
        }
    }

    #[test]
    fn icmpv6_checksum_covers_the_pseudo_header() {
        let p =
            Packet::icmp_echo_request("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap(), 9, 1);
        let b = emit_ip(&p).unwrap();
        let sum = Sum16BitWords::new()
            .add_slice(&b[8..40])
            .add_4bytes(((b.len() - 40) as u32).to_be_bytes())
            .add_2bytes([0, 58])
            .add_slice(&b[40..]);
        assert_eq!(sum.ones_complement(), 0);
        assert_eq!(parse_ip(&b).unwrap(), p);
    }

    #[test]
    fn crc32c_check_value() {
        // The standard check value of CRC-32C.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn sctp_checksum_verifies() {
        let mut p = Packet::udp(sa("10.0.0.1:3868"), sa("10.0.0.2:3868"));
        p.l4 = L4::Sctp {
            sport: 3868,
            dport: 3868,
        };
        let b = emit_ip(&p).unwrap();
        let mut s = b[20..].to_vec();
        let stored = u32::from_le_bytes([s[8], s[9], s[10], s[11]]);
        s[8..12].fill(0);
        assert_eq!(crc32c(&s), stored);
        assert_eq!(parse_ip(&b).unwrap(), p);
    }

    #[test]
    fn ethernet_and_vlan_and_cooked_frames() {
        let p = Packet::udp(sa("10.0.0.1:1000"), sa("10.0.0.2:53")).tagged(42);
        let f = emit_ethernet(&p, [2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]).unwrap();
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        assert_eq!(parse_ethernet(&f).unwrap(), p);
        // Padding to the 60-byte minimum and an FCS-like trailer are ignored.
        let mut padded = f.clone();
        padded.extend_from_slice(&[0xaa; 10]);
        assert_eq!(parse_ethernet(&padded).unwrap(), p);
        // One 802.1Q tag.
        let mut tagged = f[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x0a, 0x08, 0x00]);
        tagged.extend_from_slice(&f[14..]);
        assert_eq!(parse_ethernet(&tagged).unwrap(), p);
        // SLL: pkttype 0 (to us), ARPHRD_ETHER, halen 6, addr, protocol.
        let ip = emit_ip(&p).unwrap();
        let mut sll = vec![0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0, 0x08, 0x00];
        sll.extend_from_slice(&ip);
        assert_eq!(
            parse_link(LinkType::LinuxSll, &sll, &ParseOptions::default()).unwrap(),
            p
        );
        // SLL2: protocol, reserved, ifindex 2, ARPHRD_ETHER, pkttype 4 (outgoing), halen, addr.
        let mut sll2 = vec![
            0x08, 0x00, 0, 0, 0, 0, 0, 2, 0, 1, 4, 6, 2, 0, 0, 0, 0, 1, 0, 0,
        ];
        sll2.extend_from_slice(&ip);
        assert_eq!(
            parse_link(LinkType::LinuxSll2, &sll2, &ParseOptions::default()).unwrap(),
            p
        );
    }

    #[test]
    fn arp_is_not_ip() {
        let mut f = vec![0xffu8; 6];
        f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
        f.extend_from_slice(&[0u8; 28]);
        let e = parse_ethernet(&f).unwrap_err();
        assert_eq!(
            e,
            WireError::NotIp {
                offset: 12,
                what: "ether type 0x0806 (ARP)".into()
            }
        );
        assert!(e.to_string().contains("0x0800"), "{e}");
    }

    #[test]
    fn truncation_names_layer_and_offset() {
        let p = Packet::tcp(sa("10.0.0.1:5000"), sa("10.0.0.2:80"), TcpFlags::SYN);
        let f = emit_ethernet(&p, [0; 6], [0; 6]).unwrap();
        // Cut inside the TCP header (which starts at 14 + 20 = 34).
        let cut = &f[..40];
        let e = parse_ethernet(cut).unwrap_err();
        // The IP length check comes first: the packet is shorter than its total length.
        assert_eq!(
            e,
            WireError::Truncated {
                layer: Layer::Ipv4,
                offset: 14,
                needed: 72,
                available: 26
            }
        );
        // Snapped captures are accepted while the headers are there …
        let snapped = ParseOptions {
            allow_snapped: true,
            ..ParseOptions::default()
        };
        let q = parse_ethernet_with(&f[..14 + 20 + 20], &snapped).unwrap();
        assert_eq!(q.len, p.len);
        assert_eq!(q.tcp_flags(), Some(TcpFlags::SYN));
        // … and not once the TCP header is cut.
        let e = parse_ethernet_with(cut, &snapped).unwrap_err();
        assert_eq!(
            e,
            WireError::Truncated {
                layer: Layer::Tcp,
                offset: 34,
                needed: 20,
                available: 6
            }
        );
        assert_eq!(
            e.to_string(),
            "truncated TCP header at byte 34: need 20 bytes there, only 6 present"
        );
        // Every prefix of a frame is an error or a packet, never a panic.
        for n in 0..f.len() {
            let _ = parse_ethernet(&f[..n]);
            let _ = parse_ethernet_with(&f[..n], &snapped);
        }
    }

    #[test]
    fn malformed_fields_are_named() {
        let p = Packet::udp(sa("10.0.0.1:1000"), sa("10.0.0.2:53"));
        let mut b = emit_ip(&p).unwrap();
        b[0] = 0x44; // IHL 4
        let e = parse_ip(&b).unwrap_err();
        assert!(
            matches!(
                e,
                WireError::Malformed {
                    layer: Layer::Ipv4,
                    offset: 0,
                    ..
                }
            ),
            "{e}"
        );
        let mut b = emit_ip(&p).unwrap();
        b[0] = 0x75;
        assert!(parse_ip(&b)
            .unwrap_err()
            .to_string()
            .contains("IP version 7"));
        let mut b = emit_ip(&p).unwrap();
        b[24..26].copy_from_slice(&4u16.to_be_bytes()); // UDP length 4
        let e = parse_ip(&b).unwrap_err();
        assert!(
            matches!(
                e,
                WireError::Malformed {
                    layer: Layer::Udp,
                    offset: 20,
                    ..
                }
            ),
            "{e}"
        );
        let mut b = emit_ip(&p).unwrap();
        b[24..26].copy_from_slice(&100u16.to_be_bytes()); // UDP length past the packet
        assert!(parse_ip(&b).is_err());
        let mut b = emit_ip(&p).unwrap();
        b[2..4].copy_from_slice(&10u16.to_be_bytes()); // total length below the header
        assert!(parse_ip(&b)
            .unwrap_err()
            .to_string()
            .contains("total length 10"));
        // An IPv6 packet on an IPv4 link.
        let p6 = Packet::udp(sa("[fd00::1]:1"), sa("[fd00::2]:2"));
        let b6 = emit_ip(&p6).unwrap();
        assert!(parse_link(LinkType::Ipv4, &b6, &ParseOptions::default()).is_err());
        assert!(parse_link(LinkType::Ipv6, &b6, &ParseOptions::default()).is_ok());
    }

    #[test]
    fn fragments() {
        let p = Packet::udp(sa("10.0.0.1:1000"), sa("10.0.0.2:53")).tagged(5);
        let mut b = emit_ip(&p).unwrap();
        // First fragment: MF set, offset 0; the UDP length may exceed what this fragment holds.
        b[6] = 0x20;
        b[24..26].copy_from_slice(&1000u16.to_be_bytes());
        let first = parse_ip(&b).unwrap();
        assert_eq!(first.sport(), Some(1000));
        assert_eq!(first.dport(), Some(53));
        // Later fragment: offset 185 (x8 bytes): protocol 17 without ports.
        b[6] = 0x00;
        b[7] = 185;
        let later = parse_ip(&b).unwrap();
        assert_eq!(later.l4, L4::Other { proto: 17 });
        assert_eq!(later.sport(), None);
        assert_eq!(later.len, p.len);

        // IPv6: a fragment header between the IPv6 and UDP headers.
        let p6 = Packet::udp(sa("[fd00::1]:1000"), sa("[fd00::2]:53"));
        let b6 = emit_ip(&p6).unwrap();
        let with_frag = |frag_field: u16| {
            let mut v = b6[..40].to_vec();
            v[6] = NEXTHDR_FRAGMENT;
            let plen = u16::from_be_bytes([v[4], v[5]]) + 8;
            v[4..6].copy_from_slice(&plen.to_be_bytes());
            v.extend_from_slice(&[17, 0]);
            v.extend_from_slice(&frag_field.to_be_bytes());
            v.extend_from_slice(&[0, 0, 0, 1]);
            v.extend_from_slice(&b6[40..]);
            v
        };
        let first6 = parse_ip(&with_frag(0x0001)).unwrap();
        assert_eq!(first6.sport(), Some(1000));
        assert_eq!(first6.len, p6.len + 8);
        let later6 = parse_ip(&with_frag(0x0008)).unwrap();
        assert_eq!(later6.l4, L4::Other { proto: 17 });
    }

    #[test]
    fn ipv6_extension_headers_are_skipped() {
        let p6 = Packet::tcp(sa("[fd00::1]:1000"), sa("[fd00::2]:80"), TcpFlags::SYN);
        let b6 = emit_ip(&p6).unwrap();
        let mut v = b6[..40].to_vec();
        v[6] = NEXTHDR_HOP;
        let plen = u16::from_be_bytes([v[4], v[5]]) + 8 + 16;
        v[4..6].copy_from_slice(&plen.to_be_bytes());
        // Hop-by-hop, 8 bytes, next: destination options, 16 bytes, next: TCP.
        v.extend_from_slice(&[NEXTHDR_DEST, 0, 1, 4, 0, 0, 0, 0]);
        v.extend_from_slice(&[6, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        v.extend_from_slice(&b6[40..]);
        let q = parse_ip(&v).unwrap();
        assert_eq!(q.l4, p6.l4);
        assert_eq!(q.len, p6.len + 24);
        // Cut inside the destination-options header.
        let e = parse_ip_with(
            &v[..52],
            &ParseOptions {
                allow_snapped: true,
                ..ParseOptions::default()
            },
        )
        .unwrap_err();
        assert_eq!(
            e,
            WireError::Truncated {
                layer: Layer::Ipv6Extension,
                offset: 48,
                needed: 16,
                available: 4
            }
        );
    }

    #[test]
    fn emit_refuses_what_cannot_be_written() {
        let mut p = Packet::tcp(sa("10.0.0.1:1"), sa("10.0.0.2:2"), TcpFlags::SYN);
        p.len = 39;
        let e = emit_ip(&p).unwrap_err();
        assert_eq!(
            e.to_string(),
            "packet length 39 is less than the 40 bytes its headers need (20-byte IPv4 header + 20-byte TCP header)"
        );
        p.len = 40;
        assert_eq!(emit_ip(&p).unwrap().len(), 40);
        p.dst = "fd00::2".parse().unwrap();
        assert!(matches!(emit_ip(&p), Err(EmitError::MixedFamilies { .. })));
        let q6 = Packet::udp(sa("[fd00::1]:1"), sa("[fd00::2]:2"));
        let mut e = Packet::icmp_error("10.0.0.1".parse().unwrap(), &q6, 3, 3);
        e.dst = "10.0.0.2".parse().unwrap();
        assert!(matches!(emit_ip(&e), Err(EmitError::QuotedFamily { .. })));
    }

    #[test]
    fn tag_needs_eight_bytes_of_payload() {
        let mut p = Packet::udp(sa("10.0.0.1:1"), sa("10.0.0.2:2")).tagged(99);
        p.len = 20 + 8 + 7;
        assert_eq!(parse_ip(&emit_ip(&p).unwrap()).unwrap().tag, 0);
        p.len = 20 + 8 + 8;
        assert_eq!(parse_ip(&emit_ip(&p).unwrap()).unwrap().tag, 99);
        let no_tag = ParseOptions {
            read_tag: false,
            ..ParseOptions::default()
        };
        assert_eq!(
            parse_ip_with(&emit_ip(&p).unwrap(), &no_tag).unwrap().tag,
            0
        );
    }

    // ---- round-trip property ----

    fn arb_v4() -> impl Strategy<Value = IpAddr> {
        any::<[u8; 4]>().prop_map(|o| IpAddr::V4(Ipv4Addr::from(o)))
    }
    fn arb_v6() -> impl Strategy<Value = IpAddr> {
        any::<[u8; 16]>().prop_map(|o| IpAddr::V6(Ipv6Addr::from(o)))
    }

    /// Protocol numbers that come back as [`L4::Other`] in both families.
    fn arb_other_proto() -> impl Strategy<Value = u8> {
        any::<u8>().prop_filter("modelled or IPv6 extension", |p| {
            !matches!(p, 0 | 1 | 6 | 17 | 43 | 44 | 51 | 58 | 60 | 132)
        })
    }

    fn arb_inner(v4: bool) -> impl Strategy<Value = InnerHeader> {
        let addr = if v4 {
            arb_v4().boxed()
        } else {
            arb_v6().boxed()
        };
        let icmp_p = if v4 { IPPROTO_ICMP } else { IPPROTO_ICMPV6 };
        (
            addr.clone(),
            addr,
            prop_oneof![
                Just(IPPROTO_TCP),
                Just(IPPROTO_UDP),
                Just(IPPROTO_SCTP),
                Just(icmp_p),
                arb_other_proto()
            ],
            any::<u16>(),
            any::<u16>(),
            any::<u8>(),
        )
            .prop_map(move |(src, dst, proto, sport, dport, t)| {
                let ports = matches!(proto, IPPROTO_TCP | IPPROTO_UDP | IPPROTO_SCTP);
                let is_icmp = proto == icmp_p;
                InnerHeader {
                    src,
                    dst,
                    proto,
                    sport: if ports || is_icmp { sport } else { 0 },
                    dport: if ports { dport } else { 0 },
                    icmp_type: if is_icmp { t } else { 0 },
                    ttl: 64,
                }
            })
    }

    fn arb_l4(v4: bool) -> impl Strategy<Value = L4> {
        let icmp = (
            any::<u8>(),
            any::<u8>(),
            any::<u16>(),
            any::<u16>(),
            arb_inner(v4),
        )
            .prop_map(move |(icmp_type, code, id, seq, inner)| {
                let body = if icmp_is_query(v4, icmp_type) {
                    IcmpBody::Query { id, seq }
                } else if icmp_is_error(v4, icmp_type) {
                    IcmpBody::Error(inner)
                } else {
                    IcmpBody::Other
                };
                L4::Icmp {
                    icmp_type,
                    code,
                    body,
                }
            });
        prop_oneof![
            (
                any::<u16>(),
                any::<u16>(),
                any::<u8>(),
                any::<u32>(),
                any::<u32>()
            )
                .prop_flat_map(|t| (
                    Just(t),
                    any::<u16>(),
                    proptest::option::of(0u8..15),
                    any::<bool>(),
                    proptest::option::of(any::<u32>())
                ))
                .prop_map(
                    |((sport, dport, f, seq, ack), win, wscale, sack_perm, sack)| {
                        let n = 3 * usize::from(wscale.is_some())
                            + 2 * usize::from(sack_perm)
                            + 10 * usize::from(sack.is_some());
                        L4::Tcp {
                            sport,
                            dport,
                            flags: TcpFlags(f),
                            seq,
                            ack,
                            win,
                            opts: TcpOpts {
                                hdr_len: (20 + n.div_ceil(4) * 4) as u8,
                                wscale,
                                sack_perm,
                                sack,
                            },
                        }
                    }
                ),
            (any::<u16>(), any::<u16>()).prop_map(|(sport, dport)| L4::Udp { sport, dport }),
            (any::<u16>(), any::<u16>()).prop_map(|(sport, dport)| L4::Sctp { sport, dport }),
            icmp,
            arb_other_proto().prop_map(|proto| L4::Other { proto }),
        ]
    }

    fn arb_packet() -> impl Strategy<Value = Packet> {
        any::<bool>()
            .prop_flat_map(|v4| {
                let addr = if v4 {
                    arb_v4().boxed()
                } else {
                    arb_v6().boxed()
                };
                (
                    addr.clone(),
                    addr,
                    arb_l4(v4),
                    0u16..600,
                    any::<u8>(),
                    any::<u64>(),
                    any::<u32>(),
                )
            })
            .prop_map(|(src, dst, l4, extra, ttl, tag, mark)| {
                let mut p = Packet {
                    src,
                    dst,
                    l4,
                    len: 0,
                    ttl,
                    mark,
                    iif: None,
                    oif: None,
                    tag,
                };
                p.len = header_len(&p) as u16 + extra;
                p
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn packet_bytes_packet_round_trips(p in arb_packet()) {
            let b = emit_ip(&p).unwrap();
            prop_assert_eq!(b.len(), usize::from(p.len));
            let mut want = on_wire(p);
            let carries_tag = !matches!(p.l4, L4::Icmp { body: IcmpBody::Error(_), .. })
                && usize::from(p.len) >= header_len(&p) + 8;
            if !carries_tag {
                want.tag = 0;
            }
            prop_assert_eq!(parse_ip(&b).unwrap(), want);
            let f = emit_ethernet(&p, [2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]).unwrap();
            prop_assert_eq!(parse_ethernet(&f).unwrap(), want);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = parse_ip(&bytes);
            let _ = parse_ethernet(&bytes);
            let snapped = ParseOptions { allow_snapped: true, read_tag: true };
            for link in [LinkType::RawIp, LinkType::LinuxSll, LinkType::LinuxSll2] {
                let _ = parse_link(link, &bytes, &snapped);
            }
        }

        #[test]
        fn mutated_packets_never_panic(p in arb_packet(), at in any::<prop::sample::Index>(), byte in any::<u8>(), cut in any::<prop::sample::Index>()) {
            let mut b = emit_ip(&p).unwrap();
            let i = at.index(b.len());
            b[i] = byte;
            let n = cut.index(b.len() + 1);
            let snapped = ParseOptions { allow_snapped: true, read_tag: true };
            let _ = parse_ip(&b[..n]);
            let _ = parse_ip_with(&b[..n], &snapped);
        }
    }
}
