//! `nodes[].state`: a scenario node starting from a real node's saved `iptables-save` and
//! `conntrack -L` (scenarios/from-production-node.yaml): kube-proxy's first sync runs over the
//! saved rules as on a restart, its cleanup sees the saved entries, and bad files are located
//! errors.

#[path = "support/cli.rs"]
mod cli;
use cli::nfsim;

use nfsim::cluster::sim::{RunOptions, Simulation};
use nfsim::scenario::load_str;
use sim_core::SimTime;

const SCENARIO: &str = "scenarios/from-production-node.yaml";

#[test]
fn the_shipped_scenario_passes_and_the_first_sync_replaces_only_kube_proxys_chains() {
    let (code, out, err) = nfsim(&["run", SCENARIO]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("node node-2: saved state: iptables-restore of scenarios/from-production-node/rules.txt: 36 rule(s) loaded"),
        "{out}"
    );
    assert!(out.contains("kube-proxy node-2: cleanup deleted udp      17 117 src=10.244.2.9 dst=10.96.0.10 sport=40000 dport=53 src=10.244.1.5"), "{out}");
    let (code, rules, err) = nfsim(&["rules", SCENARIO, "--node", "node-2", "--at", "10s"]);
    assert_eq!(code, 0, "{err}");
    // coredns-a's chain was in the dump; kube-proxy's first sync deleted it (-X), as it does
    // with service chains it finds and no longer writes.
    let saved = std::fs::read_to_string("scenarios/from-production-node/rules.txt").unwrap();
    assert!(saved.contains(":KUBE-SEP-CEYPGFB7VCORONY3 - [0:0]"));
    assert!(!rules.contains("KUBE-SEP-CEYPGFB7VCORONY3"), "{rules}");
    assert!(
        rules.contains("-j DNAT --to-destination 10.244.2.5:53"),
        "{rules}"
    );
    // flannel's chains and jumps are left as they were.
    for l in saved.lines().filter(|l| l.contains("FLANNEL")) {
        assert!(rules.lines().any(|r| r == l), "{l} missing:\n{rules}");
    }
    // kube-proxy's jump rules are not doubled.
    assert_eq!(
        rules
            .lines()
            .filter(|l| l
                .contains("-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\""))
            .count(),
        1,
        "{rules}"
    );
}

#[test]
fn a_release_without_cleanup_leaves_the_loaded_entry_and_blackholes_the_client() {
    let text = std::fs::read_to_string(SCENARIO)
        .unwrap()
        .replace("release: v1.33", "release: none");
    let sc = load_str(SCENARIO, &text).unwrap_or_else(|e| panic!("{e}"));
    let mut sim = Simulation::new(sc, RunOptions::default()).unwrap();
    let n = sim.node_index("node-2").unwrap();
    sim.run_until(SimTime::from_secs(300)).unwrap();
    let dump = sim.conntrack_dump(n);
    assert!(
        dump.contains("src=10.244.2.9 dst=10.96.0.10 sport=40000 dport=53 src=10.244.1.5"),
        "{dump}"
    );
    let r = sim.finish().unwrap();
    let failed: Vec<_> = r.results.iter().filter(|x| !x.passed).collect();
    assert!(
        failed
            .iter()
            .any(|x| x.detail.contains("answered 0, expected 10")),
        "{failed:?}"
    );
}

