//! Evaluation behaves as the kernel does: traversal (jump, goto, RETURN, policy), counters,
//! every match and target, and the kube-proxy paths of a real kind node's rules.

use std::fs;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;

use sim_core::{IfName, Packet, SimRng, SimTime, TcpFlags, L4};
use sim_netfilter::rule::ctstatus;
use sim_netfilter::*;

fn kind_node() -> Ruleset {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/iptables/kind-node.save");
    let mut rs = Ruleset::new();
    rs.nfacct_add("ct_state_invalid_dropped_pkts").unwrap();
    rs.restore(&fs::read_to_string(p).unwrap(), &RestoreOptions::default())
        .unwrap();
    rs
}

fn ruleset(text: &str) -> Ruleset {
    let mut rs = Ruleset::new();
    if let Err(e) = rs.restore(text, &RestoreOptions::default()) {
        panic!("{e}");
    }
    rs
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn udp(src: &str, dst: &str) -> Packet {
    Packet::udp(sa(src), sa(dst))
}

fn new_ct(p: &Packet) -> CtState {
    CtState::for_packet(p, CtInfoKind::New, 30)
}

struct Run {
    verdict: Verdict,
    packet: Packet,
    ct: CtState,
    trace: Trace,
}

#[allow(clippy::too_many_arguments)]
fn run(
    rs: &Ruleset,
    state: &mut RulesetState,
    rng: &mut SimRng,
    table: Table,
    hook: Hook,
    pkt: Packet,
    ct: CtState,
    now: SimTime,
) -> Run {
    let addrs = LocalAddrs::new()
        .add("eth0", Ipv4Addr::new(172, 18, 0, 2), 16)
        .clone();
    // The fast (compiled, indexed) walk must agree with the traced reference walk.
    let mut fast_state = state.clone();
    let mut fast_rng = rng.clone();
    let mut fctx = EvalCtx::new(pkt, &addrs, now, &mut fast_rng);
    fctx.ct = ct;
    let fast = rs.run_hook(table, hook, &mut fctx, &mut fast_state, None);
    let (fast_pkt, fast_ct) = (fctx.packet, fctx.ct);
    let mut ctx = EvalCtx::new(pkt, &addrs, now, rng);
    ctx.ct = ct;
    let mut trace = Trace::new();
    let verdict = rs.run_hook(table, hook, &mut ctx, state, Some(&mut trace));
    let (packet, ct) = (ctx.packet, ctx.ct);
    assert_eq!(fast, verdict, "fast and reference walks disagree on {pkt}");
    assert_eq!((fast_pkt, fast_ct), (packet, ct));
    let with_c = SaveOptions {
        counters: true,
        ..SaveOptions::default()
    };
    assert_eq!(rs.save(&fast_state, &with_c), rs.save(state, &with_c));
    assert_eq!(fast_rng.next_u64(), rng.clone().next_u64());
    Run {
        verdict,
        packet,
        ct,
        trace,
    }
}

fn dnat_target(v: &Verdict) -> Option<String> {
    match &v.nat {
        Some(NatRequest::Dnat(r)) => Some(r.range_text()),
        _ => None,
    }
}

#[test]
fn a_new_dns_flow_is_dnatted_to_a_coredns_endpoint_and_the_trace_says_why() {
    let rs = kind_node();
    let mut state = RulesetState::new();
    let mut rng = SimRng::derive(7, "node/statistic");
    let pkt = udp("10.244.1.3:40000", "10.96.0.10:53");
    let r = run(
        &rs,
        &mut state,
        &mut rng,
        Table::Nat,
        Hook::PreRouting,
        pkt,
        new_ct(&pkt),
        SimTime::ZERO,
    );
    let to = dnat_target(&r.verdict).expect("DNAT");
    assert!(to == "10.244.0.3:53" || to == "10.244.0.4:53", "{to}");
    assert_eq!(r.verdict.action, Action::Accept);
    // Traffic from a pod is not masqueraded: the mark stays 0.
    assert_eq!(r.packet.mark, 0);
    let text = r.trace.to_string();
    assert!(text.contains("KUBE-SVC-TCOU7JCQXEZGVUNU #2"), "{text}");
    assert!(text.contains(&format!("--to-destination {to}")), "{text}");
    assert!(text.contains("[random 0x"), "{text}");
    // The matched rules, in order, explain the path.
    let matched: Vec<String> = r
        .trace
        .matched_rules()
        .iter()
        .map(|(_, c, n)| format!("{c}#{n}"))
        .collect();
    assert_eq!(matched[0], "PREROUTING#1");
    assert_eq!(matched[1], "KUBE-SERVICES#2");
    assert!(matched[2].starts_with("KUBE-SVC-TCOU7JCQXEZGVUNU#"));
    assert!(matched[3].starts_with("KUBE-SEP-"));
    // Counters: the KUBE-SERVICES rule for kube-dns counted the packet with its length.
    let c = state
        .rule_counters(&rs, Table::Nat, "KUBE-SERVICES", 2)
        .unwrap();
    assert_eq!(
        c,
        Counters {
            packets: 1,
            bytes: u64::from(pkt.len)
        }
    );
    assert_eq!(
        state.rule_counters(&rs, Table::Nat, "KUBE-SERVICES", 1),
        Some(Counters::default())
    );
}

#[test]
fn endpoint_choice_follows_the_seed_and_is_about_even() {
    let rs = kind_node();
    let pick = |seed: u64| -> Vec<String> {
        let mut state = RulesetState::new();
        let mut rng = SimRng::derive(seed, "statistic");
        (0..400)
            .map(|i| {
                let pkt = udp(&format!("10.244.1.3:{}", 20000 + i), "10.96.0.10:53");
                let r = run(
                    &rs,
                    &mut state,
                    &mut rng,
                    Table::Nat,
                    Hook::PreRouting,
                    pkt,
                    new_ct(&pkt),
                    SimTime::ZERO,
                );
                dnat_target(&r.verdict).unwrap()
            })
            .collect()
    };
    let a = pick(1);
    assert_eq!(a, pick(1), "same seed, same choices");
    assert_ne!(a, pick(2), "another seed, other choices");
    let first = a.iter().filter(|s| *s == "10.244.0.3:53").count();
    // Binomial(400, 0.5): 5 standard deviations is ±50.
    assert!((150..=250).contains(&first), "{first} of 400");
}

#[test]
fn traffic_from_outside_the_pod_cidr_is_marked_and_masqueraded() {
    let rs = kind_node();
    let mut state = RulesetState::new();
    let mut rng = SimRng::derive(3, "s");
    let mut pkt = udp("172.18.0.5:40000", "10.96.0.10:53");
    pkt.iif = Some(IfName::new("eth0").unwrap());
    let r = run(
        &rs,
        &mut state,
        &mut rng,
        Table::Nat,
        Hook::PreRouting,
        pkt,
        new_ct(&pkt),
        SimTime::ZERO,
    );
    assert!(dnat_target(&r.verdict).is_some());
    assert_eq!(r.packet.mark, 0x4000, "KUBE-MARK-MASQ ran");
    // POSTROUTING sees the mark: xor it away and MASQUERADE --random-fully.
    let mut out = r.packet;
    out.oif = Some(IfName::new("eth0").unwrap());
    let r2 = run(
        &rs,
        &mut state,
        &mut rng,
        Table::Nat,
        Hook::PostRouting,
        out,
        new_ct(&pkt),
        SimTime::ZERO,
    );
    assert_eq!(r2.packet.mark, 0);
    match r2.verdict.nat {
        Some(NatRequest::Masquerade(p)) => assert!(p.random_fully && p.ports.is_none()),
        other => panic!("{other:?}"),
    }
    // An unmarked packet RETURNs from KUBE-POSTROUTING; kind's agent masquerades only
    // non-LOCAL destinations outside 10.244.0.0/16.
    let mut pod = udp("10.244.1.3:1000", "10.244.2.8:53");
    pod.oif = Some(IfName::new("eth0").unwrap());
    let r3 = run(
        &rs,
        &mut state,
        &mut rng,
        Table::Nat,
        Hook::PostRouting,
        pod,
        new_ct(&pod),
        SimTime::ZERO,
    );
    assert_eq!(r3.verdict.nat, None);
    assert_eq!(
        state.policy_counters(&rs, Table::Nat, Hook::PostRouting),
        Some(Counters {
            packets: 1,
            bytes: u64::from(pod.len)
        })
    );
}

#[test]
fn a_service_without_endpoints_is_rejected_with_port_unreachable() {
    let rs = kind_node();
    let mut state = RulesetState::new();
    let mut rng = SimRng::derive(3, "s");
    let pkt = Packet::tcp(sa("10.244.1.3:5555"), sa("10.96.200.1:80"), TcpFlags::SYN);
    let r = run(
        &rs,
        &mut state,
        &mut rng,
        Table::Filter,
        Hook::Output,
        pkt,
        new_ct(&pkt),
        SimTime::ZERO,
    );
    assert_eq!(
        r.verdict.action,
        Action::Reject(RejectWith::IcmpPortUnreachable)
    );
    let resp = RejectWith::IcmpPortUnreachable
        .response(&pkt, "10.244.1.1".parse().unwrap())
        .unwrap();
    assert_eq!(
        resp.to_string(),
        "icmp 10.244.1.1 -> 10.244.1.3 unreachable code=3 (tcp 10.244.1.3:5555 -> 10.96.200.1:80)"
    );
    // Established packets skip the service chains (ctstate NEW only) and are accepted.
    let mut est = new_ct(&pkt);
    if let CtState::Tracked(i) = &mut est {
        i.info = CtInfoKind::Established;
    }
    let r = run(
        &rs,
        &mut state,
        &mut rng,
        Table::Filter,
        Hook::Output,
        pkt,
        est,
        SimTime::ZERO,
    );
    assert_eq!(r.verdict.action, Action::Accept);
}

#[test]
fn tcp_reset_answers_like_nf_send_reset() {
    let syn = Packet::tcp(sa("10.0.0.1:5000"), sa("10.0.0.2:80"), TcpFlags::SYN);
    let rst = RejectWith::TcpReset
        .response(&syn, "10.0.0.2".parse().unwrap())
        .unwrap();
    assert_eq!(
        rst.to_string(),
        "tcp 10.0.0.2:80 -> 10.0.0.1:5000 RST,ACK ack=33 len=0"
    );
    let L4::Tcp { seq, ack, .. } = rst.l4 else {
        unreachable!()
    };
    // ack = seq + SYN + payload (32 bytes of the default packet).
    assert_eq!((seq, ack), (0, 33));
    let mut ackd = Packet::tcp(sa("10.0.0.1:5000"), sa("10.0.0.2:80"), TcpFlags::ACK);
    if let L4::Tcp { ack, .. } = &mut ackd.l4 {
        *ack = 777;
    }
    let rst = RejectWith::TcpReset
        .response(&ackd, "10.0.0.2".parse().unwrap())
        .unwrap();
    assert_eq!(rst.tcp_flags(), Some(TcpFlags::RST));
    assert!(matches!(rst.l4, L4::Tcp { seq: 777, .. }));
    let rst_in = Packet::tcp(sa("10.0.0.1:5000"), sa("10.0.0.2:80"), TcpFlags::RST);
    assert!(RejectWith::TcpReset
        .response(&rst_in, "10.0.0.2".parse().unwrap())
        .is_none());
}

const TRAVERSAL: &str = "*filter
:INPUT DROP [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:A - [0:0]
:B - [0:0]
:C - [0:0]
-A INPUT -p udp -j A
-A INPUT -p tcp -g B
-A INPUT -p icmp -j ACCEPT
-A A -j MARK --set-xmark 0x1/0xffffffff
-A A -g B
-A A -j MARK --set-xmark 0x99/0xffffffff
-A B -m mark --mark 0x1 -j RETURN
-A B -j C
-A B -j MARK --set-xmark 0x3/0x3
-A C -j MARK --set-xmark 0x2/0x2
COMMIT
";

#[test]
fn jump_goto_return_and_policy_follow_ipt_do_table() {
    let rs = ruleset(TRAVERSAL);
    let mut state = RulesetState::new();
    let mut rng = SimRng::derive(1, "x");
    // udp: INPUT → A (mark 1) → goto B → RETURN returns to INPUT (A's caller), not to A:
    // A's last rule (mark 0x99) never runs; INPUT falls off → policy DROP.
    let p = udp("10.0.0.1:1", "10.0.0.2:2");
    let r = run(
        &rs,
        &mut state,
        &mut rng,
        Table::Filter,
        Hook::Input,
        p,
        CtState::Invalid,
        SimTime::ZERO,
    );
    assert_eq!(r.packet.mark, 1);
    assert_eq!(r.verdict.action, Action::Drop);
    assert_eq!(
        state.rule_counters(&rs, Table::Filter, "A", 3),
        Some(Counters::default())
    );
    // tcp: INPUT goto B → C (mark |= 2) → back in B → mark |= 3; falling off B (entered by goto
    // from a built-in chain) is the policy.
    let t = Packet::tcp(sa("10.0.0.1:1"), sa("10.0.0.2:2"), TcpFlags::SYN);
    let r = run(
        &rs,
        &mut state,
        &mut rng,
        Table::Filter,
        Hook::Input,
        t,
        CtState::Invalid,
        SimTime::ZERO,
    );
    assert_eq!(r.packet.mark, 3);
    assert_eq!(r.verdict.action, Action::Drop);
    assert_eq!(
        state.policy_counters(&rs, Table::Filter, Hook::Input),
        Some(Counters {
            packets: 2,
            bytes: u64::from(p.len) + u64::from(t.len)
        })
    );
    // ACCEPT ends the walk without touching the policy counters.
    let i = Packet::icmp_echo_request(
        "10.0.0.1".parse().unwrap(),
        "10.0.0.2".parse().unwrap(),
        1,
        1,
    );
    let r = run(
        &rs,
        &mut state,
        &mut rng,
        Table::Filter,
        Hook::Input,
        i,
        CtState::Invalid,
        SimTime::ZERO,
    );
    assert_eq!(r.verdict.action, Action::Accept);
    assert_eq!(
        state
            .policy_counters(&rs, Table::Filter, Hook::Input)
            .unwrap()
            .packets,
        2
    );
    let trace = r.trace.to_string();
    assert!(trace.contains("filter INPUT #3 MATCH"), "{trace}");
}

#[test]
fn nth_matches_the_packets_the_kernel_matches() {
    // Measured on the real kernel (loopback UDP through raw OUTPUT): with
    // `--every 3 --packet 0|1|2`, `--every 2 --packet 1`, `--every 4 --packet 3`, each rule
    // matched packets p+1, p+1+n, … of those reaching it.
    let rs = ruleset(
        "*raw
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A OUTPUT -m statistic --mode nth --every 3 --packet 0
-A OUTPUT -m statistic --mode nth --every 3 --packet 1
-A OUTPUT -m statistic --mode nth --every 3 --packet 2
-A OUTPUT -m statistic --mode nth --every 2 --packet 1
-A OUTPUT -m statistic --mode nth --every 4 --packet 3
-A OUTPUT -m statistic --mode nth --every 1 --packet 0
COMMIT
",
    );
    let mut state = RulesetState::new();
    let mut rng = SimRng::derive(1, "x");
    let want = [
        [1, 0, 0, 0, 0, 1],
        [1, 1, 0, 1, 0, 2],
        [1, 1, 1, 1, 0, 3],
        [2, 1, 1, 2, 1, 4],
        [2, 2, 1, 2, 1, 5],
        [2, 2, 2, 3, 1, 6],
        [3, 2, 2, 3, 1, 7],
        [3, 3, 2, 4, 2, 8],
    ];
    for row in want {
        let p = udp("127.0.0.1:4000", "127.0.0.1:9999");
        run(
            &rs,
            &mut state,
            &mut rng,
            Table::Raw,
            Hook::Output,
            p,
            CtState::Invalid,
            SimTime::ZERO,
        );
        let got: Vec<u64> = (1..=6)
            .map(|n| {
                state
                    .rule_counters(&rs, Table::Raw, "OUTPUT", n)
                    .unwrap()
                    .packets
            })
            .collect();
        assert_eq!(got, row);
    }
}

#[test]
fn random_statistic_compares_31_bit_draws_with_the_quantized_probability() {
    let rs = ruleset(
        "*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -m statistic --mode random --probability 0.25 -j DROP
COMMIT
",
    );
    let mut state = RulesetState::new();
    let mut rng = SimRng::derive(11, "stat");
    let mut check = SimRng::derive(11, "stat");
    let mut drops = 0;
    for _ in 0..4000 {
        let expected = (check.next_u32() & 0x7fff_ffff) < (1 << 29);
        let r = run(
            &rs,
            &mut state,
            &mut rng,
            Table::Filter,
            Hook::Input,
            udp("1.1.1.1:1", "2.2.2.2:2"),
            CtState::Invalid,
            SimTime::ZERO,
        );
        assert_eq!(r.verdict.action == Action::Drop, expected);
        drops += usize::from(expected);
    }
    assert!((850..=1150).contains(&drops), "{drops}");
}

#[test]
fn recent_set_rcheck_seconds_reap_and_hitcount() {
    let rs = ruleset(
        "*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:AFF - [0:0]
-A INPUT -p udp -m udp --dport 1 -m recent --set --name S
-A INPUT -p udp -m udp --dport 2 -m recent --rcheck --seconds 10 --reap --name S -j ACCEPT
-A INPUT -p udp -m udp --dport 3 -m recent --update --seconds 10 --hitcount 3 --name S -j ACCEPT
-A INPUT -p udp -m udp --dport 4 -m recent --remove --name S
-A INPUT -p udp -j DROP
COMMIT
",
    );
    let mut state = RulesetState::new();
    let mut rng = SimRng::derive(1, "x");
    let mut send = |dport: u16, src: &str, t: u64, state: &mut RulesetState| -> Action {
        run(
            &rs,
            state,
            &mut rng,
            Table::Filter,
            Hook::Input,
            udp(&format!("{src}:999"), &format!("10.0.0.9:{dport}")),
            CtState::Invalid,
            SimTime::from_secs(t),
        )
        .verdict
        .action
    };
    assert_eq!(
        send(2, "10.0.0.1", 0, &mut state),
        Action::Drop,
        "not seen yet"
    );
    send(1, "10.0.0.1", 0, &mut state);
    assert_eq!(send(2, "10.0.0.1", 5, &mut state), Action::Accept);
    assert_eq!(
        send(2, "10.0.0.1", 10, &mut state),
        Action::Accept,
        "10 s is inside"
    );
    assert_eq!(
        send(2, "10.0.0.2", 10, &mut state),
        Action::Drop,
        "other address"
    );
    // --update with --hitcount 3: one stamp so far, the update only happens on a match.
    assert_eq!(send(3, "10.0.0.1", 10, &mut state), Action::Drop);
    send(1, "10.0.0.1", 11, &mut state);
    send(1, "10.0.0.1", 12, &mut state);
    // Stamps 0, 11, 12: the one at 0 is outside the 10 s window, two hits.
    assert_eq!(
        send(3, "10.0.0.1", 12, &mut state),
        Action::Drop,
        "two stamps"
    );
    send(1, "10.0.0.1", 12, &mut state);
    assert_eq!(
        send(3, "10.0.0.1", 12, &mut state),
        Action::Accept,
        "three stamps"
    );
    let list = state.recent_list(&rs, "S").unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(
        list[0].stamps.len(),
        5,
        "the matching --update added a stamp"
    );
    // After the window, rcheck --reap misses and reaps the (oldest) entry.
    assert_eq!(send(2, "10.0.0.1", 30, &mut state), Action::Drop);
    assert!(state.recent_list(&rs, "S").unwrap().is_empty());
    send(1, "10.0.0.1", 31, &mut state);
    send(4, "10.0.0.1", 31, &mut state);
    assert!(state.recent_list(&rs, "S").unwrap().is_empty(), "--remove");
    // At most 100 addresses; the least recently used goes.
    for i in 0..101u32 {
        let a = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 1, 0, 0)) + i);
        send(1, &a.to_string(), 40, &mut state);
    }
    let list = state.recent_list(&rs, "S").unwrap();
    assert_eq!(list.len(), 100);
    assert_eq!(list[0].addr, Ipv4Addr::new(10, 1, 0, 1));
}

