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

use super::{DropCause, Fate, Flight, Step};
use crate::ipvs::{CtView, InVerdict, OutVerdict, PacketView, Protocol};
use crate::types::Hook;
use sim_conntrack::{Expiry, Tuple};
use sim_core::{Packet, SimTime, L4};

/// What IPVS reads of a TCP, UDP or SCTP packet; `None` for others (ICMP errors about IPVS
/// connections, `ip_vs_in_icmp`, are not modelled: they pass untranslated).
fn view(p: &Packet) -> Option<PacketView> {
    let (protocol, sport, dport, tcp_flags) = match p.l4 {
        L4::Tcp {
            sport,
            dport,
            flags,
            ..
        } => (Protocol::Tcp, sport, dport, Some(flags)),
        L4::Udp { sport, dport } => (Protocol::Udp, sport, dport, None),
        L4::Sctp { sport, dport } => (Protocol::Sctp, sport, dport, None),
        _ => return None,
    };
    Some(PacketView {
        protocol,
        saddr: p.src,
        sport,
        daddr: p.dst,
        dport,
        tcp_flags,
        len: p.len,
    })
}

impl Netns {
    /// Expires the IPVS connections due at `now` and kills the conntrack entries of those
    /// that used conntrack (`ip_vs_conn_drop_conntrack`).
    pub fn ipvs_expire(&mut self, now: SimTime) {
        if self.ipvs.poll_timeout().is_none_or(|t| t > now) {
            return;
        }
        for k in self.ipvs.handle_timeout(now) {
            let t = Tuple {
                src: k.caddr,
                dst: k.vaddr,
                sport: k.cport,
                dport: k.vport,
                proto: k.proto,
            };
            if let Some((e, sim_conntrack::Dir::Original)) = self.conntrack.find(now, &t) {
                self.conntrack.delete_entry(now, e.id);
            }
        }
    }

    /// What IPVS sees of the packet's conntrack entry.
    fn ipvs_ct(&self, f: &Flight) -> CtView {
        let confirmed = f
            .handle
            .and_then(|h| self.conntrack.get(h.id))
            .is_some_and(|e| matches!(e.expiry, Expiry::At(_)));
        CtView {
            tracked: f.handle.is_some() && !f.untracked,
            confirmed,
        }
    }

    /// The IPVS hooks of LOCAL_IN (`ip_vs_out` at `NF_IP_PRI_NAT_SRC - 2`, then `ip_vs_in`
    /// at `NF_IP_PRI_NAT_SRC - 1`) or LOCAL_OUT (`NF_IP_PRI_NAT_DST + 1` and `+ 2`). `Some`
    /// is the packet's fate when IPVS took it (dropped, or transmitted to a real server).
    pub(super) fn ipvs_local(&mut self, now: SimTime, f: &mut Flight, hook: Hook) -> Option<Fate> {
        if f.ipvs_property || !self.ipvs.is_active() {
            return None;
        }
        let v = view(&f.pkt)?;
        if self.ipvs_reply(now, f, &v) {
            return None;
        }
        let ct = self.ipvs_ct(f);
        let d = self.ipvs.ip_vs_in(now, &v, ct);
        if let Some(n) = d.note {
            Self::step(f, |_| Step::Ipvs(format!("ip_vs_in: {n}")));
        }
        match d.verdict {
            InVerdict::Accept => None,
            InVerdict::Drop => Some(self.dropped(
                now,
                f,
                Fate::Dropped(DropCause::Ipvs("ip_vs_in dropped it".into())),
            )),
            InVerdict::Unreachable => {
                // ip_vs_leave: icmp_send(ICMP_DEST_UNREACH, ICMP_PORT_UNREACH), from the
                // virtual address (local, so __icmp_send keeps it as the source).
                if !crate::eval::is_icmp_error(&f.pkt) {
                    let (t, c) = sim_core::packet::icmp::port_unreach(!f.pkt.is_ipv4());
                    let answer = Packet::icmp_error(f.pkt.dst, &f.pkt, t, c);
                    self.send_error(now, f, answer);
                }
                Some(self.dropped(
                    now,
                    f,
                    Fate::Dropped(DropCause::Ipvs(
                        "no real server available: ICMP port unreachable sent".into(),
                    )),
                ))
            }
            InVerdict::Nat {
                daddr,
                dport,
                nfct,
                fwd: crate::ipvs::FwdMethod::Masq,
                ..
            } => self.ipvs_nat_xmit(now, f, daddr, dport, nfct, hook),
            InVerdict::Nat { fwd, .. } => Some(self.dropped(
                now,
                f,
                Fate::Dropped(DropCause::Ipvs(format!(
                    "the {} forwarding method is not modelled (only masquerading, which kube-proxy uses)",
                    fwd.name()
                ))),
            )),
        }
    }

