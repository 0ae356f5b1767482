//! Limits, early drop, list/delete filters, ICMP, NAT port allocation, `-S`.
mod common;
use common::*;
use sim_conntrack::*;
use sim_core::packet::icmp;
use sim_core::{Packet, SimTime};

fn client(i: u32) -> String {
    format!("127.1.{}.{}:40000", i / 250, i % 250 + 1)
}

#[test]
fn table_full_early_drops_a_non_assured_entry() {
    let mut s = Sysctls::default();
    s.set("nf_conntrack_max", "4").unwrap();
    s.set("nf_conntrack_buckets", "1").unwrap(); // every entry in the one bucket early_drop looks at
    let mut ct = table(s);
    let r = Rules::default();
    // Two assured entries (query, answer, query > 2 s later), two unreplied ones.
    for i in 0..2 {
        passed(send(&mut ct, t(0), udp(&client(i), "127.0.0.53:53"), &r));
        passed(send(&mut ct, t(1), udp("127.0.0.53:53", &client(i)), &r));
        passed(send(&mut ct, t(3000), udp(&client(i), "127.0.0.53:53"), &r));
    }
    for i in 2..4 {
        passed(send(&mut ct, t(3000), udp(&client(i), "127.0.0.53:53"), &r));
    }
    assert_eq!(ct.len(), 4);
    ct.drain_events();
    passed(send(&mut ct, t(4000), udp(&client(9), "127.0.0.53:53"), &r));
    assert_eq!(
        ct.stats().early_drop,
        2,
        "every non-assured entry of the bucket goes"
    );
    assert_eq!(ct.stats().drop, 0);
    let left = ct.list(t(4000), &Filter::all());
    assert_eq!(left.len(), 3);
    assert_eq!(
        left.iter()
            .filter(|e| e.status.contains(Status::ASSURED))
            .count(),
        2
    );
    let evs = ct.drain_events();
    assert_eq!(
        evs.iter()
            .filter(|e| e.cause == Some(DestroyCause::EarlyDrop))
            .count(),
        2
    );
}

#[test]
fn table_full_of_assured_entries_drops_the_packet() {
    let mut s = Sysctls::default();
    s.set("nf_conntrack_max", "3").unwrap();
    let mut ct = table(s);
    let r = Rules::default();
    for i in 0..3 {
        passed(send(&mut ct, t(0), udp(&client(i), "127.0.0.53:53"), &r));
        passed(send(&mut ct, t(1), udp("127.0.0.53:53", &client(i)), &r));
        passed(send(&mut ct, t(3000), udp(&client(i), "127.0.0.53:53"), &r));
    }
    let v = ct.conntrack_in(t(4000), &udp(&client(7), "127.0.0.53:53"));
    assert_eq!(v, CtVerdict::Drop(DropReason::TableFull));
    assert_eq!(
        DropReason::TableFull.to_string(),
        "nf_conntrack: table full, dropping packet"
    );
    assert_eq!(ct.stats().drop, 1);
    assert_eq!(ct.stats().early_drop, 0);
    assert_eq!(ct.len(), 3);
    assert_eq!(
        ct.stats().to_string(),
        "cpu=0   \tfound=0 invalid=0 insert=0 insert_failed=0 drop=1 early_drop=0 error=0 search_restart=0 clash_resolve=0 chaintoolong=0 "
    );
    // Existing flows still work.
    assert!(matches!(
        ct.conntrack_in(t(4000), &udp(&client(1), "127.0.0.53:53")),
        CtVerdict::Tracked(_)
    ));
    assert_eq!(ct.sysctl("nf_conntrack_count").unwrap(), "3");
}

#[test]
fn early_drop_looks_only_at_eight_buckets() {
    // With many buckets, the non-assured entries are almost surely elsewhere: the kernel then
    // drops the packet even though the table holds droppable entries.
    let mut s = Sysctls::default();
    s.set("nf_conntrack_max", "2").unwrap();
    let mut ct = table(s);
    let r = Rules::default();
    passed(send(&mut ct, t(0), udp(&client(0), "127.0.0.53:53"), &r));
    passed(send(&mut ct, t(0), udp(&client(1), "127.0.0.53:53"), &r));
    let v = ct.conntrack_in(t(1), &udp(&client(2), "127.0.0.53:53"));
    assert_eq!(v, CtVerdict::Drop(DropReason::TableFull));
}

