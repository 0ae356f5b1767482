//! nftables for IPv6: `ip6` and `inet` tables with `ip6 saddr|daddr|nexthdr`, `ipv6_addr`
//! sets and maps (prefixes, ranges, concatenations), `icmpv6 type`, `meta nfproto`, NAT to
//! IPv6 addresses and `reject` per family; and the located refusals of what nft itself
//! refuses across families.

use sim_core::{Packet, SimRng, SimTime};
use sim_netfilter::nft::{ChainType, NftRuleset};
use sim_netfilter::{
    Action, CtInfoKind, CtState, EvalCtx, Hook, LocalAddrs, NatRequest, RejectWith, Verdict,
};
use std::net::IpAddr;

fn apply(text: &str) -> NftRuleset {
    let mut rs = NftRuleset::new();
    rs.apply("t.nft", text, SimTime::ZERO)
        .unwrap_or_else(|e| panic!("{e}"));
    rs
}

/// Walks the one base chain of `ty` at `hook` that sees `pkt`'s family (a new connection).
fn run(rs: &mut NftRuleset, hook: Hook, ty: ChainType, pkt: Packet) -> Verdict {
    let addrs = LocalAddrs::new();
    let mut rng = SimRng::derive(1, "numgen");
    let mut ctx = EvalCtx::new(pkt, &addrs, SimTime::ZERO, &mut rng);
    ctx.ct = CtState::for_packet(&pkt, CtInfoKind::New, 30);
    let chains = rs.base_chains(hook, ty, pkt.is_ipv4());
    assert_eq!(chains.len(), 1);
    rs.run_base_chain(chains[0], &mut ctx, None)
}

fn udp(from: &str, to: &str) -> Packet {
    Packet::udp(from.parse().unwrap(), to.parse().unwrap())
}

fn dnat_to(v: &Verdict) -> Option<(IpAddr, Option<u16>)> {
    match &v.nat {
        Some(NatRequest::Dnat(r)) => Some((r.addrs?.0, r.ports.map(|p| p.0))),
        _ => None,
    }
}

const KP6: &str = "\
add table ip6 kube-proxy
add set ip6 kube-proxy cluster-ips { type ipv6_addr ; }
add set ip6 kube-proxy pods { type ipv6_addr ; flags interval ; }
add map ip6 kube-proxy service-ips { type ipv6_addr . inet_proto . inet_service : verdict ; }
add chain ip6 kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }
add chain ip6 kube-proxy filter-forward { type filter hook forward priority 0 ; }
add chain ip6 kube-proxy services
add chain ip6 kube-proxy svc
add rule ip6 kube-proxy nat-prerouting jump services
add rule ip6 kube-proxy services ip6 daddr . meta l4proto . th dport vmap @service-ips
add rule ip6 kube-proxy svc meta l4proto udp dnat to [fd00:10:180::1]:5353
add rule ip6 kube-proxy filter-forward icmpv6 type { echo-request, nd-neighbor-solicit } accept
add rule ip6 kube-proxy filter-forward ip6 saddr @pods ip6 daddr @cluster-ips reject
add rule ip6 kube-proxy filter-forward ip6 nexthdr udp ip6 daddr fd00:96::/112 drop
add element ip6 kube-proxy cluster-ips { fd00:96::10 }
add element ip6 kube-proxy pods { fd00:10::/64, 2001:db8::5-2001:db8::9 }
add element ip6 kube-proxy service-ips { fd00:96::10 . udp . 53 : goto svc }
";

#[test]
fn an_ipv6_service_is_dnatted_through_the_concatenated_verdict_map() {
    let mut rs = apply(KP6);
    let v = run(
        &mut rs,
        Hook::PreRouting,
        ChainType::Nat,
        udp("[fd00:10::7]:40000", "[fd00:96::10]:53"),
    );
    assert_eq!(
        dnat_to(&v),
        Some(("fd00:10:180::1".parse().unwrap(), Some(5353)))
    );
    // Another port or protocol of the ClusterIP is not in the map.
    let v = run(
        &mut rs,
        Hook::PreRouting,
        ChainType::Nat,
        udp("[fd00:10::7]:40000", "[fd00:96::10]:54"),
    );
    assert_eq!(dnat_to(&v), None);
}

