//! Laws nfsim holds to, proven through the testkit alone (`nfsim::testkit`, no `sim_*` path):
//!
//! - **uniform selection**: for every endpoint count 1..=64 as kube-proxy renders it, each
//!   endpoint's exact probability is within 1e-9 of 1/n, in iptables mode (`statistic`,
//!   quantized to 2^-31) and in nftables mode (`numgen random mod n`, exactly the share of the
//!   2^32 draws that map to each value); and new flows sampled through a node pass a
//!   chi-square test at significance 0.001 (fixed seeds: the outcome is fixed, never flaky);
//! - **pinning**: every packet of a flow, both directions, reaches the endpoint its first packet
//!   reached, however the rules change, until its entry is gone;
//! - **reply symmetry**: replies leave with the Service IP and port the client used; a
//!   masqueraded flow's replies reach the original client;
//! - **unique reply tuples**: no two live entries share a reply tuple, even when many clients
//!   masqueraded to one address use the same source port;
//! - **determinism**: the same scenario and seed give the same timeline hash.
//!
//! Sized to run in a few seconds in a debug build.

use nfsim::testkit::examples::{endpoint_ip, service_with_endpoints, svc_chain};
use nfsim::testkit::strategies::{self, proptest, ServiceSpec};
use nfsim::testkit::{Cluster, Node, ProxyMode, Release, SimTime};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn every_endpoint_count_up_to_64_selects_uniformly_exactly() {
    for n in 1..=64usize {
        let node =
            Node::from_objects(&service_with_endpoints("web", "10.96.0.20", 80, "TCP", n)).unwrap();
        let sel = node
            .selection(&svc_chain("default/web:p80", "tcp"))
            .unwrap();
        assert_eq!(sel.choices.len(), n, "n = {n}: {sel:?}");
        assert!(
            sel.fall_through.is_zero(),
            "n = {n}: the last rule catches all"
        );
        assert!(sel.sums_to_one(), "n = {n}");
        let expected: BTreeSet<String> = (0..n).map(|i| format!("{}:80", endpoint_ip(i))).collect();
        let got: BTreeSet<String> = sel
            .choices
            .iter()
            .map(|c| c.endpoint.clone().unwrap())
            .collect();
        assert_eq!(got, expected, "n = {n}: every endpoint exactly once");
        for c in &sel.choices {
            let p = c.probability.to_f64();
            assert!(
                (p - 1.0 / n as f64).abs() < 1e-9,
                "n = {n}: {} gets {} = {p}, not 1/{n}",
                c.target,
                c.probability.fraction()
            );
        }
    }
}

#[test]
fn every_endpoint_count_up_to_64_selects_uniformly_exactly_in_nftables_mode() {
    for n in 1..=64usize {
        let node = Node::builder()
            .mode(ProxyMode::Nftables)
            .objects(&service_with_endpoints("web", "10.96.0.20", 80, "TCP", n))
            .build()
            .unwrap();
        let b = node
            .branches("tcp 10.244.0.9:40000 -> 10.96.0.20:80")
            .unwrap();
        assert_eq!(b.outcomes.len(), n, "n = {n}: {}", b.text());
        assert!(b.sums_to_one, "n = {n}");
        let expected: BTreeSet<String> = (0..n).map(|i| format!("{}:80", endpoint_ip(i))).collect();
        let got: BTreeSet<String> = b
            .outcomes
            .iter()
            .map(|o| {
                let d = o.outcome.dnat.as_deref().unwrap();
                d.rsplit(' ').next().unwrap().to_string()
            })
            .collect();
        assert_eq!(got, expected, "n = {n}: every endpoint exactly once");
        for o in &b.outcomes {
            let p = o.exact().to_f64();
            assert!(
                (p - 1.0 / n as f64).abs() < 1e-9,
                "n = {n}: {:?} gets {} = {p}, not 1/{n}",
                o.outcome.dnat,
                o.probability.fraction()
            );
            // One numgen decision per path (none for a single endpoint: no numgen at all).
            let path = &o.paths[0];
            if n > 1 {
                assert_eq!(path.len(), 1, "n = {n}");
                assert!(path[0]
                    .spec
                    .starts_with(&format!("numgen random mod {n} vmap")));
            }
            // Exact: (values of 2^32 mapping to it) / 2^32, 1/n itself when n divides 2^32.
            if n.is_power_of_two() {
                assert_eq!(
                    o.exact(),
                    &nfsim::testkit::Dyadic::new(1, n.trailing_zeros())
                );
            }
        }
    }
}

