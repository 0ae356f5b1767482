//! The bridge and `br_netfilter` against the kernel's paths (net/bridge/br_input.c,
//! br_forward.c, br_netfilter_hooks.c): same-node pod -> Service -> pod with
//! `bridge-nf-call-iptables` 1 and 0, hairpin mode, the physdev ports, a gone station.

use super::*;
use std::net::SocketAddr;

fn ifn(s: &str) -> IfName {
    IfName::new(s).unwrap()
}
fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}
fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}
fn mac(s: &str) -> Mac {
    match ip(s) {
        IpAddr::V4(a) => Mac::from_ipv4(a),
        IpAddr::V6(_) => unreachable!(),
    }
}

/// DNAT of 10.96.0.10:53 to `ep` (with kube-proxy's hairpin masquerade), and a FORWARD
/// rule counting what `-m physdev` sees.
fn rules(ep: &str) -> String {
    format!(
        "*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -m physdev --physdev-in vethA --physdev-out vethB --physdev-is-bridged -j ACCEPT
-A FORWARD -i cni0 -o cni0 -j ACCEPT
COMMIT
*nat
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
"
    )
}

/// A node with cni0 10.244.0.1/24 and pods A (10.244.0.2 on vethA) and B (10.244.0.3 on
/// vethB) whose MACs the bridge has learned.
fn node(ep: &str, call_iptables: bool, hairpin: bool) -> Netns {
    let mut ns = Netns::new(NetnsConfig::new("node", 1));
    ns.add_interface(ifn("eth0"), &[(ip("172.18.0.2"), 16)])
        .unwrap();
    ns.add_bridge(ifn("cni0"), mac("10.244.0.1"), &[(ip("10.244.0.1"), 24)])
        .unwrap();
    for (p, a) in [("vethA", "10.244.0.2"), ("vethB", "10.244.0.3")] {
        ns.bridge_add_port(ifn("cni0"), ifn(p), hairpin).unwrap();
        ns.bridge_set_neighbour(ip(a), mac(a));
    }
    ns.set_sysctl(
        BRIDGE_NF_CALL_IPTABLES,
        if call_iptables { "1" } else { "0" },
    )
    .unwrap();
    ns.restore(&rules(ep), false).unwrap();
    // Each pod's first frame (say its ARP) teaches the bridge where it is.
    for (p, a) in [("vethA", "10.244.0.2"), ("vethB", "10.244.0.3")] {
        let hello = Packet::udp(sa(&format!("{a}:9")), sa("10.244.0.1:9"));
        let fr = Frame {
            packet: hello,
            src_mac: mac(a),
            dst_mac: mac("10.244.0.1"),
        };
        ns.process_frame_traced(SimTime::ZERO, fr, ifn(p));
    }
    ns
}

fn frame(p: Packet, from: &str, to_mac: &str) -> Frame {
    Frame {
        packet: p,
        src_mac: mac(from),
        dst_mac: mac(to_mac),
    }
}

fn sent(r: &ProcessResult) -> (IfName, Packet) {
    match r.out.as_slice() {
        [Egress::Transmit { dev, packet, .. }] => (*dev, *packet),
        o => panic!("expected one frame out, got {o:?}\n{:?}", r.trace),
    }
}

#[test]
fn with_br_netfilter_the_request_is_bridged_dnat_and_the_reply_un_dnatted() {
    let mut ns = node("10.244.0.3", true, false);
    let q = Packet::udp(sa("10.244.0.2:40000"), sa("10.96.0.10:53"));
    // To the gateway's MAC: the ClusterIP is off the pod's subnet.
    let r = ns.process_frame_traced(
        SimTime::ZERO,
        frame(q, "10.244.0.2", "10.244.0.1"),
        ifn("vethA"),
    );
    let (dev, p) = sent(&r);
    assert_eq!(
        (dev, p.dst, p.ttl),
        (ifn("vethB"), ip("10.244.0.3"), 64),
        "bridged: TTL untouched"
    );
    let t = r.trace.unwrap().to_string();
    assert!(t.contains("bridged_dnat to 0a:58:0a:f4:00:03"), "{t}");
    // physdev saw vethA -> vethB, bridged.
    let save = ns.save(true);
    assert!(save.contains("[1:60] -A FORWARD -m physdev --physdev-in vethA --physdev-out vethB --physdev-is-bridged -j ACCEPT"), "{save}");
    // The reply, pod to pod on the bridge, meets conntrack: its source is the ClusterIP.
    let a = Packet::udp(sa("10.244.0.3:53"), sa("10.244.0.2:40000"));
    let r = ns.process_frame_traced(
        SimTime::ZERO,
        frame(a, "10.244.0.3", "10.244.0.2"),
        ifn("vethB"),
    );
    let (dev, p) = sent(&r);
    assert_eq!((dev, p.src, p.ttl), (ifn("vethA"), ip("10.96.0.10"), 64));
}

