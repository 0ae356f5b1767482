//! The bridge datapath (`network.cni: bridge`): the shipped scenarios' outcomes, the same
//! clusters on kindnet's ptp (where neither br_netfilter nor hairpin mode takes part), and
//! the loader's refusals of what is not modelled.

#[path = "support/scenario.rs"]
mod scenario_run;

use nfsim::cluster::sim::RunResult;
use nfsim::scenario::load_str;
use scenario_run::run_text;

fn shipped(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/scenarios/{name}.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn answered(r: &RunResult, client: &str) -> (u64, u64) {
    let c = r.clients.iter().find(|c| c.name == client).unwrap();
    (c.sent, c.answered)
}

/// The scenario with its `network:` block replaced by kindnet's ptp (and no bridge sysctl).
fn on_ptp(text: &str) -> String {
    let mut out = String::new();
    let mut skip = false;
    for l in text.lines() {
        if l == "network:" {
            skip = true;
            continue;
        }
        if skip && l.starts_with("  ") {
            continue;
        }
        skip = false;
        if l.contains("sysctls:") || l.contains("bridge-nf-call-iptables:") {
            continue;
        }
        out.push_str(l);
        out.push('\n');
    }
    out
}

#[test]
fn without_br_netfilter_the_bridged_answer_is_not_un_dnatted() {
    let off = shipped("bridge-nf-call-iptables-off");
    let r = run_text("off.yaml", &off, false);
    assert!(r.passed(), "{:#?}", r.results);
    assert_eq!(answered(&r, "dig"), (6, 0));
    let on = run_text("on.yaml", &shipped("bridge-nf-call-iptables-on"), false);
    assert!(on.passed(), "{:#?}", on.results);
    assert_eq!(answered(&on, "dig"), (6, 6));
    // Routed between the pods (ptp), the answer comes back through the node's hooks.
    let ptp = run_text("ptp.yaml", &on_ptp(&off), false);
    assert_eq!(answered(&ptp, "dig"), (6, 6));
}

#[test]
fn a_pod_reaches_itself_through_its_service_only_in_hairpin_mode() {
    let off = run_text("off.yaml", &shipped("bridge-hairpin-off"), false);
    assert!(off.passed(), "{:#?}", off.results);
    assert_eq!(answered(&off, "self"), (6, 0));
    let on = run_text("on.yaml", &shipped("bridge-hairpin-on"), false);
    assert!(on.passed(), "{:#?}", on.results);
    assert_eq!(answered(&on, "self"), (6, 6));
    // With bridge-nf-call-iptables=0 the DNAT'd query is routed and leaves from cni0 itself,
    // which needs no hairpin mode (checked on the kernel in tests/bridge_kernel.rs).
    let routed = shipped("bridge-hairpin-off").replace(
        "    podCIDR: 10.244.1.0/24\n",
        "    podCIDR: 10.244.1.0/24\n    sysctls:\n      net.bridge.bridge-nf-call-iptables: 0\n",
    );
    let r = run_text("routed.yaml", &routed, false);
    assert_eq!(answered(&r, "self"), (6, 6));
}

fn load_err(text: &str) -> String {
    match load_str("t.yaml", text) {
        Ok(_) => panic!("loaded: {text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_loader_refuses_what_the_bridge_datapath_does_not_model() {
    let base = shipped("bridge-hairpin-on");
    let e = load_err(&base.replace("cni: bridge", "cni: aws-vpc"));
    assert!(
        e.contains("t.yaml:14:8:") && e.contains("aws-vpc is not modelled yet"),
        "{e}"
    );
    let e = load_err(&base.replace("cni: bridge", "cni: weave"));
    assert!(
        e.contains("unknown datapath \"weave\": expected ptp, bridge, flannel-vxlan or calico"),
        "{e}"
    );
    let e = load_err(&base.replace("cni: bridge", "cni: ptp"));
    assert!(
        e.contains("t.yaml:15:")
            && e.contains("network.hairpinMode: a bridge plugin option, but network.cni is ptp"),
        "{e}"
    );
    for (opt, word) in [
        ("promiscMode: true", "promiscMode"),
        ("isGateway: false", "isGateway"),
    ] {
        let e = load_err(&base.replace("hairpinMode: true", opt));
        assert!(
            e.contains(&format!("network.{word}:")) && e.contains("not modelled"),
            "{e}"
        );
    }
    let e = load_err(&base.replace(
        "    podCIDR: 10.244.1.0/24\n",
        "    podCIDR: 10.244.1.0/24\n    sysctls:\n      net.bridge.bridge-nf-call-iptables: 2\n",
    ));
    assert!(
        e.contains("net.bridge.bridge-nf-call-iptables: 2 is out of range: expected 0 or 1"),
        "{e}"
    );
    let e = load_err(&base.replace(
        "cni: bridge",
        "cni: bridge\n  bridge: a-very-long-bridge-name",
    ));
    assert!(e.contains("network.bridge:"), "{e}");
}

/// `(src MAC, dst MAC, src IP, dst IP, TTL)` of each IPv4 frame of a pcap file.
fn frames(path: &std::path::Path) -> Vec<(String, String, String, String, u8)> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= b.len() {
        let incl = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        let f = &b[at + 16..at + 16 + incl];
        let mac = |m: &[u8]| {
            m.iter()
                .map(|x| format!("{x:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        };
        let ip = |o: usize| std::net::Ipv4Addr::new(f[o], f[o + 1], f[o + 2], f[o + 3]).to_string();
        if f[12..14] == [8, 0] {
            out.push((mac(&f[6..12]), mac(&f[0..6]), ip(26), ip(30), f[22]));
        }
        at += 16 + incl;
    }
    out
}

#[test]
fn cni0_and_the_ports_are_capture_points_with_the_bridges_macs() {
    let dir = std::env::temp_dir().join(format!("nfsim-bridge-pcap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (name, sub) in [
        ("bridge-nf-call-iptables-off", "off"),
        ("bridge-nf-call-iptables-on", "on"),
    ] {
        let d = dir.join(sub);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_nfsim"))
            .args([
                "run",
                &format!("scenarios/{name}.yaml"),
                "--until",
                "1s",
                "--pcap",
            ])
            .arg(&d)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        assert!(out.status.code().is_some(), "{out:?}");
    }
    let (gw, dns, tool) = (
        "0a:58:0a:f4:01:01",
        "0a:58:0a:f4:01:05",
        "0a:58:0a:f4:01:09",
    );
    let s = |x: &str| x.to_string();
    // Off: the query passed up to cni0 (to the gateway's MAC), routed back out of it (TTL
    // 63, the bridge's MAC as source); the answer bridged port to port, never on cni0.
    let cni0 = frames(&dir.join("off/node-1-cni0.pcap"));
    assert_eq!(
        cni0,
        vec![
            (s(tool), s(gw), s("10.244.1.9"), s("10.96.0.10"), 64),
            (s(gw), s(dns), s("10.244.1.9"), s("10.244.1.5"), 63),
        ]
    );
    let coredns = frames(&dir.join("off/node-1-veth-coredns.pcap"));
    assert_eq!(
        coredns[0],
        (s(gw), s(dns), s("10.244.1.9"), s("10.244.1.5"), 63)
    );
    assert_eq!(
        coredns[1],
        (s(dns), s(tool), s("10.244.1.5"), s("10.244.1.9"), 64)
    );
    // On: bridged both ways (TTL 64, the sender's MAC kept), nothing on cni0.
    assert!(frames(&dir.join("on/node-1-cni0.pcap")).is_empty());
    let toolbox = frames(&dir.join("on/node-1-veth-toolbox.pcap"));
    assert_eq!(
        toolbox,
        vec![
            (s(tool), s(gw), s("10.244.1.9"), s("10.96.0.10"), 64),
            (s(dns), s(tool), s("10.96.0.10"), s("10.244.1.9"), 64),
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn trace_shows_the_bridge_decisions_and_where_the_hooks_are_skipped() {
    let trace = |file: &str, from: &str, packet: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_nfsim"))
            .args([
                "trace", file, "--node", "node-1", "--at", "1s", "--from", from, "--packet", packet,
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let reply = "udp 10.244.1.5:53 -> 10.244.1.9:40000";
    let off = trace(
        "scenarios/bridge-nf-call-iptables-off.yaml",
        "kube-system/coredns",
        reply,
    );
    assert!(off.contains("  bridge: br_netfilter off (bridge-nf-call-iptables=0): no inet hook sees the frame while it is bridged\n"), "{off}");
    assert!(
        off.contains(
            "  bridge: br_forward: out of port veth00000002, past FORWARD and POSTROUTING\n"
        ),
        "{off}"
    );
    assert!(!off.contains("PREROUTING"), "{off}");
    let query = "udp 10.244.1.9:40001 -> 10.96.0.10:53";
    let on = trace(
        "scenarios/bridge-nf-call-iptables-on.yaml",
        "toolbox",
        query,
    );
    for line in [
        "  bridge: cni0: frame 0a:58:0a:f4:01:09 > 0a:58:0a:f4:01:01 received on port veth00000002\n",
        "  bridge: br_nf_pre_routing: NF_INET_PRE_ROUTING in cni0, physindev veth00000002\n",
        "  bridge: br_nf_pre_routing_finish: 10.244.1.5 routed out of cni0 itself: bridged_dnat to 0a:58:0a:f4:01:05\n",
        "  bridge: br_nf_post_routing: NF_INET_POST_ROUTING out cni0, physoutdev veth00000001\n",
        "=> transmitted on veth00000001 to 10.244.1.5: udp 10.244.1.9:40001 -> 10.244.1.5:53\n",
    ] {
        assert!(on.contains(line), "{line}\n{on}");
    }
    assert!(on.contains("node:    lo 127.0.0.1/8 ::1/128, eth0 192.168.0.11/24, cni0 10.244.1.1/24, veth00000001, veth00000002\n"), "{on}");
}

#[test]
fn frames_to_a_gone_pods_mac_flood_the_other_ports_and_are_lost() {
    let text = "\
name: gone
duration: 30s
network: {cni: bridge}
nodes:
  - {name: node-1, address: 192.168.0.11, podCIDR: 10.244.1.0/24}
pods:
  - {name: echo, node: node-1, ip: 10.244.1.5, apps: [{udpServer: {port: 9000}}]}
  - {name: bystander, node: node-1, ip: 10.244.1.7}
  - {name: toolbox, node: node-1, ip: 10.244.1.9}
clients:
  - name: c
    pod: toolbox
    udp: {target: 10.244.1.5:9000, interval: 5s, timeout: 1s}
events:
  - at: 12s
    deletePod: {pod: echo, gracePeriod: 1s}
";
    let dir = std::env::temp_dir().join(format!("nfsim-bridge-gone-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("gone.yaml");
    std::fs::write(&file, text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nfsim"))
        .arg("run")
        .arg(&file)
        .arg("--pcap")
        .arg(dir.join("caps"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Queries at 0, 5, 10 s answered; from 15 s the pod is gone.
    assert!(
        stdout.contains("query #2 answered") && stdout.contains("query #3 TIMED OUT"),
        "{stdout}"
    );
    // Its MAC left the forwarding database with its port; the toolbox's neighbour entry
    // did not: each query floods to the bystander's port (which drops it) and is lost.
    let by = frames(&dir.join("caps/node-1-veth-bystander.pcap"));
    let flooded: Vec<_> = by.iter().filter(|f| f.3 == "10.244.1.5").collect();
    assert_eq!(flooded.len(), 3, "{by:?}");
    assert_eq!(flooded[0].1, "0a:58:0a:f4:01:05");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ip_masq_gives_each_pod_the_plugins_chain_and_masquerades_off_the_pod_cidr() {
    let text = |masq: bool| {
        format!(
            "\
name: masq
duration: 20s
network: {{cni: bridge, ipMasq: {masq}}}
nodes:
  - {{name: node-1, address: 192.168.0.11, podCIDR: 10.244.1.0/24}}
hosts:
  - {{name: internet, address: 203.0.113.10, apps: [{{udpServer: {{port: 53}}}}]}}
pods:
  - {{name: toolbox, node: node-1, ip: 10.244.1.9}}
clients:
  - name: c
    pod: toolbox
    udp: {{target: 203.0.113.10:53, sourcePort: 40000, interval: 5s, timeout: 1s, stop: 9s}}
events:
  - at: 15s
    deletePod: {{pod: toolbox, gracePeriod: 1s}}
expectations:
  - name: answered
    at: 10s
    client: {{name: c, sent: 2, answered: 2}}
  - name: the host saw the node's address
    at: 10s
    conntrack: {{node: node-1, filter: -p udp --orig-src 10.244.1.9 --reply-dst 192.168.0.11, count: {}}}
",
            if masq { 1 } else { 0 }
        )
    };
    for masq in [true, false] {
        let r = run_text("masq.yaml", &text(masq), false);
        assert!(r.passed(), "ipMasq {masq}: {:#?}", r.results);
    }
    // The rules as the plugin writes them, and gone with the pod (TeardownIPMasq).
    let rules_at = |at: &str| {
        let dir = std::env::temp_dir().join(format!("nfsim-bridge-masq-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("masq.yaml");
        std::fs::write(&file, text(true)).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_nfsim"))
            .args(["rules"])
            .arg(&file)
            .args(["--node", "node-1", "--at", at])
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        String::from_utf8(out.stdout).unwrap()
    };
    let at1 = rules_at("1s");
    let id = "name: \\\"cbr0\\\" id: \\\"";
    let lines: Vec<&str> = at1.lines().filter(|l| l.contains("CNI-")).collect();
    assert_eq!(lines.len(), 4, "{at1}");
    assert!(
        lines[0].starts_with(":CNI-")
            && lines[0].ends_with(" - [0:0]")
            && lines[0].len() == ":CNI-".len() + 24 + " - [0:0]".len(),
        "{at1}"
    );
    assert!(
        lines[1].starts_with(&format!(
            "-A POSTROUTING -s 10.244.1.9/32 -m comment --comment \"{id}"
        )),
        "{at1}"
    );
    assert!(
        lines[2].contains(" -d 10.244.1.0/24 -m comment --comment ")
            && lines[2].ends_with(" -j ACCEPT"),
        "{at1}"
    );
    assert!(
        lines[3].contains(" ! -d 224.0.0.0/4 -m comment --comment ")
            && lines[3].ends_with(" -j MASQUERADE"),
        "{at1}"
    );
    assert!(!rules_at("19s").contains("CNI-"), "torn down with the pod");
}
