//! One simulated hour of a generated cluster, timed, for `/usr/bin/time -v` (peak memory):
//!
//! `cargo run --release --example big_cluster -- [NODES SERVICES ENDPOINTS CLIENTS]`
//!
//! The defaults are issue 15's big cluster: 1,000 nodes, 5,000 UDP Services, 50,000 endpoint
//! pods, 10,000 per-query-port clients querying a Service every 30 s (the generator of
//! `benches/cluster.rs`, which runs the 100-node size under criterion).
use nfsim::cluster::sim::{RunOptions, Simulation};
use nfsim::scenario::load_str;

#[path = "../benches/support/big.rs"]
mod big;

fn arg(args: &[String], i: usize, default: usize) -> usize {
    match args.get(i) {
        None => default,
        Some(s) => s.parse().unwrap_or_else(|_| {
            eprintln!("argument {}: {s:?} is not a number", i + 1);
            std::process::exit(2)
        }),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (n, s, e, k) = (
        arg(&args, 0, 1000),
        arg(&args, 1, 5000),
        arg(&args, 2, 50_000),
        arg(&args, 3, 10_000),
    );
    let t0 = std::time::Instant::now();
    let text = big::big_scenario(n, s, e, k);
    let sc = match load_str("big.yaml", &text) {
        Ok(sc) => sc,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2)
        }
    };
    let t1 = std::time::Instant::now();
    let sim = match Simulation::new(sc, RunOptions::default()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2)
        }
    };
    let r = match sim.finish() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2)
        }
    };
    let t2 = std::time::Instant::now();
    let sent: u64 = r.clients.iter().map(|c| c.sent).sum();
    let answered: u64 = r.clients.iter().map(|c| c.answered).sum();
    println!(
        "{n} nodes / {s} services / {e} endpoints / {k} clients, 1 h: load {:.2} s, run {:.2} s, {} events, {sent} queries, {answered} answered",
        (t1 - t0).as_secs_f64(),
        (t2 - t1).as_secs_f64(),
        r.events
    );
}
