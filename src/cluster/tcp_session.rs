//! A TCP client that keeps its connections: many requests per connection (HTTP keep-alive,
//! a connection pool, a gRPC channel), several connections at once, and pauses on an open
//! socket (`docs/kernel-model.md` §15).
//!
//! [`crate::cluster::apps::TcpClient`] opens one connection per request and closes it. This
//! one, [`TcpSessionClient`], runs `parallel` connection slots; request `k` of the schedule
//! goes on slot `k mod parallel`, one request at a time per connection (HTTP/1.1 without
//! pipelining: a request due while its slot's connection is busy waits for it). A slot's
//! connection carries `requests` requests (or, keep-alive, as many as come) and is then closed
//! by the client, which sends the first FIN and so holds TIME_WAIT for 60 s. A connection that
//! breaks (a RST, a request timeout, a handshake that fails) is replaced on the slot's next
//! request.
//!
//! The packets follow Linux's socket layer:
//!
//! - a connection is a handshake (SYN; SYN/ACK; ACK), then requests and responses as one
//!   segment each; each response is acknowledged at once (Linux quick-acks the first segments
//!   a connection receives, `tcp_incr_quickack`; later ones it may delay up to 40 ms);
//! - SYNs are retransmitted after 1 s, 2 s, 4 s, … until `connect_timeout` (ETIMEDOUT);
//! - a FIN from the server (a server that half-closes, or whose process died) is acknowledged
//!   by the kernel after the delayed-ACK time, 40 ms (`tcp_fin` enters pingpong mode; if the
//!   application closes first, its FIN carries the ACK and conntrack skips CLOSE_WAIT), and
//!   the socket sits in CLOSE_WAIT: the application sees the EOF
//!   only when it next reads, that is when its next request is due (as a connection pool
//!   checks a pooled connection before reusing it). Then it closes (its FIN acknowledges the
//!   server's; LAST_ACK until the server's ACK) and opens a new connection for the request. A
//!   request in flight when the FIN comes fails (the server closed before answering);
//! - the application reads a response and acts on it (closing after the last request) after
//!   every segment that arrived with it: a FIN right behind the response is seen first, so
//!   the client then closes second, as on Linux, not in a simultaneous close;
//! - an ICMP error fails a connection still in its handshake (`tcp_v4_err`); on an
//!   established one it is a soft error and changes nothing;
//! - a RST ends the connection (ECONNREFUSED during the handshake, ECONNRESET after), in any
//!   state, TIME_WAIT included (`tcp_rfc1337` = 0).
//!
//! What the model leaves out: retransmission of data and of FINs (a request with no response
//! fails after `request_timeout`; a FIN nobody acknowledges is given up after the same time),
//! TCP keepalive probes (off unless a program sets `SO_KEEPALIVE`), window and MSS.
//!
//! The client is sans-IO like the others in [`crate::cluster::apps`].

use crate::cluster::apps::{
    due_at, tcp_packet, tcp_seg_len, AppEvent, Outbox, Pacing, PortsInUse, QueryOutcome,
    QueryRecord, Scheduler, Shift, Tag, TcpClientConfig, TcpFailure, TCP_DELACK_MIN,
    TCP_TIMEWAIT_LEN,
};
use crate::cluster::ports::ConnectPorts;
use crate::cluster::querylog::QueryLog;
// How a client uses its connections is the scenario model's setting; this module runs it.
pub use crate::scenario::model::{ConnectionPolicy, Pause};
use sim_core::packet::icmp;
use sim_core::{Packet, SimDuration, SimRng, SimTime, TcpFlags, L4};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;

/// The configuration of a [`TcpSessionClient`]: a plain [`TcpClientConfig`] (who, where,
/// when, timeouts, request size) and how its connections are used.
#[derive(Clone, Debug)]
pub struct TcpSessionConfig {
    /// The client, its schedule and timeouts, as for a one-request-per-connection client.
    pub client: TcpClientConfig,
    /// How connections are used.
    pub policy: ConnectionPolicy,
}

/// A connection's TCP state, as `ss` names it on the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    SynSent,
    Established,
    /// The server's FIN came and was acknowledged; the application has not closed yet.
    CloseWait,
    /// The client sent its FIN first (FIN_WAIT1/FIN_WAIT2).
    FinWait,
    /// The client closed after the server's FIN; waiting for the ACK of its own.
    LastAck,
    TimeWait,
}

#[derive(Debug, Clone)]
struct Conn {
    slot: u32,
    port: u16,
    state: State,
    snd_nxt: u32,
    rcv_nxt: u32,
    started: SimTime,
    syn_tries: u8,
    deadline: Option<SimTime>,
    /// The request waiting for its response on it.
    busy: Option<u32>,
    /// Requests sent on it.
    served: u32,
    /// The request whose tag its segments carry.
    last_request: u32,
    /// The application has read the server's EOF (it was waiting for a response).
    eof_read: bool,
    /// The server's FIN waits for its delayed ACK (`tcp_fin` enters pingpong mode).
    fin_ack_pending: bool,
}

