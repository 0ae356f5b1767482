//! nfsim's VXLAN device (sim-netfilter/src/netns/vxlan.rs) and flannel's node setup
//! (src/cluster/flannel.rs) against the real kernel: two network namespaces joined by a
//! veth, each a flannel node (cni0 with a TAP "pod", flannel.1 VXLAN VNI 1 dstport 8472
//! nolearning, the onlink route, neighbour and FDB entries, flannel's iptables rules;
//! tests/support/vxlan_lab.py), the same frames written into the pods' ports and through two
//! nfsim namespaces, and compared: what reaches the other pod (addresses, TTL), the outer
//! packets on node A's eth0 (addresses, port 8472, TTL, DF, TOS, length, VNI, inner MACs and
//! TTL), the inner packets on both nodes' flannel.1, both nodes' `conntrack -L` (outer 8472
//! flows and inner flows) and `iptables-save`. Cases: UDP there and back, a ping, an
//! oversized datagram with DF (ICMP fragmentation needed, MTU 1450) and without it (the
//! kernel fragments; nfsim, which carries no DF bit, answers as for DF: the documented
//! difference). Skips (passing) without the tools or `/dev/net/tun`.

#[path = "support/tools.rs"]
mod tools;

use std::net::{IpAddr, SocketAddr};
use std::process::Command;

use nfsim::cluster::flannel::{self, FlannelPeer};
use serde_json::Value;
use sim_core::{IfName, Packet, SimTime};
use sim_netfilter::netns::{Egress, Fate, Frame, Mac, Netns, NetnsConfig, Prefix, VxlanWire};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const VTEP_MACS: [&str; 2] = ["02:66:6c:00:00:00", "02:66:6c:00:00:01"];

const TOOLS: &[&str] = &[
    "python3",
    "ip",
    "bridge",
    "sysctl",
    "unshare",
    "nsenter",
    "iptables-restore",
    "iptables-save",
    "conntrack",
];

/// A frame a pod sends: from node `node`'s pod, UDP or ICMP echo, its payload, DF or not.
struct Step {
    node: usize,
    src: &'static str,
    dst: &'static str,
    icmp: bool,
    payload: u16,
    df: bool,
}

const STEPS: [Step; 5] = [
    Step {
        node: 0,
        src: "10.244.0.2:40000",
        dst: "10.244.1.2:5353",
        icmp: false,
        payload: 5,
        df: true,
    },
    Step {
        node: 1,
        src: "10.244.1.2:5353",
        dst: "10.244.0.2:40000",
        icmp: false,
        payload: 5,
        df: true,
    },
    Step {
        node: 0,
        src: "10.244.0.2:0",
        dst: "10.244.1.2:0",
        icmp: true,
        payload: 56,
        df: true,
    },
    Step {
        node: 0,
        src: "10.244.0.2:40001",
        dst: "10.244.1.2:5353",
        icmp: false,
        payload: 1472,
        df: true,
    },
    Step {
        node: 0,
        src: "10.244.0.2:40002",
        dst: "10.244.1.2:5353",
        icmp: false,
        payload: 1472,
        df: false,
    },
];

fn pfx(s: &str) -> Prefix {
    let (a, l) = s.split_once('/').unwrap();
    Prefix::new(a.parse().unwrap(), l.parse().unwrap()).unwrap()
}

fn parse_mac(s: &str) -> Mac {
    let mut m = [0u8; 6];
    for (k, b) in s.split(':').enumerate() {
        m[k] = u8::from_str_radix(b, 16).unwrap();
    }
    Mac(m)
}

fn pod_mac(a: IpAddr) -> Mac {
    match a {
        IpAddr::V4(v) => Mac::from_ipv4(v),
        IpAddr::V6(_) => unreachable!(),
    }
}

fn peer(i: usize) -> FlannelPeer {
    FlannelPeer {
        address: format!("172.18.0.{}", 2 + i).parse().unwrap(),
        pod_cidr: pfx(&format!("10.244.{i}.0/24")),
        mac: parse_mac(VTEP_MACS[i]),
    }
}

fn rules(i: usize) -> String {
    flannel::iptables_rules(pfx("10.244.0.0/16"), pfx(&format!("10.244.{i}.0/24")))
}

