//! Editing a packet's bytes in place, as the kernel edits a packet it forwards.
//!
//! `nfsim replay` keeps every byte a capture holds and changes only what the kernel changes
//! on the way through: addresses and ports (NAT), the TTL / hop limit (forwarding), the
//! checksums that cover them, and the header quoted inside an ICMP error about a NAT'd
//! connection. [`rewrite`] takes the bytes of an IP packet, the [`Packet`] they parse to, and
//! the [`Packet`] the simulated kernel let out, and makes the bytes say the latter.
//!
//! **Checksums** are updated incrementally (RFC 1624, equation 3: `HC' = ~(~HC + ~m + m')`),
//! as the kernel's `csum_replace4()`, `csum_replace2()` and `inet_proto_csum_replace*()` do in
//! `nf_nat_ipv4_manip_pkt()` / `nf_nat_ipv6_manip_pkt()` and the per-protocol `*_manip_pkt()`
//! of `net/netfilter/nf_nat_proto.c`. A checksum that was wrong before stays wrong by the
//! same amount after, as it would on the node. Per protocol, as there:
//!
//! - IPv4 header: addresses (`csum_replace4`); the TTL with `ip_decrease_ttl()`'s own
//!   arithmetic (reproduced for a little-endian machine, which differs from RFC 1624 only in
//!   writing a zero sum as `0x0000`).
//! - TCP (`tcp_manip_pkt`): ports and the pseudo-header addresses; the checksum only when the
//!   whole 20-byte header is in the packet (a TCP header quoted in an ICMP error often is not).
//! - UDP (`udp_manip_pkt`): the same, but a zero checksum ("none", IPv4) is left zero, and an
//!   update that comes out zero is written `0xffff` (`CSUM_MANGLED_0`).
//! - ICMP queries (`icmp_manip_pkt`): the identifier; ICMPv6 also the pseudo-header.
//! - ICMP errors (`nf_nat_icmp_reply_translation`, `nf_nat_icmpv6_reply_translation`): the
//!   quoted packet is edited like a packet of its own (its IP header checksum and, where the
//!   quote holds them, its layer-4 checksum), then the ICMP checksum is computed afresh over
//!   the whole message; a record cut short by the snap length cannot be summed, so there it
//!   is updated incrementally instead (the same value when the original was right).
//! - SCTP (`sctp_manip_pkt`): the CRC32c is computed afresh over the packet, when it is all
//!   there.
//!
//! The packets the kernel itself sends (REJECT's ICMP error or TCP reset, time exceeded) have
//! no captured bytes; [`icmp_error_bytes`] and [`tcp_reset_bytes`] build them as
//! `__icmp_send()` / `icmp6_send()` and `nf_send_reset()` do, the ICMP error quoting the
//! offending packet's captured bytes.

use std::net::IpAddr;

use crate::packet::{
    IcmpBody, InnerHeader, Packet, IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_SCTP, IPPROTO_TCP,
    IPPROTO_UDP, L4,
};
use crate::wire::{self, crc32c, Layer};

/// Why a packet's bytes could not be edited into the packet that left.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManipError {
    /// The bytes are not an IP packet with the headers the edit needs.
    #[error("the bytes are not an IP packet with a whole {0}")]
    Truncated(Layer),
    /// The packet that left differs from the one that came in by more than NAT and
    /// forwarding change (its protocol or address family).
    #[error("cannot turn {from} into {to}: NAT and forwarding change only addresses, ports, ICMP ids and the TTL")]
    NotAnEdit {
        /// The packet the bytes hold.
        from: String,
        /// The packet asked for.
        to: String,
    },
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline]
fn fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The one's-complement sum of `b` as big-endian 16-bit words (an odd last byte padded with
/// zero), added to `acc`, unfolded.
fn sum_words(mut acc: u64, b: &[u8]) -> u64 {
    let mut chunks = b.chunks_exact(2);
    for w in &mut chunks {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

/// The Internet checksum (RFC 1071) of `acc` plus `b`: the complement of the folded sum.
fn checksum(acc: u64, b: &[u8]) -> u16 {
    !fold(sum_words(acc, b))
}

/// RFC 1624 equation 3, as the kernel's `csum_replace2()` / `csum_replace4()` /
/// `inet_proto_csum_replace16()` compute it: the checksum `check` of data in which the bytes
/// `old` (at an even offset of the summed data) became `new` (same length).
#[inline]
pub fn csum_replace(check: u16, old: &[u8], new: &[u8]) -> u16 {
    debug_assert_eq!(old.len(), new.len());
    let mut acc = u64::from(!check);
    if old.len() == new.len() && old.len() % 2 == 0 {
        // Whole words (every field NAT edits): no padding to look for.
        for (o, n) in old.chunks_exact(2).zip(new.chunks_exact(2)) {
            acc += u64::from(!u16::from_be_bytes([o[0], o[1]]))
                + u64::from(u16::from_be_bytes([n[0], n[1]]));
        }
        return !fold(acc);
    }
    let mut o = old.chunks(2);
    for n in new.chunks(2) {
        let ow = o.next().unwrap_or(&[0, 0]);
        let word = |c: &[u8]| u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)]);
        acc += u64::from(!word(ow)) + u64::from(word(n));
    }
    !fold(acc)
}

