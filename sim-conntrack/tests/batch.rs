//! `conntrack_in_many` is `conntrack_in` called once per packet: same verdicts, entries,
//! events and statistics, whatever the packets (new flows, replies, TCP state changes,
//! ICMP errors, entries expiring between batches, a full table with early drop).
mod common;
use common::*;
use proptest::prelude::*;
use sim_conntrack::*;
use sim_core::{IcmpBody, InnerHeader, Packet, SimDuration, SimTime, TcpFlags, L4};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

fn addr(v6: bool, i: u8) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, u16::from(i) + 1))
    } else {
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, i + 1))
    }
}

fn l4() -> impl Strategy<Value = L4> {
    prop_oneof![
        4 => (0u16..3, 0u16..2).prop_map(|(s, d)| L4::Udp { sport: 1000 + s, dport: 53 + d }),
        3 => (0u16..3, prop::sample::select(vec![0x02u8, 0x12, 0x10, 0x11, 0x04, 0x14, 0x01]))
            .prop_map(|(s, f)| L4::Tcp { sport: 1000 + s, dport: 80, flags: TcpFlags(f), seq: 0, ack: 0, win: 65535, opts: sim_core::TcpOpts::NONE }),
        1 => (0u16..2).prop_map(|id| L4::Icmp { icmp_type: 8, code: 0, body: IcmpBody::Query { id, seq: 0 } }),
        1 => (0u8..4, 0u16..3).prop_map(|(d, p)| L4::Icmp {
            icmp_type: 3,
            code: 3,
            body: IcmpBody::Error(InnerHeader {
                src: addr(false, 0),
                dst: addr(false, 4 + d % 2),
                proto: 17,
                sport: 1000 + p,
                dport: 53,
                icmp_type: 0,
                ttl: 64,
            }),
        }),
    ]
}

/// A packet between 4 clients and 2 servers, either way round.
fn packet() -> impl Strategy<Value = (u8, u8, bool, L4)> {
    (0u8..4, 0u8..2, any::<bool>(), l4())
}

fn build(v6: bool, (c, s, back, l4): (u8, u8, bool, L4)) -> Packet {
    let (c, s) = (addr(v6, c), addr(v6, 4 + s));
    let mut p = if back {
        Packet::other(s, c, 0)
    } else {
        Packet::other(c, s, 0)
    };
    p.l4 = match l4 {
        L4::Udp { sport, dport } if back => L4::Udp {
            sport: dport,
            dport: sport,
        },
        L4::Tcp {
            sport,
            dport,
            flags,
            seq,
            ack,
            win,
            opts,
        } if back => L4::Tcp {
            sport: dport,
            dport: sport,
            flags,
            seq,
            ack,
            win,
            opts,
        },
        L4::Icmp { .. } if v6 => L4::Udp { sport: 1, dport: 2 },
        other => other,
    };
    p
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn many_is_one_at_a_time(
        batches in prop::collection::vec((prop::collection::vec(packet(), 0..40), 0u64..40_000, any::<bool>()), 1..12),
        max in 0u32..10,
        v6 in any::<bool>(),
    ) {
        let mut s = Sysctls::default();
        s.set("nf_conntrack_max", &max.to_string()).unwrap();
        s.set("nf_conntrack_buckets", "4").unwrap();
        let mut one = Conntrack::new(3, "batch", s);
        let mut many = one.clone();
        let mut now = SimTime::ZERO;
        for (pkts, gap, confirm) in batches {
            now += SimDuration::from_millis(gap);
            let pkts: Vec<Packet> = pkts.into_iter().map(|p| build(v6, p)).collect();
            let want: Vec<CtVerdict> = pkts.iter().map(|p| one.conntrack_in(now, p)).collect();
            let mut got = Vec::new();
            many.conntrack_in_many(now, &pkts, &mut got);
            prop_assert_eq!(&got, &want);
            for (ct, verdicts) in [(&mut one, &want), (&mut many, &got)] {
                for v in verdicts.iter() {
                    if let CtVerdict::Tracked(h) = v {
                        if confirm {
                            let _ = ct.confirm(now, *h);
                        } else {
                            ct.discard(now, *h);
                        }
                    }
                }
            }
            let ev = |ct: &mut Conntrack| ct.drain_events().iter().map(|e| format!("{} {e}", e.at.as_nanos())).collect::<Vec<_>>();
            prop_assert_eq!(ev(&mut many), ev(&mut one));
            prop_assert_eq!(many.dump(now, &Filter::all()), one.dump(now, &Filter::all()));
            prop_assert_eq!(many.stats(), one.stats());
            prop_assert_eq!(many.next_expiry(), one.next_expiry());
        }
        let _ = t(0);
    }
}

#[test]
fn a_batch_larger_than_the_read_ahead_window_keeps_packet_order() {
    // A flow's first packet and its reply in one batch, further apart than BATCH: the reply
    // finds nothing (the first entry is not confirmed yet) and starts its own entry, exactly
    // as two conntrack_in calls without a confirm between them would.
    let mut ct = Conntrack::new(1, "batch", Sysctls::default());
    let mut pkts = vec![udp("127.0.0.1:1000", "127.0.0.2:53")];
    for i in 0..BATCH as u16 {
        pkts.push(udp(&format!("127.0.0.3:{}", 2000 + i), "127.0.0.2:53"));
    }
    pkts.push(udp("127.0.0.2:53", "127.0.0.1:1000"));
    let mut out = Vec::new();
    ct.conntrack_in_many(t(0), &pkts, &mut out);
    assert_eq!(out.len(), BATCH + 2);
    let ids: Vec<EntryId> = out
        .iter()
        .map(|v| match v {
            CtVerdict::Tracked(h) => {
                assert_eq!(h.ctinfo, CtInfo::New);
                h.id
            }
            other => panic!("{other:?}"),
        })
        .collect();
    let mut distinct = ids.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        ids.len(),
        "every packet started its own entry"
    );
    assert_eq!(ct.count() as usize, BATCH + 2);
    // Confirmed in order, the reply's entry clashes with the first one's reply tuple: UDP
    // with no NAT binding, so `__nf_ct_resolve_clash` merges it onto the first entry
    // (`clash_resolve`), and the table keeps one entry per flow.
    let mut results = Vec::new();
    for v in &out {
        if let CtVerdict::Tracked(h) = v {
            results.push(ct.confirm_resolving(t(0), *h));
        }
    }
    assert!(results[..BATCH + 1].iter().all(|r| r == &Ok(None)));
    assert!(matches!(
        results[BATCH + 1],
        Ok(Some(h)) if h.id == ids[0]
    ));
    assert_eq!(ct.stats().clash_resolve, 1);
    assert_eq!(ct.stats().insert_failed, 0);
    assert_eq!(ct.len(), BATCH + 1);
}
