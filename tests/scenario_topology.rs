//! Topology aware routing: `scenarios/topology-prefer-close.yaml` asserted as a timeline of
//! per-node rule sets (each node's kube-proxy writes only the endpoints its zone's hints
//! choose, in iptables and nftables mode), and the stale-entry behaviour of the conntrack
//! cleanup (kubernetes #126934) in every release.

use nfsim::cluster::sim::{RunOptions, Simulation};
use nfsim::scenario::model::Release;
use nfsim::scenario::{load_file, load_str, Scenario};
use sim_core::SimTime;

const FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/scenarios/topology-prefer-close.yaml"
);

fn opts() -> RunOptions {
    RunOptions {
        record_timeline: true,
        conntrack_events: true,
        progress: None,
    }
}

fn at(secs: u64) -> SimTime {
    SimTime::ZERO + sim_core::SimDuration::from_secs(secs)
}

/// The endpoints a node's rules DNAT the Service to: iptables `--to-destination`, or the
/// nftables endpoint chains' `dnat to`.
fn dnat_targets(rules: &str) -> Vec<String> {
    let mut v: Vec<String> = rules
        .lines()
        .filter_map(|l| {
            l.split_once("--to-destination ")
                .or_else(|| l.split_once("dnat to "))
                .map(|(_, t)| t.split_whitespace().next().unwrap_or("").to_string())
        })
        .filter(|t| t.ends_with(":53"))
        .collect();
    v.sort();
    v.dedup();
    v
}

