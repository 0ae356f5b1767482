//! nfsim's bridge and `br_netfilter` (sim-netfilter/src/netns/bridge.rs) against the real
//! kernel: a bridge `cni0` with TAP ports in a private network namespace
//! (tests/support/bridge_lab.py), the same frames written into the ports and through
//! nfsim's namespace, and compared: what leaves by which port (addresses, ports, TTL), the
//! rule counters and the `conntrack -L` entries of the Service flow. Cases: two pods on one
//! bridge through a Service with `bridge-nf-call-iptables` 1 and 0, and a pod reaching
//! itself through its Service with hairpin mode off and on, under both settings. Skips
//! (passing) without the tools, `/dev/net/tun`, or `br_netfilter` in the kernel.

#[path = "support/tools.rs"]
mod tools;

use std::net::{IpAddr, SocketAddr};
use std::process::Command;

use sim_core::{IfName, Packet, SimTime};
use sim_netfilter::netns::{Egress, Frame, Mac, Netns, NetnsConfig, BRIDGE_NF_CALL_IPTABLES};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const GW: &str = "10.244.0.1";
const PORTS: [(&str, &str); 2] = [("vethA", "10.244.0.2"), ("vethB", "10.244.0.3")];

/// One frame: in by `port`, from `src` to `dst`, addressed to `to_mac`'s MAC; with
/// `reply_to`, its destination is the source of what frame `reply_to` made leave.
struct In {
    port: &'static str,
    src: &'static str,
    dst: &'static str,
    to_mac: &'static str,
    reply_to: Option<usize>,
}

/// What left: by which port, source, destination, TTL.
type Out = (String, String, String, u8);

fn mac(a: &str) -> Mac {
    match a.parse::<IpAddr>().unwrap() {
        IpAddr::V4(v) => Mac::from_ipv4(v),
        IpAddr::V6(_) => unreachable!(),
    }
}

fn rules(ep: &str) -> String {
    format!(
        "*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-MARK-MASQ - [0:0]
-A PREROUTING -s {ep}/32 -d 10.96.0.10/32 -p udp -j KUBE-MARK-MASQ
-A PREROUTING -d 10.96.0.10/32 -p udp -m udp --dport 53 -j DNAT --to-destination {ep}:53
-A POSTROUTING -m mark --mark 0x4000/0x4000 -j MASQUERADE
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -m physdev --physdev-in vethA --physdev-out vethB --physdev-is-bridged -j ACCEPT
-A FORWARD -i cni0 -o cni0 -j ACCEPT
COMMIT
"
    )
}

/// The frames: each pod's first frame (to the gateway, so the bridge learns it), the
/// request to the ClusterIP, and the answer from the endpoint.
fn frames(ep: &'static str) -> Vec<In> {
    let mut v = vec![
        In {
            port: "vethA",
            src: "10.244.0.2:9",
            dst: "10.244.0.1:9",
            to_mac: GW,
            reply_to: None,
        },
        In {
            port: "vethB",
            src: "10.244.0.3:9",
            dst: "10.244.0.1:9",
            to_mac: GW,
            reply_to: None,
        },
        In {
            port: "vethA",
            src: "10.244.0.2:40000",
            dst: "10.96.0.10:53",
            to_mac: GW,
            reply_to: None,
        },
    ];
    if ep == "10.244.0.3" {
        v.push(In {
            port: "vethB",
            src: "10.244.0.3:53",
            dst: "10.244.0.2:40000",
            to_mac: "10.244.0.2",
            reply_to: None,
        });
    } else {
        // To the masquerading address (the gateway's): the answer goes to its MAC.
        v.push(In {
            port: "vethA",
            src: "10.244.0.2:53",
            dst: "10.244.0.1:1",
            to_mac: GW,
            reply_to: Some(2),
        });
    }
    v
}

struct Run {
    outs: Vec<Vec<Out>>,
    counters: Vec<String>,
    conntrack: Vec<String>,
}

/// `[p:b] -A` rule lines, and Service entries with the timeout left out.
fn digest(save: &str, conntrack: &str) -> (Vec<String>, Vec<String>) {
    let counters = save
        .lines()
        .filter(|l| l.starts_with('['))
        .map(String::from)
        .collect();
    let mut ct: Vec<String> = conntrack
        .lines()
        .filter(|l| l.contains("10.96.0.10"))
        .map(|l| {
            let mut w: Vec<&str> = l.split_whitespace().collect();
            w.remove(2);
            w.join(" ")
        })
        .collect();
    ct.sort();
    (counters, ct)
}

fn kernel(ep: &'static str, call_iptables: u8, hairpin: bool) -> Option<Run> {
    let cfg = serde_json::json!({
        "gw": GW,
        "ports": PORTS,
        "hairpin": hairpin,
        "call_iptables": call_iptables,
        "rules": rules(ep),
        "frames": frames(ep).iter().map(|f| serde_json::json!({
            "port": f.port, "src": f.src, "dst": f.dst, "to_mac": f.to_mac, "reply_to": f.reply_to,
        })).collect::<Vec<_>>(),
    });
    let out = Command::new(tools::find("unshare").unwrap())
        .args([
            "-n",
            "python3",
            &format!("{ROOT}/tests/support/bridge_lab.py"),
            &cfg.to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bridge lab: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    if let Some(why) = v.get("skip") {
        tools::skips::report("bridge_kernel", why.as_str().unwrap_or("skipped"));
        return None;
    }
    let outs = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            s["out"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| {
                    (
                        o["dev"].as_str().unwrap().to_string(),
                        o["src"].as_str().unwrap().to_string(),
                        o["dst"].as_str().unwrap().to_string(),
                        o["ttl"].as_u64().unwrap() as u8,
                    )
                })
                .collect()
        })
        .collect();
    let (counters, conntrack) = digest(
        v["save"].as_str().unwrap(),
        v["conntrack"].as_str().unwrap(),
    );
    Some(Run {
        outs,
        counters,
        conntrack,
    })
}

