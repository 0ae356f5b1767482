//! The per-packet fast paths give what the general code gives: `rule_view` and `status`
//! against `get`, on random tables of NAT'd entries (IPv4 and IPv6, every protocol family,
//! every life stage).
use proptest::prelude::*;
use sim_conntrack::*;
use sim_core::{IcmpBody, Packet, SimDuration, SimTime, TcpFlags, L4};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// How one random entry is made and how far it gets.
#[derive(Clone, Debug)]
struct Spec {
    v6: bool,
    /// 0 TCP, 1 UDP, 2 ICMP echo, 3 SCTP, 4 GRE (no ports).
    proto: u8,
    client: u8,
    cport: u16,
    server: u8,
    sport: u16,
    /// DNAT to this host, and maybe port; else the null binding.
    dnat: Option<(u8, Option<u16>)>,
    /// SNAT to this host, and maybe a port range; else the null binding.
    snat: Option<(u8, Option<(u16, u16)>)>,
    mark: u32,
    /// 0 left unconfirmed, 1 confirmed, 2 confirmed and answered, 3 answered by a RST before
    /// any reply (TCP: killed, held by its packet), 4 confirmed then deleted.
    fate: u8,
    gap_ms: u32,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        (any::<bool>(), 0u8..5, 0u8..4, 0u16..3, 0u8..3, 0u16..2),
        (
            prop::option::of((
                0u8..3,
                prop::option::of(prop::sample::select(vec![53u16, 8080])),
            )),
            prop::option::of((0u8..2, prop::option::of(Just((1024u16, 1026u16))))),
        ),
        (
            prop::sample::select(vec![0u32, 1, 0x4000, 0xffff_ffff]),
            0u8..5,
            0u32..40_000,
        ),
    )
        .prop_map(
            |((v6, proto, client, cport, server, sport), (dnat, snat), (mark, fate, gap_ms))| {
                Spec {
                    v6,
                    proto,
                    client,
                    cport: 40_000 + cport,
                    server,
                    sport: 80 + sport,
                    dnat,
                    snat,
                    mark,
                    fate,
                    gap_ms,
                }
            },
        )
}

/// Host `h` of network `net`, in the family asked for (loopback / ULA addresses only).
fn host(v6: bool, net: u8, h: u8) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::new(
            0xfd00 + u16::from(net),
            0,
            0,
            0,
            0,
            0,
            0,
            u16::from(h) + 1,
        ))
    } else {
        IpAddr::V4(Ipv4Addr::new(127, net, 0, h + 1))
    }
}

/// A packet whose tuple is `t` (TCP with `flags`).
fn packet_of(t: &Tuple, flags: TcpFlags) -> Packet {
    let (s, d) = (
        SocketAddr::new(t.src, t.sport),
        SocketAddr::new(t.dst, t.dport),
    );
    match t.proto {
        6 => Packet::tcp(s, d, flags),
        17 => Packet::udp(s, d),
        132 => {
            let mut p = Packet::udp(s, d);
            p.l4 = L4::Sctp {
                sport: t.sport,
                dport: t.dport,
            };
            p
        }
        1 | 58 => {
            let mut p = Packet::icmp_echo_request(t.src, t.dst, t.sport, 1);
            p.l4 = L4::Icmp {
                icmp_type: t.icmp_type(),
                code: t.icmp_code(),
                body: IcmpBody::Query {
                    id: t.sport,
                    seq: 1,
                },
            };
            p
        }
        proto => Packet::other(t.src, t.dst, proto),
    }
}

/// The first packet of a spec's connection.
fn first_packet(s: &Spec) -> Packet {
    let (c, v) = (host(s.v6, 1, s.client), host(s.v6, 96, s.server));
    match s.proto {
        0 => Packet::tcp(
            SocketAddr::new(c, s.cport),
            SocketAddr::new(v, s.sport),
            TcpFlags::SYN,
        ),
        1 => Packet::udp(SocketAddr::new(c, s.cport), SocketAddr::new(v, s.sport)),
        2 => Packet::icmp_echo_request(c, v, s.cport, 1),
        3 => {
            let mut p = Packet::udp(SocketAddr::new(c, s.cport), SocketAddr::new(v, s.sport));
            p.l4 = L4::Sctp {
                sport: s.cport,
                dport: s.sport,
            };
            p
        }
        _ => Packet::other(c, v, 47),
    }
}

