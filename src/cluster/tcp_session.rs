//! A TCP client that keeps its connections: many requests per connection (HTTP keep-alive,
//! a connection pool, a gRPC channel), several connections at once, and pauses on an open
//! socket (`docs/kernel-model.md` §14).
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
//!   by the kernel at once and the socket sits in CLOSE_WAIT: the application sees the EOF
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
    tcp_packet, tcp_seg_len, AppEvent, ClientSchedule, Outbox, PortsInUse, QueryOutcome,
    QueryRecord, Tag, TcpFailure, TCP_TIMEWAIT_LEN,
};
use crate::cluster::ports::ConnectPorts;
use sim_core::packet::icmp;
use sim_core::{Packet, SimDuration, SimRng, SimTime, TcpFlags, L4};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{IpAddr, SocketAddr};

/// A pause on open connections: no request from `start + after` for `duration`; the rest of
/// the schedule moves by `duration`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pause {
    /// From the client's start to the pause.
    pub after: SimDuration,
    /// How long it lasts.
    pub duration: SimDuration,
}

/// How a TCP client uses its connections (`tcp.connection` of a scenario client).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionPolicy {
    /// Requests per connection, after which the client closes it; `None`: keep-alive (as many
    /// as come, until the connection breaks).
    pub requests: Option<u32>,
    /// Connections open at once (at least 1).
    pub parallel: u32,
    /// A pause on the open connections.
    pub pause: Option<Pause>,
}

/// The configuration of a [`TcpSessionClient`].
#[derive(Clone, Debug)]
pub struct TcpSessionConfig {
    /// Index of the client in the scenario (goes into the [`Tag`]).
    pub index: u32,
    /// The client's address.
    pub local_ip: IpAddr,
    /// Where it connects.
    pub dst: SocketAddr,
    /// When requests are made (one per interval).
    pub schedule: ClientSchedule,
    /// Give up a handshake after this long.
    pub connect_timeout: SimDuration,
    /// Give up waiting for a response after this long.
    pub request_timeout: SimDuration,
    /// Request payload in bytes.
    pub request_bytes: u16,
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
    jitter_rng: SimRng,
    isn_rng: SimRng,
    next_k: u32,
    next_send: Option<SimTime>,
    next_conn: u32,
    slots: Vec<Slot>,
    conns: BTreeMap<u32, Conn>,
    deadlines: BTreeSet<(SimTime, u32)>,
    by_port: BTreeMap<u16, u32>,
    /// Slots whose application has something to do at `pump_at` (read a response or an
    /// EOF, send a queued request).
    pump: BTreeSet<u32>,
    pump_at: Option<SimTime>,
    records: Vec<QueryRecord>,
}

impl TcpSessionClient {
    /// A client; `seed` and `label` name its seeded streams (`{label}/jitter`, `{label}/isn`).
    pub fn new(cfg: TcpSessionConfig, seed: u64, label: &str) -> TcpSessionClient {
        let parallel = cfg.policy.parallel.max(1);
        let mut c = TcpSessionClient {
            jitter_rng: SimRng::child(seed, label, "jitter"),
            isn_rng: SimRng::child(seed, label, "isn"),
            next_k: 0,
            next_send: None,
            next_conn: 0,
            slots: vec![Slot::default(); parallel as usize],
            conns: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            by_port: BTreeMap::new(),
            pump: BTreeSet::new(),
            pump_at: None,
            records: Vec::new(),
            cfg,
        };
        c.schedule_next();
        c
    }

    /// The configuration.
    pub fn config(&self) -> &TcpSessionConfig {
        &self.cfg
    }

