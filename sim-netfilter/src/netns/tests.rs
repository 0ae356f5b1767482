//! The pipeline against the behaviours issue #3 names: DNAT to one endpoint, pinning by
//! conntrack, un-DNAT of replies, MASQUERADE and un-SNAT, flows outliving their rules.

use super::*;
use sim_conntrack::Filter;
use sim_core::{SimDuration, TcpFlags};
use std::net::SocketAddr;

fn ifn(s: &str) -> IfName {
    IfName::new(s).unwrap()
}
fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}
fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// kube-proxy's rules for one UDP service 10.96.0.10:53 with three endpoints, as it writes
/// them (docs/kube-proxy-model.md §2, §4), with pod CIDR 10.244.0.0/16.
const KUBE_DNS: &str = "\
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FORWARD - [0:0]
-A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-SVC-TCOU7JCQXEZGVUNU - [0:0]
:KUBE-SEP-A - [0:0]
:KUBE-SEP-B - [0:0]
:KUBE-SEP-C - [0:0]
-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully
-A KUBE-SERVICES -d 10.96.0.10/32 -p udp -m comment --comment \"kube-system/kube-dns:dns cluster IP\" -m udp --dport 53 -j KUBE-SVC-TCOU7JCQXEZGVUNU
-A KUBE-SVC-TCOU7JCQXEZGVUNU ! -s 10.244.0.0/16 -d 10.96.0.10/32 -p udp -m comment --comment \"kube-system/kube-dns:dns cluster IP\" -m udp --dport 53 -j KUBE-MARK-MASQ
-A KUBE-SVC-TCOU7JCQXEZGVUNU -m comment --comment \"kube-system/kube-dns:dns -> 10.244.1.7:53\" -m statistic --mode random --probability 0.3333333333 -j KUBE-SEP-A
-A KUBE-SVC-TCOU7JCQXEZGVUNU -m comment --comment \"kube-system/kube-dns:dns -> 10.244.1.8:53\" -m statistic --mode random --probability 0.5 -j KUBE-SEP-B
-A KUBE-SVC-TCOU7JCQXEZGVUNU -m comment --comment \"kube-system/kube-dns:dns -> 10.244.2.9:53\" -j KUBE-SEP-C
-A KUBE-SEP-A -s 10.244.1.7/32 -m comment --comment \"kube-system/kube-dns:dns\" -j KUBE-MARK-MASQ
-A KUBE-SEP-A -p udp -m comment --comment \"kube-system/kube-dns:dns\" -m udp -j DNAT --to-destination 10.244.1.7:53
-A KUBE-SEP-B -s 10.244.1.8/32 -m comment --comment \"kube-system/kube-dns:dns\" -j KUBE-MARK-MASQ
-A KUBE-SEP-B -p udp -m comment --comment \"kube-system/kube-dns:dns\" -m udp -j DNAT --to-destination 10.244.1.8:53
-A KUBE-SEP-C -s 10.244.2.9/32 -m comment --comment \"kube-system/kube-dns:dns\" -j KUBE-MARK-MASQ
-A KUBE-SEP-C -p udp -m comment --comment \"kube-system/kube-dns:dns\" -m udp -j DNAT --to-destination 10.244.2.9:53
COMMIT
";

/// Node worker-1: eth0 172.18.0.2/16, local pods 10.244.1.7 (veth7), 10.244.1.8 (veth8) and
/// the client 10.244.1.20 (veth20); node worker-2's pod CIDR 10.244.2.0/24 via 172.18.0.3.
fn node(seed: u64) -> Netns {
    let mut n = Netns::new(NetnsConfig::new("worker-1", seed));
    n.add_interface(ifn("eth0"), &[(ip("172.18.0.2"), 16)])
        .unwrap();
    for (dev, pod) in [
        ("veth7", "10.244.1.7"),
        ("veth8", "10.244.1.8"),
        ("veth20", "10.244.1.20"),
    ] {
        n.add_interface(ifn(dev), &[(ip("10.244.1.1"), 32)])
            .unwrap();
        n.add_route(Prefix::host(ip(pod)), None, ifn(dev)).unwrap();
    }
    n.add_route(
        "10.244.2.0/24".parse().unwrap(),
        Some(ip("172.18.0.3")),
        ifn("eth0"),
    )
    .unwrap();
    n.add_route(
        Prefix::default_for(true),
        Some(ip("172.18.0.1")),
        ifn("eth0"),
    )
    .unwrap();
    n.restore(KUBE_DNS, false).unwrap();
    n
}

fn endpoint_of(r: &ProcessResult) -> IpAddr {
    match r.out.first() {
        Some(Egress::Transmit { packet, .. }) => packet.dst,
        other => panic!("not transmitted: {other:?} ({:?})", r.fate),
    }
}