#[test]
fn session_affinity_pins_a_client_to_its_endpoint() {
    let rs = kind_node();
    let mut state = RulesetState::new();
    let mut rng = SimRng::derive(5, "s");
    let mut first = None;
    for i in 0..20 {
        let p = Packet::tcp(
            sa(&format!("10.244.1.3:{}", 30000 + i)),
            sa("10.96.31.200:80"),
            TcpFlags::SYN,
        );
        let r = run(
            &rs,
            &mut state,
            &mut rng,
            Table::Nat,
            Hook::PreRouting,
            p,
            new_ct(&p),
            SimTime::from_secs(i),
        );
        let to = dnat_target(&r.verdict).unwrap();
        assert_eq!(*first.get_or_insert(to.clone()), to, "flow {i}");
    }
    // Another client is balanced independently, but is pinned too.
    let names = rs.chains(Table::Nat);
    assert!(names
        .iter()
        .any(|c| c.name() == "KUBE-SEP-6QNIKGLYC5ASN2AF"));
    assert_eq!(
        state
            .recent_list(&rs, "KUBE-SEP-6QNIKGLYC5ASN2AF")
            .unwrap()
            .len()
            + state
                .recent_list(&rs, "KUBE-SEP-LMFL3UCTFWBOEFPN")
                .unwrap()
                .len(),
        1
    );
}

