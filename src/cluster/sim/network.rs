//! Routing between machines: what a machine sends, the network and router between nodes,
//! each node's kernel, and delivery to pods', hosts' and nodes' stacks and clients.

use super::capture::Hop;
use super::*;

/// Why a node's namespace stopped a packet, for the timeline (`None`: it went on).
pub(super) fn fate_reason(fate: &Fate) -> Option<String> {
    match fate {
        Fate::Dropped(c) => Some(c.to_string()),
        Fate::Rejected { table, hook } => Some(format!("rejected by {table} {hook}")),
        Fate::RejectedNft { chain, hook } => {
            Some(format!("rejected by nft chain {chain} ({hook})"))
        }
        Fate::Transmitted | Fate::Delivered => None,
    }
}

impl Simulation {
    /// Sends packets from a machine into the network as that machine would.
    pub(super) fn send_from(&mut self, m: &Machine, packets: Vec<Packet>) {
        for p in packets {
            match m {
                Machine::Pod(id) => {
                    if let Some(pod) = self.pods.get(*id) {
                        if pod.state.has_network() {
                            self.queue.push(
                                self.now,
                                Ev::Deliver(
                                    Dest::NodeIn(pod.state.def.node, pod.veth, Hop::Pod),
                                    p,
                                ),
                            );
                        }
                    }
                }
                Machine::Node(n) => {
                    self.queue.push(self.now, Ev::Deliver(Dest::NodeOut(*n), p));
                }
                // A host's default route: the router, or the cloud load balancer for a
                // load-balancer IP.
                Machine::Host(_) => {
                    if let Some(p) = self.lb_route(p) {
                        self.router(p, None)
                    }
                }
            }
        }
    }

    /// The node network: delivers to the machine owning `next_hop` after the link latency;
    /// an address nobody has swallows the packet. `from` is the sending node.
    pub(super) fn network(&mut self, next_hop: IpAddr, p: Packet, from: Option<usize>) {
        let hop = match from {
            Some(n) => Hop::Node(n),
            None => Hop::Router,
        };
        let dest = match self.owners.get(&next_hop) {
            Some(Owner::Node(n)) => Dest::NodeIn(*n, eth0(), hop),
            Some(Owner::Host(h)) => Dest::Host(*h),
            Some(Owner::Router) => {
                if let Some(n) = from {
                    self.tap_eth0_tx(n, next_hop, &p);
                }
                return self.router(p, from);
            }
            // No neighbour answers: nothing is transmitted.
            None => return self.network_drop(&p, format!("nobody has {next_hop}")),
        };
        if let Some(n) = from {
            self.tap_eth0_tx(n, next_hop, &p);
        }
        self.queue
            .push(self.now + self.sc.latency, Ev::Deliver(dest, p));
    }

    /// An encapsulated packet on the node network: to the node owning the outer
    /// destination after the link latency (the outer packet is unicast between nodes, so
    /// it never needs the router); anything else swallows it.
    fn vxlan_network(
        &mut self,
        from: usize,
        next_hop: IpAddr,
        mut w: sim_netfilter::netns::VxlanWire,
    ) {
        w.outer.iif = None;
        w.outer.oif = None;
        self.tap_eth0_tx(from, next_hop, &w.outer);
        match self.owners.get(&next_hop) {
            Some(Owner::Node(m)) => {
                let m = *m;
                self.queue
                    .push(self.now + self.sc.latency, Ev::DeliverVxlan(m, w));
            }
            _ => self.network_drop(&w.outer, format!("nobody takes VXLAN for {next_hop}")),
        }
    }

    /// An encapsulated packet received on node `n`'s eth0: the outer packet through the
    /// node's kernel and, decapsulated, the inner one.
    pub(super) fn deliver_vxlan(&mut self, n: usize, w: sim_netfilter::netns::VxlanWire) {
        let hop = match self.owners.get(&w.outer.src) {
            Some(Owner::Node(s)) => Hop::Node(*s),
            _ => Hop::Router,
        };
        self.tap_rx(n, eth0(), hop, &w.outer);
        self.vxlan_rx = Some(w);
        self.node_kernel(n, w.outer, Ingress::Interface(eth0()));
        self.vxlan_rx = None;
    }