/// `ip_decrease_ttl()` of `include/net/ip.h` on the IPv4 header `h`: the TTL loses one and
/// the checksum gains `htons(0x0100)` with the carry folded back, in the native (x86,
/// little-endian) order the kernel adds in.
pub fn ip_decrease_ttl(h: &mut [u8]) {
    let mut check = u32::from(u16::from_le_bytes([h[10], h[11]]));
    check += u32::from(0x0100u16.to_be());
    let check = check + u32::from(check >= 0xffff);
    h[10..12].copy_from_slice(&(check as u16).to_le_bytes());
    h[8] = h[8].wrapping_sub(1);
}

/// Where the layers of an IP packet's bytes are.
#[derive(Clone, Copy, Debug)]
struct Layout {
    v4: bool,
    /// The upper-layer protocol.
    proto: u8,
    /// Offset of the upper-layer header.
    l4_at: usize,
    /// A fragment other than the first: no upper-layer header.
    later_fragment: bool,
}

fn layout(ip: &[u8], layer: Layer) -> Result<Layout, ManipError> {
    let t = || ManipError::Truncated(layer);
    match ip.first().ok_or_else(t)? >> 4 {
        4 => {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            if ihl < 20 || ip.len() < ihl {
                return Err(t());
            }
            Ok(Layout {
                v4: true,
                proto: ip[9],
                l4_at: ihl,
                later_fragment: be16(ip, 6) & 0x1fff != 0,
            })
        }
        6 => {
            if ip.len() < 40 {
                return Err(t());
            }
            let w = wire::walk_ipv6_ext(ip, 40, ip[6], Layer::Ipv6Extension, 0)
                .map_err(|_| ManipError::Truncated(Layer::Ipv6Extension))?;
            Ok(Layout {
                v4: false,
                proto: w.proto,
                l4_at: w.l4_off,
                later_fragment: w.later_fragment,
            })
        }
        _ => Err(t()),
    }
}

fn addr_bytes(a: IpAddr) -> ([u8; 16], usize) {
    let mut b = [0u8; 16];
    match a {
        IpAddr::V4(v) => {
            b[..4].copy_from_slice(&v.octets());
            (b, 4)
        }
        IpAddr::V6(v) => (v.octets(), 16),
    }
}

/// `dst.copy_from_slice(src)` for an address (4 or 16 bytes), with the length known to the
/// compiler in both cases: two moves instead of a call to `memcpy`.
#[inline(always)]
fn copy_addr(dst: &mut [u8], src: &[u8]) {
    match (dst.len(), src.len()) {
        (4, 4) => dst[..4].copy_from_slice(&src[..4]),
        (16, 16) => dst[..16].copy_from_slice(&src[..16]),
        _ => dst.copy_from_slice(src),
    }
}

/// The address fields of an IP header: (source offset, destination offset, length).
fn addr_fields(v4: bool) -> (usize, usize, usize) {
    if v4 {
        (12, 16, 4)
    } else {
        (8, 24, 16)
    }
}

/// How a layer-4 checksum covers the fields NAT changes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum L4Sum {
    /// TCP, UDP, ICMPv6: a 16-bit sum over a pseudo-header with the addresses.
    PseudoHeader,
    /// ICMPv4: a 16-bit sum over the message only.
    MessageOnly,
    /// SCTP: a CRC32c over the packet.
    Crc32c,
    /// Nothing covers it.
    None,
}

/// Offset of the layer-4 checksum field and what it covers.
fn l4_sum(proto: u8, v4: bool) -> (Option<usize>, L4Sum) {
    match proto {
        IPPROTO_TCP => (Some(16), L4Sum::PseudoHeader),
        IPPROTO_UDP => (Some(6), L4Sum::PseudoHeader),
        IPPROTO_ICMP if v4 => (Some(2), L4Sum::MessageOnly),
        IPPROTO_ICMPV6 if !v4 => (Some(2), L4Sum::PseudoHeader),
        IPPROTO_SCTP => (Some(8), L4Sum::Crc32c),
        _ => (None, L4Sum::None),
    }
}