#[test]
fn without_br_netfilter_the_request_is_routed_and_the_reply_bypasses_un_dnat() {
    let mut ns = node("10.244.0.3", false, false);
    let q = Packet::udp(sa("10.244.0.2:40000"), sa("10.96.0.10:53"));
    let r = ns.process_frame_traced(
        SimTime::ZERO,
        frame(q, "10.244.0.2", "10.244.0.1"),
        ifn("vethA"),
    );
    let (dev, p) = sent(&r);
    // Passed up to cni0, DNAT'd in PREROUTING, routed (TTL - 1) back out of cni0.
    assert_eq!((dev, p.dst, p.ttl), (ifn("vethB"), ip("10.244.0.3"), 63));
    let save = ns.save(true);
    assert!(
        save.contains("[1:60] -A FORWARD -i cni0 -o cni0 -j ACCEPT"),
        "{save}"
    );
    assert!(save.contains("[0:0] -A FORWARD -m physdev"), "{save}");
    let a = Packet::udp(sa("10.244.0.3:53"), sa("10.244.0.2:40000"));
    let r = ns.process_frame_traced(
        SimTime::ZERO,
        frame(a, "10.244.0.3", "10.244.0.2"),
        ifn("vethB"),
    );
    let (dev, p) = sent(&r);
    assert_eq!(
        (dev, p.src, p.ttl),
        (ifn("vethA"), ip("10.244.0.3"), 64),
        "not un-DNAT'd"
    );
    let t = r.trace.unwrap().to_string();
    assert!(t.contains("past FORWARD and POSTROUTING"), "{t}");
}

#[test]
fn hairpin_needs_the_ports_hairpin_mode_when_bridged() {
    let q = Packet::udp(sa("10.244.0.2:40000"), sa("10.96.0.10:53"));
    let mut ns = node("10.244.0.2", true, false);
    let r = ns.process_frame_traced(
        SimTime::ZERO,
        frame(q, "10.244.0.2", "10.244.0.1"),
        ifn("vethA"),
    );
    assert_eq!(
        r.fate,
        Fate::Dropped(DropCause::BridgeHairpinOff(ifn("vethA")))
    );
    assert!(r.out.is_empty());
    let mut ns = node("10.244.0.2", true, true);
    let r = ns.process_frame_traced(
        SimTime::ZERO,
        frame(q, "10.244.0.2", "10.244.0.1"),
        ifn("vethA"),
    );
    let (dev, p) = sent(&r);
    // Masqueraded to cni0's address; the reply to it is un-SNAT'd and un-DNAT'd.
    assert_eq!(
        (dev, p.src, p.dst),
        (ifn("vethA"), ip("10.244.0.1"), ip("10.244.0.2"))
    );
    let a = Packet::udp(
        sa("10.244.0.2:53"),
        SocketAddr::new(p.src, p.sport().unwrap()),
    );
    let r = ns.process_frame_traced(
        SimTime::ZERO,
        frame(a, "10.244.0.2", "10.244.0.1"),
        ifn("vethA"),
    );
    let (dev, p) = sent(&r);
    assert_eq!(
        (dev, p.src, p.dst),
        (ifn("vethA"), ip("10.96.0.10"), ip("10.244.0.2"))
    );
}

#[test]
fn a_gone_stations_frames_flood_and_the_sysctl_is_zero_or_one() {
    let mut ns = node("10.244.0.3", true, false);
    ns.bridge_del_port(ifn("vethB"));
    let q = Packet::udp(sa("10.244.0.2:40000"), sa("10.244.0.3:53"));
    let r = ns.process_frame_traced(
        SimTime::ZERO,
        frame(q, "10.244.0.2", "10.244.0.3"),
        ifn("vethA"),
    );
    // Only vethA is left, and the frame came in by it.
    assert_eq!(r.fate, Fate::Dropped(DropCause::BridgeFlooded));
    ns.bridge_add_port(ifn("cni0"), ifn("vethC"), false)
        .unwrap();
    let r = ns.process_frame_traced(
        SimTime::ZERO,
        frame(q, "10.244.0.2", "10.244.0.3"),
        ifn("vethA"),
    );
    assert_eq!(sent(&r).0, ifn("vethC"), "flooded to the other port");
    assert!(ns.set_sysctl(BRIDGE_NF_CALL_IPTABLES, "x").is_err());
    ns.set_sysctl(BRIDGE_NF_CALL_IPTABLES, "7").unwrap();
    assert!(ns.bridge_nf_call_iptables());
}
