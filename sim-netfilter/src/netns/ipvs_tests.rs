//! The namespace's IPVS side: `kube-ipvs0` and the Service IPs it holds.

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

/// A node with eth0 172.18.0.2/16 and a default route.
fn node() -> Netns {
    let mut n = Netns::new(NetnsConfig::new("worker-1", 1));
    n.add_interface(ifn("eth0"), &[(ip("172.18.0.2"), 16)])
        .unwrap();
    n.add_route(
        Prefix::default_for(true),
        Some(ip("172.18.0.1")),
        ifn("eth0"),
    )
    .unwrap();
    n
}

#[test]
fn a_service_ip_on_kube_ipvs0_is_delivered_locally_until_unbound() {
    let mut n = node();
    let dev = ifn(KUBE_IPVS0);
    assert!(!n.ensure_dummy_device(dev).unwrap());
    assert!(n.ensure_dummy_device(dev).unwrap());
    let vip = ip("10.96.0.10");
    let q = Packet::udp(sa("172.18.0.5:40000"), sa("10.96.0.10:53"));
    // Before the bind the Service IP is routed out of the default route.
    let r = n.process(SimTime::ZERO, q, Ingress::Interface(ifn("eth0")));
    assert_eq!(r.fate, Fate::Transmitted);

    assert!(!n.ensure_address_bind(vip, dev).unwrap());
    assert!(n.ensure_address_bind(vip, dev).unwrap());
    assert_eq!(n.bound_addresses(dev), [vip]);
    assert!(n.routing().is_local(vip));
    // A /32 brings no connected route (`ip route` shows none; the local table has it).
    assert!(n.routing().routes().iter().all(|r| r.dev != dev));
    let r = n.process(SimTime::ZERO, q, Ingress::Interface(ifn("eth0")));
    assert_eq!(r.fate, Fate::Delivered);

    assert!(n.unbind_address(vip, dev).unwrap());
    assert!(!n.unbind_address(vip, dev).unwrap());
    assert!(!n.routing().is_local(vip));
    let r = n.process(SimTime::ZERO, q, Ingress::Interface(ifn("eth0")));
    assert_eq!(r.fate, Fate::Transmitted);
    assert!(n.ensure_address_bind(vip, ifn("nope0")).is_err());
}

#[test]
fn ipvs_sysctls_reach_the_namespace_ipvs() {
    let mut n = node();
    n.set_sysctl("net.ipv4.vs.conntrack", "1").unwrap();
    n.set_sysctl("net.ipv4.vs.conn_reuse_mode", "0").unwrap();
    assert!(n.ipvs().sysctls().conntrack);
    assert_eq!(n.ipvs().sysctls().conn_reuse_mode, 0);
    let e = n.set_sysctl("net.ipv4.vs.bogus", "1").unwrap_err();
    assert!(e.to_string().contains("net.ipv4.vs.conntrack"), "{e}");
    n.reboot(SimTime::from_secs(5));
    assert!(n.ipvs().sysctls().conntrack);
}

use crate::ipvs::{DestSpec, Protocol, Scheduler, ServiceKey, ServiceSpec};
use sim_conntrack::Filter;
use sim_core::TcpFlags;

