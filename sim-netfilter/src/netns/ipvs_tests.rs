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
