//! Many clients on one pod: 10,000 UDP clients in one pod, each drawing a new ephemeral
//! source port per query (the default), querying a DNS Service every 30 s for one simulated
//! hour (1.2 M queries). Each send draws a free port against the pod's table of bound ports
//! and each answer finds its socket in it: O(log n) in the sockets of the pod, where the
//! table used to be rebuilt from every client for every send (2,000 clients took 53 s per
//! simulated minute).
//!
//! Criterion measures 1,000 clients for an hour, and one client whose queries are never
//! answered (per-query ports, a 1 h timeout, 100 queries a second for 10 simulated seconds,
//! so 1,000 queries pile up in flight); the full 10,000 clients (NFSIM_BENCH_POD_CLIENTS) run
//! once after, timed by the wall clock, with peak memory.
use criterion::{criterion_group, criterion_main, Criterion};
use nfsim::cluster::sim::{RunOptions, Simulation};
use nfsim::scenario::load_str;

/// One node, one DNS pod behind a Service, one client pod holding `clients` clients.
fn one_pod(clients: usize) -> String {
    let mut s = String::from(
        "name: one-pod\nduration: 1h\nnodes:\n  - {name: n1, address: 192.168.0.1, podCIDR: 10.244.1.0/24}\n\
pods:\n  - {name: dns, labels: {app: dns}, node: n1, ip: 10.244.1.5, apps: [{udpServer: {port: 53}}]}\n  - {name: cl, node: n1, ip: 10.244.1.9}\n\
services:\n  - {metadata: {name: dns}, spec: {clusterIP: 10.96.0.10, selector: {app: dns}, ports: [{protocol: UDP, port: 53}]}}\n\
clients:\n",
    );
    for c in 0..clients {
        s.push_str(&format!(
            "  - {{name: c{c}, pod: cl, udp: {{target: default/dns, interval: 30s, jitter: 1s, start: {}ms}}}}\n",
            (c * 3) % 30_000
        ));
    }
    s
}

/// One client whose queries go to an address nobody has (the router drops them).
fn unanswered() -> &'static str {
    "name: unanswered\nduration: 10s\nnodes:\n  - {name: n1, address: 192.168.0.1, podCIDR: 10.244.1.0/24}\n\
pods:\n  - {name: cl, node: n1, ip: 10.244.1.9}\n\
clients:\n  - {name: c, pod: cl, udp: {target: 192.168.0.77:9, interval: 10ms, timeout: 1h}}\n"
}

fn vm_hwm_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

fn run(sc: &nfsim::scenario::Scenario) -> u64 {
    Simulation::new(sc.clone(), RunOptions::default())
        .unwrap()
        .finish()
        .unwrap()
        .events
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("clients");
    g.sample_size(10);
    let sc = load_str("one-pod.yaml", &one_pod(1000)).unwrap();
    g.bench_function("one_pod_1000_clients_1h", |b| b.iter(|| run(&sc)));
    let sc = load_str("unanswered.yaml", unanswered()).unwrap();
    g.bench_function("unanswered_per_query_ports_10s", |b| b.iter(|| run(&sc)));
    g.finish();

    // The full size, once (one run takes tens of seconds): wall time and peak memory.
    let n: usize = std::env::var("NFSIM_BENCH_POD_CLIENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let sc = load_str("one-pod.yaml", &one_pod(n)).unwrap();
    let t0 = std::time::Instant::now();
    let events = run(&sc);
    eprintln!(
        "one pod, {n} clients, 1 h: {:.2} s wall, {events} events, peak RSS {} MiB",
        t0.elapsed().as_secs_f64(),
        vm_hwm_kib().unwrap_or(0) / 1024
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
