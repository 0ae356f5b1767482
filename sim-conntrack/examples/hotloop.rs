//! Profiling aid: the per-packet calls on a cache-resident table (4,096 flows), to run under
//! `perf stat` / `perf record` or callgrind. `hotloop [MODE] [N]`, MODE one of
//!
//! - `udp` (default): `conntrack_in` for packets of known UDP flows;
//! - `tcp`: `conntrack_in` for plain ACKs of ESTABLISHED TCP connections;
//! - `pipeline`: a DNAT'd and masqueraded established TCP flow's packet as a node handles
//!   it: `conntrack_in`, `rule_view`, `nat_packet` (Dst), `nat_packet` (Src), `confirm`.
//!
//! With callgrind, `--toggle-collect='*hot_loop*'` counts the loop alone; divide by N.
use sim_conntrack::{Conntrack, CtVerdict, Manip, NatRange, Sysctls};
use sim_core::{Packet, SimTime, TcpFlags};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

fn client(i: u32) -> SocketAddr {
    SocketAddr::new(
        IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i / 50)),
        20_000 + (i % 50) as u16,
    )
}

fn service() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 96, 0, 1)), 53)
}

/// One packet each way per flow, through DNAT to an endpoint and MASQUERADE in `pipeline`
/// mode (so that the flows are established); returns the original-direction packets.
fn setup(ct: &mut Conntrack, mode: &str) -> Vec<Packet> {
    let tcp = mode != "udp";
    let pk = |a: SocketAddr, b: SocketAddr| {
        if tcp {
            Packet::tcp(a, b, TcpFlags::ACK)
        } else {
            Packet::udp(a, b)
        }
    };
    let flows: Vec<Packet> = (0..4096).map(|i| pk(client(i), service())).collect();
    let endpoint = NatRange::to_addr_port(IpAddr::V4(Ipv4Addr::new(10, 244, 1, 7)), 5353);
    let masq = NatRange::to_addr(IpAddr::V4(Ipv4Addr::new(10, 244, 0, 1)));
    for p in &flows {
        let mut p = *p;
        let CtVerdict::Tracked(h) = ct.conntrack_in(SimTime::ZERO, &p) else {
            continue;
        };
        if mode == "pipeline" {
            let _ = ct.nat_setup(h.id, Manip::Dst, &endpoint);
            ct.nat_packet(h, Manip::Dst, &mut p);
            let _ = ct.nat_setup(h.id, Manip::Src, &masq);
            ct.nat_packet(h, Manip::Src, &mut p);
        }
        let _ = ct.confirm(SimTime::ZERO, h);
        // The endpoint answers: the reply is the packet with its ends swapped.
        let (a, b) = (
            SocketAddr::new(p.dst, p.dport().unwrap_or(0)),
            SocketAddr::new(p.src, p.sport().unwrap_or(0)),
        );
        if let CtVerdict::Tracked(r) = ct.conntrack_in(SimTime::ZERO, &pk(a, b)) {
            let _ = ct.confirm(SimTime::ZERO, r);
        }
    }
    flows
}

#[inline(never)]
fn hot_loop(ct: &mut Conntrack, flows: &[Packet], n: u32, pipeline: bool) {
    let now = SimTime::from_secs(1);
    for i in 0..n {
        let mut p = flows[(i & 4095) as usize];
        let v = ct.conntrack_in(now, &p);
        if pipeline {
            if let CtVerdict::Tracked(h) = v {
                black_box(ct.rule_view(h.id));
                ct.nat_packet(h, Manip::Dst, &mut p);
                ct.nat_packet(h, Manip::Src, &mut p);
                let _ = ct.confirm(now, h);
            }
        }
        black_box((v, p));
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "udp".into());
    if !matches!(mode.as_str(), "udp" | "tcp" | "pipeline") {
        eprintln!("mode must be `udp`, `tcp` or `pipeline`, got {mode:?}");
        std::process::exit(2);
    }
    let n: u32 = match args.next().map(|s| s.parse()) {
        None => 20_000_000,
        Some(Ok(v)) => v,
        Some(Err(_)) => {
            eprintln!("N must be a number of packets");
            std::process::exit(2);
        }
    };
    let mut s = Sysctls::default();
    s.max = 0;
    let mut ct = Conntrack::new(1, "hotloop", s);
    let flows = setup(&mut ct, &mode);
    // No clock here (nfsim never reads one): time the whole program with `perf stat` or
    // count instructions with `valgrind --tool=callgrind`, and divide by `n`.
    hot_loop(&mut ct, &flows, n, mode == "pipeline");
    println!(
        "{mode}: {n} packets over {} flows, {} entries",
        flows.len(),
        ct.len()
    );
}
