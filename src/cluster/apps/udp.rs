//! The UDP applications: a DNS-like server answering each query after its service time
//! ([`UdpServer`]), and a query client with timeouts and retries, or a one-way sender
//! ([`UdpClient`]).

use super::{
    draw_ephemeral_port, due_at, AppEvent, ClientSchedule, Outbox, Pacing, PortsInUse,
    QueryOutcome, QueryRecord, Scheduler, Shift, SourcePort, Tag, Timers, UdpReply,
};
use crate::cluster::querylog::QueryLog;
use crate::dns::{self, tag::DnsMessage, DnsData, Transport};
use crate::scenario::model::UdpSocketUse;
use sim_core::packet::icmp;
use sim_core::{Packet, SimDuration, SimRng, SimTime, L4};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

/// A DNS-like UDP server: answers each datagram to its port after a service time, copying the
/// tag, from the address and port the query was sent to.
#[derive(Debug, Clone)]
pub struct UdpServer {
    /// The port it listens on.
    pub port: u16,
    /// The time it takes to answer one query.
    pub service_time: SimDuration,
    /// How it answers.
    pub reply: UdpReply,
    /// Its zone (`udpServer.zone`): the run's DNS and the zone's index in it. With one, a
    /// resolver's query is answered from the zone (NXDOMAIN, NODATA, truncated with TC over
    /// 512 octets or the query's EDNS0 size), the answer's length and tag its message's.
    pub zone: Option<(std::sync::Arc<DnsData>, usize)>,
    pending: Timers<Packet>,
    received: u64,
    answered: u64,
}

/// The answer of `zone` to the resolver query `pkt` carries, over `transport`: its tag and
/// its message length. `None` when `pkt` is not a resolver's query.
pub(crate) fn zone_answer(
    zone: &Option<(std::sync::Arc<DnsData>, usize)>,
    tag: u64,
    transport: Transport,
) -> Option<(u64, usize)> {
    let (dns, z) = zone.as_ref()?;
    let DnsMessage::Query { query, .. } = dns::tag::decode(tag)? else {
        return None;
    };
    let a = dns.zones.get(*z)?.answer(&dns.names, query, transport);
    Some((dns::tag::answer_tag(tag, a), a.wire_len(&dns.names)))
}

impl UdpServer {
    /// A server on `port` answering after `service_time`.
    pub fn new(port: u16, service_time: SimDuration) -> UdpServer {
        UdpServer::with_reply(port, service_time, UdpReply::SamePort)
    }
    /// A server on `port` that answers as `reply` says.
    pub fn with_reply(port: u16, service_time: SimDuration, reply: UdpReply) -> UdpServer {
        UdpServer {
            port,
            service_time,
            reply,
            zone: None,
            pending: Timers::default(),
            received: 0,
            answered: 0,
        }
    }
    /// A datagram for its port arrived.
    pub fn handle_packet(&mut self, now: SimTime, pkt: &Packet, _out: &mut Outbox) {
        let (L4::Udp { sport, dport }, true) = (pkt.l4, pkt.dport() == Some(self.port)) else {
            return;
        };
        self.received += 1;
        let from = match self.reply {
            UdpReply::Never => return,
            UdpReply::SamePort => dport,
            UdpReply::FromPort(p) => p,
        };
        let mut reply = Packet::udp(
            SocketAddr::new(pkt.dst, from),
            SocketAddr::new(pkt.src, sport),
        );
        reply.tag = pkt.tag;
        if let Some((tag, len)) = zone_answer(&self.zone, pkt.tag, Transport::Udp) {
            reply.tag = tag;
            reply.len = if reply.dst.is_ipv4() { 28 } else { 48 } + len as u16;
        }
        self.pending.add(now + self.service_time, reply);
    }
    /// Sends the answers that are due.
    pub fn handle_timeout(&mut self, now: SimTime, out: &mut Outbox) {
        while let Some(reply) = self.pending.pop_due(now) {
            self.answered += 1;
            if let Some(to) = reply.dport().map(|p| SocketAddr::new(reply.dst, p)) {
                out.events.push((
                    now,
                    AppEvent::ServerAnswered {
                        port: self.port,
                        to,
                    },
                ));
            }
            out.packets.push(reply);
        }
    }
    /// The next answer's deadline.
    pub fn poll_timeout(&self) -> Option<SimTime> {
        self.pending.next()
    }
    /// Queries received so far.
    pub fn received(&self) -> u64 {
        self.received
    }
    /// Answers sent so far.
    pub fn answered(&self) -> u64 {
        self.answered
    }
}

