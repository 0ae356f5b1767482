//! Who answers an ARP request received on an interface (`arp_process`, net/ipv4/arp.c), as
//! far as it decides an outcome: a Calico pod's ARP for its gateway `169.254.1.1`, which no
//! machine holds and the host answers by proxy ARP (docs/kernel-model.md §23). nfsim sends
//! no ARP traffic: [`Netns::arp_answer`] is the lookup that decides whether the pod's
//! neighbour entry resolves, and so whether its packets leave at all.
//!
//! The kernel's order for a request for target `tip` received on `dev`:
//! 1. `ip_route_input_noref(skb, tip, sip, 0, dev)`: the route the target would take;
//! 2. a local route (`RTN_LOCAL`): the host owns `tip` and answers (`arp_ignore` 0, the
//!    default, answers for an address of any interface);
//! 3. else, only with forwarding on `dev` (`IN_DEV_FORWARD`), a unicast route answers by
//!    proxy when `arp_fwd_proxy` holds: the route leaves by another interface than `dev`
//!    and `proxy_arp` is on for `dev` (`medium_id` left at its default; the private-VLAN
//!    and `pneigh` proxy entries are not modelled);
//! 4. otherwise nobody answers.
//!
//! With `proxy_delay` 0 (Calico sets it on every `cali*`) the answer is at once, not queued
//! (`pneigh_enqueue`).

use super::{Netns, RouteDecision};
use sim_core::IfName;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

/// The gateway Calico and the AWS VPC CNI give their pods (`default via 169.254.1.1 dev
/// eth0`, with `169.254.1.1 dev eth0 scope link`), which no machine holds: the host side
/// of the pod's link answers for it by proxy ARP.
pub const LINK_LOCAL_GATEWAY: Ipv4Addr = Ipv4Addr::new(169, 254, 1, 1);

/// How the namespace answers an ARP request ([`Netns::arp_answer`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArpAnswer {
    /// The target is one of the namespace's addresses: it answers for itself.
    Local,
    /// Proxy ARP: the target's route leaves by `route_dev`, another interface than the one
    /// asked on.
    Proxy {
        /// The interface the target's route leaves by.
        route_dev: IfName,
    },
    /// Nobody answers: the route leaves by the interface asked on (`arp_fwd_proxy`'s
    /// `rt->dst.dev == dev`).
    SameInterface,
    /// Nobody answers: `proxy_arp` is off on the interface.
    ProxyArpOff,
    /// Nobody answers: the target has no route (`ip_route_input_noref` fails).
    NoRoute,
}

impl ArpAnswer {
    /// Whether the asker gets an answer.
    pub fn answered(self) -> bool {
        matches!(self, ArpAnswer::Local | ArpAnswer::Proxy { .. })
    }
}

impl fmt::Display for ArpAnswer {
    /// The decision in the kernel's words, for traces.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArpAnswer::Local => f.write_str("answered: a local address (RTN_LOCAL)"),
            ArpAnswer::Proxy { route_dev } => write!(
                f,
                "answered by proxy_arp: the route leaves by {route_dev} (arp_fwd_proxy)"
            ),
            ArpAnswer::SameInterface => f.write_str(
                "unanswered: its route leaves by the interface asked on (arp_fwd_proxy: rt->dst.dev == dev)",
            ),
            ArpAnswer::ProxyArpOff => {
                f.write_str("unanswered: proxy_arp is off on the interface asked on")
            }
            ArpAnswer::NoRoute => f.write_str("unanswered: no route to it (ip_route_input_noref)"),
        }
    }
}

impl Netns {
    /// Sets `net.ipv4.conf.<dev>.proxy_arp` (with the interface's forwarding, which nfsim's
    /// namespaces always have on).
    pub fn set_proxy_arp(&mut self, dev: IfName, on: bool) {
        if on {
            self.proxy_arp.insert(dev);
        } else {
            self.proxy_arp.remove(&dev);
        }
    }

    /// Whether `proxy_arp` is on for `dev`.
    pub fn proxy_arp(&self, dev: IfName) -> bool {
        self.proxy_arp.contains(&dev)
    }

    /// How the namespace answers an ARP request for `target` received on `dev` (see the
    /// module documentation).
    pub fn arp_answer(&self, dev: IfName, target: Ipv4Addr) -> ArpAnswer {
        match self.routes.lookup(IpAddr::V4(target)) {
            RouteDecision::Local => ArpAnswer::Local,
            RouteDecision::Unreachable => ArpAnswer::NoRoute,
            RouteDecision::Forward { dev: out, .. } if out == dev => ArpAnswer::SameInterface,
            RouteDecision::Forward { .. } if !self.proxy_arp(dev) => ArpAnswer::ProxyArpOff,
            RouteDecision::Forward { dev: out, .. } => ArpAnswer::Proxy { route_dev: out },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netns::{NetnsConfig, Prefix};

    fn ifn(s: &str) -> IfName {
        IfName::new(s).unwrap()
    }

    #[test]
    fn proxy_arp_answers_for_a_route_out_of_another_interface() {
        let mut ns = Netns::new(NetnsConfig::new("n", 1));
        let gw: Ipv4Addr = "169.254.1.1".parse().unwrap();
        ns.add_interface(ifn("eth0"), &[("192.168.0.11".parse().unwrap(), 24)])
            .unwrap();
        ns.add_interface(ifn("cali1"), &[]).unwrap();
        assert_eq!(ns.arp_answer(ifn("cali1"), gw), ArpAnswer::NoRoute);
        ns.add_route(
            Prefix::default_for(true),
            Some("192.168.0.1".parse().unwrap()),
            ifn("eth0"),
        )
        .unwrap();
        assert_eq!(ns.arp_answer(ifn("cali1"), gw), ArpAnswer::ProxyArpOff);
        ns.set_proxy_arp(ifn("cali1"), true);
        let a = ns.arp_answer(ifn("cali1"), gw);
        assert_eq!(
            a,
            ArpAnswer::Proxy {
                route_dev: ifn("eth0")
            }
        );
        assert!(a.answered());
        ns.add_route(Prefix::host(IpAddr::V4(gw)), None, ifn("cali1"))
            .unwrap();
        assert_eq!(ns.arp_answer(ifn("cali1"), gw), ArpAnswer::SameInterface);
        let own = "192.168.0.11".parse().unwrap();
        assert_eq!(ns.arp_answer(ifn("cali1"), own), ArpAnswer::Local);
    }
}
