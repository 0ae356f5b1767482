//! The compiled walk equals the interpreter's on every packet: over random rulesets of the
//! shapes kube-proxy's nftables proxier writes (its base chains, Services with endpoints,
//! session affinity, external and firewall chains, no-endpoint verdicts), with the other
//! statements nfsim knows mixed in (counters, masks, flags, intervals, timeouts, `numgen`
//! offsets, deep jumps), and random packets at random times: the same verdict and NAT
//! request, the same mark, the same counters and set contents after, the same draws.

use super::super::testgen::{ct_view, packet, ruleset_text};
use super::*;
use crate::eval::LocalAddrs;
use proptest::prelude::*;
use sim_core::{Packet, SimRng, TcpFlags};
use std::fmt::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Every base chain that sees IPv4 (`v4`) or IPv6 packets, for both walks.
fn bases(rs: &NftRuleset, v4: bool) -> Vec<BaseRef> {
    let mut v = Vec::new();
    for hook in crate::types::Hook::ALL {
        for ty in [ChainType::Filter, ChainType::Nat] {
            v.extend(rs.base_chains(hook, ty, v4));
        }
    }
    v
}

fn check(seed: u64) {
    let mut g = SimRng::derive(seed, "nft-compiled");
    let services = g.below(7) as usize;
    let text = ruleset_text(&mut g, services);
    let mut interp = NftRuleset::new();
    interp
        .apply("random.nft", &text, SimTime::ZERO)
        .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{text}"));
    let mut fast = interp.clone();
    let mut prog =
        NftProgram::compile(&fast).unwrap_or_else(|e| panic!("seed {seed}: {e:?}\n{text}"));
    let mut addrs = LocalAddrs::new();
    addrs.add("eth0", Ipv4Addr::new(192, 168, 0, 2), 24);
    let (mut r1, mut r2) = (SimRng::derive(seed, "draws"), SimRng::derive(seed, "draws"));
    let (chains4, chains6) = (bases(&interp, true), bases(&interp, false));
    let mut now = SimTime::ZERO;
    for n in 0..48 {
        now += sim_core::SimDuration::from_millis(g.below(4_000_000));
        let p = packet(&mut g, services);
        let ct = ct_view(&mut g, &p);
        let chains = if p.is_ipv4() { &chains4 } else { &chains6 };
        for &at in chains {
            let mut c1 = EvalCtx::new(p, &addrs, now, &mut r1);
            c1.ct = ct;
            let v1 = interp.run_base_chain(at, &mut c1, None);
            let m1 = c1.packet.mark;
            let mut c2 = EvalCtx::new(p, &addrs, now, &mut r2);
            c2.ct = ct;
            let v2 = prog.run_base_chain(&mut fast, at, &mut c2);
            let m2 = c2.packet.mark;
            assert_eq!(v1, v2, "seed {seed}, packet {n} {p}, chain {at:?}\n{text}");
            assert_eq!(m1, m2, "seed {seed}, packet {n} {p}: mark\n{text}");
            assert!(
                interp == fast,
                "seed {seed}, packet {n} {p}, chain {at:?}: counters or sets differ\n{}\n---\n{}",
                interp.list_ruleset(now),
                fast.list_ruleset(now)
            );
        }
        // A ruleset compiled anew from the state so far walks on as the old program did.
        match g.below(8) {
            0 => prog = NftProgram::compile(&fast).expect("compiles again"),
            1 => prog.resync(&fast),
            _ => {}
        }
    }
    assert_eq!(r1.next_u64(), r2.next_u64(), "seed {seed}: draws differ");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn the_compiled_walk_equals_the_interpreter(seed in any::<u64>()) {
        check(seed);
    }
}

#[test]
fn a_key_too_wide_is_left_to_the_interpreter() {
    // Seven fields are more than a compiled key holds.
    let mut rs = NftRuleset::new();
    rs.apply(
        "wide.nft",
        "add table ip t
add chain ip t c { type filter hook input priority 0 ; }
add rule ip t c ip saddr . ip daddr . th sport . th dport . meta mark . ip saddr . ip daddr { 1.2.3.4 . 5.6.7.8 . 1 . 2 . 0x1 . 1.2.3.4 . 5.6.7.8 } accept
",
        SimTime::ZERO,
    )
    .expect("applies");
    assert!(NftProgram::compile(&rs).is_err());
}

#[test]
fn packed_keys_keep_fields_apart() {
    // `1.0.0.0 . tcp . 1` and `0.0.0.1 . tcp . 1` must not pack alike, nor a field's bits
    // leak into the next.
    let bits = [32, 8, 16];
    let a = pack(&[0x0100_0000, 6, 1], &bits);
    let b = pack(&[1, 6, 1], &bits);
    assert_ne!(a, b);
    assert_eq!(pack(&[1, 256, 1], &bits), None, "a protocol of 9 bits");
    let wide = pack(&[u128::MAX, 6, 80], &[128, 8, 16]).expect("152 bits");
    let other = pack(&[u128::MAX - 1, 6, 80], &[128, 8, 16]).expect("152 bits");
    assert_ne!(wide, other);
}

