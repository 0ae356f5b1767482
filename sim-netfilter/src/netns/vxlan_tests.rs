//! The VXLAN device against the kernel's paths (drivers/net/vxlan/vxlan_core.c): two
//! flannel nodes, a pod on each node's `cni0`, the inner packet encapsulated on one node and
//! decapsulated on the other, the outer flow in both nodes' conntrack, the MTU.

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
fn vtep_mac(i: u8) -> Mac {
    Mac([0x02, 0x66, 0x6c, 0, 0, i])
}
fn pod_mac(a: &str) -> Mac {
    match ip(a) {
        IpAddr::V4(v) => Mac::from_ipv4(v),
        IpAddr::V6(_) => unreachable!(),
    }
}

/// Node `i` (0 or 1) as flannel builds it: eth0 172.18.0.(2+i)/24, cni0 10.244.i.1/24 with
/// pod 10.244.i.2 on vethA, flannel.1 10.244.i.0/32, the other node's pod CIDR via its
/// flannel.1 with the neighbour and FDB entries.
fn node(i: u8) -> Netns {
    let o = 1 - i;
    let mut ns = Netns::new(NetnsConfig::new(&format!("node{i}"), 7));
    ns.add_interface(ifn("eth0"), &[(ip(&format!("172.18.0.{}", 2 + i)), 24)])
        .unwrap();
    let gw = format!("10.244.{i}.1");
    ns.add_bridge(ifn("cni0"), pod_mac(&gw), &[(ip(&gw), 24)])
        .unwrap();
    ns.bridge_add_port(ifn("cni0"), ifn("vethA"), true).unwrap();
    let pod = format!("10.244.{i}.2");
    ns.bridge_set_neighbour(ip(&pod), pod_mac(&pod));
    ns.add_vxlan(
        VxlanConfig {
            dev: ifn("flannel.1"),
            vni: 1,
            local: format!("172.18.0.{}", 2 + i).parse().unwrap(),
            dst_port: VXLAN_DEFAULT_DST_PORT,
            mtu: 1450,
            mac: vtep_mac(i),
        },
        &[(ip(&format!("10.244.{i}.0")), 32)],
    )
    .unwrap();
    let remote_gw = ip(&format!("10.244.{o}.0"));
    ns.add_route(
        Prefix::new(ip(&format!("10.244.{o}.0")), 24).unwrap(),
        Some(remote_gw),
        ifn("flannel.1"),
    )
    .unwrap();
    assert!(ns.vxlan_neigh_set(ifn("flannel.1"), remote_gw, vtep_mac(o)));
    assert!(ns.vxlan_fdb_set(
        ifn("flannel.1"),
        vtep_mac(o),
        format!("172.18.0.{}", 2 + o).parse().unwrap()
    ));
    ns
}

fn frame(p: Packet, gw: &str) -> Frame {
    Frame {
        packet: p,
        src_mac: pod_mac(&p.src.to_string()),
        dst_mac: pod_mac(gw),
    }
}

/// Pod 0 -> pod 1 across the overlay: the outer packet on node 0's eth0, the inner packet
/// out of node 1's vethA with two hops taken off, and each node's conntrack.
fn cross(a: &mut Netns, b: &mut Netns, p: Packet) -> (VxlanWire, ProcessResult) {
    let r = a.process_frame_traced(SimTime::ZERO, frame(p, "10.244.0.1"), ifn("vethA"));
    assert_eq!(r.fate, Fate::Transmitted, "{}", r.trace.unwrap());
    let Egress::Transmit {
        dev,
        next_hop,
        packet,
    } = r.out[0]
    else {
        panic!("{:?}", r.out)
    };
    assert_eq!((dev, next_hop), (ifn("eth0"), ip("172.18.0.3")));
    let wire = a.take_vxlan_sent(&packet).expect("the encapsulated packet");
    let rb = b.process_vxlan_traced(SimTime::ZERO, wire, ifn("eth0"));
    (wire, rb)
}

