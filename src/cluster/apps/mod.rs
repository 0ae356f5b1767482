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
//!
//! What the applications share is here: the [`Tag`] their packets carry, the [`AppEvent`]s they
//! report, the [`Outbox`] they fill, the [`ClientSchedule`] of a client's sends and the one
//! scheduler every client kind runs it with (`scheduler.rs`), the [`QueryRecord`] of each query, and the ephemeral port range a client draws from. The
//! applications have their own files: [`UdpServer`] and [`UdpClient`] (`udp.rs`), and
//! [`TcpClient`], one connection per exchange (`tcp_client.rs`); beside them in
//! [`crate::cluster`] are the TCP server ([`TcpServer`]), the keep-alive TCP client
//! ([`crate::cluster::tcp_session`]) and the ping client ([`crate::cluster::ping`]). Under
//! them: the socket layer that answers without an application and builds TCP segments
//! (`socket.rs`), and the timers of one application (`timers.rs`).

mod resolver_client;
mod scheduler;
mod socket;
mod tcp_client;
mod timers;
mod udp;

pub use resolver_client::{LookupPlan, ResolverClient, ResolverClientConfig};
pub(crate) use scheduler::{due_at, Pacing, Scheduler, Shift};
pub use socket::{closed_port_response, TCP_TIMEWAIT_LEN};
pub(crate) use socket::{tcp_packet, tcp_seg_len};
pub use tcp_client::{TcpClient, TcpClientConfig};
pub(crate) use timers::Timers;
pub(crate) use udp::zone_answer;
pub use udp::{UdpClient, UdpClientConfig, UdpServer};

pub use crate::cluster::tcp_server::{TcpServer, TCP_DELACK_MIN, TCP_FIN_TIMEOUT};
// The settings of the applications are the scenario model's (what to run); the cluster
// runs them.
pub use crate::scenario::model::{ClientSchedule, SourcePort, UdpReply};
use sim_core::{Packet, SimDuration, SimRng, SimTime};
use std::collections::BTreeSet;
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
        // A resolver's DNS tag (`dns::tag`) numbers its client the same way.
        let client = (tag & !crate::dns::tag::DNS_TAG) >> 40;
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
        /// The error was ICMPv6 (type 1), not ICMP (type 3).
        icmpv6: bool,
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
    /// A resolver client sent a DNS query.
    DnsQuery {
        /// Lookup number.
        lookup: u32,
        /// The name asked (its text: [`crate::dns::DnsNames::name`]; no allocation per
        /// packet).
        name: crate::dns::NameId,
        /// The type asked.
        qtype: crate::dns::QType,
        /// Over TCP.
        tcp: bool,
        /// The socket it left from.
        src: SocketAddr,
        /// The nameserver.
        dst: SocketAddr,
    },
    /// A resolver client got a DNS answer.
    DnsAnswer {
        /// Lookup number.
        lookup: u32,
        /// The name answered.
        name: crate::dns::NameId,
        /// The type answered.
        qtype: crate::dns::QType,
        /// NXDOMAIN (else NOERROR).
        nxdomain: bool,
        /// Records of the type asked.
        records: u16,
        /// TC.
        truncated: bool,
        /// Over TCP.
        tcp: bool,
        /// Who answered, as the client saw it.
        from: SocketAddr,
    },
    /// A resolver client's lookup ended.
    LookupEnded {
        /// Lookup number.
        lookup: u32,
        /// The name looked up, as written.
        name: String,
        /// How: `answered`, `nxdomain`, `nodata`, `timedOut`, `refused`.
        result: &'static str,
        /// Addresses returned.
        records: u32,
        /// From the call to its return.
        latency: SimDuration,
        /// The names asked, in order.
        tried: Vec<crate::dns::NameId>,
        /// Whether it went over TCP.
        tcp: bool,
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
    /// The same for TCP ports, from a client that holds UDP ports too (a resolver).
    pub tcp_ports: Vec<(u16, bool)>,
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

impl QueryRecord {
    /// Query `seq`, failed at `now` before anything was sent: no local port was free.
    pub(crate) fn no_port(seq: u32, now: SimTime) -> QueryRecord {
        QueryRecord {
            seq,
            sent_at: now,
            src_port: 0,
            attempts: 0,
            outcome: QueryOutcome::NoPort(now),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::ports::ConnectPorts;

    pub(super) fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }
    pub(super) fn t(s: u64) -> SimTime {
        SimTime::from_secs(s)
    }
    pub(super) fn sched(interval: u64, count: Option<u32>) -> ClientSchedule {
        ClientSchedule {
            start: SimTime::ZERO,
            stop: SimTime::MAX,
            interval: SimDuration::from_secs(interval),
            jitter: SimDuration::ZERO,
            count,
        }
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
                    socket: Default::default(),
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
    fn the_longest_jitter_draws_without_overflow() {
        // `jitter + 1` wrapped to 0 and panicked in SimRng::below(0) (issue 31).
        let s = ClientSchedule {
            jitter: SimDuration::MAX,
            ..sched(30, Some(2))
        };
        let mut rng = SimRng::child(1, "c", "jitter");
        assert!(s.send_time(0, &mut rng).is_some());
    }
}
