//! The namespace's IPVS ([`crate::ipvs`]): its state, kube-proxy's `kube-ipvs0` device,
//! and the hooks that hand packets to it.
//!
//! `kube-ipvs0` is a dummy interface (`ip link add kube-ipvs0 type dummy`) that kube-proxy
//! gives every Service IP as a /32 (`ip addr add 10.96.0.1/32 dev kube-ipvs0`), so that the
//! kernel's local table has `local 10.96.0.1 dev kube-ipvs0` and a packet to a Service IP is
//! delivered locally, where IPVS's LOCAL_IN hook takes it. kube-proxy leaves the device down;
//! the local route exists anyway, because `fib_add_ifaddr` adds the `RTN_LOCAL` route of an
//! address before it looks at whether the device is up. This machine's kernel has no dummy
//! links, so the device is modelled from that source (a veth left down behaves the same
//! for its local routes, which was checked: docs/kernel-model.md, IPVS).

use std::net::IpAddr;

use super::{Netns, NetnsError};
use crate::ipvs::Ipvs;
use sim_core::IfName;

/// The device kube-proxy's IPVS mode binds Service IPs to (`DefaultDummyDevice` in
/// `pkg/proxy/ipvs/proxier.go`).
pub const KUBE_IPVS0: &str = "kube-ipvs0";

impl Netns {
    /// The namespace's IPVS state.
    pub fn ipvs(&self) -> &Ipvs {
        &self.ipvs
    }

    /// The namespace's IPVS state, to program it (kube-proxy's netlink calls).
    pub fn ipvs_mut(&mut self) -> &mut Ipvs {
        &mut self.ipvs
    }

    /// kube-proxy's `EnsureDummyDevice`: creates the dummy interface `name` without
    /// addresses if it is not there; returns whether it already existed.
    pub fn ensure_dummy_device(&mut self, name: IfName) -> Result<bool, NetnsError> {
        if self.routes.interfaces().iter().any(|i| i.name == name) {
            return Ok(true);
        }
        self.routes.add_interface(name, &[])?;
        Ok(false)
    }

    /// kube-proxy's `EnsureAddressBind`: `addr`/32 (or /128) on `dev`, which makes it a
    /// local address; returns whether it was bound already.
    pub fn ensure_address_bind(&mut self, addr: IpAddr, dev: IfName) -> Result<bool, NetnsError> {
        let has = self
            .routes
            .interfaces()
            .iter()
            .find(|i| i.name == dev)
            .ok_or(super::RouteError::NoSuchInterface(dev))?
            .addrs
            .iter()
            .any(|&(a, _)| a == addr);
        if has {
            return Ok(true);
        }
        let len = if addr.is_ipv4() { 32 } else { 128 };
        self.routes.add_address(dev, addr, len)?;
        Ok(false)
    }

    /// kube-proxy's `UnbindAddress`: `ip addr del addr dev dev`; returns whether it was
    /// bound.
    pub fn unbind_address(&mut self, addr: IpAddr, dev: IfName) -> Result<bool, NetnsError> {
        Ok(self.routes.remove_address(dev, addr)?)
    }

    /// kube-proxy's `ListBindAddress`: the addresses on `dev`, in the order added.
    pub fn bound_addresses(&self, dev: IfName) -> Vec<IpAddr> {
        self.routes
            .interfaces()
            .iter()
            .find(|i| i.name == dev)
            .map(|i| i.addrs.iter().map(|&(a, _)| a).collect())
            .unwrap_or_default()
    }
}