#[test]
fn conntrack_matches_follow_xt_conntrack() {
    let rs = ruleset(
        "*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -m conntrack --ctstatus NONE -j LOG --log-prefix none
-A INPUT -m conntrack ! --ctstatus NONE -j LOG --log-prefix notnone
-A INPUT -m conntrack --ctstate DNAT --ctorigdst 10.96.0.0/12 --ctdir ORIGINAL -j LOG --log-prefix dnat
-A INPUT -m conntrack --ctstatus ASSURED -j LOG --log-prefix assured
-A INPUT -m conntrack --ctexpire 100:200 -j LOG --log-prefix expire
-A INPUT -m state --state INVALID -j LOG --log-prefix invalid
-A INPUT -m conntrack --ctstate UNTRACKED -j LOG --log-prefix untracked
COMMIT
",
    );
    let mut state = RulesetState::new();
    let mut rng = SimRng::derive(1, "x");
    let logs = |ct: CtState, rng: &mut SimRng, state: &mut RulesetState| -> Vec<String> {
        let r = run(
            &rs,
            state,
            rng,
            Table::Filter,
            Hook::Input,
            udp("10.244.1.3:1", "10.244.0.3:53"),
            ct,
            SimTime::ZERO,
        );
        r.trace
            .events
            .iter()
            .filter_map(|e| match e {
                TraceEvent::Log { prefix, .. } => Some(prefix.clone()),
                _ => None,
            })
            .collect()
    };
    let p = udp("10.244.1.3:1", "10.96.0.10:53");
    let mut ct = new_ct(&p);
    if let CtState::Tracked(i) = &mut ct {
        i.status = ctstatus::DST_NAT | ctstatus::ASSURED | ctstatus::SEEN_REPLY;
        i.info = CtInfoKind::Established;
        i.expires_secs = 119;
    }
    // --ctstatus NONE never matches an entry (the kernel tests `mask & status` with mask 0).
    assert_eq!(
        logs(ct, &mut rng, &mut state),
        ["notnone", "dnat", "assured", "expire"]
    );
    // No entry: only state tests can match; other conntrack options fail.
    assert_eq!(logs(CtState::Invalid, &mut rng, &mut state), ["invalid"]);
    assert_eq!(
        logs(CtState::Untracked, &mut rng, &mut state),
        ["untracked"]
    );
}