    /// Every request so far, in order (`src_port` is the connection's).
    pub fn records(&self) -> &[QueryRecord] {
        &self.records
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
            self.next_send,
            self.deadlines.first().map(|(t, _)| *t),
            self.pump_at,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// When request `k` is due: the schedule's time, moved by the pause for requests whose
    /// nominal time falls at or after the pause's start.
    fn schedule_next(&mut self) {
        let s = &self.cfg.schedule;
        let k = self.next_k;
        self.next_send = match self.cfg.policy.pause {
            Some(p) if s.start + s.interval.saturating_mul(k as u64) >= s.start + p.after => {
                let moved = ClientSchedule {
                    start: s.start + p.duration,
                    ..s.clone()
                };
                moved.send_time(k, &mut self.jitter_rng)
            }
            _ => s.send_time(k, &mut self.jitter_rng),
        };
    }

    fn tag(&self, request: u32, attempt: u8) -> u64 {
        Tag {
            client: self.cfg.index,
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
            SocketAddr::new(self.cfg.local_ip, c.port),
            self.cfg.dst,
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
        if let Some(rec) = self.records.get_mut(r as usize) {
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
        }
        if let Some(s) = self.slots.get_mut(slot as usize) {
            if s.conn == Some(id) {
                s.conn = None;
            }
        }
        self.set_deadline(id, Some(now + self.cfg.request_timeout));
        self.note(now, id, format!("closing (FIN): {why}"), out);
    }

    /// Sends request `r` on connection `id` (established and idle).
    fn send_request(&mut self, now: SimTime, id: u32, r: u32, out: &mut Outbox) {
        let req = self.cfg.request_bytes;
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.busy = Some(r);
        c.served += 1;
        c.last_request = r;
        let src = SocketAddr::new(self.cfg.local_ip, c.port);
        let port = c.port;
        self.send(id, TcpFlags::PSH | TcpFlags::ACK, req, out);
        if let Some(c) = self.conns.get_mut(&id) {
            c.snd_nxt = c.snd_nxt.wrapping_add(req as u32);
        }
        if let Some(rec) = self.records.get_mut(r as usize) {
            rec.src_port = port;
        }
        self.set_deadline(id, Some(now + self.cfg.request_timeout));
        out.events.push((
            now,
            AppEvent::TcpRequestSent {
                request: r,
                conn: id,
                src,
                dst: self.cfg.dst,
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
        let Some(port) = connect.pick(self.cfg.local_ip, self.cfg.dst, &busy) else {
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
            Some((now + SimDuration::from_secs(1)).min(now + self.cfg.connect_timeout)),
        );
        if let Some(s) = self.slots.get_mut(slot as usize) {
            s.conn = Some(id);
        }
        if let Some(rec) = self.records.get_mut(r as usize) {
            rec.src_port = port;
        }
        let src = SocketAddr::new(self.cfg.local_ip, port);
        self.note(now, id, format!("{src} -> {} SYN", self.cfg.dst), out);
        true
    }

    /// Whether the schedule has no request left.
    fn schedule_done(&self) -> bool {
        self.next_send.is_none()
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
            if let Some(rec) = self.records.get_mut(r as usize) {
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
        let due: Vec<u32> = self
            .deadlines
            .range(..=(now, u32::MAX))
            .map(|(_, k)| *k)
            .collect();
        for id in due {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            match c.state {
                State::SynSent => {
                    let give_up = c.started + self.cfg.connect_timeout;
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
                        SocketAddr::new(self.cfg.local_ip, port),
                        self.cfg.dst,
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
                State::CloseWait => self.set_deadline(id, None),
                State::FinWait | State::LastAck => {
                    self.note(now, id, "FIN never acknowledged: given up".into(), out);
                    self.drop_conn(now, id, out);
                }
                State::TimeWait => self.drop_conn(now, id, out),
            }
        }
        while self.next_send.is_some_and(|t| t <= now) {
            let r = self.next_k;
            self.next_k += 1;
            self.schedule_next();
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
                icmp_type: icmp::DEST_UNREACH,
                code,
                body: sim_core::IcmpBody::Error(inner),
            } if inner.src == self.cfg.local_ip => (inner.sport, Some(code)),
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
                return;
            }
            State::Established | State::CloseWait => {
                if payload > 0 {
                    c.rcv_nxt = pseq.wrapping_add(payload);
                    if let Some(r) = c.busy.take() {
                        let sent_at = self
                            .records
                            .get(r as usize)
                            .map_or(now, |rec| rec.sent_at);
                        if let Some(rec) = self.records.get_mut(r as usize) {
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
                    let busy = c.busy.is_some();
                    c.eof_read = busy;
                    self.send(id, TcpFlags::ACK, 0, out);
                    self.note(
                        now,
                        id,
                        "FIN from the server acknowledged: CLOSE_WAIT until the client reads the EOF"
                            .into(),
                        out,
                    );
                    if busy {
                        self.request_failed(now, id, TcpFailure::PeerClosed, out);
                    }
                    self.set_deadline(id, None);
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
