//! Applications as sans-IO state machines: servers and clients on pods, nodes and hosts.
//!
//! No application does I/O or reads a clock. Each is driven by two inputs and drained by two
//! outputs, in this order:
//!
//! 1. `handle_packet(now, packet, out)` for each packet delivered to one of its sockets, and
//!    `handle_timeout(now, out)` once `now` has reached `poll_timeout()`;
//! 2. the packets it sends and the timeline events it reports are pushed into the [`Outbox`]
//!    given to those calls; `poll_timeout()` names its next deadline (or `None`).
//!
//! Packets carry a [`Tag`] in [`Packet::tag`] so the simulation can follow one message from
//! the client through NAT to the endpoint and back; servers copy the tag into their answers,
//! as a DNS server copies the query id.
//!
//! The socket layer that is not an application (no socket bound → ICMP port unreachable for
//! UDP, RST for TCP) is [`closed_port_response`].

use crate::cluster::ports::ConnectPorts;
use crate::cluster::querylog::QueryLog;
pub use crate::cluster::tcp_server::{TcpServer, TCP_DELACK_MIN, TCP_FIN_TIMEOUT};
// The settings of the applications are the scenario model's (what to run); the cluster
// runs them.
pub use crate::scenario::model::{ClientSchedule, SourcePort, UdpReply};
use sim_core::packet::icmp;
use sim_core::{Packet, SimDuration, SimRng, SimTime, TcpFlags, L4};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{IpAddr, SocketAddr};

/// The first port of Linux's default `net.ipv4.ip_local_port_range` (32768 60999).
pub const EPHEMERAL_PORT_FIRST: u16 = 32768;
/// The last port of Linux's default `net.ipv4.ip_local_port_range`.
pub const EPHEMERAL_PORT_LAST: u16 = 60999;

/// Identifies one application message: which client, which query or connection, which try.
///
/// Packed into [`Packet::tag`] as `client << 40 | seq << 8 | attempt`, with `client` counted
/// from 1 (a tag of 0 means "not from a simulated client").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tag {
    /// Index of the client in the scenario (0-based).
    pub client: u32,
    /// The query or connection number of that client (0-based).
    pub seq: u32,
    /// The try (0 = first send, 1 = first retry, …).
    pub attempt: u8,
}

impl Tag {
    /// The packed form stored in [`Packet::tag`].
    pub fn pack(self) -> u64 {
        ((self.client as u64 + 1) << 40)
            | ((self.seq as u64 & 0xffff_ffff) << 8)
            | self.attempt as u64
    }
    /// Unpacks [`Packet::tag`]; `None` for 0 (untagged).
    pub fn unpack(tag: u64) -> Option<Tag> {
        let client = tag >> 40;
        if client == 0 {
            return None;
        }
        Some(Tag {
            client: (client - 1) as u32,
            seq: ((tag >> 8) & 0xffff_ffff) as u32,
            attempt: (tag & 0xff) as u8,
        })
    }
}

/// Something an application reports for the timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppEvent {
    /// A UDP query (or a retry of it) was sent.
    QuerySent {
        /// Query number.
        query: u32,
        /// Try number (0 = first).
        attempt: u8,
        /// The socket it left from.
        src: SocketAddr,
        /// Where it was sent.
        dst: SocketAddr,
    },
    /// A query's answer arrived.
    QueryAnswered {
        /// Query number.
        query: u32,
        /// Time from the first send to the answer.
        rtt: SimDuration,
        /// The source of the answer as the client saw it.
        from: SocketAddr,
    },
    /// A query got no answer within its timeout after its last try.
    QueryTimedOut {
        /// Query number.
        query: u32,
        /// Tries made.
        attempts: u8,
    },
    /// A query failed on an ICMP error (ECONNREFUSED for port unreachable) on its last try.
    QueryRefused {
        /// Query number.
        query: u32,
        /// The ICMP destination-unreachable code.
        code: u8,
    },
    /// An ICMP error about a query reached an unconnected socket, which is not told of it.
    IcmpIgnored {
        /// Query number.
        query: u32,
        /// The ICMP destination-unreachable code.
        code: u8,
        /// Who sent the error.
        from: IpAddr,
    },
    /// A TCP connection attempt started (SYN sent).
    TcpConnecting {
        /// Connection number.
        conn: u32,
        /// Local socket.
        src: SocketAddr,
        /// Where it connects.
        dst: SocketAddr,
    },
    /// A TCP exchange (connect, request, response, close) completed.
    TcpCompleted {
        /// Connection number.
        conn: u32,
        /// Time from the SYN to the response.
        rtt: SimDuration,
    },
    /// A TCP exchange failed.
    TcpFailed {
        /// Connection number.
        conn: u32,
        /// Why.
        reason: TcpFailure,
    },
    /// A ping client sent an echo request.
    PingSent {
        /// Request number (0-based).
        query: u32,
        /// The ping socket's identifier.
        ident: u16,
        /// The ICMP sequence number (from 1).
        icmp_seq: u16,
        /// The client's address.
        src: IpAddr,
        /// Where it was sent.
        dst: IpAddr,
    },
    /// A ping client's echo request got its reply.
    PingAnswered {
        /// Request number.
        query: u32,
        /// Time from the request to the reply.
        rtt: SimDuration,
        /// Who replied.
        from: IpAddr,
    },
    /// A keep-alive TCP client's connection changed: opened (SYN), closed, reset, …
    TcpConnection {
        /// Connection number (0-based, per client).
        conn: u32,
        /// The request its segments carry the tag of (the last one sent on it).
        request: u32,
        /// What happened, in words.
        change: String,
    },
    /// A keep-alive TCP client sent a request on a connection.
    TcpRequestSent {
        /// Request number.
        request: u32,
        /// The connection it went on.
        conn: u32,
        /// The connection's local socket.
        src: SocketAddr,
        /// Where it connected.
        dst: SocketAddr,
    },
    /// A keep-alive TCP client's request got its response.
    TcpRequestAnswered {
        /// Request number.
        request: u32,
        /// The connection.
        conn: u32,
        /// Time from the request being due (its connection's SYN, for a new one) to the
        /// response.
        rtt: SimDuration,
    },
    /// A keep-alive TCP client's request failed.
    TcpRequestFailed {
        /// Request number.
        request: u32,
        /// The connection.
        conn: u32,
        /// Why.
        reason: TcpFailure,
    },
    /// A server answered a request.
    ServerAnswered {
        /// The server's port.
        port: u16,
        /// Who it answered.
        to: SocketAddr,
    },
}

