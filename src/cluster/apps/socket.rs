//! The socket layer under the applications: how the kernel answers a packet for a port no
//! socket is bound to ([`closed_port_response`]), and what every TCP application (client,
//! server, keep-alive session) builds its segments with: a segment's length in sequence
//! space, a segment with its sequence numbers, and how long TIME_WAIT lasts.

use sim_core::packet::icmp;
use sim_core::{Packet, SimDuration, TcpFlags, L4};
use std::net::SocketAddr;

/// How the socket layer answers a packet for which no socket is bound on an address that
/// exists: UDP gets ICMP port unreachable (`__udp4_lib_rcv` → `icmp_send(ICMP_PORT_UNREACH)`;
/// over IPv6 ICMPv6 type 1 code 4, `__udp6_lib_rcv` → `icmpv6_send(ICMPV6_PORT_UNREACH)`),
/// TCP gets a RST unless it is a RST itself (`tcp_v4_send_reset`), anything else nothing.
pub fn closed_port_response(pkt: &Packet) -> Option<Packet> {
    match pkt.l4 {
        L4::Udp { .. } => {
            let (t, code) = icmp::port_unreach(!pkt.is_ipv4());
            let mut p = Packet::icmp_error(pkt.dst, pkt, t, code);
            p.tag = pkt.tag;
            Some(p)
        }
        L4::Tcp {
            sport,
            dport,
            flags,
            seq,
            ack,
            ..
        } => {
            if flags.contains(TcpFlags::RST) {
                return None;
            }
            // RFC 793 reset generation, as tcp_v4_send_reset does it: an ACK-bearing segment
            // gets <SEQ=SEG.ACK><CTL=RST>; otherwise <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>.
            let seg_len = tcp_seg_len(pkt);
            let (rseq, rack, rflags) = if flags.contains(TcpFlags::ACK) {
                (ack, 0, TcpFlags::RST)
            } else {
                (0, seq.wrapping_add(seg_len), TcpFlags::RST | TcpFlags::ACK)
            };
            let mut p = Packet::tcp(
                SocketAddr::new(pkt.dst, dport),
                SocketAddr::new(pkt.src, sport),
                rflags,
            );
            set_seq(&mut p, rseq, rack);
            p.len = if pkt.is_ipv4() { 40 } else { 60 };
            p.tag = pkt.tag;
            Some(p)
        }
        _ => None,
    }
}

/// Length of a TCP segment in sequence space: payload, plus one for SYN and for FIN.
pub(crate) fn tcp_seg_len(pkt: &Packet) -> u32 {
    let hdr: u16 = if pkt.is_ipv4() { 40 } else { 60 };
    let mut n = pkt.len.saturating_sub(hdr) as u32;
    if let Some(f) = pkt.tcp_flags() {
        if f.contains(TcpFlags::SYN) {
            n += 1;
        }
        if f.contains(TcpFlags::FIN) {
            n += 1;
        }
    }
    n
}

fn set_seq(p: &mut Packet, s: u32, a: u32) {
    if let L4::Tcp { seq, ack, .. } = &mut p.l4 {
        *seq = s;
        *ack = a;
    }
}

pub(crate) fn tcp_packet(
    src: SocketAddr,
    dst: SocketAddr,
    flags: TcpFlags,
    seq: u32,
    ack: u32,
    payload: u16,
) -> Packet {
    let mut p = Packet::tcp(src, dst, flags);
    set_seq(&mut p, seq, ack);
    p.len = if src.is_ipv4() { 40 } else { 60 } + payload;
    p
}

/// How long a socket that closed first stays in TIME_WAIT (`TCP_TIMEWAIT_LEN`, 60 s).
pub const TCP_TIMEWAIT_LEN: SimDuration = SimDuration::from_secs(60);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::apps::tests::sa;

    #[test]
    fn closed_udp_port_gets_icmp_port_unreachable_quoting_the_query() {
        let q = Packet::udp(sa("10.244.2.9:40000"), sa("10.244.1.5:53")).tagged(5);
        let r = closed_port_response(&q).unwrap();
        match r.l4 {
            L4::Icmp {
                icmp_type,
                code,
                body: sim_core::IcmpBody::Error(inner),
            } => {
                assert_eq!(
                    (icmp_type, code),
                    (icmp::DEST_UNREACH, icmp::CODE_PORT_UNREACH)
                );
                assert_eq!((inner.sport, inner.dport), (40000, 53));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!((r.src, r.dst, r.tag), (q.dst, q.src, 5));
    }

    #[test]
    fn closed_tcp_port_resets_a_syn_but_never_a_rst() {
        let syn = Packet::tcp(sa("10.0.0.1:5000"), sa("10.0.0.2:80"), TcpFlags::SYN);
        let rst = closed_port_response(&syn).unwrap();
        assert_eq!(rst.tcp_flags(), Some(TcpFlags::RST | TcpFlags::ACK));
        assert!(closed_port_response(&rst).is_none());
    }
}
