//! The `ip6tables` ruleset at the ruleset level: kube-proxy's IPv6 nat table traced for
//! IPv6 packets (the service DNAT'd to its endpoint, session affinity in a per-family
//! `recent` list, the masquerade mark), the ICMPv6, addrtype and REJECT matches and targets,
//! and each family's tables seeing only packets of their family.

use std::net::{IpAddr, SocketAddr};

use sim_core::{Packet, SimRng, SimTime, TcpFlags};
use sim_netfilter::*;

const NAT6: &str = "\
*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]
:KUBE-SEP-SXIVWICOYRO3J4NJ - [0:0]
-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully
-A KUBE-SERVICES -m comment --comment \"ns1/svc1:p80 cluster IP\" -m tcp -p tcp -d fd00:172:30::41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 cluster IP\" -m tcp -p tcp -d fd00:172:30::41 --dport 80 ! -s fd00:10::/64 -j KUBE-MARK-MASQ
-A KUBE-SVC-XPGD46QRK7WJZT7O -m recent --name KUBE-SEP-SXIVWICOYRO3J4NJ --mask ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff --rcheck --seconds 10800 --reap -j KUBE-SEP-SXIVWICOYRO3J4NJ
-A KUBE-SVC-XPGD46QRK7WJZT7O -j KUBE-SEP-SXIVWICOYRO3J4NJ
-A KUBE-SEP-SXIVWICOYRO3J4NJ -s fd00:10:180::1 -j KUBE-MARK-MASQ
-A KUBE-SEP-SXIVWICOYRO3J4NJ -m recent --set --name KUBE-SEP-SXIVWICOYRO3J4NJ --mask ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff --rsource -m tcp -p tcp -j DNAT --to-destination [fd00:10:180::1]:80
COMMIT
";

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn rules6(text: &str) -> Ruleset {
    let mut rs = Ruleset::new_family(Family::Ipv6);
    rs.restore(text, &RestoreOptions::default())
        .unwrap_or_else(|e| panic!("{e}"));
    rs
}

/// Runs `table` at `hook` for `pkt` (a connection's first packet) with a trace.
fn run(
    rs: &Ruleset,
    st: &mut RulesetState,
    table: Table,
    hook: Hook,
    pkt: Packet,
    now: SimTime,
) -> (Verdict, Trace, Packet) {
    let addrs = LocalAddrs::new();
    let mut rng = SimRng::derive(1, "statistic");
    let mut ctx = EvalCtx::new(pkt, &addrs, now, &mut rng);
    ctx.ct = CtState::for_packet(&pkt, CtInfoKind::New, 0);
    let mut trace = Trace::new();
    let v = rs.run_hook(table, hook, &mut ctx, st, Some(&mut trace));
    (v, trace, ctx.packet)
}

#[test]
fn an_ipv6_service_packet_is_dnatted_to_its_endpoint_through_the_ip6tables_nat_table() {
    let rs = rules6(NAT6);
    let mut st = RulesetState::new();
    let syn = Packet::tcp(
        sa("[2001:db8::7]:40000"),
        sa("[fd00:172:30::41]:80"),
        TcpFlags::SYN,
    );
    let (v, trace, out) = run(
        &rs,
        &mut st,
        Table::Nat,
        Hook::PreRouting,
        syn,
        SimTime::ZERO,
    );
    let Some(NatRequest::Dnat(r)) = &v.nat else {
        panic!("no DNAT: {v:?}\n{trace}");
    };
    assert_eq!(r.range_text(), "[fd00:10:180::1]:80");
    assert_eq!(r.addrs, Some((ip("fd00:10:180::1"), ip("fd00:10:180::1"))));
    // From outside the pod CIDR: KUBE-MARK-MASQ marked it for masquerade.
    assert_eq!(out.mark, 0x4000, "{trace}");
    let text = trace.to_string();
    assert!(text.contains("KUBE-SVC-XPGD46QRK7WJZT7O"), "{text}");
    assert!(
        text.contains("-d fd00:172:30::41/128 -p tcp"),
        "the trace names the rules as ip6tables-save prints them:\n{text}"
    );
    // The endpoint's --set put the client in the KUBE-SEP list, as an IPv6 address.
    let list = st.recent_list(&rs, "KUBE-SEP-SXIVWICOYRO3J4NJ").unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].addr, ip("2001:db8::7"));
    // From inside the pod CIDR: no masquerade mark.
    let pod = Packet::tcp(
        sa("[fd00:10::5]:40000"),
        sa("[fd00:172:30::41]:80"),
        TcpFlags::SYN,
    );
    let (v, _, out) = run(
        &rs,
        &mut st,
        Table::Nat,
        Hook::PreRouting,
        pod,
        SimTime::ZERO,
    );
    assert!(matches!(v.nat, Some(NatRequest::Dnat(_))));
    assert_eq!(out.mark, 0);
    // Another service address: no rule matches, the policy accepts without NAT.
    let other = Packet::tcp(
        sa("[2001:db8::7]:40000"),
        sa("[fd00:172:30::42]:80"),
        TcpFlags::SYN,
    );
    let (v, _, _) = run(
        &rs,
        &mut st,
        Table::Nat,
        Hook::PreRouting,
        other,
        SimTime::ZERO,
    );
    assert!(v.nat.is_none());
    // POSTROUTING masquerades what was marked.
    let mut marked = syn;
    marked.mark = 0x4000;
    let (v, _, out) = run(
        &rs,
        &mut st,
        Table::Nat,
        Hook::PostRouting,
        marked,
        SimTime::ZERO,
    );
    assert!(matches!(v.nat, Some(NatRequest::Masquerade(_))), "{v:?}");
    assert_eq!(out.mark, 0);
}

