//! The node a packet is explained on.
//!
//! Built from `--node-addr A [--node-prefix N] [--pod-cidr C] [--seed S]`:
//!
//! - `eth0` holds `A/N` (default `172.18.0.2/24`, a kind node's address), with its connected
//!   route, and the default route goes via the first host address of that subnet (the second
//!   when the node itself has the first), as on a node behind a router.
//! - With a pod CIDR `C`, the node has a bridge `cni0` holding the first host address of `C`
//!   with `C`'s prefix length, as the `bridge` CNI plugin sets it up: `C` is directly connected
//!   through `cni0`, so traffic to any pod in `C` is forwarded out of `cni0`, and traffic from a
//!   pod in `C` is received on `cni0` (a routed packet from a bridged veth is seen by netfilter
//!   on the bridge). Without `--pod-cidr` there is no pod side: everything arrives on `eth0`.
//! - Where a packet enters ([`NodeSpec::ingress_for`]): `--local` sends it from a process of the
//!   node (OUTPUT); otherwise a source inside the pod CIDR arrives on `cni0`, any other source
//!   on `eth0` (PREROUTING).
//!
//! - `--interface NAME=uplink` / `--interface NAME=pods` renames `eth0` / `cni0` (a node whose
//!   uplink is `ens5` and whose bridge is `cbr0`), so rules naming them match.
//! - A real node's own interfaces and routes (`--interfaces FILE`: `ip -j addr`, `--routes
//!   FILE`: `ip -j route`; [`super::interfaces`]) replace all of the above. A packet then
//!   enters on the interface the node routes its source to (the longest prefix among the
//!   connected subnets and the routes: where its replies would go, as `rp_filter` checks),
//!   or on the interface `--ingress` names.
//!
//! The ruleset is loaded as `iptables-restore --noflush -c` into the empty namespace, the way
//! kube-proxy loads its payloads (`--noflush --counters`): a real node's `iptables-save -c`
//! keeps its `[packets:bytes]`. Text in nft's command syntax (`add table ip kube-proxy …`,
//! what kube-proxy's nftables mode gives `nft -f`) is applied as `nft -f` instead
//! ([`is_nft_text`]).

use super::interfaces::RealInterfaces;
use super::ExplainError;
use sim_core::{IfName, Packet};
use sim_netfilter::netns::{Ingress, Netns, NetnsConfig, Prefix};
pub use sim_netfilter::rule_ifnames::{is_nft_text, rule_interface_warnings};
use std::net::{IpAddr, Ipv4Addr};

/// The node's uplink.
pub const ETH0: &str = "eth0";
/// The node's pod bridge.
pub const CNI0: &str = "cni0";
/// `--node-addr` when not given: a kind node's address.
pub const DEFAULT_NODE_ADDR: Ipv4Addr = Ipv4Addr::new(172, 18, 0, 2);
/// `--node-prefix` when not given.
pub const DEFAULT_NODE_PREFIX: u8 = 24;

/// The node: its address and subnet, its pod CIDR, and the seed of its random streams.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    /// The namespace's name (in random-stream labels).
    pub name: String,
    /// `eth0`'s address.
    pub addr: Ipv4Addr,
    /// `eth0`'s prefix length.
    pub prefix_len: u8,
    /// The pod CIDR behind `cni0`, if any.
    pub pod_cidr: Option<Prefix>,
    /// The seed of the namespace's random streams (statistic draws, NAT port offsets).
    pub seed: u64,
    /// The uplink's name (`eth0` unless `--interface NAME=uplink`).
    pub uplink: String,
    /// The pod bridge's name (`cni0` unless `--interface NAME=pods`).
    pub pods: String,
    /// A real node's interfaces and routes (`--interfaces`, `--routes`): when given, the node
    /// has exactly these, and `addr`, `prefix_len`, `pod_cidr` are not used.
    pub real: Option<RealInterfaces>,
}

fn ifname(s: &str) -> IfName {
    IfName::new(s).unwrap_or_else(|_| unreachable!("{s:?} is a valid interface name"))
}

fn v4(p: &Prefix) -> Ipv4Addr {
    match p.addr() {
        IpAddr::V4(a) => a,
        IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
    }
}