#[test]
fn delete_by_orig_dst_and_reply_src_removes_exactly_the_matching_entries() {
    let mut ct = table(Sysctls::default());
    let to = |ep: &str| Rules {
        dnat: vec![(sa("127.96.0.10:53"), ep.parse().unwrap())],
        ..Rules::default()
    };
    // Three clients DNAT'd to endpoint .7, two to endpoint .8, one to another service.
    for i in 0..3 {
        passed(send(
            &mut ct,
            t(0),
            udp(&client(i), "127.96.0.10:53"),
            &to("127.244.1.7:53"),
        ));
    }
    for i in 3..5 {
        passed(send(
            &mut ct,
            t(0),
            udp(&client(i), "127.96.0.10:53"),
            &to("127.244.1.8:53"),
        ));
    }
    let other = Rules {
        dnat: vec![(sa("127.96.0.11:53"), "127.244.1.7:53".parse().unwrap())],
        ..Rules::default()
    };
    passed(send(
        &mut ct,
        t(0),
        udp(&client(5), "127.96.0.11:53"),
        &other,
    ));
    ct.drain_events();
    let f = Filter::parse("-p udp --orig-dst 127.96.0.10 --reply-src 127.244.1.7").unwrap();
    assert_eq!(ct.list(t(10), &f).len(), 3);
    let deleted = ct.delete(t(10), &f);
    assert_eq!(deleted.len(), 3);
    for e in &deleted {
        assert_eq!(e.orig.dst.to_string(), "127.96.0.10");
        assert_eq!(e.reply.src.to_string(), "127.244.1.7");
    }
    let left = ct.list(t(10), &Filter::all());
    assert_eq!(left.len(), 3);
    assert!(left
        .iter()
        .all(|e| !(e.orig.dst.to_string() == "127.96.0.10"
            && e.reply.src.to_string() == "127.244.1.7")));
    let evs = ct.drain_events();
    assert_eq!(evs.len(), 3);
    assert!(evs
        .iter()
        .all(|e| e.kind == EventKind::Destroy
            && matches!(e.cause, Some(DestroyCause::Delete { .. }))));
    assert!(
        ct.delete(t(11), &f).is_empty(),
        "a second delete matches nothing"
    );
    assert_eq!(
        deleted_summary(0),
        "conntrack v1.4.7 (conntrack-tools): 0 flow entries have been deleted."
    );
    // Filters by NAT kind, port, mark.
    assert_eq!(ct.list(t(11), &Filter::parse("-g").unwrap()).len(), 3);
    assert_eq!(ct.list(t(11), &Filter::parse("-n").unwrap()).len(), 0);
    assert_eq!(ct.list(t(11), &Filter::parse("-j").unwrap()).len(), 3);
    assert_eq!(
        ct.list(
            t(11),
            &Filter::parse("-p udp --reply-port-src 53 -d 127.96.0.11").unwrap()
        )
        .len(),
        1
    );
    assert_eq!(ct.list(t(11), &Filter::parse("-m 1").unwrap()).len(), 0);
    assert_eq!(ct.list(t(11), &Filter::parse("-p tcp").unwrap()).len(), 0);
}

