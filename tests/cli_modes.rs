//! Every command of the `nfsim` binary in both of kube-proxy's modes (iptables and
//! nftables), each with an assertion on what that mode prints, so that a command that
//! silently prints nothing (or the other mode's text) in one mode fails here: `nfsim rules
//! FILE --node N` printed nothing for an nftables node before.

#[path = "support/cli.rs"]
mod cli;
use cli::nfsim;

const IPTABLES: &str = "scenarios/stale-dns-udp.yaml";
const NFTABLES: &str = "scenarios/stale-dns-udp-nftables.yaml";
/// kube-proxy's nftables transaction for a ClusterIP 172.30.0.41:80 (`nft -f` syntax).
const NFT_RULES: &str = "tests/fixtures/nft/kube-proxy-base.nft";
/// The nftables fixture's node, with a seed that picks the same endpoint every run.
const NFT_NODE: [&str; 6] = [
    "--rules",
    NFT_RULES,
    "--node-addr",
    "192.168.0.2",
    "--seed",
    "4",
];
const IPT_RULES: &str = "tests/fixtures/cli/kube-proxy.rules";

fn ok(args: &[&str]) -> String {
    let (code, out, err) = nfsim(args);
    assert_eq!(code, 0, "nfsim {args:?}: {err}");
    out
}

#[test]
fn run_in_both_modes() {
    for (file, first) in [
        (IPTABLES, "the first query goes to coredns-a"),
        (NFTABLES, "the first query goes to coredns-b"),
    ] {
        let out = ok(&["run", file, "--until", "6m"]);
        assert!(out.contains(first), "{file}:\n{out}");
    }
}

