//! A namespace walking the compiled nftables ruleset (the default) treats every packet as
//! one walking the interpreter (`set_nft_compiled(false)`): over random rulesets of
//! kube-proxy's shapes and random packets (`nft/testgen.rs`), some answered so that flows
//! become established, some traced (which walks the interpreter, whose `update`s the
//! compiled copies of the sets then take up), at moving times (affinity timeouts expire):
//! the same fate, egress (NAT rewrites, marks, REJECT answers), conntrack entry and events
//! for each packet, and the same ruleset (counters, set elements) after.

use super::*;
use crate::nft::testgen::{packet, ruleset_text};
use proptest::prelude::*;
use sim_core::{SimDuration, SimRng};

fn ifn(s: &str) -> IfName {
    IfName::new(s).expect("an interface name")
}

/// eth0 192.168.0.2/24 (the generated rulesets' node address) with the default route,
/// cni0 10.180.0.1/16 to the endpoints, veth12 10.0.0.1/8.
fn node(compiled: bool) -> Netns {
    let mut n = Netns::new(NetnsConfig::new("worker", 7));
    let ip = |s: &str| -> IpAddr { s.parse().expect("an address") };
    n.add_interface(ifn("eth0"), &[(ip("192.168.0.2"), 24)])
        .expect("eth0");
    n.add_interface(ifn("cni0"), &[(ip("10.180.0.1"), 16)])
        .expect("cni0");
    n.add_interface(ifn("veth12"), &[(ip("10.0.0.1"), 8)])
        .expect("veth12");
    n.add_route(
        "0.0.0.0/0".parse().expect("a prefix"),
        Some(ip("192.168.0.1")),
        ifn("eth0"),
    )
    .expect("default route");
    if !compiled {
        n.set_nft_compiled(false);
    }
    n
}

fn check(seed: u64) {
    let mut g = SimRng::derive(seed, "netns-nft-compiled");
    let services = g.below(7) as usize;
    let text = ruleset_text(&mut g, services);
    let (mut fast, mut slow) = (node(true), node(false));
    for n in [&mut fast, &mut slow] {
        n.nft_apply("random.nft", &text, SimTime::ZERO)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{text}"));
    }
    // Compiled at once, or after the interpreted walks `nft -f` waits for (64 for rulesets
    // this small: the switch comes during the run).
    if g.below(2) == 0 {
        fast.set_nft_compiled(true);
        assert!(
            fast.nft_is_compiled(),
            "seed {seed}: does not compile\n{text}"
        );
    }
    assert!(!slow.nft_is_compiled());
    let mut now = SimTime::ZERO;
    for i in 0..40 {
        now += SimDuration::from_millis(g.below(2_000_000));
        let mut p = packet(&mut g, services);
        let from = Ingress::Interface(p.iif.take().unwrap_or_else(|| ifn("eth0")));
        let traced = g.below(6) == 0;
        let run = |n: &mut Netns| {
            if traced {
                n.process_traced(now, p, from)
            } else {
                n.process(now, p, from)
            }
        };
        let (a, b) = (run(&mut fast), run(&mut slow));
        assert_eq!(a, b, "seed {seed}, packet {i} {p}\n{text}");
        // The peer answers what left half the time, so that flows become established.
        if let (Some(Egress::Transmit { dev, packet, .. }), true) =
            (a.out.first().copied(), g.below(2) == 0)
        {
            let mut reply = packet;
            (reply.src, reply.dst) = (packet.dst, packet.src);
            if let (Some(s), Some(d)) = (packet.sport(), packet.dport()) {
                reply.set_sport(d);
                reply.set_dport(s);
            }
            let from = Ingress::Interface(dev);
            let (a, b) = (
                fast.process(now, reply, from),
                slow.process(now, reply, from),
            );
            assert_eq!(a, b, "seed {seed}, reply to packet {i} {reply}\n{text}");
        }
        assert_eq!(
            fast.drain_conntrack_events(),
            slow.drain_conntrack_events(),
            "seed {seed}, packet {i}: conntrack events"
        );
        assert!(
            fast.nft() == slow.nft(),
            "seed {seed}, packet {i} {p}: counters or sets differ\n{}\n---\n{}",
            fast.nft().list_ruleset(now),
            slow.nft().list_ruleset(now)
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    #[test]
    fn the_compiled_ruleset_treats_packets_as_the_interpreter(seed in any::<u64>()) {
        check(seed);
    }
}

#[test]
fn a_changed_ruleset_is_compiled_after_enough_walks() {
    // The interpreter walks a new ruleset first; once it has walked base chains
    // COMPILE_AFTER_WALKS times (a small ruleset), the ruleset is compiled.
    let mut g = SimRng::derive(5, "netns-nft-compiled");
    let text = ruleset_text(&mut g, 2);
    let mut n = node(true);
    n.nft_apply("random.nft", &text, SimTime::ZERO)
        .expect("applies");
    assert!(!n.nft_is_compiled());
    let p = Packet::udp(
        "172.18.1.9:40000".parse().expect("an address"),
        "8.8.8.8:53".parse().expect("an address"),
    );
    let mut sent = 0;
    while !n.nft_is_compiled() {
        let mut q = p;
        q.set_sport(1024 + sent);
        n.process(SimTime::ZERO, q, Ingress::Interface(ifn("eth0")));
        sent += 1;
        assert!(sent < 200, "not compiled after {sent} packets");
    }
    // A traced packet walks the interpreter and leaves the program in place; `nft -f`
    // starts over.
    n.process_traced(SimTime::ZERO, p, Ingress::Interface(ifn("eth0")));
    assert!(n.nft_is_compiled());
    n.nft_apply("more.nft", "add table ip more\n", SimTime::ZERO)
        .expect("applies");
    assert!(!n.nft_is_compiled());
}
