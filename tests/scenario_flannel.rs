//! The flannel-vxlan datapath (`network.cni: flannel-vxlan`) in a cluster: the TTLs of a ping
//! across the overlay and on one bridge, the encapsulated packets on eth0 (`--pcap`), the
//! outer flows and flanneld's rules on the nodes, and the loader's refusals.

use nfsim::scenario::load_str;

fn shipped(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/scenarios/{name}.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn nfsim(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_nfsim"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap()
}

/// `(src IP, dst IP, TTL, protocol, UDP destination port)` of each IPv4 frame of a pcap file.
fn frames(path: &std::path::Path) -> Vec<(String, String, u8, u8, u16)> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= b.len() {
        let incl = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        let f = &b[at + 16..at + 16 + incl];
        let ip = |o: usize| std::net::Ipv4Addr::new(f[o], f[o + 1], f[o + 2], f[o + 3]).to_string();
        if f[12..14] == [8, 0] {
            let dport = if f[23] == 17 {
                u16::from_be_bytes([f[36], f[37]])
            } else {
                0
            };
            out.push((ip(26), ip(30), f[22], f[23], dport));
        }
        at += 16 + incl;
    }
    out
}

#[test]
fn a_ping_across_the_overlay_sees_ttl_62_and_the_wire_sees_udp_8472() {
    let dir = std::env::temp_dir().join(format!("nfsim-flannel-pcap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = nfsim(&[
        "run",
        "scenarios/flannel-ping-ttl.yaml",
        "--pcap",
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let toolbox = frames(&dir.join("node-1-veth-toolbox.pcap"));
    let ttl_from = |src: &str| -> Vec<u8> {
        toolbox
            .iter()
            .filter(|f| f.0 == src && f.3 == 1)
            .map(|f| f.2)
            .collect()
    };
    assert_eq!(ttl_from("10.244.2.5"), [62, 62, 62], "{toolbox:?}");
    assert_eq!(ttl_from("10.244.1.7"), [64, 64, 64], "{toolbox:?}");
    // On node-1's eth0 the pings across are UDP datagrams to 8472 between the nodes, TTL 64.
    let eth0 = frames(&dir.join("node-1-eth0.pcap"));
    let s = |x: &str| x.to_string();
    let vxlan: Vec<_> = eth0.iter().filter(|f| f.4 == 8472).collect();
    assert_eq!(vxlan.len(), 6, "{eth0:?}");
    assert!(vxlan.iter().all(|f| f.2 == 64 && f.3 == 17));
    assert_eq!(
        vxlan
            .iter()
            .filter(|f| (f.0.clone(), f.1.clone()) == (s("192.168.0.11"), s("192.168.0.12")))
            .count(),
        3
    );
    // No pod address is on the node network.
    assert!(eth0.iter().all(|f| !f.0.starts_with("10.244.")), "{eth0:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn flanneld_rules_are_on_every_node_before_kube_proxy() {
    let out = nfsim(&[
        "rules",
        "scenarios/stale-dns-udp-flannel.yaml",
        "--node",
        "node-2",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    for l in [
        "-A POSTROUTING -m comment --comment \"flanneld masq\" -j FLANNEL-POSTRTG",
        "-A FLANNEL-POSTRTG -s 10.244.2.0/24 -d 10.244.0.0/16 -m comment --comment \"flanneld masq\" -j RETURN",
        "-A FLANNEL-POSTRTG -s 10.244.0.0/16 ! -d 224.0.0.0/4 -m comment --comment \"flanneld masq\" -j MASQUERADE --random-fully",
        "-A FORWARD -m comment --comment \"flanneld forward\" -j FLANNEL-FWD",
        "-A FLANNEL-FWD -d 10.244.0.0/16 -m comment --comment \"flanneld forward\" -j ACCEPT",
    ] {
        assert!(text.contains(l), "{l}\n{text}");
    }
}

#[test]
fn the_incident_on_flannel_tracks_the_outer_flows() {
    let out = nfsim(&["run", "scenarios/stale-dns-udp-flannel.yaml"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("8 passed, 0 failed"), "{text}");
    assert!(
        text.contains("dport=8472 [UNREPLIED]"),
        "the outer flow in conntrack events\n{text}"
    );
}

#[test]
fn the_loader_refuses_bridge_options_on_flannel() {
    let base = shipped("flannel-ping-ttl");
    let e = load_str(
        "t.yaml",
        &base.replace(
            "  cni: flannel-vxlan\n",
            "  cni: flannel-vxlan\n  hairpinMode: false\n",
        ),
    )
    .map(|_| ())
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("t.yaml:16:16:")
            && e.contains(
                "network.hairpinMode: a bridge plugin option, but network.cni is flannel-vxlan"
            ),
        "{e}"
    );
}

#[test]
fn trace_shows_the_encapsulation_and_the_outer_packets_hooks() {
    let out = nfsim(&[
        "trace",
        "scenarios/stale-dns-udp-flannel.yaml",
        "--node",
        "node-2",
        "--at",
        "6m",
        "--from",
        "default/app",
        "--packet",
        "udp 10.244.2.9:40001 -> 10.244.1.5:53",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let xmit = text
        .find("vxlan: vxlan_xmit on flannel.1: 10.244.1.0 is ")
        .unwrap_or_else(|| panic!("{text}"));
    // After the inner packet's POSTROUTING, the outer packet's OUTPUT and POSTROUTING.
    let output = text[xmit..]
        .find("\nOUTPUT\n")
        .expect("OUTPUT after vxlan_xmit");
    assert!(
        text[xmit + output..].contains("dport=8472 [UNREPLIED]"),
        "{text}"
    );
    assert_eq!(text.matches("=> transmitted on eth0").count(), 1, "{text}");
    // The summary compares the inner packet: no DNAT, no masquerade.
    assert!(text.contains("DNAT:         none"), "{text}");
    assert!(text.contains("masqueraded:  no\n"), "{text}");
}
