//! sim-netfilter benchmarks on a kube-proxy-shaped ruleset of 10,000 services
//! (two endpoints each; ≈ 110k lines of iptables-save).
//!
//! - `first_packet/nat_prerouting_10k`: a new flow to a random service through nat
//!   PREROUTING (KUBE-SERVICES → KUBE-SVC → KUBE-SEP → DNAT). Target ≤ 2 µs.
//! - `first_packet/full_path_10k`: the same plus filter FORWARD and nat POSTROUTING.
//! - `established/filter_forward_10k`: an established flow through filter FORWARD (the nat
//!   table is not consulted for it), the per-packet rule cost of the ≥ 3M packets/s target.
//! - `text/parse_10k` (target ≤ 500 ms), `text/save_10k`, `text/noflush_partial_sync_10k`.

use std::hint::black_box;
use std::net::Ipv4Addr;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use sim_core::{IfName, Packet, SimRng, SimTime, TcpFlags};
use sim_netfilter::synth::KubeServices;
use sim_netfilter::*;

const SERVICES: usize = 10_000;

fn packets(k: &KubeServices, n: usize) -> Vec<Packet> {
    let mut r = SimRng::derive(42, "bench/packets");
    let eth0 = IfName::new("eth0").unwrap();
    (0..n)
        .map(|i| {
            let (proto, svc) = k.service(r.below(k.services as u64) as usize);
            let src = format!("10.1.{}.{}:{}", i % 200, i % 250 + 1, 1024 + i % 60000);
            let p = if proto == 17 {
                Packet::udp(src.parse().unwrap(), svc.into())
            } else {
                Packet::tcp(src.parse().unwrap(), svc.into(), TcpFlags::SYN)
            };
            p.on_iif(eth0)
        })
        .collect()
}

fn ct(p: &Packet, info: CtInfoKind) -> CtState {
    CtState::for_packet(p, info, 30)
}

fn bench(c: &mut Criterion) {
    let k = KubeServices::new(SERVICES, 2);
    let text = k.save_text();
    let rs = Ruleset::from_save(&text).expect("synthetic ruleset parses");
    let addrs = LocalAddrs::new()
        .add("eth0", Ipv4Addr::new(172, 18, 0, 2), 16)
        .clone();
    let pkts = packets(&k, 4096);
    let new_cts: Vec<CtState> = pkts.iter().map(|p| ct(p, CtInfoKind::New)).collect();
    let est_cts: Vec<CtState> = pkts
        .iter()
        .map(|p| ct(p, CtInfoKind::Established))
        .collect();

    let mut g = c.benchmark_group("first_packet");
    g.measurement_time(Duration::from_secs(3));
    {
        let mut state = RulesetState::new();
        let mut rng = SimRng::derive(1, "bench/statistic");
        let mut i = 0;
        g.bench_function("nat_prerouting_10k", |b| {
            b.iter(|| {
                let j = i % pkts.len();
                i += 1;
                let mut ctx = EvalCtx::new(pkts[j], &addrs, SimTime::ZERO, &mut rng);
                ctx.ct = new_cts[j];
                let v = rs.run_hook(Table::Nat, Hook::PreRouting, &mut ctx, &mut state, None);
                black_box(v)
            })
        });
    }
    {
        let mut state = RulesetState::new();
        let mut rng = SimRng::derive(1, "bench/statistic");
        let eth1 = IfName::new("eth1").unwrap();
        let mut i = 0;
        g.bench_function("full_path_10k", |b| {
            b.iter(|| {
                let j = i % pkts.len();
                i += 1;
                let mut ctx = EvalCtx::new(pkts[j], &addrs, SimTime::ZERO, &mut rng);
                ctx.ct = new_cts[j];
                let v1 = rs.run_hook(Table::Nat, Hook::PreRouting, &mut ctx, &mut state, None);
                ctx.packet.oif = Some(eth1);
                let v2 = rs.run_hook(Table::Filter, Hook::Forward, &mut ctx, &mut state, None);
                let v3 = rs.run_hook(Table::Nat, Hook::PostRouting, &mut ctx, &mut state, None);
                black_box((v1, v2, v3))
            })
        });
    }
    {
        // The same walk on a 100-service ruleset: what the work costs when it all fits in
        // cache; the 10k figure above adds the cache misses of touching cold chains.
        let small = KubeServices::new(100, 2);
        let srs = Ruleset::from_save(&small.save_text()).expect("parses");
        let spkts = packets(&small, 1024);
        let scts: Vec<CtState> = spkts.iter().map(|p| ct(p, CtInfoKind::New)).collect();
        let mut state = RulesetState::new();
        let mut rng = SimRng::derive(1, "bench/statistic");
        let mut i = 0;
        g.bench_function("nat_prerouting_100", |b| {
            b.iter(|| {
                let j = i % spkts.len();
                i += 1;
                let mut ctx = EvalCtx::new(spkts[j], &addrs, SimTime::ZERO, &mut rng);
                ctx.ct = scts[j];
                black_box(srs.run_hook(Table::Nat, Hook::PreRouting, &mut ctx, &mut state, None))
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("established");
    g.measurement_time(Duration::from_secs(3));
    {
        let mut state = RulesetState::new();
        let mut rng = SimRng::derive(1, "bench/statistic");
        let eth1 = IfName::new("eth1").unwrap();
        let mut i = 0;
        g.bench_function("filter_forward_10k", |b| {
            b.iter(|| {
                let j = i % pkts.len();
                i += 1;
                let mut p = pkts[j];
                p.oif = Some(eth1);
                let mut ctx = EvalCtx::new(p, &addrs, SimTime::ZERO, &mut rng);
                ctx.ct = est_cts[j];
                black_box(rs.run_hook(Table::Filter, Hook::Forward, &mut ctx, &mut state, None))
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("text");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(8));
    // Parsing and committing; freeing the result is not part of it.
    g.bench_function("parse_10k", |b| {
        b.iter_with_large_drop(|| Ruleset::from_save(&text).unwrap())
    });
    let state = RulesetState::new();
    g.bench_function("save_10k", |b| {
        b.iter(|| black_box(rs.save(&state, &SaveOptions::default())))
    });
    // kube-proxy's partial sync: KUBE-SERVICES rewritten, one service's chains replaced.
    let mut payload = String::from("*nat\n:KUBE-SERVICES - [0:0]\n");
    let svc = k.svc_chain(17);
    payload.push_str(&format!(":{svc} - [0:0]\n"));
    for line in text.lines() {
        if line.starts_with("-A KUBE-SERVICES ") || line.starts_with(&format!("-A {svc} ")) {
            payload.push_str(line);
            payload.push('\n');
        }
    }
    payload.push_str("COMMIT\n");
    g.bench_function("noflush_partial_sync_10k", |b| {
        b.iter_batched(
            || rs.clone(),
            |mut r| {
                r.restore(
                    &payload,
                    &RestoreOptions {
                        noflush: true,
                        counters: false,
                    },
                )
                .unwrap();
                black_box(r)
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