#[derive(Debug, Clone, Default)]
struct Slot {
    /// The connection requests go on (open, opening or in CLOSE_WAIT).
    conn: Option<u32>,
    /// Requests due, waiting for the connection.
    queue: VecDeque<u32>,
}

/// A TCP client keeping its connections (see the module doc).
#[derive(Debug, Clone)]
pub struct TcpSessionClient {
    cfg: TcpSessionConfig,
    sends: Scheduler,
    isn_rng: SimRng,
    next_conn: u32,
    slots: Vec<Slot>,
    conns: BTreeMap<u32, Conn>,
    deadlines: BTreeSet<(SimTime, u32)>,
    by_port: BTreeMap<u16, u32>,
    /// Slots whose application has something to do at `pump_at` (read a response or an
    /// EOF, send a queued request).
    pump: BTreeSet<u32>,
    pump_at: Option<SimTime>,
    records: QueryLog,
}

impl TcpSessionClient {
    /// A client; `seed` and `label` name its seeded streams (`{label}/jitter`, `{label}/isn`).
    pub fn new(cfg: TcpSessionConfig, seed: u64, label: &str) -> TcpSessionClient {
        let parallel = cfg.policy.parallel.max(1);
        let mut c = TcpSessionClient {
            sends: Scheduler::new(seed, label),
            isn_rng: SimRng::child(seed, label, "isn"),
            next_conn: 0,
            slots: vec![Slot::default(); parallel as usize],
            conns: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            by_port: BTreeMap::new(),
            pump: BTreeSet::new(),
            pump_at: None,
            records: QueryLog::new(),
            cfg,
        };
        let pacing = c.pacing();
        c.sends.schedule(&c.cfg.client.schedule, pacing);
        c
    }

    /// The configuration.
    pub fn config(&self) -> &TcpSessionConfig {
        &self.cfg
    }

    /// The requests kept, in order (`src_port` is the connection's): every one so far,
    /// unless the driver took the finished ones ([`TcpSessionClient::take_finished`]).
    pub fn records(&self) -> &[QueryRecord] {
        self.records.kept()
    }

    /// Removes the finished requests at the front of [`TcpSessionClient::records`] and
    /// returns them. A request's outcome is set once, when it ends (its response read, its
    /// connection failed or timed out while it waited, no port for it): every later change
    /// goes to the request then waiting on the connection, never to an ended one, so an ended
    /// request is final even while its connection stays open.
    pub fn take_finished(&mut self) -> Vec<QueryRecord> {
        self.records.take_finished(|_| false)
    }

    /// Ports bound right now (every connection not yet closed, TIME_WAIT included).
    pub fn bound_ports(&self) -> BTreeSet<u16> {
        self.by_port.keys().copied().collect()
    }

    /// Whether it has `port` bound right now.
    pub fn binds(&self, port: u16) -> bool {
        self.by_port.contains_key(&port)
    }

    /// Connections opened so far.
    pub fn connections_opened(&self) -> u32 {
        self.next_conn
    }