fn load_with(files: &[(&str, &str)], state: &str) -> String {
    let dir = std::env::temp_dir().join(format!(
        "nfsim-node-state-{}-{}",
        std::process::id(),
        files.len() + state.len()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let yaml = format!(
        "name: t\nduration: 1m\nnodes:\n  - name: node-1\n    address: 192.168.0.11\n    podCIDR: 10.244.1.0/24\n    state: {state}\n"
    );
    let file = dir.join("s.yaml");
    std::fs::write(&file, &yaml).unwrap();
    let err = nfsim::scenario::load_file(file.to_str().unwrap())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    std::fs::remove_dir_all(&dir).ok();
    err.replace(&dir.display().to_string(), "DIR")
}

#[test]
fn bad_state_files_are_located_errors() {
    let err = load_with(
        &[(
            "rules.txt",
            "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -m nosuchmatch -j ACCEPT\nCOMMIT\n",
        )],
        "{rules: rules.txt}",
    );
    assert!(
        err.starts_with("DIR/s.yaml:7:20: state.rules: DIR/rules.txt:3:"),
        "{err}"
    );
    let err = load_with(
        &[(
            "ct.txt",
            "udp      17 30 src=10.0.0.1 dst=10.0.0.2 sport=1\n",
        )],
        "{conntrack: ct.txt}",
    );
    assert!(
        err.starts_with("DIR/s.yaml:7:24: state.conntrack: DIR/ct.txt: line 1"),
        "{err}"
    );
    let err = load_with(&[], "{rules: missing.txt}");
    assert!(err.contains("cannot read DIR/missing.txt"), "{err}");
    let err = load_with(&[], "{}");
    assert!(err.contains("state: expected `rules`"), "{err}");
}

/// The scenario with node-2's saved rules given `[packets:bytes]` counters, as
/// `iptables-save -c` prints them, in a directory of its own.
fn with_counted_rules(tag: &str) -> (std::path::PathBuf, String) {
    let dir =
        std::env::temp_dir().join(format!("nfsim-node-counters-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(dir.join("from-production-node")).unwrap();
    let rules = std::fs::read_to_string("scenarios/from-production-node/rules.txt")
        .unwrap()
        .replacen(":INPUT ACCEPT [0:0]", ":INPUT ACCEPT [12345:6789012]", 1)
        .replacen(
            "-A FLANNEL-FWD -s 10.244.0.0/16",
            "[7:420] -A FLANNEL-FWD -s 10.244.0.0/16",
            1,
        );
    std::fs::write(dir.join("from-production-node/rules.txt"), &rules).unwrap();
    std::fs::copy(
        "scenarios/from-production-node/conntrack.txt",
        dir.join("from-production-node/conntrack.txt"),
    )
    .unwrap();
    let file = dir.join("s.yaml");
    std::fs::copy(SCENARIO, &file).unwrap();
    (dir, file.display().to_string())
}

/// `iptables-restore -c` then `iptables-save -c` on the kernel keeps a rule's and a built-in
/// chain's counters: a node loaded from `iptables-save -c` prints them, not `[0:0]` (failed
/// before: the state was restored without `-c`).
#[test]
fn saved_counters_are_kept_and_printed_by_rules_c() {
    let (dir, file) = with_counted_rules("rules");
    let (code, rules, err) = nfsim(&["rules", &file, "--node", "node-2", "--at", "0s", "-c"]);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(code, 0, "{err}");
    assert!(
        rules.contains("\n:INPUT ACCEPT [12345:6789012]\n"),
        "{rules}"
    );
    assert!(
        rules.contains(
            "\n[7:420] -A FLANNEL-FWD -s 10.244.0.0/16 -m comment --comment \"flanneld forward\" -j ACCEPT\n"
        ),
        "{rules}"
    );
}

/// Loads a one-node scenario whose node-1 has `state` (files written beside it) and the
/// scenario-wide `sysctls` YAML block `top`; returns the scenario or the error text.
fn scenario_with(
    files: &[(&str, &str)],
    state: &str,
    top: &str,
) -> Result<(nfsim::scenario::Scenario, Vec<String>), String> {
    let dir = std::env::temp_dir().join(format!(
        "nfsim-node-sysctls-{}-{}",
        std::process::id(),
        state.len() + top.len()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let yaml = format!(
        "name: t\nduration: 1m\n{top}nodes:\n  - name: node-1\n    address: 192.168.0.11\n    podCIDR: 10.244.1.0/24\n    state: {state}\n    sysctls:\n      net.netfilter.nf_conntrack_udp_timeout: 45\n"
    );
    let file = dir.join("s.yaml");
    std::fs::write(&file, &yaml).unwrap();
    let r = nfsim::scenario::load_file(file.to_str().unwrap()).map_err(|e| e.to_string());
    std::fs::remove_dir_all(&dir).ok();
    let d = dir.display().to_string();
    r.map(|sc| {
        let w = sc
            .warnings
            .iter()
            .map(|w| w.to_string().replace(&d, "DIR"))
            .collect();
        (sc, w)
    })
    .map_err(|e| e.replace(&d, "DIR"))
}

/// A real node's whole `sysctl -a | grep ^net.netfilter` (53 lines of the 6.18 kernel) loads:
/// each modelled sysctl applied (the node's own `sysctls` over it), one warning per one not
/// modelled, with why (failed before: `state` had no `sysctls`, and the scenario's
/// `sysctls` refused every unmodelled name).
#[test]
fn a_real_nodes_sysctl_file_is_taken_whole_with_a_warning_per_unmodelled_one() {
    let real = std::fs::read_to_string("tests/fixtures/sysctl/netfilter-6.18.txt")
        .unwrap()
        .replace(
            "nf_conntrack_udp_timeout_stream = 120",
            "nf_conntrack_udp_timeout_stream = 180",
        )
        .replace("nf_conntrack_timestamp = 0", "nf_conntrack_timestamp = 1");
    let (sc, w) = scenario_with(
        &[("sysctl.txt", &real)],
        "{sysctls: sysctl.txt}",
        "sysctls:\n  net.netfilter.nf_conntrack_acct: 1\n",
    )
    .unwrap();
    let s = &sc.nodes[0].sysctls;
    assert_eq!(s["net.netfilter.nf_conntrack_udp_timeout_stream"], 180);
    assert_eq!(s["net.netfilter.nf_conntrack_timestamp"], 1);
    assert_eq!(s["net.netfilter.nf_conntrack_udp_timeout"], 45);
    let one = |needle: &str| w.iter().filter(|l| l.contains(needle)).count();
    assert_eq!(
        one("nf_conntrack_checksum: not modelled (conntrack does not verify layer-4 checksums"),
        1,
        "{w:#?}"
    );
    assert_eq!(one("nf_conntrack_sctp_timeout_established: not modelled (SCTP is tracked as the generic protocol"), 1, "{w:#?}");
    assert_eq!(
        one("nf_conntrack_frag6_timeout: not modelled (IPv6 fragments"),
        1,
        "{w:#?}"
    );
    assert_eq!(one("nf_conntrack_tcp_be_liberal"), 0, "{w:#?}");
    assert_eq!(one("nf_log."), 0, "{w:#?}");
    assert!(
        w.iter().any(|l| l.contains("DIR/s.yaml:9:22: warning: state.sysctls: DIR/sysctl.txt: line 9: net.netfilter.nf_conntrack_frag6_timeout")),
        "{w:#?}"
    );
    // The scenario-wide map warns about a kernel sysctl it does not model, at its value.
    assert!(
        w.iter().any(|l| l.contains("sysctl net.netfilter.nf_conntrack_acct: not modelled (per-entry packet and byte counters")),
        "{w:#?}"
    );
    // Impossible values are refused, located; an unknown name in the map stays an error.
    let bad = real.replace("nf_conntrack_acct = 0", "nf_conntrack_acct = 7");
    let e = scenario_with(&[("sysctl.txt", &bad)], "{sysctls: sysctl.txt}", "").unwrap_err();
    assert!(
        e.starts_with("DIR/s.yaml:7:22: state.sysctls: DIR/sysctl.txt: line 1: sysctl net.netfilter.nf_conntrack_acct: \"7\": expected 0 or 1"),
        "{e}"
    );
    let e = scenario_with(
        &[("sysctl.txt", &real)],
        "{sysctls: sysctl.txt}",
        "sysctls:\n  net.netfilter.nf_conntrack_udp_timeot: 1\n",
    )
    .unwrap_err();
    assert!(e.contains("unknown sysctl"), "{e}");
}

/// The loaded entries are the node's starting state, not traffic: `conntrack -S` counts no
/// `insert=` for them (failed before: insert=4, one per loaded entry).
#[test]
fn loaded_entries_are_not_counted_as_inserts() {
    let (code, out, err) = nfsim(&[
        "conntrack",
        SCENARIO,
        "--node",
        "node-2",
        "--at",
        "0s",
        "-S",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(" insert=0 "), "{out}");
}

/// A scenario node's saved rules naming an interface the node lacks (a bridge CNI's `cni0`,
/// where nfsim's pods have veths of their own) never match it: one warning per rule, at
/// `state.rules`, naming the rules file's line (failed before: silence). The node's own
/// interfaces (`eth0`, an `extraAddresses` interface, the pods' `veth…`) draw none.
#[test]
fn saved_rules_naming_an_interface_the_node_lacks_are_warned_about() {
    let rules = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A FORWARD -i cni0 -j ACCEPT\n-A FORWARD -o eth0 -j ACCEPT\n-A FORWARD -i veth+ -j ACCEPT\n-A FORWARD -o flannel.1 -j ACCEPT\nCOMMIT\n";
    let (_, w) = scenario_with(&[("rules.txt", rules)], "{rules: rules.txt}", "").unwrap();
    let iface: Vec<&String> = w.iter().filter(|l| l.contains("names interface")).collect();
    assert_eq!(iface.len(), 2, "{w:#?}");
    assert!(
        iface[0].starts_with("DIR/s.yaml:7:20: warning: state.rules: DIR/rules.txt:5: the rule names interface cni0, which node node-1 lacks (it has lo, eth0, veth+), so it never matches here (negated: always): -A FORWARD -i cni0 -j ACCEPT"),
        "{iface:#?}"
    );
    assert!(
        iface[1].contains("DIR/rules.txt:8: the rule names interface flannel.1"),
        "{iface:#?}"
    );
}

/// `nodes[].state.rules6`: a real node's `ip6tables-save` loads into the node's ip6tables
/// tables at time 0 (policy counters kept, rule counters 0 as ip6tables 1.8.9 keeps them),
/// `nfsim rules -6` prints them back, and a bad line is a located error.
#[test]
fn a_saved_ip6tables_file_loads_into_the_nodes_ip6tables_tables() {
    let rules6 = "*filter\n:INPUT ACCEPT [5:400]\n[3:240] -A INPUT -s fd00:10::/64 -p ipv6-icmp -m icmp6 --icmpv6-type echo-request -j ACCEPT\nCOMMIT\n";
    let dir = std::env::temp_dir().join(format!("nfsim-node-rules6-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("rules6.txt"), rules6).unwrap();
    let yaml = "name: t\nduration: 1m\nnodes:\n  - name: node-1\n    address: 192.168.0.11\n    podCIDR: 10.244.1.0/24\n    state: {rules6: rules6.txt}\n";
    let file = dir.join("s.yaml");
    std::fs::write(&file, yaml).unwrap();
    let f = file.to_str().unwrap();
    let (code, out, err) = nfsim(&["rules", f, "--node", "node-1", "--at", "0s", "-6", "-c"]);
    assert_eq!(code, 0, "{err}");
    // Loaded, but said not to act: the scenario's machines are IPv4.
    assert!(
        err.contains("s.yaml:7:") && err.contains("no packet of the run meets them"),
        "{err}"
    );
    assert!(
        out.contains("# Generated by ip6tables-save v1.8.9"),
        "{out}"
    );
    assert!(out.contains("\n:INPUT ACCEPT [5:400]\n"), "{out}");
    assert!(
        out.contains(
            "\n[0:0] -A INPUT -s fd00:10::/64 -p ipv6-icmp -m icmp6 --icmpv6-type 128 -j ACCEPT\n"
        ),
        "{out}"
    );
    // The iptables side is untouched by it.
    let (_, v4, _) = nfsim(&["rules", f, "--node", "node-1", "--at", "0s", "-t", "filter"]);
    assert!(!v4.contains("icmp6"), "{v4}");
    let (_, run, _) = nfsim(&["run", f]);
    assert!(
        run.contains("saved state: ip6tables-restore of") && run.contains("1 rule(s) loaded"),
        "{run}"
    );
    std::fs::remove_dir_all(&dir).ok();
    let err = load_with(
        &[(
            "r6.txt",
            "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p icmp -m icmp --icmp-type 8 -j ACCEPT\nCOMMIT\n",
        )],
        "{rules6: r6.txt}",
    );
    assert!(
        err.starts_with("DIR/s.yaml:7:21: state.rules6: DIR/r6.txt:3:"),
        "{err}"
    );
}
