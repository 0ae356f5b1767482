//! `trace --all-branches` at scale, through the library: a kube-proxy Service with 1,000
//! endpoints and 1,000 always-met `statistic` rules. The walk forks at each statistic rule
//! instead of walking the chain again per branch, so both take a fraction of a second in a
//! debug build (they took minutes when every branch re-ran the whole ruleset).

use nfsim::explain::MAX_BRANCH_RUNS;
use nfsim::explain::{trace, Dyadic, NodeSpec, TraceOptions};
use nfsim::testkit::examples::{
    always_met_statistic_rules, coin_flip_mark_rules, kube_proxy_cascade_rules,
};
use sim_core::Packet;

fn branches_of(rules: &str, packet: &str) -> nfsim::explain::BranchReport {
    let node = NodeSpec::parse("172.18.0.2", 24, Some("10.244.0.0/16"), 1).unwrap();
    let ns = node.build(rules, "generated.rules").unwrap();
    let pkt: Packet = packet.parse().unwrap();
    let opts = TraceOptions {
        all_branches: true,
        ..TraceOptions::default()
    };
    trace(&node, &ns, pkt, &opts).unwrap().branches.unwrap()
}

#[test]
fn a_service_with_1000_endpoints_has_1000_exact_outcomes_from_one_walk() {
    const N: usize = 1000;
    let b = branches_of(
        &kube_proxy_cascade_rules(N),
        "udp 10.244.200.9:40000 -> 10.96.0.10:53",
    );
    assert_eq!(b.outcomes.len(), N);
    assert_eq!(b.runs, N, "one run per path");
    assert_eq!(b.statistic_rules, N - 1);
    assert!(b.sums_to_one);
    // The kernel's first threshold: round(0.0010000000 × 2^31) = 2147484 (xt_statistic
    // stores `--probability` that way).
    assert_eq!(
        b.outcomes[0].exact(),
        &Dyadic::new((0.001f64 * 2147483648.0).round() as u64, 31)
    );
    for (i, o) in b.outcomes.iter().enumerate() {
        let ep = format!("10.244.{}.{}:53", 1 + i / 250, 1 + i % 250);
        assert_eq!(
            o.outcome.dnat.as_deref(),
            Some(format!("10.96.0.10:53 -> {ep}").as_str()),
            "outcome {i} in the chain's order"
        );
        assert!(!o.outcome.masqueraded);
        let p = o.exact().to_f64();
        assert!((p - 1.0 / N as f64).abs() < 1e-9, "outcome {i}: {p}");
        // The path: every earlier statistic rule failed, then this one matched (the last
        // endpoint's rule has no statistic match).
        let path = &o.paths[0];
        assert_eq!(path.len(), i.min(N - 2) + 1, "outcome {i}");
        assert!(path[..path.len() - 1].iter().all(|d| !d.matched));
        assert_eq!(path.last().unwrap().matched, i + 1 < N);
        assert!(o.rules_matched[0]
            .iter()
            .any(|r| r.ends_with(&format!("-j DNAT --to-destination {ep}"))));
    }
}

#[test]
fn a_thousand_always_met_statistic_rules_are_one_outcome_of_probability_one() {
    let b = branches_of(
        &always_met_statistic_rules(1000),
        "udp 10.244.200.9:40000 -> 172.18.0.9:53",
    );
    assert_eq!(b.outcomes.len(), 1);
    assert_eq!(b.runs, 1);
    assert_eq!(b.statistic_rules, 1000);
    let o = &b.outcomes[0];
    assert!(o.exact().is_one());
    assert_eq!(o.outcome.verdict, "transmitted");
    assert_eq!(o.paths[0].len(), 1000);
    assert!(o.paths[0]
        .iter()
        .all(|d| d.matched && d.probability.exact().is_one()));
}

