//! How flat a first packet's cost is in the number of Services, measured the way a shared
//! machine allows: rounds alternating 65,536 new flows through a node of 10,000 Services and
//! 65,536 through a node of 100 (fresh copies of each, as `benches/netns.rs` uses them), the
//! ratio taken per round so that the machine's slow minutes hit both sides.
//!
//! `cargo run --release -p sim-netfilter --example first_packet_ratio -- [ROUNDS]`
//!
//! Prints the median and lowest time per first packet on each side and the quartiles of the
//! per-round ratio. The flows are `benches/netns.rs`'s: client 172.18.x.y (10,000 of them)
//! to Service `i × 7919 mod 10,000`, a source port that moves every 10,000 flows.
use sim_core::{IfName, Packet, SimTime, TcpFlags};
use sim_netfilter::netns::{Ingress, Netns};
use sim_netfilter::synth::KubeServices;
use std::hint::black_box;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

const SERVICES: usize = 10_000;
const FLOWS: usize = 65_536;

fn first_packet(k: &KubeServices, i: usize) -> Packet {
    let pick = i.wrapping_mul(7919) % SERVICES;
    let sport = 1024 + (i / SERVICES % 60_000) as u16;
    let (proto, svc) = k.service(pick % k.services);
    let src = IpAddr::from([172, 18, 1 + (pick / 200) as u8, 10 + (pick % 200) as u8]);
    let (src, dst) = (SocketAddr::new(src, sport), SocketAddr::V4(svc));
    if proto == 17 {
        Packet::udp(src, dst)
    } else {
        Packet::tcp(src, dst, TcpFlags::ACK)
    }
}

/// Nanoseconds per first packet for `FLOWS` new flows from flow `from` on, through a fresh
/// copy of `base`; events drained every 4,096 flows, as a driver does.
fn round(base: &Netns, k: &KubeServices, from: usize, eth0: Ingress) -> f64 {
    let mut n = base.clone();
    let packets: Vec<Packet> = (0..FLOWS).map(|j| first_packet(k, from + j)).collect();
    let t = Instant::now();
    for (j, p) in packets.into_iter().enumerate() {
        black_box(n.process(SimTime::ZERO, p, eth0));
        if j % 4096 == 4095 {
            black_box(n.drain_conntrack_events());
        }
    }
    t.elapsed().as_nanos() as f64 / FLOWS as f64
}

fn main() {
    let rounds: usize = match std::env::args().nth(1) {
        None => 15,
        Some(s) => match s.parse() {
            Ok(v) if v > 0 => v,
            _ => {
                eprintln!("ROUNDS must be a positive number, got {s:?}");
                std::process::exit(2);
            }
        },
    };
    let eth0 = Ingress::Interface(IfName::new("eth0").expect("valid interface name"));
    let ks = [KubeServices::new(SERVICES, 2), KubeServices::new(100, 2)];
    let bases: Vec<Netns> = ks.iter().map(KubeServices::node).collect();
    let (mut big, mut small, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let a = round(&bases[0], &ks[0], r * FLOWS, eth0);
        let b = round(&bases[1], &ks[1], r * FLOWS, eth0);
        big.push(a);
        small.push(b);
        ratios.push(a / b);
    }
    for v in [&mut big, &mut small, &mut ratios] {
        v.sort_by(f64::total_cmp);
    }
    let q = |v: &[f64], f: f64| v[((v.len() - 1) as f64 * f).round() as usize];
    println!(
        "10,000 Services: median {:.0} ns, lowest {:.0} | 100: median {:.0} ns, lowest {:.0} | \
         ratio per round: q1 {:.2}, median {:.2}, q3 {:.2} ({rounds} rounds)",
        q(&big, 0.5),
        big[0],
        q(&small, 0.5),
        small[0],
        q(&ratios, 0.25),
        q(&ratios, 0.5),
        q(&ratios, 0.75),
    );
}
