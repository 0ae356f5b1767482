//! The stub resolver client ([`ResolverClient`]): a loop of `getaddrinfo` calls (glibc's or
//! musl's, [`crate::dns::Resolver`]) on a pod, node or host, with the sockets the
//! resolver asks for: UDP sockets on ephemeral ports drawn as the kernel draws them, and the
//! TCP connections of a retry over TCP (connect, the queries with their two-octet length,
//! the answers, FIN, TIME_WAIT), their ports from the host's [`ConnectPorts`].
//!
//! Its queries and the answers to them carry the DNS message in the packet's tag
//! ([`crate::dns::tag`]) and are as long as the message is.

use super::{
    draw_ephemeral_port, tcp_packet, tcp_seg_len, AppEvent, ClientSchedule, Outbox, Pacing,
    PortsInUse, QueryOutcome, QueryRecord, Scheduler, TCP_TIMEWAIT_LEN,
};
use crate::cluster::ports::ConnectPorts;
use crate::cluster::querylog::QueryLog;
use crate::dns::tag::{self as dtag, DnsMessage};
use crate::dns::{
    Action, DnsData, LookupRecord, LookupResult, NameId, Query, ResolvConf, Resolver, SocketId,
};
use crate::dns::{Libc, Rcode};
use sim_core::{IcmpBody, Packet, SimRng, SimTime, TcpFlags, L4};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// One name a resolver client looks up: the names it asks, in order, and whether glibc asks
/// it as it is first.
#[derive(Clone, Debug)]
pub struct LookupPlan {
    /// The name as the scenario wrote it.
    pub name: String,
    /// The names asked ([`crate::dns::candidates`]), interned.
    pub candidates: Vec<NameId>,
    /// [`crate::dns::resolver::asks_as_is_first`].
    pub as_is_first: bool,
}

/// The configuration of a [`ResolverClient`].
#[derive(Clone, Debug)]
pub struct ResolverClientConfig {
    /// Index of the client in the scenario (goes into the tags).
    pub index: u32,
    /// The client's address.
    pub local_ip: IpAddr,
    /// Whose resolver.
    pub libc: Libc,
    /// Its `resolv.conf`.
    pub conf: ResolvConf,
    /// The names, one per run, in turn.
    pub plans: Vec<LookupPlan>,
    /// When it runs: the first lookup at the start, each next one `interval` after the one
    /// before returned.
    pub schedule: ClientSchedule,
    /// The run's names.
    pub dns: Arc<DnsData>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TcpState {
    SynSent,
    Established,
    /// Its FIN sent once every answer was in.
    FinSent,
}

#[derive(Clone, Debug)]
struct TcpConn {
    port: u16,
    ns: usize,
    state: TcpState,
    snd_nxt: u32,
    rcv_nxt: u32,
    queries: [Option<Query>; 2],
    answers: u8,
    tag: u64,
}

#[derive(Clone, Debug)]
enum Sock {
    Udp { port: u16 },
    Tcp(TcpConn),
}

/// A resolver client: `while :; do getent ahosts NAME; sleep S; done` with one C library's
/// stub resolver (docs/resolver.md).
///
/// A TCP connection whose handshake or answers do not come within the resolver's
/// `timeout` fails (as `send_vc`'s blocking read does once its time is out); a closed one
/// holds its port in TIME_WAIT for [`TCP_TIMEWAIT_LEN`].
#[derive(Debug, Clone)]
pub struct ResolverClient {
    cfg: ResolverClientConfig,
    resolver: Resolver,
    sends: Scheduler,
    port_rng: SimRng,
    isn_rng: SimRng,
    socks: BTreeMap<SocketId, Sock>,
    udp_ports: BTreeMap<u16, SocketId>,
    tcp_ports: BTreeMap<u16, SocketId>,
    /// TCP ports in TIME_WAIT, until when.
    time_wait: BTreeMap<u16, SimTime>,
    /// TCP connections' deadlines.
    tcp_deadline: BTreeMap<SocketId, SimTime>,
    /// The lookup under way: its number and plan index.
    current: Option<u32>,
    lookups: Vec<LookupRecord>,
    records: QueryLog,
}

/// A lookup as the summary, the headline and the blackhole time count it: answered when its
/// nameservers answered, with addresses or without (NXDOMAIN, NODATA: the network delivered,
/// the name does not resolve; `client.lookups` tells them apart), else timed out or refused.
fn outcome(r: LookupResult, at: SimTime) -> QueryOutcome {
    match r {
        LookupResult::Answered { .. } | LookupResult::NxDomain | LookupResult::NoData => {
            QueryOutcome::Answered(at)
        }
        LookupResult::TimedOut => QueryOutcome::TimedOut(at),
        LookupResult::Refused => {
            QueryOutcome::IcmpError(at, sim_core::packet::icmp::CODE_PORT_UNREACH)
        }
    }
}

/// The keys of `deadlines` due at `now`, in order.
fn due<K: Copy + Ord>(deadlines: &BTreeMap<K, SimTime>, now: SimTime) -> Vec<K> {
    deadlines
        .iter()
        .filter(|(_, t)| **t <= now)
        .map(|(k, _)| *k)
        .collect()
}

impl ResolverClient {
    /// A client; `seed` and `label` name its seeded streams.
    pub fn new(cfg: ResolverClientConfig, seed: u64, label: &str) -> ResolverClient {
        let mut c = ResolverClient {
            resolver: Resolver::new(cfg.libc, cfg.conf.clone()),
            sends: Scheduler::new(seed, label),
            port_rng: SimRng::child(seed, label, "ports"),
            isn_rng: SimRng::child(seed, label, "isn"),
            socks: BTreeMap::new(),
            udp_ports: BTreeMap::new(),
            tcp_ports: BTreeMap::new(),
            time_wait: BTreeMap::new(),
            tcp_deadline: BTreeMap::new(),
            current: None,
            lookups: Vec::new(),
            records: QueryLog::new(),
            cfg,
        };
        c.sends.schedule(&c.cfg.schedule, Pacing::Sequential);
        c
    }