fn dnat_rule_hits(n: &Netns) -> u64 {
    let save = n.save(true);
    save.lines()
        .filter(|l| l.contains("-j DNAT"))
        .map(|l| {
            let c = l.trim_start_matches('[');
            c[..c.find(':').unwrap()].parse::<u64>().unwrap()
        })
        .sum()
}

#[test]
fn clusterip_packets_are_dnatted_and_pinned_and_replies_unnatted() {
    let mut n = node(1);
    let t0 = SimTime::ZERO;
    let q = Packet::udp(sa("10.244.1.20:40000"), sa("10.96.0.10:53"));
    let r = n.process(t0, q, Ingress::Interface(ifn("veth20")));
    assert_eq!(r.fate, Fate::Transmitted);
    let ep = endpoint_of(&r);
    assert!(
        [ip("10.244.1.7"), ip("10.244.1.8"), ip("10.244.2.9")].contains(&ep),
        "{ep}"
    );
    assert_eq!(dnat_rule_hits(&n), 1);

    // Every later packet of the flow goes to the same endpoint, without the nat table.
    for i in 1..20u64 {
        let r = n.process(
            t0 + SimDuration::from_millis(i * 100),
            q,
            Ingress::Interface(ifn("veth20")),
        );
        assert_eq!(endpoint_of(&r), ep);
    }
    assert_eq!(
        dnat_rule_hits(&n),
        1,
        "the nat table saw only the first packet"
    );

    // The reply comes back with the ClusterIP as its source.
    let (dev, reply_from) = if ep == ip("10.244.2.9") {
        ("eth0", ep)
    } else if ep == ip("10.244.1.7") {
        ("veth7", ep)
    } else {
        ("veth8", ep)
    };
    let reply = Packet::udp(SocketAddr::new(reply_from, 53), sa("10.244.1.20:40000"));
    let r = n.process(
        t0 + SimDuration::from_secs(3),
        reply,
        Ingress::Interface(ifn(dev)),
    );
    match r.out.first() {
        Some(Egress::Transmit { dev, packet, .. }) => {
            assert_eq!(dev.as_str(), "veth20");
            assert_eq!(packet.src, ip("10.96.0.10"));
            assert_eq!(packet.sport(), Some(53));
        }
        o => panic!("{o:?}"),
    }
    let listing = n
        .conntrack()
        .dump(t0 + SimDuration::from_secs(3), &Filter::all());
    assert!(
        listing.contains("src=10.244.1.20 dst=10.96.0.10 sport=40000 dport=53"),
        "{listing}"
    );
    assert!(!listing.contains("[UNREPLIED]"), "{listing}");
}

#[test]
fn endpoint_choice_follows_the_statistic_cascade() {
    // Over many new flows the three endpoints each get about a third.
    let mut n = node(7);
    let mut counts = std::collections::BTreeMap::new();
    for port in 0..3000u16 {
        let q = Packet::udp(
            SocketAddr::new(ip("10.244.1.20"), 20000 + port),
            sa("10.96.0.10:53"),
        );
        let r = n.process(SimTime::ZERO, q, Ingress::Interface(ifn("veth20")));
        *counts.entry(endpoint_of(&r)).or_insert(0u32) += 1;
    }
    assert_eq!(counts.len(), 3);
    for (ep, c) in counts {
        assert!((850..=1150).contains(&c), "{ep}: {c}");
    }
}

#[test]
fn traffic_from_outside_the_pod_cidr_is_masqueraded_and_unsnatted() {
    let mut n = node(3);
    // From the node itself (OUTPUT): source 172.18.0.2 is outside 10.244.0.0/16 → KUBE-MARK-MASQ.
    let q = Packet::udp(sa("172.18.0.2:33333"), sa("10.96.0.10:53"));
    let r = n.process(SimTime::ZERO, q, Ingress::Local);
    let Some(Egress::Transmit {
        packet: out, dev, ..
    }) = r.out.first().copied()
    else {
        panic!("{:?}", r.fate)
    };
    // The source becomes the outgoing interface's address.
    let expect_src = if dev.as_str() == "eth0" {
        ip("172.18.0.2")
    } else {
        ip("10.244.1.1")
    };
    assert_eq!(out.src, expect_src);
    let e = r.entry.unwrap();
    assert!(
        e.is_src_nat() && e.is_dst_nat(),
        "{}",
        e.list_line(SimTime::ZERO)
    );

    // The reply to the masqueraded address is un-SNAT'd at PREROUTING and un-DNAT'd at INPUT's
    // SNAT hook, then delivered to the local socket with the ClusterIP as source.
    let reply = Packet::udp(
        SocketAddr::new(out.dst, 53),
        SocketAddr::new(out.src, out.sport().unwrap()),
    );
    let r = n.process(SimTime::from_millis(5), reply, Ingress::Interface(dev));
    match r.out.first() {
        Some(Egress::LocalDeliver { packet }) => {
            assert_eq!(packet.dst, ip("172.18.0.2"));
            assert_eq!(packet.dport(), Some(33333));
            assert_eq!(packet.src, ip("10.96.0.10"));
        }
        o => panic!("{o:?} {:?}", r.fate),
    }

    // A pod's own traffic (inside the pod CIDR) is not masqueraded.
    let q = Packet::udp(sa("10.244.1.20:40001"), sa("10.96.0.10:53"));
    let r = n.process(SimTime::ZERO, q, Ingress::Interface(ifn("veth20")));
    let Some(Egress::Transmit { packet, .. }) = r.out.first() else {
        panic!()
    };
    assert_eq!(packet.src, ip("10.244.1.20"));
}