/// A table built from `specs`, the handles of every packet tracked on the way (entries gone
/// since included), and the instant reached. `check` runs after every step.
fn build(specs: &[Spec], mut check: impl FnMut(&Conntrack, &[CtHandle])) -> Conntrack {
    let mut ct = Conntrack::new(11, "fastpath", Sysctls::default());
    let mut now = SimTime::ZERO;
    let mut handles: Vec<CtHandle> = Vec::new();
    for s in specs {
        now += SimDuration::from_millis(u64::from(s.gap_ms));
        let CtVerdict::Tracked(h) = ct.conntrack_in(now, &first_packet(s)) else {
            check(&ct, &handles);
            continue;
        };
        handles.push(h);
        let dnat = s.dnat.map(|(a, port)| {
            let ip = host(s.v6, 2, a);
            match port {
                Some(p) => NatRange::to_addr_port(ip, p),
                None => NatRange::to_addr(ip),
            }
        });
        let snat = s.snat.map(|(a, ports)| NatRange {
            ports,
            ..NatRange::to_addr(host(s.v6, 3, a))
        });
        if !ct.nat_initialized(h.id, Manip::Dst) {
            match dnat {
                Some(r) => ct.nat_setup(h.id, Manip::Dst, &r).expect("unconfirmed"),
                None => ct.nat_null_binding(h.id, Manip::Dst).expect("unconfirmed"),
            };
        }
        if !ct.nat_initialized(h.id, Manip::Src) {
            match snat {
                Some(r) => ct.nat_setup(h.id, Manip::Src, &r).expect("unconfirmed"),
                None => ct.nat_null_binding(h.id, Manip::Src).expect("unconfirmed"),
            };
        }
        ct.set_mark(h.id, s.mark);
        check(&ct, &handles);
        if s.fate == 0 {
            continue;
        }
        if ct.confirm(now, h).is_err() {
            check(&ct, &handles);
            continue;
        }
        check(&ct, &handles);
        let Some(e) = ct.get(h.id) else { continue };
        match s.fate {
            2 | 3 => {
                now += SimDuration::from_millis(1);
                let flags = if s.fate == 2 {
                    TcpFlags::SYN | TcpFlags::ACK
                } else {
                    TcpFlags::RST
                };
                if let CtVerdict::Tracked(r) = ct.conntrack_in(now, &packet_of(&e.reply, flags)) {
                    handles.push(r);
                    check(&ct, &handles);
                    if s.fate == 2 {
                        let _ = ct.confirm(now, r);
                    }
                }
            }
            4 => {
                ct.delete_entry(now, h.id);
            }
            _ => {}
        }
        check(&ct, &handles);
    }
    ct
}

/// What rules read of an address: IPv4 as it is, IPv6 as 0.0.0.0.
fn rule_addr(a: IpAddr) -> Ipv4Addr {
    match a {
        IpAddr::V4(v) => v,
        IpAddr::V6(_) => Ipv4Addr::new(0, 0, 0, 0),
    }
}

fn rule_tuple(t: &Tuple) -> TupleV4 {
    TupleV4 {
        src: rule_addr(t.src),
        dst: rule_addr(t.dst),
        sport: t.sport,
        dport: t.dport,
        proto: t.proto,
    }
}