/// The edits to make to one IP packet (outer or quoted): its addresses, its ports (or ICMP
/// id, as `sport`), and for the outer packet the TTL.
struct Edit {
    src: IpAddr,
    dst: IpAddr,
    sport: Option<u16>,
    dport: Option<u16>,
    icmp_id: Option<u16>,
}

/// Edits the IP packet at the start of `ip` (its bytes up to the end of `ip`, which may be
/// cut short of `skb_len`, the packet's real length): addresses with the IP header checksum,
/// then the layer-4 fields and the layer-4 checksum. Returns the layout.
fn edit_packet(ip: &mut [u8], skb_len: usize, e: &Edit, inner: bool) -> Result<Layout, ManipError> {
    let layer = if inner { Layer::QuotedIp } else { Layer::Ip };
    let lay = layout(ip, layer)?;
    if edit_v4_ports(ip, skb_len, e, lay) {
        return Ok(lay);
    }
    edit_general(ip, skb_len, e, inner, lay)
}

/// The sum of the words of `new` and the complements of the words of `old` (same even
/// length), unfolded: what RFC 1624's equation 3 adds to `~HC` for a change of `old` into
/// `new`. Adding the parts of several changes and folding once gives the same checksum as
/// `csum_replace` one change after another: each step's folded sum is congruent to the
/// unfolded one modulo 0xffff and zero only when it is zero.
#[inline(always)]
fn replace_sum(old: &[u8], new: &[u8]) -> u64 {
    old.chunks_exact(2)
        .zip(new.chunks_exact(2))
        .map(|(o, n)| {
            u64::from(!u16::from_be_bytes([o[0], o[1]]))
                + u64::from(u16::from_be_bytes([n[0], n[1]]))
        })
        .sum()
}

/// [`edit_packet`] of the common case, an IPv4 TCP or UDP packet (not a later fragment) whose
/// header up to the checksum is captured and whose new addresses are IPv4: the same edits
/// and the same checksums as [`edit_general`] (one sum per checksum over the same words).
/// Returns false, having changed nothing, for any other packet.
#[inline(always)]
fn edit_v4_ports(ip: &mut [u8], skb_len: usize, e: &Edit, lay: Layout) -> bool {
    let (IpAddr::V4(src), IpAddr::V4(dst)) = (e.src, e.dst) else {
        return false;
    };
    let l4 = lay.l4_at;
    let check_at = match lay.proto {
        IPPROTO_TCP => 16,
        IPPROTO_UDP => 6,
        _ => return false,
    };
    if !lay.v4 || lay.later_fragment || ip.len() < l4 + check_at + 2 || ip.len() < 20 {
        return false;
    }
    let mut new = [0u8; 8];
    new[..4].copy_from_slice(&src.octets());
    new[4..].copy_from_slice(&dst.octets());
    let mut old = [0u8; 8];
    old.copy_from_slice(&ip[12..20]);
    let addrs_changed = old != new;
    if addrs_changed {
        ip[12..20].copy_from_slice(&new);
        // nf_nat_ipv4_manip_pkt: csum_replace4(&iph->check, old, new) for each address.
        let c = !fold(u64::from(!be16(ip, 10)) + replace_sum(&old, &new));
        put16(ip, 10, c);
    }
    let old_check = be16(ip, l4 + check_at);
    // tcp_manip_pkt needs the whole header in the packet; a UDP checksum of zero is "none".
    let sum_editable = match lay.proto {
        IPPROTO_TCP => skb_len >= l4 + 20,
        _ => old_check != 0,
    };
    let mut acc = u64::from(!old_check);
    let mut l4_changed = false;
    for (off, v) in [(0, e.sport), (2, e.dport)] {
        let Some(v) = v else { continue };
        let old = be16(ip, l4 + off);
        if old != v {
            put16(ip, l4 + off, v);
            acc += u64::from(!old) + u64::from(v);
            l4_changed = true;
        }
    }
    if addrs_changed {
        acc += replace_sum(&old, &new);
    }
    if sum_editable && (addrs_changed || l4_changed) {
        let mut c = !fold(acc);
        if lay.proto == IPPROTO_UDP && c == 0 {
            c = 0xffff; // CSUM_MANGLED_0
        }
        put16(ip, l4 + check_at, c);
    }
    true
}

