//! The hook pipeline of a node (`Netns::process`) with a 10,000-service kube-proxy ruleset:
//! established-flow packets (PREROUTING → FORWARD → POSTROUTING with conntrack, no nat
//! table) and first packets of new flows (nat table, DNAT binding, confirm).
//!
//! Issue #3's targets: established ≥ 3 million packets/s (≤ 333 ns) on one core; the rule
//! evaluation of a new flow ≤ 2 µs whatever the number of services (`benches/netfilter.rs`;
//! the full first packet here also sets up NAT and confirms an entry in a table that grows by
//! one entry per iteration, to a million and more).
//!
//! The established flows have seen a reply (the endpoint answers each first packet), so
//! their packets are ctstate ESTABLISHED as in a real connection; until the session of the
//! figures below they were one-way (ctinfo NEW on every packet, which also walked the
//! filter chains' `--ctstate NEW` jumps).
//!
//! Measured on the shared 2-core development machine (load average 1–2, its speed swinging
//! by a third from one minute to the next; several rounds of `cargo bench --bench netns --
//! netns/`). The bench profile builds with one codegen unit and fat LTO (root `Cargo.toml`).
//!
//! | benchmark | session 2 | now |
//! |---|---|---|
//! | `established_10k_services` (`process`) | 319–498 ns | 218–304 ns (3.3–4.6 M/s) |
//! | `established_10k_services_into` (`process_into`, one reused buffer) | 302–447 ns | 185–229 ns (4.4–5.4 M/s) |
//! | `first_packet_10k_services` | 5.8–7.2 µs | 7.3–7.5 µs |
//!
//! Instruction counts (callgrind over the `netns_hot` example, which loops the same packets;
//! exact where times are not): an established packet through `process_into` took 2,245
//! instructions with one-way flows and 2,140 with answered ones; it now takes 1,238 (1,634
//! through `process`, which also allocates the result's egress vector and snapshots the
//! entry). Where they went: `-m conntrack`'s view read in place instead of from a snapshot;
//! a remembered pure walk replayed from the packet and its ctstate bits before any view or
//! `EvalCtx` is built, its key the packet's raw words under masks computed once; each hook's
//! common case inline and its traced / first-packet / failure cases out of line; conntrack's
//! inline TCP path for established segments, NAT rewrites straight from the stored key
//! words; and LTO. (The counts include draining the conntrack events every 4,096 packets,
//! as a driver does between steps, and forwarding's TTL decrement.)
//!
//! A first packet (issue 15): 7,263 instructions at 10,000 services and 7,004 at 100 (8,452
//! at 10,000 before `nf_nat_bysource` became a hash map), so the instructions are flat; the
//! time is not (3.2–3.8 µs against 1.5–1.6 µs, `netns_hot first 65536` under `perf stat` at
//! load average 19). `perf annotate` puts the difference on cache misses at the service's
//! own data: the first touch of each compiled rule of its KUBE-SVC-/KUBE-SEP- chains
//! (`eval.rs` `fast_matches`, `slot_uid`), and of each rule's counter slot (`state.rs`
//! `slot_in`), about a dozen lines per packet spread over the 10,000-service program.
//!
//! Second round (issue 15): the compiled program lays chains out depth first from the
//! built-in chains (`compile::layout_order`), so a service's `KUBE-SVC-` chain sits right
//! before its `KUBE-SEP-` chains (their hashed names scattered them over the program), and a
//! fresh table's counter slots follow the same order; a rule whose counters start at zero no
//! longer reads its original rule when its slot first counts (three lines); counter slots
//! live in pages allocated on first use. callgrind `--cache-sim=yes` over 20,000 first
//! packets (`netns_hot first 20000`): L1 data read misses per packet 42.0 → 31.4 at 10,000
//! services, 24.6 → 25.7 at 100; instructions 7,492 → 7,592 and 7,233 → 7,326 (the page
//! lookup).
//!
//! Third round (issue 15): the NAT bindings stop copying the entry (`Conntrack::nat_bind`):
//! 7,368 → 7,118 instructions at 10,000 services. The timing loop
//! (`support/first_packets.rs`) keeps its node across criterion's calls and drains the
//! conntrack events every 4,096 flows; the piled-up events' copies were half of the extra L1d
//! misses at 10,000 services (10k − 100: 5.5 read + 6.4 write misses per packet → 2.6 + 3.0).
//! Criterion, one run, load average 5–9: 2.46–2.81 µs at 10,000, 1.39–1.40 µs at 100.
//!
//! Fourth round (issue 15): the lines a first packet reads at 10,000 Services were read one
//! after the other, each a wait for memory (the index entry, the dispatching rule, the
//! `KUBE-SVC-` rules, the `KUBE-SEP-` rules, counter slots, DNAT's range: about 12 more L2
//! misses a packet than at 100). When conntrack finds no entry for a packet
//! (`Conntrack::conntrack_in_then`), the namespace now asks the CPU for all of them at once
//! (`Ruleset::prefetch_new_flow`, `sim-netfilter/src/hint.rs`), so they load side by side
//! while the entry is made. The hint needs no rule line to know where to look: the
//! program's copy of the `KUBE-SERVICES` index gives, with the rule, its jump target and the
//! first DNAT range after it (`ChainIndex::annotate`), and counter slots follow the layout
//! order. Its one map probe is the walk's next one, which then hits the cache. Programs
//! under 4,096 rules (100 Services) take no hint. Instructions (callgrind, `netns_hot first
//! 20000`): 7,771 → 8,071 at 10,000 (the hint), 7,618 → 7,656 at 100.
//!
//! How early the lines are asked for is what counts
//! (`sim-netfilter/examples/first_packet_ratio.rs`: rounds alternating 65,536 flows at
//! 10,000 and at 100 Services, median of the per-round ratio over 15–25 rounds, load average
//! 2–3): 1.8× asking for nothing; 1.55–1.65× asking for the Service's chains, slots and
//! ranges at the jump into them, as the walk reaches it; 1.4× asking at the walk's index
//! hit (a per-rule array of jump targets); 1.3× asking for the rule lines when conntrack
//! finds no entry; 1.25× adding the slots and ranges there; 1.18–1.20× with the targets in
//! the index entry (10,000: 1.08–1.13 µs, 100: 0.91–0.94 µs). Criterion at load average
//! 3–4 (another job on the other core), four runs: 1.06–1.33 µs at 10,000, 0.90–1.05 µs
//! at 100, 1.17–1.33×. On the quiet VM (load average 0.8–0.9, three runs of 5 s, with the
//! same round's big-cluster work also on main): 0.91–0.93 µs at 10,000, 0.79–0.82 µs at
//! 100, 1.13–1.15×.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sim_core::{IfName, Packet, SimTime, TcpFlags};
use sim_netfilter::netns::Ingress;
use sim_netfilter::synth::KubeServices;
use std::hint::black_box;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

