//! A [`Packet`] written as bytes: the IP header, the layer-4 header with valid checksums
//! (TCP options, the quoted header of an ICMP error, SCTP's CRC32c), and an Ethernet II
//! frame around it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use etherparse::checksum::Sum16BitWords;
use etherparse::{
    EtherType, Ethernet2Header, IpNumber, Ipv4Header, Ipv6FlowLabel, Ipv6Header, TcpHeader,
    UdpHeader,
};

use crate::packet::{
    IcmpBody, InnerHeader, Packet, TcpFlags, TcpOpts, IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_SCTP,
    IPPROTO_TCP, IPPROTO_UDP, L4,
};

use super::{EmitError, ETH_HLEN, ETH_P_IP, ETH_P_IPV6, SCTP_HLEN};

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
