//! A packet's path through the namespace's hooks, in the kernel's order (`ip_rcv`,
//! `ip_forward`, `ip_local_deliver`, `ip_local_out`, `ip_output`): the routing decision,
//! martian sources, TTL, and the packets the kernel generates (REJECT answers, ICMP errors
//! under the rate limit).

use super::*;

impl Netns {
    /// Pushes one packet through the namespace.
    pub fn process(&mut self, now: SimTime, pkt: Packet, from: Ingress) -> ProcessResult {
        self.process_result(now, pkt, from, false)
    }

    /// Like [`Netns::process`], with a step-by-step trace (rules evaluated in order, without the
    /// index).
    pub fn process_traced(&mut self, now: SimTime, pkt: Packet, from: Ingress) -> ProcessResult {
        self.process_result(now, pkt, from, true)
    }

    /// Like [`Netns::process_traced`], following given branches of the `statistic` matches
    /// ([`crate::branch`]): each iptables walk uses the leaf `branching` gives for it, or
    /// forks at every random statistic match and follows its first leaf. The returned
    /// [`Branching`](crate::branch::Branching) holds the path taken and the runs still to make
    /// for the other leaves. The trace holds every event but the rules that did not match.
    pub fn process_branching(
        &mut self,
        now: SimTime,
        pkt: Packet,
        from: Ingress,
        branching: crate::branch::Branching,
    ) -> (ProcessResult, crate::branch::Branching) {
        self.branching = Some(Box::new(branching));
        let r = self.process_result(now, pkt, from, true);
        let b = self.branching.take().map(|b| *b).unwrap_or_default();
        (r, b)
    }

    fn process_result(
        &mut self,
        now: SimTime,
        pkt: Packet,
        from: Ingress,
        traced: bool,
    ) -> ProcessResult {
        // Most packets leave once (or not at all): one allocation of the right size.
        let mut r = ProcessResult {
            out: Vec::with_capacity(1),
            fate: Fate::Transmitted,
            entry: None,
            trace: None,
        };
        let (fate, _, trace) = self.run(now, pkt, from, traced, &mut r.out, Some(&mut r.entry), 0);
        r.fate = fate;
        r.trace = trace;
        r
    }

    /// [`Netns::process`] for a caller that pushes many packets: what leaves the namespace is
    /// appended to `out` (whose allocation the caller can reuse from packet to packet), and the
    /// entry comes back as its id instead of a snapshot. Same effects, same egress in the same
    /// order.
    pub fn process_into(
        &mut self,
        now: SimTime,
        pkt: Packet,
        from: Ingress,
        out: &mut Vec<Egress>,
    ) -> Processed {
        let (fate, entry, _) = self.run(now, pkt, from, false, out, None, 0);
        Processed { fate, entry }
    }