/// [`edit_packet`] of any packet, field by field.
fn edit_general(
    ip: &mut [u8],
    skb_len: usize,
    e: &Edit,
    inner: bool,
    lay: Layout,
) -> Result<Layout, ManipError> {
    let (s_at, d_at, alen) = addr_fields(lay.v4);
    let (new_src, _) = addr_bytes(e.src);
    let (new_dst, _) = addr_bytes(e.dst);
    let mut old_addrs = [0u8; 32];
    copy_addr(&mut old_addrs[..alen], &ip[s_at..s_at + alen]);
    copy_addr(&mut old_addrs[16..16 + alen], &ip[d_at..d_at + alen]);
    let addrs_changed =
        old_addrs[..alen] != new_src[..alen] || old_addrs[16..16 + alen] != new_dst[..alen];
    if addrs_changed {
        copy_addr(&mut ip[s_at..s_at + alen], &new_src[..alen]);
        copy_addr(&mut ip[d_at..d_at + alen], &new_dst[..alen]);
        if lay.v4 {
            // nf_nat_ipv4_manip_pkt: csum_replace4(&iph->check, old, new).
            let mut c = be16(ip, 10);
            c = csum_replace(c, &old_addrs[..4], &new_src[..4]);
            c = csum_replace(c, &old_addrs[16..20], &new_dst[..4]);
            put16(ip, 10, c);
        }
    }
    if lay.later_fragment {
        return Ok(lay);
    }
    let l4_at = lay.l4_at;
    let (check_at, kind) = l4_sum(lay.proto, lay.v4);
    let present = ip.len().saturating_sub(l4_at);
    // Whether the checksum may be touched: the field is captured, and for TCP the whole
    // header is in the packet (tcp_manip_pkt's `hdrsize`); for UDP it is not "none".
    let sum_editable = check_at.is_some_and(|c| {
        present >= c + 2
            && match lay.proto {
                IPPROTO_TCP => skb_len >= l4_at + 20,
                IPPROTO_UDP => be16(ip, l4_at + c) != 0,
                _ => true,
            }
    });
    let mut check = check_at
        .filter(|_| sum_editable)
        .map(|c| be16(ip, l4_at + c));
    // Ports (TCP, UDP, SCTP) or the ICMP query id: (offset in the header, new value).
    let fields: [Option<(usize, u16)>; 2] = match lay.proto {
        IPPROTO_TCP | IPPROTO_UDP | IPPROTO_SCTP => {
            [e.sport.map(|p| (0, p)), e.dport.map(|p| (2, p))]
        }
        IPPROTO_ICMP | IPPROTO_ICMPV6 => [e.icmp_id.map(|id| (4, id)), None],
        _ => [None, None],
    };
    let mut l4_changed = false;
    for (off, v) in fields.into_iter().flatten() {
        let at = l4_at + off;
        if present < off + 2 {
            continue;
        }
        let old = be16(ip, at);
        if old == v {
            continue;
        }
        put16(ip, at, v);
        l4_changed = true;
        if kind != L4Sum::Crc32c {
            check = check.map(|c| csum_replace(c, &old.to_be_bytes(), &v.to_be_bytes()));
        }
    }
    if addrs_changed && kind == L4Sum::PseudoHeader {
        check = check.map(|c| {
            let c = csum_replace(c, &old_addrs[..alen], &new_src[..alen]);
            csum_replace(c, &old_addrs[16..16 + alen], &new_dst[..alen])
        });
    }
    if let (Some(c_at), Some(mut c)) = (check_at, check) {
        match kind {
            L4Sum::Crc32c => {
                // sctp_manip_pkt: the CRC over the whole packet, when it is all there.
                if (l4_changed || addrs_changed) && ip.len() >= skb_len && !inner {
                    let end = skb_len.min(ip.len());
                    ip[l4_at + 8..l4_at + 12].fill(0);
                    let crc = crc32c(&ip[l4_at..end]);
                    ip[l4_at + 8..l4_at + 12].copy_from_slice(&crc.to_le_bytes());
                }
            }
            _ => {
                if lay.proto == IPPROTO_UDP && c == 0 {
                    c = 0xffff; // CSUM_MANGLED_0
                }
                put16(ip, l4_at + c_at, c);
            }
        }
    }
    Ok(lay)
}

fn inner_of(p: &Packet) -> Option<InnerHeader> {
    match p.l4 {
        L4::Icmp {
            body: IcmpBody::Error(i),
            ..
        } => Some(i),
        _ => None,
    }
}

fn inner_edit(to: &InnerHeader, v4: bool) -> Edit {
    let inner_icmp = if v4 { IPPROTO_ICMP } else { IPPROTO_ICMPV6 };
    let is_icmp = to.proto == inner_icmp;
    let ports = matches!(to.proto, IPPROTO_TCP | IPPROTO_UDP | IPPROTO_SCTP);
    Edit {
        src: to.src,
        dst: to.dst,
        sport: ports.then_some(to.sport),
        dport: ports.then_some(to.dport),
        icmp_id: is_icmp.then_some(to.sport),
    }
}

