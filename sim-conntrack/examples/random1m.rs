//! Profiling aid: `conntrack_in` of existing UDP flows picked at random over a table of
//! 1,000,000 entries (the `conntrack/lookup_refresh_1m` bench), to run under `perf stat` /
//! `perf record`. Arguments: `run [calls]`, `fill` (the fill alone, to subtract), or `create [rounds]`
//! (create + confirm of that many tables of 1,000,000, default 10).
use sim_conntrack::{Conntrack, CtVerdict, Sysctls};
use sim_core::{Packet, SimRng, SimTime};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

const N: u32 = 1_000_000;

fn flow(i: u32) -> Packet {
    let c = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i / 50));
    let s = IpAddr::V4(Ipv4Addr::new(10, 96, 0, (i % 4) as u8 + 1));
    Packet::udp(
        SocketAddr::new(c, 20_000 + (i % 50) as u16),
        SocketAddr::new(s, 53),
    )
}

fn sysctls() -> Sysctls {
    let mut s = Sysctls::default();
    s.max = 0;
    s.set("nf_conntrack_buckets", "1048576").expect("valid");
    s
}

fn fill(ct: &mut Conntrack, pkts: impl Iterator<Item = Packet>) {
    for (i, p) in pkts.enumerate() {
        if let CtVerdict::Tracked(h) = ct.conntrack_in(SimTime::ZERO, &p) {
            let _ = ct.confirm(SimTime::ZERO, h);
        }
        if i % 4096 == 0 {
            ct.drain_events();
        }
    }
    ct.drain_events();
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let mut ct = Conntrack::new(1, "bench/conntrack", sysctls());
    if mode == "create" {
        let rounds: u32 = std::env::args()
            .nth(2)
            .and_then(|a| a.parse().ok())
            .unwrap_or(10);
        for _ in 0..rounds {
            ct = Conntrack::new(1, "bench/conntrack", sysctls());
            fill(&mut ct, (0..N).map(flow));
        }
        println!("{} creates in tables of {N}", rounds * N);
        return;
    }
    fill(&mut ct, (0..N).map(flow));
    let mut rng = SimRng::derive(9, "bench/picks");
    let picks: Vec<Packet> = (0..65_536)
        .map(|_| flow(rng.below(u64::from(N)) as u32))
        .collect();
    let n: u32 = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000_000);
    // No clock: time the whole program with `perf stat` and subtract the fill (run with
    // `fill` as the argument for the fill alone).
    if mode != "fill" {
        for i in 0..n {
            std::hint::black_box(
                ct.conntrack_in(SimTime::from_secs(1), &picks[(i & 65_535) as usize]),
            );
        }
    }
    println!("{n} conntrack_in calls over {N} flows ({mode})");
}
