//! Profiling aid: `conntrack_in` on a cache-resident table (4,096 UDP flows), to run under
//! `perf stat` / `perf record` or callgrind.
use sim_conntrack::{Conntrack, CtVerdict, Sysctls};
use sim_core::{Packet, SimTime};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

fn main() {
    let mut s = Sysctls::default();
    s.max = 0;
    let mut ct = Conntrack::new(1, "hotloop", s);
    let flow = |i: u32| {
        let c = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i / 50));
        let svc = IpAddr::V4(Ipv4Addr::new(10, 96, 0, 1));
        Packet::udp(
            SocketAddr::new(c, 20_000 + (i % 50) as u16),
            SocketAddr::new(svc, 53),
        )
    };
    let pk: Vec<Packet> = (0..4096).map(flow).collect();
    for p in &pk {
        if let CtVerdict::Tracked(h) = ct.conntrack_in(SimTime::ZERO, p) {
            let _ = ct.confirm(SimTime::ZERO, h);
        }
    }
    let n = 20_000_000u32;
    // No clock here (nfsim never reads one): time the whole program with `perf stat` or
    // count instructions with `valgrind --tool=callgrind`, and divide by `n`.
    for i in 0..n {
        std::hint::black_box(ct.conntrack_in(SimTime::from_secs(1), &pk[(i & 4095) as usize]));
    }
    println!("{n} conntrack_in calls over 4096 hot flows");
}