/// The chi-square critical values at significance 0.001 for 1..=12 degrees of freedom.
const CHI2_999: [f64; 12] = [
    10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322, 26.124, 27.877, 29.588, 31.264, 32.909,
];

fn chi_square(counts: &[u64], total: u64) -> f64 {
    let e = total as f64 / counts.len() as f64;
    counts.iter().map(|&o| (o as f64 - e).powi(2) / e).sum()
}

#[test]
fn sampled_new_flows_spread_evenly_over_the_endpoints() {
    const FLOWS: u16 = 1500;
    for n in [2usize, 3, 5, 8, 13] {
        for seed in [1u64, 2, 3] {
            let mut node = Node::builder()
                .seed(seed)
                .objects(&service_with_endpoints("dns", "10.96.0.10", 53, "UDP", n))
                .build()
                .unwrap();
            let mut counts: BTreeMap<SocketAddr, u64> = (0..n)
                .map(|i| (SocketAddr::new(endpoint_ip(i).into(), 53), 0))
                .collect();
            for k in 0..FLOWS {
                let f = node
                    .flow(
                        SimTime::ZERO,
                        &format!("udp 10.244.200.7:{} -> 10.96.0.10:53", 10000 + k),
                    )
                    .unwrap();
                *counts.get_mut(&f.endpoint().unwrap()).unwrap() += 1;
            }
            let c: Vec<u64> = counts.values().copied().collect();
            let x2 = chi_square(&c, u64::from(FLOWS));
            assert!(
                x2 < CHI2_999[n - 2],
                "n = {n}, seed {seed}: chi-square {x2:.2} ≥ {} for counts {c:?}",
                CHI2_999[n - 2]
            );
        }
    }
}

/// A different endpoint set for the same Service (some kept, some new).
fn changed(svc: &ServiceSpec, keep: &[bool], extra: &[std::net::Ipv4Addr]) -> ServiceSpec {
    let mut s = svc.clone();
    s.endpoints = svc
        .endpoints
        .iter()
        .zip(keep.iter().cycle())
        .filter(|(_, k)| **k)
        .map(|(e, _)| *e)
        .chain(extra.iter().copied())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    s
}