    /// The network's router: node and host addresses, and each pod CIDR via its node, except
    /// back to the node the packet came from.
    pub(super) fn router(&mut self, p: Packet, from: Option<usize>) {
        let dest = match self.owners.get(&p.dst) {
            Some(Owner::Node(n)) => Some(Dest::NodeIn(*n, eth0(), Hop::Router)),
            Some(Owner::Host(h)) => Some(Dest::Host(*h)),
            Some(Owner::Router) => None,
            None => self
                .nodes
                .iter()
                .position(|n| n.def.pod_cidrs_contain(p.dst))
                .filter(|&n| Some(n) != from)
                .map(|n| Dest::NodeIn(n, eth0(), Hop::Router)),
        };
        match dest {
            Some(d) => {
                self.queue
                    .push(self.now + self.sc.latency, Ev::Deliver(d, p));
            }
            None => self.network_drop(&p, format!("no route to {}", p.dst)),
        }
    }

    pub(super) fn network_drop(&mut self, p: &Packet, reason: String) {
        if !self.recording {
            return;
        }
        if let Some(t) = self.client_tag(p, false) {
            let what = What::Dropped {
                client: self.clients[t.client as usize].def.name.clone(),
                query: t.seq,
                node: "the network's router".into(),
                packet: p.to_string(),
                reason: format!("dropped: {reason}"),
            };
            self.log(what);
        }
    }

    /// Runs a packet through node `n`'s namespace and sends on what comes out.
    pub(super) fn node_kernel(&mut self, n: usize, p: Packet, from: Ingress) {
        // A pod behind a proxy-ARP link (Calico's cali*): its packet leaves once the host
        // answers its ARP for 169.254.1.1.
        if let Ingress::Interface(dev) = from {
            if self.nodes[n].netns.proxy_arp(dev) && p.is_ipv4() {
                if let Err(reason) = calico::proxy_arp(&self.nodes[n].netns, dev) {
                    return self.network_drop(&p, reason);
                }
            }
        }
        let sent = self.client_tag(&p, true).map(|t| (p, t));
        // A node with many CPUs: the packet's CPU, and the entry it races (`cpus.rs`).
        let now = self.now;
        let on_cpu = match self.nodes[n].cpus.as_mut() {
            None => None,
            Some(c) => {
                let on = c.begin(now, &p, from, eth0());
                let on = self.race_begin(n, on);
                Some((on, self.nodes[n].netns.conntrack().next_seq()))
            }
        };
        let mut out = std::mem::take(&mut self.egress);
        out.clear();
        let r = match self.vxlan_rx.take() {
            Some(w) => Ok(self.nodes[n]
                .netns
                .process_vxlan_into(self.now, w, eth0(), &mut out)),
            None => Err(()),
        };
        let r = match r {
            Ok(r) => r,
            Err(()) => match self.bridge_frame(n, &p, from) {
                Ok(Some((frame, port))) => self.nodes[n]
                    .netns
                    .process_frame_into(self.now, frame, port, &mut out),
                Ok(None) => self.nodes[n]
                    .netns
                    .process_into(self.now, p, from, &mut out),
                Err(reason) => {
                    self.egress = out;
                    if let Some((on, seq_before)) = on_cpu {
                        self.race_end(n, on, None, seq_before, &p);
                    }
                    return self.network_drop(&p, reason);
                }
            },
        };
        if let Some((on, seq_before)) = on_cpu {
            self.race_end(n, on, r.entry, seq_before, &p);
        }
        self.after_kernel(n);
        self.tap_bridge(n);
        if p.tag & INJECTED_TAG != 0 {
            if let Some(reason) = fate_reason(&r.fate) {
                self.sighted(&Machine::Node(n), &p, Some(reason));
            }
        }
        if self.recording {
            let reason = fate_reason(&r.fate);
            if let (Some(reason), Some(t)) = (reason, self.client_tag(&p, false)) {
                let what = What::Dropped {
                    client: self.clients[t.client as usize].def.name.clone(),
                    query: t.seq,
                    node: self.nodes[n].def.name.clone(),
                    packet: p.to_string(),
                    reason,
                };
                self.log(what);
            }
        }
        self.node_egress(n, &mut out, sent);
        // Keep the larger of the two buffers when a nested call took its own.
        if out.capacity() >= self.egress.capacity() {
            self.egress = out;
        }
    }