/// worker-1 in IPVS mode: eth0 172.18.0.2/16, the client pod 10.244.1.20 on veth20, the
/// other node's pods 10.244.2.0/24 via 172.18.0.3; kube-ipvs0 holding 10.96.0.20;
/// `vs/conntrack` as given; a TCP service 10.96.0.20:80 with one real server
/// 10.244.2.7:8080 on the other node, and kube-proxy's masquerade rule for marked packets.
fn ipvs_node(conntrack: bool) -> (Netns, ServiceKey) {
    let mut n = node();
    n.add_interface(ifn("veth20"), &[(ip("10.244.1.1"), 32)])
        .unwrap();
    n.add_route(Prefix::host(ip("10.244.1.20")), None, ifn("veth20"))
        .unwrap();
    n.add_route(
        "10.244.2.0/24".parse().unwrap(),
        Some(ip("172.18.0.3")),
        ifn("eth0"),
    )
    .unwrap();
    let dev = ifn(KUBE_IPVS0);
    n.ensure_dummy_device(dev).unwrap();
    n.ensure_address_bind(ip("10.96.0.20"), dev).unwrap();
    n.set_sysctl("net.ipv4.vs.conntrack", if conntrack { "1" } else { "0" })
        .unwrap();
    n.restore(
        "*nat\n:POSTROUTING ACCEPT [0:0]\n:KUBE-POSTROUTING - [0:0]\n\
         -A POSTROUTING -j KUBE-POSTROUTING\n\
         -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN\n\
         -A KUBE-POSTROUTING -j MASQUERADE\nCOMMIT\n",
        false,
    )
    .unwrap();
    let k = ServiceKey {
        protocol: Protocol::Tcp,
        addr: ip("10.96.0.20"),
        port: 80,
    };
    let v = n.ipvs_mut();
    v.add_service(ServiceSpec::new(k, Scheduler::Rr)).unwrap();
    v.add_dest(k, DestSpec::masq(ip("10.244.2.7"), 8080, 1))
        .unwrap();
    (n, k)
}

fn sent(r: &ProcessResult) -> String {
    match r.out.first() {
        Some(Egress::Transmit { dev, packet, .. }) => format!("{dev}: {packet}"),
        other => panic!("not transmitted: {other:?} ({:?})", r.fate),
    }
}

const CLIENT: &str = "10.244.1.20:40000";
const VIP: &str = "10.96.0.20:80";
const RS: &str = "10.244.2.7:8080";

#[test]
fn ipvs_nats_a_pod_to_a_service_and_unnats_the_reply() {
    let (mut n, _) = ipvs_node(true);
    let t = |ms| SimTime::from_millis(ms);
    let syn = Packet::tcp(sa(CLIENT), sa(VIP), TcpFlags::SYN);
    let r = n.process_traced(t(0), syn, Ingress::Interface(ifn("veth20")));
    assert_eq!(
        sent(&r),
        "eth0: tcp 10.244.1.20:40000 -> 10.244.2.7:8080 SYN"
    );
    let trace = r.trace.unwrap().to_string();
    assert!(
        trace.contains("  ipvs: ip_vs_in: rr chose 10.244.2.7:8080: new connection 10.244.1.20:40000 -> 10.96.0.20:80 -> 10.244.2.7:8080\n"),
        "{trace}"
    );
    // vs/conntrack=1: the entry's reply tuple names the real server (ip_vs_update_conntrack).
    let dump = n.conntrack().dump(t(1), &Filter::all());
    assert!(dump.contains("src=10.244.1.20 dst=10.96.0.20 sport=40000 dport=80 [UNREPLIED] src=10.244.2.7 dst=10.244.1.20 sport=8080 dport=40000"), "{dump}");
    assert!(n.ipvs().list_conns(t(1)).ends_with(
        "TCP 00:59  SYN_RECV    10.244.1.20:40000  10.96.0.20:80      10.244.2.7:8080\n"
    ));

    let synack = Packet::tcp(sa(RS), sa(CLIENT), TcpFlags::SYN.union(TcpFlags::ACK));
    let r = n.process_traced(t(2), synack, Ingress::Interface(ifn("eth0")));
    assert_eq!(
        sent(&r),
        "veth20: tcp 10.96.0.20:80 -> 10.244.1.20:40000 SYN,ACK"
    );
    assert!(r.trace.unwrap().to_string().contains("  ipvs: ip_vs_out: reply of connection 10.244.1.20:40000 -> 10.96.0.20:80: source 10.244.2.7:8080 rewritten to 10.96.0.20:80\n"));
    let ack = Packet::tcp(sa(CLIENT), sa(VIP), TcpFlags::ACK);
    let r = n.process(t(3), ack, Ingress::Interface(ifn("veth20")));
    assert_eq!(
        sent(&r),
        "eth0: tcp 10.244.1.20:40000 -> 10.244.2.7:8080 ACK"
    );
    assert!(n.ipvs().list().contains(
        "TCP  10.96.0.20:80 rr\n  -> 10.244.2.7:8080              Masq    1      1          0         \n"
    ));
    assert!(n.ipvs().list_conns(t(4)).ends_with(
        "TCP 14:59  ESTABLISHED 10.244.1.20:40000  10.96.0.20:80      10.244.2.7:8080\n"
    ));
    let stats = n.ipvs().list_stats();
    assert!(
        stats.contains(
            "TCP  10.96.0.20:80                       1        2        1      144       72\n"
        ),
        "{stats}"
    );
}

