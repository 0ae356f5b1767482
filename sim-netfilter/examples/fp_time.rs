// Local timing harness (not committed): first packets at 10k and 100 services, as benches/netns.rs.
use sim_core::{IfName, Packet, SimTime, TcpFlags};
use sim_netfilter::netns::{Ingress, Netns, NetnsConfig, Prefix};
use sim_netfilter::synth::KubeServices;
use std::hint::black_box;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;
const SERVICES: usize = 10_000;
fn node(k: &KubeServices) -> Netns {
    let mut n = Netns::new(NetnsConfig::new("bench", 1));
    let eth0 = IfName::new("eth0").unwrap();
    let cni0 = IfName::new("cni0").unwrap();
    n.add_interface(eth0, &[("172.18.0.2".parse().unwrap(), 16)])
        .unwrap();
    n.add_interface(cni0, &[("10.244.0.1".parse().unwrap(), 16)])
        .unwrap();
    n.add_route(
        Prefix::default_for(true),
        Some("172.18.0.1".parse().unwrap()),
        eth0,
    )
    .unwrap();
    n.restore(&k.save_text(), false).unwrap();
    n
}
fn first_packet(k: &KubeServices, i: usize) -> Packet {
    let pick = i.wrapping_mul(7919) % SERVICES;
    let sport = 1024 + (i / SERVICES % 60_000) as u16;
    let (proto, svc) = k.service(pick % k.services);
    let src = SocketAddr::new(
        IpAddr::V4([172, 18, 1 + (pick / 200) as u8, 10 + (pick % 200) as u8].into()),
        sport,
    );
    let dst = SocketAddr::V4(svc);
    if proto == 17 {
        Packet::udp(src, dst)
    } else {
        Packet::tcp(src, dst, TcpFlags::ACK)
    }
}
fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let eth0 = Ingress::Interface(IfName::new("eth0").unwrap());
    let ks = [KubeServices::new(SERVICES, 2), KubeServices::new(100, 2)];
    let bases: Vec<Netns> = ks.iter().map(node).collect();
    let mut t = vec![vec![]; 2];
    let mut ratios = vec![];
    let mut next = 0usize;
    for _ in 0..rounds {
        let mut r = [0f64; 2];
        for w in 0..2 {
            let mut n = bases[w].clone();
            let packets: Vec<Packet> = (0..65536).map(|j| first_packet(&ks[w], next + j)).collect();
            // warm the node's allocations as criterion's long runs do: not timed
            let t0 = Instant::now();
            for (j, p) in packets.into_iter().enumerate() {
                black_box(n.process(SimTime::ZERO, p, eth0));
                if j % 4096 == 4095 {
                    black_box(n.drain_conntrack_events());
                }
            }
            r[w] = t0.elapsed().as_nanos() as f64 / 65536.0;
            t[w].push(r[w]);
        }
        next += 65536;
        ratios.push(r[0] / r[1]);
    }
    for v in t.iter_mut().chain(std::iter::once(&mut ratios)) {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    }
    let q = |v: &Vec<f64>, f: f64| v[((v.len() - 1) as f64 * f) as usize];
    println!(
        "10k med {:.0} min {:.0} | 100 med {:.0} min {:.0} | ratio q25 {:.2} med {:.2} q75 {:.2}",
        q(&t[0], 0.5),
        t[0][0],
        q(&t[1], 0.5),
        t[1][0],
        q(&ratios, 0.25),
        q(&ratios, 0.5),
        q(&ratios, 0.75)
    );
}
