//! Round trips and byte-level checks of parsing and emitting.

use super::*;
use crate::packet::{
    icmp, IcmpBody, InnerHeader, Packet, TcpFlags, TcpOpts, IPPROTO_ICMP, IPPROTO_ICMPV6,
    IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP, L4,
};
use etherparse::checksum::Sum16BitWords;
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

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
    let p = Packet::icmp_echo_request("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap(), 9, 1);
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
    // Which of them the kernel's nf_defrag_ipv6 holds for reassembly: the first and later
    // fragments, not an atomic one (offset 0, no more fragments), not a whole packet.
    assert!(crate::wire::is_ipv6_fragment(&with_frag(0x0001)));
    assert!(crate::wire::is_ipv6_fragment(&with_frag(0x0008)));
    assert!(!crate::wire::is_ipv6_fragment(&with_frag(0x0000)));
    assert!(!crate::wire::is_ipv6_fragment(&b6));
    assert!(!crate::wire::is_ipv6_fragment(&emit_ip(&p).unwrap()));
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
