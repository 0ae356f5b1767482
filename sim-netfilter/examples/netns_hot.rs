//! Profiling aid for the hook pipeline: a node with a 10,000-service kube-proxy ruleset (the
//! `netns` bench's node) is set up once, then loops packets through `Netns::process`.
//!
//! `cargo run --release -p sim-netfilter --example netns_hot -- [established|first] [N] [FLOWS]`
//!
//! - `established` (default): N packets of FLOWS (default 4,096, as the bench) established
//!   flows (host network → service → DNAT + MASQUERADE, FORWARD through kube-proxy's filter
//!   chains; each flow's first packet was answered, so they are ctstate ESTABLISHED);
//! - `established-into`: the same through `process_into` with one reused egress buffer;
//! - `first`: N first packets of new flows (nat table, DNAT binding, MASQUERADE, confirm).
//!
//! `NFSIM_SERVICES=100` makes the ruleset hold 100 services instead of 10,000.
//!
//! No clock here (nfsim never reads one): time the loop with `perf stat` against a run with
//! N = 0 (the setup alone), or profile it with `perf record -g`.
use sim_core::{IfName, Packet, SimDuration, SimTime, TcpFlags};
use sim_netfilter::netns::{Egress, Ingress, Netns};
use sim_netfilter::synth::KubeServices;
use std::hint::black_box;
use std::net::{IpAddr, SocketAddr};

/// Services in the ruleset unless `NFSIM_SERVICES` says otherwise.
const SERVICES: usize = 10_000;

fn services() -> usize {
    std::env::var("NFSIM_SERVICES")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(SERVICES)
}

fn packet(k: &KubeServices, i: usize, sport: u16, client: u8) -> Packet {
    let (proto, svc) = k.service(i % k.services);
    let src = SocketAddr::new(IpAddr::from([172, 18, client, (i % 200) as u8 + 10]), sport);
    let dst = SocketAddr::V4(svc);
    if proto == 17 {
        Packet::udp(src, dst)
    } else {
        Packet::tcp(src, dst, TcpFlags::ACK)
    }
}

/// Sends `p`, the first packet of its flow, and the endpoint's answer back through the node,
/// so that the flow is ESTABLISHED (its entry has seen a reply), as in `benches/netns.rs`.
fn establish(ns: &mut Netns, p: Packet, from: Ingress) {
    let r = ns.process(SimTime::ZERO, p, from);
    let Some(Egress::Transmit { dev, packet, .. }) = r.out.first().copied() else {
        eprintln!("the first packet of {p} was not forwarded: {:?}", r.fate);
        std::process::exit(1);
    };
    let mut reply = packet;
    (reply.src, reply.dst) = (packet.dst, packet.src);
    if let (Some(s), Some(d)) = (packet.sport(), packet.dport()) {
        reply.set_sport(d);
        reply.set_dport(s);
    }
    let back = ns.process(SimTime::ZERO, reply, Ingress::Interface(dev));
    if !matches!(back.out.first(), Some(Egress::Transmit { packet, .. }) if packet.dst == p.src) {
        eprintln!("the reply to {p} did not come back: {:?}", back.fate);
        std::process::exit(1);
    }
}

/// The measured loops are functions of their own, so that `valgrind --tool=callgrind
/// --collect-atstart=no --toggle-collect='*established_loop*'` counts them alone.
#[inline(never)]
fn established_loop(ns: &mut Netns, flows: &[Packet], n: usize, from: Ingress) {
    let mut now = SimTime::ZERO;
    for i in 0..n {
        if i % flows.len() == flows.len() - 1 {
            now += SimDuration::from_millis(1);
            black_box(ns.drain_conntrack_events());
        }
        black_box(ns.process(now, flows[i % flows.len()], from));
    }
}

#[inline(never)]
fn established_into_loop(ns: &mut Netns, flows: &[Packet], n: usize, from: Ingress) {
    let mut now = SimTime::ZERO;
    let mut out = Vec::with_capacity(4);
    for i in 0..n {
        if i % flows.len() == flows.len() - 1 {
            now += SimDuration::from_millis(1);
            black_box(ns.drain_conntrack_events());
        }
        out.clear();
        let r = ns.process_into(now, flows[i % flows.len()], from, &mut out);
        black_box(out.first());
        black_box(r);
    }
}

#[inline(never)]
fn first_loop(ns: &mut Netns, k: &KubeServices, n: usize, from: Ingress) {
    for i in 0..n {
        // The same walk over flows as with 10,000 services (distinct tuples), whatever the
        // number of services.
        let svc = i.wrapping_mul(7919) % SERVICES % k.services;
        let sport = 1024 + (i / SERVICES % 60_000) as u16;
        let client = (i / (SERVICES * 60_000)) as u8 + 1;
        let mut p = packet(k, svc, sport, client);
        // Distinct tuples whatever the number of services: the source's third octet counts
        // the round of 200 sources.
        if let IpAddr::V4(a) = p.src {
            let o = a.octets();
            let i10k = i.wrapping_mul(7919) % SERVICES;
            p.src = IpAddr::from([
                o[0],
                o[1],
                o[2].wrapping_add((i10k / 200) as u8),
                10 + (i10k % 200) as u8,
            ]);
        }
        black_box(ns.process(SimTime::ZERO, p, from));
        // The events taken as a driver takes them between steps (and as the first-packet
        // benches do): a NEW event per flow.
        if i % 4096 == 4095 {
            black_box(ns.drain_conntrack_events());
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "established".into());
    let n: usize = match args.next() {
        None => 10_000_000,
        Some(s) => match s.parse() {
            Ok(v) => v,
            Err(_) => {
                eprintln!("N must be a number of packets, got {s:?}");
                std::process::exit(2);
            }
        },
    };
    let flows_n: usize = match args.next() {
        None => 4096,
        Some(s) => match s.parse() {
            Ok(v) if v > 0 => v,
            _ => {
                eprintln!("FLOWS must be a positive number of flows, got {s:?}");
                std::process::exit(2);
            }
        },
    };
    let k = KubeServices::new(services(), 2);
    let eth0 = Ingress::Interface(IfName::new("eth0").expect("valid interface name"));
    let mut ns = k.node();
    match mode.as_str() {
        "established" | "established-into" => {
            let flows: Vec<Packet> = (0..flows_n)
                .map(|i| packet(&k, i * 7, 20_000 + i as u16, 1))
                .collect();
            for p in &flows {
                establish(&mut ns, *p, eth0);
            }
            if mode == "established" {
                established_loop(&mut ns, &flows, n, eth0);
            } else {
                established_into_loop(&mut ns, &flows, n, eth0);
            }
        }
        "first" => first_loop(&mut ns, &k, n, eth0),
        other => {
            eprintln!("mode must be `established`, `established-into` or `first`, got {other:?}");
            std::process::exit(2);
        }
    }
    println!(
        "{mode}: {n} packets, {} conntrack entries",
        ns.conntrack().len()
    );
}