#[test]
fn notrack_marks_the_verdict_and_later_rules_see_untracked() {
    let rs = ruleset(
        "*raw
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A PREROUTING -p udp -m udp --dport 53 -j CT --notrack
-A PREROUTING -m conntrack --ctstate UNTRACKED -j TRACE
COMMIT
",
    );
    let mut state = RulesetState::new();
    let mut rng = SimRng::derive(1, "x");
    let r = run(
        &rs,
        &mut state,
        &mut rng,
        Table::Raw,
        Hook::PreRouting,
        udp("1.1.1.1:5", "2.2.2.2:53"),
        CtState::Invalid,
        SimTime::ZERO,
    );
    assert!(r.verdict.notrack);
    assert_eq!(r.ct, CtState::Untracked);
    assert!(r.trace.events.contains(&TraceEvent::TraceTarget));
}

#[test]
fn mark_and_connmark_arithmetic() {
    let rs = ruleset(
        "*mangle
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -j MARK --set-mark 0xf0
-A PREROUTING -j MARK --and-mark 0x30
-A PREROUTING -j MARK --xor-mark 0x1
-A PREROUTING -j CONNMARK --save-mark --mask 0xff
-A PREROUTING -j CONNMARK --or-mark 0x100
-A PREROUTING -j MARK --set-xmark 0x0/0xffffffff
-A PREROUTING -j CONNMARK --restore-mark --nfmask 0xf00 --ctmask 0xf00
COMMIT
",
    );
    let mut state = RulesetState::new();
    let mut rng = SimRng::derive(1, "x");
    let p = udp("1.1.1.1:5", "2.2.2.2:53");
    let r = run(
        &rs,
        &mut state,
        &mut rng,
        Table::Mangle,
        Hook::PreRouting,
        p,
        new_ct(&p),
        SimTime::ZERO,
    );
    // 0xf0 & 0x30 = 0x30, ^1 = 0x31; ctmark = 0x31 | 0x100 = 0x131; mark cleared then
    // restored from ctmark & 0xf00 = 0x100.
    assert_eq!(r.verdict.ct_mark, Some(0x131));
    assert_eq!(r.packet.mark, 0x100);
    // Without a conntrack entry CONNMARK does nothing.
    let r = run(
        &rs,
        &mut state,
        &mut rng,
        Table::Mangle,
        Hook::PreRouting,
        p,
        CtState::Invalid,
        SimTime::ZERO,
    );
    assert_eq!(r.verdict.ct_mark, None);
    assert_eq!(r.packet.mark, 0);
}