/// Why a TCP client's exchange failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpFailure {
    /// A RST arrived (ECONNREFUSED before the handshake, ECONNRESET after).
    Reset,
    /// An ICMP destination unreachable arrived.
    Unreachable,
    /// No SYN/ACK within the connect timeout (ETIMEDOUT).
    ConnectTimeout,
    /// No response within the request timeout.
    RequestTimeout,
    /// The server's FIN came before the response (EOF on a request in flight).
    PeerClosed,
}

impl std::fmt::Display for TcpFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TcpFailure::Reset => "connection reset",
            TcpFailure::Unreachable => "destination unreachable",
            TcpFailure::ConnectTimeout => "connect timeout",
            TcpFailure::RequestTimeout => "request timeout",
            TcpFailure::PeerClosed => "connection closed by the server before the response",
        })
    }
}

/// What an application call produced.
#[derive(Debug, Default)]
pub struct Outbox {
    /// Packets to send, in order.
    pub packets: Vec<Packet>,
    /// Events for the timeline, in order, with the time they happened.
    pub events: Vec<(SimTime, AppEvent)>,
    /// Local ports a client bound (`true`) or released (`false`), in order, so the host can
    /// keep its table of ports in use without asking every socket.
    pub ports: Vec<(u16, bool)>,
}

/// The ports bound on a host, as a client drawing an ephemeral port sees them.
pub trait PortsInUse {
    /// Whether `port` is taken.
    fn in_use(&self, port: u16) -> bool;
}

impl PortsInUse for BTreeSet<u16> {
    fn in_use(&self, port: u16) -> bool {
        self.contains(&port)
    }
}

impl<F: Fn(u16) -> bool> PortsInUse for F {
    fn in_use(&self, port: u16) -> bool {
        self(port)
    }
}

impl Outbox {
    /// An empty outbox.
    pub fn new() -> Outbox {
        Outbox::default()
    }
    /// Whether nothing was produced.
    pub fn is_empty(&self) -> bool {
        self.packets.is_empty() && self.events.is_empty()
    }
}

/// How the socket layer answers a packet for which no socket is bound on an address that
/// exists: UDP gets ICMP port unreachable (`__udp4_lib_rcv` → `icmp_send(ICMP_PORT_UNREACH)`),
/// TCP gets a RST unless it is a RST itself (`tcp_v4_send_reset`), anything else nothing.
pub fn closed_port_response(pkt: &Packet) -> Option<Packet> {
    match pkt.l4 {
        L4::Udp { .. } => {
            let mut p =
                Packet::icmp_error(pkt.dst, pkt, icmp::DEST_UNREACH, icmp::CODE_PORT_UNREACH);
            p.tag = pkt.tag;
            Some(p)
        }
        L4::Tcp {
            sport,
            dport,
            flags,
            seq,
            ack,
            ..
        } => {
            if flags.contains(TcpFlags::RST) {
                return None;
            }
            // RFC 793 reset generation, as tcp_v4_send_reset does it: an ACK-bearing segment
            // gets <SEQ=SEG.ACK><CTL=RST>; otherwise <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>.
            let seg_len = tcp_seg_len(pkt);
            let (rseq, rack, rflags) = if flags.contains(TcpFlags::ACK) {
                (ack, 0, TcpFlags::RST)
            } else {
                (0, seq.wrapping_add(seg_len), TcpFlags::RST | TcpFlags::ACK)
            };
            let mut p = Packet::tcp(
                SocketAddr::new(pkt.dst, dport),
                SocketAddr::new(pkt.src, sport),
                rflags,
            );
            set_seq(&mut p, rseq, rack);
            p.len = if pkt.is_ipv4() { 40 } else { 60 };
            p.tag = pkt.tag;
            Some(p)
        }
        _ => None,
    }
}

/// Length of a TCP segment in sequence space: payload, plus one for SYN and for FIN.
pub(crate) fn tcp_seg_len(pkt: &Packet) -> u32 {
    let hdr: u16 = if pkt.is_ipv4() { 40 } else { 60 };
    let mut n = pkt.len.saturating_sub(hdr) as u32;
    if let Some(f) = pkt.tcp_flags() {
        if f.contains(TcpFlags::SYN) {
            n += 1;
        }
        if f.contains(TcpFlags::FIN) {
            n += 1;
        }
    }
    n
}

fn set_seq(p: &mut Packet, s: u32, a: u32) {
    if let L4::Tcp { seq, ack, .. } = &mut p.l4 {
        *seq = s;
        *ack = a;
    }
}

pub(crate) fn tcp_packet(
    src: SocketAddr,
    dst: SocketAddr,
    flags: TcpFlags,
    seq: u32,
    ack: u32,
    payload: u16,
) -> Packet {
    let mut p = Packet::tcp(src, dst, flags);
    set_seq(&mut p, seq, ack);
    p.len = if src.is_ipv4() { 40 } else { 60 } + payload;
    p
}

/// Timers of one application, ordered by (deadline, insertion).
///
/// A queue kept in that order: an application's timers mostly come due in the order they
/// are set (a server's constant service time), so a timer is appended and the earliest
/// taken from the front, with no tree node per application (50,000 endpoint pods of a
/// big cluster each have one). An out-of-order timer is inserted after every timer due no
/// later. The queue's memory goes when it empties.
#[derive(Debug, Clone)]
pub(crate) struct Timers<T> {
    queue: VecDeque<(SimTime, T)>,
}

impl<T> Default for Timers<T> {
    fn default() -> Self {
        Timers {
            queue: VecDeque::new(),
        }
    }
}

impl<T> Timers<T> {
    pub(crate) fn add(&mut self, at: SimTime, what: T) {
        // After every timer due at or before `at`: insertion order among equal deadlines.
        let i = self.queue.partition_point(|(t, _)| *t <= at);
        self.queue.insert(i, (at, what));
    }
    pub(crate) fn next(&self) -> Option<SimTime> {
        self.queue.front().map(|(t, _)| *t)
    }
    pub(crate) fn pop_due(&mut self, now: SimTime) -> Option<T> {
        if self.queue.front()?.0 > now {
            return None;
        }
        let (_, what) = self.queue.pop_front()?;
        if self.queue.is_empty() {
            self.queue = VecDeque::new();
        }
        Some(what)
    }
}

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
    pending: Timers<Packet>,
    received: u64,
    answered: u64,
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

