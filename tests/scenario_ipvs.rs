//! `kubeProxy.mode: ipvs` in scenarios: the settings reach the node's IPVS table, what nfsim
//! cannot model is refused at its place, `nfsim ipvs` lists the table, `nfsim rules` prints
//! `ipvsadm-save -n` and `ipset save` before `iptables-save`.

#[path = "support/cli.rs"]
mod cli;
use cli::nfsim;
use nfsim::scenario::load_str;

const S: &str = "scenarios/stale-dns-udp-ipvs.yaml";

fn text() -> String {
    std::fs::read_to_string(S).unwrap()
}

/// The shipped scenario with its `kubeProxy:` block replaced.
fn with_kube_proxy(block: &str) -> String {
    let t = text();
    let i = t.find("kubeProxy:\n").unwrap();
    let j = i + t[i..].find("controlPlane:").unwrap();
    format!("{}{block}{}", &t[..i], &t[j..])
}

fn err(text: &str) -> nfsim::scenario::ScenarioError {
    load_str("t.yaml", text).unwrap_err()
}

#[test]
fn what_nfsim_cannot_model_in_ipvs_mode_is_refused_at_its_place() {
    let cases = [
        (
            "kubeProxy:\n  mode: ipvs\n  ipvs: {strictARP: true}\n",
            "strictARP: true is not modelled",
        ),
        (
            "kubeProxy:\n  mode: ipvs\n  ipvs: {scheduler: fifo}\n",
            "unknown IPVS scheduler \"fifo\": expected one of rr, wrr",
        ),
        (
            "kubeProxy:\n  mode: ipvs\n  release: v1.29\n",
            "IPVS mode is modelled for releases v1.30 to v1.37",
        ),
        (
            "kubeProxy:\n  mode: ipvs\n  syncCost: modelled\n",
            "syncCost: modelled is calibrated for iptables and nftables",
        ),
        (
            "kubeProxy:\n  ipvs: {scheduler: lc}\n",
            "kubeProxy.ipvs is read in mode: ipvs only",
        ),
    ];
    for (block, message) in cases {
        let e = err(&with_kube_proxy(block));
        assert!(e.message.contains(message), "{block}: {}", e.message);
        assert!(e.line > 1, "{block}: no line: {e:?}");
    }
    // Leaving IPVS mode mid-run: the other modes' CleanupLeftovers are not modelled.
    let t = with_kube_proxy("kubeProxy:\n  mode: ipvs\n").replace(
        "events:\n",
        "events:\n  - at: 1m\n    kubeProxy: {action: restart, settings: {mode: nftables}}\n",
    );
    let e = err(&t);
    assert!(e.message.contains("leaving mode ipvs"), "{}", e.message);
}

#[test]
fn the_scheduler_persistence_and_timeouts_reach_the_node() {
    let t = with_kube_proxy(
        "kubeProxy:\n  mode: ipvs\n  ipvs: {scheduler: wrr, udpTimeout: 60s, tcpTimeout: 1h}\n",
    )
    .replace(
        "      selector: {k8s-app: kube-dns}\n",
        "      selector: {k8s-app: kube-dns}\n      sessionAffinity: ClientIP\n",
    );
    let sc = load_str("t.yaml", &t).unwrap();
    let mut sim =
        nfsim::cluster::sim::Simulation::new(sc, nfsim::cluster::sim::RunOptions::default())
            .unwrap();
    sim.run_until(sim_core::SimTime::from_secs(60)).unwrap();
    let n = sim.node_index("node-2").unwrap();
    let ipvs = sim.netns(n).ipvs();
    let save = ipvs.save();
    // ClientIP affinity: FlagPersistent with the default timeout (10800 s).
    assert!(
        save.contains("-A -u 10.96.0.10:53 -s wrr -p 10800"),
        "{save}"
    );
    assert_eq!(
        ipvs.timeouts().text(),
        "Timeout (tcp tcpfin udp): 3600 120 60\n",
        "{save}"
    );
}

/// The node's `kernel.version` decides which `ip_vs_in` its IPVS runs: before 5.9 the old one
/// (a new SYN on a TIME_WAIT connection's tuple dropped once under `conn_reuse_mode`), from
/// 5.9 the new one.
#[test]
fn the_nodes_kernel_release_picks_its_ip_vs_in() {
    let t = with_kube_proxy("kubeProxy:\n  mode: ipvs\n");
    for (version, new) in [("5.4", false), ("5.9", true), ("6.6", true)] {
        let text = format!("kernel: {{version: \"{version}\"}}\n{t}");
        let sc = load_str("t.yaml", &text).unwrap();
        let sim =
            nfsim::cluster::sim::Simulation::new(sc, nfsim::cluster::sim::RunOptions::default())
                .unwrap();
        let n = sim.node_index("node-2").unwrap();
        assert_eq!(
            sim.netns(n).ipvs().sysctls().kernel_5_9,
            new,
            "kernel {version}"
        );
    }
}

