//! The TCP client of one connection per exchange ([`TcpClient`]): connect, send one request,
//! read the response, close, and keep the port in TIME_WAIT afterwards.

use super::{
    due_at, tcp_packet, tcp_seg_len, AppEvent, ClientSchedule, Outbox, Pacing, PortsInUse,
    QueryOutcome, QueryRecord, Scheduler, Tag, TcpFailure, TCP_TIMEWAIT_LEN,
};
use crate::cluster::ports::ConnectPorts;
use crate::cluster::querylog::QueryLog;
use sim_core::packet::icmp;
use sim_core::{Packet, SimDuration, SimRng, SimTime, TcpFlags, L4};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

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
    sends: Scheduler,
    isn_rng: SimRng,
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
            sends: Scheduler::new(seed, label),
            isn_rng: SimRng::child(seed, label, "isn"),
            conns: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            by_port: BTreeMap::new(),
            records: QueryLog::new(),
            cfg,
        };
        c.sends.schedule(&c.cfg.schedule, Pacing::Periodic(None));
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
    /// The next instant it needs [`TcpClient::handle_timeout`].
    pub fn poll_timeout(&self) -> Option<SimTime> {
        // The earlier of the next send and the nearest deadline, where either exists.
        [self.sends.next(), self.deadlines.first().map(|(t, _)| *t)]
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
        let mut due = due_at(&self.deadlines, now);
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
        while let Some(seq) = self
            .sends
            .take_due(now, &self.cfg.schedule, Pacing::Periodic(None))
        {
            let own = &self.by_port;
            let busy = |p: u16| in_use.in_use(p) || own.contains_key(&p);
            let Some(port) = connect.pick(self.cfg.local_ip, self.cfg.dst, &busy) else {
                self.records.push(QueryRecord::no_port(seq, now));
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
                icmp_type,
                code,
                body: sim_core::IcmpBody::Error(inner),
            } if icmp::is_dest_unreach(!pkt.is_ipv4(), icmp_type)
                && inner.src == self.cfg.local_ip =>
            {
                (inner.sport, Some(code))
            }
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
    use crate::cluster::apps::tests::{sa, sched, t};
    use crate::cluster::apps::{
        closed_port_response, TcpServer, EPHEMERAL_PORT_FIRST, EPHEMERAL_PORT_LAST,
    };

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