/// Edits the packet quoted in the ICMP error whose message (ICMP header first) is `msg`, to
/// say `to`; then its ICMP checksum (`pseudo` holds the outer addresses for ICMPv6): afresh
/// when the message is all there (`msg_len` long), else incrementally.
fn edit_quote(
    msg: &mut [u8],
    msg_len: usize,
    to: &InnerHeader,
    v4: bool,
    pseudo: Option<(IpAddr, IpAddr)>,
) -> Result<(), ManipError> {
    if msg.len() < 8 {
        return Err(ManipError::Truncated(if v4 {
            Layer::Icmp
        } else {
            Layer::Icmpv6
        }));
    }
    let before = msg.to_vec();
    edit_packet(
        &mut msg[8..],
        msg_len.saturating_sub(8),
        &inner_edit(to, v4),
        true,
    )?;
    if msg.len() >= msg_len {
        msg[2..4].fill(0);
        let c = icmp_checksum(&msg[..msg_len], pseudo);
        put16(msg, 2, c);
    } else {
        let mut c = be16(msg, 2);
        let even = msg.len() & !1;
        c = csum_replace(c, &before[8..even], &msg[8..even]);
        if even < msg.len() {
            c = csum_replace(c, &[before[even], 0], &[msg[even], 0]);
        }
        put16(msg, 2, c);
    }
    Ok(())
}

/// The ICMP (no pseudo-header) or ICMPv6 (pseudo-header of the addresses) checksum of a
/// message whose checksum field is zero.
fn icmp_checksum(msg: &[u8], pseudo: Option<(IpAddr, IpAddr)>) -> u16 {
    let mut acc = 0u64;
    if let Some((s, d)) = pseudo {
        let (s, sl) = addr_bytes(s);
        let (d, dl) = addr_bytes(d);
        acc = sum_words(acc, &s[..sl]);
        acc = sum_words(acc, &d[..dl]);
        acc += msg.len() as u64 + u64::from(IPPROTO_ICMPV6);
    }
    checksum(acc, msg)
}

fn not_an_edit(from: &Packet, to: &Packet) -> ManipError {
    ManipError::NotAnEdit {
        from: from.to_string(),
        to: to.to_string(),
    }
}

/// Makes `ip`, the captured bytes of the IP packet `from` (possibly cut short by the snap
/// length), say `to`, the packet as the node let it out: the edits and checksum updates of
/// the module documentation. Fields `to` does not differ in are left as they are, byte for
/// byte.
pub fn rewrite(ip: &mut [u8], from: &Packet, to: &Packet) -> Result<(), ManipError> {
    if from.is_ipv4() != to.is_ipv4() || from.protocol() != to.protocol() {
        return Err(not_an_edit(from, to));
    }
    let skb_len = usize::from(from.len);
    let icmp_id = match to.l4 {
        L4::Icmp {
            body: IcmpBody::Query { id, .. },
            ..
        } => Some(id),
        _ => None,
    };
    let edit = Edit {
        src: to.src,
        dst: to.dst,
        sport: to.sport(),
        dport: to.dport(),
        icmp_id,
    };
    // An ICMP error's quote first (nf_nat_icmp_reply_translation edits the inside, sums the
    // message afresh, then edits the outside).
    if let (Some(fi), Some(ti)) = (inner_of(from), inner_of(to)) {
        let lay = layout(ip, Layer::Ip)?;
        if fi != ti && !lay.later_fragment && ip.len() > lay.l4_at {
            let pseudo = (!lay.v4).then_some((from.src, from.dst));
            let msg_len = skb_len.saturating_sub(lay.l4_at);
            edit_quote(&mut ip[lay.l4_at..], msg_len, &ti, lay.v4, pseudo)?;
        }
    } else if inner_of(from).is_some() != inner_of(to).is_some() {
        return Err(not_an_edit(from, to));
    }
    let lay = edit_packet(ip, skb_len, &edit, false)?;
    // Forwarding: ip_forward()'s ip_decrease_ttl(), ip6_forward()'s hop_limit--.
    if to.ttl != from.ttl {
        if lay.v4 {
            if to.ttl.wrapping_add(1) == from.ttl {
                ip_decrease_ttl(ip);
            } else {
                let c = csum_replace(be16(ip, 10), &[ip[8], ip[9]], &[to.ttl, ip[9]]);
                ip[8] = to.ttl;
                put16(ip, 10, c);
            }
        } else {
            ip[7] = to.ttl;
        }
    }
    Ok(())
}

