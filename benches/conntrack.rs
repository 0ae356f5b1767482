//! Conntrack table speed and memory at 1,000,000 entries.
//!
//! - `lookup_refresh_1m`: `conntrack_in` of a packet of an existing UDP flow (lookup by tuple,
//!   tracker, timeout refresh), flows picked at random over the whole table.
//! - `lookup_refresh_confirm_1m`: the same plus the confirm hook (event delivery).
//! - `lookup_refresh_hot_1m`: flows picked from 4,096 active ones in the same table (the
//!   CPU cost without the two cache misses a random pick over 180 MB pays).
//! - `create_confirm`: a new flow's first packet: allocation, tracker, confirm (index insert,
//!   timer), with events on (`nf_conntrack_events=1`, drained in batches) and off.
//! - `expire_1m`: reaping a million entries as their timeouts pass.
//!
//! Heap bytes per entry at 1,000,000 entries are computed from the table's capacities
//! (`Conntrack::heap_bytes`) and printed before the benchmarks run.
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use sim_conntrack::{Conntrack, CtVerdict, Sysctls};
use sim_core::{Packet, SimDuration, SimRng, SimTime};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

const N: u32 = 1_000_000;

fn flow(i: u32) -> Packet {
    // 10.x.y.z clients, 50 ports each, towards 4 servers.
    let c = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i / 50));
    let s = IpAddr::V4(Ipv4Addr::new(10, 96, 0, (i % 4) as u8 + 1));
    Packet::udp(
        SocketAddr::new(c, 20_000 + (i % 50) as u16),
        SocketAddr::new(s, 53),
    )
}

fn sysctls(events: bool) -> Sysctls {
    let mut s = Sysctls::default();
    s.set("nf_conntrack_max", "0").expect("valid");
    s.set("nf_conntrack_buckets", "1048576").expect("valid");
    s.set("nf_conntrack_events", if events { "1" } else { "0" })
        .expect("valid");
    s
}

fn track_and_confirm(ct: &mut Conntrack, now: SimTime, p: &Packet) {
    if let CtVerdict::Tracked(h) = ct.conntrack_in(now, p) {
        let _ = ct.confirm(now, h);
    }
}

fn build(n: u32, events: bool) -> Conntrack {
    let mut ct = Conntrack::new(1, "bench/conntrack", sysctls(events));
    for i in 0..n {
        track_and_confirm(&mut ct, SimTime::ZERO, &flow(i));
        if i % 4096 == 0 {
            ct.drain_events();
        }
    }
    ct.drain_events();
    ct
}

fn report_memory() {
    let ct = build(N, true);
    assert_eq!(ct.len(), N as usize);
    let bytes = ct.heap_bytes();
    println!(
        "conntrack memory: {} entries, {} heap bytes, {:.1} bytes/entry",
        ct.len(),
        bytes,
        bytes as f64 / f64::from(N)
    );
}

