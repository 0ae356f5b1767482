//! Profiling aid for rule evaluation alone: the `netfilter` bench's first packet (nat
//! PREROUTING of a 10,000-service kube-proxy ruleset: KUBE-SERVICES → SVC → SEP → DNAT) in a
//! loop over 4,096 new flows to random services.
//!
//! `cargo run --profile bench -p sim-netfilter --example rules_hot -- [N] [SERVICES]`
//!
//! Count it with `valgrind --tool=callgrind --cache-sim=yes --collect-atstart=no
//! --toggle-collect='*first_loop*'` (instructions and simulated cache misses per packet).
use sim_core::{IfName, Packet, SimRng, SimTime, TcpFlags};
use sim_netfilter::synth::KubeServices;
use sim_netfilter::*;
use std::hint::black_box;
use std::net::Ipv4Addr;

fn packets(k: &KubeServices, n: usize) -> Vec<(Packet, CtState)> {
    let mut r = SimRng::derive(42, "bench/packets");
    let eth0 = IfName::new("eth0").expect("valid interface name");
    (0..n)
        .map(|i| {
            let (proto, svc) = k.service(r.below(k.services as u64) as usize);
            let src = std::net::SocketAddr::from((
                [10, 1, (i % 200) as u8, (i % 250 + 1) as u8],
                1024 + (i % 60000) as u16,
            ));
            let p = if proto == 17 {
                Packet::udp(src, svc.into())
            } else {
                Packet::tcp(src, svc.into(), TcpFlags::SYN)
            };
            let ct = CtState::for_packet(&p, CtInfoKind::New, 30);
            (p.on_iif(eth0), ct)
        })
        .collect()
}

#[inline(never)]
fn first_loop(rs: &Ruleset, pkts: &[(Packet, CtState)], n: usize) {
    let addrs = LocalAddrs::new()
        .add("eth0", Ipv4Addr::new(172, 18, 0, 2), 16)
        .clone();
    let mut state = RulesetState::new();
    let mut rng = SimRng::derive(1, "bench/statistic");
    for i in 0..n {
        let (p, ct) = pkts[i % pkts.len()];
        let mut ctx = EvalCtx::new(p, &addrs, SimTime::ZERO, &mut rng);
        ctx.ct = ct;
        black_box(rs.run_hook(Table::Nat, Hook::PreRouting, &mut ctx, &mut state, None));
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let arg = |s: Option<String>, default: usize, what: &str| match s {
        None => default,
        Some(s) => s.parse().unwrap_or_else(|_| {
            eprintln!("{what} must be a number, got {s:?}");
            std::process::exit(2);
        }),
    };
    let n = arg(args.next(), 1_000_000, "N");
    let services = arg(args.next(), 10_000, "SERVICES");
    let k = KubeServices::new(services, 2);
    let rs = Ruleset::from_save(&k.save_text()).unwrap_or_else(|e| {
        eprintln!("synthetic ruleset: {e}");
        std::process::exit(1);
    });
    let pkts = packets(&k, 4096);
    first_loop(&rs, &pkts, n);
    println!("{n} first packets through nat PREROUTING of {services} services");
}