/// A packet as compared: where it was seen, addresses, TTL and what else matters there.
type Seen = String;

fn outer_text(dir: &str, src: &str, dst: &str, f: &Value) -> Seen {
    let inner = &f["inner"];
    format!(
        "eth0 {dir} {src} -> {dst}:{} ttl={} df={} tos={} len={} vni={} inner {} -> {} ttl={} {}>{}",
        f["dport"], f["ttl"], f["df"], f["tos"], f["len"], f["vni"], inner["src"].as_str().unwrap(),
        inner["dst"].as_str().unwrap(), inner["ttl"], f["inner_src_mac"].as_str().unwrap(),
        f["inner_dst_mac"].as_str().unwrap()
    )
}

/// One step's packets in the lab's JSON, as text: at the pods, on A's eth0 (the outer
/// packets), on A's flannel.1.
fn lab_step(s: &Value) -> Vec<Seen> {
    let mut v = Vec::new();
    for o in s["out"].as_array().unwrap() {
        if o["proto"] == 2 {
            continue; // the bridges' own IGMP reports
        }
        v.push(format!(
            "pod{} {} -> {} ttl={} icmp={}",
            o["pod"],
            o["src"].as_str().unwrap(),
            o["dst"].as_str().unwrap(),
            o["ttl"],
            o.get("icmp").map(|i| i.to_string()).unwrap_or_default()
        ));
    }
    for o in s["node_a"].as_array().unwrap() {
        let dir = o["dir"].as_str().unwrap();
        match o["dev"].as_str().unwrap() {
            "eth0" => {
                let sport = o["sport"].as_u64().unwrap();
                assert!((32768..=60998).contains(&sport), "outer sport {sport}");
                v.push(outer_text(
                    dir,
                    o["src"].as_str().unwrap(),
                    o["dst"].as_str().unwrap(),
                    o,
                ))
            }
            "flannel.1" => v.push(format!(
                "flannel.1 {dir} {} -> {} ttl={}",
                o["src"].as_str().unwrap(),
                o["dst"].as_str().unwrap(),
                o["ttl"]
            )),
            _ => {}
        }
    }
    v.sort();
    v
}

fn ct_lines(dump: &str, skip: &[String]) -> Vec<String> {
    let mut v: Vec<String> = dump
        .lines()
        .filter(|l| !l.starts_with("unknown") && !skip.iter().any(|s| l.contains(s.as_str())))
        .map(|l| {
            let mut w: Vec<String> = l.split_whitespace().map(String::from).collect();
            w.remove(2);
            // Outer source ports are the flow hash's, random per boot: compared apart.
            if l.contains("dport=8472") {
                for x in w.iter_mut() {
                    if x.starts_with("sport=") && x != "sport=8472" {
                        *x = "sport=*".into();
                    }
                    if x.starts_with("dport=") && x != "dport=8472" {
                        *x = "dport=*".into();
                    }
                }
            }
            w.join(" ")
        })
        .collect();
    v.sort();
    v
}

fn rule_lines(save: &str) -> Vec<String> {
    save.lines()
        .filter(|l| l.starts_with("-A") || l.starts_with('['))
        .map(|l| match l.split_once("] ") {
            Some((_, r)) if l.starts_with('[') => r.to_string(),
            _ => l.to_string(),
        })
        .collect()
}