#[derive(Debug, Clone)]
struct Inflight {
    port: u16,
    attempt: u8,
    deadline: SimTime,
}

/// The configuration of a [`UdpClient`].
#[derive(Clone, Debug)]
pub struct UdpClientConfig {
    /// Index of the client in the scenario (goes into the [`Tag`]).
    pub index: u32,
    /// The client's address.
    pub local_ip: IpAddr,
    /// Where queries go.
    pub dst: SocketAddr,
    /// When it sends.
    pub schedule: ClientSchedule,
    /// Which source port it sends from.
    pub source_port: SourcePort,
    /// How long one try waits for an answer.
    pub timeout: SimDuration,
    /// How many times a query is re-sent after a timeout or an ICMP error (same port).
    pub retries: u8,
    /// Whether the query socket is connected. The kernel tells a UDP socket of an ICMP
    /// error only when it is connected (`__udp4_lib_err`: without `IP_RECVERR`, an error is
    /// dropped unless it is a hard error and `sk_state == TCP_ESTABLISHED`): glibc's and Go's
    /// resolvers connect and see `ECONNREFUSED` at once; a `sendto` on an unconnected
    /// socket (musl's resolver, many proxies) never hears of it and the try times out.
    pub connected: bool,
    /// A one-way sender (a statsd or syslog agent): it never reads answers and never
    /// retries. nfsim marks each send *delivered* ([`QueryOutcome::Answered`]) when it
    /// reaches a process listening on the destination port ([`UdpClient::delivered`]), and
    /// counts it failed when an ICMP error about it reaches a connected socket or when it was
    /// not delivered within `timeout`.
    pub one_way: bool,
    /// How it holds its socket over time: a `dig` loop (one query at a time, the port held
    /// only while it runs), a pause, a close and reopen ([`UdpSocketUse`]).
    pub socket: UdpSocketUse,
}

/// A UDP query client (a DNS stub resolver or sidecar): one query per interval, each with a
/// timeout and retries.
///
/// Retries reuse the query's socket and port, as glibc's resolver does. On a connected socket
/// (the default) an ICMP port unreachable about it ends the try at once (`ECONNREFUSED`) and a
/// retry follows at once if any is left; an unconnected one ignores it
/// ([`UdpClientConfig::connected`]). A per-query port is drawn uniformly from
/// 32768–60999 (Linux `ip_local_port_range`), skipping ports this host has in use.
///
/// A fixed or `fixed` port belongs to a socket that is open from the first query until the
/// schedule ends and the last query in flight has ended; a `reopen` gap closes it in between
/// ([`SocketGap`](crate::scenario::model::SocketGap)). Only while it is open does the host
/// count the port in use, so two clients can bind one fixed port in turn. A sequential client
/// (a `dig` loop, [`UdpSocketUse::sequential`]) binds its port for each query alone.
#[derive(Debug, Clone)]
pub struct UdpClient {
    cfg: UdpClientConfig,
    sends: Scheduler,
    port_rng: SimRng,
    fixed_port: Option<u16>,
    inflight: BTreeMap<u32, Inflight>,
    /// The queries in flight by deadline, and by port (oldest first): each send, timeout and
    /// answer costs O(log n) in the queries in flight.
    deadlines: BTreeSet<(SimTime, u32)>,
    by_port: BTreeSet<(u16, u32)>,
    records: QueryLog,
    /// Whether the long-lived socket of a fixed or `fixed` port is open (see
    /// [`UdpClient::long_lived`]).
    open: bool,
    /// When a `reopen` gap closes the socket, until it has.
    close_at: Option<SimTime>,
}