fn check_rule_view(ct: &Conntrack, handles: &[CtHandle]) {
    for h in handles {
        assert_eq!(ct.status(h.id), ct.get(h.id).map(|e| e.status));
        match (ct.rule_view(h.id), ct.get(h.id)) {
            (None, None) => {}
            (Some(v), Some(e)) => {
                let want = RuleView {
                    status: e.status,
                    mark: e.mark,
                    expiry: e.expiry,
                    orig: rule_tuple(&e.orig),
                    reply: rule_tuple(&e.reply),
                };
                assert_eq!(v, want, "entry {e:?}");
                assert_eq!(TupleV4::from_tuple(&e.orig), want.orig);
                assert_eq!(TupleV4::from_tuple(&e.reply), want.reply);
            }
            (v, e) => panic!("rule_view {v:?} but get {e:?}"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// `rule_view` reads what `get`'s snapshot holds, for unconfirmed, confirmed, answered,
    /// NAT'd, killed and deleted entries of both families.
    #[test]
    fn rule_view_is_what_get_reports(specs in prop::collection::vec(spec(), 1..24)) {
        build(&specs, check_rule_view);
    }
}

/// The cases the random tables must reach for the property above to mean something.
#[test]
fn rule_view_covers_v4_v6_nat_and_every_life_stage() {
    let mk = |v6: bool, proto: u8, fate: u8| Spec {
        v6,
        proto,
        client: 0,
        cport: 40_000 + u16::from(fate),
        server: 0,
        sport: 80,
        dnat: Some((1, Some(8080))),
        snat: Some((0, None)),
        mark: 7,
        fate,
        gap_ms: 5,
    };
    let specs: Vec<Spec> = [false, true]
        .into_iter()
        .flat_map(|v6| (0..5).map(move |fate| mk(v6, 0, fate)))
        .chain([mk(false, 2, 2), mk(true, 1, 2), mk(true, 4, 1)])
        .collect();
    let mut saw = std::collections::BTreeSet::new();
    build(&specs, |ct, hs| {
        check_rule_view(ct, hs);
        for h in hs {
            match ct.rule_view(h.id) {
                None => {
                    saw.insert("gone");
                }
                Some(v) => {
                    if matches!(v.expiry, Expiry::AfterConfirm(_)) {
                        saw.insert("unconfirmed");
                    }
                    if v.status.contains(Status::DYING) {
                        saw.insert("dying");
                    }
                    if v.status
                        .contains(Status(Status::SEEN_REPLY.0 | Status::DST_NAT.0))
                    {
                        saw.insert("answered dnat");
                    }
                    if v.orig.src.is_unspecified() {
                        saw.insert("v6");
                    } else {
                        saw.insert("v4");
                    }
                    if v.mark == 7 {
                        saw.insert("mark");
                    }
                }
            }
        }
    });
    let want = [
        "answered dnat",
        "dying",
        "gone",
        "mark",
        "unconfirmed",
        "v4",
        "v6",
    ];
    assert_eq!(saw.into_iter().collect::<Vec<_>>(), want);
}

/// `nf_nat_packet` written from `get(id)`'s tuples: the manip's part of the packet becomes
/// that of the inverse of the other direction's tuple (`Tuple::invert`); an ICMP error
/// RELATED to the entry has its quoted header made to look like the other direction's tuple.
fn nat_reference(ct: &Conntrack, h: CtHandle, manip: Manip, pkt: &mut Packet) -> bool {
    use sim_conntrack::tuple::{has_ports, is_icmp};
    let Some(e) = ct.get(h.id) else {
        return false;
    };
    let dir = h.dir();
    // Original direction: the manip's own bit; reply direction: the other one.
    let src_side = (manip == Manip::Src) == (dir == Dir::Original);
    let bit = if src_side {
        Status::SRC_NAT
    } else {
        Status::DST_NAT
    };
    if !e.status.contains(bit) {
        return false;
    }
    let other = *e.tuple(dir.flip());
    let target = other.invert().expect("the entries made here have inverses");
    if matches!(h.ctinfo, CtInfo::Related | CtInfo::RelatedReply) {
        if let L4::Icmp {
            body: IcmpBody::Error(mut inner),
            icmp_type,
            code,
        } = pkt.l4
        {
            if manip == Manip::Dst {
                inner.src = other.src;
                if has_ports(other.proto) || is_icmp(other.proto) {
                    inner.sport = other.sport;
                }
                pkt.dst = target.dst;
            } else {
                inner.dst = other.dst;
                if has_ports(other.proto) {
                    inner.dport = other.dport;
                }
                pkt.src = target.src;
            }
            pkt.l4 = L4::Icmp {
                icmp_type,
                code,
                body: IcmpBody::Error(inner),
            };
            return true;
        }
    }
    if manip == Manip::Src {
        pkt.src = target.src;
    } else {
        pkt.dst = target.dst;
    }
    match &mut pkt.l4 {
        L4::Tcp { sport, dport, .. } | L4::Udp { sport, dport } | L4::Sctp { sport, dport }
            if has_ports(target.proto) =>
        {
            if manip == Manip::Src {
                *sport = target.sport;
            } else {
                *dport = target.dport;
            }
        }
        L4::Icmp {
            body: IcmpBody::Query { id, .. },
            ..
        } if is_icmp(target.proto) => *id = target.sport,
        _ => {}
    }
    true
}

/// Every packet `nat_packet` may be given for the entries of `ct`: for each handle, both
/// directions' packets (ports and addresses as they arrive, and scrambled) and ICMP errors
/// about them, with every ctinfo of that direction, at both manips.
fn check_nat_packet(ct: &Conntrack, handles: &[CtHandle]) -> usize {
    let mut rewritten = 0;
    for h in handles {
        let Some(e) = ct.get(h.id) else {
            let mut p = Packet::udp(
                "127.0.0.1:1".parse().expect("addr"),
                "127.0.0.2:2".parse().expect("addr"),
            );
            for m in [Manip::Src, Manip::Dst] {
                assert!(
                    !ct.nat_packet(*h, m, &mut p),
                    "a gone entry rewrites nothing"
                );
            }
            continue;
        };
        for dir in [Dir::Original, Dir::Reply] {
            let own = packet_of(e.tuple(dir), TcpFlags::ACK);
            let mut scrambled = own;
            scrambled.src = e.tuple(dir).dst;
            scrambled.dst = e.tuple(dir).src;
            scrambled.set_sport(1);
            scrambled.set_dport(2);
            let router = if e.orig.src.is_ipv4() {
                "127.9.9.9".parse().expect("addr")
            } else {
                "fd09::9".parse().expect("addr")
            };
            let error =
                Packet::icmp_error(router, &packet_of(e.tuple(dir.flip()), TcpFlags::ACK), 3, 3);
            let infos: &[CtInfo] = match dir {
                Dir::Original => &[CtInfo::New, CtInfo::Established, CtInfo::Related],
                Dir::Reply => &[CtInfo::EstablishedReply, CtInfo::RelatedReply],
            };
            for &ctinfo in infos {
                let hh = CtHandle { id: h.id, ctinfo };
                for p in [own, scrambled, error] {
                    for m in [Manip::Src, Manip::Dst] {
                        let (mut got, mut want) = (p, p);
                        let did = ct.nat_packet(hh, m, &mut got);
                        let should = nat_reference(ct, hh, m, &mut want);
                        assert_eq!(
                            (did, got),
                            (should, want),
                            "{m:?} of {p:?} as {ctinfo:?} of {e:?}"
                        );
                        rewritten += usize::from(did);
                    }
                }
            }
        }
    }
    rewritten
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// `nat_packet` (its fast path for TCP/UDP/SCTP/other, its general path for ICMP and
    /// RELATED) rewrites exactly what the reference from `get`'s tuples does.
    #[test]
    fn nat_packet_is_the_inverse_of_the_other_direction(specs in prop::collection::vec(spec(), 1..24)) {
        build(&specs, |ct, hs| {
            check_nat_packet(ct, hs);
        });
    }
}

/// The cases the random tables must reach for the property above to mean something: both
/// families, both NAT types, answered and unanswered, ports and no ports, ICMP.
#[test]
fn nat_packet_covers_both_families_nat_types_and_protocols() {
    let mut specs = Vec::new();
    for v6 in [false, true] {
        for proto in 0..5 {
            for (dnat, snat) in [
                (Some((1, Some(8080))), None),
                (None, Some((0, Some((1024, 1026))))),
                (Some((2, None)), Some((1, None))),
            ] {
                specs.push(Spec {
                    v6,
                    proto,
                    client: specs.len() as u8,
                    cport: 40_000 + specs.len() as u16,
                    server: 0,
                    sport: 80,
                    dnat,
                    snat,
                    mark: 0,
                    fate: 2,
                    gap_ms: 1,
                });
            }
        }
    }
    let mut rewritten = 0;
    let ct = build(&specs, |ct, hs| rewritten += check_nat_packet(ct, hs));
    // Every spec's entry is there, NAT'd both ways round, in both families.
    let all = ct.list(SimTime::from_secs(1), &Filter::all());
    assert_eq!(all.len(), specs.len());
    assert!(all.iter().all(|e| e.is_src_nat() || e.is_dst_nat()));
    assert!(all
        .iter()
        .any(|e| e.orig.src.is_ipv6() && e.is_src_nat() && e.proto() == 58));
    assert!(all
        .iter()
        .any(|e| e.orig.src.is_ipv4() && e.is_dst_nat() && e.proto() == 47));
    assert!(rewritten > 1000, "{rewritten}");
}