    /// The frame a pod on a bridged node sends for `p`, and the bridge port it enters by
    /// (`Netns::station_frame`: to the gateway's MAC for a destination off the pod's
    /// subnet, else to the destination's). `Ok(None)` for a packet that does not come from
    /// a pod on a bridge; `Err` when the pod's ARP for an on-link destination is unanswered
    /// (nothing is sent).
    fn bridge_frame(
        &self,
        n: usize,
        p: &Packet,
        from: Ingress,
    ) -> Result<Option<(sim_netfilter::netns::Frame, IfName)>, String> {
        let Ingress::Interface(port) = from else {
            return Ok(None);
        };
        if self.sc.cni.bridge().is_none() {
            return Ok(None);
        }
        match self.nodes[n].netns.station_frame(port, p) {
            None => Ok(None),
            Some(Ok(frame)) => Ok(Some((frame, port))),
            Some(Err(to)) => Err(format!(
                "ARP: {to} unanswered on the pod's link, nothing sent"
            )),
        }
    }

    pub(super) fn node_egress(
        &mut self,
        n: usize,
        out: &mut Vec<Egress>,
        sent: Option<(Packet, Tag)>,
    ) {
        for e in out.drain(..) {
            match e {
                Egress::LocalDeliver { packet } => {
                    self.dnat_note(n, sent, &packet);
                    self.queue
                        .push(self.now, Ev::Deliver(Dest::NodeStack(n), packet));
                }
                Egress::Transmit {
                    dev,
                    next_hop,
                    packet,
                } => {
                    if dev == eth0() {
                        if let Some(w) = self.nodes[n].netns.take_vxlan_sent(&packet) {
                            self.dnat_note(n, sent, &w.inner);
                            self.vxlan_network(n, next_hop, w);
                            continue;
                        }
                    }
                    self.dnat_note(n, sent, &packet);
                    if dev == eth0() {
                        // (The namespace has taken a hop off a forwarded packet's TTL.)
                        let mut packet = packet;
                        packet.iif = None;
                        packet.oif = None;
                        self.network(next_hop, packet, Some(n));
                    } else if dev == calico::tunl0() && matches!(self.sc.cni, Cni::Calico(_)) {
                        self.ipip_xmit(n, next_hop, packet);
                    } else if let Some(&id) = self.nodes[n].veths.get(&dev) {
                        self.tap_veth_tx(n, dev, &packet);
                        self.queue
                            .push(self.now, Ev::Deliver(Dest::Pod(id), packet));
                    }
                }
            }
        }
    }

    pub(super) fn dnat_note(&mut self, n: usize, sent: Option<(Packet, Tag)>, out: &Packet) {
        let Some((orig, tag)) = sent else { return };
        if !self.recording
            || out.tag != orig.tag
            || (orig.dst == out.dst && orig.dport() == out.dport())
        {
            return;
        }
        // Only the first packet of a query/connection try, to keep the timeline readable.
        if let L4::Tcp { flags, .. } = orig.l4 {
            if !flags.contains(sim_core::TcpFlags::SYN) {
                return;
            }
        }
        let fmt = |p: &Packet| match p.dport() {
            Some(port) => SocketAddr::new(p.dst, port).to_string(),
            None => p.dst.to_string(),
        };
        let what = What::Dnat {
            client: self.clients[tag.client as usize].def.name.clone(),
            // A resolver's query is numbered by its lookup.
            query: match crate::dns::tag::decode(orig.tag) {
                Some(crate::dns::tag::DnsMessage::Query { lookup, .. }) => u32::from(lookup),
                _ => tag.seq,
            },
            node: self.nodes[n].def.name.clone(),
            from: fmt(&orig),
            to: fmt(out),
        };
        self.log(what);
    }

    pub(super) fn deliver(&mut self, dest: Dest, p: Packet) {
        match dest {
            Dest::NodeIn(n, dev, hop) => {
                self.tap_rx(n, dev, hop, &p);
                self.node_kernel(n, p, Ingress::Interface(dev))
            }
            Dest::NodeOut(n) => self.node_kernel(n, p, Ingress::Local),
            Dest::NodeStack(n) => self.deliver_to_stack(Machine::Node(n), p),
            Dest::Host(h) => self.deliver_to_stack(Machine::Host(h), p),
            Dest::Pod(k) => {
                let Some(pod) = self.pods.get(k) else { return };
                if !pod.state.has_network() || !pod.state.def.has_ip(p.dst) {
                    return;
                }
                if let Some(t) = self.client_tag(&p, false) {
                    // A client's request, not an answer to the client's own socket: a pod
                    // reaching itself through its Service (hairpin) is both client and
                    // endpoint, and its request counts.
                    let c = &self.clients[t.client as usize];
                    // A resolver's answer that comes after its socket closed (glibc's AAAA
                    // answer once the A answer sent it to TCP) is still no request.
                    let answer = matches!(
                        crate::dns::tag::decode(p.tag),
                        Some(crate::dns::tag::DnsMessage::Answer(_))
                    );
                    let to_client = c.machine == Machine::Pod(k)
                        && c.ip == p.dst
                        && (answer || p.dport().is_some_and(|d| c.app.owns(p.protocol(), d)));
                    if !to_client {
                        if let (Some(sport), L4::Udp { .. } | L4::Tcp { .. }) = (p.sport(), p.l4) {
                            let hit = Hit {
                                at: self.now,
                                pod: k,
                                ip: p.dst,
                                client: t.client as usize,
                                src: SocketAddr::new(p.src, sport),
                                proto: p.protocol(),
                            };
                            let ids = &self.pod_ids;
                            self.tally.hit(&hit, |key, id| ids.get(key) == Some(&id));
                        }
                    }
                }
                self.deliver_to_stack(Machine::Pod(k), p);
            }
        }
    }