impl ClientSchedule {
    fn nominal(&self, k: u32) -> SimTime {
        self.start + self.interval.saturating_mul(k as u64)
    }

    /// When send `k` (from 0) goes out: its nominal time plus a jitter drawn from `rng` (no
    /// draw when there is no jitter), or `None` once `count` sends are made or the nominal
    /// time reaches `stop`. The one schedule of UDP, TCP and ping clients.
    pub(crate) fn send_time(&self, k: u32, rng: &mut SimRng) -> Option<SimTime> {
        let nominal = self.nominal(k);
        if self.count.is_some_and(|c| k >= c) || nominal >= self.stop {
            return None;
        }
        let jitter = if self.jitter.is_zero() {
            SimDuration::ZERO
        } else {
            SimDuration::from_nanos(rng.below(self.jitter.as_nanos().saturating_add(1)))
        };
        Some(nominal + jitter)
    }
}

/// How one query ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryOutcome {
    /// Still waiting.
    Pending,
    /// Answered at this instant.
    Answered(SimTime),
    /// No answer after the last try's timeout, at this instant.
    TimedOut(SimTime),
    /// An ICMP error (code) ended the last try at this instant.
    IcmpError(SimTime, u8),
    /// A TCP RST ended it at this instant.
    Reset(SimTime),
    /// No local port was free (EADDRINUSE); nothing was sent.
    NoPort(SimTime),
}

impl QueryOutcome {
    /// When it ended, if it has.
    pub fn done_at(&self) -> Option<SimTime> {
        match *self {
            QueryOutcome::Pending => None,
            QueryOutcome::Answered(t)
            | QueryOutcome::TimedOut(t)
            | QueryOutcome::IcmpError(t, _)
            | QueryOutcome::Reset(t)
            | QueryOutcome::NoPort(t) => Some(t),
        }
    }
    /// Whether it failed (timed out or refused).
    pub fn failed(&self) -> bool {
        !matches!(self, QueryOutcome::Pending | QueryOutcome::Answered(_))
    }
}

/// One query a client made (or one TCP exchange), as the summary and expectations see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryRecord {
    /// Query number.
    pub seq: u32,
    /// First send.
    pub sent_at: SimTime,
    /// The source port used.
    pub src_port: u16,
    /// Tries made so far.
    pub attempts: u8,
    /// How it ended.
    pub outcome: QueryOutcome,
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
}

/// A UDP query client (a DNS stub resolver or sidecar): one query per interval, each with a
/// timeout and retries.
///
/// Retries reuse the query's socket and port, as glibc's resolver does. On a connected socket
/// (the default) an ICMP port unreachable about it ends the try at once (`ECONNREFUSED`) and a
/// retry follows at once if any is left; an unconnected one ignores it
/// ([`UdpClientConfig::connected`]). A per-query port is drawn uniformly from
/// 32768–60999 (Linux `ip_local_port_range`), skipping ports this host has in use.
#[derive(Debug, Clone)]
pub struct UdpClient {
    cfg: UdpClientConfig,
    jitter_rng: SimRng,
    port_rng: SimRng,
    fixed_port: Option<u16>,
    next_k: u32,
    next_send: Option<SimTime>,
    inflight: BTreeMap<u32, Inflight>,
    /// The queries in flight by deadline, and by port (oldest first): each send, timeout and
    /// answer costs O(log n) in the queries in flight.
    deadlines: BTreeSet<(SimTime, u32)>,
    by_port: BTreeSet<(u16, u32)>,
    records: QueryLog,
}

/// Draws a free ephemeral port from `rng`, as `inet_hash_connect`/`udp_lib_get_port` pick a
/// random start in `ip_local_port_range` and walk to a free port.
pub fn draw_ephemeral_port<P: PortsInUse + ?Sized>(rng: &mut SimRng, in_use: &P) -> Option<u16> {
    let span = (EPHEMERAL_PORT_LAST - EPHEMERAL_PORT_FIRST) as u64 + 1;
    let start = rng.below(span);
    (0..span)
        .map(|i| EPHEMERAL_PORT_FIRST + ((start + i) % span) as u16)
        .find(|p| !in_use.in_use(*p))
}

