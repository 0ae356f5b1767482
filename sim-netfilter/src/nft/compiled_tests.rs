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
use sim_core::SimRng;
use std::net::Ipv4Addr;

/// Every base chain, for both walks.
fn bases(rs: &NftRuleset) -> Vec<BaseRef> {
    let mut v = Vec::new();
    for hook in crate::types::Hook::ALL {
        for ty in [ChainType::Filter, ChainType::Nat] {
            v.extend(rs.base_chains(hook, ty, true));
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
    let chains = bases(&interp);
    let mut now = SimTime::ZERO;
    for n in 0..48 {
        now += sim_core::SimDuration::from_millis(g.below(4_000_000));
        let p = packet(&mut g, services);
        let ct = ct_view(&mut g, &p);
        for &at in &chains {
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
