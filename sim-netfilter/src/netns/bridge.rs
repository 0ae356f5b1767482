//! A Linux bridge in the namespace (`cni0` of the CNI bridge plugin): ports, the forwarding
//! database learned from source MACs, hairpin mode per port, and `br_netfilter`, which sends
//! bridged IPv4 frames through the inet hooks when `net.bridge.bridge-nf-call-iptables` is 1
//! (docs/kernel-model.md, "The bridge and br_netfilter").
//!
//! The kernel's path, which the functions here follow:
//! - `br_handle_frame` (net/bridge/br_input.c) takes a frame received on a port;
//!   `NF_BR_PRE_ROUTING` runs `br_nf_pre_routing` (net/bridge/br_netfilter_hooks.c), which
//!   keeps the port in `nf_bridge_info` (`physindev`), makes the bridge the packet's device
//!   and calls `NF_INET_PRE_ROUTING` (raw, conntrack, mangle, nat). `br_nf_pre_routing_finish`
//!   then routes a packet whose destination address changed (DNAT): to a local address or
//!   out of another device, the frame's destination becomes the bridge's own MAC (it is
//!   passed up and routed); out of the bridge itself ("bridged_dnat"), the destination MAC
//!   becomes the new next hop's neighbour and the frame stays bridged.
//! - `br_handle_frame_finish` (br_input.c): the source MAC is learned (`br_fdb_update`); a
//!   frame for the bridge's own MAC is passed up (`br_pass_frame_up`), where
//!   `ip_sabotage_in` makes `ip_rcv` skip the PREROUTING hooks it has already seen; a known
//!   MAC is forwarded to its port (`br_forward`), an unknown one flooded (`br_flood`).
//! - `should_deliver` (br_forward.c): a frame never leaves by the port it came in on unless
//!   that port is in hairpin mode (`BR_HAIRPIN_MODE`).
//! - `NF_BR_FORWARD` runs `br_nf_forward_ip`: `NF_INET_FORWARD` with in and out the bridge
//!   and the ports as `physindev`/`physoutdev`; `NF_BR_POST_ROUTING` runs `br_nf_post_routing`:
//!   `NF_INET_POST_ROUTING` (SNAT, MASQUERADE from the bridge's address, confirm). Neither
//!   runs for a frame that did not come through `br_nf_pre_routing` (one the bridge device
//!   transmits for the IP stack: `br_dev_xmit`, `NF_BR_LOCAL_OUT`).
//! - A bridged frame's TTL is never touched: only `ip_forward` decrements it.
//!
//! Frames carry MACs only here: a packet is given with the destination MAC its sender's
//! neighbour table chose, and the namespace's neighbour table ([`Netns::bridge_set_neighbour`])
//! gives the MAC of a next hop on the bridge. ARP itself is not modelled: an address with no
//! neighbour entry is unresolved and its packet dropped.

use super::*;
use std::collections::BTreeMap;

/// An Ethernet address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Mac(pub [u8; 6]);

impl Mac {
    /// The address the CNI bridge plugin (v0.7's `hwaddr.GenerateHardwareAddr4`) gave an
    /// interface holding IPv4 address `a`: the private prefix `0a:58` and the address's four
    /// bytes.
    pub fn from_ipv4(a: Ipv4Addr) -> Mac {
        let o = a.octets();
        Mac([0x0a, 0x58, o[0], o[1], o[2], o[3]])
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

/// One port of a bridge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BridgePort {
    /// The port's interface (the host end of a pod's veth).
    pub dev: IfName,
    /// `hairpin_mode`: frames may leave by the port they came in on.
    pub hairpin: bool,
}

/// A bridge device and what it has learned.
#[derive(Clone, Debug)]
pub struct Bridge {
    /// The bridge device (`cni0`), an interface of the namespace.
    pub dev: IfName,
    /// Its own MAC: a frame to it is passed up to the IP stack.
    pub mac: Mac,
    /// Its ports, in the order they were added.
    pub ports: Vec<BridgePort>,
    /// The forwarding database: learned MAC -> port (`br_fdb_update`); a port's entries go
    /// with it (`br_fdb_delete_by_port`).
    fdb: BTreeMap<Mac, IfName>,
}

/// A frame received on a bridge port: the packet and the MACs of its Ethernet header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The IP packet.
    pub packet: Packet,
    /// The sender's MAC (learned on the port).
    pub src_mac: Mac,
    /// The MAC the sender addressed it to: the bridge's own (its gateway), or a station's.
    pub dst_mac: Mac,
}