    /// A datagram of a one-way sender reached a listening process: its send is delivered.
    fn one_way_delivered(&mut self, p: &Packet) {
        let Some(t) = self.client_tag(p, false) else {
            return;
        };
        let i = t.client as usize;
        let now = self.now;
        let mut out = Outbox::new();
        match &mut self.clients[i].app {
            ClientApp::Udp(c) if c.one_way() => c.delivered(now, t.seq, &mut out),
            _ => return,
        }
        self.client_output(i, out);
    }

    /// The client tag of a packet sent by (`outbound`) or to a client's request socket.
    pub(super) fn client_tag(&self, p: &Packet, outbound: bool) -> Option<Tag> {
        let t = Tag::unpack(p.tag)?;
        let c = self.clients.get(t.client as usize)?;
        (!outbound || c.ip == p.src).then_some(t)
    }

    /// Moves node `n`'s conntrack events to the timeline and re-arms its expiry timer.
    pub(super) fn after_kernel(&mut self, n: usize) {
        let evs = self.nodes[n].netns.drain_conntrack_events();
        if self.tally.watches_ct_events() {
            for e in &evs {
                self.tally.ct_event(n, e);
            }
        }
        if self.recording && self.opts.conntrack_events {
            let node = self.nodes[n].def.name.clone();
            for e in evs {
                let event = match e.kind {
                    EventKind::New => "NEW",
                    EventKind::Update => "UPDATE",
                    EventKind::Destroy => "DESTROY",
                };
                self.log(What::Conntrack {
                    node: node.clone(),
                    event: event.to_string(),
                    cause: record::destroy_cause(e.cause),
                    line: e.to_string(),
                    entry: CtRecord::of_event(&e),
                    ct: e.entry,
                });
            }
        }
        self.arm_ct(n);
    }

