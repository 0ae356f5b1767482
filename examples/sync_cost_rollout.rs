//! A rolling update among 20,000 Services under `kubeProxy.syncCost: modelled`, in
//! iptables and nftables mode: how late web's new endpoint reaches the rules, next to the
//! same run with instant syncs (`benches/support/rollout.rs` builds the scenario;
//! `tests/sync_cost.rs` runs it at 300 Services):
//!
//! `cargo run --release --example sync_cost_rollout -- [SERVICES]`
//!
//! Prints, per mode and cost, the modelled time of the first full sync and of the sync
//! after the change, and when the first query reached the new endpoint after kube-proxy
//! saw the change.
use nfsim::cluster::sim::{RunOptions, Simulation, What};
use nfsim::scenario::load_str;

#[path = "../benches/support/rollout.rs"]
mod rollout;

fn main() {
    let services: usize = std::env::args().nth(1).map_or(20_000, |s| {
        s.parse().unwrap_or_else(|_| {
            eprintln!("SERVICES: a number, got {s:?}");
            std::process::exit(2)
        })
    });
    let seen_ns = rollout::update_at_secs(services) * 1_000_000_000 + 100_000_000;
    println!("mode      cost      first sync   sync after change   first query to web-new");
    for mode in ["iptables", "nftables"] {
        for cost in ["modelled", "instant"] {
            let text = rollout::rollout_scenario(services, mode, cost);
            let sc = load_str("rollout.yaml", &text).unwrap_or_else(|e| {
                eprintln!("{e}");
                std::process::exit(2)
            });
            let opts = RunOptions {
                record_timeline: true,
                ..RunOptions::default()
            };
            let r = Simulation::new(sc, opts)
                .and_then(|s| s.finish())
                .unwrap_or_else(|e| {
                    eprintln!("{e}");
                    std::process::exit(2)
                });
            let took = |after: u64| {
                r.timeline.iter().find_map(|e| match &e.what {
                    What::Sync { took, .. } if e.t_ns >= after => {
                        Some(took.map_or(0, |t| t.restore_ns + t.cleanup_ns))
                    }
                    _ => None,
                })
            };
            let first = r.timeline.iter().find_map(|e| match &e.what {
                What::Dnat { to, .. } if to == "10.244.1.11:8080" => Some(e.t_ns),
                _ => None,
            });
            let s = |ns: Option<u64>| {
                ns.map_or("-".to_string(), |v| format!("{:.3} s", v as f64 / 1e9))
            };
            println!(
                "{mode:<9} {cost:<9} {:>10} {:>19} {:>24}",
                s(took(0)),
                s(took(seen_ns)),
                s(first.map(|f| f.saturating_sub(seen_ns))),
            );
        }
    }
}
