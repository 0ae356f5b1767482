//! An IP packet read into a [`Packet`]: the IPv4 or IPv6 header (IPv6 extension headers
//! skipped as `ipv6_skip_exthdr()` does), fragments, and the layer-4 header (TCP with its
//! options, UDP, SCTP, ICMP and ICMPv6 with the quoted header of an error).

use std::net::IpAddr;

use etherparse::{
    Ipv4HeaderSlice, Ipv6Header, Ipv6HeaderSlice, TcpHeaderSlice, UdpHeader, UdpHeaderSlice,
};

use crate::packet::{
    IcmpBody, InnerHeader, Packet, TcpFlags, TcpOpts, IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_SCTP,
    IPPROTO_TCP, IPPROTO_UDP, L4,
};

use super::{
    be16, icmp_is_error, icmp_is_query, malformed, need, truncated, Layer, ParseOptions, WireError,
    NEXTHDR_AUTH, NEXTHDR_DEST, NEXTHDR_FRAGMENT, NEXTHDR_HOP, NEXTHDR_ROUTING, SCTP_HLEN,
};

/// Parses a raw IPv4 or IPv6 packet (by its version nibble), strictly (see
/// [`ParseOptions::default`]).
pub fn parse_ip(bytes: &[u8]) -> Result<Packet, WireError> {
    parse_ip_at(bytes, 0, &ParseOptions::default(), None)
}

/// Whether `ip`, an IPv6 packet from its header on, is a fragment the kernel reassembles
/// before conntrack sees it (`nf_defrag_ipv6`): it has a fragment header with a non-zero
/// offset or the more-fragments flag set, behind any hop-by-hop, routing, destination
/// options or AH headers. An atomic fragment (offset 0, no more fragments) is not one: the
/// kernel processes it as a whole packet. `false` for IPv4 and for bytes that are not a
/// whole enough IPv6 header chain.
pub fn is_ipv6_fragment(ip: &[u8]) -> bool {
    if ip.len() < 40 || ip[0] >> 4 != 6 {
        return false;
    }
    let (mut off, mut nh) = (40usize, ip[6]);
    loop {
        match nh {
            NEXTHDR_HOP | NEXTHDR_ROUTING | NEXTHDR_DEST | NEXTHDR_AUTH => {
                let Some(h) = ip.get(off..off + 2) else {
                    return false;
                };
                off += if nh == NEXTHDR_AUTH {
                    (usize::from(h[1]) + 2) * 4
                } else {
                    (usize::from(h[1]) + 1) * 8
                };
                nh = h[0];
            }
            NEXTHDR_FRAGMENT => {
                let Some(h) = ip.get(off..off + 8) else {
                    return false;
                };
                return be16(h, 2) & 0xfff9 != 0;
            }
            _ => return false,
        }
    }
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

pub(super) fn parse_ip_at(
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