#[test]
fn forks_in_two_tables_multiply_and_are_followed_depth_first() {
    // A coin in mangle PREROUTING sets a mark; nat PREROUTING's coin picks a DNAT; filter
    // FORWARD drops marked packets sent to the first endpoint. Four paths, three outcomes.
    let rules = "\
*mangle
-A PREROUTING -m statistic --mode random --probability 0.25 -j MARK --set-mark 0x1
COMMIT
*nat
-A PREROUTING -d 10.96.0.1/32 -m statistic --mode random --probability 0.5 -j DNAT --to-destination 10.244.1.1
-A PREROUTING -d 10.96.0.1/32 -j DNAT --to-destination 10.244.1.2
COMMIT
*filter
-A FORWARD -d 10.244.1.1/32 -m mark --mark 0x1 -j DROP
COMMIT
";
    let b = branches_of(rules, "tcp 10.244.200.9:40000 -> 10.96.0.1:80");
    assert_eq!(b.runs, 4);
    assert!(b.sums_to_one);
    let got: Vec<(String, String, Option<String>)> = b
        .outcomes
        .iter()
        .map(|o| {
            (
                o.probability.fraction(),
                o.outcome.verdict.clone(),
                o.outcome.dnat.clone(),
            )
        })
        .collect();
    let dnat = |ep: &str| Some(format!("10.96.0.1:80 -> {ep}:80"));
    assert_eq!(
        got,
        [
            ("1/8".to_string(), "dropped".to_string(), None),
            (
                "1/2".to_string(),
                "transmitted".to_string(),
                dnat("10.244.1.2")
            ),
            (
                "3/8".to_string(),
                "transmitted".to_string(),
                dnat("10.244.1.1")
            ),
        ]
    );
    // The marked packet to the second endpoint and the unmarked one merge: two paths.
    assert_eq!(b.outcomes[1].paths.len(), 2);
    let first: Vec<(String, bool)> = b.outcomes[1].paths[0]
        .iter()
        .map(|d| (d.table.clone(), d.matched))
        .collect();
    assert_eq!(
        first,
        [("mangle".to_string(), true), ("nat".to_string(), false)]
    );
}

/// 2^n paths: the run limit is checked as the walks fork, so 16, 20 and 64 coin flips cost
/// `MAX_BRANCH_RUNS` runs and bounded memory (before, 16 took 358 MB in one walk and 20
/// aborted on allocation), and the report says it stopped, with the exact probability its
/// outcomes cover.
#[test]
fn coin_flips_past_the_run_limit_stop_at_it_and_say_so() {
    for n in [16usize, 20, 64] {
        let b = branches_of(
            &coin_flip_mark_rules(n),
            "udp 10.244.200.9:40000 -> 172.18.0.9:53",
        );
        assert!(b.stopped_at_limit, "{n} rules");
        assert_eq!(b.run_limit, MAX_BRANCH_RUNS);
        assert_eq!(b.runs, MAX_BRANCH_RUNS, "{n} rules");
        assert!(!b.sums_to_one);
        // Each run is one path through n coins, each decided with 1/2: 2^-n.
        let paths: Vec<_> = b.outcomes.iter().flat_map(|o| &o.paths).collect();
        assert_eq!(paths.len(), MAX_BRANCH_RUNS);
        assert!(paths.iter().all(|p| p.len() == n), "{n} rules");
        let each = Dyadic::new(1, n as u32);
        let covered = (0..MAX_BRANCH_RUNS).fold(Dyadic::zero(), |t, _| t.add(&each));
        assert_eq!(b.total.exact(), &covered);
        assert!(b
            .notes
            .iter()
            .any(|n| n.contains("stopped at the limit of 4096 runs")));
        assert!(b.text().contains("stopped at the run limit"));
    }
    // Below the limit nothing changes: 2^10 paths, every one followed.
    let b = branches_of(
        &coin_flip_mark_rules(10),
        "udp 10.244.200.9:40000 -> 172.18.0.9:53",
    );
    assert!(!b.stopped_at_limit);
    assert_eq!(b.runs, 1024);
    assert!(b.sums_to_one);
}