    pub(super) fn deliver_to_stack(&mut self, m: Machine, p: Packet) {
        self.sighted(&m, &p, None);
        let (proto, dport) = match p.l4 {
            L4::Icmp {
                body: sim_core::IcmpBody::Error(inner),
                ..
            } => (inner.proto, inner.sport),
            // An echo reply goes to the ping socket with its identifier (ping_lookup).
            L4::Icmp {
                body: sim_core::IcmpBody::Query { id, .. },
                ..
            } => (p.protocol(), id),
            _ => (p.protocol(), p.dport().unwrap_or(0)),
        };
        let is_error = matches!(
            p.l4,
            L4::Icmp {
                body: sim_core::IcmpBody::Error(_),
                ..
            }
        );
        let alive = match &m {
            Machine::Pod(id) => self.pods.get(*id).is_some_and(|p| p.state.process_alive),
            _ => true,
        };
        // An echo request is the kernel's to answer (icmp_echo), process or not.
        if let Some(reply) = crate::cluster::ping::echo_reply(&p) {
            self.send_from(&m, vec![reply]);
            return;
        }
        let mut out = Outbox::new();
        let now = self.now;
        // Servers first (a server port), then clients' sockets.
        let mut handled = false;
        if alive && !is_error {
            if let Some(stack) = self.stack_mut(&m) {
                if let Some(s) = stack.servers.get_mut(&(proto, dport)) {
                    match s {
                        Server::Udp(u) => u.handle_packet(now, &p, &mut out),
                        Server::Tcp(t) => t.handle_packet(now, &p, &mut out),
                    }
                    handled = true;
                }
            }
        }
        if handled {
            self.send_from(&m, out.packets);
            self.arm_stack(&m);
            self.one_way_delivered(&p);
            return;
        }
        let owner = self
            .client_ports
            .get(&(p.dst, proto, dport))
            .and_then(|set| set.iter().copied().find(|&i| self.clients[i].machine == m))
            .filter(|&i| match &self.clients[i].app {
                ClientApp::Udp(c) => is_error || c.accepts(&p),
                _ => true,
            });
        if let Some(i) = owner {
            if matches!(self.clients[i].app, ClientApp::Resolver(_)) {
                // The host's connect() port state, lent for a TCP retry the answer may start.
                let mut connect = self
                    .stack_mut(&m)
                    .map(|s| std::mem::take(&mut s.connect))
                    .unwrap_or_default();
                let ip = self.clients[i].ip;
                let table = &self.client_ports;
                let udp_busy = |p: u16| table.contains_key(&(ip, 17, p));
                let tcp_busy = |p: u16| table.contains_key(&(ip, 6, p));
                if let ClientApp::Resolver(c) = &mut self.clients[i].app {
                    c.handle_packet(now, &p, &udp_busy, &tcp_busy, &mut connect, &mut out);
                }
                if let Some(s) = self.stack_mut(&m) {
                    s.connect = connect;
                }
                self.client_output(i, out);
                return;
            }
            match &mut self.clients[i].app {
                ClientApp::Resolver(_) => {}
                ClientApp::Udp(c) => c.handle_packet(now, &p, &mut out),
                ClientApp::Tcp(c) => c.handle_packet(now, &p, &mut out),
                ClientApp::TcpSession(c) => c.handle_packet(now, &p, &mut out),
                ClientApp::Ping(c) => c.handle_packet(now, &p, &mut out),
            }
            self.client_output(i, out);
            return;
        }
        if self.pcap_receives(&p, proto, dport) {
            return;
        }
        if !is_error {
            if let Some(r) = closed_port_response(&p) {
                // icmp_send's per-destination rate limit (the RST a closed TCP port sends
                // is not limited).
                let allowed = match &m {
                    Machine::Node(n) => self.nodes[*n].netns.icmp_error_allowed(now, &r),
                    _ => match (self.stack_mut(&m), r.l4, r.dst) {
                        (
                            Some(stack),
                            L4::Icmp {
                                icmp_type, code, ..
                            },
                            IpAddr::V4(dst),
                        ) => stack.icmp.allow(now, dst, icmp_type, code, r.dst == r.src),
                        _ => true,
                    },
                };
                if allowed {
                    self.send_from(&m, vec![r]);
                }
            }
        }
    }