#[test]
fn addrtype_interfaces_multiport_and_nfacct() {
    let mut rs = Ruleset::new();
    rs.nfacct_add("seen").unwrap();
    rs.restore(
        "*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -m nfacct --nfacct-name seen
-A INPUT -i veth+ -m addrtype --dst-type LOCAL -j LOG --log-prefix local-from-veth
-A INPUT ! -i veth+ -m addrtype --dst-type BROADCAST --limit-iface-in -j LOG --log-prefix bcast
-A INPUT -p tcp -m multiport --dports 80,443,8000:8999 -j LOG --log-prefix web
-A INPUT -p tcp -m tcp --tcp-flags SYN,ACK SYN -j LOG --log-prefix syn
COMMIT
",
        &RestoreOptions::default(),
    )
    .unwrap();
    let mut state = RulesetState::new();
    let mut rng = SimRng::derive(1, "x");
    let logs = |p: Packet, rng: &mut SimRng, state: &mut RulesetState| -> Vec<String> {
        run(
            &rs,
            state,
            rng,
            Table::Filter,
            Hook::Input,
            p,
            CtState::Invalid,
            SimTime::ZERO,
        )
        .trace
        .events
        .iter()
        .filter_map(|e| match e {
            TraceEvent::Log { prefix, .. } => Some(prefix.clone()),
            _ => None,
        })
        .collect()
    };
    let veth = IfName::new("veth1a2b").unwrap();
    let eth = IfName::new("eth0").unwrap();
    let syn = Packet::tcp(sa("10.244.1.3:4000"), sa("172.18.0.2:8080"), TcpFlags::SYN).on_iif(veth);
    assert_eq!(
        logs(syn, &mut rng, &mut state),
        ["local-from-veth", "web", "syn"]
    );
    let synack = Packet::tcp(
        sa("10.244.1.3:4000"),
        sa("10.9.9.9:22"),
        TcpFlags::SYN | TcpFlags::ACK,
    )
    .on_iif(eth);
    assert!(logs(synack, &mut rng, &mut state).is_empty());
    let bcast = udp("172.18.0.9:68", "172.18.255.255:67").on_iif(eth);
    assert_eq!(logs(bcast, &mut rng, &mut state), ["bcast"]);
    let lo_bcast = udp("172.18.0.9:68", "172.18.255.255:67").on_iif(IfName::new("lo").unwrap());
    assert!(
        logs(lo_bcast, &mut rng, &mut state).is_empty(),
        "--limit-iface-in: the broadcast address belongs to eth0"
    );
    let c = state.nfacct_counters(&rs, "seen").unwrap();
    assert_eq!(c.packets, 4);
    assert_eq!(
        rs.nfacct_del("seen"),
        Err(NfacctError::InUse("seen".into()))
    );
}