impl UdpClient {
    /// A client; `seed` and `label` name its seeded streams (`{label}/jitter`, `{label}/ports`).
    pub fn new(cfg: UdpClientConfig, seed: u64, label: &str) -> UdpClient {
        let mut c = UdpClient {
            sends: Scheduler::new(seed, label),
            port_rng: SimRng::child(seed, label, "ports"),
            fixed_port: match cfg.source_port {
                SourcePort::Fixed(p) if !cfg.socket.sequential => Some(p),
                _ => None,
            },
            open: false,
            close_at: cfg
                .socket
                .gap
                .filter(|g| g.closed)
                .map(|g| cfg.schedule.start + g.after),
            inflight: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            by_port: BTreeSet::new(),
            records: QueryLog::new(),
            cfg,
        };
        c.schedule_next();
        c
    }

    /// The configuration.
    pub fn config(&self) -> &UdpClientConfig {
        &self.cfg
    }

    /// The queries kept, in order: every query so far, unless the driver took the finished
    /// ones ([`UdpClient::take_finished`]).
    pub fn records(&self) -> &[QueryRecord] {
        self.records.kept()
    }

    /// Removes the finished queries at the front of [`UdpClient::records`] and returns them
    /// (see [`QueryLog::take_finished`]).
    pub fn take_finished(&mut self) -> Vec<QueryRecord> {
        let inflight = &self.inflight;
        self.records
            .take_finished(|seq| inflight.contains_key(&seq))
    }

    /// The ports this client has bound right now (the fixed one, or those of queries in
    /// flight).
    pub fn bound_ports(&self) -> BTreeSet<u16> {
        let mut s: BTreeSet<u16> = self.by_port.iter().map(|(p, _)| *p).collect();
        s.extend(self.fixed_port.filter(|_| self.open));
        s
    }

    /// Whether it has `port` bound right now (O(log n)).
    pub fn binds(&self, port: u16) -> bool {
        (self.open && self.fixed_port == Some(port)) || self.oldest_on(port).is_some()
    }

    /// Whether its queries share one socket that stays open between them (a fixed port or
    /// `fixed`, not a `dig` loop).
    fn long_lived(&self) -> bool {
        !self.cfg.socket.sequential && self.cfg.source_port != SourcePort::PerQuery
    }

    /// Opens the long-lived socket for a send at `now`: binds the fixed port, or draws a
    /// `fixed` client's ephemeral port. `None` when the port cannot be bound (EADDRINUSE).
    fn open_socket<P: PortsInUse + ?Sized>(&mut self, in_use: &P, out: &mut Outbox) -> Option<u16> {
        if self.open {
            return self.fixed_port;
        }
        let port = match self.cfg.source_port {
            SourcePort::Fixed(p) => Some(p).filter(|p| !in_use.in_use(*p)),
            _ => draw_ephemeral_port(&mut self.port_rng, in_use),
        }?;
        self.fixed_port = Some(port);
        self.open = true;
        out.ports.push((port, true));
        Some(port)
    }

    /// Closes the long-lived socket once nothing is in flight and either the schedule is
    /// over or a `reopen` gap has begun (`udp_lib_unhash` releases the port at `close()`).
    fn settle(&mut self, now: SimTime, out: &mut Outbox) {
        if !self.open || !self.inflight.is_empty() {
            return;
        }
        let gap = self.close_at.is_some_and(|t| t <= now);
        if gap || self.sends.next().is_none() {
            self.open = false;
            if gap {
                self.close_at = None;
            }
            out.ports.extend(self.fixed_port.map(|p| (p, false)));
        }
    }

    /// Whether a datagram for one of its ports is the socket's to take: a connected socket
    /// takes only datagrams from the address and port it is connected to (`compute_score`
    /// in `udp.c` scores a connected socket out of a mismatched source; with no other socket
    /// the datagram gets ICMP port unreachable), an unconnected one takes any.
    pub fn accepts(&self, pkt: &Packet) -> bool {
        match pkt.l4 {
            L4::Udp { sport, .. } if self.cfg.connected => {
                SocketAddr::new(pkt.src, sport) == self.cfg.dst
            }
            _ => true,
        }
    }