#[test]
fn masquerade_keeps_a_free_port_and_moves_a_taken_one() {
    let mut ct = table(Sysctls::default());
    let masq = Rules {
        snat: Some(NatRange::to_addr("127.0.0.9".parse().unwrap())),
        ..Rules::default()
    };
    // Two pods using the same source port towards the same server.
    let a = passed(send(
        &mut ct,
        t(0),
        udp("127.10.0.1:40000", "127.0.0.53:53"),
        &masq,
    ));
    let b = passed(send(
        &mut ct,
        t(0),
        udp("127.10.0.2:40000", "127.0.0.53:53"),
        &masq,
    ));
    assert_eq!(a.to_string(), "udp 127.0.0.9:40000 -> 127.0.0.53:53");
    assert_eq!(b.src.to_string(), "127.0.0.9");
    assert_ne!(b.sport(), Some(40000));
    assert!(b.sport().unwrap() >= 1024);
    assert_eq!(ct.stats().found, 1, "the taken tuple was found once");
    // Replies are un-SNAT'd to the right pod.
    let ra = passed(send(
        &mut ct,
        t(1),
        udp("127.0.0.53:53", "127.0.0.9:40000"),
        &masq,
    ));
    assert_eq!(ra.to_string(), "udp 127.0.0.53:53 -> 127.10.0.1:40000");
    let rb = passed(send(
        &mut ct,
        t(1),
        Packet::udp(
            sa("127.0.0.53:53"),
            std::net::SocketAddr::new(b.src, b.sport().unwrap()),
        ),
        &masq,
    ));
    assert_eq!(rb.to_string(), "udp 127.0.0.53:53 -> 127.10.0.2:40000");
    assert_eq!(ct.list(t(1), &Filter::parse("--src-nat").unwrap()).len(), 2);
    assert_eq!(
        ct.list(t(1), &Filter::parse("--src-nat=127.0.0.9").unwrap())
            .len(),
        2
    );
    // conntrack 1.4.7 does not compare the `=IP` when listing (checked against the real
    // tool: tests/conntrack_listing.rs).
    assert_eq!(
        ct.list(t(1), &Filter::parse("--src-nat=127.0.0.8").unwrap())
            .len(),
        2
    );
    assert_eq!(ct.list(t(1), &Filter::parse("--dst-nat").unwrap()).len(), 0);
    // A low port is searched in 1..511.
    let c = passed(send(
        &mut ct,
        t(2),
        udp("127.10.0.1:53", "127.0.0.53:53"),
        &masq,
    ));
    let d = passed(send(
        &mut ct,
        t(2),
        udp("127.10.0.2:53", "127.0.0.53:53"),
        &masq,
    ));
    assert_eq!(c.sport(), Some(53));
    assert!((1..=511).contains(&d.sport().unwrap()), "{d}");
    // The same source to a second destination reuses its existing mapping.
    let e = passed(send(
        &mut ct,
        t(3),
        udp("127.10.0.2:40000", "127.0.0.54:53"),
        &masq,
    ));
    assert_eq!(e.sport(), b.sport());
}

