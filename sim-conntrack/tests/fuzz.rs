//! Any packet sequence, any NAT, any limits: no panic, and the table's invariants hold.
mod common;
use common::*;
use proptest::prelude::*;
use sim_conntrack::*;
use sim_core::{IcmpBody, InnerHeader, Packet, SimDuration, SimTime, TcpFlags, L4};
use std::net::{IpAddr, Ipv4Addr};

fn addr() -> impl Strategy<Value = IpAddr> {
    (0u8..4).prop_map(|i| IpAddr::V4(Ipv4Addr::new(127, 0, 0, i + 1)))
}

fn l4() -> impl Strategy<Value = L4> {
    prop_oneof![
        (0u16..3, 0u16..3, any::<u8>()).prop_map(|(s, d, f)| L4::Tcp {
            sport: 1000 + s,
            dport: 80 + d,
            flags: TcpFlags(f),
            seq: 0,
            ack: 0,
            win: 65535,
            opts: sim_core::TcpOpts::NONE,
        }),
        (0u16..3, 0u16..3).prop_map(|(s, d)| L4::Udp {
            sport: 1000 + s,
            dport: 53 + d
        }),
        (0u16..3, 0u16..3).prop_map(|(s, d)| L4::Sctp {
            sport: 1000 + s,
            dport: 53 + d
        }),
        (any::<u8>(), any::<u8>(), 0u16..3).prop_map(|(t, c, id)| L4::Icmp {
            icmp_type: t % 20,
            code: c % 4,
            body: IcmpBody::Query { id, seq: 0 }
        }),
        (
            0u8..4,
            0u8..4,
            prop::sample::select(vec![6u8, 17, 1, 47]),
            0u16..3
        )
            .prop_map(|(s, d, proto, p)| L4::Icmp {
                icmp_type: 3,
                code: 3,
                body: IcmpBody::Error(InnerHeader {
                    src: IpAddr::V4(Ipv4Addr::new(127, 0, 0, s + 1)),
                    dst: IpAddr::V4(Ipv4Addr::new(127, 0, 0, d + 1)),
                    proto,
                    sport: 1000 + p,
                    dport: 53,
                    icmp_type: 8,
                    ttl: 64,
                })
            }),
        Just(L4::Icmp {
            icmp_type: 11,
            code: 0,
            body: IcmpBody::Other
        }),
        (0u8..255).prop_map(|proto| L4::Other { proto }),
    ]
}

fn packet() -> impl Strategy<Value = Packet> {
    (addr(), addr(), l4()).prop_map(|(s, d, l4)| {
        let mut p = Packet::other(s, d, 0);
        p.l4 = l4;
        p
    })
}

fn range() -> impl Strategy<Value = Option<NatRange>> {
    prop_oneof![
        Just(None),
        (
            0u8..4,
            0u8..3,
            any::<bool>(),
            prop::option::of((1u16..70, 0u16..5))
        )
            .prop_map(|(a, n, rf, ports)| {
                let lo = Ipv4Addr::new(127, 0, 1, a + 1);
                let hi = Ipv4Addr::new(127, 0, 1, a + 1 + n);
                Some(NatRange {
                    addrs: Some((lo.into(), hi.into())),
                    ports: ports.map(|(p, w)| (p, p + w)),
                    random_fully: rf,
                    ..NatRange::default()
                })
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn no_panic_and_invariants_hold(
        pkts in prop::collection::vec((packet(), 0u64..5000, any::<bool>()), 1..80),
        dnat in range(),
        snat in range(),
        max in 0u32..8,
        buckets in 1u32..6,
    ) {
        let mut s = Sysctls::default();
        s.set("nf_conntrack_max", &max.to_string()).unwrap();
        s.set("nf_conntrack_buckets", &buckets.to_string()).unwrap();
        s.set("nf_conntrack_udp_timeout", "2").unwrap();
        let mut ct = Conntrack::new(5, "fuzz", s);
        let mut now = SimTime::ZERO;
        for (p, gap, drop) in pkts {
            now += SimDuration::from_millis(gap);
            let rules = Rules {
                dnat: dnat.iter().filter_map(|r| p.dport().map(|d| (std::net::SocketAddr::new(p.dst, d), *r))).collect(),
                snat,
                drop_before_confirm: drop,
            };
            let _ = send(&mut ct, now, p, &rules);
            let listed = ct.list(now, &Filter::all());
            prop_assert_eq!(listed.len(), ct.len());
            prop_assert_eq!(ct.count() as usize, ct.len(), "no handle outlives its packet");
            if max > 0 {
                prop_assert!(ct.len() <= max as usize);
            }
            for e in &listed {
                // Equal tuples (a packet to itself): the kernel finds the reply tuplehash first.
                let first = if e.orig == e.reply { Dir::Reply } else { Dir::Original };
                prop_assert_eq!(ct.find(now, &e.orig).map(|(x, d)| (x.id, d)), Some((e.id, first)));
                prop_assert_eq!(ct.find(now, &e.reply).map(|(x, d)| (x.id, d)), Some((e.id, Dir::Reply)));
                let _ = e.list_line(now).to_string();
            }
            if let Some(next) = ct.next_expiry() {
                prop_assert!(next > now);
            }
        }
        for e in ct.drain_events() {
            let _ = e.to_string();
        }
        ct.expire(SimTime::MAX);
        prop_assert!(ct.is_empty());
    }
}