#[test]
fn a_udp_flow_outlives_its_rules_until_the_entry_goes() {
    let mut n = node(5);
    let q = Packet::udp(sa("10.244.1.20:40000"), sa("10.96.0.10:53"));
    let first = endpoint_of(&n.process(SimTime::ZERO, q, Ingress::Interface(ifn("veth20"))));
    // kube-proxy removes every endpoint rule of the service (the service now has none).
    n.restore(
        "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-TCOU7JCQXEZGVUNU - [0:0]\n:KUBE-SEP-A - [0:0]\n:KUBE-SEP-B - [0:0]\n:KUBE-SEP-C - [0:0]\n-X KUBE-SVC-TCOU7JCQXEZGVUNU\n-X KUBE-SEP-A\n-X KUBE-SEP-B\n-X KUBE-SEP-C\nCOMMIT\n",
        true,
    )
    .unwrap();
    assert!(!n.save(false).contains("DNAT"));
    // Queries every 10 s keep going to the old endpoint (30 s timeout, never replied).
    for i in 1..=6u64 {
        let r = n.process(
            SimTime::from_secs(10 * i),
            q,
            Ingress::Interface(ifn("veth20")),
        );
        assert_eq!(endpoint_of(&r), first, "query {i}");
    }
    // Deleting the entry (what a reconciler does) ends it: the next packet is not DNAT'd.
    let f = Filter::parse("--orig-dst 10.96.0.10").unwrap();
    assert_eq!(
        n.conntrack_mut().delete(SimTime::from_secs(61), &f).len(),
        1
    );
    let r = n.process(SimTime::from_secs(62), q, Ingress::Interface(ifn("veth20")));
    assert_eq!(endpoint_of(&r), ip("10.96.0.10"));

    // And without deletion the entry expires 30 s after the last packet.
    let mut n = node(5);
    let first = endpoint_of(&n.process(SimTime::ZERO, q, Ingress::Interface(ifn("veth20"))));
    n.restore("*nat\n:KUBE-SERVICES - [0:0]\nCOMMIT\n", true)
        .unwrap();
    let r = n.process(
        SimTime::from_millis(29_999),
        q,
        Ingress::Interface(ifn("veth20")),
    );
    assert_eq!(endpoint_of(&r), first);
    let r = n.process(
        SimTime::from_millis(59_999 + 1),
        q,
        Ingress::Interface(ifn("veth20")),
    );
    assert_eq!(
        endpoint_of(&r),
        ip("10.96.0.10"),
        "expired at 30 s after the last packet"
    );
}

#[test]
fn unrouted_destinations_drop_and_leave_no_entry() {
    let mut n = node(1);
    n.remove_route(Prefix::default_for(true));
    let q = Packet::udp(sa("10.244.1.20:40000"), sa("192.0.2.1:53"));
    let r = n.process(SimTime::ZERO, q, Ingress::Interface(ifn("veth20")));
    assert_eq!(r.fate, Fate::Dropped(DropCause::NoRoute));
    assert!(r.out.is_empty());
    assert_eq!(n.conntrack().len(), 0);
    assert!(n.drain_conntrack_events().is_empty());
}