impl NodeSpec {
    /// A node from the flags' text: `addr` (IPv4), `prefix_len` (8–30), `pod_cidr`
    /// (`10.244.0.0/16`, prefix 8–30, not overlapping the node's subnet).
    pub fn parse(
        addr: &str,
        prefix_len: u8,
        pod_cidr: Option<&str>,
        seed: u64,
    ) -> Result<NodeSpec, ExplainError> {
        let addr: Ipv4Addr = addr.parse().map_err(|_| ExplainError::BadFlag {
            flag: "--node-addr",
            value: addr.to_string(),
            expected: "an IPv4 address such as 172.18.0.2 (iptables rules are IPv4)".into(),
        })?;
        if !(8..=30).contains(&prefix_len) {
            return Err(ExplainError::BadFlag {
                flag: "--node-prefix",
                value: prefix_len.to_string(),
                expected: "a prefix length from 8 to 30 (the subnet needs room for a gateway)"
                    .into(),
            });
        }
        let subnet = Prefix::new(IpAddr::V4(addr), prefix_len)
            .unwrap_or_else(|_| unreachable!("prefix length checked"));
        if IpAddr::V4(addr) == subnet.addr() || addr == broadcast(&subnet) {
            return Err(ExplainError::BadFlag {
                flag: "--node-addr",
                value: format!("{addr}/{prefix_len}"),
                expected: "a host address, not the subnet's network or broadcast address".into(),
            });
        }
        let pod_cidr = match pod_cidr {
            None => None,
            Some(text) => {
                let bad = |why: &str| ExplainError::BadFlag {
                    flag: "--pod-cidr",
                    value: text.to_string(),
                    expected: why.to_string(),
                };
                if !text.contains('/') {
                    return Err(bad("an IPv4 prefix such as 10.244.0.0/16"));
                }
                let p: Prefix = text
                    .parse()
                    .map_err(|_| bad("an IPv4 prefix such as 10.244.0.0/16"))?;
                if !p.addr().is_ipv4() {
                    return Err(bad("an IPv4 prefix (iptables rules are IPv4)"));
                }
                if !(8..=30).contains(&p.prefix_len()) {
                    return Err(bad("a prefix length from 8 to 30"));
                }
                if p.contains(subnet.addr()) || subnet.contains(p.addr()) {
                    return Err(bad(&format!(
                        "a range that does not overlap the node's subnet {subnet}"
                    )));
                }
                Some(p)
            }
        };
        Ok(NodeSpec {
            name: "node".to_string(),
            addr,
            prefix_len,
            pod_cidr,
            seed,
            uplink: ETH0.to_string(),
            pods: CNI0.to_string(),
            real: None,
        })
    }

    /// The node with a real node's interfaces and routes (`--interfaces`, `--routes`).
    pub fn with_real(self, real: RealInterfaces) -> NodeSpec {
        NodeSpec {
            real: Some(real),
            ..self
        }
    }

    /// Renames an interface by its role (`--interface NAME=ROLE`): `uplink` (`eth0`) or
    /// `pods` (`cni0`).
    pub fn rename(mut self, name: &str, role: &str) -> Result<NodeSpec, ExplainError> {
        let bad = |expected: String| ExplainError::BadFlag {
            flag: "--interface",
            value: format!("{name}={role}"),
            expected,
        };
        IfName::new(name).map_err(|e| bad(format!("an interface name: {e}")))?;
        if name == "lo" {
            return Err(bad("a name other than lo".into()));
        }
        match role {
            "uplink" if name != self.pods => self.uplink = name.to_string(),
            "pods" if name != self.uplink => self.pods = name.to_string(),
            "uplink" | "pods" => {
                return Err(bad(
                    "one name per role: the uplink and the pods' bridge are two interfaces"
                        .into(),
                ))
            }
            _ => {
                return Err(bad(format!(
                    "NAME=uplink (the interface called {ETH0} by default: the network) or NAME=pods (called {CNI0}: the pods' bridge)"
                )))
            }
        }
        Ok(self)
    }

    /// The interface this node routes `a` to (the longest prefix among its connected subnets
    /// and routes), for a real node (`--interfaces`).
    fn real_route_dev(&self, a: IpAddr) -> Option<&str> {
        let real = self.real.as_ref()?;
        let connected = real.interfaces.iter().flat_map(|i| {
            i.addrs.iter().filter_map(move |&(addr, l)| {
                Prefix::new(addr, l).ok().map(|p| (p, i.name.as_str()))
            })
        });
        let routed = real.routes.iter().map(|r| (r.dst, r.dev.as_str()));
        connected
            .chain(routed)
            .filter(|(p, _)| p.addr().is_ipv4() == a.is_ipv4() && p.contains(a))
            .max_by_key(|(p, _)| p.prefix_len())
            .map(|(_, d)| d)
    }