#[test]
fn ipv6_packets_and_missing_tables_are_accepted_untouched() {
    let rs = ruleset(TRAVERSAL);
    let mut state = RulesetState::new();
    let mut rng = SimRng::derive(1, "x");
    let v6 = Packet::udp(sa("[fd00::1]:1"), sa("[fd00::2]:2"));
    let r = run(
        &rs,
        &mut state,
        &mut rng,
        Table::Filter,
        Hook::Input,
        v6,
        CtState::Invalid,
        SimTime::ZERO,
    );
    assert_eq!(r.verdict.action, Action::Accept);
    let r = run(
        &rs,
        &mut state,
        &mut rng,
        Table::Nat,
        Hook::PreRouting,
        udp("1.1.1.1:1", "2.2.2.2:2"),
        CtState::Invalid,
        SimTime::ZERO,
    );
    assert_eq!(
        r.verdict,
        Verdict {
            action: Action::Accept,
            nat: None,
            notrack: false,
            ct_mark: None
        }
    );
    assert!(matches!(r.trace.events[0], TraceEvent::Skip { .. }));
}

#[test]
fn a_loaded_recent_list_keeps_as_many_stamps_as_its_rules() {
    // `--hitcount 5` alone: the kernel keeps 8 stamps per address (recent_mt_check rounds the
    // hit count up to a power of two; measured on Linux 6.18 by writing +ADDR twelve times to
    // /proc/net/xt_recent/HC).
    let mut rs = Ruleset::new();
    rs.restore(
        "*filter\n:INPUT ACCEPT [0:0]\n\
         -A INPUT -m recent --rcheck --hitcount 5 --name HC -j DROP\n\
         COMMIT\n",
        &RestoreOptions::default(),
    )
    .unwrap();
    let mut st = RulesetState::new();
    let entry = |n: u64| RecentEntryView {
        addr: "10.0.0.3".parse().unwrap(),
        ttl: 64,
        stamps: (0..n).map(|i| SimTime::from_secs(i + 1)).collect(),
    };
    let e = st.load_recent(&rs, "HC", &[entry(9)]).unwrap_err();
    assert!(e.message.contains("keeps 8 per address"), "{e}");
    st.load_recent(&rs, "HC", &[entry(8)]).unwrap();
    assert_eq!(st.recent_list(&rs, "HC").unwrap(), vec![entry(8)]);
    // A list no rule names.
    let e = st.load_recent(&rs, "OTHER", &[entry(1)]).unwrap_err();
    assert!(e.message.contains("the rules use HC"), "{e}");
}