fn bench(c: &mut Criterion) {
    report_memory();
    let mut ct = build(N, true);
    let mut rng = SimRng::derive(9, "bench/picks");
    let picks: Vec<Packet> = (0..65_536)
        .map(|_| flow(rng.below(u64::from(N)) as u32))
        .collect();
    let now = SimTime::from_secs(1);

    let mut g = c.benchmark_group("conntrack");
    g.throughput(Throughput::Elements(1));
    g.measurement_time(Duration::from_secs(3));
    let mut i = 0usize;
    g.bench_function("lookup_refresh_1m", |b| {
        b.iter(|| {
            i = (i + 1) & 65_535;
            black_box(ct.conntrack_in(now, &picks[i]))
        })
    });
    let hot: Vec<Packet> = (0..4096)
        .map(|_| flow(rng.below(u64::from(N)) as u32))
        .collect();
    g.bench_function("lookup_refresh_hot_1m", |b| {
        b.iter(|| {
            i = (i + 1) & 65_535;
            black_box(ct.conntrack_in(now, &hot[i & 4095]))
        })
    });
    g.bench_function("lookup_refresh_confirm_1m", |b| {
        b.iter(|| {
            i = (i + 1) & 65_535;
            track_and_confirm(&mut ct, now, &picks[i]);
        })
    });
    // The same packets as lookup_refresh_1m, 64 per conntrack_in_many call.
    g.throughput(Throughput::Elements(64));
    let mut out = Vec::with_capacity(64);
    g.bench_function("lookup_refresh_1m_batched", |b| {
        b.iter(|| {
            i = ((i & !63) + 64) & 65_535;
            out.clear();
            ct.conntrack_in_many(now, &picks[i..i + 64], &mut out);
            black_box(&out);
        })
    });
    g.throughput(Throughput::Elements(1));
    drop(ct);

    for (events, batched) in [(true, false), (false, false), (true, true), (false, true)] {
        let name = match (events, batched) {
            (true, false) => "create_confirm_events_on",
            (false, false) => "create_confirm_events_off",
            (true, true) => "create_confirm_events_on_batched",
            (false, true) => "create_confirm_events_off_batched",
        };
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut ct = Conntrack::new(1, "bench/conntrack", sysctls(events));
                let pkts: Vec<Packet> = (0..iters.min(u64::from(N)) as u32).map(flow).collect();
                let mut out = Vec::with_capacity(64);
                let mut total = Duration::ZERO;
                let mut done = 0u64;
                while done < iters {
                    let todo = &pkts[..(iters - done).min(pkts.len() as u64) as usize];
                    let start = Instant::now();
                    if batched {
                        // 64 first packets through conntrack_in_many, then their confirms.
                        for chunk in todo.chunks(64) {
                            out.clear();
                            ct.conntrack_in_many(SimTime::ZERO, chunk, &mut out);
                            for v in &out {
                                if let CtVerdict::Tracked(h) = v {
                                    let _ = ct.confirm(SimTime::ZERO, *h);
                                }
                            }
                        }
                    } else {
                        for p in todo {
                            track_and_confirm(&mut ct, SimTime::ZERO, p);
                        }
                    }
                    total += start.elapsed();
                    done += pkts.len() as u64;
                    ct.drain_events();
                    ct = Conntrack::new(1, "bench/conntrack", sysctls(events));
                }
                total
            })
        });
    }

    g.throughput(Throughput::Elements(u64::from(N)));
    g.sample_size(10);
    // The create benches above fill tables of the sample's size (mostly far below 1M, so
    // mostly cache-resident); these fill one from empty to 1,000,000 entries.
    let all: Vec<Packet> = (0..N).map(flow).collect();
    for batched in [false, true] {
        let name = if batched {
            "create_confirm_to_1m_batched"
        } else {
            "create_confirm_to_1m"
        };
        let mut out = Vec::with_capacity(64);
        g.bench_function(name, |b| {
            b.iter_batched(
                || Conntrack::new(1, "bench/conntrack", sysctls(true)),
                |mut ct| {
                    for (k, chunk) in all.chunks(64).enumerate() {
                        if batched {
                            out.clear();
                            ct.conntrack_in_many(SimTime::ZERO, chunk, &mut out);
                            for v in &out {
                                if let CtVerdict::Tracked(h) = v {
                                    let _ = ct.confirm(SimTime::ZERO, *h);
                                }
                            }
                        } else {
                            for p in chunk {
                                track_and_confirm(&mut ct, SimTime::ZERO, p);
                            }
                        }
                        if k % 64 == 0 {
                            ct.drain_events();
                        }
                    }
                    assert_eq!(ct.len(), N as usize);
                    ct
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.bench_function("expire_1m", |b| {
        b.iter_batched(
            || build(N, false),
            |mut ct| {
                ct.expire(SimTime::ZERO + SimDuration::from_secs(31));
                assert!(ct.is_empty());
                ct
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