#[test]
fn pod_to_pod_across_nodes_is_encapsulated_and_decapsulated() {
    let (mut a, mut b) = (node(0), node(1));
    let p = Packet::udp(sa("10.244.0.2:40000"), sa("10.244.1.2:53"));
    let (wire, rb) = cross(&mut a, &mut b, p);
    let o = wire.outer;
    assert_eq!((o.src, o.dst), (ip("172.18.0.2"), ip("172.18.0.3")));
    assert_eq!(o.dport(), Some(8472));
    let sport = o.sport().unwrap();
    assert!((32768..=60998).contains(&sport), "{sport}");
    assert_eq!(o.ttl, 64);
    assert_eq!(o.len, p.len + 50);
    assert_eq!(wire.vni, 1);
    assert_eq!(wire.inner_dst_mac, vtep_mac(1));
    // The inner packet lost one hop on node 0.
    assert_eq!(wire.inner.ttl, 63);
    let t = rb.trace.clone().unwrap().to_string();
    assert_eq!(rb.fate, Fate::Transmitted, "{t}");
    assert!(t.contains("vxlan: vxlan_rcv: VNI 1 to flannel.1"), "{t}");
    let Egress::Transmit { dev, packet, .. } = rb.out[0] else {
        panic!("{:?}", rb.out)
    };
    assert_eq!(dev, ifn("vethA"));
    assert_eq!(packet.ttl, 62);
    assert_eq!((packet.src, packet.dst), (p.src, p.dst));
    // Node 0 tracks the inner flow and the outer one; node 1 too.
    for ns in [&a, &b] {
        let dump = ns
            .conntrack()
            .dump(SimTime::ZERO, &sim_conntrack::Filter::default());
        let lines: Vec<&str> = dump.lines().collect();
        assert!(
            lines
                .iter()
                .any(|l| l.contains("dport=8472") && l.contains("[UNREPLIED]")),
            "{lines:?}"
        );
        assert!(lines.iter().any(|l| l.contains("dport=53")), "{lines:?}");
    }
}

#[test]
fn outer_source_port_is_per_flow_and_symmetric() {
    let (mut a, mut b) = (node(0), node(1));
    let p = Packet::udp(sa("10.244.0.2:40000"), sa("10.244.1.2:53"));
    let (w1, _) = cross(&mut a, &mut b, p);
    let (w2, _) = cross(&mut a, &mut b, p);
    assert_eq!(w1.outer.sport(), w2.outer.sport());
    let k = a.vxlan_hashrnd(ifn("flannel.1")).unwrap();
    let back = Packet::udp(sa("10.244.1.2:53"), sa("10.244.0.2:40000"));
    assert_eq!(vxlan_src_port(k, &back), vxlan_src_port(k, &p));
    let ports: std::collections::BTreeSet<u16> = (40001..40041)
        .map(|s| {
            vxlan_src_port(
                k,
                &Packet::udp(sa(&format!("10.244.0.2:{s}")), sa("10.244.1.2:53")),
            )
        })
        .collect();
    assert!(ports.len() > 30, "{ports:?}");
}

#[test]
fn a_dropped_outer_packet_loses_the_inner_one() {
    let mut a = node(0);
    a.restore(
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -p udp -m udp --dport 8472 -j DROP\nCOMMIT\n",
        false,
    )
    .unwrap();
    let p = Packet::udp(sa("10.244.0.2:40000"), sa("10.244.1.2:53"));
    let r = a.process_frame_traced(SimTime::ZERO, frame(p, "10.244.0.1"), ifn("vethA"));
    assert!(r.out.is_empty(), "{:?}", r.out);
    assert!(
        matches!(r.fate, Fate::Dropped(DropCause::Rule { .. })),
        "{:?}",
        r.fate
    );
    let t = r.trace.unwrap().to_string();
    assert!(t.contains("vxlan: vxlan_xmit on flannel.1"), "{t}");
    assert!(t.contains("OUTPUT"), "{t}");
}

