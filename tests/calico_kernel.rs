//! nfsim's Calico node (proxy ARP for `169.254.1.1`, address-less `cali*` links with a /32
//! route per pod, the outer IPIP packet's conntrack entry) against the real kernel: the
//! node built as Calico's CNI plugin builds it in a private network namespace, with TAP
//! links for `eth0` and each pod's host side (tests/support/calico_lab.py), and the same
//! steps through nfsim's namespace: the pod's ARP for its gateway (answered; unanswered once
//! the route to it leaves by the pod's own link, or once there is none), a pod reaching a
//! pod of its node through a Service (TTL 63) and its answer un-DNAT'd, a pod's packet to
//! another node's block, and a protocol-4 packet from the other node (tracked by the
//! generic tracker: `unknown 4`, 600 s). Compared: what leaves by which link (addresses,
//! ports, TTL), who answers ARP, and `conntrack -L` without the timeouts. This kernel makes
//! no `ipip` links, so the tunnel's own decapsulation is not compared: the test says so
//! when it is skipped for that. Skips (passing) without the tools or `/dev/net/tun`.

#[path = "support/tools.rs"]
mod tools;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::Command;

use sim_core::{IfName, Packet, SimTime, L4};
use sim_netfilter::netns::{Egress, Ingress, Netns, NetnsConfig, Prefix};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const NODE: &str = "192.168.0.11";
const ROUTER: &str = "192.168.0.1";
const PEER: &str = "192.168.0.12";
/// Calico's names for pods `default/toolbox` and `default/neighbour` ("cali" + 11 hex
/// digits of sha1("default.toolbox"), …).
const PODS: [(&str, &str); 2] = [
    ("cali93d2589f70f", "10.244.1.9"),
    ("cali0e935ee0b48", "10.244.1.10"),
];
const GATEWAY: &str = "169.254.1.1";

const RULES: &str = "*nat
:PREROUTING ACCEPT [0:0]
-A PREROUTING -d 10.96.0.40/32 -p udp -m udp --dport 9000 -j DNAT --to-destination 10.244.1.10:9000
COMMIT
";

/// The steps, as the lab takes them.
fn steps() -> serde_json::Value {
    let a = PODS[0].0;
    let b = PODS[1].0;
    let arp = serde_json::json!({"arp": a, "sender": PODS[0].1, "target": GATEWAY});
    serde_json::json!([
        arp,
        {"udp": a, "src": "10.244.1.9:40000", "dst": "10.96.0.40:9000"},
        {"udp": b, "src": "10.244.1.10:9000", "dst": "10.244.1.9:40000"},
        {"udp": a, "src": "10.244.1.9:40001", "dst": "10.244.2.5:9000"},
        {"ipip_in": [PEER, NODE], "inner": ["10.244.2.5:9000", "10.244.1.9:40002"]},
        {"route": ["add", GATEWAY, "dev", a]},
        arp,
        {"route": ["del", GATEWAY, "dev", a]},
        {"route": ["del", "default"]},
        arp,
    ])
}

/// What one step made the node send: ARP answers as `arp <who-has>`, IPv4 packets as
/// `<link> <src> <dst> ttl=<TTL>`; and `conntrack -L` lines without their timeout.
#[derive(Debug, PartialEq, Eq)]
struct Run {
    outs: Vec<Vec<String>>,
    conntrack: Vec<String>,
}

fn without_timeout(lines: &str) -> Vec<String> {
    let mut v: Vec<String> = lines
        .lines()
        .map(|l| {
            let mut w: Vec<&str> = l.split_whitespace().collect();
            w.remove(2);
            w.join(" ")
        })
        .collect();
    v.sort();
    v
}

fn kernel() -> Option<(Run, bool)> {
    let cfg = serde_json::json!({
        "node": NODE, "router": ROUTER, "peer": PEER, "pods": PODS, "rules": RULES,
        "steps": steps(),
    });
    let out = Command::new(tools::find("unshare").unwrap())
        .args([
            "-n",
            "python3",
            &format!("{ROOT}/tests/support/calico_lab.py"),
            &cfg.to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "calico lab: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let outs = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            s["out"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|o| {
                    if let Some(who) = o.get("arp_reply") {
                        return Some(format!("arp {}", who.as_str().unwrap()));
                    }
                    // The ICMP protocol unreachable the kernel answers a protocol it has no
                    // handler for (no ipip here) is the node's stack's, not the namespace's
                    // pipeline.
                    (o["proto"] != 1).then(|| {
                        format!(
                            "{} {} {} ttl={}",
                            o["dev"].as_str().unwrap(),
                            o["src"].as_str().unwrap(),
                            o["dst"].as_str().unwrap(),
                            o["ttl"]
                        )
                    })
                })
                .collect()
        })
        .collect();
    let conntrack = without_timeout(v["conntrack"].as_str().unwrap());
    Some((
        Run { outs, conntrack },
        v["ipip"].as_bool().unwrap_or(false),
    ))
}