#[test]
fn random_fully_is_seeded() {
    let run = |seed: u64| {
        let mut ct = Conntrack::new(seed, "node/a/conntrack", Sysctls::default());
        let r = Rules {
            snat: Some(NatRange {
                random_fully: true,
                ..NatRange::to_addr("127.0.0.9".parse().unwrap())
            }),
            ..Rules::default()
        };
        (0..5)
            .map(|i| {
                passed(send(&mut ct, t(0), udp(&client(i), "127.0.0.53:53"), &r))
                    .sport()
                    .unwrap()
            })
            .collect::<Vec<u16>>()
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
    assert!(run(3).iter().all(|p| *p >= 1024));
}

#[test]
fn icmp_echo_and_related_errors() {
    let mut ct = table(Sysctls::default());
    let r = Rules::default();
    let ping = Packet::icmp_echo_request(
        "127.0.0.1".parse().unwrap(),
        "127.0.0.2".parse().unwrap(),
        4242,
        1,
    );
    passed(send(&mut ct, t(0), ping, &r));
    let mut pong = ping;
    std::mem::swap(&mut pong.src, &mut pong.dst);
    pong.l4 = sim_core::L4::Icmp {
        icmp_type: icmp::ECHO_REPLY,
        code: 0,
        body: sim_core::IcmpBody::Query { id: 4242, seq: 1 },
    };
    passed(send(&mut ct, t(1), pong, &r));
    assert_eq!(
        lines(&ct, t(500)),
        ["icmp     1 29 src=127.0.0.1 dst=127.0.0.2 type=8 code=0 id=4242 src=127.0.0.2 dst=127.0.0.1 type=0 code=0 id=4242 mark=0 use=1"]
    );
    // An unsolicited echo reply is INVALID.
    let mut stray = pong;
    stray.l4 = sim_core::L4::Icmp {
        icmp_type: icmp::ECHO_REPLY,
        code: 0,
        body: sim_core::IcmpBody::Query { id: 9, seq: 1 },
    };
    assert_eq!(
        ct.conntrack_in(t(2), &stray),
        CtVerdict::Invalid(InvalidReason::IcmpCannotCreate)
    );

    // A port-unreachable about a DNAT'd query is RELATED, and un-DNAT'd inside and out.
    let dns = Rules {
        dnat: vec![(sa("127.96.0.10:53"), "127.0.0.2:5353".parse().unwrap())],
        ..Rules::default()
    };
    let q = passed(send(
        &mut ct,
        t(10),
        udp("127.0.0.1:40004", "127.96.0.10:53"),
        &dns,
    ));
    let err = Packet::icmp_error(q.dst, &q, icmp::DEST_UNREACH, icmp::CODE_PORT_UNREACH);
    match send(&mut ct, t(11), err, &dns) {
        Out::Passed(p, Some(h)) => {
            assert_eq!(h.ctinfo, CtInfo::RelatedReply);
            assert_eq!(
                p.to_string(),
                "icmp 127.96.0.10 -> 127.0.0.1 unreachable code=3 (udp 127.0.0.1:40004 -> 127.96.0.10:53)"
            );
        }
        o => panic!("{o:?}"),
    }
    // An error about nothing known: INVALID and counted as `error`.
    let lost = udp("127.0.0.1:1", "127.0.0.2:2");
    let err = Packet::icmp_error(lost.dst, &lost, icmp::DEST_UNREACH, icmp::CODE_PORT_UNREACH);
    assert_eq!(
        ct.conntrack_in(t(12), &err),
        CtVerdict::Invalid(InvalidReason::IcmpErrorNoMatch)
    );
    assert_eq!(ct.stats().error, 1);
    assert_eq!(ct.stats().invalid, 1);
}

#[test]
fn generic_protocol_lines() {
    let mut ct = table(Sysctls::default());
    let p = Packet::other(
        "127.0.0.1".parse().unwrap(),
        "127.0.0.2".parse().unwrap(),
        200,
    );
    passed(send(&mut ct, t(0), p, &Rules::default()));
    assert_eq!(
        lines(&ct, t(500)),
        ["unknown  200 599 src=127.0.0.1 dst=127.0.0.2 [UNREPLIED] src=127.0.0.2 dst=127.0.0.1 mark=0 use=1"]
    );
    assert_eq!(
        ct.list(t(0), &Filter::all())[0]
            .list_line_extended(t(500))
            .to_string(),
        "ipv4     2 unknown  200 599 src=127.0.0.1 dst=127.0.0.2 [UNREPLIED] src=127.0.0.2 dst=127.0.0.1 mark=0 use=1"
    );
}

#[test]
fn ctmark_is_kept_printed_and_reported() {
    let mut ct = table(Sysctls::default());
    let h = match send(
        &mut ct,
        t(0),
        udp("127.0.0.1:1000", "127.0.0.2:53"),
        &Rules::default(),
    ) {
        Out::Passed(_, Some(h)) => h,
        o => panic!("{o:?}"),
    };
    ct.drain_events();
    assert!(ct.set_mark(h.id, 0x4000));
    assert_eq!(ct.mark(h.id), Some(0x4000));
    let h2 = match ct.conntrack_in(t(1), &udp("127.0.0.1:1000", "127.0.0.2:53")) {
        CtVerdict::Tracked(h) => h,
        v => panic!("{v:?}"),
    };
    ct.confirm(t(1), h2).unwrap();
    assert_eq!(
        event_lines(&mut ct),
        [" [UPDATE] udp      17 30 src=127.0.0.1 dst=127.0.0.2 sport=1000 dport=53 [UNREPLIED] src=127.0.0.2 dst=127.0.0.1 sport=53 dport=1000 mark=16384"]
    );
    assert!(lines(&ct, t(1))[0].ends_with("mark=16384 use=1"));
    assert_eq!(
        ct.list(t(1), &Filter::parse("-m 0x4000/0x4000").unwrap())
            .len(),
        1
    );
}

#[test]
fn handles_of_destroyed_entries_are_stale_not_reused() {
    let mut ct = table(Sysctls::default());
    let h = match send(
        &mut ct,
        t(0),
        udp("127.0.0.1:1000", "127.0.0.2:53"),
        &Rules::default(),
    ) {
        Out::Passed(_, Some(h)) => h,
        o => panic!("{o:?}"),
    };
    ct.delete(t(1), &Filter::all());
    passed(send(
        &mut ct,
        t(2),
        udp("127.0.0.1:1001", "127.0.0.2:53"),
        &Rules::default(),
    ));
    assert_eq!(ct.get(h.id), None);
    assert!(!ct.set_mark(h.id, 1));
    assert_eq!(ct.confirm(t(3), h), Err(ConfirmError::NoEntry(h.id)));
    assert!(matches!(
        ct.nat_setup(
            h.id,
            Manip::Dst,
            &NatRange::to_addr("127.0.0.3".parse().unwrap())
        ),
        Err(NatError::NoEntry(_))
    ));
    let _ = SimTime::ZERO;
}