#[test]
fn a_flow_stays_pinned_and_symmetric_however_the_rules_change() {
    let mut runner = TestRunner::new(Config {
        cases: 24,
        ..Config::default()
    });
    let strategy = (
        strategies::service(2..=6),
        strategies::client(),
        proptest::collection::vec(
            (
                1u64..=40,
                proptest::collection::vec(any::<bool>(), 6),
                strategies::endpoint_set(0..=3),
                any::<bool>(),
            ),
            1..=8,
        ),
        prop_oneof![Just(Release::NONE), Just(Release::LATEST)],
    );
    runner
        .run(&strategy, |(svc, client, steps, release)| {
            let mut node = Node::builder()
                .release(release)
                .objects(&svc.yaml())
                .build()
                .unwrap();
            let service = svc.address();
            let first = node.send(SimTime::ZERO, svc.packet_from(client)).unwrap();
            let pinned = first.endpoint().unwrap();
            prop_assert!(svc.endpoint_addrs().contains(&pinned));
            let mut t = SimTime::ZERO;
            for (gap, keep, extra, reply) in steps {
                t = SimTime::from_secs(t.since_start().as_secs() + gap);
                // The rules change (endpoints removed, added) just before the packet.
                let next = changed(&svc, &keep, &extra);
                node.apply_objects(t, &next.yaml()).unwrap();
                node.sync_due(t).unwrap();
                let filter = format!(
                    "-p {} --orig-src {} --orig-port-src {}",
                    svc.protocol.to_ascii_lowercase(),
                    client.ip(),
                    client.port()
                );
                let alive = node.conntrack(&filter).unwrap();
                let f = node.send(t, svc.packet_from(client)).unwrap();
                if let Some(e) = alive.first() {
                    // While the entry lives, the flow goes where its first packet went.
                    prop_assert_eq!(f.endpoint(), Some(pinned), "entry {:?}", e);
                    if reply && svc.protocol == "UDP" {
                        let back = node
                            .send(t, nfsim::testkit::Packet::udp(pinned, client))
                            .unwrap();
                        prop_assert_eq!(back.source(), Some(service), "reply symmetry");
                        prop_assert_eq!(back.endpoint(), Some(client));
                    }
                } else {
                    return Ok(()); // the entry is gone: the law no longer binds this flow
                }
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn masqueraded_replies_reach_the_original_client_and_reply_tuples_stay_unique() {
    let mut runner = TestRunner::new(Config {
        cases: 16,
        ..Config::default()
    });
    let strategy = (
        strategies::service(1..=4),
        proptest::collection::btree_set(2u8..=250, 2..=20),
        1024u16..=65535,
    );
    runner
        .run(&strategy, |(svc, hosts, port)| {
            let mut node = Node::builder().objects(&svc.yaml()).build().unwrap();
            let service = svc.address();
            // Clients outside the pod CIDR, every one from the same source port: kube-proxy
            // masquerades them (`! -s podCIDR -j KUBE-MARK-MASQ`), all to the node's address
            // towards the pods, so NAT must pick new ports to keep reply tuples apart.
            let mut flows = Vec::new();
            for h in &hosts {
                let client = sa(&format!("192.168.7.{h}:{port}"));
                let f = node.send(SimTime::ZERO, svc.packet_from(client)).unwrap();
                prop_assert!(f.transmitted(), "{:?}", f.fate);
                let (masq, _) = f.snat().map(|(a, b)| (b, a)).unwrap();
                flows.push((client, f.endpoint().unwrap(), masq));
            }
            let entries = node.conntrack("").unwrap();
            prop_assert_eq!(entries.len(), hosts.len());
            let replies: BTreeSet<String> = entries
                .iter()
                .map(|e| format!("{:?}", e.tuple(nfsim::testkit::Dir::Reply)))
                .collect();
            prop_assert_eq!(
                replies.len(),
                entries.len(),
                "two entries share a reply tuple"
            );
            for (client, endpoint, masq) in flows {
                let back = match svc.protocol {
                    "TCP" => nfsim::testkit::Packet::tcp(
                        endpoint,
                        masq,
                        nfsim::testkit::TcpFlags::SYN | nfsim::testkit::TcpFlags::ACK,
                    ),
                    _ => nfsim::testkit::Packet::udp(endpoint, masq),
                };
                let r = node.send(SimTime::from_millis(1), back).unwrap();
                prop_assert_eq!(r.endpoint(), Some(client), "reply to the original client");
                prop_assert_eq!(r.source(), Some(service), "from the Service IP and port");
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn the_same_seed_gives_the_same_timeline_hash() {
    let run = |seed: u64| {
        let mut sc =
            nfsim::testkit::load_scenario("scenarios/stale-dns-udp-per-query-port.yaml").unwrap();
        sc.seed = seed;
        let mut c = Cluster::from_scenario(sc).unwrap();
        c.run_until(SimTime::from_secs(600)).unwrap();
        (c.timeline_hash(), c.timeline().len())
    };
    let (a, len) = run(7);
    assert!(len > 50, "a timeline worth hashing: {len} events");
    assert_eq!(run(7).0, a, "same seed, same trace");
    // And the hash does see the seed: per-query source ports are drawn from it.
    assert_ne!(run(8).0, a, "another seed, another trace");
}
