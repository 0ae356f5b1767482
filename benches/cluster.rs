//! Cluster simulation speed: the incident scenario (1 simulated hour), and a generated
//! cluster of many nodes, Services, endpoints and clients for one simulated hour (scale set
//! by NFSIM_BENCH_NODES / _SERVICES / _ENDPOINTS / _CLIENTS; defaults are the issue's
//! 100 / 1000 / 10000 / 1000). Peak memory (VmHWM) is printed after the run.
//!
//! Every node is a real `Netns` holding kube-proxy's rules (about 43,000 lines of restore
//! text at full size). One kube-proxy instance renders for all nodes (one cluster CIDR) and
//! its payload is parsed and compiled once per sync: the other nodes take that outcome
//! through the group's `RestoreMemo` (their rulesets have the same lineage) and share its
//! chains. Measured on the 2-core development machine (release, one core):
//!
//! | nodes / Services / endpoints / clients | wall | peak RSS |
//! |---|---|---|
//! | incident scenario, 1 h | 1.5–2.1 ms | |
//! | 100 / 1,000 / 10,000 / 1,000 | 2.4–2.9 s | 257 MiB |
//! | 1,000 / 5,000 / 50,000 / 10,000 (`examples/big_cluster.rs` under `/usr/bin/time -v`, issue 15; load average 1.2–1.9) | 12.6–17.2 s CPU (main at 2110424 alongside: 22.6–25.6 s) | 0.79 GiB (2110424: 1.50 GiB) |
//!
//! Before the memo each node re-parsed the payload at start and at the hourly full resync:
//! 26–33 s and 2,170 MiB at full size, 83 % of it in `Netns::restore`. What remains is
//! packets (959,100 events), the two real restores and the per-node clone of each outcome.
use criterion::{criterion_group, criterion_main, Criterion};
use nfsim::cluster::sim::{RunOptions, Simulation};
use nfsim::scenario::{load_file, load_str};

#[path = "support/big.rs"]
mod big;
use big::big_scenario;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn vm_hwm_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

fn bench(c: &mut Criterion) {
    let incident = load_file(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/stale-dns-udp.yaml"
    ))
    .unwrap();
    c.bench_function("incident_1h", |b| {
        b.iter(|| {
            let sim = Simulation::new(incident.clone(), RunOptions::default()).unwrap();
            let r = sim.finish().unwrap();
            assert!(r.passed());
            r.events
        })
    });

    let (n, s, e, k) = (
        env("NFSIM_BENCH_NODES", 100),
        env("NFSIM_BENCH_SERVICES", 1000),
        env("NFSIM_BENCH_ENDPOINTS", 10_000),
        env("NFSIM_BENCH_CLIENTS", 1000),
    );
    let text = big_scenario(n, s, e, k);
    let sc = load_str("big.yaml", &text).unwrap();
    // One timed run outside criterion (it is long): wall time and peak memory.
    let t0 = std::time::Instant::now();
    let sim = Simulation::new(sc, RunOptions::default()).unwrap();
    let r = sim.finish().unwrap();
    eprintln!(
        "big cluster {n} nodes / {s} services / {e} endpoints / {k} clients, 1 h: {:.2} s wall, {} events, peak RSS {} MiB",
        t0.elapsed().as_secs_f64(),
        r.events,
        vm_hwm_kib().unwrap_or(0) / 1024
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
