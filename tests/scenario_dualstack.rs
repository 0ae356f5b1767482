//! The incident on a dual-stack cluster (scenarios/stale-dns-udp-dualstack.yaml): nodes and
//! pods with an address of each family, a RequireDualStack kube-dns, each node's kube-proxy
//! running an IPv4 and an IPv6 proxier (`NewDualStackProxier`) into iptables and ip6tables
//! (or the `ip` and `ip6 kube-proxy` nft tables), and one sidecar per family. Every release's
//! cleanup treats the two families alike; the loader refuses what a dual-stack cluster cannot
//! be, at its place.

#[path = "support/scenario.rs"]
mod scenario_run;

use nfsim::cluster::sim::{RunOptions, Simulation};
use nfsim::scenario::{load_str, Scenario};
use scenario_run::run_scenario;
use sim_core::{SimDuration, SimTime};

fn text() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/stale-dns-udp-dualstack.yaml"
    ))
    .unwrap()
}

fn load(t: &str) -> Scenario {
    load_str("ds.yaml", t).unwrap_or_else(|e| panic!("{e}"))
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
fn the_dual_stack_incident_goes_stale_in_both_families() {
    let (lines, results) = lines(load(&text()));
    assert!(results.iter().all(|(_, p)| *p), "{results:?}");
    assert_eq!(results.len(), 12);
    // Each node runs both proxiers: one sync line per family per node at the start.
    for node in ["node-1", "node-2"] {
        for f in ["IPv4", "IPv6"] {
            let want = format!("kube-proxy {node} ({f} proxier): full sync");
            assert!(lines.iter().any(|l| l.contains(&want)), "no {want}");
        }
    }
    // The IPv4 sidecar is DNAT'd by iptables to coredns-a's IPv4 address, the IPv6 one by
    // ip6tables to its IPv6 address (allocated from node-1's second pod CIDR).
    let first = |who: &str| {
        lines
            .iter()
            .find(|l| l.contains(&format!("{who}: #0 DNAT'd")))
            .unwrap()
            .clone()
    };
    assert!(
        first("sidecar-v4").ends_with("10.96.0.10:53 -> 10.244.1.5:53"),
        "{}",
        first("sidecar-v4")
    );
    assert!(
        first("sidecar-v6").ends_with("[fd00:10:96::a]:53 -> [fd00:10:244:1::2]:53"),
        "{}",
        first("sidecar-v6")
    );
    assert!(lines.iter().any(|l| l
        == "00:00:00.000  pod kube-system/coredns-a: assigned fd00:10:244:1::2 (from node-1's pod CIDR fd00:10:244:1::/64)"));
    // The EndpointSlice controller makes one slice per family.
    assert!(lines.iter().any(|l| l.ends_with(
        "endpoints kube-system/kube-dns: 10.244.1.5 (not ready, not serving), 10.244.2.5"
    )));
    assert!(lines.iter().any(|l| l.ends_with(
        "endpoints kube-system/kube-dns: fd00:10:244:1::2 (not ready, not serving), fd00:10:244:2::2"
    )));
    // No cleanup deletes anything: v1.31.0 misses the endpoint in both proxiers.
    assert!(!lines.iter().any(|l| l.contains("cleanup deleted")));
}

/// The sidecars' queries after the kill: (sent, answered) of each family.
fn after_kill(lines: &[String], who: &str) -> (usize, usize) {
    let kill = lines.iter().position(|l| l.contains("OOMKilled")).unwrap();
    let sent = lines[kill..]
        .iter()
        .filter(|l| l.contains(&format!("{who}: query #")) && l.contains(" sent "))
        .count();
    let answered = lines[kill..]
        .iter()
        .filter(|l| l.contains(&format!("{who}: query #")) && l.contains("answered by"))
        .count();
    (sent, answered)
}

#[test]
fn every_release_treats_both_families_alike() {
    // Measured: each release's cleanup runs in each family's proxier over that family's
    // entries and maps only, with the same code; so each family's entry is deleted (or
    // missed) at the same sync. (A difference would be the headline; there is none.)
    let mut cleaned = 0;
    for release in [
        "none", "v1.28", "v1.29", "v1.31.0", "v1.31", "v1.32.0", "v1.32", "v1.34", "v1.37",
        "latest",
    ] {
        let t = text().replace("release: v1.31.0", &format!("release: {release}"));
        let (lines, _) = lines(load(&t));
        let v4 = after_kill(&lines, "sidecar-v4");
        let v6 = after_kill(&lines, "sidecar-v6");
        assert_eq!(v4.0, 110, "{release}");
        assert_eq!(v4, v6, "{release}: IPv4 {v4:?}, IPv6 {v6:?}");
        let deleted: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains("cleanup deleted"))
            .collect();
        if v4.1 > 0 {
            cleaned += 1;
            // One deletion per family, each of its own family's entry.
            assert_eq!(deleted.len(), 2, "{release}: {deleted:?}");
            assert!(deleted
                .iter()
                .any(|l| l.contains("src=10.244.2.9 dst=10.96.0.10")));
            assert!(deleted
                .iter()
                .any(|l| l.contains("src=fd00:10:244:2::3 dst=fd00:10:96::a")));
        } else {
            assert!(deleted.is_empty(), "{release}: {deleted:?}");
        }
    }
    assert_eq!(cleaned, 8, "all but none and v1.31.0 clean both entries");
}