    /// The oldest query in flight on `port`.
    fn oldest_on(&self, port: u16) -> Option<u32> {
        self.by_port
            .range((port, 0)..=(port, u32::MAX))
            .next()
            .map(|(_, q)| *q)
    }

    fn track(&mut self, seq: u32, inf: Inflight, out: &mut Outbox) {
        if !self.long_lived() && self.oldest_on(inf.port).is_none() {
            out.ports.push((inf.port, true));
        }
        self.deadlines.insert((inf.deadline, seq));
        self.by_port.insert((inf.port, seq));
        self.inflight.insert(seq, inf);
    }

    fn untrack(&mut self, now: SimTime, seq: u32, out: &mut Outbox) {
        let Some(inf) = self.inflight.remove(&seq) else {
            return;
        };
        self.deadlines.remove(&(inf.deadline, seq));
        self.by_port.remove(&(inf.port, seq));
        if !self.long_lived() && self.oldest_on(inf.port).is_none() {
            out.ports.push((inf.port, false));
        }
        if self.cfg.socket.sequential {
            // The loop's `sleep`, then the next `dig`.
            self.sends
                .follow(&self.cfg.schedule, now + self.cfg.schedule.interval);
        }
    }

    /// When query `k` is due: the schedule's time, moved by the gap for queries whose
    /// nominal time falls at or after the gap's start. A `dig` loop's first run is at its
    /// start; each next one follows the end of the one before ([`UdpClient::untrack`]).
    fn schedule_next(&mut self) {
        let pacing = self.pacing();
        self.sends.schedule(&self.cfg.schedule, pacing);
    }

    /// How its queries follow each other: a `dig` loop's one after the other, the others'
    /// on the schedule, moved by the gap.
    fn pacing(&self) -> Pacing {
        if self.cfg.socket.sequential {
            Pacing::Sequential
        } else {
            Pacing::Periodic(self.cfg.socket.gap.map(Shift::from))
        }
    }