fn rule_timeline(sc: Scenario) -> Vec<(u64, Vec<String>, Vec<String>)> {
    let mut sim = Simulation::new(sc, opts()).unwrap();
    let mut out = Vec::new();
    for t in [60, 150, 239, 245] {
        sim.run_until(at(t)).unwrap();
        out.push((t, dnat_targets(&sim.rules(0)), dnat_targets(&sim.rules(1))));
    }
    out
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn each_node_renders_its_zones_endpoints_falls_back_and_returns() {
    let a = s(&["10.244.1.5:53"]);
    let b = s(&["10.244.2.5:53", "10.244.2.6:53"]);
    let a2 = s(&["10.244.1.6:53"]);
    let want = vec![
        (60, a, b.clone()),
        // dns-a deleted at 2m: zone-a has no ready hinted endpoint, node-a uses zone-b's.
        (150, b.clone(), b.clone()),
        (239, b.clone(), b.clone()),
        // dns-a2 ready at 4m (+1 s slice delay, +100 ms watch): node-a's rules hold it alone.
        (245, a2, b),
    ];
    assert_eq!(rule_timeline(load_file(FILE).unwrap()), want);
    let text = std::fs::read_to_string(FILE).unwrap();
    let nft = text.replace(
        "  release: latest\n",
        "  release: latest\n  mode: nftables\n",
    );
    assert_ne!(nft, text);
    assert_eq!(rule_timeline(load_str(FILE, &nft).unwrap()), want);
}

#[test]
fn without_zones_every_node_renders_every_endpoint() {
    // The same file with the zones taken away: no hints, every node all endpoints.
    let text = std::fs::read_to_string(FILE)
        .unwrap()
        .replace("    zone: zone-a\n", "")
        .replace("    labels: {topology.kubernetes.io/zone: zone-b}\n", "");
    let all = s(&["10.244.1.5:53", "10.244.2.5:53", "10.244.2.6:53"]);
    let t = rule_timeline(load_str(FILE, &text).unwrap());
    assert_eq!(t[0], (60, all.clone(), all));
}

#[test]
fn the_shipped_scenario_meets_its_expectations_and_the_entry_to_zone_b_survives_every_release() {
    for name in ["v1.31", "v1.31-fixed", "v1.32", "v1.33", "latest"] {
        let rel = Release::parse(name).unwrap();
        let mut sc = load_file(FILE).unwrap();
        sc.kube_proxy.release = rel;
        let r = Simulation::new(sc, opts()).unwrap().finish().unwrap();
        let failed: Vec<_> = r.results.iter().filter(|x| !x.passed).collect();
        assert!(failed.is_empty(), "{rel}: {failed:#?}");
        // The fixed-port client's entry to dns-b1 (zone-b) is never deleted after dns-a2 is
        // ready: no cleanup line for it from 4m on, although every sync ran the cleanup.
        let deleted_after: Vec<_> = r
            .timeline
            .iter()
            .filter(|e| e.t_ns >= 240_000_000_000)
            .map(|e| e.line())
            .filter(|t| t.contains("cleanup deleted") && t.contains("sport=40000"))
            .collect();
        assert!(deleted_after.is_empty(), "{rel}: {deleted_after:?}");
    }
}

#[test]
fn without_the_cleanup_the_fixed_port_client_stays_on_the_deleted_pod() {
    // `none`: the entry to dns-a outlives the pod, so the expectations about zone-b fail.
    let mut sc = load_file(FILE).unwrap();
    sc.kube_proxy.release = Release::parse("none").unwrap();
    let r = Simulation::new(sc, opts()).unwrap().finish().unwrap();
    let failed: Vec<&str> = r
        .results
        .iter()
        .filter(|x| !x.passed)
        .map(|x| x.name.as_str())
        .collect();
    assert!(
        failed.iter().any(|n| n.contains("moved to zone-b")),
        "{failed:?}"
    );
}

#[test]
fn trafficdistribution_in_a_release_without_it_warns_and_sets_no_hints() {
    let text = std::fs::read_to_string(FILE).unwrap().replace(
        "trafficDistribution: PreferClose",
        "trafficDistribution: PreferSameNode",
    );
    let mut sc = load_str(FILE, &text.replace("release: latest", "release: v1.33")).unwrap();
    assert!(
        sc.warnings
            .iter()
            .any(|w| w.message.contains("PreferSameNode needs v1.34")),
        "{:?}",
        sc.warnings
    );
    // No hints: node-a renders every endpoint.
    sc.kube_proxy.release = Release::parse("v1.33").unwrap();
    let t = rule_timeline(sc);
    assert_eq!(t[0].1.len(), 3);
    // In the newest release PreferSameNode narrows node-a to its own endpoint.
    let sc = load_str(FILE, &text).unwrap();
    assert!(sc.warnings.is_empty(), "{:?}", sc.warnings);
    assert_eq!(rule_timeline(sc)[0].1, s(&["10.244.1.5:53"]));
}

#[test]
fn bad_topology_words_are_located_errors() {
    let text = std::fs::read_to_string(FILE).unwrap();
    for (from, to, want) in [
        (
            "      trafficDistribution: PreferClose",
            "      trafficDistribution: Nearby",
            "PreferClose",
        ),
        ("    zone: zone-a\n", "    zone: \"zone a\"\n", "zone"),
        (
            "    zone: zone-a\n",
            "    zone: zone-a\n    labels: {topology.kubernetes.io/zone: zone-c}\n",
            "differs",
        ),
        (
            "    zone: zone-a\n",
            "    zone: zone-a\n    allocatableCPU: 0\n",
            "allocatableCPU",
        ),
        (
            "    zone: zone-a\n",
            "    zone: zone-a\n    allocatableCPU: \"4 cores\"\n",
            "allocatableCPU",
        ),
    ] {
        let bad = text.replacen(from, to, 1);
        assert_ne!(bad, text);
        let e = load_str(FILE, &bad).unwrap_err();
        assert!(e.line > 0, "{e}");
        assert!(e.to_string().contains(want), "{e}");
    }
}

#[test]
fn prefer_same_node_gives_two_nodes_of_one_zone_their_own_endpoints() {
    // Both nodes in zone-a: PreferSameNode narrows each to the endpoints hinted for it, so
    // the two nodes cannot share one kube-proxy's rules (nodes whose rules are equal but for
    // the name otherwise do).
    let text = std::fs::read_to_string(FILE)
        .unwrap()
        .replace(
            "trafficDistribution: PreferClose",
            "trafficDistribution: PreferSameNode",
        )
        .replace(
            "labels: {topology.kubernetes.io/zone: zone-b}",
            "labels: {topology.kubernetes.io/zone: zone-a}",
        )
        // One cluster CIDR: the two nodes' configurations are then equal but for the name.
        .replace(
            "  release: latest\n",
            "  release: latest\n  clusterCIDR: 10.244.0.0/16\n",
        );
    assert!(text.contains("clusterCIDR"));
    let t = rule_timeline(load_str(FILE, &text).unwrap());
    assert_eq!(
        t[0],
        (
            60,
            s(&["10.244.1.5:53"]),
            s(&["10.244.2.5:53", "10.244.2.6:53"])
        )
    );
    // With PreferClose the zone is shared: both nodes render all three.
    let close = text.replace(
        "trafficDistribution: PreferSameNode",
        "trafficDistribution: PreferClose",
    );
    let all = s(&["10.244.1.5:53", "10.244.2.5:53", "10.244.2.6:53"]);
    assert_eq!(
        rule_timeline(load_str(FILE, &close).unwrap())[0],
        (60, all.clone(), all)
    );
}