#[test]
fn each_node_holds_both_families_rules_in_iptables_and_in_nftables() {
    for nft in [false, true] {
        let mut t = text();
        if nft {
            t = t.replace("kubeProxy:\n", "kubeProxy:\n  mode: nftables\n");
        }
        let sc = load(&t);
        let mut sim = Simulation::new(sc, RunOptions::default()).unwrap();
        sim.run_until(SimTime::ZERO + SimDuration::from_secs(60))
            .unwrap();
        let ns = sim.netns(1);
        if nft {
            let text = ns.nft().list_ruleset(sim.now());
            assert!(text.contains("table ip kube-proxy {"), "{text}");
            assert!(text.contains("table ip6 kube-proxy {"), "{text}");
            assert!(
                text.contains("10.96.0.10 . udp . 53 : goto service-"),
                "{text}"
            );
            assert!(
                text.contains("fd00:10:96::a . udp . 53 : goto service-"),
                "{text}"
            );
        } else {
            let v4 = ns.save(false);
            let v6 = ns.save_family(sim_netfilter::Family::Ipv6, false);
            assert!(
                v4.contains("-A KUBE-SERVICES -d 10.96.0.10/32 -p udp"),
                "{v4}"
            );
            assert!(!v4.contains("fd00:"), "{v4}");
            assert!(
                v6.contains("-A KUBE-SERVICES -d fd00:10:96::a/128 -p udp"),
                "{v6}"
            );
            // The IPv6 proxier's local-traffic detector is the node's IPv6 pod CIDR.
            assert!(
                v6.contains("! -s fd00:10:244:2::/64 -d fd00:10:96::a/128"),
                "{v6}"
            );
            assert!(!v6.contains("10.96.0.10"), "{v6}");
        }
    }
}

fn err(t: &str) -> nfsim::scenario::ScenarioError {
    load_str("ds.yaml", t).unwrap_err()
}