#[test]
fn packet_fields_load_as_the_interpreter_loads_them() {
    // The hint loads keys from the packet alone; they must be the walk's keys.
    let addrs = LocalAddrs::new();
    let mut g = SimRng::derive(1, "packet-fields");
    let fields = [
        Field::IpSaddr,
        Field::IpDaddr,
        Field::IpProtocol,
        Field::Ip6Saddr,
        Field::Ip6Daddr,
        Field::Ip6Nexthdr,
        Field::MetaNfproto,
        Field::MetaL4proto,
        Field::ThSport,
        Field::ThDport,
        Field::Sport(6),
        Field::Sport(17),
        Field::Dport(6),
        Field::Dport(17),
    ];
    let mut v6 = packet(&mut g, 3);
    v6.src = "fd00::1".parse().expect("an address");
    v6.dst = "fd00::2".parse().expect("an address");
    for i in 0..200 {
        let mut p = packet(&mut g, 3);
        if i % 3 == 0 {
            // The same ports and protocol over IPv6.
            p.src = v6.src;
            p.dst = v6.dst;
        }
        for f in fields {
            assert!(is_packet_field(f));
            let mut rng = SimRng::derive(1, "unused");
            let mut ctx = EvalCtx::new(p, &addrs, SimTime::ZERO, &mut rng);
            let want = super::super::eval::load(f, &mut ctx, &mut Vec::new());
            assert_eq!(packet_field(f, &p), want, "{f:?} of {p}");
        }
    }
}

/// kube-proxy's base rules and `n` Services of two endpoints each, 10.96.x.y:80/tcp; the
/// endpoint chains are made after all the Services' chains (so that only the layout puts
/// them next to their Service's).
fn services_text(n: usize) -> String {
    let mut t = String::from(include_str!("testgen_base.nft"));
    for i in 0..n {
        let _ = writeln!(t, "add chain ip kube-proxy service-{i}");
    }
    for i in 0..n {
        for j in 0..2 {
            let _ = writeln!(t, "add chain ip kube-proxy endpoint-{i}-{j}");
        }
    }
    for i in 0..n {
        let ip = Ipv4Addr::new(10, 96, (i / 250) as u8, (i % 250) as u8 + 1);
        let _ = writeln!(
            t,
            "add rule ip kube-proxy service-{i} ip daddr {ip} ip saddr != 10.0.0.0/8 jump mark-for-masquerade"
        );
        let _ = writeln!(
            t,
            "add rule ip kube-proxy service-{i} numgen random mod 2 vmap {{ 0 : goto endpoint-{i}-0 , 1 : goto endpoint-{i}-1 }}"
        );
        for j in 0..2 {
            let _ = writeln!(
                t,
                "add rule ip kube-proxy endpoint-{i}-{j} meta l4proto tcp dnat to 10.180.{}.{}:8080",
                i / 100,
                (i % 100) * 2 + j + 1
            );
        }
        let _ = writeln!(t, "add element ip kube-proxy cluster-ips {{ {ip} }}");
        let _ = writeln!(
            t,
            "add element ip kube-proxy service-ips {{ {ip} . tcp . 80 : goto service-{i} }}"
        );
    }
    t
}

#[test]
fn the_hint_finds_the_services_chain_and_its_endpoints_follow_it() {
    let mut rs = NftRuleset::new();
    rs.apply("svc.nft", &services_text(1500), SimTime::ZERO)
        .expect("applies");
    let prog = NftProgram::compile(&rs).expect("compiles");
    let p = &*prog.prog;
    // The big table looked up before DNAT: service-ips (a verdict map, whose target the
    // hint follows). Not cluster-ips: `cluster-ips-check` looks the packet up after DNAT,
    // by its endpoint's address, not the ClusterIP the hint would load.
    let mut sizes: Vec<(usize, bool)> = p
        .hints
        .iter()
        .map(|h| match &p.sets[h.set as usize].search {
            Search::Hash(m) => (m.len, h.vmap),
            _ => (0, h.vmap),
        })
        .collect();
    sizes.sort();
    assert_eq!(sizes, vec![(1500, true)], "{:?}", p.hints);
    let t = rs.table(Family::Ip, "kube-proxy").expect("the table");
    let chain_at = |name: &str| p.chain_pc[t.chains.get_index_of(name).expect(name)] as usize;
    for i in [0, 7, 1499] {
        let ip = Ipv4Addr::new(10, 96, (i / 250) as u8, (i % 250) as u8 + 1);
        let pkt = Packet::tcp(
            SocketAddr::new(IpAddr::V4([172, 18, 1, 9].into()), 40000),
            SocketAddr::new(IpAddr::V4(ip), 80),
            TcpFlags::SYN,
        );
        let h = *p.hints.iter().find(|h| h.vmap).expect("service-ips");
        let k = packet_key(p, h.key, &pkt).expect("a key");
        let got = p.sets[h.set as usize].find(k, SimTime::ZERO);
        let svc = chain_at(&format!("service-{i}"));
        assert_eq!(got, Some(CVerdict::Goto(svc as u32)), "service {i}");
        // Laid out depth first: the Service's endpoint chains lie within the instructions
        // the hint asks for.
        for j in 0..2 {
            let ep = chain_at(&format!("endpoint-{i}-{j}"));
            assert!(
                ep > svc && ep < svc + HINT_INSNS,
                "service {i} at {svc}, endpoint {j} at {ep}"
            );
        }
        // And it changes nothing.
        prog.prefetch_new_flow(&pkt);
    }
    // 100 Services: the tables stay in the caches, no hints.
    let mut small = NftRuleset::new();
    small
        .apply("svc.nft", &services_text(100), SimTime::ZERO)
        .expect("applies");
    assert!(NftProgram::compile(&small)
        .expect("compiles")
        .prog
        .hints
        .is_empty());
}