#[path = "support/first_packets.rs"]
mod first_packets;
use first_packets::FirstPackets;
#[path = "support/establish.rs"]
mod establish;
use establish::establish;

const SERVICES: usize = 10_000;

/// Packet `i`: a client on the host network (so the masquerade path runs too) to service
/// `i % services`.
fn packet(k: &KubeServices, i: usize, sport: u16) -> Packet {
    let (proto, svc) = k.service(i % k.services);
    let src = SocketAddr::new(IpAddr::V4([172, 18, 1, (i % 200) as u8 + 10].into()), sport);
    let dst = SocketAddr::V4(svc);
    if proto == 17 {
        Packet::udp(src, dst)
    } else {
        Packet::tcp(src, dst, TcpFlags::ACK)
    }
}

/// The `i`-th new flow of the first-packet bench: to service `i × 7919 mod 10,000` (modulo
/// the node's services), from one of 10,000 host-network clients (172.18.1–50.10–209) and a
/// source port that moves on every 10,000 flows, so no tuple repeats (for 600 million flows).
fn first_packet(k: &KubeServices, i: usize) -> Packet {
    let pick = i.wrapping_mul(7919) % SERVICES;
    let sport = 1024 + (i / SERVICES % 60_000) as u16;
    let mut p = packet(k, pick % k.services, sport);
    p.src = IpAddr::V4([172, 18, 1 + (pick / 200) as u8, 10 + (pick % 200) as u8].into());
    p
}

fn bench(c: &mut Criterion) {
    let k = KubeServices::new(SERVICES, 2);
    let eth0 = Ingress::Interface(IfName::new("eth0").unwrap());
    let mut g = c.benchmark_group("netns");
    g.measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(1));

    // 4,096 established flows spread over all services: the first packet of each creates
    // and confirms its entry (DNAT + MASQUERADE) and the endpoint answers it, then the bench
    // replays the clients' packets (ctstate ESTABLISHED, no nat table).
    {
        let mut n = k.node();
        let flows: Vec<Packet> = (0..4096)
            .map(|i| packet(&k, i * 7, 20_000 + i as u16))
            .collect();
        for p in &flows {
            establish(&mut n, *p, eth0);
        }
        assert_eq!(n.conntrack().len(), flows.len());
        let mut i = 0usize;
        let mut now = SimTime::ZERO;
        g.bench_function("established_10k_services", |b| {
            b.iter(|| {
                let p = flows[i % flows.len()];
                i += 1;
                if i % 4096 == 0 {
                    // Time moves on; the driver takes the conntrack events (a few UPDATEs,
                    // ASSURED) as one would between steps, so they do not pile up.
                    now += sim_core::SimDuration::from_millis(1);
                    black_box(n.drain_conntrack_events());
                }
                black_box(n.process(now, p, eth0))
            })
        });
        // The same through `process_into` with one egress buffer reused for every packet
        // (what a driver pushing many packets does): no allocation per packet.
        let mut out = Vec::with_capacity(4);
        g.bench_function("established_10k_services_into", |b| {
            b.iter(|| {
                let p = flows[i % flows.len()];
                i += 1;
                if i % 4096 == 0 {
                    // Time moves on; the driver takes the conntrack events (a few UPDATEs,
                    // ASSURED) as one would between steps, so they do not pile up.
                    now += sim_core::SimDuration::from_millis(1);
                    black_box(n.drain_conntrack_events());
                }
                out.clear();
                let r = n.process_into(now, p, eth0, &mut out);
                black_box(out.first());
                black_box(r)
            })
        });
    }

    // New flows: each packet has a fresh tuple, so it runs the nat table, sets up DNAT and
    // MASQUERADE and confirms an entry. The same flows (the same clients and source ports,
    // to a service picked the same way) go to a node with 10,000 services and to one with
    // 100, in one run, to see how flat the cost is in the number of services.
    //
    // A node's table starts empty and takes at most FIRST_BATCH new flows before the bench
    // starts over from a fresh copy of the node (outside the timing): a table of a node's
    // usual size, the same in both cases, never full. (Until issue 15 the table grew for the
    // whole run and hit nf_conntrack_max, 262,144, after which every packet was also an
    // early_drop, so the figure depended on how many iterations criterion chose.)
    let small = KubeServices::new(100, 2);
    for (name, k) in [
        ("first_packet_10k_services", &k),
        ("first_packet_100_services", &small),
    ] {
        let base = k.node();
        let mut flows = FirstPackets::new(&base);
        g.bench_function(name, |b| {
            b.iter_custom(|iters| flows.time(iters, eth0, |j| first_packet(k, j)))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