/// A frame on a bridge's device or one of its ports, where `tcpdump -i DEV` would record it:
/// received on a port (before anything), passed up to the bridge device (after
/// `br_nf_pre_routing`'s PREROUTING when it ran), transmitted by the bridge device
/// (`br_dev_xmit`, after POSTROUTING), and out of a port (after `br_nf_post_routing`'s
/// POSTROUTING when it ran). Port-to-port traffic never shows on the bridge device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct L2Seen {
    /// The bridge device or port.
    pub dev: IfName,
    /// Received on `dev` (else transmitted).
    pub rx: bool,
    /// The frame's source MAC.
    pub src_mac: Mac,
    /// The frame's destination MAC.
    pub dst_mac: Mac,
    /// The packet as it is there.
    pub packet: Packet,
}

/// Bridge settings of the namespace: the bridges, the neighbour table of their addresses and
/// `net.bridge.bridge-nf-call-iptables`.
#[derive(Clone, Debug)]
pub(super) struct Bridges {
    pub(super) list: Vec<Bridge>,
    /// IP -> MAC of the stations on the bridges (the node's ARP cache). An entry outlives
    /// its station: a gone pod's address still resolves, and its frames flood.
    neigh: BTreeMap<IpAddr, Mac>,
    /// `net.bridge.bridge-nf-call-iptables` (the kernel's default, 1, once `br_netfilter`
    /// is loaded: `brnf_net_init`).
    pub(super) call_iptables: bool,
    /// The frames seen on bridge devices and ports, while capture is on.
    seen: Option<Vec<L2Seen>>,
}

impl Default for Bridges {
    fn default() -> Self {
        Bridges {
            list: Vec::new(),
            neigh: BTreeMap::new(),
            call_iptables: true,
            seen: None,
        }
    }
}

impl Bridges {
    fn saw(&mut self, dev: IfName, rx: bool, src_mac: Mac, dst_mac: Mac, packet: &Packet) {
        if let Some(v) = self.seen.as_mut() {
            v.push(L2Seen {
                dev,
                rx,
                src_mac,
                dst_mac,
                packet: *packet,
            });
        }
    }
}

/// The sysctl of `br_netfilter` that [`Netns::set_sysctl`] takes.
pub const BRIDGE_NF_CALL_IPTABLES: &str = "net.bridge.bridge-nf-call-iptables";

impl Netns {
    /// Adds bridge `dev` (an interface with `addrs`, its connected routes) with MAC `mac`.
    pub fn add_bridge(
        &mut self,
        dev: IfName,
        mac: Mac,
        addrs: &[(IpAddr, u8)],
    ) -> Result<(), NetnsError> {
        self.routes.add_interface(dev, addrs)?;
        self.bridges.list.push(Bridge {
            dev,
            mac,
            ports: Vec::new(),
            fdb: BTreeMap::new(),
        });
        Ok(())
    }

    /// Adds interface `port` (without addresses) to bridge `bridge` (`ip link set P master B`),
    /// with hairpin mode or not.
    pub fn bridge_add_port(
        &mut self,
        bridge: IfName,
        port: IfName,
        hairpin: bool,
    ) -> Result<(), NetnsError> {
        let Some(b) = self.bridges.list.iter_mut().find(|b| b.dev == bridge) else {
            return Err(RouteError::NoSuchInterface(bridge).into());
        };
        self.routes.add_interface(port, &[])?;
        b.ports.push(BridgePort { dev: port, hairpin });
        Ok(())
    }

    /// Removes a port from its bridge (its veth deleted), with the MACs learned on it.
    pub fn bridge_del_port(&mut self, port: IfName) {
        for b in &mut self.bridges.list {
            b.ports.retain(|p| p.dev != port);
            b.fdb.retain(|_, p| *p != port);
        }
    }

