//! nftables base chains in the pipeline: kube-proxy's nftables DNAT/masquerade through the
//! NAT core, and the order of nft chains among the iptables tables and conntrack.

use super::*;
use sim_core::SimDuration;
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

const KUBE_DNS_NFT: &str = "\
add table ip kube-proxy { comment \"rules for kube-proxy\" ; }
add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }
add chain ip kube-proxy services
add chain ip kube-proxy mark-for-masquerade
add chain ip kube-proxy masquerading
add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }
add chain ip kube-proxy nat-output { type nat hook output priority -100 ; }
add chain ip kube-proxy nat-postrouting { type nat hook postrouting priority 100 ; }
add rule ip kube-proxy nat-prerouting jump services
add rule ip kube-proxy nat-output jump services
add rule ip kube-proxy nat-postrouting jump masquerading
add rule ip kube-proxy mark-for-masquerade mark set mark or 0x4000
add rule ip kube-proxy masquerading mark and 0x4000 == 0 return
add rule ip kube-proxy masquerading mark set mark xor 0x4000
add rule ip kube-proxy masquerading masquerade fully-random
add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips
add chain ip kube-proxy service-X-kube-system/kube-dns/udp/dns
add chain ip kube-proxy endpoint-A-kube-system/kube-dns/udp/dns__10.244.1.7/53
add chain ip kube-proxy endpoint-B-kube-system/kube-dns/udp/dns__10.244.2.9/53
add rule ip kube-proxy service-X-kube-system/kube-dns/udp/dns ip daddr 10.96.0.10 ip saddr != 10.244.0.0/16 jump mark-for-masquerade
add rule ip kube-proxy service-X-kube-system/kube-dns/udp/dns numgen random mod 2 vmap { 0 : goto endpoint-A-kube-system/kube-dns/udp/dns__10.244.1.7/53 , 1 : goto endpoint-B-kube-system/kube-dns/udp/dns__10.244.2.9/53 }
add rule ip kube-proxy endpoint-A-kube-system/kube-dns/udp/dns__10.244.1.7/53 ip saddr 10.244.1.7 jump mark-for-masquerade
add rule ip kube-proxy endpoint-A-kube-system/kube-dns/udp/dns__10.244.1.7/53 meta l4proto udp dnat to 10.244.1.7:53
add rule ip kube-proxy endpoint-B-kube-system/kube-dns/udp/dns__10.244.2.9/53 ip saddr 10.244.2.9 jump mark-for-masquerade
add rule ip kube-proxy endpoint-B-kube-system/kube-dns/udp/dns__10.244.2.9/53 meta l4proto udp dnat to 10.244.2.9:53
add element ip kube-proxy service-ips { 10.96.0.10 . udp . 53 : goto service-X-kube-system/kube-dns/udp/dns }
";

