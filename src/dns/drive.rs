//! A resolver run against one zone with a fixed round trip, outside the simulation: what a
//! C library's resolver would send for a `resolv.conf` and a name. The kernel-lab test
//! compares it with a real `getaddrinfo`, and the unit tests use it.

use super::resolver::{asks_as_is_first, candidates};
use super::*;
use sim_core::{SimDuration, SimTime};
use std::collections::BTreeSet;

/// How one query left the resolver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentQuery {
    /// When, in milliseconds from the lookup's start.
    pub at_ms: u64,
    /// `true` over TCP.
    pub tcp: bool,
    /// The socket (UDP) or connection (TCP), numbered by the resolver.
    pub socket: u32,
    /// The nameserver's index.
    pub ns: usize,
    /// The name asked.
    pub name: String,
    /// The type asked.
    pub qtype: QType,
    /// The EDNS0 UDP size of its OPT record.
    pub edns_udp_size: Option<u16>,
}

/// A resolver and a zone; nameservers marked down never answer.
#[derive(Debug)]
pub struct ZoneDriver {
    /// The run's names.
    pub names: DnsNames,
    /// What every nameserver that is up answers from.
    pub zone: Zone,
    /// The resolver.
    pub resolver: Resolver,
    /// Per nameserver: whether it answers.
    pub up: Vec<bool>,
    /// Per nameserver that is down: whether its host refuses (ICMP port unreachable, one
    /// round trip) instead of dropping the query.
    pub refuses: Vec<bool>,
    /// How many AAAA queries over UDP the network loses before it carries one again (a
    /// conntrack race, a broken firewall: the case glibc's fallback to `single-request`
    /// is for).
    pub lose_aaaa: u32,
    /// The round trip of a UDP exchange (a TCP one takes two: handshake, then the exchange).
    pub rtt: SimDuration,
    /// What the last lookup sent, in order.
    pub sent: Vec<SentQuery>,
    libc: Libc,
    /// What is on its way back: (when, socket, nameserver, the answer or `None` for an ICMP
    /// port unreachable).
    inflight: Vec<(SimTime, SocketId, usize, Option<Answer>)>,
    open: BTreeSet<u32>,
    now: SimTime,
    seq: u32,
}

/// Why a driven lookup went wrong (a bug in the resolver, reported rather than hidden).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DriveError {
    /// It asked to use a socket it had not opened, or to open one twice.
    #[error("socket {0} misused: {1}")]
    Socket(u32, &'static str),
    /// A lookup did not end within 100000 steps.
    #[error("the lookup never ended")]
    NoEnd,
    /// It ended with sockets open.
    #[error("sockets left open: {0:?}")]
    LeftOpen(Vec<u32>),
    /// A name could not be interned.
    #[error(transparent)]
    Name(#[from] wire::NameError),
    /// The resolver refused to start.
    #[error("the lookup did not start (one in progress, or no name)")]
    NotStarted,
}

impl ZoneDriver {
    /// A resolver of `libc` reading `conf`, every nameserver up, 1 ms round trips.
    pub fn new(libc: Libc, conf: ResolvConf, names: DnsNames, zone: Zone) -> ZoneDriver {
        ZoneDriver {
            up: vec![true; conf.nameservers.len()],
            refuses: vec![false; conf.nameservers.len()],
            lose_aaaa: 0,
            names,
            zone,
            resolver: Resolver::new(libc, conf),
            rtt: SimDuration::from_millis(1),
            sent: Vec::new(),
            libc,
            inflight: Vec::new(),
            open: BTreeSet::new(),
            now: SimTime::ZERO,
            seq: 0,
        }
    }

    fn act(&mut self, start: SimTime) -> Result<(), DriveError> {
        let now = self.now;
        for a in self.resolver.take_actions() {
            let queries: [Option<Query>; 2] = match a {
                Action::Open(s) => {
                    if !self.open.insert(s.0) {
                        return Err(DriveError::Socket(s.0, "opened twice"));
                    }
                    continue;
                }
                Action::Close(s) => {
                    if !self.open.remove(&s.0) {
                        return Err(DriveError::Socket(s.0, "closed but not open"));
                    }
                    continue;
                }
                Action::SendUdp { socket, query, .. } => {
                    if !self.open.contains(&socket.0) {
                        return Err(DriveError::Socket(socket.0, "sent on but not open"));
                    }
                    [Some(query), None]
                }
                Action::SendTcp { queries, .. } => queries,
            };
            let (socket, ns, tcp) = match a {
                Action::SendUdp { socket, ns, .. } => (socket, ns, false),
                Action::SendTcp { conn, ns, .. } => (conn, ns, true),
                _ => unreachable!("handled above"),
            };
            for q in queries.into_iter().flatten() {
                self.sent.push(SentQuery {
                    at_ms: (now.as_nanos() - start.as_nanos()) / 1_000_000,
                    tcp,
                    socket: socket.0,
                    ns,
                    name: self.names.name(q.name).to_string(),
                    qtype: q.qtype,
                    edns_udp_size: q.edns_udp_size,
                });
                let lost = !tcp && q.qtype == QType::Aaaa && self.lose_aaaa > 0;
                if lost {
                    self.lose_aaaa -= 1;
                } else if !self.up.get(ns).copied().unwrap_or(false) {
                    if self.refuses.get(ns).copied().unwrap_or(false) {
                        self.inflight.push((now + self.rtt, socket, ns, None));
                    }
                } else {
                    let (transport, rtts) = if tcp {
                        (Transport::Tcp, 2)
                    } else {
                        (Transport::Udp, 1)
                    };
                    let ans = self.zone.answer(&self.names, q, transport);
                    self.inflight.push((
                        now + self.rtt.saturating_mul(rtts),
                        socket,
                        ns,
                        Some(ans),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Resolves `name` (after the previous lookup, a second later); its record.
    pub fn lookup(&mut self, name: &str) -> Result<LookupRecord, DriveError> {
        let conf = self.resolver.conf().clone();
        let cands = candidates(name, &conf, self.libc)
            .iter()
            .map(|n| self.names.intern(n))
            .collect::<Result<Vec<NameId>, _>>()?;
        let first = asks_as_is_first(name, &conf, self.libc);
        if self.seq > 0 {
            self.now += SimDuration::from_secs(1);
        }
        let start = self.now;
        self.sent.clear();
        self.inflight.clear();
        if !self.resolver.start(start, self.seq, cands, first) {
            return Err(DriveError::NotStarted);
        }
        self.seq += 1;
        self.act(start)?;
        for _ in 0..100_000 {
            if let Some(r) = self.resolver.take_finished().pop() {
                if !self.open.is_empty() {
                    return Err(DriveError::LeftOpen(self.open.iter().copied().collect()));
                }
                return Ok(r);
            }
            let next_answer = self.inflight.iter().map(|x| x.0).min();
            let Some(next) = [next_answer, self.resolver.poll_timeout()]
                .into_iter()
                .flatten()
                .min()
            else {
                return Err(DriveError::NoEnd);
            };
            self.now = next;
            if next_answer == Some(next) {
                let i = self
                    .inflight
                    .iter()
                    .position(|x| x.0 == next)
                    .unwrap_or_else(|| unreachable!("found above"));
                let (_, s, ns, a) = self.inflight.remove(i);
                match a {
                    Some(a) => self.resolver.handle_answer(next, s, ns, a),
                    None => self.resolver.handle_unreachable(next, s),
                }
            } else {
                self.resolver.handle_timeout(next);
            }
            self.act(start)?;
        }
        Err(DriveError::NoEnd)
    }
}