    /// Teaches the bridge of `port` that `mac` is behind it, as any frame from `mac` on the
    /// port would (a gratuitous ARP).
    pub fn bridge_learn(&mut self, port: IfName, mac: Mac) {
        if let Some(b) =
            (self.bridges.list.iter_mut()).find(|b| b.ports.iter().any(|p| p.dev == port))
        {
            b.fdb.insert(mac, port);
        }
    }

    /// Records that `ip` on a bridge answers at `mac` (the neighbour table).
    pub fn bridge_set_neighbour(&mut self, ip: IpAddr, mac: Mac) {
        self.bridges.neigh.insert(ip, mac);
    }

    /// The MAC `ip` resolves to: a bridge's own address gives the bridge's MAC.
    pub fn bridge_neighbour(&self, ip: IpAddr) -> Option<Mac> {
        if let Some(dev) = self.routes.interface_of(ip) {
            if let Some(b) = self.bridges.list.iter().find(|b| b.dev == dev) {
                return Some(b.mac);
            }
        }
        self.bridges.neigh.get(&ip).copied()
    }

    /// Starts (or stops) recording the frames on bridge devices and ports ([`L2Seen`]),
    /// for capture points.
    pub fn bridge_capture(&mut self, on: bool) {
        self.bridges.seen = on.then(Vec::new);
    }

    /// The frames seen on bridges since the last call, in order.
    pub fn drain_bridge_seen(&mut self) -> Vec<L2Seen> {
        match self.bridges.seen.as_mut() {
            Some(v) => std::mem::take(v),
            None => Vec::new(),
        }
    }

    /// The frame a station (a pod) on bridge port `port` sends for `pkt`: from the MAC its
    /// IPv4 source gives ([`Mac::from_ipv4`]) to the destination's own MAC when the
    /// destination is on the bridge's subnet (its neighbour entry), else to the gateway's,
    /// the bridge's own. `None` when `port` is no bridge's port or the packet is not IPv4;
    /// `Some(Err(addr))` when the on-link destination `addr` does not resolve (the
    /// station's ARP goes unanswered and nothing is sent).
    pub fn station_frame(&self, port: IfName, pkt: &Packet) -> Option<Result<Frame, IpAddr>> {
        let IpAddr::V4(src) = pkt.src else {
            return None;
        };
        let b = (self.bridges.list.iter()).find(|b| b.ports.iter().any(|p| p.dev == port))?;
        let on_link = (self.routes.interfaces().iter())
            .filter(|i| i.name == b.dev)
            .flat_map(|i| i.addrs.iter())
            .any(|&(a, l)| Prefix::new(a, l).is_ok_and(|p| p.contains(pkt.dst)));
        let dst_mac = if on_link {
            match self.bridge_neighbour(pkt.dst) {
                Some(m) => m,
                None => return Some(Err(pkt.dst)),
            }
        } else {
            b.mac
        };
        Some(Ok(Frame {
            packet: *pkt,
            src_mac: Mac::from_ipv4(src),
            dst_mac,
        }))
    }

    /// The bridges.
    pub fn bridges(&self) -> &[Bridge] {
        &self.bridges.list
    }

    /// Whether bridged IPv4 frames traverse the iptables hooks
    /// (`net.bridge.bridge-nf-call-iptables`).
    pub fn bridge_nf_call_iptables(&self) -> bool {
        self.bridges.call_iptables
    }

    /// Pushes a frame received on bridge port `port` through the bridge (and, as it decides,
    /// the hooks), appending what leaves to `out`, like [`Netns::process_into`].
    pub fn process_frame_into(
        &mut self,
        now: SimTime,
        frame: Frame,
        port: IfName,
        out: &mut Vec<Egress>,
    ) -> Processed {
        let (fate, entry, _) = self.run_frame(now, frame, port, false, out, None);
        Processed { fate, entry }
    }

    /// Like [`Netns::process_frame_into`], with a step-by-step trace and the entry's
    /// snapshot, like [`Netns::process_traced`].
    pub fn process_frame_traced(
        &mut self,
        now: SimTime,
        frame: Frame,
        port: IfName,
    ) -> ProcessResult {
        let mut r = ProcessResult {
            out: Vec::with_capacity(1),
            fate: Fate::Transmitted,
            entry: None,
            trace: None,
        };
        let (fate, _, trace) =
            self.run_frame(now, frame, port, true, &mut r.out, Some(&mut r.entry));
        r.fate = fate;
        r.trace = trace;
        r
    }