#[test]
fn rules_in_both_modes() {
    let ipt = ok(&["rules", IPTABLES, "--node", "node-2", "--at", "1m"]);
    assert!(
        ipt.contains("\n*nat\n") && ipt.contains("-A KUBE-SERVICES"),
        "{ipt}"
    );
    let nat = ok(&[
        "rules", IPTABLES, "--node", "node-2", "--at", "1m", "-t", "nat", "--list",
    ]);
    assert!(nat.starts_with("Chain PREROUTING (policy ACCEPT"), "{nat}");
    // nftables: nft list ruleset, and -t / --list as nft list table ip kube-proxy.
    let all = ok(&["rules", NFTABLES, "--node", "node-2", "--at", "1m"]);
    assert!(all.starts_with("table ip kube-proxy {\n"), "{all}");
    assert!(all.contains("\tchain nat-prerouting {\n"), "{all}");
    for extra in [
        &["-t", "kube-proxy"][..],
        &["--list"][..],
        &["-t", "ip kube-proxy"][..],
    ] {
        let mut args = vec!["rules", NFTABLES, "--node", "node-2", "--at", "1m"];
        args.extend_from_slice(extra);
        assert_eq!(ok(&args), all, "{extra:?}");
    }
    let (code, _, err) = nfsim(&["rules", NFTABLES, "--node", "node-2", "-t", "inet nope"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("no nftables table inet nope: it has ip kube-proxy"),
        "{err}"
    );
    let (code, _, err) = nfsim(&["rules", NFTABLES, "--node", "node-2", "-c"]);
    assert_eq!(code, 2);
    assert!(err.contains("-c is iptables-save's"), "{err}");
}

#[test]
fn conntrack_in_both_modes() {
    for (file, endpoint) in [(IPTABLES, "10.244.1.5"), (NFTABLES, "10.244.2.5")] {
        let out = ok(&[
            "conntrack",
            file,
            "--node",
            "node-2",
            "--at",
            "4m",
            "-p",
            "udp",
        ]);
        assert!(
            out.contains(&format!(
                "src=10.244.2.9 dst=10.96.0.10 sport=40000 dport=53 src={endpoint}"
            )),
            "{file}:\n{out}"
        );
    }
}

#[test]
fn trace_in_both_modes() {
    // A scenario's node: the iptables chains or the nftables ones, in each tool's words.
    let pkt = "udp 192.168.0.12:40000 -> 10.96.0.10:53";
    let ipt = ok(&[
        "trace", IPTABLES, "--node", "node-2", "--at", "1m", "--local", "--packet", pkt,
    ]);
    assert!(ipt.contains("nat KUBE-SERVICES #"), "{ipt}");
    assert!(
        ipt.contains("\nmasqueraded:  yes, 192.168.0.12:40000 -> "),
        "{ipt}"
    );
    let nft = ok(&[
        "trace", NFTABLES, "--node", "node-2", "--at", "1m", "--local", "--packet", pkt,
    ]);
    assert!(
        nft.contains("-> table ip kube-proxy chain nat-output {"),
        "{nft}"
    );
    // masquerade fully-random rewrote the source: masqueraded (failed before: "no").
    assert!(
        nft.contains("masquerading #3 MATCH    masquerade fully-random"),
        "{nft}"
    );
    assert!(
        nft.contains("\nmasqueraded:  yes, 192.168.0.12:40000 -> 192.168.0.12:"),
        "{nft}"
    );
    let json = ok(&[
        "trace", NFTABLES, "--node", "node-2", "--at", "1m", "--local", "--packet", pkt, "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["outcome"]["masqueraded"], true, "{json}");
    // A rules file in either syntax: iptables-restore text, or nft -f commands.
    let ipt = ok(&[
        "trace",
        "--rules",
        IPT_RULES,
        "--node-addr",
        "192.168.0.12",
        "--pod-cidr",
        "10.244.0.0/16",
        "--packet",
        "udp 10.244.2.9:40000 -> 10.96.0.10:53",
    ]);
    assert!(
        ipt.contains("\nDNAT:         10.96.0.10:53 -> 10.244."),
        "{ipt}"
    );
    let nft = ok(&[
        &["trace"][..],
        &NFT_NODE,
        &["--packet", "tcp 192.168.5.5:40000 -> 172.30.0.41:80"],
    ]
    .concat());
    assert!(
        nft.contains("\nDNAT:         172.30.0.41:80 -> 10.180.0.1:80\n"),
        "{nft}"
    );
    assert!(
        nft.contains("\nmasqueraded:  yes, 192.168.5.5:40000 -> 192.168.0.2:"),
        "{nft}"
    );
}

#[test]
fn replay_in_both_modes() {
    let cap = std::env::temp_dir().join(format!("nfsim-modes-{}.pcap", std::process::id()));
    let mut w =
        sim_core::pcap::PcapWriter::new(Vec::new(), sim_core::pcap::WriteLink::RawIp).unwrap();
    for (ms, p) in [
        (0, "udp 10.244.2.9:40000 -> 10.96.0.10:53"),
        (1, "tcp 192.168.5.5:40000 -> 172.30.0.41:80"),
    ] {
        let p: sim_core::Packet = p.parse().unwrap();
        w.write_packet(sim_core::SimTime::from_millis(ms), &p)
            .unwrap();
    }
    std::fs::write(&cap, w.into_inner()).unwrap();
    let c = cap.to_str().unwrap();
    let ipt = ok(&[
        "replay",
        "--rules",
        IPT_RULES,
        "--pod-cidr",
        "10.244.0.0/16",
        c,
    ]);
    assert!(
        ipt.contains("udp 10.244.2.9:40000 -> 10.96.0.10:53  =>  transmitted on cni0: udp 10.244.2.9:40000 -> 10.244."),
        "{ipt}"
    );
    let nft = ok(&[&["replay"][..], &NFT_NODE, &[c]].concat());
    assert!(
        nft.contains("tcp 192.168.5.5:40000 -> 172.30.0.41:80 SYN  =>  transmitted on eth0: tcp 192.168.0.2:"),
        "{nft}"
    );
    assert!(nft.contains(" -> 10.180.0.1:80 SYN  [NAT]"), "{nft}");
    // A bad nft file is a located error.
    let bad = std::env::temp_dir().join(format!("nfsim-modes-{}.nft", std::process::id()));
    std::fs::write(
        &bad,
        "add table ip t\nadd chain ip t c { type nat hook bogus priority 0 ; }\n",
    )
    .unwrap();
    let (code, _, err) = nfsim(&["replay", "--rules", bad.to_str().unwrap(), c]);
    assert_eq!(code, 2);
    assert!(err.contains(&format!("{}:2:", bad.display())), "{err}");
    let _ = std::fs::remove_file(&cap);
    let _ = std::fs::remove_file(&bad);
}

#[test]
fn sweep_in_both_modes() {
    // Each mode's own scenario, and one scenario swept across both modes.
    for file in [IPTABLES, NFTABLES] {
        let out = ok(&["sweep", file, "--seeds", "1..2", "-q"]);
        let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        assert_eq!(last["kind"], "aggregate", "{file}: {out}");
        assert_eq!(last["runs"], 2, "{file}: {out}");
    }
    let out = ok(&[
        "sweep",
        IPTABLES,
        "--seeds",
        "1..2",
        "-q",
        "--set",
        "kubeProxy.mode=iptables,nftables",
    ]);
    let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let modes: Vec<String> = last["combos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["set"]["kubeProxy.mode"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(modes, ["iptables", "nftables"], "{out}");
    assert!(
        last["combos"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["runs"] == 2),
        "{out}"
    );
}
