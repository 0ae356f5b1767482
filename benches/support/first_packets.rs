//! The first-packet measurement of `benches/netns.rs` and `benches/proxy_modes.rs`: new
//! flows pushed through copies of one node, each copy taking at most [`FIRST_BATCH`] of them.

use sim_core::{Packet, SimTime};
use sim_netfilter::netns::{Ingress, Netns};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// New flows a node takes before the bench starts over from a fresh copy of it (outside the
/// timing): a table of a node's usual size, never full.
pub const FIRST_BATCH: u64 = 65_536;

/// The time `iters` new flows take through copies of `base`: flow `*next`, `*next + 1`, …
/// from `packet`, entering at `ingress`. Building the packets and copying the node are not
/// timed. `*next` moves on by `iters`, so the next call sends fresh tuples.
pub fn time_first_packets(
    base: &Netns,
    iters: u64,
    next: &mut usize,
    ingress: Ingress,
    packet: impl Fn(usize) -> Packet,
) -> Duration {
    let mut total = Duration::ZERO;
    let mut done = 0u64;
    while done < iters {
        let batch = (iters - done).min(FIRST_BATCH);
        let mut n = base.clone();
        let packets: Vec<Packet> = (0..batch as usize).map(|j| packet(*next + j)).collect();
        let t = Instant::now();
        for p in packets {
            black_box(n.process(SimTime::ZERO, p, ingress));
        }
        total += t.elapsed();
        *next += batch as usize;
        done += batch;
    }
    total
}
