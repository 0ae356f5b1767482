//! The nftables model: `nft -f` transactions (all or nothing), errors that name the line,
//! column and word, and evaluation of kube-proxy-shaped base chains.

use sim_core::{Packet, SimRng, SimTime};
use sim_netfilter::nft::{ChainType, Family, NftRuleset};
use sim_netfilter::{Action, CtInfoKind, CtState, EvalCtx, Hook, LocalAddrs, NatRequest};

const BASE: &str = "\
add table ip kube-proxy { comment \"rules for kube-proxy\" ; }
add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }
add map ip kube-proxy no-endpoint-services { type ipv4_addr . inet_proto . inet_service : verdict ; }
add chain ip kube-proxy services
add chain ip kube-proxy mark-for-masquerade
add chain ip kube-proxy masquerading
add chain ip kube-proxy reject-chain
add chain ip kube-proxy service-endpoints-check
add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }
add chain ip kube-proxy nat-postrouting { type nat hook postrouting priority 100 ; }
add chain ip kube-proxy filter-forward { type filter hook forward priority 0 ; }
add rule ip kube-proxy nat-prerouting jump services
add rule ip kube-proxy nat-postrouting jump masquerading
add rule ip kube-proxy filter-forward ct state new jump service-endpoints-check
add rule ip kube-proxy mark-for-masquerade mark set mark or 0x4000
add rule ip kube-proxy masquerading mark and 0x4000 == 0 return
add rule ip kube-proxy masquerading mark set mark xor 0x4000
add rule ip kube-proxy masquerading masquerade fully-random
add rule ip kube-proxy reject-chain reject
add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips
add rule ip kube-proxy service-endpoints-check ip daddr . meta l4proto . th dport vmap @no-endpoint-services
add chain ip kube-proxy service-X-ns/dns/udp/dns
add chain ip kube-proxy endpoint-A-ns/dns/udp/dns__10.244.1.7/53
add chain ip kube-proxy endpoint-B-ns/dns/udp/dns__10.244.2.5/53
add rule ip kube-proxy service-X-ns/dns/udp/dns ip daddr 10.96.0.10 ip saddr != 10.244.0.0/16 jump mark-for-masquerade
add rule ip kube-proxy service-X-ns/dns/udp/dns numgen random mod 2 vmap { 0 : goto endpoint-A-ns/dns/udp/dns__10.244.1.7/53 , 1 : goto endpoint-B-ns/dns/udp/dns__10.244.2.5/53 }
add rule ip kube-proxy endpoint-A-ns/dns/udp/dns__10.244.1.7/53 ip saddr 10.244.1.7 jump mark-for-masquerade
add rule ip kube-proxy endpoint-A-ns/dns/udp/dns__10.244.1.7/53 meta l4proto udp dnat to 10.244.1.7:53
add rule ip kube-proxy endpoint-B-ns/dns/udp/dns__10.244.2.5/53 ip saddr 10.244.2.5 jump mark-for-masquerade
add rule ip kube-proxy endpoint-B-ns/dns/udp/dns__10.244.2.5/53 meta l4proto udp dnat to 10.244.2.5:53
add element ip kube-proxy service-ips { 10.96.0.10 . udp . 53 : goto service-X-ns/dns/udp/dns }
add element ip kube-proxy no-endpoint-services { 10.96.0.99 . tcp . 80 comment \"ns/empty:http\" : goto reject-chain }
";

fn loaded() -> NftRuleset {
    let mut rs = NftRuleset::new();
    rs.apply("base.nft", BASE, SimTime::ZERO).unwrap();
    rs
}

fn run(
    rs: &mut NftRuleset,
    hook: Hook,
    ty: ChainType,
    pkt: Packet,
    rng: &mut SimRng,
) -> (sim_netfilter::Verdict, u32) {
    let addrs = LocalAddrs::new();
    let mut ctx = EvalCtx::new(pkt, &addrs, SimTime::ZERO, rng);
    ctx.ct = CtState::for_packet(&pkt, CtInfoKind::New, 30);
    let chains = rs.base_chains(hook, ty, true);
    assert_eq!(chains.len(), 1);
    let v = rs.run_base_chain(chains[0], &mut ctx, None);
    (v, ctx.packet.mark)
}

#[test]
fn a_cluster_ip_is_dnatted_through_the_verdict_map_to_each_endpoint() {
    let mut rs = loaded();
    let mut rng = SimRng::derive(7, "numgen");
    let mut seen = std::collections::BTreeMap::new();
    for i in 0..200u16 {
        let pkt = Packet::udp(
            format!("10.244.3.9:{}", 10000 + i).parse().unwrap(),
            "10.96.0.10:53".parse().unwrap(),
        );
        let (v, mark) = run(&mut rs, Hook::PreRouting, ChainType::Nat, pkt, &mut rng);
        assert_eq!(v.action, Action::Accept);
        assert_eq!(mark, 0, "pod traffic is not marked for masquerade");
        let Some(NatRequest::Dnat(r)) = v.nat else {
            panic!("no DNAT: {v:?}")
        };
        *seen.entry(r.range_text()).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen.values().all(|&n| n > 60), "{seen:?}");
}

#[test]
fn traffic_from_outside_the_cluster_cidr_is_marked_then_masqueraded() {
    let mut rs = loaded();
    let mut rng = SimRng::derive(7, "numgen");
    let pkt = Packet::udp(
        "172.18.0.9:40000".parse().unwrap(),
        "10.96.0.10:53".parse().unwrap(),
    );
    let (v, mark) = run(&mut rs, Hook::PreRouting, ChainType::Nat, pkt, &mut rng);
    assert!(matches!(v.nat, Some(NatRequest::Dnat(_))));
    assert_eq!(mark, 0x4000);
    let mut marked = pkt;
    marked.mark = mark;
    let (v, mark) = run(&mut rs, Hook::PostRouting, ChainType::Nat, marked, &mut rng);
    assert!(
        matches!(&v.nat, Some(NatRequest::Masquerade(p)) if p.random_fully),
        "{v:?}"
    );
    assert_eq!(mark, 0, "the masquerade chain clears the bit");
    // Unmarked traffic returns before masquerading.
    let (v, _) = run(&mut rs, Hook::PostRouting, ChainType::Nat, pkt, &mut rng);
    assert_eq!(v.nat, None);
}

#[test]
fn a_service_without_endpoints_is_rejected_and_other_traffic_passes() {
    let mut rs = loaded();
    let mut rng = SimRng::derive(7, "numgen");
    let pkt = Packet::tcp(
        "10.244.3.9:40000".parse().unwrap(),
        "10.96.0.99:80".parse().unwrap(),
        sim_core::TcpFlags::SYN,
    );
    let (v, _) = run(&mut rs, Hook::Forward, ChainType::Filter, pkt, &mut rng);
    assert!(matches!(v.action, Action::Reject(_)), "{v:?}");
    let other = Packet::tcp(
        "10.244.3.9:40000".parse().unwrap(),
        "10.96.0.99:81".parse().unwrap(),
        sim_core::TcpFlags::SYN,
    );
    let (v, _) = run(&mut rs, Hook::Forward, ChainType::Filter, other, &mut rng);
    assert_eq!(v.action, Action::Accept);
}

#[test]
fn a_failing_command_applies_nothing_of_its_file() {
    let mut rs = loaded();
    let before = rs.clone();
    let err = rs
        .apply(
            "sync.nft",
            "add chain ip kube-proxy new-chain\nflush chain ip kube-proxy services\nadd rule ip kube-proxy services jump nowhere\n",
            SimTime::ZERO,
        )
        .unwrap_err();
    assert_eq!(err.line, 3);
    assert!(err.to_string().contains("nowhere"), "{err}");
    assert_eq!(rs, before, "the transaction was aborted whole");
}

#[test]
fn chains_are_deleted_after_a_flush_and_not_while_referenced() {
    let mut rs = loaded();
    let busy = rs
        .apply(
            "d.nft",
            "delete chain ip kube-proxy mark-for-masquerade\n",
            SimTime::ZERO,
        )
        .unwrap_err();
    assert!(busy.msg.contains("busy"), "{busy}");
    rs.apply(
        "d.nft",
        "flush chain ip kube-proxy endpoint-B-ns/dns/udp/dns__10.244.2.5/53\n\
         flush chain ip kube-proxy service-X-ns/dns/udp/dns\n\
         delete chain ip kube-proxy endpoint-B-ns/dns/udp/dns__10.244.2.5/53\n",
        SimTime::ZERO,
    )
    .unwrap();
    let t = rs.table(Family::Ip, "kube-proxy").unwrap();
    assert!(!t
        .chains
        .contains_key("endpoint-B-ns/dns/udp/dns__10.244.2.5/53"));
}

#[test]
fn anything_outside_the_model_is_refused_with_its_place() {
    let cases = [
        (
            "add table ip t\nadd chain ip t c\nadd rule ip t c log prefix \"x\"\n",
            3,
            17,
            "log",
        ),
        (
            "add table ip t\nadd chain ip t c\nadd rule ip t c ip dscp 4 drop\n",
            3,
            20,
            "ip dscp",
        ),
        (
            "add table ip t\nadd chain ip t c { type route hook output priority 0 ; }\n",
            2,
            25,
            "route",
        ),
        ("add table arp t\n", 1, 11, "arp"),
        ("table ip t {\n}\n", 1, 1, "table"),
        (
            "add table ip t\nadd set ip t s { type ether_addr ; }\n",
            2,
            23,
            "ether_addr",
        ),
    ];
    for (text, line, col, word) in cases {
        let mut rs = NftRuleset::new();
        let e = rs.apply("x.nft", text, SimTime::ZERO).unwrap_err();
        assert_eq!((e.line, e.col), (line, col), "{e}");
        assert!(
            e.to_string()
                .starts_with(&format!("x.nft:{line}:{col}: Error: ")),
            "{e}"
        );
        assert!(e.msg.contains(word), "{e}");
        assert!(rs.is_empty());
    }
}

#[test]
fn affinity_sets_remember_the_client_until_the_timeout() {
    let mut rs = NftRuleset::new();
    rs.apply(
        "a.nft",
        "add table ip t\n\
         add set ip t aff { type ipv4_addr ; flags dynamic,timeout ; timeout 10s ; }\n\
         add chain ip t c { type filter hook input priority 0 ; }\n\
         add chain ip t ep\n\
         add rule ip t c ip saddr @aff drop\n\
         add rule ip t c jump ep\n\
         add rule ip t ep update @aff { ip saddr }\n",
        SimTime::ZERO,
    )
    .unwrap();
    let addrs = LocalAddrs::new();
    let mut rng = SimRng::derive(1, "x");
    let pkt = Packet::udp(
        "10.0.0.1:1000".parse().unwrap(),
        "10.0.0.2:53".parse().unwrap(),
    );
    let chain = rs.base_chains(Hook::Input, ChainType::Filter, true)[0];
    let mut at = |rs: &mut NftRuleset, secs: u64| {
        let mut ctx = EvalCtx::new(pkt, &addrs, SimTime::from_secs(secs), &mut rng);
        rs.run_base_chain(chain, &mut ctx, None).action
    };
    assert_eq!(at(&mut rs, 0), Action::Accept, "first packet: recorded");
    assert_eq!(at(&mut rs, 5), Action::Drop, "remembered");
    assert!(rs
        .list_ruleset(SimTime::from_secs(5))
        .contains("elements = { 10.0.0.1 expires 5s }"));
    assert_eq!(at(&mut rs, 30), Action::Accept, "forgotten after 10 s");
}