fn ifn(s: &str) -> IfName {
    IfName::new(s).unwrap()
}

fn nfsim() -> Run {
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let mut ns = Netns::new(NetnsConfig::new("node", 1));
    ns.add_interface(ifn("eth0"), &[(ip(NODE), 24)]).unwrap();
    ns.add_route(Prefix::default_for(true), Some(ip(ROUTER)), ifn("eth0"))
        .unwrap();
    for (dev, a) in PODS {
        ns.add_interface(ifn(dev), &[]).unwrap();
        ns.set_proxy_arp(ifn(dev), true);
        ns.add_route(Prefix::host(ip(a)), None, ifn(dev)).unwrap();
    }
    ns.restore(RULES, false).unwrap();
    let now = SimTime::ZERO;
    let mut outs = Vec::new();
    for s in steps().as_array().unwrap() {
        let mut o = Vec::new();
        if let Some(r) = s.get("route") {
            let words: Vec<&str> = r
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w.as_str().unwrap())
                .collect();
            let dst = match words[1] {
                "default" => Prefix::default_for(true),
                a => Prefix::host(ip(a)),
            };
            match words[0] {
                "add" => ns.add_route(dst, None, ifn(words[3])).unwrap(),
                _ => assert_eq!(ns.remove_route(dst), 1),
            }
        } else if let Some(dev) = s.get("arp") {
            let target: Ipv4Addr = s["target"].as_str().unwrap().parse().unwrap();
            if ns.arp_answer(ifn(dev.as_str().unwrap()), target).answered() {
                o.push(format!("arp {target}"));
            }
        } else {
            let (dev, src, dst, packet) = match s.get("udp") {
                Some(dev) => {
                    let src: SocketAddr = s["src"].as_str().unwrap().parse().unwrap();
                    let dst: SocketAddr = s["dst"].as_str().unwrap().parse().unwrap();
                    (dev.as_str().unwrap(), src, dst, None)
                }
                None => {
                    let o = s["ipip_in"].as_array().unwrap();
                    let src = SocketAddr::new(ip(o[0].as_str().unwrap()), 0);
                    let dst = SocketAddr::new(ip(o[1].as_str().unwrap()), 0);
                    let mut p = Packet::udp(src, dst);
                    p.l4 = L4::Other { proto: 4 };
                    p.ttl = 63;
                    ("eth0", src, dst, Some(p))
                }
            };
            let mut p = packet.unwrap_or_else(|| Packet::udp(src, dst));
            p.len = 33;
            let mut out = Vec::new();
            ns.process_into(now, p, Ingress::Interface(ifn(dev)), &mut out);
            for e in out {
                if let Egress::Transmit { dev, packet, .. } = e {
                    let sa = |a: IpAddr, port: Option<u16>| match port {
                        Some(port) => SocketAddr::new(a, port).to_string(),
                        None => a.to_string(),
                    };
                    o.push(format!(
                        "{dev} {} {} ttl={}",
                        sa(packet.src, packet.sport()),
                        sa(packet.dst, packet.dport()),
                        packet.ttl
                    ));
                }
            }
        }
        outs.push(o);
    }
    let ct: String = ns
        .conntrack()
        .list(now, &Default::default())
        .iter()
        .map(|e| format!("{}\n", e.list_line(now)))
        .collect();
    Run {
        outs,
        conntrack: without_timeout(&ct),
    }
}

#[test]
fn a_calico_node_matches_the_kernel() {
    let tools_needed = ["python3", "ip", "sysctl", "iptables-restore", "conntrack"];
    if !tools::have_or_skip("calico_kernel", &tools_needed)
        || !std::path::Path::new("/dev/net/tun").exists()
    {
        return;
    }
    let ours = nfsim();
    let Some((real, ipip)) = kernel() else { return };
    assert_eq!(ours.outs, real.outs, "what the node sent, step by step");
    assert_eq!(ours.conntrack, real.conntrack, "conntrack -L");
    // Proxy ARP answers the pod's gateway; not once the route leaves by the pod's link,
    // nor without a route.
    assert_eq!(real.outs[0], ["arp 169.254.1.1"]);
    assert!(real.outs[6].is_empty() && real.outs[9].is_empty());
    // One hop through the node: TTL 63 each way.
    assert_eq!(
        real.outs[1],
        ["cali0e935ee0b48 10.244.1.9:40000 10.244.1.10:9000 ttl=63"]
    );
    assert_eq!(
        real.outs[2],
        ["cali93d2589f70f 10.96.0.40:9000 10.244.1.9:40000 ttl=63"]
    );
    assert!(real
        .conntrack
        .iter()
        .any(|l| l.starts_with("unknown 4 src=192.168.0.12 dst=192.168.0.11 [UNREPLIED]")));
    if !ipip {
        tools::skips::report(
            "calico_kernel (tunnel)",
            "this kernel makes no ipip links: tunl0's decapsulation is not compared",
        );
    }
}