    fn run_frame(
        &mut self,
        now: SimTime,
        frame: Frame,
        port: IfName,
        traced: bool,
        out: &mut Vec<Egress>,
        entry: Option<&mut Option<CtEntry>>,
    ) -> (Fate, Option<EntryId>, Option<PacketTrace>) {
        let start = out.len();
        self.vxlan_new_run();
        let mut f = Flight::new(frame.packet, traced, std::mem::take(out));
        f.pkt.iif = Some(port);
        f.pkt.oif = None;
        let fate = self.bridge_rx(now, &mut f, port, frame);
        self.finish_flight(now, f, fate, traced, out, entry, start, 0)
    }

    /// `br_handle_frame` and what follows for a frame received on `port`.
    fn bridge_rx(&mut self, now: SimTime, f: &mut Flight, port: IfName, frame: Frame) -> Fate {
        let Some(bi) = self
            .bridges
            .list
            .iter()
            .position(|b| b.ports.iter().any(|p| p.dev == port))
        else {
            Self::step(f, |_| {
                Step::Bridge(format!("{port} is not a bridge port: dropped"))
            });
            return Fate::Dropped(DropCause::NotABridgePort(port));
        };
        let (br, br_mac) = (self.bridges.list[bi].dev, self.bridges.list[bi].mac);
        // br_handle_frame_finish: br_fdb_update learns the source on the port. (The kernel
        // learns after NF_BR_PRE_ROUTING; nothing here reads the table in between.)
        self.bridges.list[bi].fdb.insert(frame.src_mac, port);
        (self.bridges).saw(port, true, frame.src_mac, frame.dst_mac, &f.pkt);
        let mut dst_mac = frame.dst_mac;
        Self::step(f, |_| {
            Step::Bridge(format!(
                "{br}: frame {} > {} received on port {port}",
                frame.src_mac, dst_mac
            ))
        });
        let nf = self.bridges.call_iptables && f.pkt.is_ipv4();
        if !nf {
            Self::step(f, |_| {
                Step::Bridge(
                    "br_netfilter off (bridge-nf-call-iptables=0): no inet hook sees the frame while it is bridged"
                        .to_string(),
                )
            });
        }
        if nf {
            // br_nf_pre_routing: nf_bridge_info keeps the port; the bridge is the device.
            f.phys = Some(PhysDevs {
                indev: Some(port),
                outdev: None,
            });
            f.pkt.iif = Some(br);
            Self::step(f, |_| {
                Step::Bridge(format!(
                    "br_nf_pre_routing: NF_INET_PRE_ROUTING in {br}, physindev {port}"
                ))
            });
            let daddr = f.pkt.dst;
            if let Err(fate) = self.prerouting(now, f) {
                return fate;
            }
            // br_nf_pre_routing_finish: a changed destination is routed again.
            if f.pkt.dst != daddr {
                match self.routes.lookup(f.pkt.dst) {
                    RouteDecision::Forward { dev, next_hop, .. } if dev == br => {
                        let Some(mac) = self.bridge_neighbour(next_hop) else {
                            return self.unresolved(now, f, next_hop);
                        };
                        dst_mac = mac;
                        Self::step(f, |p| {
                            Step::Bridge(format!(
                                "br_nf_pre_routing_finish: {} routed out of {br} itself: bridged_dnat to {mac}",
                                p.dst
                            ))
                        });
                    }
                    RouteDecision::Unreachable => {
                        Self::step(f, |p| {
                            Step::Bridge(format!(
                                "br_nf_pre_routing_finish: no route to {}: dropped",
                                p.dst
                            ))
                        });
                        return self.dropped(now, f, Fate::Dropped(DropCause::NoRoute));
                    }
                    _ => {
                        dst_mac = br_mac;
                        Self::step(f, |p| {
                            Step::Bridge(format!(
                                "br_nf_pre_routing_finish: {} is not behind {br}: frame to {br}'s own {br_mac}",
                                p.dst
                            ))
                        });
                    }
                }
            }
        }
        if dst_mac == br_mac {
            // br_pass_frame_up: received by the bridge device.
            f.pkt.iif = Some(br);
            (self.bridges).saw(br, true, frame.src_mac, br_mac, &f.pkt);
            if nf {
                // ip_sabotage_in: PREROUTING has run; nf_bridge_info is freed.
                f.phys = None;
                Self::step(f, |_| {
                    Step::Bridge(format!(
                        "br_pass_frame_up: to {br}'s IP stack; ip_sabotage_in: PREROUTING already run"
                    ))
                });
                return self.route_received(now, f);
            }
            Self::step(f, |_| {
                Step::Bridge(format!("br_pass_frame_up: to {br}'s IP stack"))
            });
            return self.receive(now, f);
        }
        let out_port = self.bridges.list[bi].fdb.get(&dst_mac).copied();
        let targets: Vec<IfName> = match out_port {
            Some(p) => vec![p],
            None => {
                let ports = self.bridges.list[bi].ports.iter().map(|p| p.dev).collect();
                Self::step(f, |_| {
                    Step::Bridge(format!(
                        "br_flood: {dst_mac} not in the forwarding database: flooded"
                    ))
                });
                ports
            }
        };
        let hairpin = |d: IfName| {
            self.bridges.list[bi]
                .ports
                .iter()
                .any(|p| p.dev == d && p.hairpin)
        };
        // should_deliver: not back out of the input port without hairpin mode.
        let deliver: Vec<IfName> = targets
            .iter()
            .copied()
            .filter(|&d| d != port || hairpin(d))
            .collect();
        if deliver.is_empty() {
            if out_port == Some(port) {
                Self::step(f, |_| {
                    Step::Bridge(format!(
                        "should_deliver: {dst_mac} is on input port {port}, hairpin off: dropped"
                    ))
                });
                return self.dropped(now, f, Fate::Dropped(DropCause::BridgeHairpinOff(port)));
            }
            Self::step(f, |_| {
                Step::Bridge("br_flood: no other port: dropped".to_string())
            });
            return self.dropped(now, f, Fate::Dropped(DropCause::BridgeFlooded));
        }
        let mut fate = Fate::Transmitted;
        for (k, d) in deliver.iter().enumerate() {
            // A flooded frame is cloned per port (br_flood: maybe_deliver_addr), each clone
            // the frame as it entered; they share the trace, the output and the entry (read
            // afresh after the first clone's confirm).
            let mut g = Flight {
                pkt: f.pkt,
                handle: f.handle,
                untracked: f.untracked,
                local_origin: false,
                trace: f.trace.take(),
                out: std::mem::take(&mut f.out),
                generated: std::mem::take(&mut f.generated),
                view: if k == 0 { f.view } else { None },
                phys: f.phys,
                ipvs_property: f.ipvs_property,
            };
            fate = self.bridge_forward(now, &mut g, br, *d, (frame.src_mac, dst_mac));
            f.trace = g.trace;
            f.out = g.out;
            f.generated = g.generated;
            f.handle = g.handle;
        }
        fate
    }