impl UdpClient {
    /// A client; `seed` and `label` name its seeded streams (`{label}/jitter`, `{label}/ports`).
    pub fn new(cfg: UdpClientConfig, seed: u64, label: &str) -> UdpClient {
        let mut c = UdpClient {
            jitter_rng: SimRng::child(seed, label, "jitter"),
            port_rng: SimRng::child(seed, label, "ports"),
            fixed_port: match cfg.source_port {
                SourcePort::Fixed(p) => Some(p),
                _ => None,
            },
            next_k: 0,
            next_send: None,
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
        s.extend(self.fixed_port);
        s
    }

    /// Whether it has `port` bound right now (O(log n)).
    pub fn binds(&self, port: u16) -> bool {
        self.fixed_port == Some(port) || self.oldest_on(port).is_some()
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
        if self.fixed_port.is_none() && self.oldest_on(inf.port).is_none() {
            out.ports.push((inf.port, true));
        }
        self.deadlines.insert((inf.deadline, seq));
        self.by_port.insert((inf.port, seq));
        self.inflight.insert(seq, inf);
    }

    fn untrack(&mut self, seq: u32, out: &mut Outbox) {
        let Some(inf) = self.inflight.remove(&seq) else {
            return;
        };
        self.deadlines.remove(&(inf.deadline, seq));
        self.by_port.remove(&(inf.port, seq));
        if self.fixed_port.is_none() && self.oldest_on(inf.port).is_none() {
            out.ports.push((inf.port, false));
        }
    }

    fn schedule_next(&mut self) {
        self.next_send = self
            .cfg
            .schedule
            .send_time(self.next_k, &mut self.jitter_rng);
    }

    /// The next instant it needs [`UdpClient::handle_timeout`].
    pub fn poll_timeout(&self) -> Option<SimTime> {
        // The earlier of the next send and the nearest deadline, where either exists.
        [self.next_send, self.deadlines.first().map(|(t, _)| *t)]
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
        let mut due: Vec<u32> = self
            .deadlines
            .range(..=(now, u32::MAX))
            .map(|(_, k)| *k)
            .collect();
        due.sort_unstable();
        for seq in due {
            self.try_failed(now, seq, None, out);
        }
        while let Some(t) = self.next_send.filter(|t| *t <= now) {
            let _ = t;
            let seq = self.next_k;
            self.next_k += 1;
            let port = match self.cfg.source_port {
                SourcePort::Fixed(p) => Some(p),
                SourcePort::FixedEphemeral => {
                    if self.fixed_port.is_none() {
                        self.fixed_port = draw_ephemeral_port(&mut self.port_rng, in_use);
                        out.ports.extend(self.fixed_port.map(|p| (p, true)));
                    }
                    self.fixed_port
                }
                SourcePort::PerQuery => {
                    let by_port = &self.by_port;
                    let busy = |p: u16| {
                        in_use.in_use(p) || by_port.range((p, 0)..=(p, u32::MAX)).next().is_some()
                    };
                    draw_ephemeral_port(&mut self.port_rng, &busy)
                }
            };
            self.schedule_next();
            let Some(port) = port else {
                // No free port: the query fails at once, as EADDRINUSE would.
                self.records.push(QueryRecord {
                    seq,
                    sent_at: now,
                    src_port: 0,
                    attempts: 0,
                    outcome: QueryOutcome::NoPort(now),
                });
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
        self.untrack(seq, out);
        let outcome = match icmp_code {
            Some(code) => {
                out.events
                    .push((now, AppEvent::QueryRefused { query: seq, code }));
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
        self.untrack(seq, out);
        if let Some(r) = self.record_mut(seq) {
            r.outcome = QueryOutcome::Answered(now);
        }
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
                self.untrack(tag.seq, out);
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
                icmp_type: icmp::DEST_UNREACH,
                code,
                body: sim_core::IcmpBody::Error(inner),
            } => {
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
                }
            }
            _ => {}
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CliState {
    SynSent,
    Requested,
    FinSent,
    /// The client closed first and the server's FIN came: the socket holds its 4-tuple for
    /// `TCP_TIMEWAIT_LEN` (60 s), so `connect()` does not pick it again toward the same
    /// destination (`__inet_check_established`).
    TimeWait,
}

/// How long a socket that closed first stays in TIME_WAIT (`TCP_TIMEWAIT_LEN`, 60 s).
pub const TCP_TIMEWAIT_LEN: SimDuration = SimDuration::from_secs(60);

#[derive(Debug, Clone)]
struct CliConn {
    seq: u32,
    port: u16,
    state: CliState,
    snd_nxt: u32,
    rcv_nxt: u32,
    started: SimTime,
    syn_tries: u8,
    deadline: SimTime,
    answered_at: Option<SimTime>,
}

/// The configuration of a [`TcpClient`].
#[derive(Clone, Debug)]
pub struct TcpClientConfig {
    /// Index of the client in the scenario.
    pub index: u32,
    /// The client's address.
    pub local_ip: IpAddr,
    /// Where it connects.
    pub dst: SocketAddr,
    /// When it connects.
    pub schedule: ClientSchedule,
    /// Give up the handshake after this long (SYNs are retransmitted after 1 s, 2 s, 4 s, …,
    /// Linux's initial RTO doubling).
    pub connect_timeout: SimDuration,
    /// Give up waiting for the response after this long.
    pub request_timeout: SimDuration,
    /// Request payload in bytes.
    pub request_bytes: u16,
}

/// A TCP client: per interval, connects, sends one request, waits for the response, closes
/// (FIN), and acknowledges the server's FIN. A RST or ICMP error fails the exchange.
///
/// Source ports come from the host's [`ConnectPorts`] (Linux's `__inet_hash_connect`), and a
/// closed connection keeps its port in TIME_WAIT for [`TCP_TIMEWAIT_LEN`]: it is not picked
/// again for that long, and segments for it are absorbed (a FIN is acknowledged again and
/// restarts the 60 s, a RST ends TIME_WAIT), as `tcp_timewait_state_process` does.
#[derive(Debug, Clone)]
pub struct TcpClient {
    cfg: TcpClientConfig,
    jitter_rng: SimRng,
    isn_rng: SimRng,
    next_k: u32,
    next_send: Option<SimTime>,
    conns: BTreeMap<u32, CliConn>,
    /// The open connections by deadline and by local port: O(log n) per segment and timer.
    deadlines: BTreeSet<(SimTime, u32)>,
    by_port: BTreeMap<u16, u32>,
    records: QueryLog,
}

impl TcpClient {
    /// A client; `seed` and `label` name its seeded streams.
    pub fn new(cfg: TcpClientConfig, seed: u64, label: &str) -> TcpClient {
        let mut c = TcpClient {
            jitter_rng: SimRng::child(seed, label, "jitter"),
            isn_rng: SimRng::child(seed, label, "isn"),
            next_k: 0,
            next_send: None,
            conns: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            by_port: BTreeMap::new(),
            records: QueryLog::new(),
            cfg,
        };
        c.schedule_next();
        c
    }
    /// The configuration.
    pub fn config(&self) -> &TcpClientConfig {
        &self.cfg
    }
    /// The exchanges kept, in order (`attempts` counts SYNs sent): every one so far, unless
    /// the driver took the finished ones ([`TcpClient::take_finished`]).
    pub fn records(&self) -> &[QueryRecord] {
        self.records.kept()
    }
    /// Removes the finished exchanges at the front of [`TcpClient::records`] — those whose
    /// connection is gone, so their outcome can no longer change — and returns them.
    pub fn take_finished(&mut self) -> Vec<QueryRecord> {
        let conns = &self.conns;
        self.records.take_finished(|seq| conns.contains_key(&seq))
    }
    /// Ports bound right now.
    pub fn bound_ports(&self) -> BTreeSet<u16> {
        self.by_port.keys().copied().collect()
    }
    /// Whether it has `port` bound right now (O(log n)).
    pub fn binds(&self, port: u16) -> bool {
        self.by_port.contains_key(&port)
    }
    fn open(&mut self, c: CliConn, out: &mut Outbox) {
        out.ports.push((c.port, true));
        self.deadlines.insert((c.deadline, c.seq));
        self.by_port.insert(c.port, c.seq);
        self.conns.insert(c.seq, c);
    }
    fn close(&mut self, seq: u32, out: &mut Outbox) -> bool {
        let Some(c) = self.conns.remove(&seq) else {
            return false;
        };
        self.deadlines.remove(&(c.deadline, seq));
        self.by_port.remove(&c.port);
        out.ports.push((c.port, false));
        true
    }
    /// Re-files connection `seq`'s deadline after a change from `old`.
    fn refile(&mut self, seq: u32, old: SimTime) {
        if let Some(c) = self.conns.get(&seq) {
            if c.deadline != old {
                self.deadlines.remove(&(old, seq));
                self.deadlines.insert((c.deadline, seq));
            }
        }
    }
    fn schedule_next(&mut self) {
        self.next_send = self
            .cfg
            .schedule
            .send_time(self.next_k, &mut self.jitter_rng);
    }
    /// The next instant it needs [`TcpClient::handle_timeout`].
    pub fn poll_timeout(&self) -> Option<SimTime> {
        // The earlier of the next send and the nearest deadline, where either exists.
        [self.next_send, self.deadlines.first().map(|(t, _)| *t)]
            .into_iter()
            .flatten()
            .min()
    }
    fn tag(&self, seq: u32, attempt: u8) -> u64 {
        Tag {
            client: self.cfg.index,
            seq,
            attempt,
        }
        .pack()
    }
    fn fail(&mut self, now: SimTime, seq: u32, reason: TcpFailure, out: &mut Outbox) {
        if !self.close(seq, out) {
            return;
        }
        if let Some(r) = self.records.get_mut(seq) {
            r.outcome = match reason {
                TcpFailure::Reset => QueryOutcome::Reset(now),
                TcpFailure::Unreachable => QueryOutcome::IcmpError(now, icmp::CODE_HOST_UNREACH),
                _ => QueryOutcome::TimedOut(now),
            };
        }
        out.events
            .push((now, AppEvent::TcpFailed { conn: seq, reason }));
    }
    /// Starts due connections, retransmits SYNs and gives up on timeouts. `in_use` tells the
    /// TCP ports bound on this host (by other sockets; its own may be included); `connect`
    /// is the host's port picker.
    pub fn handle_timeout<P: PortsInUse + ?Sized>(
        &mut self,
        now: SimTime,
        in_use: &P,
        connect: &mut ConnectPorts,
        out: &mut Outbox,
    ) {
        let mut due: Vec<u32> = self
            .deadlines
            .range(..=(now, u32::MAX))
            .map(|(_, k)| *k)
            .collect();
        due.sort_unstable();
        for seq in due {
            let Some(c) = self.conns.get_mut(&seq) else {
                continue;
            };
            let old = c.deadline;
            match c.state {
                CliState::SynSent => {
                    let give_up = c.started + self.cfg.connect_timeout;
                    if now >= give_up {
                        self.fail(now, seq, TcpFailure::ConnectTimeout, out);
                        continue;
                    }
                    // tcp_retransmit_timer: RTO 1 s, doubling.
                    c.syn_tries += 1;
                    let rto = SimDuration::from_secs(1u64 << c.syn_tries.min(6));
                    c.deadline = (now + rto).min(give_up);
                    let (port, isn, tries) = (c.port, c.snd_nxt.wrapping_sub(1), c.syn_tries);
                    if let Some(r) = self.records.get_mut(seq) {
                        r.attempts = tries + 1;
                    }
                    let mut p = tcp_packet(
                        SocketAddr::new(self.cfg.local_ip, port),
                        self.cfg.dst,
                        TcpFlags::SYN,
                        isn,
                        0,
                        0,
                    );
                    p.tag = self.tag(seq, tries);
                    out.packets.push(p);
                    self.refile(seq, old);
                }
                CliState::Requested => self.fail(now, seq, TcpFailure::RequestTimeout, out),
                CliState::FinSent => {
                    // The server never closed: give up quietly; the exchange itself succeeded.
                    self.close(seq, out);
                }
                CliState::TimeWait => {
                    self.close(seq, out);
                }
            }
        }
        while self.next_send.is_some_and(|t| t <= now) {
            let seq = self.next_k;
            self.next_k += 1;
            self.schedule_next();
            let own = &self.by_port;
            let busy = |p: u16| in_use.in_use(p) || own.contains_key(&p);
            let Some(port) = connect.pick(self.cfg.local_ip, self.cfg.dst, &busy) else {
                self.records.push(QueryRecord {
                    seq,
                    sent_at: now,
                    src_port: 0,
                    attempts: 0,
                    outcome: QueryOutcome::NoPort(now),
                });
                continue;
            };
            let isn = self.isn_rng.next_u32();
            let src = SocketAddr::new(self.cfg.local_ip, port);
            let mut p = tcp_packet(src, self.cfg.dst, TcpFlags::SYN, isn, 0, 0);
            p.tag = self.tag(seq, 0);
            out.packets.push(p);
            out.events.push((
                now,
                AppEvent::TcpConnecting {
                    conn: seq,
                    src,
                    dst: self.cfg.dst,
                },
            ));
            self.records.push(QueryRecord {
                seq,
                sent_at: now,
                src_port: port,
                attempts: 1,
                outcome: QueryOutcome::Pending,
            });
            self.open(
                CliConn {
                    seq,
                    port,
                    state: CliState::SynSent,
                    snd_nxt: isn.wrapping_add(1),
                    rcv_nxt: 0,
                    started: now,
                    syn_tries: 0,
                    deadline: (now + SimDuration::from_secs(1)).min(now + self.cfg.connect_timeout),
                    answered_at: None,
                },
                out,
            );
        }
    }

    /// A segment or ICMP error for one of its connections arrived.
    pub fn handle_packet(&mut self, now: SimTime, pkt: &Packet, out: &mut Outbox) {
        let (port, icmp_code) = match pkt.l4 {
            L4::Tcp { dport, .. } => (dport, None),
            L4::Icmp {
                icmp_type: icmp::DEST_UNREACH,
                code,
                body: sim_core::IcmpBody::Error(inner),
            } if inner.src == self.cfg.local_ip => (inner.sport, Some(code)),
            _ => return,
        };
        let Some(&seq) = self.by_port.get(&port) else {
            return;
        };
        let local = SocketAddr::new(self.cfg.local_ip, port);
        if let Some(c) = self
            .conns
            .get_mut(&seq)
            .filter(|c| c.state == CliState::TimeWait)
        {
            // tcp_timewait_state_process: a RST ends TIME_WAIT (net.ipv4.tcp_rfc1337 = 0); a
            // retransmitted FIN is acknowledged again and restarts the 60 s; anything else
            // (an ICMP error included) leaves it be.
            let L4::Tcp { flags, .. } = pkt.l4 else {
                return;
            };
            if flags.contains(TcpFlags::RST) {
                self.close(seq, out);
            } else if flags.contains(TcpFlags::FIN) {
                let old = c.deadline;
                c.deadline = now + TCP_TIMEWAIT_LEN;
                let mut ack =
                    tcp_packet(local, self.cfg.dst, TcpFlags::ACK, c.snd_nxt, c.rcv_nxt, 0);
                ack.tag = pkt.tag;
                out.packets.push(ack);
                self.refile(seq, old);
            }
            return;
        }
        if icmp_code.is_some() {
            self.fail(now, seq, TcpFailure::Unreachable, out);
            return;
        }
        let L4::Tcp {
            flags, seq: pseq, ..
        } = pkt.l4
        else {
            return;
        };
        if flags.contains(TcpFlags::RST) {
            self.fail(now, seq, TcpFailure::Reset, out);
            return;
        }
        let tag = self.tag(seq, 0);
        let req = self.cfg.request_bytes;
        let Some(c) = self.conns.get_mut(&seq) else {
            return;
        };
        let old = c.deadline;
        match c.state {
            CliState::SynSent if flags.contains(TcpFlags::SYN | TcpFlags::ACK) => {
                c.rcv_nxt = pseq.wrapping_add(1);
                let mut ack =
                    tcp_packet(local, self.cfg.dst, TcpFlags::ACK, c.snd_nxt, c.rcv_nxt, 0);
                ack.tag = tag;
                let mut data = tcp_packet(
                    local,
                    self.cfg.dst,
                    TcpFlags::PSH | TcpFlags::ACK,
                    c.snd_nxt,
                    c.rcv_nxt,
                    req,
                );
                data.tag = tag;
                c.snd_nxt = c.snd_nxt.wrapping_add(req as u32);
                c.state = CliState::Requested;
                c.deadline = now + self.cfg.request_timeout;
                out.packets.push(ack);
                out.packets.push(data);
            }
            CliState::Requested if tcp_seg_len(pkt) > 0 => {
                c.rcv_nxt = pseq.wrapping_add(tcp_seg_len(pkt));
                let mut fin = tcp_packet(
                    local,
                    self.cfg.dst,
                    TcpFlags::FIN | TcpFlags::ACK,
                    c.snd_nxt,
                    c.rcv_nxt,
                    0,
                );
                fin.tag = tag;
                c.snd_nxt = c.snd_nxt.wrapping_add(1);
                c.state = CliState::FinSent;
                c.answered_at = Some(now);
                c.deadline = now + self.cfg.request_timeout;
                out.packets.push(fin);
                let started = c.started;
                if let Some(r) = self.records.get_mut(seq) {
                    r.outcome = QueryOutcome::Answered(now);
                }
                out.events.push((
                    now,
                    AppEvent::TcpCompleted {
                        conn: seq,
                        rtt: now - started,
                    },
                ));
            }
            CliState::FinSent if flags.contains(TcpFlags::FIN) => {
                c.rcv_nxt = pseq.wrapping_add(1);
                let mut ack =
                    tcp_packet(local, self.cfg.dst, TcpFlags::ACK, c.snd_nxt, c.rcv_nxt, 0);
                ack.tag = tag;
                out.packets.push(ack);
                c.state = CliState::TimeWait;
                c.deadline = now + TCP_TIMEWAIT_LEN;
            }
            _ => {}
        }
        self.refile(seq, old);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Timers come out by deadline, then in the order they were set, whatever the
        /// order of deadlines and however adds and pops interleave.
        #[test]
        fn timers_fire_by_deadline_then_insertion(ops in proptest::collection::vec((0u64..6, proptest::bool::ANY), 1..100)) {
            let mut timers = Timers::default();
            let mut model: Vec<(SimTime, usize)> = Vec::new();
            for (k, (secs, pop)) in ops.into_iter().enumerate() {
                if pop {
                    let now = SimTime::from_secs(secs);
                    // Stable: equal deadlines keep insertion order.
                    model.sort_by_key(|m| m.0);
                    let want = model.first().filter(|m| m.0 <= now).map(|m| m.1);
                    if want.is_some() {
                        model.remove(0);
                    }
                    proptest::prop_assert_eq!(timers.pop_due(now), want);
                } else {
                    timers.add(SimTime::from_secs(secs), k);
                    model.push((SimTime::from_secs(secs), k));
                }
                model.sort_by_key(|m| m.0);
                proptest::prop_assert_eq!(timers.next(), model.first().map(|m| m.0));
            }
        }
    }

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }
    fn t(s: u64) -> SimTime {
        SimTime::from_secs(s)
    }
    fn sched(interval: u64, count: Option<u32>) -> ClientSchedule {
        ClientSchedule {
            start: SimTime::ZERO,
            stop: SimTime::MAX,
            interval: SimDuration::from_secs(interval),
            jitter: SimDuration::ZERO,
            count,
        }
    }
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
            },
            7,
            "client/sidecar",
        )
    }

    #[test]
    fn tag_round_trips_and_zero_is_untagged() {
        let tag = Tag {
            client: 12,
            seq: 4_000_000_000,
            attempt: 3,
        };
        assert_eq!(Tag::unpack(tag.pack()), Some(tag));
        assert_eq!(Tag::unpack(0), None);
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
    fn closed_udp_port_gets_icmp_port_unreachable_quoting_the_query() {
        let q = Packet::udp(sa("10.244.2.9:40000"), sa("10.244.1.5:53")).tagged(5);
        let r = closed_port_response(&q).unwrap();
        match r.l4 {
            L4::Icmp {
                icmp_type,
                code,
                body: sim_core::IcmpBody::Error(inner),
            } => {
                assert_eq!(
                    (icmp_type, code),
                    (icmp::DEST_UNREACH, icmp::CODE_PORT_UNREACH)
                );
                assert_eq!((inner.sport, inner.dport), (40000, 53));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!((r.src, r.dst, r.tag), (q.dst, q.src, 5));
    }

    #[test]
    fn closed_tcp_port_resets_a_syn_but_never_a_rst() {
        let syn = Packet::tcp(sa("10.0.0.1:5000"), sa("10.0.0.2:80"), TcpFlags::SYN);
        let rst = closed_port_response(&syn).unwrap();
        assert_eq!(rst.tcp_flags(), Some(TcpFlags::RST | TcpFlags::ACK));
        assert!(closed_port_response(&rst).is_none());
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

    /// The bind/release notes of `Outbox::ports`, applied in order, always give the ports the
    /// client has bound (the host's table of ports in use is built from them alone).
    #[test]
    fn port_notes_track_the_bound_ports() {
        fn apply(table: &mut BTreeSet<u16>, out: &mut Outbox) {
            for (p, bound) in out.ports.drain(..) {
                if bound {
                    assert!(table.insert(p), "port {p} bound twice");
                } else {
                    assert!(table.remove(&p), "port {p} released but not bound");
                }
            }
        }
        let mut rng = SimRng::derive(3, "answers");
        for mode in [SourcePort::PerQuery, SourcePort::FixedEphemeral] {
            let mut c = UdpClient::new(
                UdpClientConfig {
                    index: 0,
                    local_ip: "10.244.2.9".parse().unwrap(),
                    dst: sa("10.96.0.10:53"),
                    schedule: sched(1, None),
                    source_port: mode,
                    timeout: SimDuration::from_secs(3),
                    retries: 1,
                    connected: true,
                    one_way: false,
                },
                7,
                "c",
            );
            let mut table = BTreeSet::new();
            let mut out = Outbox::new();
            for k in 0..300u64 {
                let now = SimTime::from_millis(500 * k);
                c.handle_timeout(now, &BTreeSet::new(), &mut out);
                for p in std::mem::take(&mut out.packets) {
                    if rng.below(3) == 0 {
                        let (Some(sp), Some(dp)) = (p.sport(), p.dport()) else {
                            continue;
                        };
                        let mut ans =
                            Packet::udp(SocketAddr::new(p.dst, dp), SocketAddr::new(p.src, sp));
                        ans.tag = p.tag;
                        c.handle_packet(now, &ans, &mut out);
                    }
                }
                apply(&mut table, &mut out);
                assert_eq!(table, c.bound_ports(), "{mode:?} at {k}");
                assert!(c.poll_timeout().is_some());
            }
        }
        // TCP: every connection times out (nothing answers).
        let mut c = TcpClient::new(
            TcpClientConfig {
                index: 0,
                local_ip: "10.244.2.9".parse().unwrap(),
                dst: sa("10.96.0.1:443"),
                schedule: sched(1, None),
                connect_timeout: SimDuration::from_secs(5),
                request_timeout: SimDuration::from_secs(5),
                request_bytes: 10,
            },
            7,
            "t",
        );
        let mut table = BTreeSet::new();
        let mut out = Outbox::new();
        for k in 0..100u64 {
            c.handle_timeout(
                SimTime::from_millis(700 * k),
                &BTreeSet::new(),
                &mut ConnectPorts::default(),
                &mut out,
            );
            apply(&mut table, &mut out);
            assert_eq!(table, c.bound_ports());
        }
        assert!(!table.is_empty() && table.len() <= 6, "{table:?}");
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
    fn the_longest_jitter_draws_without_overflow() {
        // `jitter + 1` wrapped to 0 and panicked in SimRng::below(0) (issue 31).
        let s = ClientSchedule {
            jitter: SimDuration::MAX,
            ..sched(30, Some(2))
        };
        let mut rng = SimRng::child(1, "c", "jitter");
        assert!(s.send_time(0, &mut rng).is_some());
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

    /// Runs a TCP client against a server directly (no network), returning the client.
    fn tcp_exchange(server_up: bool) -> (TcpClient, Vec<Packet>) {
        let mut c = TcpClient::new(
            TcpClientConfig {
                index: 0,
                local_ip: "10.0.0.1".parse().unwrap(),
                dst: sa("10.0.0.2:80"),
                schedule: sched(60, Some(1)),
                connect_timeout: SimDuration::from_secs(10),
                request_timeout: SimDuration::from_secs(10),
                request_bytes: 100,
            },
            1,
            "tcp",
        );
        let mut s = TcpServer::new(80, SimDuration::from_millis(5), SimRng::derive(1, "srv"));
        let mut wire = Vec::new();
        let mut now = SimTime::ZERO;
        let mut to_server: Vec<Packet> = Vec::new();
        let mut to_client: Vec<Packet> = Vec::new();
        for _ in 0..20 {
            let mut out = Outbox::new();
            if c.poll_timeout().is_some_and(|d| d <= now) {
                c.handle_timeout(
                    now,
                    &BTreeSet::new(),
                    &mut ConnectPorts::default(),
                    &mut out,
                );
            }
            for p in to_client.drain(..) {
                c.handle_packet(now, &p, &mut out);
            }
            to_server.append(&mut out.packets);
            let mut sout = Outbox::new();
            if s.poll_timeout().is_some_and(|d| d <= now) {
                s.handle_timeout(now, &mut sout);
            }
            for p in to_server.drain(..) {
                wire.push(p);
                if server_up {
                    s.handle_packet(now, &p, &mut sout);
                } else if let Some(r) = closed_port_response(&p) {
                    sout.packets.push(r);
                }
            }
            wire.extend(sout.packets.iter().copied());
            to_client.append(&mut sout.packets);
            now += SimDuration::from_millis(1);
        }
        (c, wire)
    }

    #[test]
    fn tcp_exchange_connects_requests_and_closes() {
        let (c, wire) = tcp_exchange(true);
        assert!(matches!(c.records()[0].outcome, QueryOutcome::Answered(_)));
        let flags: Vec<String> = wire
            .iter()
            .map(|p| p.tcp_flags().unwrap().to_string())
            .collect();
        assert_eq!(
            flags,
            ["SYN", "SYN,ACK", "ACK", "PSH,ACK", "ACK", "PSH,ACK", "FIN,ACK", "FIN,ACK", "ACK"]
        );
        // Sequence numbers line up: the server's FIN acknowledges the client's FIN.
        let (cfin, sfin) = (wire[6], wire[7]);
        let (L4::Tcp { seq: cs, .. }, L4::Tcp { ack: sa_, .. }) = (cfin.l4, sfin.l4) else {
            unreachable!()
        };
        assert_eq!(sa_, cs.wrapping_add(1));
    }

    #[test]
    fn tcp_rst_fails_the_exchange() {
        let (c, _) = tcp_exchange(false);
        assert_eq!(
            c.records()[0].outcome,
            QueryOutcome::Reset(SimTime::from_millis(1))
        );
    }

    /// Drives a TCP client and server against each other with 1 ms one-way delay, event by
    /// event, until `end`; `taken` marks ports as bound by other sockets of the host.
    /// Returns the client and, per connection, (port, SYN time, time the client closed).
    fn tcp_run(
        interval_ms: u64,
        count: u32,
        end: SimTime,
        taken: &BTreeSet<u16>,
    ) -> (TcpClient, Vec<(u16, SimTime, Option<SimTime>)>) {
        let mut c = TcpClient::new(
            TcpClientConfig {
                index: 0,
                local_ip: "10.244.1.5".parse().unwrap(),
                dst: sa("10.96.0.1:443"),
                schedule: ClientSchedule {
                    interval: SimDuration::from_millis(interval_ms),
                    ..sched(1, Some(count))
                },
                connect_timeout: SimDuration::from_secs(10),
                request_timeout: SimDuration::from_secs(10),
                request_bytes: 100,
            },
            1,
            "tcp",
        );
        let mut s = TcpServer::new(443, SimDuration::from_millis(5), SimRng::derive(1, "srv"));
        let mut connect = ConnectPorts::new(1, "pod/client");
        let delay = SimDuration::from_millis(1);
        // (arrival, seq, to_server, packet)
        let mut wire: BTreeMap<(SimTime, u64), (bool, Packet)> = BTreeMap::new();
        let mut n = 0u64;
        let mut conns: Vec<(u16, SimTime, Option<SimTime>)> = Vec::new();
        let mut released: BTreeMap<u16, SimTime> = BTreeMap::new();
        loop {
            let next = [
                wire.keys().next().map(|k| k.0),
                c.poll_timeout(),
                s.poll_timeout(),
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(now) = next.filter(|t| *t <= end) else {
                break;
            };
            let mut cout = Outbox::new();
            let mut sout = Outbox::new();
            while let Some((&k, _)) = wire.iter().next().filter(|(k, _)| k.0 <= now) {
                let (to_server, p) = wire.remove(&k).unwrap();
                if to_server {
                    s.handle_packet(now, &p, &mut sout);
                } else {
                    c.handle_packet(now, &p, &mut cout);
                }
            }
            if c.poll_timeout().is_some_and(|d| d <= now) {
                c.handle_timeout(now, taken, &mut connect, &mut cout);
            }
            if s.poll_timeout().is_some_and(|d| d <= now) {
                s.handle_timeout(now, &mut sout);
            }
            for (_, e) in &cout.events {
                if let AppEvent::TcpConnecting { src, .. } = e {
                    conns.push((src.port(), now, None));
                }
            }
            for (p, bound) in cout.ports.drain(..) {
                if !bound {
                    released.insert(p, now);
                }
            }
            for p in cout.packets {
                if p.tcp_flags() == Some(TcpFlags::ACK)
                    && conns
                        .iter()
                        .any(|c| c.0 == p.sport().unwrap() && c.2.is_none())
                {
                    // The client's last ACK: closed, TIME_WAIT starts.
                    let tag = Tag::unpack(p.tag).unwrap();
                    if let Some(r) = conns.get_mut(tag.seq as usize) {
                        if matches!(
                            c.records()[tag.seq as usize].outcome,
                            QueryOutcome::Answered(_)
                        ) {
                            r.2 = Some(now);
                        }
                    }
                }
                n += 1;
                wire.insert((now + delay, n), (true, p));
            }
            for p in sout.packets {
                n += 1;
                wire.insert((now + delay, n), (false, p));
            }
        }
        (c, conns)
    }

    /// `__inet_check_established` + `tcp_twsk_unique`: a 4-tuple in TIME_WAIT is not picked
    /// again. With only three ports free, the fourth connection within 60 s finds none
    /// (EADDRNOTAVAIL) and each port comes back 60 s after its connection closed.
    #[test]
    fn a_port_in_time_wait_is_not_reused_toward_the_same_destination() {
        let free = [40000u16, 40002, 40004];
        let taken: BTreeSet<u16> = (EPHEMERAL_PORT_FIRST..=EPHEMERAL_PORT_LAST)
            .filter(|p| !free.contains(p))
            .collect();
        let (c, conns) = tcp_run(1_000, 70, SimTime::from_secs(80), &taken);
        let outcomes: Vec<QueryOutcome> = c.records().iter().map(|r| r.outcome).collect();
        assert!(matches!(outcomes[0], QueryOutcome::Answered(_)));
        assert!(matches!(outcomes[2], QueryOutcome::Answered(_)));
        assert_eq!(
            outcomes[3],
            QueryOutcome::NoPort(t(3)),
            "all three in TIME_WAIT"
        );
        assert_eq!(outcomes[59], QueryOutcome::NoPort(t(59)));
        // Connection 0 closed about 10 ms after its SYN at 0 s: its port is free again at 60 s
        // and the connection started at 61 s gets it.
        let closed0 = conns[0].2.unwrap();
        assert!(closed0 < SimTime::from_millis(20), "{closed0:?}");
        assert_eq!(c.records()[61].src_port, conns[0].0);
        assert!(matches!(outcomes[61], QueryOutcome::Answered(_)));
        for (i, a) in conns.iter().enumerate() {
            for b in &conns[i + 1..] {
                if a.0 == b.0 {
                    let closed = a.2.expect("closed before its port came back");
                    assert!(b.1 >= closed + TCP_TIMEWAIT_LEN, "{a:?} then {b:?}");
                }
            }
        }
    }

    /// 1,800 connections, one every 100 ms (about 600 in TIME_WAIT at any time): no 4-tuple
    /// is met again within TIME_WAIT (with uniform draws 7 of them were).
    #[test]
    fn eighteen_hundred_connections_never_reuse_a_four_tuple_within_time_wait() {
        let (c, conns) = tcp_run(100, 1_800, SimTime::from_secs(300), &BTreeSet::new());
        assert_eq!(conns.len(), 1_800);
        assert!(c
            .records()
            .iter()
            .all(|r| matches!(r.outcome, QueryOutcome::Answered(_))));
        let mut last: BTreeMap<u16, (SimTime, Option<SimTime>)> = BTreeMap::new();
        for (port, syn, closed) in &conns {
            if let Some((_, prev_closed)) = last.get(port) {
                let prev_closed = prev_closed.expect("closed");
                assert!(*syn >= prev_closed + TCP_TIMEWAIT_LEN, "port {port} reused");
            }
            last.insert(*port, (*syn, *closed));
        }
    }
}
