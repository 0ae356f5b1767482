//! kube-proxy's two modes side by side (issue 14): the first packet of a new flow through a
//! node holding 10,000 Services of two endpoints each, as kube-proxy writes them in iptables
//! mode (`KUBE-SERVICES`: one rule per Service port, walked in order; nfsim indexes that
//! walk) and in nftables mode (the `service-ips` verdict map, one lookup keyed
//! `ipv4_addr . inet_proto . inet_service`), in one run. The rules come from nfsim's own
//! kube-proxy model (`render_sync` / `render_nft_sync`) for the same Services and
//! EndpointSlices, applied as the cluster applies them (`cluster::proxy::apply_sync`).
//!
//! Each packet is a host-network client's (172.18.x.y, through eth0) first packet to a
//! Service: DNAT to an endpoint (`statistic` / `numgen` picks it), MASQUERADE to cni0's
//! address (the source is outside the cluster CIDR) and the conntrack entry confirmed, as in
//! `netns/first_packet_10k_services`. 100 Services too, to show how flat each mode is.
//!
//! And an established packet of the same kind (`established_…`): 4,096 flows spread over
//! the Services, each first packet answered by its endpoint, then the clients' packets
//! again: ctstate ESTABLISHED, so no NAT lookup, only the filter chains (kube-proxy's
//! `ct state new` jumps in nftables mode, `KUBE-FORWARD` and the `--ctstate NEW` jumps in
//! iptables mode) and conntrack's rewrite.
//!
//! Every figure is this thread's CPU time (`support/cpu_clock.rs`), not wall time: the
//! machine is shared with other builds.
//!
//! `cargo bench --bench proxy_modes`; figures in docs/performance.md.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nfsim::cluster::proxy::apply_sync;
use nfsim::k8s::parse_objects;
use nfsim::kubeproxy::{KubeProxy, MemConntrack, ProxierConfig, ProxyMode, SyncTiming, V133};
use sim_core::{IfName, Packet, SimTime};
use sim_netfilter::netns::{Egress, Ingress, Netns};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

#[path = "support/first_packets.rs"]
mod first_packets;
#[path = "support/proxy_objects.rs"]
mod proxy_objects;
use first_packets::{cpu_clock, FirstPackets};
#[path = "support/establish.rs"]
mod establish;
use establish::establish;
use proxy_objects::{cluster_ip, objects};
use std::hint::black_box;

/// A node (eth0 172.18.0.2/16 with the default route, cni0 10.244.0.1/16 to the pods) with
/// kube-proxy's first full sync in `mode` applied.
fn node(mode: ProxyMode, services: usize) -> Netns {
    let mut cfg = ProxierConfig::new(
        "bench",
        "172.18.0.2".parse().unwrap(),
        "10.244.0.0/16".parse().unwrap(),
    );
    cfg.mode = mode;
    cfg.service_cidrs = vec!["10.96.0.0/16".parse().unwrap()];
    let mut kp = KubeProxy::new(
        cfg,
        SyncTiming::default(),
        Box::new(V133::default()),
        SimTime::ZERO,
    );
    for text in objects(services) {
        for o in parse_objects(&text).expect("generated objects parse") {
            kp.upsert(SimTime::ZERO, o);
        }
    }
    let at = kp.poll_timeout().expect("a sync is due");
    let out = kp.on_timeout(at).expect("a sync is due");
    let mut n = sim_netfilter::synth::bench_node();
    apply_sync(&mut n, &out, None).expect("kube-proxy's sync applies");
    // Compile the nftables ruleset now, not after the walks `nft -f` waits for: every copy
    // of this node then shares the one program.
    n.set_nft_compiled(true);
    kp.complete_sync(at, Ok(()), &mut MemConntrack::default());
    n
}

/// The `i`-th new flow: to Service `i × 7919 mod services`, from one of 10,000 clients
/// (172.18.1–50.10–209) and a source port moving on every 10,000 flows: no tuple repeats.
fn first_packet(services: usize, i: usize) -> Packet {
    let pick = i.wrapping_mul(7919) % 10_000;
    let sport = 1024 + (i / 10_000 % 60_000) as u16;
    let src = SocketAddr::new(
        IpAddr::V4([172, 18, 1 + (pick / 200) as u8, 10 + (pick % 200) as u8].into()),
        sport,
    );
    let dst = SocketAddr::new(IpAddr::V4(cluster_ip(pick % services)), 80);
    Packet::udp(src, dst)
}

/// Established flows per node in the `established_…` benches.
const ESTABLISHED: usize = 4_096;

fn bench(c: &mut Criterion) {
    let eth0 = Ingress::Interface(IfName::new("eth0").unwrap());
    let mut g = c.benchmark_group("proxy_modes");
    g.measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(1));
    for services in [10_000, 100] {
        for (label, mode) in [
            ("iptables", ProxyMode::Iptables),
            ("nftables", ProxyMode::Nftables),
        ] {
            let base = node(mode, services);
            // The rules do what they should: DNAT to one of the Service's endpoints,
            // masqueraded to the address of the interface it leaves by (cni0, the route to
            // the pods: `nf_nat_masquerade_ipv4` takes the outgoing device's address).
            {
                let mut n = base.clone();
                let p = first_packet(services, 1);
                let r = n.process(SimTime::ZERO, p, eth0);
                let Some(Egress::Transmit { packet, .. }) = r.out.first() else {
                    panic!("{label}: {p} not forwarded: {:?}", r.fate);
                };
                assert!(
                    packet.dst.to_string().starts_with("10.244.") && packet.dport() == Some(8080),
                    "{label}: {p} went to {packet}"
                );
                assert_eq!(packet.src.to_string(), "10.244.0.1", "{label}: {packet}");
            }
            let mut flows = FirstPackets::new(&base);
            g.bench_function(format!("first_packet_{services}_services_{label}"), |b| {
                b.iter_custom(|iters| flows.time(iters, eth0, |j| first_packet(services, j)))
            });
            let mut n = base.clone();
            let flows: Vec<Packet> = (0..ESTABLISHED)
                .map(|i| first_packet(services, i))
                .collect();
            for p in &flows {
                establish(&mut n, *p, eth0);
            }
            let mut i = 0usize;
            g.bench_function(format!("established_{services}_services_{label}"), |b| {
                b.iter_custom(|iters| {
                    let t = cpu_clock::now();
                    for _ in 0..iters {
                        let p = flows[i % flows.len()];
                        i += 1;
                        if i % ESTABLISHED == 0 {
                            // The driver takes the conntrack events (ASSURED and the like)
                            // between steps, so they do not pile up.
                            black_box(n.drain_conntrack_events());
                        }
                        black_box(n.process(SimTime::ZERO, p, eth0));
                    }
                    cpu_clock::now() - t
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
