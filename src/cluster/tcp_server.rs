//! The TCP server application: accepts connections on its port, answers each request after a
//! service time, and closes as Linux's socket layer does (`docs/kernel-model.md` §15): when
//! the client closes, after `close_after` responses (a half-close, its FIN first), or when its
//! process dies (a FIN on every connection, orphans that reset new data).
//!
//! Sans-IO like the other applications of [`crate::cluster::apps`].

use crate::cluster::apps::{
    closed_port_response, tcp_packet, tcp_seg_len, AppEvent, Outbox, Timers, TCP_TIMEWAIT_LEN,
};
use sim_core::{Packet, SimDuration, SimRng, SimTime, TcpFlags, L4};
use std::collections::BTreeMap;
use std::net::SocketAddr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SrvConnState {
    SynReceived,
    Established,
    /// The client closed first and the server answered with its own FIN (LAST_ACK).
    Closed,
    /// The server sent its FIN first (FIN_WAIT1/FIN_WAIT2): after `shutdown(SHUT_WR)` it
    /// still reads (`orphan` false); after its process died the socket is an orphan whose
    /// receive side is shut too, so new data gets a RST (`tcp_rcv_state_process`).
    FinWait {
        orphan: bool,
    },
    /// The server closed first and the client's FIN came: TIME_WAIT until this instant.
    TimeWait(SimTime),
}

#[derive(Debug, Clone)]
struct SrvConn {
    state: SrvConnState,
    snd_nxt: u32,
    rcv_nxt: u32,
    /// Responses sent on this connection.
    answered: u32,
    /// When an orphaned FIN_WAIT socket goes (`net.ipv4.tcp_fin_timeout`).
    orphan_until: Option<SimTime>,
    /// The address and port the client reached (after any DNAT).
    local: SocketAddr,
    /// Delayed-ACK "pingpong" mode: entered once a response leaves within the delayed-ACK
    /// time of its request; before it, each request is acknowledged at once (quick-ack).
    pingpong: bool,
}

/// The delayed-ACK time (`TCP_DELACK_MIN`, `TCP_ATO_MIN`: 40 ms): an ACK the kernel holds
/// back, hoping for data to ride on, goes out after this long.
pub const TCP_DELACK_MIN: SimDuration = SimDuration::from_millis(40);

#[derive(Debug, Clone)]
enum SrvTimer {
    Respond {
        peer: SocketAddr,
        local: SocketAddr,
        tag: u64,
    },
    /// TIME_WAIT or an orphan's FIN_WAIT2 may have run out for `peer`.
    Expire { peer: SocketAddr },
}

/// How long an orphaned socket waits in FIN_WAIT2 for the peer's FIN
/// (`net.ipv4.tcp_fin_timeout`, 60 s).
pub const TCP_FIN_TIMEOUT: SimDuration = SimDuration::from_secs(60);

/// A TCP server: accepts connections on its port, answers each request (a segment with
/// payload) with a response after a service time, and closes when the client closes.
///
/// Segments for an unknown connection that are not a SYN get a RST, as Linux does.
///
/// With [`TcpServer::close_after`] it half-closes a connection after that many responses
/// (`shutdown(SHUT_WR)`, as a server done with a keep-alive connection does): its FIN follows
/// the response, it keeps reading, acknowledges the client's FIN and holds the 4-tuple in
/// TIME_WAIT for [`TCP_TIMEWAIT_LEN`]. [`TcpServer::process_exit`] is the process dying: the
/// kernel closes its sockets (`tcp_close`: a FIN on each connection; the orphans answer new
/// data with a RST and go after [`TCP_FIN_TIMEOUT`]) and the listener is gone.
#[derive(Debug, Clone)]
pub struct TcpServer {
    /// The listening port.
    pub port: u16,
    /// Time to produce a response.
    pub service_time: SimDuration,
    /// Response payload size in bytes.
    pub response_bytes: u16,
    /// Half-close a connection after this many responses on it (`None`: never).
    pub close_after: Option<u32>,
    /// DNS over TCP (RFC 1035 §4.2.2) from this zone: a resolver's query is answered whole,
    /// its two-octet length first, instead of [`TcpServer::response_bytes`].
    pub zone: Option<(std::sync::Arc<crate::dns::DnsData>, usize)>,
    conns: BTreeMap<SocketAddr, SrvConn>,
    timers: Timers<SrvTimer>,
    isn: SimRng,
    accepted: u64,
    listening: bool,
}