    /// The next instant it needs [`TcpSessionClient::handle_timeout`].
    pub fn poll_timeout(&self) -> Option<SimTime> {
        [
            self.sends.next(),
            self.deadlines.first().map(|(t, _)| *t),
            self.pump_at,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// How its requests follow each other: the schedule's times, moved by the pause for
    /// requests whose nominal time falls at or after the pause's start.
    fn pacing(&self) -> Pacing {
        Pacing::Periodic(self.cfg.policy.pause.map(Shift::from))
    }

    fn tag(&self, request: u32, attempt: u8) -> u64 {
        Tag {
            client: self.cfg.client.index,
            seq: request,
            attempt,
        }
        .pack()
    }

    fn set_deadline(&mut self, id: u32, at: Option<SimTime>) {
        if let Some(c) = self.conns.get_mut(&id) {
            if let Some(old) = c.deadline {
                self.deadlines.remove(&(old, id));
            }
            c.deadline = at;
            if let Some(t) = at {
                self.deadlines.insert((t, id));
            }
        }
    }

    /// Forgets connection `id` (CLOSED): its port is free again.
    fn drop_conn(&mut self, now: SimTime, id: u32, out: &mut Outbox) {
        self.set_deadline(id, None);
        let Some(c) = self.conns.remove(&id) else {
            return;
        };
        self.by_port.remove(&c.port);
        out.ports.push((c.port, false));
        if let Some(slot) = self.slots.get_mut(c.slot as usize) {
            if slot.conn == Some(id) {
                slot.conn = None;
                if !slot.queue.is_empty() {
                    self.wake_slot(now, c.slot);
                }
            }
        }
    }

    fn send(&self, id: u32, flags: TcpFlags, payload: u16, out: &mut Outbox) {
        let Some(c) = self.conns.get(&id) else {
            return;
        };
        let mut p = tcp_packet(
            SocketAddr::new(self.cfg.client.local_ip, c.port),
            self.cfg.client.dst,
            flags,
            c.snd_nxt,
            c.rcv_nxt,
            payload,
        );
        p.tag = self.tag(c.last_request, 0);
        out.packets.push(p);
    }

    fn note(&self, now: SimTime, id: u32, change: String, out: &mut Outbox) {
        let request = self.conns.get(&id).map_or(0, |c| c.last_request);
        out.events.push((
            now,
            AppEvent::TcpConnection {
                conn: id,
                request,
                change,
            },
        ));
    }

    fn request_failed(&mut self, now: SimTime, id: u32, reason: TcpFailure, out: &mut Outbox) {
        let Some(r) = self.conns.get_mut(&id).and_then(|c| c.busy.take()) else {
            return;
        };
        if let Some(rec) = self.records.get_mut(r) {
            rec.outcome = match reason {
                TcpFailure::Reset | TcpFailure::PeerClosed => QueryOutcome::Reset(now),
                TcpFailure::Unreachable => QueryOutcome::IcmpError(now, icmp::CODE_HOST_UNREACH),
                TcpFailure::ConnectTimeout | TcpFailure::RequestTimeout => {
                    QueryOutcome::TimedOut(now)
                }
            };
        }
        out.events.push((
            now,
            AppEvent::TcpRequestFailed {
                request: r,
                conn: id,
                reason,
            },
        ));
    }

    /// The application closes connection `id`: FIN (FIN_WAIT, or LAST_ACK after the
    /// server's FIN), given up after `request_timeout` if it is never answered.
    fn close(&mut self, now: SimTime, id: u32, why: &str, out: &mut Outbox) {
        let Some(c) = self.conns.get(&id) else {
            return;
        };
        let (state, slot) = (c.state, c.slot);
        let next = match state {
            State::Established => State::FinWait,
            State::CloseWait => State::LastAck,
            _ => return,
        };
        self.send(id, TcpFlags::FIN | TcpFlags::ACK, 0, out);
        if let Some(c) = self.conns.get_mut(&id) {
            c.snd_nxt = c.snd_nxt.wrapping_add(1);
            c.state = next;
            c.fin_ack_pending = false;
        }
        if let Some(s) = self.slots.get_mut(slot as usize) {
            if s.conn == Some(id) {
                s.conn = None;
            }
        }
        self.set_deadline(id, Some(now + self.cfg.client.request_timeout));
        self.note(now, id, format!("closing (FIN): {why}"), out);
    }

    /// Sends request `r` on connection `id` (established and idle).
    fn send_request(&mut self, now: SimTime, id: u32, r: u32, out: &mut Outbox) {
        let req = self.cfg.client.request_bytes;
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.busy = Some(r);
        c.served += 1;
        c.last_request = r;
        let src = SocketAddr::new(self.cfg.client.local_ip, c.port);
        let port = c.port;
        self.send(id, TcpFlags::PSH | TcpFlags::ACK, req, out);
        if let Some(c) = self.conns.get_mut(&id) {
            c.snd_nxt = c.snd_nxt.wrapping_add(req as u32);
        }
        if let Some(rec) = self.records.get_mut(r) {
            rec.src_port = port;
        }
        self.set_deadline(id, Some(now + self.cfg.client.request_timeout));
        out.events.push((
            now,
            AppEvent::TcpRequestSent {
                request: r,
                conn: id,
                src,
                dst: self.cfg.client.dst,
            },
        ));
    }

    /// Opens a connection on `slot` for request `r`; `false` when no port is free.
    fn open<P: PortsInUse + ?Sized>(
        &mut self,
        now: SimTime,
        slot: u32,
        r: u32,
        in_use: &P,
        connect: &mut ConnectPorts,
        out: &mut Outbox,
    ) -> bool {
        let own = &self.by_port;
        let busy = |p: u16| in_use.in_use(p) || own.contains_key(&p);
        let Some(port) = connect.pick(self.cfg.client.local_ip, self.cfg.client.dst, &busy) else {
            return false;
        };
        let id = self.next_conn;
        self.next_conn += 1;
        let isn = self.isn_rng.next_u32();
        self.conns.insert(
            id,
            Conn {
                slot,
                port,
                state: State::SynSent,
                snd_nxt: isn,
                rcv_nxt: 0,
                started: now,
                syn_tries: 0,
                deadline: None,
                busy: Some(r),
                served: 0,
                last_request: r,
                eof_read: false,
                fin_ack_pending: false,
            },
        );
        self.by_port.insert(port, id);
        out.ports.push((port, true));
        self.send(id, TcpFlags::SYN, 0, out);
        if let Some(c) = self.conns.get_mut(&id) {
            c.snd_nxt = isn.wrapping_add(1);
        }
        self.set_deadline(
            id,
            Some((now + SimDuration::from_secs(1)).min(now + self.cfg.client.connect_timeout)),
        );
        if let Some(s) = self.slots.get_mut(slot as usize) {
            s.conn = Some(id);
        }
        if let Some(rec) = self.records.get_mut(r) {
            rec.src_port = port;
        }
        let src = SocketAddr::new(self.cfg.client.local_ip, port);
        self.note(
            now,
            id,
            format!("{src} -> {} SYN", self.cfg.client.dst),
            out,
        );
        true
    }

    /// Whether the schedule has no request left.
    fn schedule_done(&self) -> bool {
        self.sends.next().is_none()
    }

    /// The application of `slot` acts: closes a connection that is done (its requests made,
    /// the schedule over, or the server's EOF read), sends the next queued request, opening a
    /// connection for it when needed.
    fn run_slot<P: PortsInUse + ?Sized>(
        &mut self,
        now: SimTime,
        slot: u32,
        in_use: &P,
        connect: &mut ConnectPorts,
        out: &mut Outbox,
    ) {
        loop {
            let cur = self.slots[slot as usize].conn;
            let front = self.slots[slot as usize].queue.front().copied();
            if let Some(id) = cur {
                let Some(c) = self.conns.get(&id) else {
                    self.slots[slot as usize].conn = None;
                    continue;
                };
                let (state, busy, served, eof_read) = (c.state, c.busy, c.served, c.eof_read);
                if busy.is_some() {
                    return;
                }
                match state {
                    // The application reads the EOF when it next uses the connection.
                    State::CloseWait if eof_read || front.is_some() || self.schedule_done() => {
                        self.close(now, id, "the server's EOF read", out);
                        continue;
                    }
                    State::CloseWait => return,
                    State::Established => {
                        if self.cfg.policy.requests.is_some_and(|n| served >= n) {
                            self.close(now, id, &format!("{served} requests made"), out);
                            continue;
                        }
                        match front {
                            Some(r) => {
                                self.slots[slot as usize].queue.pop_front();
                                self.send_request(now, id, r, out);
                            }
                            None if self.schedule_done() => {
                                self.close(now, id, "no more requests", out);
                            }
                            None => {}
                        }
                        return;
                    }
                    _ => return,
                }
            }
            let Some(r) = front else {
                return;
            };
            if self.open(now, slot, r, in_use, connect, out) {
                self.slots[slot as usize].queue.pop_front();
                return;
            }
            // No free port (EADDRNOTAVAIL): the request fails at once.
            self.slots[slot as usize].queue.pop_front();
            if let Some(rec) = self.records.get_mut(r) {
                rec.outcome = QueryOutcome::NoPort(now);
            }
        }
    }

    /// Makes due requests, retransmits SYNs, gives up on timeouts, and lets each
    /// application act on what it read. `in_use` tells the TCP ports bound on this host by
    /// other sockets; `connect` is the host's port picker.
    pub fn handle_timeout<P: PortsInUse + ?Sized>(
        &mut self,
        now: SimTime,
        in_use: &P,
        connect: &mut ConnectPorts,
        out: &mut Outbox,
    ) {
        let due = due_at(&self.deadlines, now);
        for id in due {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            match c.state {
                State::SynSent => {
                    let give_up = c.started + self.cfg.client.connect_timeout;
                    if now >= give_up {
                        self.request_failed(now, id, TcpFailure::ConnectTimeout, out);
                        self.note(now, id, "connect timed out".into(), out);
                        self.drop_conn(now, id, out);
                        continue;
                    }
                    // tcp_retransmit_timer: RTO 1 s, doubling.
                    c.syn_tries += 1;
                    let rto = SimDuration::from_secs(1u64 << c.syn_tries.min(6));
                    let (tries, r, port, isn) = (
                        c.syn_tries,
                        c.last_request,
                        c.port,
                        c.snd_nxt.wrapping_sub(1),
                    );
                    let mut p = tcp_packet(
                        SocketAddr::new(self.cfg.client.local_ip, port),
                        self.cfg.client.dst,
                        TcpFlags::SYN,
                        isn,
                        0,
                        0,
                    );
                    p.tag = self.tag(r, tries);
                    out.packets.push(p);
                    self.set_deadline(id, Some((now + rto).min(give_up)));
                }
                State::Established => {
                    // A request with no response: the application gives up on it and on
                    // the connection.
                    self.request_failed(now, id, TcpFailure::RequestTimeout, out);
                    self.close(now, id, "request timed out", out);
                    let slot = self.conns.get(&id).map(|c| c.slot);
                    if let Some(s) = slot {
                        self.pump.insert(s);
                    }
                }
                State::CloseWait => {
                    // The delayed ACK of the server's FIN: CLOSE_WAIT in conntrack too.
                    if std::mem::take(&mut c.fin_ack_pending) {
                        self.send(id, TcpFlags::ACK, 0, out);
                    }
                    self.set_deadline(id, None);
                }
                State::FinWait | State::LastAck => {
                    self.note(now, id, "FIN never acknowledged: given up".into(), out);
                    self.drop_conn(now, id, out);
                }
                State::TimeWait => self.drop_conn(now, id, out),
            }
        }
        let pacing = self.pacing();
        while let Some(r) = self.sends.take_due(now, &self.cfg.client.schedule, pacing) {
            self.records.push(QueryRecord {
                seq: r,
                sent_at: now,
                src_port: 0,
                attempts: 1,
                outcome: QueryOutcome::Pending,
            });
            let slot = r % self.slots.len() as u32;
            self.slots[slot as usize].queue.push_back(r);
            self.pump.insert(slot);
        }
        if self.schedule_done() {
            // The last request is out: every idle connection may close now.
            for s in 0..self.slots.len() as u32 {
                if self.slots[s as usize].conn.is_some() {
                    self.pump.insert(s);
                }
            }
        }
        if self.pump_at.is_some_and(|t| t <= now) || !self.pump.is_empty() {
            self.pump_at = None;
            let slots = std::mem::take(&mut self.pump);
            for s in slots {
                self.run_slot(now, s, in_use, connect, out);
            }
        }
    }

    /// A segment or an ICMP error for one of its connections arrived.
    pub fn handle_packet(&mut self, now: SimTime, pkt: &Packet, out: &mut Outbox) {
        let (port, icmp_code) = match pkt.l4 {
            L4::Tcp { dport, .. } => (dport, None),
            L4::Icmp {
                icmp_type,
                code,
                body: sim_core::IcmpBody::Error(inner),
            } if icmp::is_dest_unreach(!pkt.is_ipv4(), icmp_type)
                && inner.src == self.cfg.client.local_ip =>
            {
                (inner.sport, Some(code))
            }
            _ => return,
        };
        let Some(&id) = self.by_port.get(&port) else {
            return;
        };
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let slot = c.slot;
        if icmp_code.is_some() {
            if c.state == State::SynSent {
                self.request_failed(now, id, TcpFailure::Unreachable, out);
                self.note(now, id, "destination unreachable".into(), out);
                self.drop_conn(now, id, out);
            }
            return;
        }
        let L4::Tcp {
            flags,
            seq: pseq,
            ack: pack,
            ..
        } = pkt.l4
        else {
            return;
        };
        if flags.contains(TcpFlags::RST) {
            if c.state != State::TimeWait {
                self.request_failed(now, id, TcpFailure::Reset, out);
                self.note(now, id, "reset (RST received)".into(), out);
            }
            self.drop_conn(now, id, out);
            return;
        }
        let payload = tcp_seg_len(pkt)
            - u32::from(flags.contains(TcpFlags::FIN))
            - u32::from(flags.contains(TcpFlags::SYN));
        match c.state {
            State::SynSent => {
                if !flags.contains(TcpFlags::SYN | TcpFlags::ACK) {
                    return;
                }
                c.rcv_nxt = pseq.wrapping_add(1);
                c.state = State::Established;
                self.send(id, TcpFlags::ACK, 0, out);
                // The request the connection was opened for goes at once.
                if let Some(r) = self.conns.get_mut(&id).and_then(|c| c.busy.take()) {
                    self.send_request(now, id, r, out);
                }
            }
            State::Established | State::CloseWait => {
                if payload > 0 {
                    c.rcv_nxt = pseq.wrapping_add(payload);
                    if let Some(r) = c.busy.take() {
                        let sent_at = self.records.get(r).map_or(now, |rec| rec.sent_at);
                        if let Some(rec) = self.records.get_mut(r) {
                            rec.outcome = QueryOutcome::Answered(now);
                        }
                        out.events.push((
                            now,
                            AppEvent::TcpRequestAnswered {
                                request: r,
                                conn: id,
                                rtt: now - sent_at,
                            },
                        ));
                    }
                    if !flags.contains(TcpFlags::FIN) {
                        self.send(id, TcpFlags::ACK, 0, out);
                    }
                    self.set_deadline(id, None);
                    self.wake_slot(now, slot);
                }
                let Some(c) = self.conns.get_mut(&id) else {
                    return;
                };
                if flags.contains(TcpFlags::FIN) && c.state == State::Established {
                    c.rcv_nxt = pseq.wrapping_add(payload + 1);
                    c.state = State::CloseWait;
                    c.fin_ack_pending = true;
                    let busy = c.busy.is_some();
                    c.eof_read = busy;
                    self.note(
                        now,
                        id,
                        "FIN from the server: CLOSE_WAIT until the client reads the EOF".into(),
                        out,
                    );
                    if busy {
                        self.request_failed(now, id, TcpFailure::PeerClosed, out);
                    }
                    // tcp_fin enters pingpong mode: the ACK waits the delayed-ACK time, unless
                    // the application closes first and its FIN carries it.
                    self.set_deadline(id, Some(now + TCP_DELACK_MIN));
                    if busy || self.schedule_done() {
                        self.wake_slot(now, slot);
                    }
                }
            }
            State::FinWait => {
                // Our FIN is acknowledged when the ACK covers it; the server's FIN ends in
                // TIME_WAIT (from FIN_WAIT2, or CLOSING when the FINs crossed).
                if flags.contains(TcpFlags::FIN) {
                    c.rcv_nxt = pseq.wrapping_add(payload + 1);
                    c.state = State::TimeWait;
                    self.send(id, TcpFlags::ACK, 0, out);
                    self.set_deadline(id, Some(now + TCP_TIMEWAIT_LEN));
                }
            }
            State::LastAck => {
                if flags.contains(TcpFlags::ACK) && pack == c.snd_nxt {
                    self.drop_conn(now, id, out);
                }
            }
            State::TimeWait => {
                // tcp_timewait_state_process: a retransmitted FIN is acknowledged again and
                // restarts the 60 s.
                if flags.contains(TcpFlags::FIN) {
                    self.send(id, TcpFlags::ACK, 0, out);
                    self.set_deadline(id, Some(now + TCP_TIMEWAIT_LEN));
                }
            }
        }
    }

    /// The application of `slot` acts at `now`, after the segments arriving with this one.
    fn wake_slot(&mut self, now: SimTime, slot: u32) {
        self.pump.insert(slot);
        self.pump_at = Some(self.pump_at.map_or(now, |t| t.min(now)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::apps::{ClientSchedule, TcpServer};

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn client(interval_ms: u64, count: u32, policy: ConnectionPolicy) -> TcpSessionClient {
        TcpSessionClient::new(
            TcpSessionConfig {
                client: TcpClientConfig {
                    index: 0,
                    local_ip: "10.244.1.9".parse().unwrap(),
                    dst: sa("10.244.2.5:8080"),
                    schedule: ClientSchedule {
                        start: SimTime::ZERO,
                        stop: SimTime::MAX,
                        interval: SimDuration::from_millis(interval_ms),
                        jitter: SimDuration::ZERO,
                        count: Some(count),
                    },
                    connect_timeout: SimDuration::from_secs(10),
                    request_timeout: SimDuration::from_secs(10),
                    request_bytes: 100,
                },
                policy,
            },
            1,
            "c",
        )
    }

    const KEEP_ALIVE: ConnectionPolicy = ConnectionPolicy {
        requests: None,
        parallel: 1,
        pause: None,
    };

    /// One wire event: when, which way (true: to the server), the packet.
    type Wire = Vec<(SimTime, bool, Packet)>;

    /// Runs client and server against each other, 1 ms one way, until `end`; `kill` is when
    /// the server's process dies. Returns everything sent, in order.
    fn run(
        c: &mut TcpSessionClient,
        s: &mut TcpServer,
        end: SimTime,
        kill: Option<SimTime>,
    ) -> Wire {
        let delay = SimDuration::from_millis(1);
        let mut connect = ConnectPorts::new(1, "pod/client");
        let mut queue: BTreeMap<(SimTime, u64), (bool, Packet)> = BTreeMap::new();
        let mut n = 0u64;
        let mut wire = Vec::new();
        let mut kill = kill;
        loop {
            let next = [
                queue.keys().next().map(|k| k.0),
                c.poll_timeout(),
                s.poll_timeout(),
                kill,
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(now) = next.filter(|t| *t <= end) else {
                break;
            };
            let mut cout = Outbox::new();
            let mut sout = Outbox::new();
            if kill.is_some_and(|k| k <= now) {
                kill = None;
                s.process_exit(now, &mut sout);
            }
            while let Some((&k, _)) = queue.iter().next().filter(|(k, _)| k.0 <= now) {
                let (to_server, p) = queue.remove(&k).unwrap();
                if to_server {
                    s.handle_packet(now, &p, &mut sout);
                } else {
                    c.handle_packet(now, &p, &mut cout);
                }
            }
            if c.poll_timeout().is_some_and(|d| d <= now) {
                c.handle_timeout(now, &BTreeSet::new(), &mut connect, &mut cout);
            }
            if s.poll_timeout().is_some_and(|d| d <= now) {
                s.handle_timeout(now, &mut sout);
            }
            for (to_server, out) in [(true, cout.packets), (false, sout.packets)] {
                for p in out {
                    n += 1;
                    wire.push((now, to_server, p));
                    queue.insert((now + delay, n), (to_server, p));
                }
            }
        }
        wire
    }

    fn flags(wire: &Wire) -> Vec<String> {
        wire.iter()
            .map(|(_, to_server, p)| {
                format!(
                    "{}{}",
                    if *to_server { ">" } else { "<" },
                    p.tcp_flags().unwrap()
                )
            })
            .collect()
    }

    fn seq_ack(p: &Packet) -> (u32, u32) {
        match p.l4 {
            L4::Tcp { seq, ack, .. } => (seq, ack),
            _ => unreachable!(),
        }
    }

    fn server() -> TcpServer {
        TcpServer::new(8080, SimDuration::from_millis(5), SimRng::derive(1, "srv"))
    }

    #[test]
    fn keep_alive_carries_every_request_on_one_connection_and_the_client_closes_first() {
        let mut c = client(1000, 3, KEEP_ALIVE);
        let mut s = server();
        let wire = run(&mut c, &mut s, SimTime::from_secs(100), None);
        assert_eq!(
            flags(&wire),
            [
                ">SYN", "<SYN,ACK", ">ACK", ">PSH,ACK", "<ACK", "<PSH,ACK",
                ">ACK", // request 0
                ">PSH,ACK", "<PSH,ACK", ">ACK", // request 1
                ">PSH,ACK", "<PSH,ACK", ">ACK", // request 2
                ">FIN,ACK", "<FIN,ACK", ">ACK", // the client closes first
            ]
        );
        assert_eq!(c.connections_opened(), 1);
        assert!(c
            .records()
            .iter()
            .all(|r| matches!(r.outcome, QueryOutcome::Answered(_))));
        // Sequence numbers: each request starts where the last ended, each ACK covers what
        // the other side sent, the server's FIN acknowledges the client's.
        let client_segs: Vec<(u32, u32)> = wire
            .iter()
            .filter(|w| w.1 && w.2.tcp_flags() == Some(TcpFlags::PSH | TcpFlags::ACK))
            .map(|w| seq_ack(&w.2))
            .collect();
        assert_eq!(client_segs[1].0, client_segs[0].0.wrapping_add(100));
        assert_eq!(client_segs[2].0, client_segs[1].0.wrapping_add(100));
        assert_eq!(client_segs[1].1, client_segs[0].1.wrapping_add(64));
        let (cfin, sfin) = (&wire[13].2, &wire[14].2);
        assert_eq!(seq_ack(sfin).1, seq_ack(cfin).0.wrapping_add(1));
        assert_eq!(seq_ack(&wire[15].2).1, seq_ack(sfin).0.wrapping_add(1));
        // TIME_WAIT is the client's: its port stays bound 60 s after the last ACK.
        let last_ack = wire[15].0;
        let mut c2 = client(1000, 3, KEEP_ALIVE);
        let mut s2 = server();
        run(
            &mut c2,
            &mut s2,
            last_ack + SimDuration::from_secs(59),
            None,
        );
        assert_eq!(c2.bound_ports().len(), 1, "TIME_WAIT holds the port");
        let mut c3 = client(1000, 3, KEEP_ALIVE);
        let mut s3 = server();
        run(
            &mut c3,
            &mut s3,
            last_ack + SimDuration::from_secs(61),
            None,
        );
        assert!(c3.bound_ports().is_empty());
    }

    #[test]
    fn requests_per_connection_and_parallel_connections() {
        let policy = ConnectionPolicy {
            requests: Some(2),
            parallel: 3,
            pause: None,
        };
        let mut c = client(100, 12, policy);
        let mut s = server();
        let wire = run(&mut c, &mut s, SimTime::from_secs(100), None);
        // 12 requests, 3 slots of 4 requests, 2 per connection: 6 connections.
        assert_eq!(c.connections_opened(), 6);
        assert_eq!(s.accepted(), 6);
        let ports: BTreeSet<u16> = c.records().iter().map(|r| r.src_port).collect();
        assert_eq!(ports.len(), 6);
        // Requests 0, 3 share a connection (slot 0), as do 1, 4 and 2, 5.
        let r = c.records();
        assert_eq!(r[0].src_port, r[3].src_port);
        assert_eq!(r[1].src_port, r[4].src_port);
        assert_ne!(r[0].src_port, r[1].src_port);
        assert_ne!(r[0].src_port, r[6].src_port);
        // Three connections were open at once at 250 ms.
        let syns_before: usize = wire
            .iter()
            .filter(|w| w.0 < SimTime::from_millis(250) && w.2.tcp_flags() == Some(TcpFlags::SYN))
            .count();
        assert_eq!(syns_before, 3);
        // Every connection was closed by the client's FIN first.
        let fins: Vec<bool> = wire
            .iter()
            .filter(|w| w.2.tcp_flags().is_some_and(|f| f.contains(TcpFlags::FIN)))
            .map(|w| w.1)
            .collect();
        assert_eq!(fins.len(), 12);
        assert!(r
            .iter()
            .all(|r| matches!(r.outcome, QueryOutcome::Answered(_))));
    }

    #[test]
    fn a_half_closing_server_sends_fin_first_and_the_client_sits_in_close_wait() {
        let mut c = client(10_000, 2, KEEP_ALIVE);
        let mut s = server();
        s.close_after = Some(1);
        let wire = run(&mut c, &mut s, SimTime::from_secs(100), None);
        assert_eq!(
            flags(&wire),
            [
                ">SYN", "<SYN,ACK", ">ACK", ">PSH,ACK", "<ACK", "<PSH,ACK", "<FIN,ACK",
                ">ACK", // the response's ACK
                ">ACK", // 40 ms later, the FIN's (delayed ACK): CLOSE_WAIT
                ">FIN,ACK", ">SYN",
                "<ACK", // 10 s later: EOF read, LAST_ACK, a new connection
                "<SYN,ACK", ">ACK", ">PSH,ACK", "<ACK", "<PSH,ACK", "<FIN,ACK", ">ACK", ">FIN,ACK",
                "<ACK", // the schedule is over: the client's FIN carries the ACK
            ]
        );
        // The server FINs at 8 ms (SYN 0, request at 2 ms, 5 ms service, 1 ms wire); the
        // client at its next request, 10 s.
        let server_fin = wire
            .iter()
            .position(|w| !w.1 && w.2.tcp_flags() == Some(TcpFlags::FIN | TcpFlags::ACK))
            .unwrap();
        let client_fin = wire
            .iter()
            .position(|w| w.1 && w.2.tcp_flags() == Some(TcpFlags::FIN | TcpFlags::ACK))
            .unwrap();
        assert_eq!(
            wire[client_fin].0 - wire[server_fin].0,
            SimDuration::from_millis(9_992)
        );
        assert_eq!(c.connections_opened(), 2);
        assert!(c
            .records()
            .iter()
            .all(|r| matches!(r.outcome, QueryOutcome::Answered(_))));
        // The server's ACK of the client's FIN leaves it in TIME_WAIT for 60 s (until about
        // 70 s for the second connection), then it forgets the connection.
        assert!(!s.has_connections(), "gone at 100 s");
        let mut c2 = client(10_000, 2, KEEP_ALIVE);
        let mut s2 = server();
        s2.close_after = Some(1);
        run(&mut c2, &mut s2, SimTime::from_secs(50), None);
        assert!(s2.has_connections(), "TIME_WAIT at 50 s");
    }

    #[test]
    fn a_dying_server_sends_fin_and_resets_the_next_connection() {
        let mut c = client(1000, 3, KEEP_ALIVE);
        let mut s = server();
        let wire = run(
            &mut c,
            &mut s,
            SimTime::from_secs(100),
            Some(SimTime::from_millis(1500)),
        );
        let f = flags(&wire);
        assert_eq!(
            &f[10..],
            [
                "<FIN,ACK", ">ACK", // the kill: the kernel's FIN, the client's kernel ACKs
                ">FIN,ACK", ">SYN",     // at 2 s: EOF read, close, a new connection
                "<ACK",     // the orphan acknowledges the FIN (TIME_WAIT)
                "<RST,ACK", // no listener
            ]
        );
        let out: Vec<QueryOutcome> = c.records().iter().map(|r| r.outcome).collect();
        assert!(matches!(out[0], QueryOutcome::Answered(_)));
        assert!(matches!(out[1], QueryOutcome::Answered(_)), "{out:?}");
        assert!(matches!(out[2], QueryOutcome::Reset(_)), "{out:?}");
    }

    #[test]
    fn data_to_an_orphan_gets_a_rst() {
        // The client's request crosses the server's FIN: the orphan resets it.
        let mut c = client(1000, 2, KEEP_ALIVE);
        let mut s = server();
        let kill = SimTime::from_nanos(1_000_500_000);
        let wire = run(&mut c, &mut s, SimTime::from_secs(100), Some(kill));
        let f = flags(&wire);
        assert_eq!(&f[7..10], [">PSH,ACK", "<FIN,ACK", "<RST"], "{f:?}");
        assert!(matches!(c.records()[1].outcome, QueryOutcome::Reset(_)));
    }

    #[test]
    fn a_pause_keeps_the_connection_and_moves_the_schedule() {
        let policy = ConnectionPolicy {
            pause: Some(Pause {
                after: SimDuration::from_secs(3),
                duration: SimDuration::from_secs(60),
            }),
            ..KEEP_ALIVE
        };
        let mut c = client(1000, 6, policy);
        let mut s = server();
        let wire = run(&mut c, &mut s, SimTime::from_secs(200), None);
        let sent: Vec<u64> = c
            .records()
            .iter()
            .map(|r| r.sent_at.as_nanos() / 1_000_000_000)
            .collect();
        assert_eq!(sent, [0, 1, 2, 63, 64, 65]);
        assert_eq!(c.connections_opened(), 1, "the same socket after the pause");
        // Nothing on the wire during the pause.
        assert!(!wire
            .iter()
            .any(|w| w.0 > SimTime::from_secs(3) && w.0 < SimTime::from_secs(63)));
    }
}