    /// The next instant it needs [`UdpClient::handle_timeout`].
    pub fn poll_timeout(&self) -> Option<SimTime> {
        // The earliest of the next send, the nearest deadline and the close of a `reopen`
        // gap with nothing in flight, where any exists.
        let close = self
            .close_at
            .filter(|_| self.open && self.inflight.is_empty());
        [
            self.sends.next(),
            self.deadlines.first().map(|(t, _)| *t),
            close,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn send(&mut self, now: SimTime, seq: u32, port: u16, attempt: u8, out: &mut Outbox) {
        let src = SocketAddr::new(self.cfg.local_ip, port);
        let tag = Tag {
            client: self.cfg.index,
            seq,
            attempt,
        };
        out.packets
            .push(Packet::udp(src, self.cfg.dst).tagged(tag.pack()));
        out.events.push((
            now,
            AppEvent::QuerySent {
                query: seq,
                attempt,
                src,
                dst: self.cfg.dst,
            },
        ));
    }

    /// Sends due queries and retries, and ends tries whose timeout passed. `in_use` tells
    /// the UDP ports bound on this host (by other sockets; its own may be included).
    pub fn handle_timeout<P: PortsInUse + ?Sized>(
        &mut self,
        now: SimTime,
        in_use: &P,
        out: &mut Outbox,
    ) {
        // Timeouts first: a retry scheduled at the same instant as a new query goes first
        // (in query order, as before).
        let mut due = due_at(&self.deadlines, now);
        due.sort_unstable();
        for seq in due {
            self.try_failed(now, seq, None, out);
        }
        // A `reopen` gap's close, before a send at the same instant.
        self.settle(now, out);
        let pacing = self.pacing();
        while let Some(seq) = self.sends.take_due(now, &self.cfg.schedule, pacing) {
            if self.close_at.is_some_and(|c| c <= now) {
                // A `reopen` gap whose queries in flight outlasted it: the socket never
                // closed, and keeps its port.
                self.close_at = None;
            }
            let port = match self.cfg.source_port {
                SourcePort::Fixed(p) if self.cfg.socket.sequential => {
                    // `dig -b ADDR#PORT` binds its port for this run; another socket on it
                    // makes the bind fail (EADDRINUSE).
                    Some(p).filter(|p| !in_use.in_use(*p))
                }
                SourcePort::Fixed(_) | SourcePort::FixedEphemeral => self.open_socket(in_use, out),
                SourcePort::PerQuery => {
                    let by_port = &self.by_port;
                    let busy = |p: u16| {
                        in_use.in_use(p) || by_port.range((p, 0)..=(p, u32::MAX)).next().is_some()
                    };
                    draw_ephemeral_port(&mut self.port_rng, &busy)
                }
            };
            let Some(port) = port else {
                // No free port: the query fails at once, as EADDRINUSE would.
                self.records.push(QueryRecord::no_port(seq, now));
                if self.cfg.socket.sequential {
                    self.sends
                        .follow(&self.cfg.schedule, now + self.cfg.schedule.interval);
                }
                continue;
            };
            self.records.push(QueryRecord {
                seq,
                sent_at: now,
                src_port: port,
                attempts: 1,
                outcome: QueryOutcome::Pending,
            });
            self.track(
                seq,
                Inflight {
                    port,
                    attempt: 0,
                    deadline: now + self.cfg.timeout,
                },
                out,
            );
            self.send(now, seq, port, 0, out);
        }
        self.settle(now, out);
    }

    fn record_mut(&mut self, seq: u32) -> Option<&mut QueryRecord> {
        // Records are pushed in seq order, starting at 0.
        self.records.get_mut(seq)
    }

    fn try_failed(&mut self, now: SimTime, seq: u32, icmp_code: Option<u8>, out: &mut Outbox) {
        let Some(inf) = self.inflight.get_mut(&seq) else {
            return;
        };
        if inf.attempt < self.cfg.retries {
            inf.attempt += 1;
            let old = std::mem::replace(&mut inf.deadline, now + self.cfg.timeout);
            let (port, attempt) = (inf.port, inf.attempt);
            self.deadlines.remove(&(old, seq));
            self.deadlines.insert((now + self.cfg.timeout, seq));
            if let Some(r) = self.record_mut(seq) {
                r.attempts = attempt + 1;
            }
            self.send(now, seq, port, attempt, out);
            return;
        }
        let attempts = inf.attempt + 1;
        self.untrack(now, seq, out);
        let outcome = match icmp_code {
            Some(code) => {
                out.events.push((
                    now,
                    AppEvent::QueryRefused {
                        query: seq,
                        code,
                        icmpv6: self.cfg.local_ip.is_ipv6(),
                    },
                ));
                QueryOutcome::IcmpError(now, code)
            }
            None => {
                out.events.push((
                    now,
                    AppEvent::QueryTimedOut {
                        query: seq,
                        attempts,
                    },
                ));
                QueryOutcome::TimedOut(now)
            }
        };
        if let Some(r) = self.record_mut(seq) {
            r.outcome = outcome;
        }
    }

    /// Whether it is a one-way sender ([`UdpClientConfig::one_way`]).
    pub fn one_way(&self) -> bool {
        self.cfg.one_way
    }

    /// A one-way sender's send `seq` reached a process listening on its destination port at
    /// `now` (the simulation sees it; the sender does not): the send counts as delivered.
    /// Nothing for a query client, or a send already delivered or given up on.
    pub fn delivered(&mut self, now: SimTime, seq: u32, out: &mut Outbox) {
        if !self.cfg.one_way || !self.inflight.contains_key(&seq) {
            return;
        }
        self.untrack(now, seq, out);
        if let Some(r) = self.record_mut(seq) {
            r.outcome = QueryOutcome::Answered(now);
        }
        self.settle(now, out);
    }

    /// A packet for one of its ports arrived: an answer (matched by tag) or an ICMP error
    /// (matched by the quoted source port and destination). A one-way sender reads no
    /// answers.
    pub fn handle_packet(&mut self, now: SimTime, pkt: &Packet, out: &mut Outbox) {
        match pkt.l4 {
            L4::Udp { sport, .. } => {
                if self.cfg.one_way || !self.accepts(pkt) {
                    return;
                }
                let Some(tag) = Tag::unpack(pkt.tag).filter(|t| t.client == self.cfg.index) else {
                    return;
                };
                let Some(inf) = self.inflight.get(&tag.seq) else {
                    return; // a late answer to a query already given up on
                };
                if pkt.dport() != Some(inf.port) {
                    return;
                }
                self.untrack(now, tag.seq, out);
                self.settle(now, out);
                let from = SocketAddr::new(pkt.src, sport);
                if let Some(r) = self.record_mut(tag.seq) {
                    r.outcome = QueryOutcome::Answered(now);
                    let rtt = now - r.sent_at;
                    out.events.push((
                        now,
                        AppEvent::QueryAnswered {
                            query: tag.seq,
                            rtt,
                            from,
                        },
                    ));
                }
            }
            L4::Icmp {
                icmp_type,
                code,
                body: sim_core::IcmpBody::Error(inner),
            } if icmp::is_dest_unreach(!pkt.is_ipv4(), icmp_type) => {
                if inner.src != self.cfg.local_ip
                    || inner.dst != self.cfg.dst.ip()
                    || inner.dport != self.cfg.dst.port()
                {
                    return;
                }
                // The oldest query in flight on the quoted port gets the error.
                let seq = self.oldest_on(inner.sport);
                if let (Some(seq), false) = (seq, self.cfg.connected) {
                    out.events.push((
                        now,
                        AppEvent::IcmpIgnored {
                            query: seq,
                            code,
                            from: pkt.src,
                        },
                    ));
                    return;
                }
                if let Some(seq) = seq {
                    self.try_failed(now, seq, Some(code), out);
                    self.settle(now, out);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::apps::tests::{sa, sched, t};
    use crate::cluster::apps::{closed_port_response, EPHEMERAL_PORT_FIRST, EPHEMERAL_PORT_LAST};

    fn udp_client(source_port: SourcePort, retries: u8) -> UdpClient {
        UdpClient::new(
            UdpClientConfig {
                index: 3,
                local_ip: "10.244.2.9".parse().unwrap(),
                dst: sa("10.96.0.10:53"),
                schedule: sched(30, None),
                source_port,
                timeout: SimDuration::from_secs(5),
                retries,
                connected: true,
                one_way: false,
                socket: Default::default(),
            },
            7,
            "client/sidecar",
        )
    }

    #[test]
    fn udp_server_answers_after_its_service_time_from_the_address_queried() {
        let mut s = UdpServer::new(53, SimDuration::from_millis(2));
        let mut out = Outbox::new();
        let q = Packet::udp(sa("10.244.2.9:40000"), sa("10.244.1.5:53")).tagged(99);
        s.handle_packet(t(1), &q, &mut out);
        assert!(out.packets.is_empty());
        assert_eq!(s.poll_timeout(), Some(t(1) + SimDuration::from_millis(2)));
        s.handle_timeout(t(1) + SimDuration::from_millis(1), &mut out);
        assert!(out.packets.is_empty(), "not before the service time");
        s.handle_timeout(t(1) + SimDuration::from_millis(2), &mut out);
        assert_eq!(out.packets.len(), 1);
        let r = out.packets[0];
        assert_eq!(
            (r.src, r.sport(), r.dst, r.dport(), r.tag),
            (q.dst, Some(53), q.src, Some(40000), 99)
        );
        assert_eq!(s.answered(), 1);
    }

    #[test]
    fn fixed_port_client_sends_every_interval_from_the_same_port() {
        let mut c = udp_client(SourcePort::Fixed(40000), 0);
        let mut out = Outbox::new();
        while let Some(at) = c.poll_timeout().filter(|t| *t < SimTime::from_secs(100)) {
            c.handle_timeout(at, &BTreeSet::new(), &mut out);
        }
        let ports: Vec<_> = out.packets.iter().map(|p| p.sport()).collect();
        assert_eq!(ports, vec![Some(40000); 4]);
        // Each query timed out after 5 s (nobody answered).
        assert_eq!(c.records()[0].outcome, QueryOutcome::TimedOut(t(5)));
        assert_eq!(c.records()[2].outcome, QueryOutcome::TimedOut(t(65)));
    }

    #[test]
    fn per_query_client_draws_ephemeral_ports_in_linux_range_and_skips_busy_ones() {
        let mut c = udp_client(SourcePort::PerQuery, 0);
        let mut out = Outbox::new();
        for k in 0..50 {
            c.handle_timeout(t(30 * k), &BTreeSet::new(), &mut out);
        }
        let ports: BTreeSet<u16> = out.packets.iter().filter_map(|p| p.sport()).collect();
        assert!(ports.len() > 45, "ports should vary: {ports:?}");
        assert!(ports
            .iter()
            .all(|p| (EPHEMERAL_PORT_FIRST..=EPHEMERAL_PORT_LAST).contains(p)));
        // With all but one port busy, the free one is chosen.
        let busy: BTreeSet<u16> = (EPHEMERAL_PORT_FIRST..=EPHEMERAL_PORT_LAST)
            .filter(|p| *p != 45000)
            .collect();
        let mut rng = SimRng::derive(1, "x");
        assert_eq!(draw_ephemeral_port(&mut rng, &busy), Some(45000));
    }

    #[test]
    fn answer_ends_the_query_and_records_it() {
        let mut c = udp_client(SourcePort::Fixed(40000), 0);
        let mut out = Outbox::new();
        c.handle_timeout(t(0), &BTreeSet::new(), &mut out);
        let q = out.packets[0];
        let mut ans = Packet::udp(sa("10.96.0.10:53"), sa("10.244.2.9:40000"));
        ans.tag = q.tag;
        c.handle_packet(SimTime::from_millis(3), &ans, &mut out);
        assert_eq!(
            c.records()[0].outcome,
            QueryOutcome::Answered(SimTime::from_millis(3))
        );
        assert_eq!(c.poll_timeout(), Some(t(30)), "no timeout left pending");
        assert!(out
            .events
            .iter()
            .any(|(_, e)| matches!(e, AppEvent::QueryAnswered { query: 0, .. })));
    }

    #[test]
    fn timeout_retries_on_the_same_port_then_gives_up() {
        let mut c = udp_client(SourcePort::PerQuery, 2);
        let mut out = Outbox::new();
        c.handle_timeout(t(0), &BTreeSet::new(), &mut out);
        c.handle_timeout(t(5), &BTreeSet::new(), &mut out);
        c.handle_timeout(t(10), &BTreeSet::new(), &mut out);
        assert_eq!(c.records()[0].outcome, QueryOutcome::Pending);
        c.handle_timeout(t(15), &BTreeSet::new(), &mut out);
        assert_eq!(c.records()[0].outcome, QueryOutcome::TimedOut(t(15)));
        assert_eq!(c.records()[0].attempts, 3);
        let ports: BTreeSet<_> = out.packets.iter().map(|p| p.sport()).collect();
        assert_eq!(ports.len(), 1, "retries reuse the query's port");
        let attempts: Vec<u8> = out
            .packets
            .iter()
            .map(|p| Tag::unpack(p.tag).unwrap().attempt)
            .collect();
        assert_eq!(attempts, vec![0, 1, 2]);
    }

    #[test]
    fn icmp_port_unreachable_refuses_the_query_at_once() {
        let mut c = udp_client(SourcePort::Fixed(40000), 0);
        let mut out = Outbox::new();
        c.handle_timeout(t(0), &BTreeSet::new(), &mut out);
        let q = out.packets[0];
        let err = closed_port_response(&q).unwrap();
        c.handle_packet(SimTime::from_millis(1), &err, &mut out);
        assert_eq!(
            c.records()[0].outcome,
            QueryOutcome::IcmpError(SimTime::from_millis(1), icmp::CODE_PORT_UNREACH)
        );
        assert!(c.records()[0].outcome.failed());
    }

    #[test]
    fn an_unconnected_socket_ignores_the_icmp_error_and_times_out() {
        let mut c = udp_client(SourcePort::Fixed(40000), 0);
        c.cfg.connected = false;
        let mut out = Outbox::new();
        c.handle_timeout(t(0), &BTreeSet::new(), &mut out);
        let err = closed_port_response(&out.packets[0]).unwrap();
        c.handle_packet(SimTime::from_millis(1), &err, &mut out);
        assert_eq!(c.records()[0].outcome, QueryOutcome::Pending);
        c.handle_timeout(t(5), &BTreeSet::new(), &mut out);
        assert_eq!(c.records()[0].outcome, QueryOutcome::TimedOut(t(5)));
    }

    #[test]
    fn a_dig_loop_binds_its_port_per_run_and_sleeps_after_the_answer() {
        let mut c = udp_client(SourcePort::Fixed(40000), 2);
        c.cfg.socket.sequential = true;
        c.cfg.schedule.interval = SimDuration::from_secs(10);
        c.schedule_next();
        assert!(c.bound_ports().is_empty(), "no socket before the first run");
        let mut out = Outbox::new();
        c.handle_timeout(t(0), &BTreeSet::new(), &mut out);
        assert_eq!(out.ports, vec![(40000, true)]);
        // While the run waits, nothing else goes out, however long it waits.
        assert_eq!(
            c.poll_timeout(),
            Some(t(5)),
            "the try's timeout, not a next send"
        );
        let mut ans = Packet::udp(sa("10.96.0.10:53"), sa("10.244.2.9:40000"));
        ans.tag = out.packets[0].tag;
        let mut out = Outbox::new();
        c.handle_packet(SimTime::from_millis(3), &ans, &mut out);
        assert_eq!(
            out.ports,
            vec![(40000, false)],
            "dig exits: its socket closes"
        );
        assert!(!c.binds(40000));
        assert_eq!(c.poll_timeout(), Some(SimTime::from_millis(10_003)));
        // The port taken by another socket meanwhile: that run cannot bind (EADDRINUSE).
        let mut out = Outbox::new();
        let busy: BTreeSet<u16> = [40000].into();
        c.handle_timeout(SimTime::from_millis(10_003), &busy, &mut out);
        assert_eq!(
            c.records()[1].outcome,
            QueryOutcome::NoPort(SimTime::from_millis(10_003))
        );
        assert_eq!(c.poll_timeout(), Some(SimTime::from_millis(20_003)));
    }

    #[test]
    fn jitter_is_seeded_bounded_and_does_not_accumulate() {
        let mk = |seed| {
            let mut c = UdpClient::new(
                UdpClientConfig {
                    index: 0,
                    local_ip: "10.0.0.1".parse().unwrap(),
                    dst: sa("10.96.0.10:53"),
                    schedule: ClientSchedule {
                        jitter: SimDuration::from_secs(3),
                        ..sched(30, Some(20))
                    },
                    source_port: SourcePort::FixedEphemeral,
                    timeout: SimDuration::from_secs(1),
                    retries: 0,
                    connected: true,
                    one_way: false,
                    socket: Default::default(),
                },
                seed,
                "c",
            );
            let mut sends = Vec::new();
            while let Some(at) = c.poll_timeout() {
                let mut out = Outbox::new();
                c.handle_timeout(at, &BTreeSet::new(), &mut out);
                sends.extend(
                    out.events
                        .iter()
                        .filter(|(_, e)| matches!(e, AppEvent::QuerySent { .. }))
                        .map(|(t, _)| *t),
                );
            }
            sends
        };
        let a = mk(1);
        assert_eq!(a.len(), 20);
        assert_eq!(a, mk(1));
        assert_ne!(a, mk(2));
        for (k, at) in a.iter().enumerate() {
            let nominal = t(30 * k as u64);
            assert!(*at >= nominal && *at <= nominal + SimDuration::from_secs(3));
        }
    }
}