    /// `br_forward` to `port`: `br_nf_forward_ip` and `br_nf_post_routing` when the frame
    /// came through `br_nf_pre_routing`, then out of the port.
    fn bridge_forward(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        br: IfName,
        port: IfName,
        macs: (Mac, Mac),
    ) -> Fate {
        let next_hop = f.pkt.dst;
        let Some(mut phys) = f.phys else {
            Self::step(f, |_| {
                Step::Bridge(format!(
                    "br_forward: out of port {port}, past FORWARD and POSTROUTING"
                ))
            });
            f.pkt.oif = Some(port);
            (self.bridges).saw(port, false, macs.0, macs.1, &f.pkt);
            f.out.push(Egress::Transmit {
                dev: port,
                next_hop,
                packet: f.pkt,
            });
            return Fate::Transmitted;
        };
        phys.outdev = Some(port);
        f.phys = Some(phys);
        f.pkt.iif = Some(br);
        f.pkt.oif = Some(br);
        Self::step(f, |_| {
            Step::Bridge(format!(
                "br_forward to port {port}; br_nf_forward_ip: NF_INET_FORWARD in {br} out {br}, physoutdev {port}"
            ))
        });
        if let Err(fate) = self.forward_hooks(now, f) {
            return fate;
        }
        Self::step(f, |_| {
            Step::Bridge(format!(
                "br_nf_post_routing: NF_INET_POST_ROUTING out {br}, physoutdev {port}"
            ))
        });
        let fate = self.postrouting(now, f, br, next_hop);
        // The bridge transmits on the port (the TTL untouched: nothing routed it).
        if let Some(Egress::Transmit { dev, packet, .. }) = f.out.last_mut() {
            if *dev == br {
                *dev = port;
                packet.oif = Some(port);
                let p = *packet;
                (self.bridges).saw(port, false, macs.0, macs.1, &p);
            }
        }
        fate
    }