#[test]
fn what_a_dual_stack_cluster_cannot_be_is_refused_at_its_place() {
    let t = text();
    // Both `address` and `addresses`.
    let e = err(&t.replacen(
        "    addresses: [192.168.0.11, \"fd00::11\"]\n",
        "    address: 192.168.0.11\n    addresses: [192.168.0.11, \"fd00::11\"]\n",
        1,
    ));
    assert!(e.message.contains("both `address` and `addresses`"), "{e}");
    assert_eq!(e.line, 30, "{e}");
    // Two addresses of one family.
    let e = err(&t.replacen("\"fd00::11\"", "192.168.0.21", 1));
    assert!(e.message.contains("are both IPv4"), "{e}");
    // podCIDRs in another order than the addresses.
    let e = err(&t.replacen(
        "[10.244.1.0/24, \"fd00:10:244:1::/64\"]",
        "[\"fd00:10:244:1::/64\", 10.244.1.0/24]",
        1,
    ));
    assert!(
        e.message.contains("in the order of the node's addresses"),
        "{e}"
    );
    // Two addresses, one pod CIDR.
    let e = err(&t.replacen(
        "podCIDRs: [10.244.1.0/24, \"fd00:10:244:1::/64\"]",
        "podCIDR: 10.244.1.0/24",
        1,
    ));
    assert!(e.message.contains("two addresses and one pod CIDR"), "{e}");
    // A single-stack node in a dual-stack cluster.
    let e = err(&t.replacen(
        "    addresses: [192.168.0.12, \"fd00::12\"]\n    podCIDRs: [10.244.2.0/24, \"fd00:10:244:2::/64\"]\n",
        "    address: 192.168.0.12\n    podCIDR: 10.244.2.0/24\n",
        1,
    ));
    assert!(
        e.message.contains(
            "node node-2 is IPv4-only where the first node is dual-stack with IPv4 primary"
        ),
        "{e}"
    );
    // A pod `ip` of the second family.
    let e = err(&t.replacen("ip: 10.244.1.5", "ip: fd00:10:244:1::5", 1));
    assert!(
        e.message.contains("a pod's `ip` is its IPv4 address"),
        "{e}"
    );
    // A client `family` the cluster does not have.
    let single = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/stale-dns-udp.yaml"
    ))
    .unwrap()
    .replacen("    pod: app\n", "    pod: app\n    family: IPv6\n", 1);
    let e = err(&single);
    assert!(
        e.message
            .contains("family IPv6: the scenario's cluster is IPv4-only"),
        "{e}"
    );
    // `family` spelt otherwise than ipFamilies spell it.
    let e = err(&t.replace("family: IPv6", "family: ipv6"));
    assert!(e.message.contains("expected IPv4 or IPv6"), "{e}");
    // RequireDualStack without a range of each family (the apiserver's refusal).
    let e = err(&t.replace(
        "serviceCIDRs: [10.96.0.0/12, \"fd00:10:96::/112\"]\n",
        "serviceCIDR: 10.96.0.0/12\n",
    ));
    assert!(
        e.message.contains("not configured for dual-stack services"),
        "{e}"
    );
}

#[test]
fn prefer_dual_stack_on_single_stack_service_cidrs_gets_one_family() {
    // The nodes are dual-stack but the cluster's Services have one range: PreferDualStack
    // gets the IPv4 cluster IP only, one slice, and the IPv6 sidecar has no target.
    let t = text()
        .replace(
            "serviceCIDRs: [10.96.0.0/12, \"fd00:10:96::/112\"]\n",
            "serviceCIDR: 10.96.0.0/12\n",
        )
        .replace(
            "      clusterIPs: [10.96.0.10, \"fd00:10:96::a\"]\n      ipFamilies: [IPv4, IPv6]\n      ipFamilyPolicy: RequireDualStack",
            "      ipFamilyPolicy: PreferDualStack",
        );
    let e = err(&t);
    assert!(
        e.message
            .contains("target Service kube-system/kube-dns is IPv4-only (10.96.0.10)"),
        "{e}"
    );
    assert_eq!(e.line, 86, "{e}");
    // Without the IPv6 sidecar it runs, through the IPv4 proxier only.
    let t = t.replace(
        "    family: IPv6
",
        "",
    );
    let (lines, _) = lines(load(&t));
    assert!(lines.iter().any(|l| l.ends_with(
        "endpoints kube-system/kube-dns: 10.244.1.5 (not ready, not serving), 10.244.2.5"
    )));
    assert!(!lines
        .iter()
        .any(|l| l.contains("endpoints kube-system/kube-dns: fd00")));
}

#[test]
fn a_bridged_dual_stack_cluster_is_refused_at_cni() {
    // The bridge datapath is IPv4 only: the pods' IPv6 addresses would not be reached.
    let e = err(&text().replace("network:\n", "network:\n  cni: bridge\n"));
    assert!(
        e.message
            .contains("network.cni bridge: the scenario's cluster is dual-stack and the bridge datapath is IPv4 only"),
        "{e}"
    );
    assert_eq!(e.line, 25, "{e}");
}

#[test]
fn doctor_refuses_a_dual_stack_node_instead_of_auditing_one_family() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nfsim"))
        .args([
            "doctor",
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/scenarios/stale-dns-udp-dualstack.yaml"
            ),
            "--node",
            "node-2",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("node node-2 is dual-stack")
            && err.contains("does not audit dual-stack nodes yet"),
        "{err}"
    );
}