#[test]
fn reject_answers_with_an_icmp_error_through_output() {
    let mut n = node(1);
    n.restore(
        "*filter\n:KUBE-SERVICES - [0:0]\n-A FORWARD -m conntrack --ctstate NEW -j KUBE-SERVICES\n-A KUBE-SERVICES -d 10.96.0.99/32 -p udp -m comment --comment \"ns/svc has no endpoints\" -m udp --dport 53 -j REJECT --reject-with icmp-port-unreachable\nCOMMIT\n",
        true,
    )
    .unwrap();
    let q = Packet::udp(sa("10.244.1.20:40000"), sa("10.96.0.99:53"));
    let r = n.process_traced(SimTime::ZERO, q, Ingress::Interface(ifn("veth20")));
    assert!(
        matches!(
            r.fate,
            Fate::Rejected {
                table: Table::Filter,
                ..
            }
        ),
        "{:?}",
        r.fate
    );
    match r.out.as_slice() {
        [Egress::Transmit { dev, packet, .. }] => {
            assert_eq!(dev.as_str(), "veth20");
            assert_eq!(
                packet.to_string(),
                "icmp 10.244.1.1 -> 10.244.1.20 unreachable code=3 (udp 10.244.1.20:40000 -> 10.96.0.99:53)"
            );
        }
        o => panic!("{o:?}"),
    }
    let text = r.trace.unwrap().to_string();
    assert!(text.contains("REJECT"), "{text}");
}

#[test]
fn forwarding_takes_a_hop_off_the_ttl_and_answers_the_last_hop_with_time_exceeded() {
    let mut n = node(1);
    let from = Ingress::Interface(ifn("veth20"));
    // A forwarded packet leaves with one hop less (ip_forward: ip_decrease_ttl).
    let mut q = Packet::udp(sa("10.244.1.20:40000"), sa("10.96.0.10:53"));
    q.ttl = 7;
    let r = n.process(SimTime::ZERO, q, from);
    match r.out.as_slice() {
        [Egress::Transmit { packet, .. }] => assert_eq!(packet.ttl, 6),
        o => panic!("{o:?} {:?}", r.fate),
    }
    // A packet for the node itself keeps its TTL.
    let mut local = Packet::udp(sa("10.244.1.20:40001"), sa("172.18.0.2:9000"));
    local.ttl = 1;
    let r = n.process(SimTime::ZERO, local, from);
    match r.out.as_slice() {
        [Egress::LocalDeliver { packet }] => assert_eq!(packet.ttl, 1),
        o => panic!("{o:?} {:?}", r.fate),
    }
    // With one hop left it dies before FORWARD (whose rules do not count it), its new entry
    // is discarded, and the sender hears ICMP time exceeded from the node.
    let forward_before = counters(&n);
    let mut last = Packet::udp(sa("10.244.1.20:40002"), sa("10.96.0.10:53"));
    last.ttl = 1;
    let entries = n.conntrack().len();
    let r = n.process_traced(SimTime::ZERO, last, from);
    assert_eq!(r.fate, Fate::Dropped(DropCause::TtlExceeded));
    match r.out.as_slice() {
        [Egress::Transmit { dev, packet, .. }] => {
            assert_eq!(dev.as_str(), "veth20");
            assert!(
                packet
                    .to_string()
                    .starts_with("icmp 10.244.1.1 -> 10.244.1.20 time-exceeded"),
                "{packet}"
            );
        }
        o => panic!("{o:?}"),
    }
    assert_eq!(n.conntrack().len(), entries);
    let filter = |c: &[String]| -> Vec<String> {
        c.iter()
            .filter(|l| l.contains("FORWARD"))
            .cloned()
            .collect()
    };
    assert_eq!(filter(&counters(&n)), filter(&forward_before));
    let text = r.trace.unwrap().to_string();
    assert!(text.contains("TTL 1 exceeded in transit"), "{text}");
    // No error about an error.
    let mut err = Packet::icmp_error(ip("10.244.1.20"), &q, 3, 3);
    err.ttl = 1;
    let r = n.process(SimTime::ZERO, err, from);
    assert_eq!(r.fate, Fate::Dropped(DropCause::TtlExceeded));
    assert!(r.out.is_empty(), "{:?}", r.out);
}