#[test]
fn a_missing_fdb_entry_drops_at_vxlan_xmit() {
    let mut a = node(0);
    a.vxlan_forget(ifn("flannel.1"), ip("10.244.1.0"));
    let p = Packet::udp(sa("10.244.0.2:40000"), sa("10.244.1.2:53"));
    let r = a.process_frame_traced(SimTime::ZERO, frame(p, "10.244.0.1"), ifn("vethA"));
    assert_eq!(
        r.fate,
        Fate::Dropped(DropCause::NeighbourUnresolved(ip("10.244.1.0")))
    );
    let mut a = node(0);
    a.vxlan_forget(ifn("flannel.1"), ip("10.244.1.0"));
    assert!(a.vxlan_neigh_set(ifn("flannel.1"), ip("10.244.1.0"), vtep_mac(1)));
    let r = a.process_frame_traced(SimTime::ZERO, frame(p, "10.244.0.1"), ifn("vethA"));
    assert_eq!(r.fate, Fate::Dropped(DropCause::VxlanFdbMiss(vtep_mac(1))));
}

#[test]
fn over_the_mtu_is_answered_with_frag_needed() {
    let mut a = node(0);
    let mut p = Packet::udp(sa("172.18.0.9:40000"), sa("10.244.1.2:53"));
    p.len = 1451;
    let r = a.process_traced(SimTime::ZERO, p, Ingress::Interface(ifn("eth0")));
    assert_eq!(r.fate, Fate::Dropped(DropCause::FragNeeded { mtu: 1450 }));
    let Some(Egress::Transmit { packet, .. }) = r.out.first() else {
        panic!("{:?}", r.out)
    };
    let sim_core::L4::Icmp {
        icmp_type, code, ..
    } = packet.l4
    else {
        panic!("{packet}")
    };
    assert_eq!((icmp_type, code), (3, ICMP_FRAG_NEEDED));
    assert_eq!(packet.dst, ip("172.18.0.9"));
    // 1450 fits.
    p.len = 1450;
    let r = a.process(SimTime::ZERO, p, Ingress::Interface(ifn("eth0")));
    assert_eq!(r.fate, Fate::Transmitted);
    // The inner flow and the outer one; the refused packet left none.
    assert_eq!(a.conntrack().len(), 2);
    // A local send over it fails before the hooks.
    let mut q = Packet::udp(sa("172.18.0.2:40000"), sa("10.244.1.2:53"));
    q.len = 1500;
    let r = a.process(SimTime::ZERO, q, Ingress::Local);
    assert_eq!(r.fate, Fate::Dropped(DropCause::FragNeeded { mtu: 1450 }));
    assert_eq!(a.conntrack().len(), 2);
}

#[test]
fn a_vni_or_mac_mismatch_is_dropped_on_receive() {
    let (mut a, mut b) = (node(0), node(1));
    let p = Packet::udp(sa("10.244.0.2:40000"), sa("10.244.1.2:53"));
    let r = a.process_frame_traced(SimTime::ZERO, frame(p, "10.244.0.1"), ifn("vethA"));
    let Egress::Transmit { packet, .. } = r.out[0] else {
        panic!()
    };
    let wire = a.take_vxlan_sent(&packet).unwrap();
    let mut w = wire;
    w.vni = 2;
    let r = b.process_vxlan_traced(SimTime::ZERO, w, ifn("eth0"));
    assert_eq!(r.fate, Fate::Dropped(DropCause::VxlanNoDevice));
    let mut w = wire;
    w.inner_dst_mac = vtep_mac(9);
    let r = b.process_vxlan_traced(SimTime::ZERO, w, ifn("eth0"));
    assert_eq!(
        r.fate,
        Fate::Dropped(DropCause::VxlanOtherHost(vtep_mac(9)))
    );
    // Plain UDP to 8472 carries no VXLAN header.
    let r = b.process(SimTime::ZERO, packet, Ingress::Interface(ifn("eth0")));
    assert_eq!(r.fate, Fate::Dropped(DropCause::VxlanNoDevice));
}
