//! A VXLAN device in the namespace (`flannel.1` of flannel's `vxlan` backend): its forwarding
//! database and neighbour entries, encapsulation of what the IP stack routes out of it, and
//! decapsulation of what its UDP socket receives (docs/kernel-model.md, "VXLAN").
//!
//! The kernel's path, which the functions here follow (drivers/net/vxlan/vxlan_core.c,
//! net/ipv4/udp_tunnel_core.c, net/ipv4/ip_tunnel_core.c; Linux 6.18):
//! - A packet routed out of the device (`10.244.1.0/24 via 10.244.1.0 dev flannel.1 onlink`)
//!   is given the next hop's MAC from the device's neighbour table (flannel writes a
//!   permanent entry per remote node; without one the kernel's ARP request has no FDB entry
//!   to go to, and the packet is lost), then `vxlan_xmit` looks the MAC up in the device's
//!   FDB (`vxlan_find_mac`): the entry names the remote VTEP's IP. No entry (flannel runs
//!   `nolearning` and writes no all-zeros default): dropped (`tx_dropped`).
//! - `vxlan_xmit_one` builds the outer packet: UDP from the device's `local` address to the
//!   remote's, destination port the device's `dstport` (Linux's default 8472,
//!   `vxlan_port`), source port `udp_flow_src_port` (the inner flow's hash mapped into the
//!   range; the device's `srcport 0 0` means `ip_local_port_range`), TTL `ttl auto`
//!   (`ip4_dst_hoplimit`: 64), TOS 0 (the inner ECN bits are copied, `ip_tunnel_ecn_encap`;
//!   nfsim carries no TOS), DF clear (`df` is `VXLAN_DF_UNSET`), 50 bytes longer than the
//!   inner IP packet (inner Ethernet 14, VXLAN 8, UDP 8, IP 20). `udp_tunnel_xmit_skb` ->
//!   `iptunnel_xmit` scrubs the skb (`skb_scrub_packet`: the conntrack reference goes, the
//!   mark stays, the device is in the same namespace) and sends it with `ip_local_out`:
//!   the namespace's OUTPUT and POSTROUTING hooks, where conntrack tracks it as any UDP flow.
//! - On the remote node the outer packet passes PREROUTING and INPUT to the VXLAN socket
//!   (bound to the port on every address); its `encap_rcv`, `vxlan_rcv`, finds the device by
//!   VNI (`vxlan_vs_find_vni`; none: dropped), pulls the headers (`__iptunnel_pull_header`,
//!   scrubbing again, mark kept), and `eth_type_trans` on the device: an inner frame for
//!   another MAC than the device's is `PACKET_OTHERHOST`, which `ip_rcv` drops. The inner
//!   packet is then received on the device (`gro_cells_receive`): PREROUTING again, as a new
//!   packet of its own flow.
//! - A packet to forward out of the device that is bigger than its MTU (1450) and has DF
//!   set meets `ip_forward`'s `ip_exceeds_mtu`: `icmp_send(ICMP_DEST_UNREACH,
//!   ICMP_FRAG_NEEDED, mtu)` and dropped, before the FORWARD hook.
//!
//! nfsim's packets carry no DF bit, no TOS and no fragments: a packet over the device's MTU
//! is taken to have DF set (what Linux's TCP and, with the default `IP_PMTUDISC_WANT`, UDP
//! sockets send); nfsim never fragments. The ICMP error's next-hop MTU field is not carried
//! ([`Netns::vxlan_mtu`] gives the value).

use super::*;
use std::collections::BTreeMap;

/// The UDP destination port of a VXLAN device created without `dstport`: Linux's
/// `vxlan_port` module parameter (drivers/net/vxlan/vxlan_core.c, 8472), flannel's default
/// (it passes no port). The IANA port is 4789.
pub const VXLAN_DEFAULT_DST_PORT: u16 = 8472;

/// What VXLAN adds to an IPv4 inner packet (`VXLAN_HEADROOM`, include/net/vxlan.h): outer
/// IP 20 + UDP 8 + VXLAN 8 + inner Ethernet 14. flannel sets `flannel.1`'s MTU to the
/// external interface's less this (device.go: `MTU: devAttrs.MTU - 50`).
pub const VXLAN_HEADROOM: u16 = 50;

/// `net.ipv4.ip_local_port_range`'s default (32768 60999), which `udp_flow_src_port` uses
/// when the device's `srcport` range is `0 0` (include/net/udp.h). Its mapping
/// `((hash * (max - min)) >> 32) + min` never reaches `max`: outer source ports are
/// 32768..=60998.
pub const VXLAN_SRC_PORT_RANGE: (u16, u16) = (32768, 60999);

