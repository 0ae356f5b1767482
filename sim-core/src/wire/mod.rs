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
//!
//! # Where things are
//!
//! This file holds the constants, the error types and the options; `link` reads the link
//! layers down to the IP packet, `parse` the IP packet and its layer 4, `emit` writes packets.
mod emit;
mod link;
mod parse;

use std::net::IpAddr;

use crate::packet::icmp;
// Named by the docs here; the code that uses them lives in the rooms.
#[cfg(doc)]
use crate::packet::{IcmpBody, Packet, TcpOpts, L4};

pub use emit::{crc32c, emit_ethernet, emit_ip, emit_ip_with_payload, header_len};
pub use link::{ip_offset, ip_total_len, parse_ethernet, parse_ethernet_with, parse_link};
pub(crate) use parse::walk_ipv6_ext;
pub use parse::{is_ipv6_fragment, parse_ip, parse_ip_with};

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

#[cfg(test)]
mod tests;