    /// The configuration.
    pub fn config(&self) -> &ResolverClientConfig {
        &self.cfg
    }

    /// Every lookup that has ended, in order.
    pub fn lookups(&self) -> &[LookupRecord] {
        &self.lookups
    }

    /// The lookups kept as query records (one per lookup): every one so far, unless the
    /// driver took the finished ones.
    pub fn records(&self) -> &[QueryRecord] {
        self.records.kept()
    }

    /// Removes the finished lookups' records at the front and returns them.
    pub fn take_finished(&mut self) -> Vec<QueryRecord> {
        let cur = self.current;
        self.records.take_finished(|seq| cur == Some(seq))
    }

    /// The UDP ports it has bound.
    pub fn udp_ports(&self) -> BTreeSet<u16> {
        self.udp_ports.keys().copied().collect()
    }

    /// The TCP ports it holds (connections and TIME_WAIT).
    pub fn tcp_ports(&self) -> BTreeSet<u16> {
        self.tcp_ports
            .keys()
            .chain(self.time_wait.keys())
            .copied()
            .collect()
    }

    /// Whether it has `port` of protocol `proto` (17 or 6).
    pub fn binds(&self, proto: u8, port: u16) -> bool {
        match proto {
            17 => self.udp_ports.contains_key(&port),
            6 => self.tcp_ports.contains_key(&port) || self.time_wait.contains_key(&port),
            _ => false,
        }
    }

