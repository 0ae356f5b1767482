//! The incident on an IPv6-only cluster (scenarios/stale-dns-udp-ipv6.yaml): nodes, pods and
//! the Service are IPv6, each node runs kube-proxy's IPv6 proxier into its ip6tables, and the
//! timeline tells the same story as the IPv4 incident with IPv6 addresses; under a release
//! with the reconciler the IPv6 entry is cleaned; a dead pod answers with ICMPv6; a cluster
//! mixing families is refused at its place.

#[path = "support/scenario.rs"]
mod scenario_run;

use nfsim::scenario::model::Release;
use nfsim::scenario::{load_file, load_str, Scenario};
use scenario_run::run_scenario;

fn incident6() -> Scenario {
    load_file(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/stale-dns-udp-ipv6.yaml"
    ))
    .unwrap()
}

fn lines(sc: Scenario) -> (Vec<String>, Vec<(String, bool)>) {
    let r = run_scenario(sc, true);
    let lines = r.timeline.iter().map(|e| e.line()).collect();
    let results = r
        .results
        .iter()
        .map(|x| (x.name.clone(), x.passed))
        .collect();
    (lines, results)
}

#[test]
fn the_ipv6_incident_reproduces_through_the_ipv6_proxier() {
    let (lines, results) = lines(incident6());
    assert!(results.iter().all(|(_, p)| *p), "{results:?}");
    assert_eq!(results.len(), 6);
    // The first query is DNAT'd by the node's ip6tables to coredns-a's IPv6 address, and
    // its conntrack entry is an IPv6 one.
    let first = lines.iter().position(|l| l.contains("#0 DNAT'd")).unwrap();
    assert!(
        lines[first].ends_with("[fd00:10:96::a]:53 -> [fd00:10:244:1::5]:53"),
        "{}",
        lines[first]
    );
    assert!(
        lines.iter().any(|l| l.contains("[NEW] udp      17 30 src=fd00:10:244:2::9 dst=fd00:10:96::a sport=40000 dport=53 [UNREPLIED] src=fd00:10:244:1::5")),
        "no IPv6 entry created"
    );
    // After the kill the dead pod's host answers with ICMPv6 port unreachable (type 1
    // code 4), which the unconnected socket does not see; every later query still goes to
    // the dead pod.
    let kill = lines.iter().position(|l| l.contains("OOMKilled")).unwrap();
    assert!(lines[kill..]
        .iter()
        .any(|l| l.contains("ICMPv6 unreachable code 4 from fd00:10:96::a about query #10")));
    assert!(!lines.iter().any(|l| l.contains("-> [fd00:10:244:2::5]:53")));
}

#[test]
fn a_release_with_the_reconciler_cleans_the_ipv6_entry() {
    let mut sc = incident6();
    sc.kube_proxy.release = Release::parse("v1.33").unwrap();
    let (lines, results) = lines(sc);
    let del = lines
        .iter()
        .position(|l| l.contains("cleanup deleted udp"))
        .expect("the reconciler deletes the stale IPv6 entry");
    assert!(
        lines[del].contains("src=fd00:10:244:1::5"),
        "{}",
        lines[del]
    );
    // The reason names the endpoint and the Service's address as addresses print.
    assert!(
        lines[del].ends_with("(fd00:10:244:1::5 is not a serving endpoint of [fd00:10:96::a]:53)"),
        "{}",
        lines[del]
    );
    let next = lines[del..].iter().find(|l| l.contains("DNAT'd")).unwrap();
    assert!(next.ends_with("-> [fd00:10:244:2::5]:53"), "{next}");
    // The incident's expectations fail, as they should when the entry is cleaned.
    assert!(results.iter().any(|(_, p)| !*p));
}

#[test]
fn a_connected_client_is_refused_by_icmpv6_port_unreachable() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/stale-dns-udp-ipv6.yaml"
    ))
    .unwrap()
    .replace("connected: false", "connected: true");
    let sc = load_str("connected.yaml", &text).unwrap();
    let (lines, _) = lines(sc);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("sidecar: query #10 REFUSED (ICMPv6 unreachable code 4)")),
        "{:?}",
        lines
            .iter()
            .filter(|l| l.contains("#10"))
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_cluster_of_both_families_is_refused_at_the_node() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/stale-dns-udp-ipv6.yaml"
    ))
    .unwrap()
    .replacen("address: fd00::12", "address: 192.168.0.12", 1);
    let e = load_str("mixed.yaml", &text).unwrap_err().to_string();
    assert!(e.starts_with("mixed.yaml:"), "{e}");
    assert!(e.contains("192.168.0.12"), "{e}");
}

#[test]
fn the_ipv6_incident_reproduces_in_nftables_mode_through_the_ip6_table() {
    // nftables mode: each node's IPv6 proxier writes the `ip6 kube-proxy` table; the kill
    // names the pod the first query picked, so the seed's draw does not matter.
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/stale-dns-udp-ipv6.yaml"
    ))
    .unwrap()
    .replace("kubeProxy:\n", "kubeProxy:\n  mode: nftables\n")
    .replace(
        "oomKill: {pod: coredns-a}",
        "oomKill: {endpointOf: sidecar}",
    );
    let sc = load_str("nft6.yaml", &text).unwrap();
    let (lines, _) = lines(sc);
    let dnat: Vec<&String> = lines.iter().filter(|l| l.contains("DNAT'd")).collect();
    assert_eq!(dnat.len(), 120, "every query is DNAT'd by the ip6 table");
    let first = dnat[0].rsplit(" -> ").next().unwrap();
    assert!(first.starts_with("[fd00:10:244:"), "{first}");
    assert!(
        dnat.iter().all(|l| l.ends_with(first)),
        "the entry pins every query"
    );
    let lost = lines
        .iter()
        .filter(|l| l.contains("sidecar: query #") && l.contains("TIMED OUT"))
        .count();
    assert_eq!(lost, 110, "every query after the kill is lost");
}

#[test]
fn a_bridged_ipv6_cluster_is_refused_at_cni() {
    // The bridge datapath is IPv4 only: refused at `network.cni` while loading, with its
    // line, rather than when the node is built.
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/stale-dns-udp-ipv6.yaml"
    ))
    .unwrap()
    .replace("network:\n", "network:\n  cni: bridge\n");
    let e = load_str("br6.yaml", &text).unwrap_err();
    assert_eq!(e.line, 21, "{e}");
    assert!(
        e.message.contains("the bridge datapath is IPv4 only"),
        "{e}"
    );
}