    /// A packet for a next hop on a bridge that has no neighbour entry: ARP fails and the
    /// packet queued on the neighbour is dropped.
    fn unresolved(&mut self, now: SimTime, f: &mut Flight, next_hop: IpAddr) -> Fate {
        Self::step(f, |_| {
            Step::Bridge(format!("neighbour {next_hop} unresolved: dropped"))
        });
        self.dropped(
            now,
            f,
            Fate::Dropped(DropCause::NeighbourUnresolved(next_hop)),
        )
    }

    /// `br_dev_xmit` for what the IP stack transmitted on a bridge device (routed or local
    /// packets) from `out[start..]`: each such egress becomes the frame out of the port its
    /// next hop's MAC is learned on, or out of every port when it is not (flooded); one whose
    /// next hop does not resolve is dropped, and its cause returned. No bridge hook of
    /// `br_netfilter` sees these frames (`NF_BR_LOCAL_OUT`; `br_nf_post_routing` finds no
    /// `nf_bridge_info`).
    pub(super) fn bridge_xmit(
        &mut self,
        out: &mut Vec<Egress>,
        start: usize,
        mut trace: Option<&mut PacketTrace>,
    ) -> Option<DropCause> {
        if self.bridges.list.is_empty() {
            return None;
        }
        let mut cause = None;
        let mut k = start;
        while k < out.len() {
            let Egress::Transmit {
                dev,
                next_hop,
                packet,
            } = out[k]
            else {
                k += 1;
                continue;
            };
            let Some(b) = self.bridges.list.iter().find(|b| b.dev == dev) else {
                k += 1;
                continue;
            };
            let br_mac = b.mac;
            let mac = self.bridges.neigh.get(&next_hop).copied();
            let learned = mac.and_then(|m| b.fdb.get(&m).copied());
            let ports: Vec<IfName> = match (mac, learned) {
                (None, _) => Vec::new(),
                (Some(_), Some(p)) => vec![p],
                (Some(_), None) => b.ports.iter().map(|p| p.dev).collect(),
            };
            let what = match (mac, learned) {
                (None, _) => {
                    cause = Some(DropCause::NeighbourUnresolved(next_hop));
                    format!("br_dev_xmit on {dev}: neighbour {next_hop} unresolved: dropped")
                }
                (Some(m), Some(p)) => format!("br_dev_xmit on {dev}: {m} ({next_hop}) on port {p}"),
                (Some(m), None) => format!(
                    "br_dev_xmit on {dev}: {m} ({next_hop}) not in the forwarding database: flooded"
                ),
            };
            if let Some(t) = trace.as_deref_mut() {
                t.steps.push(Step::Bridge(what));
            }
            if let Some(m) = mac {
                self.bridges.saw(dev, false, br_mac, m, &packet);
                for &p in &ports {
                    let mut q = packet;
                    q.oif = Some(p);
                    self.bridges.saw(p, false, br_mac, m, &q);
                }
            }
            let repl: Vec<Egress> = ports
                .iter()
                .map(|&p| {
                    let mut packet = packet;
                    packet.oif = Some(p);
                    Egress::Transmit {
                        dev: p,
                        next_hop,
                        packet,
                    }
                })
                .collect();
            let n = repl.len();
            out.splice(k..k + 1, repl);
            k += n;
        }
        cause
    }
}