    /// One packet and the packets the kernel generates for it (REJECT answers), appending
    /// egress to `out`. Returns the fate, the id of the packet's entry if it is still present
    /// (and its snapshot in `entry`, when asked), and the trace.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run(
        &mut self,
        now: SimTime,
        pkt: Packet,
        from: Ingress,
        traced: bool,
        out: &mut Vec<Egress>,
        entry: Option<&mut Option<CtEntry>>,
        depth: u8,
    ) -> (Fate, Option<EntryId>, Option<PacketTrace>) {
        let start = out.len();
        if self.ipvs.is_active() {
            // IPVS connections expire by their timers, before any later packet.
            self.ipvs_expire(now);
        }
        if depth == 0 {
            self.vxlan_new_run();
        }
        let mut f = Flight::new(pkt, traced, std::mem::take(out));
        let fate = match from {
            Ingress::Interface(dev) => {
                f.pkt.iif = Some(dev);
                f.pkt.oif = None;
                self.receive(now, &mut f)
            }
            Ingress::Local => {
                f.pkt.iif = None;
                f.local_origin = true;
                self.output(now, &mut f)
            }
        };
        self.finish_flight(now, f, fate, traced, out, entry, start, depth)
    }

    /// The end of a packet's run: its entry, the bridge's transmit of what the IP stack sent
    /// on a bridge device, the fate in the trace, then the packets the kernel generated.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn finish_flight(
        &mut self,
        now: SimTime,
        f: Flight,
        mut fate: Fate,
        traced: bool,
        out: &mut Vec<Egress>,
        entry: Option<&mut Option<CtEntry>>,
        start: usize,
        depth: u8,
    ) -> (Fate, Option<EntryId>, Option<PacketTrace>) {
        let id = self.entry_after(&f, entry);
        *out = f.out;
        let mut trace = f.trace;
        if let Some(cause) = self.bridge_xmit(out, start, trace.as_mut()) {
            if fate == Fate::Transmitted && out.len() == start {
                fate = Fate::Dropped(cause);
            }
        }
        if let Some(cause) = self.vxlan_xmit(now, out, start, trace.as_mut(), depth) {
            if fate == Fate::Transmitted && out.len() == start {
                fate = Fate::Dropped(cause);
            }
        }
        if let Some(t) = trace.as_mut() {
            t.steps.push(Step::Fate(fate_text(&fate, &out[start..])));
        }
        // Packets the kernel generated (REJECT answers) take the OUTPUT path.
        for g in f.generated {
            let gt = if depth >= MAX_GENERATED_DEPTH {
                None
            } else {
                self.run(now, g, Ingress::Local, traced, out, None, depth + 1)
                    .2
            };
            if let (Some(t), Some(gt)) = (trace.as_mut(), gt) {
                t.steps
                    .push(Step::Fate(format!("kernel-generated answer: {g}")));
                t.steps.extend(gt.steps);
            }
        }
        (fate, id, trace)
    }

    /// The packet's entry once the pipeline is done: its id if it is still present, and its
    /// snapshot into `snapshot` when asked.
    fn entry_after(&self, f: &Flight, snapshot: Option<&mut Option<CtEntry>>) -> Option<EntryId> {
        let h = f.handle?;
        match snapshot {
            None => self.conntrack.mark(h.id).map(|_| h.id),
            Some(slot) => {
                *slot = self.conntrack.get(h.id);
                slot.map(|e| e.id)
            }
        }
    }

    #[inline(always)]
    pub(super) fn step(f: &mut Flight, s: impl FnOnce(&Packet) -> Step) {
        if let Some(t) = f.trace.as_mut() {
            t.steps.push(s(&f.pkt));
        }
    }

    /// The part of PREROUTING and OUTPUT before destination NAT, in priority order: the nft
    /// base chains between the xtables tables, raw, `nf_conntrack_in`, mangle. `Err` is the
    /// packet's fate when one of them ends its walk (after conntrack a drop also discards
    /// the new entry, see `dropped`).
    fn before_dnat(&mut self, now: SimTime, f: &mut Flight, h: Hook) -> Result<(), Fate> {
        use nft_hooks::prio as P;
        Self::step(f, |_| Step::Hook(h));
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, h, P::FIRST, P::RAW) {
            return Err(fate);
        }
        if let TableOutcome::Stop(fate) = self.run_table(now, f, Table::Raw, h) {
            return Err(fate);
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, h, P::RAW, P::CONNTRACK) {
            return Err(fate);
        }
        if let Some(fate) = self.conntrack_in(now, f) {
            return Err(fate);
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, h, P::CONNTRACK, P::MANGLE) {
            return Err(self.dropped(now, f, fate));
        }
        if let TableOutcome::Stop(fate) = self.run_table(now, f, Table::Mangle, h) {
            return Err(self.dropped(now, f, fate));
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, h, P::MANGLE, P::NAT_DST) {
            return Err(self.dropped(now, f, fate));
        }
        Ok(())
    }

    /// A received packet: PREROUTING, routing, then INPUT or FORWARD + POSTROUTING.
    pub(super) fn receive(&mut self, now: SimTime, f: &mut Flight) -> Fate {
        if self.ipv6_rcv_refuses(f) {
            return Fate::Dropped(DropCause::MartianSource);
        }
        if let Err(fate) = self.prerouting(now, f) {
            return fate;
        }
        self.route_received(now, f)
    }

    /// The PREROUTING hook of a received packet (raw, conntrack, mangle, nat and the nft
    /// chains among them); `Err` is its fate when they end its way.
    pub(super) fn prerouting(&mut self, now: SimTime, f: &mut Flight) -> Result<(), Fate> {
        use nft_hooks::prio as P;
        let h = Hook::PreRouting;
        self.before_dnat(now, f, h)?;
        if let Err(fate) = self.nat_hook(now, f, h) {
            return Err(self.dropped(now, f, fate));
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, h, P::NAT_DST, P::LAST) {
            return Err(self.dropped(now, f, fate));
        }
        Ok(())
    }

    /// A received packet after PREROUTING: the routing decision, then INPUT or FORWARD +
    /// POSTROUTING.
    pub(super) fn route_received(&mut self, now: SimTime, f: &mut Flight) -> Fate {
        // Routing decision (ip_route_input_noref).
        if self.routes.is_local(f.pkt.dst) {
            if self.martian_source(f) {
                return self.dropped(now, f, Fate::Dropped(DropCause::MartianSource));
            }
            Self::step(f, |p| Step::Route(format!("{} is local: INPUT", p.dst)));
            return self.input(now, f);
        }
        let Some(route) = self.routes.route_for(f.pkt.dst) else {
            Self::step(f, |p| Step::Route(format!("no route to {}", p.dst)));
            return self.dropped(now, f, Fate::Dropped(DropCause::NoRoute));
        };
        if self.martian_source(f) {
            return self.dropped(now, f, Fate::Dropped(DropCause::MartianSource));
        }
        let (dev, next_hop) = (route.dev, route.gateway.unwrap_or(f.pkt.dst));
        if f.trace.is_some() {
            let route = *route;
            Self::step(f, |p| {
                Step::Route(format!("{} via route {route}: FORWARD", p.dst))
            });
        }
        // ip_forward / ip6_forward: a packet with no hop left dies before the FORWARD hook,
        // answered with an ICMP time exceeded (`too_many_hops`); the others lose one hop
        // (ip_decrease_ttl) before FORWARD sees them.
        if f.pkt.ttl <= 1 {
            return self.ttl_exceeded(now, f);
        }
        if let Some(fate) = self.vxlan_exceeds_mtu(now, f, dev) {
            return fate;
        }
        f.pkt.ttl -= 1;
        f.pkt.oif = Some(dev);
        if let Err(fate) = self.forward_hooks(now, f) {
            return fate;
        }
        self.postrouting(now, f, dev, next_hop)
    }

    /// The FORWARD hook (mangle, filter and the nft chains among them); `Err` is the
    /// packet's fate when they end its way.
    pub(super) fn forward_hooks(&mut self, now: SimTime, f: &mut Flight) -> Result<(), Fate> {
        Self::step(f, |_| Step::Hook(Hook::Forward));
        let (lo, hi) = (nft_hooks::prio::FIRST, nft_hooks::prio::LAST);
        let mut from = lo;
        for (table, at) in [
            (Table::Mangle, nft_hooks::prio::MANGLE),
            (Table::Filter, nft_hooks::prio::FILTER),
        ] {
            if let TableOutcome::Stop(fate) = self.nft_filter(now, f, Hook::Forward, from, at) {
                return Err(self.dropped(now, f, fate));
            }
            if let TableOutcome::Stop(fate) = self.run_table(now, f, table, Hook::Forward) {
                return Err(self.dropped(now, f, fate));
            }
            from = at;
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, Hook::Forward, from, hi) {
            return Err(self.dropped(now, f, fate));
        }
        self.ipvs_forward(now, f);
        Ok(())
    }

    /// Whether the routing decision refuses a received IPv4 packet as a martian source:
    /// `ip_route_input_slow` drops a 127.0.0.0/8 source on any interface but `lo`
    /// (`route_localnet` is 0), and `fib_validate_source`, called for
    /// both local delivery and forwarding once a route exists, returns `-EINVAL` for a source
    /// that is one of the namespace's own addresses (`inet_lookup_ifaddr_rcu`; `rp_filter`
    /// and `accept_local` are 0, as on a kind node). A packet looped back on `lo` keeps its
    /// output route and is never checked. Checked on Linux 6.18 in a private namespace: a
    /// frame injected on a veth with the source of the veth's own address, or of `lo`'s
    /// 127.0.0.1, is dropped (`in_martian_src` + 1); an unassigned source is accepted.
    #[inline]
    fn martian_source(&self, f: &mut Flight) -> bool {
        let IpAddr::V4(src) = f.pkt.src else {
            return false;
        };
        if f.pkt.iif == Some(lo()) {
            return false;
        }
        if !src.is_loopback() && self.routes.interface_of(f.pkt.src).is_none() {
            return false;
        }
        Self::step(f, |p| {
            Step::Route(format!("martian source {} from {}: dropped", p.dst, p.src))
        });
        true
    }

    /// Whether `ipv6_rcv_core` (before PREROUTING, so before conntrack) drops a received IPv6
    /// packet: a multicast source, or the loopback address as source or destination on any
    /// link but `lo` (RFC 4291 §2.5.3). Counted by the kernel in `Ip6InAddrErrors` /
    /// `Ip6InHdrErrors`, never seen by netfilter. An IPv4-mapped source is not refused:
    /// Linux 6.18 forwards `::ffff:10.0.0.1 -> fd01::5` as any other packet.
    #[inline]
    fn ipv6_rcv_refuses(&self, f: &mut Flight) -> bool {
        let (IpAddr::V6(src), IpAddr::V6(dst)) = (f.pkt.src, f.pkt.dst) else {
            return false;
        };
        let on_lo = f.pkt.iif == Some(lo());
        let bad = src.is_multicast() || (!on_lo && (src.is_loopback() || dst.is_loopback()));
        if bad {
            Self::step(f, |p| {
                Step::Route(format!(
                    "ipv6_rcv: {} -> {} refused before PREROUTING (multicast or loopback address): dropped",
                    p.src, p.dst
                ))
            });
        }
        bad
    }

    /// A packet to forward whose TTL (hop limit) has run out: dropped, and its sender told
    /// with an ICMP time exceeded (`icmp_send(skb, ICMP_TIME_EXCEEDED, ICMP_EXC_TTL, 0)`,
    /// ICMPv6 `ICMPV6_TIME_EXCEED`/`ICMPV6_EXC_HOPLIMIT`), from the address the route back
    /// to it would use (IPv6: `ipv6_dev_get_saddr`). No error answers an ICMP error
    /// (`icmp_send` / `icmpv6_send` refuse). The error passes the destination's rate limit
    /// ([`Netns::send_error`]); the global `icmp_msgs_per_sec` is not modelled.
    #[cold]
    fn ttl_exceeded(&mut self, now: SimTime, f: &mut Flight) -> Fate {
        use sim_core::packet::icmp;
        Self::step(f, |p| {
            Step::Route(format!("TTL {} exceeded in transit: dropped", p.ttl))
        });
        if !crate::eval::is_icmp_error(&f.pkt) {
            if let Some(src) = self.routes.source_for(f.pkt.src) {
                let t = if f.pkt.is_ipv4() {
                    icmp::TIME_EXCEEDED
                } else {
                    icmp::V6_TIME_EXCEEDED
                };
                self.send_error(now, f, Packet::icmp_error(src, &f.pkt, t, 0));
            }
        }
        self.dropped(now, f, Fate::Dropped(DropCause::TtlExceeded))
    }

    /// Sends a packet the kernel answers with (REJECT's, time exceeded) through OUTPUT,
    /// unless it is an ICMP or ICMPv6 error the destination's rate limit holds back.
    pub(super) fn send_error(&mut self, now: SimTime, f: &mut Flight, answer: Packet) {
        if !self.icmp_error_allowed(now, &answer) {
            let sysctl = if answer.is_ipv4() {
                "net.ipv4.icmp_ratelimit"
            } else {
                "net.ipv6.icmp.ratelimit"
            };
            Self::step(f, |p| {
                Step::Route(format!(
                    "ICMP error to {} not sent: rate limited ({sysctl})",
                    p.src
                ))
            });
            return;
        }
        f.generated.push(answer);
    }

    /// Whether this namespace's kernel may send `answer` now, an ICMP error it generated
    /// (`icmpv4_xrlim_allow` / `icmpv6_xrlim_allow`: the per-destination limits of
    /// [`IcmpRateLimit`]); takes the error's cost when it may. Anything but an ICMP or
    /// ICMPv6 error is always allowed. For drivers whose sockets answer closed ports on the
    /// namespace's own addresses.
    pub fn icmp_error_allowed(&mut self, now: SimTime, answer: &Packet) -> bool {
        let sim_core::L4::Icmp {
            icmp_type, code, ..
        } = answer.l4
        else {
            return true;
        };
        let via_lo = self.routes.lookup(answer.dst) == RouteDecision::Local;
        match answer.dst {
            IpAddr::V4(dst) => self.icmp_limit.allow(now, dst, icmp_type, code, via_lo),
            IpAddr::V6(dst) => self.icmp_limit.allow_v6(now, dst, icmp_type, via_lo),
        }
    }

    /// INPUT: mangle, filter, nat (SNAT), confirm, deliver.
    fn input(&mut self, now: SimTime, f: &mut Flight) -> Fate {
        use nft_hooks::prio as P;
        Self::step(f, |_| Step::Hook(Hook::Input));
        let mut from = P::FIRST;
        for (table, at) in [(Table::Mangle, P::MANGLE), (Table::Filter, P::FILTER)] {
            if let TableOutcome::Stop(fate) = self.nft_filter(now, f, Hook::Input, from, at) {
                return self.dropped(now, f, fate);
            }
            if let TableOutcome::Stop(fate) = self.run_table(now, f, table, Hook::Input) {
                return self.dropped(now, f, fate);
            }
            from = at;
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, Hook::Input, from, P::NAT_SRC) {
            return self.dropped(now, f, fate);
        }
        if let Some(fate) = self.ipvs_local(now, f, Hook::Input) {
            return fate;
        }
        if let Err(fate) = self.nat_hook(now, f, Hook::Input) {
            return self.dropped(now, f, fate);
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, Hook::Input, P::NAT_SRC, P::LAST)
        {
            return self.dropped(now, f, fate);
        }
        if let Some(fate) = self.confirm(now, f) {
            return fate;
        }
        if let Some(fate) = self.vxlan_rcv(now, f) {
            return fate;
        }
        f.out.push(Egress::LocalDeliver { packet: f.pkt });
        Fate::Delivered
    }

    /// A locally generated packet: route, OUTPUT, re-route, POSTROUTING.
    fn output(&mut self, now: SimTime, f: &mut Flight) -> Fate {
        // The socket's route lookup picks the interface (ip_route_output_key).
        let first = self.routes.lookup(f.pkt.dst);
        if first == RouteDecision::Unreachable {
            Self::step(f, |p| Step::Route(format!("no route to {}", p.dst)));
            return Fate::Dropped(DropCause::NoRoute);
        }
        self.output_hooks(now, f, first)
    }

    /// OUTPUT from its first hook for a packet routed by `first`, then the re-route and
    /// POSTROUTING (or the loop back through `lo`). IPVS sends the packets it translates
    /// this way too (`ip_vs_nat_send_or_cont`).
    pub(super) fn output_hooks(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        first: RouteDecision,
    ) -> Fate {
        f.pkt.oif = Some(match first {
            RouteDecision::Forward { dev, .. } => dev,
            _ => lo(),
        });
        // The socket's send over the route's MTU fails before any hook (ip_append_data).
        if let RouteDecision::Forward { dev, .. } = first {
            if let Some(fate) = self.vxlan_local_exceeds_mtu(f, dev) {
                return fate;
            }
        }
        use nft_hooks::prio as P;
        let h = Hook::Output;
        if let Err(fate) = self.before_dnat(now, f, h) {
            return fate;
        }
        let dst_before = f.pkt.dst;
        if let Err(fate) = self.nat_hook(now, f, h) {
            return self.dropped(now, f, fate);
        }
        if let Some(fate) = self.ipvs_local(now, f, h) {
            return fate;
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, h, P::NAT_DST, P::FILTER) {
            return self.dropped(now, f, fate);
        }
        if let TableOutcome::Stop(fate) = self.run_table(now, f, Table::Filter, h) {
            return self.dropped(now, f, fate);
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, h, P::FILTER, P::LAST) {
            return self.dropped(now, f, fate);
        }
        // ip_route_me_harder: the destination changed (DNAT in OUTPUT), route again.
        let decision = if f.pkt.dst != dst_before {
            let d = self.routes.lookup(f.pkt.dst);
            Self::step(f, |p| {
                Step::Route(format!("destination changed to {}: re-routed", p.dst))
            });
            d
        } else {
            first
        };
        match decision {
            RouteDecision::Local => {
                f.pkt.oif = Some(lo());
                Self::step(f, |p| Step::Route(format!("{} is local: via lo", p.dst)));
                let fate = self.postrouting(now, f, lo(), f.pkt.dst);
                if fate != Fate::Transmitted {
                    return fate;
                }
                // Looped back: the packet is received on lo (PREROUTING, INPUT).
                let Some(Egress::Transmit { packet, .. }) = f.out.pop() else {
                    return fate;
                };
                // The looped-back packet keeps its conntrack reference (skb->_nfct), so
                // PREROUTING does not track it again (nf_conntrack_in: "Previously seen
                // (loopback or untracked)? Ignore.").
                let mut back = Flight {
                    pkt: packet,
                    handle: f.handle,
                    untracked: f.untracked,
                    local_origin: false,
                    trace: f.trace.take(),
                    out: std::mem::take(&mut f.out),
                    generated: std::mem::take(&mut f.generated),
                    view: None,
                    phys: None,
                    ipvs_property: f.ipvs_property,
                };
                back.pkt.iif = Some(lo());
                back.pkt.oif = None;
                let fate = self.receive(now, &mut back);
                f.trace = back.trace;
                f.out = back.out;
                f.generated = back.generated;
                f.handle = back.handle;
                f.view = back.view;
                fate
            }
            RouteDecision::Forward { dev, next_hop, .. } => {
                f.pkt.oif = Some(dev);
                self.postrouting(now, f, dev, next_hop)
            }
            RouteDecision::Unreachable => {
                Self::step(f, |p| Step::Route(format!("no route to {}", p.dst)));
                self.dropped(now, f, Fate::Dropped(DropCause::NoRoute))
            }
        }
    }

    /// POSTROUTING: mangle, nat (SNAT/MASQUERADE), confirm, transmit.
    #[inline]
    pub(super) fn postrouting(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        dev: IfName,
        next_hop: IpAddr,
    ) -> Fate {
        use nft_hooks::prio as P;
        let h = Hook::PostRouting;
        Self::step(f, |_| Step::Hook(h));
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, h, P::FIRST, P::MANGLE) {
            return self.dropped(now, f, fate);
        }
        if let TableOutcome::Stop(fate) = self.run_table(now, f, Table::Mangle, h) {
            return self.dropped(now, f, fate);
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, h, P::MANGLE, P::NAT_SRC) {
            return self.dropped(now, f, fate);
        }
        if let Err(fate) = self.nat_postrouting(now, f, dev, next_hop) {
            return self.dropped(now, f, fate);
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, h, P::NAT_SRC, P::LAST) {
            return self.dropped(now, f, fate);
        }
        if let Some(fate) = self.confirm(now, f) {
            return fate;
        }
        f.out.push(Egress::Transmit {
            dev,
            next_hop,
            packet: f.pkt,
        });
        Fate::Transmitted
    }
}

fn fate_text(fate: &Fate, out: &[Egress]) -> String {
    match fate {
        Fate::Transmitted => match out.first() {
            Some(Egress::Transmit {
                dev,
                next_hop,
                packet,
            }) => format!("transmitted on {dev} to {next_hop}: {packet}"),
            _ => "transmitted".into(),
        },
        Fate::Delivered => match out.first() {
            Some(Egress::LocalDeliver { packet }) => format!("delivered locally: {packet}"),
            _ => "delivered locally".into(),
        },
        Fate::Dropped(c) => format!("dropped: {c}"),
        Fate::Rejected { table, hook } => format!("rejected by {table} {hook}"),
        Fate::RejectedNft { chain, hook } => format!("rejected by nft chain {chain} ({hook})"),
    }
}