    /// The default gateway: the subnet's first host address, or its second when that is the
    /// node's own.
    pub fn gateway(&self) -> Ipv4Addr {
        let net = u32::from(self.addr) & (u32::MAX << (32 - u32::from(self.prefix_len)));
        let first = Ipv4Addr::from(net + 1);
        if first == self.addr {
            Ipv4Addr::from(net + 2)
        } else {
            first
        }
    }

    /// `cni0`'s address: the pod CIDR's first host address.
    pub fn bridge_addr(&self) -> Option<Ipv4Addr> {
        self.pod_cidr
            .as_ref()
            .map(|p| Ipv4Addr::from(u32::from(v4(p)) + 1))
    }

    /// The namespace with interfaces and routes, and `rules` (from `file`) restored into it.
    pub fn build(&self, rules: &str, file: &str) -> Result<Netns, ExplainError> {
        self.build_with_ipsets(rules, file, None)
    }

    /// [`NodeSpec::build`] with the ipsets of `ipsets` (`(file, text)`: `ipset save` or
    /// `ipset restore` input) restored first, as a node has its sets before kube-proxy's
    /// `-m set` rules can load.
    pub fn build_with_ipsets(
        &self,
        rules: &str,
        file: &str,
        ipsets: Option<(&str, &str)>,
    ) -> Result<Netns, ExplainError> {
        let mut ns = Netns::new(NetnsConfig::new(&self.name, self.seed));
        if let Some((sets_file, text)) = ipsets {
            ns.ipset_restore(text)
                .map_err(|error| ExplainError::Ipset {
                    file: sets_file.to_string(),
                    error,
                })?;
        }
        let err = |e| ExplainError::netns(file, e);
        if let Some(real) = &self.real {
            for i in &real.interfaces {
                ns.add_interface(ifname(&i.name), &i.addrs)
                    .map_err(|e| ExplainError::netns(&real.file, e))?;
            }
            let routes_file = real.routes_file.as_deref().unwrap_or(&real.file);
            for r in &real.routes {
                ns.add_route(r.dst, r.gateway, ifname(&r.dev))
                    .map_err(|e| ExplainError::netns(routes_file, e))?;
            }
        } else {
            ns.add_interface(
                ifname(&self.uplink),
                &[(IpAddr::V4(self.addr), self.prefix_len)],
            )
            .map_err(err)?;
            if let (Some(p), Some(a)) = (self.pod_cidr, self.bridge_addr()) {
                ns.add_interface(ifname(&self.pods), &[(IpAddr::V4(a), p.prefix_len())])
                    .map_err(err)?;
            }
            ns.add_route(
                Prefix::default_for(true),
                Some(IpAddr::V4(self.gateway())),
                ifname(&self.uplink),
            )
            .map_err(err)?;
        }
        if is_nft_text(rules) {
            ns.nft_apply(file, rules, sim_core::SimTime::ZERO)?;
        } else {
            ns.restore_with_counters(rules, true).map_err(err)?;
        }
        Ok(ns)
    }

    /// Where `pkt` enters: OUTPUT with `local`; on a real node (`--interfaces`), the
    /// interface it routes the source to; otherwise `cni0` for a source in the pod CIDR,
    /// `eth0` for any other; with why, for people.
    pub fn ingress_for(&self, pkt: &Packet, local: bool) -> (Ingress, String) {
        if local {
            return (
                Ingress::Local,
                "sent by a process of the node (--local): OUTPUT".into(),
            );
        }
        let (dev, why) = self.arrives_on(pkt.src);
        (Ingress::Interface(dev), why)
    }