#[test]
fn an_instruction_is_at_most_a_cache_line() {
    // The code is read a line at a time, and the hint asks for HINT_INSNS of them.
    assert!(
        std::mem::size_of::<Insn>() <= 64,
        "{}",
        std::mem::size_of::<Insn>()
    );
}

#[test]
fn rules_that_can_do_nothing_are_left_out_and_their_chains_skipped() {
    // kube-proxy's rules while no Service has loadBalancerSourceRanges (`firewall-ips`
    // empty) and every Service has endpoints (`no-endpoint-services` empty):
    // `filter-prerouting-pre-dnat`'s one rule jumps to a chain that only looks the packet
    // up in the empty map, so the base chain has nothing to do, even for a new flow.
    let rules_of = |text: &str| {
        let mut rs = NftRuleset::new();
        rs.apply("svc.nft", text, SimTime::ZERO).expect("applies");
        let prog = NftProgram::compile(&rs).expect("compiles");
        let at = |hook, prio| {
            *rs.base_chains(hook, ChainType::Filter, true)
                .iter()
                .find(|b| b.priority == prio)
                .expect("the base chain")
        };
        let pre = at(crate::types::Hook::PreRouting, -110);
        let fwd = at(crate::types::Hook::Forward, 0);
        // `ct state` 8: new.
        (
            prog.accepts_untouched(pre, 8),
            prog.accepts_untouched(fwd, 8),
            rules_in(&prog, fwd),
        )
    };
    let text = services_text(3);
    // `filter-forward` keeps `ct state new jump cluster-ips-check` (cluster-ips has the
    // ClusterIPs), not the jump to `service-endpoints-check`.
    assert_eq!(rules_of(&text), (true, false, 1));
    // A firewall element: the pre-DNAT chain has work again.
    let fw = format!(
        "{text}add chain ip kube-proxy firewall-x\nadd rule ip kube-proxy firewall-x drop\n\
         add element ip kube-proxy firewall-ips {{ 10.96.0.1 . tcp . 80 : goto firewall-x }}\n"
    );
    assert_eq!(rules_of(&fw), (false, false, 1));
    // A Service without endpoints: so has the forward chain's first rule.
    let noep = format!(
        "{text}add element ip kube-proxy no-endpoint-services {{ 10.96.9.9 . tcp . 80 : drop }}\n"
    );
    assert_eq!(rules_of(&noep), (true, false, 2));
    // A counter counts every packet that reaches it: a rule with one stays.
    let counted = format!("{text}add rule ip kube-proxy firewall-check counter\n");
    assert_eq!(rules_of(&counted), (false, false, 1));
    // A `numgen` draw is an effect too (it moves the random stream).
    let drawn = format!(
        "{text}add rule ip kube-proxy firewall-check numgen random mod 2 vmap {{ 5 : drop }}\n"
    );
    assert!(!rules_of(&drawn).0);
}

/// The rules the program walks in base chain `at`.
fn rules_in(prog: &NftProgram, at: BaseRef) -> usize {
    let p = &*prog.prog;
    let pc = p.chain_pc[p.table_chain0[at.table] as usize + at.chain] as usize;
    let mut n = 0;
    let mut i = pc;
    while let Some(Insn::Rule { next, .. }) = p.code.get(i) {
        n += 1;
        i = *next as usize;
    }
    n
}

#[test]
fn a_hash_set_finds_its_least_and_greatest_keys_and_nothing_outside() {
    let mut m = KeyTable::with_capacity(4);
    assert!(m.get(PKey::single(0)).is_none(), "empty");
    for v in [700u128, 5, 90, 1 << 70] {
        m.insert(PKey::single(v), v as u32, CVerdict::Accept);
    }
    for v in [700u128, 5, 90, 1 << 70] {
        assert_eq!(
            m.get(PKey::single(v)).map(|s| s.elem),
            Some(v as u32),
            "{v}"
        );
    }
    for v in [4u128, 6, (1 << 70) + 1, 1 << 71] {
        assert!(m.get(PKey::single(v)).is_none(), "{v}");
    }
    // Grown past its first capacity, it keeps them.
    for v in 1000..1100u128 {
        m.insert(PKey::single(v), v as u32, CVerdict::Accept);
    }
    assert_eq!(m.get(PKey::single(5)).map(|s| s.elem), Some(5));
    assert_eq!(m.get(PKey::single(1 << 70)).map(|s| s.elem), Some(0));
}