#[test]
fn prefix_and_range_sets_and_icmpv6_types_match_ipv6_packets() {
    let mut rs = apply(KP6);
    let fwd = |rs: &mut NftRuleset, p: Packet| run(rs, Hook::Forward, ChainType::Filter, p).action;
    // From the pod prefix and from the range to a ClusterIP: rejected (ICMPv6 port
    // unreachable, the `ip6` family's default).
    for from in ["[fd00:10::7]:1", "[2001:db8::9]:1"] {
        assert_eq!(
            fwd(&mut rs, udp(from, "[fd00:96::10]:80")),
            Action::Reject(RejectWith::Icmp6PortUnreachable),
            "{from}"
        );
    }
    // Just outside the range: on to the prefix drop.
    assert_eq!(
        fwd(&mut rs, udp("[2001:db8::a]:1", "[fd00:96::10]:80")),
        Action::Drop
    );
    assert_eq!(
        fwd(&mut rs, udp("[2001:db8::a]:1", "[fd00:97::10]:80")),
        Action::Accept
    );
    let mut echo = Packet::icmp_echo_request(
        "fd00:10::7".parse().unwrap(),
        "fd00:96::10".parse().unwrap(),
        1,
        1,
    );
    assert_eq!(fwd(&mut rs, echo), Action::Accept);
    // An echo reply is neither listed type: rejected by the pods rule.
    if let sim_core::L4::Icmp { icmp_type, .. } = &mut echo.l4 {
        *icmp_type = 129;
    }
    assert_eq!(
        fwd(&mut rs, echo),
        Action::Reject(RejectWith::Icmp6PortUnreachable)
    );
}

const INET: &str = "\
add table inet t
add chain inet t pre { type nat hook prerouting priority -100 ; }
add chain inet t fwd { type filter hook forward priority 0 ; }
add rule inet t pre meta l4proto udp dnat ip to 10.0.0.9:53
add rule inet t pre meta l4proto udp dnat ip6 to [fd00::9]:53
add rule inet t fwd meta nfproto ipv4 ip daddr 10.1.0.0/16 accept
add rule inet t fwd ip6 daddr fd01::/64 accept
add rule inet t fwd reject
add chain inet t post { type nat hook postrouting priority 100 ; }
add rule inet t post ip6 saddr fd02::/64 snat ip6 to fd00::99
add rule inet t post masquerade
";

#[test]
fn an_inet_table_sees_both_families_and_each_statement_keeps_to_its_own() {
    let mut rs = apply(INET);
    // nft_nat_inet_eval: `dnat ip to` leaves IPv6 packets alone, `dnat ip6 to` IPv4 ones.
    let v = run(
        &mut rs,
        Hook::PreRouting,
        ChainType::Nat,
        udp("10.2.0.1:1000", "10.3.0.1:53"),
    );
    assert_eq!(dnat_to(&v), Some(("10.0.0.9".parse().unwrap(), Some(53))));
    let v = run(
        &mut rs,
        Hook::PreRouting,
        ChainType::Nat,
        udp("[fd02::1]:1000", "[fd03::1]:53"),
    );
    assert_eq!(dnat_to(&v), Some(("fd00::9".parse().unwrap(), Some(53))));
    // snat ip6 for the IPv6 prefix; masquerade for the rest, of either family.
    let post = |rs: &mut NftRuleset, p: Packet| run(rs, Hook::PostRouting, ChainType::Nat, p).nat;
    match post(&mut rs, udp("[fd02::1]:1000", "[fd03::1]:53")) {
        Some(NatRequest::Snat(r)) => {
            assert_eq!(r.addrs.map(|a| a.0), Some("fd00::99".parse().unwrap()))
        }
        other => panic!("{other:?}"),
    }
    for p in [
        udp("[fd04::1]:1000", "[fd03::1]:53"),
        udp("10.2.0.1:1000", "10.3.0.1:53"),
    ] {
        assert!(
            matches!(post(&mut rs, p), Some(NatRequest::Masquerade(_))),
            "{p}"
        );
    }
    let fwd = |rs: &mut NftRuleset, p: Packet| run(rs, Hook::Forward, ChainType::Filter, p).action;
    assert_eq!(
        fwd(&mut rs, udp("10.2.0.1:1", "10.1.2.3:1")),
        Action::Accept
    );
    assert_eq!(
        fwd(&mut rs, udp("[fd02::1]:1", "[fd01::3]:1")),
        Action::Accept
    );
    // `reject` in inet (nft_reject_inet, ICMPX port-unreachable): each family's own error.
    assert_eq!(
        fwd(&mut rs, udp("10.2.0.1:1", "10.9.9.9:1")),
        Action::Reject(RejectWith::IcmpPortUnreachable)
    );
    assert_eq!(
        fwd(&mut rs, udp("[fd02::1]:1", "[fd09::9]:1")),
        Action::Reject(RejectWith::Icmp6PortUnreachable)
    );
    // IPv4-mapped addresses are IPv6 packets: `ip daddr` does not see them.
    assert_eq!(
        fwd(&mut rs, udp("[fd02::1]:1", "[::ffff:10.1.2.3]:1")),
        Action::Reject(RejectWith::Icmp6PortUnreachable)
    );
}

#[test]
fn fib_daddr_type_local_knows_the_hosts_ipv6_addresses() {
    let mut rs = apply(
        "add table ip6 t\nadd chain ip6 t c { type filter hook input priority 0 ; }\nadd rule ip6 t c fib daddr type local ip6 daddr != ::1 drop\nadd rule ip6 t c fib daddr type local accept\nadd rule ip6 t c drop\n",
    );
    let input = |rs: &mut NftRuleset, to: &str| {
        run(rs, Hook::Input, ChainType::Filter, udp("[fd00::2]:1", to)).action
    };
    // `LocalAddrs` (the test's host) holds `::1` only.
    assert_eq!(input(&mut rs, "[::1]:80"), Action::Accept);
    assert_eq!(input(&mut rs, "[fd00::1]:80"), Action::Drop);
}

