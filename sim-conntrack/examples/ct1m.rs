//! Measuring aid for a machine shared with other work: the three `conntrack/lookup_refresh`
//! benches at 1,000,000 entries (random picks one call each, the same picks 64 per
//! `conntrack_in_many`, and 4,096 hot flows one call each) run in alternating rounds in one
//! process, each timed in this thread's CPU time (`/proc/thread-self/schedstat`), so that
//! time spent waiting for a core does not count and all three see the same machine. Also
//! prints the table's heap bytes and the process's resident memory per entry.
//!
//! `cargo run --release -p sim-conntrack --example ct1m [ROUNDS] [CALLS]` (defaults 5 and
//! 2,000,000 calls per mode and round). Prints per mode the minimum and the median over the
//! rounds, in ns per packet. Linux only (reads `/proc`).
use sim_conntrack::{Conntrack, CtVerdict, Sysctls};
use sim_core::{Packet, SimRng, SimTime};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

const N: u32 = 1_000_000;

fn flow(i: u32) -> Packet {
    // As benches/conntrack.rs: 10.x.y.z clients, 50 ports each, towards 4 servers.
    let c = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i / 50));
    let s = IpAddr::V4(Ipv4Addr::new(10, 96, 0, (i % 4) as u8 + 1));
    Packet::udp(
        SocketAddr::new(c, 20_000 + (i % 50) as u16),
        SocketAddr::new(s, 53),
    )
}

/// This thread's CPU time in nanoseconds (the first field of `schedstat`).
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The process's resident set (`VmRSS`), in bytes.
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let l = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            let kb: u64 = l.split_whitespace().nth(1)?.parse().ok()?;
            Some(kb * 1024)
        })
        .unwrap_or(0)
}

fn main() {
    let arg = |i: usize, d: u64| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(d)
    };
    let rounds = arg(1, 5) as usize;
    let calls = arg(2, 2_000_000) as usize / 64 * 64;
    let mut s = Sysctls::default();
    s.set("nf_conntrack_max", "0").expect("valid");
    s.set("nf_conntrack_buckets", "1048576").expect("valid");
    let mut rng = SimRng::derive(9, "bench/picks");
    let picks: Vec<Packet> = (0..65_536)
        .map(|_| flow(rng.below(u64::from(N)) as u32))
        .collect();
    let hot: Vec<Packet> = (0..4096)
        .map(|_| flow(rng.below(u64::from(N)) as u32))
        .collect();
    let rss0 = rss_bytes();
    let mut ct = Conntrack::new(1, "bench/conntrack", s);
    for i in 0..N {
        let p = flow(i);
        if let CtVerdict::Tracked(h) = ct.conntrack_in(SimTime::ZERO, &p) {
            let _ = ct.confirm(SimTime::ZERO, h);
        }
        if i % 4096 == 0 {
            ct.drain_events();
        }
    }
    ct.drain_events();
    let rss1 = rss_bytes();
    println!(
        "{} entries: heap {:.1} B/entry, RSS growth {:.1} B/entry",
        ct.len(),
        ct.heap_bytes() as f64 / f64::from(N),
        rss1.saturating_sub(rss0) as f64 / f64::from(N)
    );
    let now = SimTime::from_secs(1);
    let mut out = Vec::with_capacity(64);
    let names = ["single", "batched", "hot"];
    let mut ns: [Vec<f64>; 3] = Default::default();
    for _ in 0..rounds {
        for (m, times) in ns.iter_mut().enumerate() {
            let t0 = cpu_ns();
            match m {
                0 => {
                    for i in 0..calls {
                        black_box(ct.conntrack_in(now, &picks[i & 65_535]));
                    }
                }
                1 => {
                    for i in (0..calls).step_by(64) {
                        let j = i & 65_535;
                        out.clear();
                        ct.conntrack_in_many(now, &picks[j..j + 64], &mut out);
                        black_box(&out);
                    }
                }
                _ => {
                    for i in 0..calls {
                        black_box(ct.conntrack_in(now, &hot[i & 4095]));
                    }
                }
            }
            times.push((cpu_ns() - t0) as f64 / calls as f64);
        }
    }
    for (name, mut t) in names.into_iter().zip(ns) {
        t.sort_by(f64::total_cmp);
        println!(
            "{name:8} min {:6.1} ns  median {:6.1} ns  ({:.1} M/s at the min)",
            t[0],
            t[t.len() / 2],
            1e3 / t[0]
        );
    }
}