#[test]
fn reject_answers_are_rate_limited_per_destination() {
    let mut n = node(1);
    n.restore(
        "*filter\n:KUBE-SERVICES - [0:0]\n-A FORWARD -m conntrack --ctstate NEW -j KUBE-SERVICES\n-A KUBE-SERVICES -d 10.96.0.99/32 -p udp -m comment --comment \"ns/svc has no endpoints\" -m udp --dport 53 -j REJECT --reject-with icmp-port-unreachable\nCOMMIT\n",
        true,
    )
    .unwrap();
    let answered = |n: &mut Netns, ms: u64, client: &str, port: u16| {
        let q = Packet::udp(SocketAddr::new(ip(client), port), sa("10.96.0.99:53"));
        let dev = if client == "10.244.1.20" {
            "veth20"
        } else {
            "eth0"
        };
        let r = n.process(SimTime::from_millis(ms), q, Ingress::Interface(ifn(dev)));
        assert!(matches!(r.fate, Fate::Rejected { .. }), "{:?}", r.fate);
        !r.out.is_empty()
    };
    // A burst of 6, then one a second (icmp_ratelimit 1000 ms, XRLIM_BURST_FACTOR 6).
    let burst: Vec<bool> = (0..8)
        .map(|i| answered(&mut n, i, "10.244.1.20", 40000 + i as u16))
        .collect();
    assert_eq!(burst, [true, true, true, true, true, true, false, false]);
    // Another client has its own allowance.
    assert!(answered(&mut n, 10, "172.18.5.5", 40000));
    assert!(!answered(&mut n, 500, "10.244.1.20", 41000));
    assert!(answered(&mut n, 1_010, "10.244.1.20", 41001));
    // The trace says why nothing came back.
    let q = Packet::udp(sa("10.244.1.20:41002"), sa("10.96.0.99:53"));
    let r = n.process_traced(
        SimTime::from_millis(1_020),
        q,
        Ingress::Interface(ifn("veth20")),
    );
    assert!(r.out.is_empty());
    let text = r.trace.unwrap().to_string();
    assert!(text.contains("not sent: rate limited"), "{text}");
    // icmp_ratelimit 0: no limit.
    n.set_sysctl("net.ipv4.icmp_ratelimit", "0").unwrap();
    assert!((0..20).all(|i| answered(&mut n, 2_000, "10.244.1.20", 42000 + i)));
    // Bad values are refused, naming the sysctl.
    let e = n.set_sysctl("net.ipv4.icmp_ratemask", "lots").unwrap_err();
    assert!(e.to_string().contains("net.ipv4.icmp_ratemask"), "{e}");
    let e = n.set_sysctl("icmp_ratelimit", "-1").unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
    // ICMPv6's: its own names, the mask as the kernel's list of types.
    n.set_sysctl("net.ipv6.icmp.ratelimit", "250").unwrap();
    n.set_sysctl("net.ipv6.icmp.ratemask", "0-1,3-127").unwrap();
    let e = n.set_sysctl("net.ipv6.icmp.ratemask", "3-1").unwrap_err();
    assert!(e.to_string().contains("net.ipv6.icmp.ratemask"), "{e}");
    let e = n.set_sysctl("net.ipv6.icmp.ratelimit", "x").unwrap_err();
    assert!(e.to_string().contains("not a number"), "{e}");
    // A `sysctl -a` file's lines for them are taken as modelled.
    assert_eq!(
        crate::sysctl_file::unmodelled("net.ipv6.icmp.ratemask", "0-1,3-127"),
        Ok(None)
    );
    assert!(crate::sysctl_file::is_kernel_sysctl(
        "net.ipv6.icmp.ratelimit"
    ));
}

#[test]
fn errors_a_driver_sends_for_the_node_share_its_limit_and_local_ones_are_free() {
    let mut n = node(1);
    let q = Packet::udp(sa("10.244.1.20:40000"), sa("172.18.0.2:9"));
    let err = Packet::icmp_error(ip("172.18.0.2"), &q, 3, 3);
    let sent: Vec<bool> = (0..8)
        .map(|i| n.icmp_error_allowed(SimTime::from_millis(i), &err))
        .collect();
    assert_eq!(sent, [true, true, true, true, true, true, false, false]);
    // To one of the node's own addresses (via lo): never limited.
    let own = Packet::udp(sa("172.18.0.2:40000"), sa("172.18.0.2:9"));
    let to_self = Packet::icmp_error(ip("172.18.0.2"), &own, 3, 3);
    assert!((0..20).all(|i| n.icmp_error_allowed(SimTime::from_millis(i), &to_self)));
    // Not an ICMP error: always.
    assert!(n.icmp_error_allowed(SimTime::ZERO, &q));
}

#[test]
fn tcp_through_dnat_reaches_established_and_assured() {
    let mut n = node(2);
    n.restore(
        "*nat\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m tcp --dport 443 -j DNAT --to-destination 10.244.1.7:6443\nCOMMIT\n",
        true,
    )
    .unwrap();
    let c = sa("10.244.1.20:50000");
    let syn = Packet::tcp(c, sa("10.96.0.1:443"), TcpFlags::SYN);
    let r = n.process(SimTime::ZERO, syn, Ingress::Interface(ifn("veth20")));
    assert_eq!(endpoint_of(&r), ip("10.244.1.7"));
    let synack = Packet::tcp(sa("10.244.1.7:6443"), c, TcpFlags::SYN | TcpFlags::ACK);
    let r = n.process(
        SimTime::from_millis(1),
        synack,
        Ingress::Interface(ifn("veth7")),
    );
    let Some(Egress::Transmit { packet, .. }) = r.out.first() else {
        panic!()
    };
    assert_eq!(
        packet.to_string(),
        "tcp 10.96.0.1:443 -> 10.244.1.20:50000 SYN,ACK"
    );
    let ack = Packet::tcp(c, sa("10.96.0.1:443"), TcpFlags::ACK);
    n.process(
        SimTime::from_millis(2),
        ack,
        Ingress::Interface(ifn("veth20")),
    );
    let dump = n.conntrack().dump(SimTime::from_millis(3), &Filter::all());
    assert!(dump.starts_with("tcp      6 431999 ESTABLISHED src=10.244.1.20 dst=10.96.0.1 sport=50000 dport=443 src=10.244.1.7 dst=10.244.1.20 sport=6443 dport=50000 [ASSURED] mark=0 use=1"), "{dump}");
}