#[test]
fn each_family_s_tables_see_only_their_family_s_packets() {
    let rs6 = rules6(NAT6);
    let mut rs4 = Ruleset::new();
    rs4.restore(
        "*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -p tcp -j DNAT --to-destination 10.0.0.1:80\nCOMMIT\n",
        &RestoreOptions::default(),
    )
    .unwrap();
    let mut st = RulesetState::new();
    let v4 = Packet::tcp(sa("10.1.0.1:4000"), sa("10.96.0.1:80"), TcpFlags::SYN);
    let v6 = Packet::tcp(
        sa("[2001:db8::7]:40000"),
        sa("[fd00:172:30::41]:80"),
        TcpFlags::SYN,
    );
    let (v, t, _) = run(
        &rs6,
        &mut st,
        Table::Nat,
        Hook::PreRouting,
        v4,
        SimTime::ZERO,
    );
    assert!(v.nat.is_none());
    assert!(
        t.to_string().contains("IPv4 packet: not seen by ip6tables"),
        "{t}"
    );
    let (v, t, _) = run(
        &rs4,
        &mut st,
        Table::Nat,
        Hook::PreRouting,
        v6,
        SimTime::ZERO,
    );
    assert!(v.nat.is_none());
    assert!(
        t.to_string().contains("IPv6 packet: not seen by iptables"),
        "{t}"
    );
}

#[test]
fn icmpv6_addrtype_and_reject_work_for_ipv6_packets() {
    let rs = rules6(
        "*filter
:INPUT ACCEPT [0:0]
-A INPUT -p ipv6-icmp -m icmp6 --icmpv6-type echo-request -j ACCEPT
-A INPUT -m addrtype --dst-type LOCAL -p udp -j REJECT
-A INPUT -p udp -j REJECT --reject-with icmp6-adm-prohibited
COMMIT
",
    );
    let mut st = RulesetState::new();
    let ping = Packet::icmp_echo_request(ip("fd00::2"), ip("::1"), 7, 1);
    let (v, t, _) = run(
        &rs,
        &mut st,
        Table::Filter,
        Hook::Input,
        ping,
        SimTime::ZERO,
    );
    assert_eq!(v.action, Action::Accept);
    assert!(t.to_string().contains("--icmpv6-type 128"), "{t}");
    // ::1 is LOCAL (on lo): the default REJECT, ICMPv6 port unreachable (type 1 code 4).
    let to_local = Packet::udp(sa("[fd00::2]:5000"), sa("[::1]:53"));
    let (v, _, _) = run(
        &rs,
        &mut st,
        Table::Filter,
        Hook::Input,
        to_local,
        SimTime::ZERO,
    );
    assert_eq!(v.action, Action::Reject(RejectWith::Icmp6PortUnreachable));
    let answer = RejectWith::Icmp6PortUnreachable
        .response(&to_local, ip("::1"))
        .unwrap();
    assert!(matches!(
        answer.l4,
        sim_core::L4::Icmp {
            icmp_type: 1,
            code: 4,
            ..
        }
    ));
    // Not a local address: the next rule.
    let elsewhere = Packet::udp(sa("[fd00::2]:5000"), sa("[fd00::9]:53"));
    let (v, _, _) = run(
        &rs,
        &mut st,
        Table::Filter,
        Hook::Input,
        elsewhere,
        SimTime::ZERO,
    );
    assert_eq!(v.action, Action::Reject(RejectWith::Icmp6AdmProhibited));
}

#[test]
fn a_namespace_runs_its_ip6tables_rules_for_ipv6_packets_and_its_iptables_rules_for_ipv4() {
    use sim_netfilter::netns::{DropCause, Fate, Ingress, Netns, NetnsConfig};
    let mut ns = Netns::new(NetnsConfig::new("node", 1));
    ns.restore_family(
        Family::Ipv6,
        "*filter\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -d ::1/128 -p udp -m udp --dport 9 -j DROP\nCOMMIT\n",
        false,
        false,
    )
    .unwrap();
    // The iptables rules drop every UDP packet; they never see an IPv6 one.
    ns.restore(
        "*filter\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -p udp -j DROP\nCOMMIT\n",
        false,
    )
    .unwrap();
    let dropped = DropCause::Rule {
        table: Table::Filter,
        hook: Hook::Output,
    };
    let r = ns.process(
        SimTime::ZERO,
        Packet::udp(sa("[::1]:40000"), sa("[::1]:9")),
        Ingress::Local,
    );
    assert_eq!(r.fate, Fate::Dropped(dropped.clone()));
    let r = ns.process(
        SimTime::ZERO,
        Packet::udp(sa("[::1]:40000"), sa("[::1]:10")),
        Ingress::Local,
    );
    assert_eq!(r.fate, Fate::Delivered);
    let r = ns.process(
        SimTime::ZERO,
        Packet::udp(sa("127.0.0.1:40000"), sa("127.0.0.1:10")),
        Ingress::Local,
    );
    assert_eq!(r.fate, Fate::Dropped(dropped));
    // Each family counts its own: one IPv6 packet (40 + 8 + 32 bytes) on the ip6tables rule.
    assert!(
        ns.save_family(Family::Ipv6, true)
            .contains("[1:80] -A OUTPUT -d ::1/128 -p udp -m udp --dport 9 -j DROP\n"),
        "{}",
        ns.save_family(Family::Ipv6, true)
    );
    assert!(ns
        .save_family(Family::Ipv4, true)
        .contains("[1:60] -A OUTPUT -p udp -j DROP\n"));
}