impl TcpServer {
    /// A server on `port`; `isn` is the seeded stream for its initial sequence numbers.
    pub fn new(port: u16, service_time: SimDuration, isn: SimRng) -> TcpServer {
        TcpServer {
            port,
            service_time,
            response_bytes: 64,
            close_after: None,
            zone: None,
            conns: BTreeMap::new(),
            timers: Timers::default(),
            isn,
            accepted: 0,
            listening: true,
        }
    }
    /// Connections accepted (SYN answered) so far.
    pub fn accepted(&self) -> u64 {
        self.accepted
    }
    /// Whether it still has connections (an exited process's orphans included).
    pub fn has_connections(&self) -> bool {
        !self.conns.is_empty()
    }
    /// The server's process dies: the listener goes (a SYN gets a RST), a connection not
    /// yet accepted is reset, every other one gets a FIN (`tcp_close` with nothing unread)
    /// and lives on as an orphan until the client's FIN or [`TCP_FIN_TIMEOUT`].
    pub fn process_exit(&mut self, now: SimTime, out: &mut Outbox) {
        self.listening = false;
        self.timers = Timers::default();
        let peers: Vec<SocketAddr> = self.conns.keys().copied().collect();
        for peer in peers {
            let Some(c) = self.conns.get_mut(&peer) else {
                continue;
            };
            let local = c.local;
            match c.state {
                SrvConnState::SynReceived => {
                    out.packets
                        .push(tcp_packet(local, peer, TcpFlags::RST, c.snd_nxt, 0, 0));
                    self.conns.remove(&peer);
                }
                SrvConnState::Established => {
                    out.packets.push(tcp_packet(
                        local,
                        peer,
                        TcpFlags::FIN | TcpFlags::ACK,
                        c.snd_nxt,
                        c.rcv_nxt,
                        0,
                    ));
                    c.snd_nxt = c.snd_nxt.wrapping_add(1);
                    c.state = SrvConnState::FinWait { orphan: true };
                    c.orphan_until = Some(now + TCP_FIN_TIMEOUT);
                    self.timers
                        .add(now + TCP_FIN_TIMEOUT, SrvTimer::Expire { peer });
                }
                SrvConnState::FinWait { .. } => {
                    c.state = SrvConnState::FinWait { orphan: true };
                    c.orphan_until = Some(now + TCP_FIN_TIMEOUT);
                    self.timers
                        .add(now + TCP_FIN_TIMEOUT, SrvTimer::Expire { peer });
                }
                SrvConnState::Closed | SrvConnState::TimeWait(_) => {}
            }
        }
    }
    /// A segment for its port arrived.
    pub fn handle_packet(&mut self, now: SimTime, pkt: &Packet, out: &mut Outbox) {
        let L4::Tcp {
            sport,
            dport,
            flags,
            seq,
            ..
        } = pkt.l4
        else {
            return;
        };
        if dport != self.port {
            return;
        }
        let peer = SocketAddr::new(pkt.src, sport);
        let local = SocketAddr::new(pkt.dst, dport);
        if flags.contains(TcpFlags::RST) {
            self.conns.remove(&peer);
            return;
        }
        let in_time_wait = matches!(
            self.conns.get(&peer).map(|c| c.state),
            Some(SrvConnState::TimeWait(_))
        );
        if flags.contains(TcpFlags::SYN) && !flags.contains(TcpFlags::ACK) {
            if !self.listening {
                if let Some(rst) = closed_port_response(pkt) {
                    out.packets.push(rst);
                }
                return;
            }
            // A SYN for a 4-tuple in TIME_WAIT starts a new connection
            // (`tcp_timewait_state_process` → `TCP_TW_SYN`).
            let isn = self.isn.next_u32();
            let c = SrvConn {
                state: SrvConnState::SynReceived,
                snd_nxt: isn.wrapping_add(1),
                rcv_nxt: seq.wrapping_add(1),
                answered: 0,
                orphan_until: None,
                local,
                pingpong: false,
            };
            let mut p = tcp_packet(
                local,
                peer,
                TcpFlags::SYN | TcpFlags::ACK,
                isn,
                c.rcv_nxt,
                0,
            );
            p.tag = pkt.tag;
            out.packets.push(p);
            self.conns.insert(peer, c);
            self.accepted += 1;
            return;
        }
        let Some(c) = self.conns.get_mut(&peer) else {
            if let Some(rst) = closed_port_response(pkt) {
                out.packets.push(rst);
            }
            return;
        };
        if in_time_wait {
            // tcp_timewait_state_process: a retransmitted FIN is acknowledged again and
            // restarts the 60 s; anything else leaves TIME_WAIT be.
            if flags.contains(TcpFlags::FIN) {
                c.state = SrvConnState::TimeWait(now + TCP_TIMEWAIT_LEN);
                let mut ack = tcp_packet(local, peer, TcpFlags::ACK, c.snd_nxt, c.rcv_nxt, 0);
                ack.tag = pkt.tag;
                out.packets.push(ack);
                self.timers
                    .add(now + TCP_TIMEWAIT_LEN, SrvTimer::Expire { peer });
            }
            return;
        }
        if c.state == SrvConnState::SynReceived && flags.contains(TcpFlags::ACK) {
            c.state = SrvConnState::Established;
        }
        let payload = tcp_seg_len(pkt)
            - u32::from(flags.contains(TcpFlags::FIN))
            - u32::from(flags.contains(TcpFlags::SYN));
        if payload > 0 {
            match c.state {
                SrvConnState::Established => {
                    c.rcv_nxt = c.rcv_nxt.wrapping_add(payload);
                    if !c.pingpong {
                        // tcp_event_data_recv → tcp_incr_quickack: the first data of a
                        // connection is acknowledged at once, before the application
                        // answers (the 16-segment quick-ack budget is not counted).
                        let mut ack =
                            tcp_packet(local, peer, TcpFlags::ACK, c.snd_nxt, c.rcv_nxt, 0);
                        ack.tag = pkt.tag;
                        out.packets.push(ack);
                    }
                    self.timers.add(
                        now + self.service_time,
                        SrvTimer::Respond {
                            peer,
                            local,
                            tag: pkt.tag,
                        },
                    );
                }
                SrvConnState::FinWait { orphan: true } => {
                    // Data for a socket whose receive side is shut: RST (RFC 1122).
                    if let Some(rst) = closed_port_response(pkt) {
                        out.packets.push(rst);
                    }
                    self.conns.remove(&peer);
                    return;
                }
                SrvConnState::FinWait { orphan: false } => {
                    // Half-closed: it still reads, and acknowledges what it read.
                    c.rcv_nxt = c.rcv_nxt.wrapping_add(payload);
                    if !flags.contains(TcpFlags::FIN) {
                        let mut ack =
                            tcp_packet(local, peer, TcpFlags::ACK, c.snd_nxt, c.rcv_nxt, 0);
                        ack.tag = pkt.tag;
                        out.packets.push(ack);
                    }
                }
                _ => {}
            }
        }
        if flags.contains(TcpFlags::FIN) {
            match c.state {
                SrvConnState::FinWait { .. } => {
                    // It closed first: acknowledge the client's FIN, hold TIME_WAIT.
                    c.rcv_nxt = c.rcv_nxt.wrapping_add(1);
                    let mut ack = tcp_packet(local, peer, TcpFlags::ACK, c.snd_nxt, c.rcv_nxt, 0);
                    ack.tag = pkt.tag;
                    out.packets.push(ack);
                    c.state = SrvConnState::TimeWait(now + TCP_TIMEWAIT_LEN);
                    self.timers
                        .add(now + TCP_TIMEWAIT_LEN, SrvTimer::Expire { peer });
                }
                SrvConnState::Closed | SrvConnState::TimeWait(_) => {}
                SrvConnState::SynReceived | SrvConnState::Established => {
                    c.rcv_nxt = c.rcv_nxt.wrapping_add(1);
                    let mut p = tcp_packet(
                        local,
                        peer,
                        TcpFlags::FIN | TcpFlags::ACK,
                        c.snd_nxt,
                        c.rcv_nxt,
                        0,
                    );
                    p.tag = pkt.tag;
                    c.snd_nxt = c.snd_nxt.wrapping_add(1);
                    c.state = SrvConnState::Closed;
                    out.packets.push(p);
                }
            }
        } else if c.state == SrvConnState::Closed && flags.contains(TcpFlags::ACK) {
            // The client's last ACK: the connection is gone (TIME_WAIT is the client's).
            self.conns.remove(&peer);
        }
    }
    /// Sends responses that are due.
    pub fn handle_timeout(&mut self, now: SimTime, out: &mut Outbox) {
        while let Some(t) = self.timers.pop_due(now) {
            let (peer, local, tag) = match t {
                SrvTimer::Respond { peer, local, tag } => (peer, local, tag),
                SrvTimer::Expire { peer } => {
                    let gone = self.conns.get(&peer).is_some_and(|c| match c.state {
                        SrvConnState::TimeWait(until) => until <= now,
                        SrvConnState::FinWait { orphan: true } => {
                            c.orphan_until.is_some_and(|u| u <= now)
                        }
                        _ => false,
                    });
                    if gone {
                        self.conns.remove(&peer);
                    }
                    continue;
                }
            };
            let Some(c) = self.conns.get_mut(&peer) else {
                continue;
            };
            if c.state != SrvConnState::Established {
                continue;
            }
            let (tag, bytes) = match crate::cluster::apps::zone_answer(
                &self.zone,
                tag,
                crate::dns::Transport::Tcp,
            ) {
                Some((t, len)) => (t, 2 + len as u16),
                None => (tag, self.response_bytes),
            };
            let mut p = tcp_packet(
                local,
                peer,
                TcpFlags::PSH | TcpFlags::ACK,
                c.snd_nxt,
                c.rcv_nxt,
                bytes,
            );
            p.tag = tag;
            c.snd_nxt = c.snd_nxt.wrapping_add(bytes as u32);
            c.answered += 1;
            // tcp_event_data_sent: data sent within the delayed-ACK time of the last data
            // received enters pingpong mode (`tcp_pingpong_thresh` 1): later requests'
            // ACKs wait for the response.
            if self.service_time < TCP_DELACK_MIN {
                c.pingpong = true;
            }
            out.events.push((
                now,
                AppEvent::ServerAnswered {
                    port: self.port,
                    to: peer,
                },
            ));
            out.packets.push(p);
            if self.close_after.is_some_and(|n| c.answered >= n) {
                // shutdown(SHUT_WR) after the response: tcp_send_fin on an empty write
                // queue sends the FIN in a segment of its own.
                let mut fin = tcp_packet(
                    local,
                    peer,
                    TcpFlags::FIN | TcpFlags::ACK,
                    c.snd_nxt,
                    c.rcv_nxt,
                    0,
                );
                fin.tag = tag;
                c.snd_nxt = c.snd_nxt.wrapping_add(1);
                c.state = SrvConnState::FinWait { orphan: false };
                out.packets.push(fin);
            }
        }
    }
    /// The next response's deadline.
    pub fn poll_timeout(&self) -> Option<SimTime> {
        self.timers.next()
    }
}