#[test]
fn nfsim_ipvs_lists_the_connection_table_and_the_servers() {
    let (code, out, err) = nfsim(&["ipvs", S, "--node", "node-2", "--at", "4m"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "IPVS connection entries\n\
         pro expire state       source             virtual            destination\n\
         UDP 05:00  UDP         10.244.2.9:40000   10.96.0.10:53      10.244.2.5:53\n"
    );
    let (_, out, _) = nfsim(&["ipvs", S, "--node", "node-2", "--at", "6m", "--save"]);
    assert_eq!(
        out, "-A -u 10.96.0.10:53 -s rr\n-a -u 10.96.0.10:53 -r 10.244.1.5:53 -m -w 1\n",
        "the dead pod's UDP real server is deleted at once"
    );
    let (code, _, err) = nfsim(&["ipvs", S, "--node", "node-9"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn nfsim_rules_prints_ipvsadm_save_and_ipset_save_before_iptables_save() {
    let (code, out, err) = nfsim(&["rules", S, "--node", "node-2", "--at", "4m"]);
    assert_eq!(code, 0, "{err}");
    let ipvs = out
        .find("# ipvsadm-save -n\n-A -u 10.96.0.10:53 -s rr\n")
        .unwrap();
    let sets = out
        .find("# ipset save\ncreate KUBE-LOOP-BACK hash:ip,port,ip")
        .unwrap();
    let ipt = out.find("# Generated by iptables-save").unwrap();
    assert!(ipvs < sets && sets < ipt, "{out}");
    assert!(
        out.contains("add KUBE-CLUSTER-IP 10.96.0.10,udp:53\n"),
        "{out}"
    );
    assert!(out.contains("-A KUBE-SERVICES ! -s 10.244.2.0/24 -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ\n"), "{out}");
    // -t: iptables-save -t alone.
    let (_, out, _) = nfsim(&["rules", S, "--node", "node-2", "--at", "4m", "-t", "nat"]);
    assert!(!out.contains("# ipset save"), "{out}");
}

/// graceful_termination.go on a node: the deleted pod's TCP real server goes to weight 0 at
/// once (its two keep-alive connections continue), and is deleted by the first one-minute
/// check after its last connection expired (TIME_WAIT until about 171 s: the check at
/// 180 s), not before.
#[test]
fn a_tcp_real_server_drains_at_weight_zero_and_goes_at_the_next_minute_check() {
    const G: &str = "tests/fixtures/scenario/ipvs-graceful.yaml";
    let save = |at: &str| {
        let (code, out, err) = nfsim(&["ipvs", G, "--node", "node-1", "--at", at, "--save"]);
        assert_eq!(code, 0, "{err}");
        out
    };
    let rs = "-a -t 10.96.0.80:80 -r 10.244.1.5:8080 -m";
    assert!(save("19s").contains(&format!("{rs} -w 1\n")));
    assert!(save("30s").contains(&format!("{rs} -w 0\n")));
    assert!(save("179s").contains(&format!("{rs} -w 0\n")));
    assert!(!save("181s").contains(rs));
    let (_, out, _) = nfsim(&["ipvs", G, "--node", "node-1", "--at", "30s", "--list"]);
    assert!(
        out.contains("  -> 10.244.1.5:8080              Masq    0      2          0"),
        "{out}"
    );
}

/// The same scenario in the three modes: `sweep --set kubeProxy.mode=iptables,nftables,ipvs`
/// runs each (no run errors), and IPVS mode meets the expectations written for it.
#[test]
fn sweep_runs_the_three_modes() {
    let (code, out, err) = nfsim(&[
        "sweep",
        S,
        "--seeds",
        "1..1",
        "--set",
        "kubeProxy.mode=iptables,nftables,ipvs",
        "-q",
    ]);
    assert!(code == 0 || code == 1, "{err}");
    let runs: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("\"kind\":\"run\""))
        .collect();
    assert_eq!(runs.len(), 3, "{out}");
    for (mode, line) in ["iptables", "nftables", "ipvs"].iter().zip(&runs) {
        assert!(
            line.contains(&format!("\"kubeProxy.mode\":\"{mode}\"")),
            "{line}"
        );
        assert!(!line.contains("\"error\""), "{line}");
    }
    assert!(runs[2].contains("\"passed\":true"), "{}", runs[2]);
}