/// The outer TTL of a device with `ttl auto` (`ip4_dst_hoplimit`: `net.ipv4.ip_default_ttl`,
/// 64).
pub const VXLAN_OUTER_TTL: u8 = 64;

/// A VXLAN device's settings, as `ip -d link show` prints them (`vxlan id 1 local
/// 172.18.0.2 dev eth0 srcport 0 0 dstport 8472 nolearning ttl auto`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VxlanConfig {
    /// The device (`flannel.1`).
    pub dev: IfName,
    /// The VXLAN network identifier (`id`; flannel's `VNI`, default 1).
    pub vni: u32,
    /// The outer source address (`local`: the node's address).
    pub local: Ipv4Addr,
    /// The outer UDP destination port, and the port the device's socket listens on.
    pub dst_port: u16,
    /// The device's MTU (flannel: the external interface's less [`VXLAN_HEADROOM`]).
    pub mtu: u16,
    /// The device's MAC.
    pub mac: Mac,
}

/// One VXLAN device and its tables.
#[derive(Clone, Debug)]
pub(super) struct VxlanDev {
    cfg: VxlanConfig,
    /// The neighbour table on the device: next hop -> remote device's MAC.
    neigh: BTreeMap<IpAddr, Mac>,
    /// The device's forwarding database: remote MAC -> remote VTEP address.
    fdb: BTreeMap<Mac, Ipv4Addr>,
    /// `udp_flow_src_port`'s hash key: the kernel's `hashrnd` is random per boot
    /// (`net_get_random_once`); nfsim derives it from the run's seed and the namespace.
    hashrnd: u64,
}

/// The VXLAN devices of a namespace and the encapsulated packets in flight.
#[derive(Clone, Debug, Default)]
pub(super) struct Vxlans {
    list: Vec<VxlanDev>,
    /// The encapsulated packets the last run transmitted, until the driver takes them.
    sent: Vec<VxlanWire>,
    /// The encapsulated packet being received ([`Netns::process_vxlan_into`]).
    rx: Option<VxlanWire>,
}

/// An encapsulated packet as it is on the wire: the outer UDP packet and what it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VxlanWire {
    /// The outer IPv4/UDP packet, as it left POSTROUTING.
    pub outer: Packet,
    /// The inner packet, as the sending device saw it.
    pub inner: Packet,
    /// The VNI in the VXLAN header.
    pub vni: u32,
    /// The inner frame's source MAC (the sending device's).
    pub inner_src_mac: Mac,
    /// The inner frame's destination MAC (the neighbour entry of the next hop).
    pub inner_dst_mac: Mac,
}