    pub(super) fn client_output(&mut self, i: usize, out: Outbox) {
        if !self.keep_queries {
            let taken = self.clients[i].app.take_finished();
            let first_event = self.sc.first_change().map(|e| e.at);
            self.tally.take(i, &taken, self.now, first_event);
        }
        self.note_ports(i, &out.ports);
        self.note_ports_of(i, 6, &out.tcp_ports);
        let m = self.clients[i].machine.clone();
        let (name, events) = if self.recording {
            (self.clients[i].def.name.clone(), out.events)
        } else {
            (String::new(), Vec::new())
        };
        for (_, e) in events {
            let what = match e {
                AppEvent::QuerySent {
                    query,
                    attempt,
                    src,
                    dst,
                } => What::QuerySent {
                    client: name.clone(),
                    query,
                    attempt,
                    src: src.to_string(),
                    dst: dst.to_string(),
                },
                AppEvent::QueryAnswered { query, rtt, from } => What::QueryAnswered {
                    client: name.clone(),
                    query,
                    rtt_ns: rtt.as_nanos(),
                    from: from.to_string(),
                },
                AppEvent::QueryTimedOut { query, attempts } => What::QueryTimedOut {
                    client: name.clone(),
                    query,
                    attempts,
                },
                AppEvent::QueryRefused {
                    query,
                    code,
                    icmpv6,
                } => What::QueryRefused {
                    client: name.clone(),
                    query,
                    code,
                    icmpv6,
                },
                AppEvent::IcmpIgnored { query, code, from } => What::IcmpIgnored {
                    client: name.clone(),
                    query,
                    code,
                    icmpv6: from.is_ipv6(),
                    from: from.to_string(),
                },
                AppEvent::TcpConnecting { conn, src, dst } => What::TcpConnect {
                    client: name.clone(),
                    conn,
                    src: src.to_string(),
                    dst: dst.to_string(),
                },
                AppEvent::TcpCompleted { conn, rtt } => What::TcpDone {
                    client: name.clone(),
                    conn,
                    rtt_ns: rtt.as_nanos(),
                },
                AppEvent::TcpFailed { conn, reason } => What::TcpFailed {
                    client: name.clone(),
                    conn,
                    reason: reason.to_string(),
                },
                AppEvent::PingSent {
                    query,
                    ident,
                    icmp_seq,
                    src,
                    dst,
                } => What::PingSent {
                    client: name.clone(),
                    query,
                    ident,
                    icmp_seq,
                    src: src.to_string(),
                    dst: dst.to_string(),
                },
                AppEvent::PingAnswered { query, rtt, from } => What::QueryAnswered {
                    client: name.clone(),
                    query,
                    rtt_ns: rtt.as_nanos(),
                    from: from.to_string(),
                },
                AppEvent::TcpConnection {
                    conn,
                    request,
                    change,
                } => What::TcpConnection {
                    client: name.clone(),
                    conn,
                    request,
                    change,
                },
                AppEvent::TcpRequestSent {
                    request,
                    conn,
                    src,
                    dst,
                } => What::TcpRequest {
                    client: name.clone(),
                    request,
                    conn,
                    src: src.to_string(),
                    dst: dst.to_string(),
                },
                AppEvent::TcpRequestAnswered { request, conn, rtt } => What::TcpAnswered {
                    client: name.clone(),
                    request,
                    conn,
                    rtt_ns: rtt.as_nanos(),
                },
                AppEvent::TcpRequestFailed {
                    request,
                    conn,
                    reason,
                } => What::TcpRequestFailed {
                    client: name.clone(),
                    request,
                    conn,
                    reason: reason.to_string(),
                },
                AppEvent::DnsQuery {
                    lookup,
                    name: qname,
                    qtype,
                    tcp,
                    src,
                    dst,
                } => What::DnsQuery {
                    client: name.clone(),
                    lookup,
                    name: self.sc.dns.names.name(qname).to_string(),
                    qtype: qtype.to_string(),
                    transport: if tcp { "tcp" } else { "udp" },
                    src: src.to_string(),
                    dst: dst.to_string(),
                },
                AppEvent::DnsAnswer {
                    lookup,
                    name: qname,
                    qtype,
                    nxdomain,
                    records,
                    truncated,
                    tcp,
                    from,
                } => What::DnsAnswer {
                    client: name.clone(),
                    lookup,
                    name: self.sc.dns.names.name(qname).to_string(),
                    qtype: qtype.to_string(),
                    rcode: if nxdomain { "NXDOMAIN" } else { "NOERROR" },
                    records,
                    truncated,
                    transport: if tcp { "tcp" } else { "udp" },
                    from: from.to_string(),
                },
                AppEvent::LookupEnded {
                    lookup,
                    name: lname,
                    result,
                    records,
                    latency,
                    tried,
                    tcp,
                } => What::Lookup {
                    client: name.clone(),
                    lookup,
                    name: lname,
                    result,
                    records,
                    latency_ns: latency.as_nanos(),
                    tried: tried
                        .iter()
                        .map(|n| self.sc.dns.names.name(*n).to_string())
                        .collect(),
                    tcp,
                },
                AppEvent::ServerAnswered { .. } => continue,
            };
            self.log(what);
        }
        // A client in a pod whose network is gone sends nothing.
        self.send_from(&m, out.packets);
        self.arm_client(i);
    }

    /// Files client `i`'s port changes in the host's table.
    fn note_ports(&mut self, i: usize, changes: &[(u16, bool)]) {
        let proto = self.clients[i].app.proto();
        self.note_ports_of(i, proto, changes);
    }

    fn note_ports_of(&mut self, i: usize, proto: u8, changes: &[(u16, bool)]) {
        let ip = self.clients[i].ip;
        for &(port, bound) in changes {
            let key = (ip, proto, port);
            if bound {
                let holders = self.client_ports.entry(key).or_default();
                if let Err(k) = holders.binary_search(&i) {
                    holders.insert(k, i);
                }
            } else if let Some(holders) = self.client_ports.get_mut(&key) {
                if let Ok(k) = holders.binary_search(&i) {
                    holders.remove(k);
                }
                if holders.is_empty() {
                    self.client_ports.remove(&key);
                }
            }
        }
    }
}
