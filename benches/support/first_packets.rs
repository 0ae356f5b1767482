//! The first-packet measurement of `benches/netns.rs` and `benches/proxy_modes.rs`: new
//! flows pushed through copies of one node, each copy taking at most [`FIRST_BATCH`] of them.

use sim_core::{Packet, SimTime};
use sim_netfilter::netns::{Ingress, Netns};
use std::hint::black_box;
use std::time::Duration;

#[path = "cpu_clock.rs"]
pub mod cpu_clock;

/// New flows a node takes before the bench starts over from a fresh copy of it (outside the
/// timing): a table of a node's usual size, never full.
pub const FIRST_BATCH: u64 = 65_536;

/// The node's conntrack events (a NEW per flow) are taken every this many flows, inside the
/// timing, as a driver takes them between steps (`benches/netns.rs` does the same for
/// established flows). Until issue 15 they piled up, 65,536 events of a whole entry each,
/// and the vector's doublings copied them over and over: 3.8 more L1 write misses a packet
/// at 10,000 Services than at 100 (callgrind `--cache-sim`), where the allocator copied
/// instead of remapping.
pub const DRAIN_EVERY: u64 = 4_096;

/// New flows through copies of a node, kept from one of criterion's calls to the next.
///
/// The copy in use goes on taking flows across calls until it has taken [`FIRST_BATCH`];
/// only then is it replaced (outside the timing). Until this was kept across calls, every
/// call started from a fresh copy: criterion times its warm-up calls by the wall clock,
/// copying included, so where copying the node is slow (10,000 Services in nftables mode
/// copy 10,000 chains of strings, about a tenth of a second) it chose a handful of flows
/// per sample, and each sample timed the first packets after a copy, with everything
/// still to allocate and nothing in the caches (58 µs – 1.2 ms a packet).
pub struct FirstPackets<'a> {
    base: &'a Netns,
    node: Netns,
    taken: u64,
    next: usize,
}

impl<'a> FirstPackets<'a> {
    /// Flows through copies of `base`, starting with flow 0.
    pub fn new(base: &'a Netns) -> FirstPackets<'a> {
        FirstPackets {
            base,
            node: base.clone(),
            taken: 0,
            next: 0,
        }
    }

    /// The CPU time the next `iters` new flows take (flow `n`, `n + 1`, … from `packet`,
    /// entering at `ingress`; [`cpu_clock`]). Building the packets and copying the node are
    /// not timed.
    pub fn time(
        &mut self,
        iters: u64,
        ingress: Ingress,
        packet: impl Fn(usize) -> Packet,
    ) -> Duration {
        let mut total = Duration::ZERO;
        let mut done = 0u64;
        while done < iters {
            if self.taken == FIRST_BATCH {
                self.node = self.base.clone();
                self.taken = 0;
            }
            let batch = (iters - done).min(FIRST_BATCH - self.taken);
            let packets: Vec<Packet> = (0..batch as usize).map(|j| packet(self.next + j)).collect();
            let n = &mut self.node;
            let mut taken = self.taken;
            let t = cpu_clock::now();
            for p in packets {
                black_box(n.process(SimTime::ZERO, p, ingress));
                taken += 1;
                if taken % DRAIN_EVERY == 0 {
                    black_box(n.drain_conntrack_events());
                }
            }
            total += cpu_clock::now() - t;
            self.next += batch as usize;
            self.taken += batch;
            done += batch;
        }
        total
    }
}