    /// `ip_vs_out` at FORWARD (priority 100): replies of real servers to clients the node
    /// routes (pods).
    pub(super) fn ipvs_forward(&mut self, now: SimTime, f: &mut Flight) {
        if f.ipvs_property || !self.ipvs.is_active() {
            return;
        }
        if let Some(v) = view(&f.pkt) {
            self.ipvs_reply(now, f, &v);
        }
    }

    /// `ip_vs_out` / `handle_response`: a reply's source rewritten to the virtual address;
    /// returns whether the packet was one.
    fn ipvs_reply(&mut self, now: SimTime, f: &mut Flight, v: &PacketView) -> bool {
        let d = self.ipvs.ip_vs_out(now, v);
        let OutVerdict::Snat {
            conn,
            vaddr,
            vport,
            nfct,
        } = d.verdict
        else {
            return false;
        };
        if let Some(n) = d.note {
            Self::step(f, |_| Step::Ipvs(format!("ip_vs_out: {n}")));
        }
        f.pkt.src = vaddr;
        f.pkt.set_sport(vport);
        f.ipvs_property = true;
        if nfct {
            // ip_vs_update_conntrack(skb, cp, 0): only an unconfirmed entry in the original
            // direction, which a reply never is.
            let _ = conn;
        } else {
            self.ipvs_notrack(now, f);
        }
        true
    }

    /// `ip_vs_notrack`: the packet leaves its (unconfirmed, then never confirmed) entry and
    /// goes on untracked.
    fn ipvs_notrack(&mut self, now: SimTime, f: &mut Flight) {
        if let Some(h) = f.handle.take() {
            if self
                .conntrack
                .get(h.id)
                .is_some_and(|e| !matches!(e.expiry, Expiry::At(_)))
            {
                self.conntrack.discard(now, h);
            }
        }
        f.untracked = true;
        f.view = None;
    }

    /// `ip_vs_nat_xmit` + `ip_vs_nat_send_or_cont`: the destination rewritten to the real
    /// server, the conntrack entry's reply tuple altered (`ip_vs_update_conntrack`, with
    /// `net.ipv4.vs.conntrack=1`) or the packet made untracked; a real server on this host
    /// lets the packet go on (`NF_ACCEPT`), any other sends it through LOCAL_OUT again
    /// (`NF_HOOK(NF_INET_LOCAL_OUT, …, dst_output)`: OUTPUT's tables, the route to the
    /// real server, POSTROUTING).
    fn ipvs_nat_xmit(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        daddr: std::net::IpAddr,
        dport: u16,
        nfct: bool,
        hook: Hook,
    ) -> Option<Fate> {
        let before = f.pkt;
        f.pkt.dst = daddr;
        f.pkt.set_dport(dport);
        f.ipvs_property = true;
        if f.trace.is_some() {
            let after = f.pkt;
            Self::step(f, |_| Step::Rewrite {
                hook,
                before: before.to_string(),
                after: after.to_string(),
            });
        }
        if nfct {
            if let Some(h) = f.handle {
                let unconfirmed = self
                    .conntrack
                    .get(h.id)
                    .filter(|e| !matches!(e.expiry, Expiry::At(_)));
                if let (Some(e), sim_conntrack::Dir::Original) = (unconfirmed, h.dir()) {
                    let mut reply = e.reply;
                    reply.src = daddr;
                    reply.sport = dport;
                    if self.conntrack.alter_reply(h.id, &reply).is_ok() {
                        f.view = None;
                        Self::step(f, |_| {
                            Step::Ipvs(format!(
                                "ip_vs_update_conntrack: reply tuple now {}",
                                super::tuple_text(&reply)
                            ))
                        });
                    }
                }
            }
        } else {
            self.ipvs_notrack(now, f);
        }
        if self.routes.is_local(daddr) {
            return None;
        }
        let decision = self.routes.lookup(daddr);
        Some(self.output_hooks(now, f, decision))
    }
}
