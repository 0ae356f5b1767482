//! `--nodeport-addresses` as each family's proxier reads it (kubernetes
//! `pkg/proxy/util/nodeport_addresses.go`: `NewNodePortAddresses`, `MatchAll`,
//! `GetNodeIPs`, `ContainsIPv4Loopback`).
//!
//! The flag holds CIDRs of both families; each proxier keeps those of its own family, and
//! when none is left it matches every address (`0.0.0.0/0` or `::/0`), so an IPv4-only list
//! leaves the IPv6 proxier serving NodePorts on every local IPv6 address. A zero-length
//! prefix anywhere in the list also matches everything. Otherwise the NodePort addresses are
//! the node's interface addresses inside one of the CIDRs, link-local ones included (kube-proxy
//! filters by CIDR only); the renderers leave out loopback ones where the family cannot serve
//! them.

use crate::k8s::{Cidr, IpFamily};
use std::net::IpAddr;

/// One family's view of `--nodeport-addresses`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePortAddresses {
    family: IpFamily,
    cidrs: Vec<Cidr>,
    match_all: bool,
    contains_ipv4_loopback: bool,
}

impl NodePortAddresses {
    /// `NewNodePortAddresses(family, cidrs)`: the CIDRs of `family`, or every address when
    /// there are none (or one has prefix length 0).
    pub fn new(family: IpFamily, cidrs: &[Cidr]) -> NodePortAddresses {
        let mut mine: Vec<Cidr> = cidrs
            .iter()
            .copied()
            .filter(|c| family.contains(c.addr()))
            .collect();
        if mine.is_empty() {
            let zero = match family {
                IpFamily::IPv4 => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
                IpFamily::IPv6 => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
            };
            mine.push(Cidr::new(zero, 0).unwrap_or_else(|| unreachable!("/0 is valid")));
        }
        let loopback4 = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 0));
        let contains_ipv4_loopback = mine
            .iter()
            .any(|c| c.addr().is_ipv4() && (c.addr().is_loopback() || c.contains(loopback4)));
        let match_all = mine.iter().any(|c| c.prefix_len() == 0);
        if match_all {
            mine.retain(|c| c.prefix_len() == 0);
            mine.truncate(1);
        }
        NodePortAddresses {
            family,
            cidrs: mine,
            match_all,
            contains_ipv4_loopback,
        }
    }

    /// `MatchAll`: NodePorts on every local address of the family.
    pub fn match_all(&self) -> bool {
        self.match_all
    }

    /// `ContainsIPv4Loopback`: a CIDR reaches 127.0.0.0 (never for IPv6). Without it
    /// `NewProxier` turns localhost NodePorts off.
    pub fn contains_ipv4_loopback(&self) -> bool {
        self.contains_ipv4_loopback
    }

    /// `GetNodeIPs`: the addresses among `interface_addrs` inside one of the CIDRs, sorted
    /// and without duplicates (kube-proxy collects them in a Go map).
    pub fn node_ips(&self, interface_addrs: &[IpAddr]) -> Vec<IpAddr> {
        let mut v: Vec<IpAddr> = interface_addrs
            .iter()
            .copied()
            .filter(|a| self.family.contains(*a) && self.cidrs.iter().any(|c| c.contains(*a)))
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// What [`super::ProxierConfig::node_port_addresses`] takes: `None` when matching every
    /// address, else [`NodePortAddresses::node_ips`].
    pub fn resolve(&self, interface_addrs: &[IpAddr]) -> Option<Vec<IpAddr>> {
        (!self.match_all).then(|| self.node_ips(interface_addrs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidrs(v: &[&str]) -> Vec<Cidr> {
        v.iter().map(|c| c.parse().unwrap()).collect()
    }

    /// `TestNewNodePortAddresses`-like cases: each family keeps its own CIDRs, and matches
    /// everything when the list has none of them.
    #[test]
    fn each_family_keeps_its_own_cidrs() {
        let list = cidrs(&["192.168.0.0/24", "192.168.1.0/24", "2001:db8::/64"]);
        let v4 = NodePortAddresses::new(IpFamily::IPv4, &list);
        let v6 = NodePortAddresses::new(IpFamily::IPv6, &list);
        assert!(!v4.match_all() && !v6.match_all());
        let addrs: Vec<IpAddr> = [
            "127.0.0.1",
            "::1",
            "192.168.0.2",
            "192.168.1.2",
            "192.168.99.11",
            "2001:db8::1",
            "2001:db8:1::2",
        ]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
        assert_eq!(
            v4.node_ips(&addrs),
            vec![
                "192.168.0.2".parse::<IpAddr>().unwrap(),
                "192.168.1.2".parse().unwrap()
            ]
        );
        assert_eq!(
            v6.node_ips(&addrs),
            vec!["2001:db8::1".parse::<IpAddr>().unwrap()]
        );
        let only4 = NodePortAddresses::new(IpFamily::IPv6, &cidrs(&["192.168.0.0/24"]));
        assert!(only4.match_all());
        assert_eq!(only4.resolve(&addrs), None);
        assert!(!NodePortAddresses::new(IpFamily::IPv6, &[]).contains_ipv4_loopback());
        assert!(NodePortAddresses::new(IpFamily::IPv4, &[]).contains_ipv4_loopback());
        assert!(
            !NodePortAddresses::new(IpFamily::IPv4, &cidrs(&["192.168.0.0/24"]))
                .contains_ipv4_loopback()
        );
    }
}