fn nfsim(ep: &'static str, call_iptables: u8, hairpin: bool) -> Run {
    let ifn = |s: &str| IfName::new(s).unwrap();
    let mut ns = Netns::new(NetnsConfig::new("node", 1));
    ns.add_bridge(ifn("cni0"), mac(GW), &[(GW.parse().unwrap(), 24)])
        .unwrap();
    for (p, a) in PORTS {
        ns.bridge_add_port(ifn("cni0"), ifn(p), hairpin).unwrap();
        ns.bridge_set_neighbour(a.parse().unwrap(), mac(a));
    }
    ns.set_sysctl(BRIDGE_NF_CALL_IPTABLES, &call_iptables.to_string())
        .unwrap();
    ns.restore(&rules(ep), false).unwrap();
    let mut outs: Vec<Vec<Out>> = Vec::new();
    let mut sent: Vec<Vec<Packet>> = Vec::new();
    for f in frames(ep) {
        let src: SocketAddr = f.src.parse().unwrap();
        let mut dst: SocketAddr = f.dst.parse().unwrap();
        if let Some(k) = f.reply_to {
            if let Some(p) = sent[k].first() {
                dst = SocketAddr::new(p.src, p.sport().unwrap());
            }
        }
        // The lab's datagrams carry 5 bytes ("hello"): 33 bytes of IPv4.
        let mut packet = Packet::udp(src, dst);
        packet.len = 33;
        let fr = Frame {
            packet,
            src_mac: mac(&src.ip().to_string()),
            dst_mac: mac(f.to_mac),
        };
        let r = ns.process_frame_traced(SimTime::ZERO, fr, ifn(f.port));
        let mut o = Vec::new();
        let mut s = Vec::new();
        for e in &r.out {
            // What is delivered to the node's own sockets does not leave by a port.
            if let Egress::Transmit { dev, packet, .. } = e {
                let sa = |a: IpAddr, p: Option<u16>| SocketAddr::new(a, p.unwrap()).to_string();
                o.push((
                    dev.to_string(),
                    sa(packet.src, packet.sport()),
                    sa(packet.dst, packet.dport()),
                    packet.ttl,
                ));
                s.push(*packet);
            }
        }
        outs.push(o);
        sent.push(s);
    }
    let now = SimTime::ZERO;
    let ct: String = ns
        .conntrack()
        .list(now, &Default::default())
        .iter()
        .map(|e| format!("{}\n", e.list_line(now)))
        .collect();
    let (counters, conntrack) = digest(&ns.save(true), &ct);
    Run {
        outs,
        counters,
        conntrack,
    }
}

fn compare(ep: &'static str, call_iptables: u8, hairpin: bool) -> Option<Run> {
    let real = kernel(ep, call_iptables, hairpin)?;
    let ours = nfsim(ep, call_iptables, hairpin);
    let what = format!("endpoint {ep}, bridge-nf-call-iptables={call_iptables}, hairpin {hairpin}");
    assert_eq!(ours.outs, real.outs, "{what}: frames out");
    assert_eq!(ours.counters, real.counters, "{what}: iptables-save -c");
    assert_eq!(ours.conntrack, real.conntrack, "{what}: conntrack -L");
    Some(real)
}

const TOOLS: &[&str] = &[
    "python3",
    "ip",
    "sysctl",
    "iptables-restore",
    "iptables-save",
    "conntrack",
];

#[test]
fn two_pods_through_a_service_on_a_bridge_match_the_kernel() {
    if !tools::have_or_skip("bridge_kernel", TOOLS)
        || !std::path::Path::new("/dev/net/tun").exists()
    {
        return;
    }
    // br_netfilter: bridged (TTL 64) both ways, the reply un-DNAT'd; physdev counted.
    let Some(on) = compare("10.244.0.3", 1, false) else {
        return;
    };
    assert_eq!(on.outs[2][0].3, 64);
    assert_eq!(on.outs[3][0].1, "10.96.0.10:53");
    // Without: the request routed (TTL 63), the reply bridged past conntrack.
    let off = compare("10.244.0.3", 0, false).unwrap();
    assert_eq!(off.outs[2][0].3, 63);
    assert_eq!(off.outs[3][0].1, "10.244.0.3:53");
}

#[test]
fn a_pod_reaching_itself_through_its_service_matches_the_kernel() {
    if !tools::have_or_skip("bridge_kernel", TOOLS)
        || !std::path::Path::new("/dev/net/tun").exists()
    {
        return;
    }
    let Some(off) = compare("10.244.0.2", 1, false) else {
        return;
    };
    assert!(
        off.outs[2].is_empty(),
        "bridged back out of its port: dropped without hairpin"
    );
    let on = compare("10.244.0.2", 1, true).unwrap();
    assert_eq!(on.outs[3][0].1, "10.96.0.10:53");
    // Routed (bridge-nf-call-iptables=0), the frame leaves from the bridge device: no
    // hairpin mode needed.
    for hp in [false, true] {
        let r = compare("10.244.0.2", 0, hp).unwrap();
        assert_eq!(r.outs[2][0].3, 63);
    }
}