#[test]
fn same_seed_same_choices() {
    let run = |seed| {
        let mut n = node(seed);
        (0..200u16)
            .map(|p| {
                let q = Packet::udp(
                    SocketAddr::new(ip("10.244.1.20"), 30000 + p),
                    sa("10.96.0.10:53"),
                );
                endpoint_of(&n.process(SimTime::ZERO, q, Ingress::Interface(ifn("veth20"))))
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(run(11), run(11));
    assert_ne!(run(11), run(12));
}

/// Packet and byte counters of every rule and policy, from `iptables-save -c`.
fn counters(n: &Netns) -> Vec<String> {
    n.save(true)
        .lines()
        .filter(|l| l.starts_with('[') || l.starts_with(':'))
        .map(str::to_string)
        .collect()
}

#[test]
fn ctexpire_sees_the_seconds_left_and_zero_before_confirm() {
    // Measured on a 6.x kernel in a private namespace with these rules: a UDP datagram to
    // 127.0.0.1:9999 counts in `--ctexpire 0:0` (its entry is not confirmed yet: the kernel's
    // relative timeout minus the jiffies stamp is negative, nf_ct_expires says 0), the next
    // one 0.2 s later in `1:40` (29 s left).
    let mut n = Netns::new(NetnsConfig::new("lab", 1));
    n.restore(
        "*filter\n:OUTPUT ACCEPT [0:0]\n\
         -A OUTPUT -p udp -m udp --dport 9999 -m conntrack --ctexpire 0:0\n\
         -A OUTPUT -p udp -m udp --dport 9999 -m conntrack --ctexpire 1:40\n\
         -A OUTPUT -p udp -m udp --dport 9999 -m conntrack --ctexpire 41:200\n\
         -A OUTPUT -p udp -m udp --dport 9999 -m conntrack --ctexpire 201:4000000000\n\
         COMMIT\n",
        false,
    )
    .unwrap();
    // Late in a run, so that seconds left and seconds since the start differ.
    let t = SimTime::from_secs(1000);
    let q = Packet::udp(sa("127.0.0.1:40000"), sa("127.0.0.1:9999"));
    assert_eq!(n.process(t, q, Ingress::Local).fate, Fate::Delivered);
    let later = t + SimDuration::from_millis(200);
    assert_eq!(n.process(later, q, Ingress::Local).fate, Fate::Delivered);
    let hits: Vec<u64> = (1..=4)
        .map(|i| {
            n.rules_state()
                .rule_counters(n.ruleset(), Table::Filter, "OUTPUT", i)
                .unwrap()
                .packets
        })
        .collect();
    assert_eq!(hits, [1, 1, 0, 0]);
}

#[test]
fn rules_see_the_nat_binding_and_ctmark_made_earlier_in_the_same_packet() {
    let q = Packet::udp(sa("10.244.1.20:40000"), sa("10.96.0.10:53"));
    let hits = |n: &Netns, i| {
        n.rules_state()
            .rule_counters(n.ruleset(), Table::Filter, "FORWARD", i)
            .unwrap()
            .packets
    };
    // mangle PREROUTING looks at the entry before nat PREROUTING binds it; filter FORWARD
    // must see the binding (ctstate DNAT) on the connection's first packet.
    let mut n = node(4);
    n.restore(
        "*mangle\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -m conntrack --ctstate NEW\nCOMMIT\n\
         *filter\n:FORWARD ACCEPT [0:0]\n-I FORWARD 1 -m conntrack --ctstate DNAT\nCOMMIT\n",
        true,
    )
    .unwrap();
    let r = n.process(SimTime::ZERO, q, Ingress::Interface(ifn("veth20")));
    assert_eq!(r.fate, Fate::Transmitted);
    assert_eq!(hits(&n, 1), 1);
    assert!(r.entry.is_some_and(|e| e.is_dst_nat()));

    // mangle FORWARD sets the ctmark; filter FORWARD restores it into the packet mark.
    let mut n = node(4);
    n.restore(
        "*mangle\n:FORWARD ACCEPT [0:0]\n-A FORWARD -j CONNMARK --set-xmark 0x7/0xffffffff\nCOMMIT\n\
         *filter\n:FORWARD ACCEPT [0:0]\n\
         -I FORWARD 1 -j CONNMARK --restore-mark --nfmask 0xffffffff --ctmask 0xffffffff\n\
         -I FORWARD 2 -m mark --mark 0x7\n\
         COMMIT\n",
        true,
    )
    .unwrap();
    let r = n.process(SimTime::ZERO, q, Ingress::Interface(ifn("veth20")));
    assert_eq!(r.fate, Fate::Transmitted);
    assert_eq!(hits(&n, 2), 1);
    assert_eq!(r.entry.map(|e| e.mark), Some(7));
}

/// A bit of everything: new flows and replies through DNAT, masquerade from the node, a
/// REJECT with its generated answer, local delivery over lo, an unrouted drop, expiry.
fn mixed_traffic() -> Vec<(SimTime, Packet, Ingress)> {
    let v20 = Ingress::Interface(ifn("veth20"));
    let mut v = Vec::new();
    for i in 0..40u16 {
        let t = SimTime::from_millis(u64::from(i) * 700);
        let q = Packet::udp(
            SocketAddr::new(ip("10.244.1.20"), 40_000 + i % 7),
            sa("10.96.0.10:53"),
        );
        v.push((t, q, v20));
        v.push((
            t,
            Packet::udp(sa("172.18.0.2:33333"), sa("10.96.0.10:53")),
            Ingress::Local,
        ));
        // Replies from the endpoint the first flow went to (whichever it is, some match).
        v.push((
            t + SimDuration::from_millis(1),
            Packet::udp(
                sa("10.244.1.7:53"),
                SocketAddr::new(ip("10.244.1.20"), 40_000 + i % 7),
            ),
            Ingress::Interface(ifn("veth7")),
        ));
        v.push((
            t,
            Packet::udp(sa("10.244.1.20:41000"), sa("10.96.0.99:53")),
            v20,
        ));
        v.push((
            t,
            Packet::tcp(sa("127.0.0.1:50000"), sa("127.0.0.1:22"), TcpFlags::SYN),
            Ingress::Local,
        ));
        v.push((t, Packet::udp(sa("[fd00::20]:1"), sa("[fd00::1]:53")), v20));
    }
    v.push((
        SimTime::from_secs(300),
        Packet::udp(sa("10.244.1.20:40000"), sa("10.96.0.10:53")),
        v20,
    ));
    v
}

#[test]
fn process_into_and_process_traced_do_what_process_does() {
    let setup = || {
        let mut n = node(9);
        n.restore(
            "*filter\n:KUBE-SERVICES - [0:0]\n\
             -A FORWARD -m conntrack --ctstate NEW -j KUBE-SERVICES\n\
             -A KUBE-SERVICES -d 10.96.0.99/32 -p udp -m udp --dport 53 -j REJECT\n\
             COMMIT\n",
            true,
        )
        .unwrap();
        n
    };
    let (mut a, mut b, mut c) = (setup(), setup(), setup());
    let mut buf = Vec::new();
    let mut fates = std::collections::BTreeSet::new();
    for (t, p, from) in mixed_traffic() {
        let ra = a.process(t, p, from);
        fates.insert(format!("{:?}", ra.fate));
        buf.clear();
        let rb = b.process_into(t, p, from, &mut buf);
        let rc = c.process_traced(t, p, from);
        assert_eq!(ra.out, buf, "{p}");
        assert_eq!(ra.fate, rb.fate, "{p}");
        assert_eq!(ra.entry.map(|e| e.id), rb.entry, "{p}");
        assert_eq!(
            (&ra.out, &ra.fate, &ra.entry),
            (&rc.out, &rc.fate, &rc.entry)
        );
        // The entry snapshot is the entry as it is after the packet.
        if let Some(e) = ra.entry {
            assert_eq!(a.conntrack().get(e.id), Some(e), "{p}");
        }
    }
    // Every way a packet can end here was taken.
    assert_eq!(
        fates.into_iter().collect::<Vec<_>>(),
        [
            "Delivered",
            "Dropped(NoRoute)",
            "Rejected { table: Filter, hook: Forward }",
            "Transmitted"
        ]
    );
    let end = SimTime::from_secs(301);
    for n in [&b, &c] {
        assert_eq!(counters(&a), counters(n));
        assert_eq!(
            a.conntrack().dump(end, &Filter::all()),
            n.conntrack().dump(end, &Filter::all())
        );
    }
    let ev = a.drain_conntrack_events();
    assert!(ev.len() > 20, "{}", ev.len());
    assert_eq!(ev, b.drain_conntrack_events());
    assert_eq!(ev, c.drain_conntrack_events());
}

#[test]
fn process_into_appends_to_what_the_buffer_holds() {
    let mut n = node(1);
    let mut buf = Vec::new();
    let q = Packet::udp(sa("10.244.1.20:40000"), sa("10.96.0.10:53"));
    let r1 = n.process_into(
        SimTime::ZERO,
        q,
        Ingress::Interface(ifn("veth20")),
        &mut buf,
    );
    let r2 = n.process_into(
        SimTime::ZERO,
        q,
        Ingress::Interface(ifn("veth20")),
        &mut buf,
    );
    assert_eq!((r1.fate, r2.fate), (Fate::Transmitted, Fate::Transmitted));
    assert_eq!(r1.entry, r2.entry);
    assert_eq!(buf.len(), 2);
    assert_eq!(buf[0], buf[1]);
}

/// Linux drops a packet received on eth0 whose source is one of the node's own addresses
/// (`fib_validate_source`, after PREROUTING's nat): it is not forwarded, and its entry is never
/// confirmed. The same
/// for a 127.0.0.0/8 source; an address the node does not hold passes.
#[test]
fn a_packet_from_one_of_the_nodes_own_addresses_is_a_martian_source() {
    for src in ["172.18.0.2:40000", "10.244.1.1:40000", "127.0.0.1:40000"] {
        let mut n = node(1);
        let q = Packet::udp(sa(src), sa("10.96.0.10:53"));
        let r = n.process(SimTime::ZERO, q, Ingress::Interface(ifn("eth0")));
        assert_eq!(r.fate, Fate::Dropped(DropCause::MartianSource), "{src}");
        assert!(r.out.is_empty());
        assert_eq!(n.conntrack().len(), 0, "{src}");
        // To the node itself: the same.
        let q = Packet::udp(sa(src), sa("172.18.0.2:53"));
        let r = n.process(SimTime::ZERO, q, Ingress::Interface(ifn("eth0")));
        assert_eq!(r.fate, Fate::Dropped(DropCause::MartianSource), "{src}");
    }
    let mut n = node(1);
    let q = Packet::udp(sa("172.18.0.9:40000"), sa("10.96.0.10:53"));
    let r = n.process(SimTime::ZERO, q, Ingress::Interface(ifn("eth0")));
    assert_eq!(r.fate, Fate::Transmitted);
    // The node's own traffic to its own address loops back through lo and is not checked.
    let q = Packet::udp(sa("172.18.0.2:40000"), sa("10.96.0.10:53"));
    let r = n.process(SimTime::ZERO, q, Ingress::Local);
    assert_eq!(r.fate, Fate::Transmitted);
}

#[test]
fn icmpv6_neighbour_discovery_is_untracked_and_a_lone_echo_reply_invalid() {
    use sim_core::packet::icmp;
    let mut n = Netns::new(NetnsConfig::new("v6", 1));
    n.add_interface(ifn("eth0"), &[(ip("fd00::1"), 64)])
        .unwrap();
    let msg = |t: u8| {
        let mut p = Packet::icmp_echo_request(ip("fd00::2"), ip("fd00::1"), 5, 1);
        p.l4 = sim_core::L4::Icmp {
            icmp_type: t,
            code: 0,
            body: if t == icmp::V6_ECHO_REPLY {
                sim_core::IcmpBody::Query { id: 5, seq: 1 }
            } else {
                sim_core::IcmpBody::Other
            },
        };
        p
    };
    // Neighbour solicitation and advert, router solicitation, MLDv2 report: UNTRACKED,
    // no entry, no invalid count (nf_conntrack_icmpv6_error's noct_valid_new).
    for t in [135, 136, 133, 143] {
        let r = n.process_traced(SimTime::ZERO, msg(t), Ingress::Interface(ifn("eth0")));
        let text = r.trace.unwrap().to_string();
        assert!(text.contains("UNTRACKED"), "type {t}: {text}");
        assert_eq!(r.fate, Fate::Delivered);
    }
    assert_eq!(n.conntrack().stats().invalid, 0);
    // An echo reply without its request is INVALID (icmpv6_new refuses to create).
    let r = n.process_traced(
        SimTime::ZERO,
        msg(icmp::V6_ECHO_REPLY),
        Ingress::Interface(ifn("eth0")),
    );
    let text = r.trace.unwrap().to_string();
    assert!(text.contains("INVALID"), "{text}");
    assert_eq!(n.conntrack().count(), 0);
}