/// `-m physdev` as iptables 1.8.9 prints it (`iptables-save` and `iptables -L -n -v`, taken
/// in `unshare -rn` on this kernel), refused in OUTPUT without `--physdev-is-bridged` as
/// `physdev_mt_check` refuses it (in a base chain only, as nf_tables' compat layer checks
/// it), and matched as `physdev_mt` matches: with and without `nf_bridge_info`.
#[test]
fn physdev_prints_checks_and_matches_as_xt_physdev() {
    let text = "*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:X - [0:0]
-A FORWARD -m physdev --physdev-in veth+ ! --physdev-out eth0 --physdev-is-bridged -j ACCEPT
-A FORWARD -m physdev ! --physdev-is-in --physdev-is-out ! --physdev-is-bridged -j ACCEPT
-A OUTPUT -m physdev --physdev-out eth0 --physdev-is-bridged -j ACCEPT
-A OUTPUT -j X
-A X -m physdev --physdev-out eth0 -j ACCEPT
COMMIT
";
    let rs = ruleset(text);
    let state = RulesetState::new();
    assert_eq!(rs.save(&state, &SaveOptions::default()), text);
    let list = rs
        .list(
            &state,
            Table::Filter,
            Some("FORWARD"),
            &ListOptions::default(),
        )
        .unwrap();
    assert!(list.contains("0.0.0.0/0            0.0.0.0/0            PHYSDEV match --physdev-in veth+ ! --physdev-out eth0 --physdev-is-bridged\n"), "{list}");
    assert!(
        list.contains("PHYSDEV match ! --physdev-is-in --physdev-is-out ! --physdev-is-bridged\n"),
        "{list}"
    );

    let mut rs2 = Ruleset::new();
    for bad in [
        "-A OUTPUT -m physdev --physdev-out eth0 -j ACCEPT",
        "-A OUTPUT -m physdev --physdev-is-out ! --physdev-is-bridged -j ACCEPT",
    ] {
        let e = rs2.command(Table::Filter, bad).unwrap_err();
        assert!(
            matches!(e.kind, RestoreErrorKind::WrongHook { hook: "OUTPUT", .. }),
            "{bad}: {e}"
        );
    }
    let e = rs2
        .command(Table::Filter, "-A FORWARD -m physdev -j ACCEPT")
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("PHYSDEV: no physdev option specified"),
        "{e}"
    );

    // One rule a line, each LOGging its number, in FORWARD.
    let rules = [
        "--physdev-in veth+",
        "! --physdev-in veth+",
        "--physdev-out veth2",
        "! --physdev-out veth2",
        "--physdev-is-bridged",
        "! --physdev-is-bridged",
        "--physdev-is-in",
        "! --physdev-is-out",
    ];
    let mut t = String::from("*filter\n:FORWARD ACCEPT [0:0]\n");
    for (i, r) in rules.iter().enumerate() {
        t.push_str(&format!(
            "-A FORWARD -m physdev {r} -j LOG --log-prefix r{i}\n"
        ));
    }
    t.push_str("COMMIT\n");
    let rs = ruleset(&t);
    let addrs = LocalAddrs::new();
    let hits = |phys: Option<PhysDevs>| -> String {
        let mut rng = SimRng::derive(1, "x");
        let mut state = RulesetState::new();
        let mut ctx = EvalCtx::new(
            udp("10.244.0.2:1", "10.244.0.3:2"),
            &addrs,
            SimTime::ZERO,
            &mut rng,
        );
        ctx.phys = phys;
        let mut trace = Trace::new();
        rs.run_hook(
            Table::Filter,
            Hook::Forward,
            &mut ctx,
            &mut state,
            Some(&mut trace),
        );
        let mut fast = RulesetState::new();
        let mut frng = SimRng::derive(1, "x");
        let mut fctx = EvalCtx::new(
            udp("10.244.0.2:1", "10.244.0.3:2"),
            &addrs,
            SimTime::ZERO,
            &mut frng,
        );
        fctx.phys = phys;
        rs.run_hook(Table::Filter, Hook::Forward, &mut fctx, &mut fast, None);
        let c = SaveOptions {
            counters: true,
            ..SaveOptions::default()
        };
        assert_eq!(
            rs.save(&fast, &c),
            rs.save(&state, &c),
            "fast walk disagrees"
        );
        rs.save(&state, &c)
            .lines()
            .filter(|l| l.starts_with("[1:"))
            .map(|l| l.rsplit(' ').next().unwrap().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let dev = |s: &str| Some(IfName::new(s).unwrap());
    // Not bridged (no nf_bridge_info): only the inverted options match.
    assert_eq!(hits(None), "r1 r3 r5 r7");
    // Bridged, in FORWARD: in veth1, out veth2.
    assert_eq!(
        hits(Some(PhysDevs {
            indev: dev("veth1"),
            outdev: dev("veth2")
        })),
        "r0 r2 r4 r6"
    );
    // Bridged, no out-port yet (PREROUTING): --physdev-out is not checked, so it and its
    // inverse both match; is-bridged needs an out-port.
    assert_eq!(
        hits(Some(PhysDevs {
            indev: dev("eth9"),
            outdev: None
        })),
        "r1 r2 r3 r5 r6 r7"
    );
}