/// The quoted header of an ICMP error about `p`, as [`Packet::icmp_error`] builds it.
fn inner_header_of(p: &Packet) -> InnerHeader {
    match Packet::icmp_error(p.dst, p, 3, 3).l4 {
        L4::Icmp {
            body: IcmpBody::Error(i),
            ..
        } => i,
        // icmp_error always builds an error body.
        _ => InnerHeader {
            src: p.src,
            dst: p.dst,
            proto: p.protocol(),
            sport: 0,
            dport: 0,
            icmp_type: 0,
            ttl: p.ttl,
        },
    }
}

/// An IP packet built from nothing: its bytes (cut short where the bytes it quotes were), and
/// its length on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Built {
    /// The bytes.
    pub bytes: Vec<u8>,
    /// The packet's real length (more than `bytes.len()` when a quote was cut short).
    pub wire_len: usize,
}

/// The bytes of `answer`, an ICMP error the kernel sends about the packet whose captured IP
/// bytes are `about` (parsed: `about_pkt`), as `__icmp_send()` (IPv4) and `icmp6_send()`
/// (IPv6) build it. The quote is `about`'s first bytes, as many as `answer.len` leaves room
/// for; the packet it quotes is the one the rejecting hook saw, so `forwarded` (rejected in
/// FORWARD, after `ip_forward()` took one from the TTL) lowers the quoted TTL by one; then the
/// quote is edited to say `answer`'s quoted header (the NAT reply translation the error meets
/// on its way out). IPv4: TOS `(tos & IPTOS_TOS_MASK) | IPTOS_PREC_INTERNETCONTROL` of the
/// quoted packet, identification `ip_id` (the kernel's is a keyed hash nfsim cannot know),
/// no don't-fragment (the ICMP socket's `IP_PMTUDISC_DONT`), the rest-of-header zero. IPv6:
/// traffic class and flow label zero.
pub fn icmp_error_bytes(
    answer: &Packet,
    about: &[u8],
    about_pkt: &Packet,
    forwarded: bool,
    ip_id: u16,
) -> Result<Built, ManipError> {
    let L4::Icmp {
        icmp_type,
        code,
        body: IcmpBody::Error(to_inner),
    } = answer.l4
    else {
        return Err(not_an_edit(about_pkt, answer));
    };
    let v4 = answer.is_ipv4();
    let hdr = if v4 { 20 } else { 40 };
    let wire_len = usize::from(answer.len);
    let quote_len = wire_len.saturating_sub(hdr + 8);
    let have = quote_len.min(about.len());
    let mut quote = about[..have].to_vec();
    if forwarded {
        if v4 && quote.len() >= 20 {
            ip_decrease_ttl(&mut quote);
        } else if !v4 && quote.len() >= 40 {
            quote[7] = quote[7].wrapping_sub(1);
        }
    }
    let mut msg = vec![0u8; 8 + have];
    msg[0] = icmp_type;
    msg[1] = code;
    msg[8..].copy_from_slice(&quote);
    let mut bytes = vec![0u8; hdr];
    match (answer.src, answer.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let tos = about.get(1).map_or(0, |t| t & 0x1e) | 0xc0;
            bytes[0] = 0x45;
            bytes[1] = tos;
            put16(&mut bytes, 2, answer.len);
            put16(&mut bytes, 4, ip_id);
            bytes[8] = answer.ttl;
            bytes[9] = IPPROTO_ICMP;
            bytes[12..16].copy_from_slice(&s.octets());
            bytes[16..20].copy_from_slice(&d.octets());
            let c = checksum(0, &bytes);
            put16(&mut bytes, 10, c);
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            bytes[0] = 0x60;
            put16(&mut bytes, 4, answer.len.saturating_sub(40));
            bytes[6] = IPPROTO_ICMPV6;
            bytes[7] = answer.ttl;
            bytes[8..24].copy_from_slice(&s.octets());
            bytes[24..40].copy_from_slice(&d.octets());
        }
        _ => return Err(not_an_edit(about_pkt, answer)),
    }
    // The quote as the rejecting hook saw it, summed; then edited as the reply translation
    // edits it.
    let pseudo = (!v4).then_some((answer.src, answer.dst));
    let msg_len = 8 + quote_len;
    let complete = have == quote_len;
    if complete {
        let c = icmp_checksum(&msg, pseudo);
        put16(&mut msg, 2, c);
    }
    let from_inner = inner_header_of(about_pkt);
    if from_inner != to_inner && have >= hdr {
        edit_quote(&mut msg, msg_len, &to_inner, v4, pseudo)?;
    }
    bytes.extend_from_slice(&msg);
    Ok(Built { bytes, wire_len })
}