    /// The next instant it needs [`ResolverClient::handle_timeout`].
    pub fn poll_timeout(&self) -> Option<SimTime> {
        [
            self.sends.next(),
            self.resolver.poll_timeout(),
            self.tcp_deadline.values().min().copied(),
            self.time_wait.values().min().copied(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn ns_addr(&self, ns: usize) -> SocketAddr {
        SocketAddr::new(self.cfg.conf.nameservers[ns], 53)
    }

    /// Starts due lookups, ends what timed out. `udp_busy` and `tcp_busy` tell the ports
    /// other sockets of the host hold; `connect` is the host's TCP port allocator.
    pub fn handle_timeout<U: PortsInUse + ?Sized, T: PortsInUse + ?Sized>(
        &mut self,
        now: SimTime,
        udp_busy: &U,
        tcp_busy: &T,
        connect: &mut ConnectPorts,
        out: &mut Outbox,
    ) {
        for p in due(&self.time_wait, now) {
            self.time_wait.remove(&p);
            if !self.tcp_ports.contains_key(&p) {
                out.tcp_ports.push((p, false));
            }
        }
        for s in due(&self.tcp_deadline, now) {
            self.drop_tcp(s, out);
            self.resolver.handle_tcp_failed(now, s);
        }
        if self.resolver.poll_timeout().is_some_and(|t| t <= now) {
            self.resolver.handle_timeout(now);
        }
        if !self.resolver.busy() {
            if let Some(k) = self
                .sends
                .take_due(now, &self.cfg.schedule, Pacing::Sequential)
            {
                let plan = &self.cfg.plans[k as usize % self.cfg.plans.len()];
                self.records.push(QueryRecord {
                    seq: k,
                    sent_at: now,
                    src_port: 0,
                    attempts: 0,
                    outcome: QueryOutcome::Pending,
                });
                self.current = Some(k);
                // Each run is a process of its own (`getent ahosts NAME` in a loop): the
                // resolver state glibc keeps for a process's life starts from resolv.conf.
                self.resolver.new_process();
                self.resolver
                    .start(now, k, plan.candidates.clone(), plan.as_is_first);
            }
        }
        self.act(now, udp_busy, tcp_busy, connect, out);
    }

    fn drop_tcp(&mut self, s: SocketId, out: &mut Outbox) {
        self.tcp_deadline.remove(&s);
        if let Some(Sock::Tcp(c)) = self.socks.remove(&s) {
            self.tcp_ports.remove(&c.port);
            if !self.time_wait.contains_key(&c.port) {
                out.tcp_ports.push((c.port, false));
            }
        }
    }

    /// Carries out the resolver's actions, then records the lookups that ended.
    fn act<U: PortsInUse + ?Sized, T: PortsInUse + ?Sized>(
        &mut self,
        now: SimTime,
        udp_busy: &U,
        tcp_busy: &T,
        connect: &mut ConnectPorts,
        out: &mut Outbox,
    ) {
        let lookup = self.current.unwrap_or(0);
        for a in self.resolver.take_actions() {
            match a {
                Action::Open(s) => {
                    let mine = &self.udp_ports;
                    let busy = |p: u16| udp_busy.in_use(p) || mine.contains_key(&p);
                    // Every port taken: the socket has none, its queries go nowhere and
                    // the resolver times out (EADDRINUSE is not modelled further).
                    if let Some(port) = draw_ephemeral_port(&mut self.port_rng, &busy) {
                        self.udp_ports.insert(port, s);
                        self.socks.insert(s, Sock::Udp { port });
                        out.ports.push((port, true));
                    }
                }
                Action::Close(s) => {
                    if let Some(Sock::Udp { port }) = self.socks.remove(&s) {
                        self.udp_ports.remove(&port);
                        out.ports.push((port, false));
                    }
                }
                Action::SendUdp { socket, ns, query } => {
                    let Some(Sock::Udp { port }) = self.socks.get(&socket) else {
                        continue;
                    };
                    let src = SocketAddr::new(self.cfg.local_ip, *port);
                    let dst = self.ns_addr(ns);
                    let mut p = Packet::udp(src, dst);
                    p.len = 28 + query.wire_len(&self.cfg.dns.names) as u16;
                    p.tag = dtag::query_tag(self.cfg.index, lookup, query);
                    out.packets.push(p);
                    if let Some(r) = self.records.get_mut(lookup) {
                        r.attempts = r.attempts.saturating_add(1);
                        if r.src_port == 0 {
                            r.src_port = src.port();
                        }
                    }
                    out.events.push((
                        now,
                        AppEvent::DnsQuery {
                            lookup,
                            name: query.name,
                            qtype: query.qtype,
                            tcp: false,
                            src,
                            dst,
                        },
                    ));
                }
                Action::SendTcp { conn, ns, queries } => {
                    let dst = self.ns_addr(ns);
                    let (tports, tw) = (&self.tcp_ports, &self.time_wait);
                    let busy = |p: u16| {
                        tcp_busy.in_use(p) || tports.contains_key(&p) || tw.contains_key(&p)
                    };
                    let Some(port) = connect.pick(self.cfg.local_ip, dst, &busy) else {
                        self.resolver.handle_tcp_failed(now, conn);
                        continue;
                    };
                    let Some(first) = queries[0] else {
                        continue;
                    };
                    let isn = self.isn_rng.next_u32();
                    let tag = dtag::query_tag(self.cfg.index, lookup, first);
                    let src = SocketAddr::new(self.cfg.local_ip, port);
                    let mut syn = tcp_packet(src, dst, TcpFlags::SYN, isn, 0, 0);
                    syn.tag = tag;
                    out.packets.push(syn);
                    out.tcp_ports.push((port, true));
                    self.tcp_ports.insert(port, conn);
                    self.socks.insert(
                        conn,
                        Sock::Tcp(TcpConn {
                            port,
                            ns,
                            state: TcpState::SynSent,
                            snd_nxt: isn.wrapping_add(1),
                            rcv_nxt: 0,
                            queries,
                            answers: 0,
                            tag,
                        }),
                    );
                    let wait =
                        sim_core::SimDuration::from_secs(u64::from(self.cfg.conf.timeout_secs));
                    self.tcp_deadline.insert(conn, now + wait);
                    for q in queries.into_iter().flatten() {
                        out.events.push((
                            now,
                            AppEvent::DnsQuery {
                                lookup,
                                name: q.name,
                                qtype: q.qtype,
                                tcp: true,
                                src,
                                dst,
                            },
                        ));
                    }
                }
            }
        }
        for r in self.resolver.take_finished() {
            let latency = r.ended.saturating_since(r.started);
            let plan = &self.cfg.plans[r.seq as usize % self.cfg.plans.len()];
            let records = match r.result {
                LookupResult::Answered { records } => records,
                _ => 0,
            };
            out.events.push((
                now,
                AppEvent::LookupEnded {
                    lookup: r.seq,
                    name: plan.name.clone(),
                    result: r.result.word(),
                    records,
                    latency,
                    tried: r.tried.clone(),
                    tcp: r.tcp,
                },
            ));
            if let Some(q) = self.records.get_mut(r.seq) {
                q.outcome = outcome(r.result, r.ended);
            }
            self.current = None;
            self.sends
                .follow(&self.cfg.schedule, r.ended + self.cfg.schedule.interval);
            self.lookups.push(r);
        }
    }

    /// A packet for one of its ports arrived (an answer, a TCP segment, an ICMP error).
    pub fn handle_packet<U: PortsInUse + ?Sized, T: PortsInUse + ?Sized>(
        &mut self,
        now: SimTime,
        pkt: &Packet,
        udp_busy: &U,
        tcp_busy: &T,
        connect: &mut ConnectPorts,
        out: &mut Outbox,
    ) {
        let lookup = self.current.unwrap_or(0);
        match pkt.l4 {
            L4::Icmp {
                body: IcmpBody::Error(inner),
                ..
            } => {
                if inner.proto == 17 {
                    if let Some(&s) = self.udp_ports.get(&inner.sport) {
                        self.resolver.handle_unreachable(now, s);
                    }
                } else if let Some(&s) = self.tcp_ports.get(&inner.sport) {
                    self.drop_tcp(s, out);
                    self.resolver.handle_tcp_failed(now, s);
                }
            }
            L4::Udp { dport, sport } => {
                let Some(&s) = self.udp_ports.get(&dport) else {
                    return;
                };
                // Answers from an address it did not ask are dropped (glibc's socket is
                // connected; musl checks the source against its nameservers).
                let from = SocketAddr::new(pkt.src, sport);
                let Some(ns) =
                    (0..self.cfg.conf.nameservers.len()).find(|&k| self.ns_addr(k) == from)
                else {
                    return;
                };
                if let Some(DnsMessage::Answer(a)) = dtag::decode(pkt.tag) {
                    self.answer_event(now, lookup, a, false, from, out);
                    self.resolver.handle_answer(now, s, ns, a);
                }
            }
            L4::Tcp {
                dport, flags, seq, ..
            } => {
                let Some(&s) = self.tcp_ports.get(&dport) else {
                    if self.time_wait.contains_key(&dport) && flags.contains(TcpFlags::FIN) {
                        // tcp_timewait_state_process: a retransmitted FIN is acknowledged.
                        self.time_wait.insert(dport, now + TCP_TIMEWAIT_LEN);
                    }
                    return;
                };
                self.tcp_segment(now, s, pkt, flags, seq, lookup, out);
            }
            _ => {}
        }
        self.act(now, udp_busy, tcp_busy, connect, out);
    }

    fn answer_event(
        &self,
        now: SimTime,
        lookup: u32,
        a: crate::dns::Answer,
        tcp: bool,
        from: SocketAddr,
        out: &mut Outbox,
    ) {
        out.events.push((
            now,
            AppEvent::DnsAnswer {
                lookup,
                name: a.query.name,
                qtype: a.query.qtype,
                nxdomain: a.rcode == Rcode::NxDomain,
                records: a.records,
                truncated: a.truncated,
                tcp,
                from,
            },
        ));
    }

    #[allow(clippy::too_many_arguments)]
    fn tcp_segment(
        &mut self,
        now: SimTime,
        s: SocketId,
        pkt: &Packet,
        flags: TcpFlags,
        seq: u32,
        lookup: u32,
        out: &mut Outbox,
    ) {
        let Some(Sock::Tcp(c)) = self.socks.get_mut(&s) else {
            return;
        };
        let local = SocketAddr::new(self.cfg.local_ip, c.port);
        let Some(sport) = pkt.sport() else { return };
        let peer = SocketAddr::new(pkt.src, sport);
        if flags.contains(TcpFlags::RST) {
            let done = c.state == TcpState::FinSent;
            self.drop_tcp(s, out);
            if !done {
                self.resolver.handle_tcp_failed(now, s);
            }
            return;
        }
        let names = &self.cfg.dns.names;
        match c.state {
            TcpState::SynSent if flags.contains(TcpFlags::SYN | TcpFlags::ACK) => {
                c.rcv_nxt = seq.wrapping_add(1);
                c.state = TcpState::Established;
                // The handshake's ACK, then each query as its own write (two-octet length
                // and message, RFC 1035 §4.2.2), PSH set.
                let mut ack = tcp_packet(local, peer, TcpFlags::ACK, c.snd_nxt, c.rcv_nxt, 0);
                ack.tag = c.tag;
                out.packets.push(ack);
                for q in c.queries.into_iter().flatten() {
                    let len = 2 + q.wire_len(names) as u16;
                    let mut p = tcp_packet(
                        local,
                        peer,
                        TcpFlags::PSH | TcpFlags::ACK,
                        c.snd_nxt,
                        c.rcv_nxt,
                        len,
                    );
                    p.tag = dtag::query_tag(self.cfg.index, lookup, q);
                    c.snd_nxt = c.snd_nxt.wrapping_add(u32::from(len));
                    out.packets.push(p);
                }
            }
            TcpState::Established | TcpState::FinSent => {
                let data = tcp_seg_len(pkt)
                    - u32::from(flags.contains(TcpFlags::FIN))
                    - u32::from(flags.contains(TcpFlags::SYN));
                if data > 0 && seq == c.rcv_nxt {
                    c.rcv_nxt = c.rcv_nxt.wrapping_add(data);
                    let mut ack = tcp_packet(local, peer, TcpFlags::ACK, c.snd_nxt, c.rcv_nxt, 0);
                    ack.tag = c.tag;
                    out.packets.push(ack);
                    if let Some(DnsMessage::Answer(a)) = dtag::decode(pkt.tag) {
                        c.answers += 1;
                        let all = usize::from(c.answers) >= c.queries.iter().flatten().count();
                        let ns = c.ns;
                        if all && c.state == TcpState::Established {
                            // Every answer in: close (FIN) as `__res_iclose` does.
                            let fin = tcp_packet(
                                local,
                                peer,
                                TcpFlags::FIN | TcpFlags::ACK,
                                c.snd_nxt,
                                c.rcv_nxt,
                                0,
                            );
                            let mut fin = fin;
                            fin.tag = c.tag;
                            c.snd_nxt = c.snd_nxt.wrapping_add(1);
                            c.state = TcpState::FinSent;
                            out.packets.push(fin);
                            self.tcp_deadline.remove(&s);
                        }
                        self.answer_event(now, lookup, a, true, peer, out);
                        self.resolver.handle_answer(now, s, ns, a);
                    }
                }
                let Some(Sock::Tcp(c)) = self.socks.get_mut(&s) else {
                    return;
                };
                if flags.contains(TcpFlags::FIN) {
                    c.rcv_nxt = c.rcv_nxt.wrapping_add(1);
                    let mut ack = tcp_packet(local, peer, TcpFlags::ACK, c.snd_nxt, c.rcv_nxt, 0);
                    ack.tag = c.tag;
                    out.packets.push(ack);
                    if c.state == TcpState::FinSent {
                        // Closed first: TIME_WAIT holds the port.
                        let port = c.port;
                        self.socks.remove(&s);
                        self.tcp_ports.remove(&port);
                        self.tcp_deadline.remove(&s);
                        self.time_wait.insert(port, now + TCP_TIMEWAIT_LEN);
                    } else {
                        // The server closed before answering: the exchange failed.
                        self.drop_tcp(s, out);
                        self.resolver.handle_tcp_failed(now, s);
                    }
                }
            }
            TcpState::SynSent => {}
        }
    }
}
