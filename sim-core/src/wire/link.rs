//! The link layers down to the IP packet: Ethernet II with its VLAN tags, Linux cooked
//! captures (SLL, SLL2) and raw IP.

use etherparse::Ethernet2Slice;

use crate::packet::Packet;

use super::parse::parse_ip_at;
use super::{
    be16, need, truncated, Layer, LinkType, ParseOptions, WireError, ETH_HLEN, ETH_P_8021AD,
    ETH_P_8021Q, ETH_P_ARP, ETH_P_IP, ETH_P_IPV6, ETH_P_QINQ1, SLL2_HLEN, SLL_HLEN,
};

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