    /// The interface a packet from `src` arrives on (see [`NodeSpec::ingress_for`]), and why.
    pub fn arrives_on(&self, src: IpAddr) -> (IfName, String) {
        if let Some(real) = &self.real {
            return match self.real_route_dev(src) {
                Some(dev) => (
                    ifname(dev),
                    format!("received on {dev}: the node routes the source {src} there"),
                ),
                None => {
                    let first = real
                        .interfaces
                        .iter()
                        .find(|i| !i.addrs.is_empty())
                        .map_or("lo", |i| i.name.as_str());
                    (
                        ifname(first),
                        format!(
                            "received on {first}: the node has no route to the source {src} (no default route in {}), so its first interface with an address is assumed",
                            real.routes_file.as_deref().unwrap_or("--routes, which was not given")
                        ),
                    )
                }
            };
        }
        let (uplink, pods) = (self.uplink.as_str(), self.pods.as_str());
        match self.pod_cidr {
            Some(p) if p.contains(src) => (
                ifname(pods),
                format!("received on {pods}: source {src} is in the pod CIDR {p}"),
            ),
            Some(p) => (
                ifname(uplink),
                format!("received on {uplink}: source {src} is outside the pod CIDR {p}"),
            ),
            None => (
                ifname(uplink),
                format!("received on {uplink} (no --pod-cidr, so no pod side)"),
            ),
        }
    }

    /// The node's interface called `name`, if it has one (`lo` included).
    pub fn has_interface(&self, name: &str) -> bool {
        name == "lo"
            || match &self.real {
                Some(r) => r.interfaces.iter().any(|i| i.name == name),
                None => name == self.uplink || (self.pod_cidr.is_some() && name == self.pods),
            }
    }

    /// The interfaces and routes, one line each, as `ip addr`/`ip route` would say them.
    pub fn describe(&self, ns: &Netns) -> (Vec<String>, Vec<String>) {
        describe(ns)
    }
}

/// A namespace's interfaces and routes, one line each, as `ip addr`/`ip route` would say them.
pub fn describe(ns: &Netns) -> (Vec<String>, Vec<String>) {
    {
        let ifaces = ns
            .routing()
            .interfaces()
            .iter()
            .map(|i| {
                let addrs: Vec<String> = i.addrs.iter().map(|(a, l)| format!("{a}/{l}")).collect();
                // A bridge port holds no address: its name alone.
                format!("{} {}", i.name, addrs.join(" "))
                    .trim_end()
                    .to_string()
            })
            .collect();
        let routes = ns
            .routing()
            .routes()
            .iter()
            .map(|r| r.to_string())
            .collect();
        (ifaces, routes)
    }
}

fn broadcast(p: &Prefix) -> Ipv4Addr {
    let host_bits = 32 - u32::from(p.prefix_len());
    Ipv4Addr::from(u32::from(v4(p)) | ((1u64 << host_bits) - 1) as u32)
}

/// One warning per rule of `rules` (read from `file`) that names an interface `ns` does not
/// have (`-i`/`-o` of iptables text, `iifname`/`oifname` of nft text; a `+` or `*` suffix
/// matches by prefix, as the kernel's `ifname_compare` and nft's wildcard do): such a rule
/// never matches on this node (or, negated, always does), where on the real node it may.
/// `FILE:LINE: rule names interface X, which the node lacks (it has lo, eth0, …): RULE`.
pub fn interface_warnings(rules: &str, file: &str, ns: &Netns) -> Vec<String> {
    let have: Vec<String> = ns
        .routing()
        .interfaces()
        .iter()
        .map(|i| i.name.to_string())
        .collect();
    rule_interface_warnings(rules, file, &have, "this node")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_checked_and_the_gateway_avoids_the_node() {
        let n = NodeSpec::parse("172.18.0.2", 24, Some("10.244.0.0/16"), 1).unwrap();
        assert_eq!(n.gateway(), Ipv4Addr::new(172, 18, 0, 1));
        assert_eq!(n.bridge_addr(), Some(Ipv4Addr::new(10, 244, 0, 1)));
        let n = NodeSpec::parse("192.168.1.1", 24, None, 1).unwrap();
        assert_eq!(n.gateway(), Ipv4Addr::new(192, 168, 1, 2));
        for (a, l, c) in [
            ("fe80::1", 24, None),
            ("172.18.0.2", 31, None),
            ("172.18.0.0", 24, None),
            ("172.18.0.2", 24, Some("10.244.0.0")),
            ("172.18.0.2", 24, Some("172.18.0.0/16")),
            ("172.18.0.2", 24, Some("fd00::/64")),
        ] {
            assert!(NodeSpec::parse(a, l, c, 1).is_err(), "{a}/{l} {c:?}");
        }
    }
}