/// worker-1: eth0 172.18.0.2/16, pods 10.244.1.7 (veth7) and 10.244.1.20 (veth20);
/// 10.244.2.0/24 via 172.18.0.3.
fn node() -> Netns {
    let mut n = Netns::new(NetnsConfig::new("worker-1", 3));
    n.add_interface(ifn("eth0"), &[(ip("172.18.0.2"), 16)])
        .unwrap();
    for (dev, pod) in [("veth7", "10.244.1.7"), ("veth20", "10.244.1.20")] {
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
    n
}

fn sent_to(r: &ProcessResult) -> Packet {
    match r.out.first() {
        Some(Egress::Transmit { packet, .. }) => *packet,
        other => panic!("not transmitted: {other:?} ({:?})", r.fate),
    }
}

#[test]
fn nftables_dnat_pins_the_flow_and_replies_are_unnatted() {
    let mut n = node();
    n.nft_apply("kp.nft", KUBE_DNS_NFT, SimTime::ZERO).unwrap();
    let q = Packet::udp(sa("10.244.1.20:40000"), sa("10.96.0.10:53"));
    let r = n.process(SimTime::ZERO, q, Ingress::Interface(ifn("veth20")));
    let first = sent_to(&r);
    assert!(
        [ip("10.244.1.7"), ip("10.244.2.9")].contains(&first.dst),
        "{first}"
    );
    assert_eq!(
        first.src,
        ip("10.244.1.20"),
        "pod traffic is not masqueraded"
    );
    for i in 1..10u64 {
        let t = SimTime::ZERO + SimDuration::from_millis(i * 10);
        let r = n.process(t, q, Ingress::Interface(ifn("veth20")));
        assert_eq!(sent_to(&r).dst, first.dst, "the entry pins the endpoint");
    }
    let reply = Packet::udp(SocketAddr::new(first.dst, 53), sa("10.244.1.20:40000"));
    let dev = if first.dst == ip("10.244.1.7") {
        Ingress::Interface(ifn("veth7"))
    } else {
        Ingress::Interface(ifn("eth0"))
    };
    let r = n.process(SimTime::from_secs(1), reply, dev);
    assert_eq!(sent_to(&r).src, ip("10.96.0.10"), "reply source un-DNATted");
}

#[test]
fn traffic_from_the_node_is_masqueraded_by_the_nftables_chain() {
    let mut n = node();
    n.add_route(
        Prefix::default_for(true),
        Some(ip("172.18.0.1")),
        ifn("eth0"),
    )
    .unwrap();
    n.nft_apply("kp.nft", KUBE_DNS_NFT, SimTime::ZERO).unwrap();
    let mut srcs = std::collections::BTreeSet::new();
    for port in 40000..40010u16 {
        let q = Packet::udp(SocketAddr::new(ip("172.18.0.2"), port), sa("10.96.0.10:53"));
        let r = n.process(SimTime::ZERO, q, Ingress::Local);
        let p = sent_to(&r);
        srcs.insert((p.dst, p.src));
    }
    // Through 10.244.2.9 (via eth0) the source is eth0's address; through the local pod,
    // veth7's.
    for (dst, src) in &srcs {
        if *dst == ip("10.244.2.9") {
            assert_eq!(*src, ip("172.18.0.2"));
        } else {
            assert_eq!(*src, ip("10.244.1.1"));
        }
    }
    assert_eq!(srcs.len(), 2, "both endpoints drawn: {srcs:?}");
}

#[test]
fn nft_chains_run_between_the_iptables_tables_by_priority() {
    let mut n = node();
    n.restore(
        "*raw\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A PREROUTING -j ACCEPT\nCOMMIT\n\
         *mangle\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n-A PREROUTING -j ACCEPT\nCOMMIT\n",
        false,
    )
    .unwrap();
    n.nft_apply(
        "order.nft",
        "add table ip t\n\
         add chain ip t a { type filter hook prerouting priority 10 ; }\n\
         add chain ip t b { type filter hook prerouting priority -110 ; }\n\
         add chain ip t c { type filter hook prerouting priority raw ; }\n\
         add chain ip t d { type filter hook prerouting priority -310 ; }\n\
         add chain ip t e { type filter hook prerouting priority -250 ; }\n\
         add rule ip t a counter\nadd rule ip t b counter\nadd rule ip t c counter\n\
         add rule ip t d counter\nadd rule ip t e counter\n",
        SimTime::ZERO,
    )
    .unwrap();
    let q = Packet::udp(sa("10.244.1.20:40000"), sa("10.244.2.9:53"));
    let r = n.process_traced(SimTime::ZERO, q, Ingress::Interface(ifn("veth20")));
    let order: Vec<String> = r
        .trace
        .unwrap()
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Rules(TraceEvent::Enter { table, .. }) => Some(format!("iptables {table}")),
            Step::Nft(crate::nft::NftStep::Enter { chain, .. }) => Some(format!("nft {chain}")),
            Step::Conntrack { .. } => Some("conntrack".into()),
            Step::Hook(h) if *h != Hook::PreRouting => Some(format!("{h}")),
            _ => None,
        })
        .collect();
    assert_eq!(
        order[..8],
        [
            "nft d",
            "iptables raw",
            "nft c",
            "nft e",
            "conntrack",
            "iptables mangle",
            "nft b",
            "nft a",
        ],
        "{order:?}"
    );
}

#[test]
fn nat_chains_and_the_iptables_nat_table_are_asked_in_priority_order() {
    for (prio, want) in [("-110", "10.0.0.1"), ("-90", "10.0.0.2")] {
        let mut n = node();
        n.restore(
            "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n\
             -A PREROUTING -d 10.96.0.1/32 -j DNAT --to-destination 10.0.0.2\nCOMMIT\n",
            false,
        )
        .unwrap();
        n.add_route(
            "10.0.0.0/24".parse().unwrap(),
            Some(ip("172.18.0.3")),
            ifn("eth0"),
        )
        .unwrap();
        n.nft_apply(
            "nat.nft",
            &format!(
                "add table ip t\nadd chain ip t n {{ type nat hook prerouting priority {prio} ; }}\n\
                 add rule ip t n ip daddr 10.96.0.1 dnat to 10.0.0.1\n"
            ),
            SimTime::ZERO,
        )
        .unwrap();
        let q = Packet::udp(sa("10.244.1.20:40000"), sa("10.96.0.1:53"));
        let r = n.process(SimTime::ZERO, q, Ingress::Interface(ifn("veth20")));
        assert_eq!(sent_to(&r).dst, ip(want), "nat chain at {prio}");
    }
}

#[test]
fn an_nft_drop_names_the_chain() {
    let mut n = node();
    n.nft_apply(
        "drop.nft",
        "add table ip t\nadd chain ip t fw { type filter hook forward priority 0 ; policy drop ; }\n",
        SimTime::ZERO,
    )
    .unwrap();
    let q = Packet::udp(sa("10.244.1.20:40000"), sa("10.244.2.9:53"));
    let r = n.process(SimTime::ZERO, q, Ingress::Interface(ifn("veth20")));
    assert_eq!(
        r.fate,
        Fate::Dropped(DropCause::NftRule {
            chain: "ip t fw".into(),
            hook: Hook::Forward
        })
    );
}
