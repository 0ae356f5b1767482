//! `nfsim trace --all-branches` (issue #9): every statistic outcome of one packet, through
//! the library (`nfsim::explain::trace` with `all_branches`), without printing.
//!
//! - a kube-proxy Service of 1,000 (and 100) endpoints: the cascade is walked once, forking
//!   at each statistic rule, and the node is run once per endpoint (it used to re-run the
//!   whole ruleset per path prefix: 1,999 runs, each re-walking the chain);
//! - 1,000 always-met `statistic` rules: one path, one run (it used to be 1,001 runs, each
//!   rewriting the forced rules through a restore).
//!
//! The exact probabilities are kept (numerators of up to ~31,000 bits for the last endpoint
//! of 1,000); printing them as decimal text is not measured here.
use criterion::{criterion_group, criterion_main, Criterion};
use nfsim::explain::{trace, NodeSpec, TraceOptions};
use nfsim::testkit::examples::{always_met_statistic_rules, kube_proxy_cascade_rules};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let node = NodeSpec::parse("172.18.0.2", 24, Some("10.244.0.0/16"), 1).unwrap();
    let opts = TraceOptions {
        all_branches: true,
        ..TraceOptions::default()
    };
    let mut g = c.benchmark_group("branches");
    g.sample_size(10);
    for n in [100usize, 1000] {
        let ns = node.build(&kube_proxy_cascade_rules(n), "bench").unwrap();
        let pkt = "udp 10.244.200.9:40000 -> 10.96.0.10:53".parse().unwrap();
        g.bench_function(format!("kube_proxy_{n}_endpoints"), |b| {
            b.iter(|| {
                let r = trace(&node, &ns, pkt, &opts).unwrap();
                assert_eq!(r.branches.as_ref().map(|b| b.outcomes.len()), Some(n));
                black_box(r)
            })
        });
    }
    let ns = node
        .build(&always_met_statistic_rules(1000), "bench")
        .unwrap();
    let pkt = "udp 10.244.200.9:40000 -> 172.18.0.9:53".parse().unwrap();
    g.bench_function("always_met_1000", |b| {
        b.iter(|| black_box(trace(&node, &ns, pkt, &opts).unwrap()))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