/// The bytes of `answer`, a TCP reset the kernel sends (REJECT `--reject-with tcp-reset`), as
/// `nf_send_reset()` builds it: IPv4 identification 0 with don't-fragment, a 20-byte TCP
/// header with window 0 and no options.
pub fn tcp_reset_bytes(answer: &Packet) -> Result<Vec<u8>, wire::EmitError> {
    let mut b = wire::emit_ip(answer)?;
    let t = if answer.is_ipv4() { 20 } else { 40 };
    if b.len() >= t + 20 {
        let old = [b[t + 14], b[t + 15]];
        b[t + 14] = 0;
        b[t + 15] = 0;
        let c = csum_replace(be16(&b, t + 16), &old, &[0, 0]);
        put16(&mut b, t + 16, c);
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::TcpFlags;

    fn sa(s: &str) -> std::net::SocketAddr {
        s.parse().unwrap()
    }

    /// The IPv4 header checksum, summed afresh.
    fn ip_sum_ok(ip: &[u8]) -> bool {
        let ihl = usize::from(ip[0] & 0xf) * 4;
        fold(sum_words(0, &ip[..ihl])) == 0xffff
    }

    /// The layer-4 checksum of a whole IPv4 TCP/UDP/ICMP packet, summed afresh.
    fn l4_sum_ok(ip: &[u8]) -> bool {
        let ihl = usize::from(ip[0] & 0xf) * 4;
        let l4 = &ip[ihl..];
        let mut acc = 0;
        if ip[9] != IPPROTO_ICMP {
            acc = sum_words(acc, &ip[12..20]);
            acc += u64::from(ip[9]) + l4.len() as u64;
        }
        fold(sum_words(acc, l4)) == 0xffff
    }

    #[test]
    fn rfc1624_examples() {
        // RFC 1624 section 4: HC 0xdd2f, m 0x5555 -> m' 0x3285 gives 0x0000 (eqn 3).
        assert_eq!(csum_replace(0xdd2f, &[0x55, 0x55], &[0x32, 0x85]), 0x0000);
    }

    #[test]
    fn ttl_decrement_matches_a_fresh_sum() {
        for ttl in [2u8, 64, 255] {
            let mut p = Packet::udp(sa("10.0.0.1:1"), sa("10.0.0.2:2"));
            p.ttl = ttl;
            let mut b = wire::emit_ip(&p).unwrap();
            ip_decrease_ttl(&mut b);
            assert_eq!(b[8], ttl - 1);
            assert!(ip_sum_ok(&b));
        }
    }

    #[test]
    fn nat_edits_keep_every_checksum_valid_and_other_bytes() {
        let from = Packet::tcp(sa("10.244.2.9:40000"), sa("10.96.0.1:443"), TcpFlags::SYN);
        let mut b = wire::emit_ip(&from).unwrap();
        // A payload that is not zero, and an IP id.
        let n = b.len();
        for (i, x) in b[40..n].iter_mut().enumerate() {
            *x = i as u8 ^ 0x5a;
        }
        b[4] = 0x12;
        b[5] = 0x34;
        let c = {
            b[10] = 0;
            b[11] = 0;
            checksum(0, &b[..20])
        };
        put16(&mut b, 10, c);
        b[36] = 0;
        b[37] = 0;
        let mut acc = sum_words(0, &b[12..20]);
        acc += 6 + (n - 20) as u64;
        let c = checksum(acc, &b[20..]);
        put16(&mut b, 36, c);
        assert!(l4_sum_ok(&b));
        let mut to = from;
        to.dst = "172.18.0.3".parse().unwrap();
        to.set_dport(6443);
        to.src = "10.244.0.1".parse().unwrap();
        to.set_sport(61000);
        to.ttl -= 1;
        let orig = b.clone();
        rewrite(&mut b, &from, &to).unwrap();
        assert_eq!(wire::parse_ip(&b).unwrap().to_string(), to.to_string());
        assert!(ip_sum_ok(&b));
        assert!(l4_sum_ok(&b));
        let changed: Vec<usize> = (0..n).filter(|&i| b[i] != orig[i]).collect();
        let allowed = [
            8, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 36, 37,
        ];
        assert!(changed.iter().all(|i| allowed.contains(i)), "{changed:?}");
    }

    #[test]
    fn a_forwarded_icmp_error_has_its_quote_translated() {
        let q = Packet::udp(sa("10.244.2.9:40001"), sa("10.244.1.7:53"));
        let err = Packet::icmp_error("10.244.1.7".parse().unwrap(), &q, 3, 3);
        let mut b = wire::emit_ip(&err).unwrap();
        assert!(l4_sum_ok(&b));
        let mut to = err;
        to.src = "10.96.0.10".parse().unwrap();
        if let L4::Icmp {
            body: IcmpBody::Error(i),
            ..
        } = &mut to.l4
        {
            i.dst = "10.96.0.10".parse().unwrap();
        }
        rewrite(&mut b, &err, &to).unwrap();
        assert_eq!(wire::parse_ip(&b).unwrap(), to);
        assert!(ip_sum_ok(&b));
        assert!(l4_sum_ok(&b));
        assert!(ip_sum_ok(&b[28..]), "the quoted header's checksum follows");
    }

    #[test]
    fn a_kernel_icmp_error_quotes_the_captured_bytes() {
        let q = Packet::tcp(sa("10.244.2.9:42000"), sa("10.96.200.1:80"), TcpFlags::SYN);
        let qb = wire::emit_ip(&q).unwrap();
        let mut seen = q;
        seen.ttl -= 1;
        let answer = Packet::icmp_error("10.244.0.1".parse().unwrap(), &seen, 3, 3);
        let built = icmp_error_bytes(&answer, &qb, &q, true, 7).unwrap();
        assert_eq!(built.bytes.len(), built.wire_len);
        assert_eq!(built.bytes.len(), 28 + qb.len());
        assert!(ip_sum_ok(&built.bytes));
        assert!(l4_sum_ok(&built.bytes));
        assert_eq!(
            built.bytes[28 + 8],
            q.ttl - 1,
            "quoted TTL as FORWARD saw it"
        );
        assert!(ip_sum_ok(&built.bytes[28..]));
        assert_eq!(&built.bytes[28 + 20..], &qb[20..]);
    }

    #[test]
    fn a_reset_has_window_zero_and_a_valid_sum() {
        let r = Packet::tcp(sa("10.96.0.1:443"), sa("10.244.2.9:1"), TcpFlags::RST);
        let b = tcp_reset_bytes(&r).unwrap();
        assert_eq!(be16(&b, 34), 0);
        assert!(l4_sum_ok(&b[..usize::from(r.len)]));
    }

    #[test]
    fn udp_without_a_checksum_keeps_none() {
        let from = Packet::udp(sa("10.0.0.1:1"), sa("10.0.0.2:2"));
        let mut b = wire::emit_ip(&from).unwrap();
        put16(&mut b, 26, 0);
        let mut to = from;
        to.dst = "10.0.0.3".parse().unwrap();
        rewrite(&mut b, &from, &to).unwrap();
        assert_eq!(be16(&b, 26), 0);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// The IPv4 TCP/UDP fast path edits exactly as the field-by-field path does: same
        /// bytes, checksums included, for any header bytes, checksum values (0 and 0xffff
        /// among them), captured lengths and edits.
        #[test]
        fn the_ipv4_port_path_equals_the_general_one(
            tcp in proptest::bool::ANY,
            head in proptest::collection::vec(proptest::num::u8::ANY, 40),
            checks in (0usize..4, proptest::num::u16::ANY, proptest::num::u16::ANY),
            captured in 28usize..=40,
            skb_extra in 0usize..30,
            src in proptest::num::u32::ANY,
            dst in proptest::num::u32::ANY,
            same in 0u8..4,
            ports in (proptest::option::of(proptest::num::u16::ANY), proptest::option::of(proptest::num::u16::ANY)),
            keep_ports in proptest::bool::ANY,
        ) {
            let mut ip = head.clone();
            ip[0] = 0x45;
            ip[6] &= 0xe0; // first fragment or whole
            ip[7] = 0;
            ip[9] = if tcp { IPPROTO_TCP } else { IPPROTO_UDP };
            let check_at = 20 + if tcp { 16 } else { 6 };
            let special = [0u16, 0xffff, checks.1, checks.2];
            put16(&mut ip, 10, special[checks.0]);
            put16(&mut ip, check_at, special[(checks.0 + 1) % 4]);
            ip.truncate(captured);
            let old_src = u32::from_be_bytes([ip[12], ip[13], ip[14], ip[15]]);
            let old_dst = u32::from_be_bytes([ip[16], ip[17], ip[18], ip[19]]);
            let e = Edit {
                src: IpAddr::V4(if same & 1 == 0 { old_src } else { src }.into()),
                dst: IpAddr::V4(if same & 2 == 0 { old_dst } else { dst }.into()),
                sport: if keep_ports { Some(be16(&ip, 20)) } else { ports.0 },
                dport: ports.1,
                icmp_id: None,
            };
            let skb_len = captured + skb_extra;
            let lay = layout(&ip, Layer::Ip).unwrap();
            let mut fast = ip.clone();
            let took = edit_v4_ports(&mut fast, skb_len, &e, lay);
            let mut general = ip.clone();
            edit_general(&mut general, skb_len, &e, false, lay).unwrap();
            if took {
                proptest::prop_assert_eq!(fast, general);
            } else {
                proptest::prop_assert_eq!(fast, ip);
            }
        }
    }
}