/// `udp_flow_src_port` for `inner`: a hash of its flow, the same for both directions
/// (`__flow_hash_consistentify` orders the addresses and ports), `hash ^= hash << 16`, then
/// mapped into [`VXLAN_SRC_PORT_RANGE`]. The kernel's hash is jhash with a random key; nfsim's
/// is a fixed mix keyed by `hashrnd` (from the seed), so ports differ from a real node's but
/// are stable per flow, as there.
pub fn vxlan_src_port(hashrnd: u64, inner: &Packet) -> u16 {
    let ports = match inner.l4 {
        sim_core::L4::Icmp {
            body: sim_core::IcmpBody::Query { id, .. },
            ..
        } => (id, id),
        _ => (inner.sport().unwrap_or(0), inner.dport().unwrap_or(0)),
    };
    let a = (inner.src, ports.0);
    let b = (inner.dst, ports.1);
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    let mut h = hashrnd ^ u64::from(inner.protocol());
    let mut mix = |v: u64| {
        h = (h ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 29;
    };
    for (addr, port) in [lo, hi] {
        match addr {
            IpAddr::V4(v) => mix(u64::from(u32::from(v))),
            IpAddr::V6(v) => {
                let x = u128::from(v);
                mix(x as u64);
                mix((x >> 64) as u64);
            }
        }
        mix(u64::from(port));
    }
    let mut hash = (h >> 32) as u32;
    hash ^= hash << 16;
    let (min, max) = VXLAN_SRC_PORT_RANGE;
    let span = u64::from(max - min);
    ((u64::from(hash) * span) >> 32) as u16 + min
}

impl Netns {
    /// Adds a VXLAN device with `addrs` (`ip link add flannel.1 type vxlan id 1 local … dev
    /// eth0 nolearning`, then flannel's `<pod CIDR>.0/32`).
    pub fn add_vxlan(
        &mut self,
        cfg: VxlanConfig,
        addrs: &[(IpAddr, u8)],
    ) -> Result<(), NetnsError> {
        self.routes.add_interface(cfg.dev, addrs)?;
        let hashrnd =
            SimRng::derive(self.seed, &format!("{}/{}/hashrnd", self.name, cfg.dev)).next_u64();
        self.vxlans.list.push(VxlanDev {
            cfg,
            neigh: BTreeMap::new(),
            fdb: BTreeMap::new(),
            hashrnd,
        });
        Ok(())
    }

    /// The VXLAN devices' settings, in the order they were added.
    pub fn vxlan_devices(&self) -> Vec<VxlanConfig> {
        self.vxlans.list.iter().map(|d| d.cfg).collect()
    }

    /// The MTU of `dev` if it is a VXLAN device (the only devices nfsim gives an MTU).
    pub fn vxlan_mtu(&self, dev: IfName) -> Option<u16> {
        self.vxlan_dev(dev).map(|d| d.cfg.mtu)
    }

    /// The hash key of `dev`'s outer source ports ([`vxlan_src_port`]).
    pub fn vxlan_hashrnd(&self, dev: IfName) -> Option<u64> {
        self.vxlan_dev(dev).map(|d| d.hashrnd)
    }

    fn vxlan_dev(&self, dev: IfName) -> Option<&VxlanDev> {
        self.vxlans.list.iter().find(|d| d.cfg.dev == dev)
    }

    /// `ip neigh replace IP lladdr MAC dev DEV nud permanent` on a VXLAN device (flannel's
    /// `AddARP`). `false` when `dev` is no VXLAN device.
    pub fn vxlan_neigh_set(&mut self, dev: IfName, ip: IpAddr, mac: Mac) -> bool {
        match self.vxlans.list.iter_mut().find(|d| d.cfg.dev == dev) {
            Some(d) => {
                d.neigh.insert(ip, mac);
                true
            }
            None => false,
        }
    }

    /// `bridge fdb append MAC dev DEV dst REMOTE self permanent` (flannel's `AddFDB`).
    /// `false` when `dev` is no VXLAN device.
    pub fn vxlan_fdb_set(&mut self, dev: IfName, mac: Mac, remote: Ipv4Addr) -> bool {
        match self.vxlans.list.iter_mut().find(|d| d.cfg.dev == dev) {
            Some(d) => {
                d.fdb.insert(mac, remote);
                true
            }
            None => false,
        }
    }

    /// Removes a neighbour entry and the FDB entry of its MAC from `dev` (flannel's `DelARP`
    /// and `DelFDB` when a node leaves).
    pub fn vxlan_forget(&mut self, dev: IfName, ip: IpAddr) {
        if let Some(d) = self.vxlans.list.iter_mut().find(|d| d.cfg.dev == dev) {
            if let Some(mac) = d.neigh.remove(&ip) {
                d.fdb.remove(&mac);
            }
        }
    }

    /// The encapsulated packet whose outer packet the last run transmitted as `outer`
    /// (an [`Egress::Transmit`]'s packet), taken out of the namespace: the driver carries it
    /// to the remote node and gives it to [`Netns::process_vxlan_into`] there.
    pub fn take_vxlan_sent(&mut self, outer: &Packet) -> Option<VxlanWire> {
        let k = self.vxlans.sent.iter().position(|w| w.outer == *outer)?;
        Some(self.vxlans.sent.remove(k))
    }

    /// The encapsulated packet whose outer packet the last run transmitted as `outer`,
    /// left in place (see [`Netns::take_vxlan_sent`]).
    pub fn vxlan_sent(&self, outer: &Packet) -> Option<&VxlanWire> {
        self.vxlans.sent.iter().find(|w| w.outer == *outer)
    }

    /// Receives an encapsulated packet on `iif` (the outer packet through PREROUTING and
    /// INPUT to the VXLAN socket, then the inner one on the device), appending what leaves
    /// to `out`, like [`Netns::process_into`].
    pub fn process_vxlan_into(
        &mut self,
        now: SimTime,
        wire: VxlanWire,
        iif: IfName,
        out: &mut Vec<Egress>,
    ) -> Processed {
        self.vxlans.rx = Some(wire);
        let r = self.process_into(now, wire.outer, Ingress::Interface(iif), out);
        self.vxlans.rx = None;
        r
    }

    /// Like [`Netns::process_vxlan_into`], with a step-by-step trace.
    pub fn process_vxlan_traced(
        &mut self,
        now: SimTime,
        wire: VxlanWire,
        iif: IfName,
    ) -> ProcessResult {
        self.vxlans.rx = Some(wire);
        let r = self.process_traced(now, wire.outer, Ingress::Interface(iif));
        self.vxlans.rx = None;
        r
    }

    /// Forgets the encapsulated packets of an earlier run nobody took.
    pub(super) fn vxlan_new_run(&mut self) {
        self.vxlans.sent.clear();
    }

    /// `ip_forward`'s MTU check for a packet routed out of a VXLAN device: over the MTU
    /// (DF taken as set, see the module documentation) it is answered with ICMP
    /// fragmentation needed from the address the route back to its source uses, and
    /// dropped. `None`: it fits (or `dev` has no MTU in nfsim).
    pub(super) fn vxlan_exceeds_mtu(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        dev: IfName,
    ) -> Option<Fate> {
        use sim_core::packet::icmp;
        let mtu = self.vxlan_mtu(dev)?;
        if f.pkt.len <= mtu {
            return None;
        }
        Self::step(f, |p| {
            Step::Vxlan(format!(
                "ip_forward: {} bytes over {dev}'s MTU {mtu}, DF: ICMP fragmentation needed (mtu {mtu}), dropped",
                p.len
            ))
        });
        if !crate::eval::is_icmp_error(&f.pkt) {
            if let Some(src) = self.routes.source_for(f.pkt.src) {
                self.send_error(
                    now,
                    f,
                    Packet::icmp_error(src, &f.pkt, icmp::DEST_UNREACH, ICMP_FRAG_NEEDED),
                );
            }
        }
        Some(self.dropped(now, f, Fate::Dropped(DropCause::FragNeeded { mtu })))
    }

    /// A locally generated packet routed out of a VXLAN device over its MTU: the socket's
    /// send fails (`EMSGSIZE` for a DF datagram; nfsim sends no fragments). `None`: it fits.
    pub(super) fn vxlan_local_exceeds_mtu(&mut self, f: &mut Flight, dev: IfName) -> Option<Fate> {
        let mtu = self.vxlan_mtu(dev)?;
        if f.pkt.len <= mtu {
            return None;
        }
        Self::step(f, |p| {
            Step::Vxlan(format!(
                "ip_local_out: {} bytes over {dev}'s MTU {mtu}: EMSGSIZE, not sent",
                p.len
            ))
        });
        Some(Fate::Dropped(DropCause::FragNeeded { mtu }))
    }

    /// `vxlan_xmit` for every packet the run transmitted on a VXLAN device (`out[start..]`):
    /// each is replaced by its outer packet's egress after the outer packet's own way through
    /// OUTPUT and POSTROUTING (its trace steps follow the inner's). Returns why the last
    /// packet was lost, if one was.
    pub(super) fn vxlan_xmit(
        &mut self,
        now: SimTime,
        out: &mut Vec<Egress>,
        start: usize,
        mut trace: Option<&mut PacketTrace>,
        depth: u8,
    ) -> Option<DropCause> {
        if self.vxlans.list.is_empty() {
            return None;
        }
        let mut sends = Vec::new();
        let mut k = start;
        while k < out.len() {
            match out[k] {
                Egress::Transmit {
                    dev,
                    next_hop,
                    packet,
                } if self.vxlan_dev(dev).is_some() => {
                    out.remove(k);
                    sends.push((dev, next_hop, packet));
                }
                _ => k += 1,
            }
        }
        let mut cause = None;
        for (dev, next_hop, inner) in sends {
            let d = self
                .vxlan_dev(dev)
                .unwrap_or_else(|| unreachable!("chosen above"))
                .clone();
            let say = |t: &mut Option<&mut PacketTrace>, s: String| {
                if let Some(t) = t.as_deref_mut() {
                    t.steps.push(Step::Vxlan(s));
                }
            };
            let Some(&mac) = d.neigh.get(&next_hop) else {
                say(
                    &mut trace,
                    format!("{dev}: neighbour {next_hop} unresolved (no entry; the ARP request finds no FDB entry): dropped"),
                );
                cause = Some(DropCause::NeighbourUnresolved(next_hop));
                continue;
            };
            let Some(&remote) = d.fdb.get(&mac) else {
                say(
                    &mut trace,
                    format!("vxlan_xmit on {dev}: {mac} ({next_hop}) not in the forwarding database: dropped (tx_dropped)"),
                );
                cause = Some(DropCause::VxlanFdbMiss(mac));
                continue;
            };
            let sport = vxlan_src_port(d.hashrnd, &inner);
            let mut outer = Packet::udp(
                std::net::SocketAddr::new(IpAddr::V4(d.cfg.local), sport),
                std::net::SocketAddr::new(IpAddr::V4(remote), d.cfg.dst_port),
            );
            outer.len = inner.len.saturating_add(VXLAN_HEADROOM);
            outer.ttl = VXLAN_OUTER_TTL;
            outer.mark = inner.mark;
            outer.tag = inner.tag;
            say(
                &mut trace,
                format!(
                    "vxlan_xmit on {dev}: {next_hop} is {mac}, fdb: {mac} dst {remote}; vxlan_xmit_one: VNI {} in {outer} (ttl {}, DF clear), udp_tunnel_xmit_skb: ip_local_out",
                    d.cfg.vni, outer.ttl
                ),
            );
            let begin = out.len();
            let (fate, _, t) = self.run(
                now,
                outer,
                Ingress::Local,
                trace.is_some(),
                out,
                None,
                depth.saturating_add(1),
            );
            if let (Some(tr), Some(mut t)) = (trace.as_deref_mut(), t) {
                // The outer packet's own fate line: the run's fate line says it once.
                if matches!(t.steps.last(), Some(Step::Fate(_))) && fate == Fate::Transmitted {
                    t.steps.pop();
                }
                tr.steps.extend(t.steps);
            }
            match (fate, out.get(begin)) {
                (Fate::Transmitted, Some(Egress::Transmit { packet, .. })) => {
                    self.vxlans.sent.push(VxlanWire {
                        outer: *packet,
                        inner,
                        vni: d.cfg.vni,
                        inner_src_mac: d.cfg.mac,
                        inner_dst_mac: mac,
                    });
                }
                (Fate::Dropped(c), _) => cause = Some(c),
                _ => cause = Some(DropCause::VxlanOuterLost),
            }
        }
        cause
    }

    /// The VXLAN socket's `encap_rcv` for a packet INPUT accepted: `None` when it is not for
    /// a VXLAN device's port (it goes to the local socket); else the fate of the inner packet
    /// received on the device (`vxlan_rcv`), whose egress joins `f.out`.
    pub(super) fn vxlan_rcv(&mut self, now: SimTime, f: &mut Flight) -> Option<Fate> {
        let sim_core::L4::Udp { dport, .. } = f.pkt.l4 else {
            return None;
        };
        if !self.vxlans.list.iter().any(|d| d.cfg.dst_port == dport) {
            return None;
        }
        let Some(wire) = self.vxlans.rx.take() else {
            Self::step(f, |_| {
                Step::Vxlan(format!(
                    "vxlan_rcv: UDP to {dport} without a VXLAN header: dropped"
                ))
            });
            return Some(Fate::Dropped(DropCause::VxlanNoDevice));
        };
        let Some(d) = self
            .vxlans
            .list
            .iter()
            .find(|d| d.cfg.dst_port == dport && d.cfg.vni == wire.vni)
            .cloned()
        else {
            Self::step(f, |_| {
                Step::Vxlan(format!(
                    "vxlan_rcv: no device for VNI {} on port {dport}: dropped",
                    wire.vni
                ))
            });
            return Some(Fate::Dropped(DropCause::VxlanNoDevice));
        };
        let dev = d.cfg.dev;
        if wire.inner_dst_mac != d.cfg.mac {
            Self::step(f, |_| {
                Step::Vxlan(format!(
                    "vxlan_rcv: VNI {} to {dev}; eth_type_trans: inner frame for {}, not {dev}'s {}: PACKET_OTHERHOST, dropped by ip_rcv",
                    wire.vni, wire.inner_dst_mac, d.cfg.mac
                ))
            });
            return Some(Fate::Dropped(DropCause::VxlanOtherHost(wire.inner_dst_mac)));
        }
        let mut inner = wire.inner;
        // __iptunnel_pull_header -> skb_scrub_packet(skb, false): the mark stays.
        inner.mark = f.pkt.mark;
        Self::step(f, |_| {
            Step::Vxlan(format!(
                "vxlan_rcv: VNI {} to {dev}, headers pulled; received on {dev}: {inner}",
                wire.vni
            ))
        });
        let mut g = Flight::new(inner, false, std::mem::take(&mut f.out));
        g.pkt.iif = Some(dev);
        g.pkt.oif = None;
        g.trace = f.trace.take();
        let fate = self.receive(now, &mut g);
        f.out = std::mem::take(&mut g.out);
        f.generated.append(&mut g.generated);
        f.trace = g.trace.take();
        Some(fate)
    }
}

/// ICMP code 4 of destination unreachable: fragmentation needed and DF set.
pub const ICMP_FRAG_NEEDED: u8 = 4;