fn kernel() -> Option<Value> {
    let cfg = serde_json::json!({
        "vtep_macs": VTEP_MACS,
        "rules": [rules(0), rules(1)],
        "frames": STEPS.iter().map(|s| serde_json::json!({
            "node": s.node, "src": s.src, "dst": s.dst,
            "gw": format!("10.244.{}.1", s.node),
            "proto": if s.icmp { "icmp" } else { "udp" },
            "payload": s.payload, "df": s.df,
        })).collect::<Vec<_>>(),
    });
    let out = Command::new(tools::find("unshare").unwrap())
        .args([
            "-n",
            "python3",
            &format!("{ROOT}/tests/support/vxlan_lab.py"),
            &cfg.to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "vxlan lab: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    if let Some(why) = v.get("skip") {
        tools::skips::report("vxlan_kernel", why.as_str().unwrap_or("skipped"));
        return None;
    }
    Some(v)
}

/// nfsim's two nodes.
fn nodes() -> [Netns; 2] {
    let ifn = |s: &str| IfName::new(s).unwrap();
    [0usize, 1].map(|i| {
        let mut ns = Netns::new(NetnsConfig::new(&format!("node{i}"), 1));
        let me = peer(i);
        ns.add_interface(ifn("eth0"), &[(IpAddr::V4(me.address), 24)])
            .unwrap();
        let gw: IpAddr = format!("10.244.{i}.1").parse().unwrap();
        ns.add_bridge(ifn("cni0"), pod_mac(gw), &[(gw, 24)])
            .unwrap();
        ns.bridge_add_port(ifn("cni0"), ifn("pod"), true).unwrap();
        let pod: IpAddr = format!("10.244.{i}.2").parse().unwrap();
        ns.bridge_set_neighbour(pod, pod_mac(pod));
        flannel::set_up_node(&mut ns, me, &[peer(1 - i)], 1500).unwrap();
        ns.restore(&rules(i), true).unwrap();
        ns
    })
}

fn packet(s: &Step) -> Packet {
    let src: SocketAddr = s.src.parse().unwrap();
    let dst: SocketAddr = s.dst.parse().unwrap();
    let mut p = if s.icmp {
        Packet::icmp_echo_request(src.ip(), dst.ip(), 0x1234, 1)
    } else {
        Packet::udp(src, dst)
    };
    p.len = 20 + 8 + s.payload;
    p
}

/// One step through nfsim: the same text as [`lab_step`].
fn nfsim_step(ns: &mut [Netns; 2], s: &Step, b_flannel: &mut Vec<Seen>) -> Vec<Seen> {
    let ifn = |s: &str| IfName::new(s).unwrap();
    let p = packet(s);
    let (a, b) = (s.node, 1 - s.node);
    let gw: IpAddr = format!("10.244.{a}.1").parse().unwrap();
    let fr = Frame {
        packet: p,
        src_mac: pod_mac(p.src),
        dst_mac: pod_mac(gw),
    };
    let mut v = Vec::new();
    let fl =
        |dir: &str, q: &Packet| format!("flannel.1 {dir} {} -> {} ttl={}", q.src, q.dst, q.ttl);
    let outer = |dir: &str, w: &VxlanWire| {
        format!(
            "eth0 {dir} {} -> {}:{} ttl={} df=false tos=0 len={} vni={} inner {} -> {} ttl={} {}>{}",
            w.outer.src, w.outer.dst, w.outer.dport().unwrap(), w.outer.ttl, w.outer.len, w.vni,
            w.inner.src, w.inner.dst, w.inner.ttl, w.inner_src_mac, w.inner_dst_mac
        )
    };
    let pod_out = |n: usize, out: &[Egress], v: &mut Vec<Seen>| {
        for e in out {
            if let Egress::Transmit { dev, packet, .. } = e {
                assert_eq!(*dev, ifn("pod"));
                let icmp = match packet.l4 {
                    sim_core::L4::Icmp {
                        icmp_type, code, ..
                    } => format!("[{icmp_type},{code}]"),
                    _ => String::new(),
                };
                v.push(format!(
                    "pod{n} {} -> {} ttl={} icmp={icmp}",
                    packet.src, packet.dst, packet.ttl
                ));
            }
        }
    };
    let r = ns[a].process_frame_traced(SimTime::ZERO, fr, ifn("pod"));
    let mut wires = Vec::new();
    let mut local = Vec::new();
    for e in &r.out {
        match e {
            Egress::Transmit { dev, packet, .. } if *dev == ifn("eth0") => {
                wires.push(ns[a].take_vxlan_sent(packet).expect("encapsulated"))
            }
            e => local.push(*e),
        }
    }
    pod_out(a, &local, &mut v);
    for w in wires {
        let (fa, fb) = if a == 0 { ("tx", "rx") } else { ("rx", "tx") };
        v.push(outer(fa, &w));
        v.push(fl(fa, &w.inner));
        b_flannel.push(fl(fb, &w.inner));
        let rb = ns[b].process_vxlan_traced(SimTime::ZERO, w, ifn("eth0"));
        assert_eq!(rb.fate, Fate::Transmitted, "{}", rb.trace.unwrap());
        pod_out(b, &rb.out, &mut v);
    }
    v.sort();
    v
}

#[test]
fn flannel_vxlan_between_two_nodes_matches_the_kernel() {
    if !tools::have_or_skip("vxlan_kernel", TOOLS) || !std::path::Path::new("/dev/net/tun").exists()
    {
        return;
    }
    let Some(lab) = kernel() else { return };
    let steps = lab["steps"].as_array().unwrap();
    let mut ns = nodes();
    let mut b_flannel = Vec::new();
    for (k, s) in STEPS.iter().enumerate().take(4) {
        let real = lab_step(&steps[k]);
        let ours = nfsim_step(&mut ns, s, &mut b_flannel);
        assert_eq!(ours, real, "step {k}");
    }
    // TTLs: 62 at the other node's pod (one hop per node), 63 on the wire inside, 64 outside.
    assert!(lab_step(&steps[0])
        .iter()
        .any(|l| l.starts_with("pod1 10.244.0.2 -> 10.244.1.2 ttl=62")));
    // The oversized DF datagram: fragmentation needed from cni0's address, MTU 1450.
    let frag = &steps[3]["out"][0];
    assert_eq!(frag["icmp"], serde_json::json!([3, 4]));
    assert_eq!(frag["mtu"], 1450);
    assert_eq!(frag["src"], "10.244.0.1");
    // On one kernel both directions hash alike: the answer's outer source port is the
    // question's (nfsim's nodes have a key each, as two real nodes do).
    let sport = |k: usize| {
        steps[k]["node_a"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["dev"] == "eth0")
            .map(|o| o["sport"].as_u64().unwrap())
    };
    assert_eq!(sport(0), sport(1));
    // Node B's flannel.1 saw the inner packets as nfsim's did (in order, whole packets).
    let real_b: Vec<String> = lab["node_b"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["dev"] == "flannel.1" && o["frag"] == false && o["proto"] != 2)
        .map(|o| {
            format!(
                "flannel.1 {} {} -> {} ttl={}",
                o["dir"].as_str().unwrap(),
                o["src"].as_str().unwrap(),
                o["dst"].as_str().unwrap(),
                o["ttl"]
            )
        })
        .collect();
    assert_eq!(b_flannel, real_b, "node B's flannel.1");
    // Without DF the kernel fragments the inner packet (two fragments reach the pod);
    // nfsim carries no DF bit and answers as for DF (docs/kernel-model.md, VXLAN).
    let frags: Vec<&Value> = steps[4]["out"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["proto"] == 17)
        .collect();
    assert_eq!(frags.len(), 2);
    assert!(frags.iter().all(|o| o["frag"] == true && o["ttl"] == 62));
    let ours = nfsim_step(&mut ns, &STEPS[4], &mut Vec::new());
    assert_eq!(ours, ["pod0 10.244.0.1 -> 10.244.0.2 ttl=64 icmp=[3,4]"]);
    // conntrack -L on both nodes: the outer 8472 flows (UNREPLIED, one per direction) and
    // the inner ones; the no-DF step's flows left out.
    let skip_sport = steps[4]["node_a"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["dev"] == "eth0")
        .map(|o| format!("sport={}", o["sport"]))
        .unwrap();
    let skip = [skip_sport, "sport=40002".to_string()];
    for i in 0..2 {
        let real = ct_lines(lab["conntrack"][i].as_str().unwrap(), &skip);
        let ours = ct_lines(
            &ns[i]
                .conntrack()
                .dump(SimTime::ZERO, &sim_conntrack::Filter::default()),
            &["sport=40002".to_string()],
        );
        assert_eq!(ours, real, "node {i}: conntrack -L");
        assert!(real.iter().any(|l| l.contains("dport=8472 [UNREPLIED]")));
        // iptables-save: flannel's rules as the kernel keeps them.
        assert_eq!(
            rule_lines(&ns[i].save(false)),
            rule_lines(lab["save"][i].as_str().unwrap()),
            "node {i}: iptables-save"
        );
    }
}