#[test]
fn oifname_matches_the_output_interface() {
    let mut rs = apply(
        "add table ip6 t\nadd chain ip6 t post { type filter hook postrouting priority 0 ; }\nadd rule ip6 t post oifname \"eth*\" drop\n",
    );
    let mut p = udp("[fd00::1]:1", "[fd00::2]:2");
    p.oif = Some(sim_core::IfName::new("eth0").unwrap());
    assert_eq!(
        run(&mut rs, Hook::PostRouting, ChainType::Filter, p).action,
        Action::Drop
    );
    p.oif = Some(sim_core::IfName::new("cni0").unwrap());
    assert_eq!(
        run(&mut rs, Hook::PostRouting, ChainType::Filter, p).action,
        Action::Accept
    );
}

#[test]
fn add_element_reads_values_as_the_sets_type() {
    let mut rs = apply(
        "add table ip t\nadd set ip t ports { type inet_service ; flags interval ; }\n\
         add table ip6 u\nadd set ip6 u s { type ipv6_addr ; }\n",
    );
    // A port range reads as one (by its look it would not); an IPv4 address is no IPv6
    // element, named at its column.
    rs.apply("e.nft", "add element ip t ports { 80-90 }\n", SimTime::ZERO)
        .unwrap();
    let e = rs
        .apply("e.nft", "add element ip6 u s { 10.0.0.1 }\n", SimTime::ZERO)
        .unwrap_err();
    assert_eq!((e.line, e.col), (1, 23), "{e}");
    assert!(e.msg.contains("'10.0.0.1' for ipv6_addr"), "{e}");
}

#[test]
fn what_nft_refuses_across_families_is_refused_at_its_place() {
    let cases = [
        // nft: "conflicting protocols specified: ip6 vs. ip".
        ("add table ip6 t\nadd chain ip6 t c\nadd rule ip6 t c ip saddr 10.0.0.1 drop\n", 3, 18, "conflicting protocols"),
        ("add table ip t\nadd chain ip t c\nadd rule ip t c ip6 saddr ::1 drop\n", 3, 17, "conflicting protocols"),
        ("add table ip6 t\nadd chain ip6 t c\nadd rule ip6 t c meta nfproto ipv6 accept\n", 3, 18, "only useful in the inet family"),
        // A NAT address of the other family.
        ("add table ip6 t\nadd chain ip6 t c { type nat hook prerouting priority -100 ; }\nadd rule ip6 t c dnat to 10.0.0.1\n", 3, 26, "not an IPv6 address"),
        ("add table ip t\nadd chain ip t c { type nat hook prerouting priority -100 ; }\nadd rule ip t c dnat to [fd00::1]:80\n", 3, 25, "not an IPv4 address"),
        // inet: the family of a NAT address must be said.
        ("add table inet t\nadd chain inet t c { type nat hook prerouting priority -100 ; }\nadd rule inet t c dnat to 10.0.0.1\n", 3, 19, "ip or ip6 must be specified"),
        ("add table ip6 t\nadd chain ip6 t c\nadd rule ip6 t c reject with icmp host-unreachable\n", 3, 30, "conflicting protocols"),
        // Still outside the model.
        ("add table ip6 t\nadd chain ip6 t c\nadd rule ip6 t c ip6 hoplimit 1 drop\n", 3, 22, "ip6 hoplimit"),
        ("add table inet t\nadd chain inet t c\nadd rule inet t c reject with icmpv6 admin-prohibited\n", 3, 31, "in an inet table"),
        ("add table ip6 t\nadd chain ip6 t c\nadd rule ip6 t c icmpv6 code 4 drop\n", 3, 25, "icmpv6 code"),
        // A NAT port without a transport protocol match before it (nft points at the port).
        ("add table ip6 t\nadd chain ip6 t c { type nat hook prerouting priority -100 ; }\nadd rule ip6 t c th dport 80 dnat to [fd00::1]:80\n", 3, 48, "transport protocol mapping"),
        ("add table ip t\nadd chain ip t c { type nat hook prerouting priority -100 ; }\nadd rule ip t c meta l4proto != tcp dnat to 1.2.3.4:80\n", 3, 53, "transport protocol mapping"),
        ("add table ip6 t\nadd chain ip6 t c\nadd rule ip6 t c fib daddr type broadcast drop\n", 3, 33, "only 'local'"),
    ];
    for (text, line, col, word) in cases {
        let mut rs = NftRuleset::new();
        let e = rs.apply("x.nft", text, SimTime::ZERO).unwrap_err();
        assert_eq!((e.line, e.col), (line, col), "{text}: {e}");
        assert!(e.msg.contains(word), "{e}");
        assert!(rs.is_empty());
    }
}