#[test]
fn without_vs_conntrack_the_packets_go_untracked() {
    let (mut n, _) = ipvs_node(false);
    let syn = Packet::tcp(sa(CLIENT), sa(VIP), TcpFlags::SYN);
    let r = n.process(SimTime::ZERO, syn, Ingress::Interface(ifn("veth20")));
    assert_eq!(
        sent(&r),
        "eth0: tcp 10.244.1.20:40000 -> 10.244.2.7:8080 SYN"
    );
    assert_eq!(n.conntrack().len(), 0);
}

#[test]
fn a_marked_packet_is_masqueraded_after_ipvs_and_the_reply_finds_its_way_back() {
    let (mut n, _) = ipvs_node(true);
    n.restore(
        "*mangle\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -d 10.96.0.20/32 -j MARK --set-xmark 0x4000/0x4000\nCOMMIT\n",
        true,
    )
    .unwrap();
    let syn = Packet::tcp(sa(CLIENT), sa(VIP), TcpFlags::SYN);
    let r = n.process(SimTime::ZERO, syn, Ingress::Interface(ifn("veth20")));
    let out = sent(&r);
    assert!(out.starts_with("eth0: tcp 172.18.0.2:"), "{out}");
    assert!(out.ends_with(" -> 10.244.2.7:8080 SYN"), "{out}");
    let dump = n.conntrack().dump(SimTime::from_millis(1), &Filter::all());
    assert!(dump.contains("src=10.244.1.20 dst=10.96.0.20 sport=40000 dport=80 [UNREPLIED] src=10.244.2.7 dst=172.18.0.2 sport=8080"), "{dump}");
    let masq_port: u16 = out["eth0: tcp 172.18.0.2:".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let synack = Packet::tcp(
        sa(RS),
        SocketAddr::new(ip("172.18.0.2"), masq_port),
        TcpFlags::SYN.union(TcpFlags::ACK),
    );
    let r = n.process(
        SimTime::from_millis(2),
        synack,
        Ingress::Interface(ifn("eth0")),
    );
    assert_eq!(
        sent(&r),
        "veth20: tcp 10.96.0.20:80 -> 10.244.1.20:40000 SYN,ACK"
    );
}

#[test]
fn a_service_without_real_servers_answers_port_unreachable() {
    let (mut n, k) = ipvs_node(true);
    n.ipvs_mut().del_dest(k, ip("10.244.2.7"), 8080).unwrap();
    let syn = Packet::tcp(sa(CLIENT), sa(VIP), TcpFlags::SYN);
    let r = n.process(SimTime::ZERO, syn, Ingress::Interface(ifn("veth20")));
    assert_eq!(
        r.fate,
        Fate::Dropped(DropCause::Ipvs(
            "no real server available: ICMP port unreachable sent".into()
        ))
    );
    let icmp = sent(&r);
    assert!(
        icmp.starts_with("veth20: icmp 10.96.0.20 -> 10.244.1.20"),
        "{icmp}"
    );
}

#[test]
fn a_deleted_real_server_drops_its_connection_and_expire_nodest_conn_reschedules() {
    for expire in [false, true] {
        let (mut n, k) = ipvs_node(true);
        n.set_sysctl(
            "net.ipv4.vs.expire_nodest_conn",
            if expire { "1" } else { "0" },
        )
        .unwrap();
        let syn = Packet::tcp(sa(CLIENT), sa(VIP), TcpFlags::SYN);
        n.process(SimTime::ZERO, syn, Ingress::Interface(ifn("veth20")));
        let v = n.ipvs_mut();
        v.add_dest(k, DestSpec::masq(ip("10.244.2.8"), 8080, 1))
            .unwrap();
        v.del_dest(k, ip("10.244.2.7"), 8080).unwrap();
        let t = SimTime::from_secs(1);
        let again = Packet::tcp(sa(CLIENT), sa(VIP), TcpFlags::SYN);
        let r = n.process(t, again, Ingress::Interface(ifn("veth20")));
        if expire {
            // 5.9+: ip_vs_expire_nodest_conn_flush expired it when the server went; the SYN
            // (conntrack's entry of the old one is gone with it) is scheduled afresh.
            assert_eq!(
                sent(&r),
                "eth0: tcp 10.244.1.20:40000 -> 10.244.2.8:8080 SYN"
            );
        } else {
            assert_eq!(
                r.fate,
                Fate::Dropped(DropCause::Ipvs("ip_vs_in dropped it".into()))
            );
            assert!(n.ipvs().list_conns(t).contains("10.244.2.7:8080"));
        }
    }
}

#[test]
fn persistence_keeps_a_client_on_its_server_through_a_template() {
    let (mut n, k) = ipvs_node(true);
    let v = n.ipvs_mut();
    v.edit_service(ServiceSpec::new(k, Scheduler::Rr).persistent(10800))
        .unwrap();
    v.add_dest(k, DestSpec::masq(ip("10.244.2.8"), 8080, 1))
        .unwrap();
    let mut to = Vec::new();
    for (i, port) in [40000u16, 40001, 40002].into_iter().enumerate() {
        let c = SocketAddr::new(ip("10.244.1.20"), port);
        let syn = Packet::tcp(c, sa(VIP), TcpFlags::SYN);
        let r = n.process(
            SimTime::from_secs(i as u64),
            syn,
            Ingress::Interface(ifn("veth20")),
        );
        to.push(sent(&r).split(" -> ").nth(1).unwrap().to_string());
    }
    assert_eq!(to[0], to[1]);
    assert_eq!(to[1], to[2]);
    let text = n.ipvs().list_conns(SimTime::from_secs(2));
    assert!(
        text.contains("TCP 180:00 NONE        10.244.1.20:0      10.96.0.20:80      "),
        "{text}"
    );
    // Quiesced with expire_quiescent_template, the template no longer holds: the next
    // connection goes to the other server.
    let chosen: std::net::IpAddr = to[0].split(':').next().unwrap().parse().unwrap();
    let other = if chosen == ip("10.244.2.7") {
        "10.244.2.8"
    } else {
        "10.244.2.7"
    };
    n.set_sysctl("net.ipv4.vs.expire_quiescent_template", "1")
        .unwrap();
    n.ipvs_mut()
        .edit_dest(k, DestSpec::masq(chosen, 8080, 0))
        .unwrap();
    let syn = Packet::tcp(sa("10.244.1.20:40005"), sa(VIP), TcpFlags::SYN);
    let r = n.process(
        SimTime::from_secs(5),
        syn,
        Ingress::Interface(ifn("veth20")),
    );
    assert!(
        sent(&r).contains(&format!("-> {other}:8080")),
        "{}",
        sent(&r)
    );
}

#[test]
fn an_expired_ipvs_connection_takes_its_conntrack_entry_with_it() {
    let (mut n, k) = ipvs_node(true);
    n.ipvs_mut().del_service(k).unwrap();
    let u = ServiceKey {
        protocol: Protocol::Udp,
        addr: ip("10.96.0.20"),
        port: 53,
    };
    let v = n.ipvs_mut();
    v.add_service(ServiceSpec::new(u, Scheduler::Rr)).unwrap();
    v.add_dest(u, DestSpec::masq(ip("10.244.2.7"), 53, 1))
        .unwrap();
    v.set_timeouts(0, 0, 60);
    let q = Packet::udp(sa("10.244.1.20:5353"), sa("10.96.0.20:53"));
    n.process(SimTime::ZERO, q, Ingress::Interface(ifn("veth20")));
    // Keep conntrack's entry alive past IPVS's 60 s (stream timeout after a reply).
    let a = Packet::udp(sa("10.244.2.7:53"), sa("10.244.1.20:5353"));
    n.process(SimTime::from_secs(1), a, Ingress::Interface(ifn("eth0")));
    n.process(SimTime::from_secs(2), q, Ingress::Interface(ifn("veth20")));
    assert_eq!(n.conntrack().len(), 1);
    assert_eq!(n.poll_timeout(), Some(SimTime::from_secs(32)));
    n.handle_timeout(SimTime::from_secs(62));
    assert!(n.ipvs().conns().is_empty());
    assert_eq!(n.conntrack().len(), 0, "ip_vs_conn_drop_conntrack");
}

/// A connection through IPVS closed by both sides: IPVS and conntrack in TIME_WAIT.
fn closed_connection(n: &mut Netns) {
    let ms = SimTime::from_millis;
    let c = sa(CLIENT);
    let from_client = |flags| Packet::tcp(c, sa(VIP), flags);
    let from_server = |flags| Packet::tcp(sa(RS), c, flags);
    let fa = TcpFlags::FIN.union(TcpFlags::ACK);
    let steps = [
        (from_client(TcpFlags::SYN), "veth20"),
        (from_server(TcpFlags::SYN.union(TcpFlags::ACK)), "eth0"),
        (from_client(TcpFlags::ACK), "veth20"),
        (from_client(fa), "veth20"),
        (from_server(fa), "eth0"),
        (from_client(TcpFlags::ACK), "veth20"),
    ];
    for (i, (p, dev)) in steps.into_iter().enumerate() {
        n.process(ms(i as u64), p, Ingress::Interface(ifn(dev)));
    }
    assert!(n
        .ipvs()
        .list_conns(ms(10))
        .contains("TIME_WAIT   10.244.1.20:40000"));
}

#[test]
fn conn_reuse_mode_on_a_time_wait_tuple_by_kernel_generation() {
    let syn = Packet::tcp(sa(CLIENT), sa(VIP), TcpFlags::SYN);
    let at = SimTime::from_secs(1);
    // 5.9+: conntrack re-opens its TIME_WAIT entry, so the SYN's entry is new and IPVS
    // schedules a fresh connection at once.
    let (mut n, _) = ipvs_node(true);
    closed_connection(&mut n);
    let r = n.process_traced(at, syn, Ingress::Interface(ifn("veth20")));
    assert_eq!(
        sent(&r),
        "eth0: tcp 10.244.1.20:40000 -> 10.244.2.7:8080 SYN"
    );
    let trace = r.trace.unwrap().to_string();
    assert!(
        trace.contains("new SYN on the tuple of a TIME_WAIT connection to 10.244.2.7:8080: rescheduled (conn_reuse_mode=1); rr chose"),
        "{trace}"
    );
    // Before 5.9 any conntrack entry counts: the SYN is dropped and the old connection
    // expires, taking its conntrack entry; the client's retransmission a second later goes.
    let (mut n, _) = ipvs_node(true);
    n.ipvs_mut().set_kernel_5_9(false);
    closed_connection(&mut n);
    let r = n.process(at, syn, Ingress::Interface(ifn("veth20")));
    assert_eq!(
        r.fate,
        Fate::Dropped(DropCause::Ipvs("ip_vs_in dropped it".into()))
    );
    let r = n.process(
        SimTime::from_secs(2),
        syn,
        Ingress::Interface(ifn("veth20")),
    );
    assert_eq!(
        sent(&r),
        "eth0: tcp 10.244.1.20:40000 -> 10.244.2.7:8080 SYN"
    );
    // conn_reuse_mode=0 (what kube-proxy set before 5.9): the old connection is reused.
    let (mut n, _) = ipvs_node(true);
    n.set_sysctl("net.ipv4.vs.conn_reuse_mode", "0").unwrap();
    n.ipvs_mut().set_kernel_5_9(false);
    closed_connection(&mut n);
    let r = n.process(at, syn, Ingress::Interface(ifn("veth20")));
    assert_eq!(
        sent(&r),
        "eth0: tcp 10.244.1.20:40000 -> 10.244.2.7:8080 SYN"
    );
    assert!(n
        .ipvs()
        .list_conns(at)
        .contains("SYN_RECV    10.244.1.20:40000"));
}

#[test]
fn the_node_itself_reaches_a_service_through_local_out() {
    let (mut n, _) = ipvs_node(true);
    let c = sa("172.18.0.2:50000");
    let syn = Packet::tcp(c, sa(VIP), TcpFlags::SYN);
    let r = n.process_traced(SimTime::ZERO, syn, Ingress::Local);
    assert_eq!(
        sent(&r),
        "eth0: tcp 172.18.0.2:50000 -> 10.244.2.7:8080 SYN"
    );
    let trace = r.trace.unwrap().to_string();
    // ip_vs_in at LOCAL_OUT, then OUTPUT again for the translated packet.
    let at = trace.find("ipvs: ip_vs_in: rr chose").expect(&trace);
    assert!(trace[at..].contains("\nOUTPUT\n"), "{trace}");
    let synack = Packet::tcp(sa(RS), c, TcpFlags::SYN.union(TcpFlags::ACK));
    let r = n.process(
        SimTime::from_millis(1),
        synack,
        Ingress::Interface(ifn("eth0")),
    );
    assert_eq!(r.fate, Fate::Delivered);
    let Some(Egress::LocalDeliver { packet }) = r.out.first() else {
        panic!("{:?}", r.out)
    };
    assert_eq!(
        packet.to_string(),
        "tcp 10.96.0.20:80 -> 172.18.0.2:50000 SYN,ACK"
    );
}

#[test]
fn a_real_server_on_the_node_gets_the_packet_delivered_locally() {
    let (mut n, k) = ipvs_node(true);
    let v = n.ipvs_mut();
    v.del_dest(k, ip("10.244.2.7"), 8080).unwrap();
    v.add_dest(k, DestSpec::masq(ip("172.18.0.2"), 6443, 1))
        .unwrap();
    let syn = Packet::tcp(sa(CLIENT), sa(VIP), TcpFlags::SYN);
    let r = n.process(SimTime::ZERO, syn, Ingress::Interface(ifn("veth20")));
    assert_eq!(r.fate, Fate::Delivered);
    let Some(Egress::LocalDeliver { packet }) = r.out.first() else {
        panic!("{:?}", r.out)
    };
    assert_eq!(
        packet.to_string(),
        "tcp 10.244.1.20:40000 -> 172.18.0.2:6443 SYN"
    );
    // The local server's answer meets ip_vs_out at LOCAL_OUT: it leaves from the VIP.
    let synack = Packet::tcp(
        sa("172.18.0.2:6443"),
        sa(CLIENT),
        TcpFlags::SYN.union(TcpFlags::ACK),
    );
    let r = n.process(SimTime::from_millis(1), synack, Ingress::Local);
    assert_eq!(
        sent(&r),
        "veth20: tcp 10.96.0.20:80 -> 10.244.1.20:40000 SYN,ACK"
    );
}

#[test]
fn no_ipvs_service_no_ipvs_step() {
    // A namespace without virtual services never calls IPVS: a packet to a bound address is
    // delivered and the trace has no ipvs line.
    let mut n = node();
    let dev = ifn(KUBE_IPVS0);
    n.ensure_dummy_device(dev).unwrap();
    n.ensure_address_bind(ip("10.96.0.20"), dev).unwrap();
    let syn = Packet::tcp(sa(CLIENT), sa(VIP), TcpFlags::SYN);
    let r = n.process_traced(SimTime::ZERO, syn, Ingress::Interface(ifn("eth0")));
    assert_eq!(r.fate, Fate::Delivered);
    assert!(!r.trace.unwrap().to_string().contains("ipvs:"));
}

#[test]
fn an_ipv6_service_is_balanced_the_same_way() {
    let mut n = node();
    n.add_interface(ifn("eth1"), &[(ip("fd00:18::2"), 64)])
        .unwrap();
    n.add_interface(ifn("veth20"), &[(ip("fe80::1"), 128)])
        .unwrap();
    n.add_route(Prefix::host(ip("fd00:244:1::20")), None, ifn("veth20"))
        .unwrap();
    n.add_route(
        "fd00:244:2::/64".parse().unwrap(),
        Some(ip("fd00:18::3")),
        ifn("eth1"),
    )
    .unwrap();
    let dev = ifn(KUBE_IPVS0);
    n.ensure_dummy_device(dev).unwrap();
    n.ensure_address_bind(ip("fd00:96::20"), dev).unwrap();
    n.set_sysctl("net.ipv4.vs.conntrack", "1").unwrap();
    let k = ServiceKey {
        protocol: Protocol::Udp,
        addr: ip("fd00:96::20"),
        port: 53,
    };
    let v = n.ipvs_mut();
    v.add_service(ServiceSpec::new(k, Scheduler::Rr)).unwrap();
    v.add_dest(k, DestSpec::masq(ip("fd00:244:2::7"), 5353, 1))
        .unwrap();
    let q = Packet::udp(sa("[fd00:244:1::20]:40000"), sa("[fd00:96::20]:53"));
    let r = n.process(SimTime::ZERO, q, Ingress::Interface(ifn("veth20")));
    assert_eq!(
        sent(&r),
        "eth1: udp [fd00:244:1::20]:40000 -> [fd00:244:2::7]:5353"
    );
    let a = Packet::udp(sa("[fd00:244:2::7]:5353"), sa("[fd00:244:1::20]:40000"));
    let r = n.process(SimTime::from_millis(1), a, Ingress::Interface(ifn("eth1")));
    assert_eq!(
        sent(&r),
        "veth20: udp [fd00:96::20]:53 -> [fd00:244:1::20]:40000"
    );
    assert!(n.ipvs().list_conns(SimTime::from_millis(2)).ends_with(
        "UDP 04:59  UDP         [fd00:244:1::20]:40000 [fd00:96::20]:53   [fd00:244:2::7]:5353\n"
    ));
}

#[test]
fn before_5_9_expire_nodest_conn_expires_at_the_next_packet_which_conntrack_holds_back() {
    // No flush on delete before 5.9: the next packet finds the connection, expires it and,
    // since the connection uses the packet's (old) conntrack entry, is dropped; the entry
    // goes with the connection, and the retransmission is scheduled to the new server.
    let (mut n, k) = ipvs_node(true);
    n.set_sysctl("net.ipv4.vs.expire_nodest_conn", "1").unwrap();
    n.ipvs_mut().set_kernel_5_9(false);
    let syn = Packet::tcp(sa(CLIENT), sa(VIP), TcpFlags::SYN);
    n.process(SimTime::ZERO, syn, Ingress::Interface(ifn("veth20")));
    let v = n.ipvs_mut();
    v.add_dest(k, DestSpec::masq(ip("10.244.2.8"), 8080, 1))
        .unwrap();
    v.del_dest(k, ip("10.244.2.7"), 8080).unwrap();
    assert!(n
        .ipvs()
        .list_conns(SimTime::ZERO)
        .contains("10.244.2.7:8080"));
    let r = n.process_traced(
        SimTime::from_secs(1),
        syn,
        Ingress::Interface(ifn("veth20")),
    );
    assert_eq!(
        r.fate,
        Fate::Dropped(DropCause::Ipvs("ip_vs_in dropped it".into()))
    );
    assert!(r
        .trace
        .unwrap()
        .to_string()
        .contains("packet dropped as the connection uses conntrack"));
    let r = n.process(
        SimTime::from_secs(2),
        syn,
        Ingress::Interface(ifn("veth20")),
    );
    assert_eq!(
        sent(&r),
        "eth0: tcp 10.244.1.20:40000 -> 10.244.2.8:8080 SYN"
    );
}
