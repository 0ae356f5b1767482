//! The Calico datapath (`network.cni: calico`): the shipped scenario's outcomes, the TTLs a
//! pod sees, the IPIP packets on the wire and on `tunl0`, the same cluster without
//! encapsulation, and the loader's refusals of what is not modelled.

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

#[test]
fn service_traffic_crosses_the_nodes_through_ipip() {
    let r = run_text("calico-ipip.yaml", &shipped("calico-ipip"), false);
    assert!(r.passed(), "{:#?}", r.results);
    assert_eq!(answered(&r, "to-service"), (6, 6));
    assert_eq!(answered(&r, "ping-remote"), (5, 5));
    assert_eq!(answered(&r, "upstream"), (6, 6));
}

#[test]
fn without_ipip_the_blocks_are_routed_on_eth0_and_nothing_is_encapsulated() {
    let text = shipped("calico-ipip").replace("ipipMode: Always", "ipipMode: Never");
    let r = run_text("never.yaml", &text, false);
    assert_eq!(answered(&r, "to-service"), (6, 6));
    assert_eq!(answered(&r, "ping-remote"), (5, 5));
    let failed: Vec<&str> = (r.results.iter())
        .filter(|e| !e.passed)
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(
        failed,
        [
            "node-1 tracks the IPIP packets it sends to node-2",
            "node-2 tracks them too"
        ]
    );
}

/// `(link-layer bytes, IPv4 packets as (protocol, src, dst, TTL))` of a pcap file.
fn packets(path: &std::path::Path) -> (u32, Vec<(u8, String, String, u8)>) {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let link = u32::from_le_bytes(b[20..24].try_into().unwrap());
    let l2 = if link == 1 { 14 } else { 0 };
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= b.len() {
        let incl = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        let f = &b[at + 16 + l2..at + 16 + incl];
        let ip = |o: usize| std::net::Ipv4Addr::new(f[o], f[o + 1], f[o + 2], f[o + 3]).to_string();
        if f[0] >> 4 == 4 {
            out.push((f[9], ip(12), ip(16), f[8]));
        }
        at += 16 + incl;
    }
    (link, out)
}

#[test]
fn captures_show_the_ttls_and_the_encapsulated_packets() {
    let dir = std::env::temp_dir().join(format!("nfsim-calico-pcap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nfsim"))
        .args([
            "run",
            "scenarios/calico-ipip.yaml",
            "--until",
            "2s",
            "--pcap",
        ])
        .arg(&dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(out.status.code().is_some(), "{out:?}");
    // The pod sees 63 from a pod of its node (one hop), 62 from the other node (one hop
    // each node: the tunnel adds none).
    let (_, tool) = packets(&dir.join("node-1-veth-toolbox.pcap"));
    let replies = |from: &str| -> Vec<u8> {
        (tool.iter())
            .filter(|p| p.0 == 1 && p.1 == from)
            .map(|p| p.3)
            .collect()
    };
    let (local, remote) = (replies("10.244.1.10"), replies("10.244.2.5"));
    assert!(
        !local.is_empty() && local.iter().all(|&t| t == 63),
        "{local:?}"
    );
    assert!(
        !remote.is_empty() && remote.iter().all(|&t| t == 62),
        "{remote:?}"
    );
    // On the wire: protocol 4 between the node addresses, TTL inherited (63).
    let (link, eth0) = packets(&dir.join("node-1-eth0.pcap"));
    assert_eq!(link, 1);
    assert!(eth0.contains(&(4, "192.168.0.11".into(), "192.168.0.12".into(), 63)));
    assert!(!eth0
        .iter()
        .any(|p| p.0 != 4 && p.2.starts_with("10.244.2.")));
    // tunl0: raw IP, the inner packets.
    let (link, tunl0) = packets(&dir.join("node-2-tunl0.pcap"));
    assert_eq!(link, 101);
    assert!(tunl0.contains(&(17, "10.244.1.9".into(), "10.244.2.5".into(), 63)));
    let _ = std::fs::remove_dir_all(&dir);
}

fn load_err(text: &str) -> String {
    match load_str("t.yaml", text) {
        Ok(_) => panic!("loaded: {text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_loader_refuses_what_the_calico_datapath_does_not_model() {
    let base = shipped("calico-ipip");
    let line = |needle: &str| 1 + base.lines().position(|l| l.contains(needle)).unwrap();
    let nat = line("natOutgoing:");
    for (from, to, at, word) in [
        (
            "ipipMode: Always",
            "ipipMode: Sometimes",
            line("ipipMode:"),
            "expected Always, CrossSubnet or Never",
        ),
        (
            "natOutgoing: true",
            "natOutgoing: true\n  vxlanMode: Always",
            nat + 1,
            "network.vxlanMode: Always is not modelled",
        ),
        (
            "natOutgoing: true",
            "natOutgoing: true\n  blockSize: 26",
            nat + 1,
            "network.blockSize: not modelled",
        ),
        (
            "natOutgoing: true",
            "natOutgoing: true\n  hairpinMode: true",
            nat + 1,
            "a bridge plugin option, but network.cni is calico",
        ),
    ] {
        let e = load_err(&base.replace(from, to));
        assert!(
            e.contains(word) && e.contains(&format!("t.yaml:{at}:")),
            "{e}"
        );
    }
    let e = load_err(&base.replace("ipPool: 10.244.0.0/16", "ipPool: 10.245.0.0/16"));
    assert!(
        e.contains(&format!("t.yaml:{}:", line("ipPool:")))
            && e.contains("node node-1's podCIDR 10.244.1.0/24 (its Calico block) is outside the IP pool 10.245.0.0/16"),
        "{e}"
    );
    let e = load_err(&base.replace("cni: calico", "cni: ptp"));
    assert!(
        e.contains(&format!("t.yaml:{}:", line("ipipMode:")))
            && e.contains("network.ipipMode: a Calico IP pool option, but network.cni is ptp"),
        "{e}"
    );
}

#[test]
fn trace_shows_the_proxy_arp_decision_on_the_pods_cali_link() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nfsim"))
        .args([
            "trace",
            "scenarios/calico-ipip.yaml",
            "--node",
            "node-1",
            "--at",
            "1s",
            "--packet",
            "udp 10.244.1.9:40000 -> 10.96.0.40:9000",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // The veth is named as Calico names it: "cali" + sha1("default.toolbox")[..11].
    assert!(
        text.contains("route: ARP who-has 169.254.1.1 (the pod's gateway) on cali93d2589f70f: answered by proxy_arp: the route leaves by eth0 (arp_fwd_proxy)"),
        "{text}"
    );
    assert!(
        text.contains("=> transmitted on tunl0 to 192.168.0.12"),
        "{text}"
    );
}
