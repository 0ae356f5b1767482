//! A stub resolver as glibc or musl runs one `getaddrinfo(name, AF_UNSPEC)`: which names it
//! asks in which order (the search list), which queries go to which nameserver from which
//! socket and when, and when it gives up. Sans-IO: the caller opens the sockets the resolver
//! asks for, carries its queries, and hands back the answers and the clock.
//!
//! In order: [`Resolver::start`] a lookup with its [`candidates`]; then repeatedly drain
//! [`Resolver::take_actions`] and carry them out, call [`Resolver::handle_answer`] /
//! [`Resolver::handle_tcp_failed`] as answers arrive and [`Resolver::handle_timeout`] once
//! `now` reaches [`Resolver::poll_timeout`]; [`Resolver::take_finished`] gives each ended
//! lookup. docs/resolver.md says which source lines each step follows.

use super::resolv_conf::{Libc, ResolvConf, GLIBC_EDNS_UDP_SIZE};
use super::wire::{Answer, NameId, QType, Query, Rcode};
use sim_core::{SimDuration, SimTime};

/// One socket (UDP) or connection (TCP) the resolver asked for, numbered from 0 per resolver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SocketId(pub u32);

/// Something the caller must do for the resolver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Bind a new UDP socket (an ephemeral source port).
    Open(SocketId),
    /// Close a UDP socket (its port is free again).
    Close(SocketId),
    /// Send `query` from UDP socket `socket` to nameserver number `ns` (port 53).
    SendUdp {
        /// The socket.
        socket: SocketId,
        /// Index into [`ResolvConf::nameservers`].
        ns: usize,
        /// The query.
        query: Query,
    },
    /// Connect to nameserver `ns` over TCP and send `queries` on the connection, one after
    /// the other (each with its two-octet length, RFC 1035 §4.2.2); the connection closes once
    /// every answer has arrived.
    SendTcp {
        /// The connection.
        conn: SocketId,
        /// Index into [`ResolvConf::nameservers`].
        ns: usize,
        /// The queries (one or two).
        queries: [Option<Query>; 2],
    },
}

/// How a lookup ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookupResult {
    /// Addresses came back (for the name `tried.last()`).
    Answered {
        /// How many records (A and AAAA).
        records: u32,
    },
    /// No name of the search list exists (EAI_NONAME, glibc's HOST_NOT_FOUND).
    NxDomain,
    /// The name exists without A or AAAA records (glibc NO_DATA; musl stops the search on it).
    NoData,
    /// No answer within the timeouts (EAI_AGAIN).
    TimedOut,
    /// glibc: every nameserver refused (ICMP port unreachable on its connected socket) and
    /// none timed out: `res_nsend` fails with ECONNREFUSED and `res_nsearch` stops at once.
    Refused,
}

impl LookupResult {
    /// The word for reports and expectations: `answered`, `nxdomain`, `nodata`, `timedOut`.
    pub fn word(&self) -> &'static str {
        match self {
            LookupResult::Answered { .. } => "answered",
            LookupResult::NxDomain => "nxdomain",
            LookupResult::NoData => "nodata",
            LookupResult::TimedOut => "timedOut",
            LookupResult::Refused => "refused",
        }
    }
}

/// One lookup, once it has ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LookupRecord {
    /// Lookup number (from 0).
    pub seq: u32,
    /// When `getaddrinfo` was called.
    pub started: SimTime,
    /// When it returned.
    pub ended: SimTime,
    /// How.
    pub result: LookupResult,
    /// The names asked, in order.
    pub tried: Vec<NameId>,
    /// Queries sent over UDP (every copy, retries included).
    pub udp_queries: u32,
    /// Whether it went over TCP (a truncated answer, or `use-vc`).
    pub tcp: bool,
}

/// The names a lookup of `name` asks, in order, as `libc` walks `conf`'s search list:
/// glibc `res_nsearch` (`resolv/res_query.c`) asks the name first when it has at least
/// `ndots` dots (or ends in a dot), then the search list (not after a trailing dot), then the
/// name if not yet asked; musl `name_from_dns_search` (`src/network/lookup_name.c`) asks
/// only the name when it has `ndots` dots or ends in a dot, else the search list, then the
/// name. Each is returned with the domain appended, without a trailing dot.
pub fn candidates(name: &str, conf: &ResolvConf, libc: Libc) -> Vec<String> {
    candidate_plan(name, conf, libc).0
}

/// Whether glibc asks `name` as it is before the search list (it has `ndots` dots or ends in
/// a dot); what [`Resolver::start`] takes as `as_is_first`.
pub fn asks_as_is_first(name: &str, conf: &ResolvConf, libc: Libc) -> bool {
    candidate_plan(name, conf, libc).1
}

fn candidate_plan(name: &str, conf: &ResolvConf, libc: Libc) -> (Vec<String>, bool) {
    let trailing = name.ends_with('.');
    let bare = name.strip_suffix('.').unwrap_or(name).to_string();
    let dots = bare.matches('.').count();
    let enough = dots >= usize::from(conf.ndots) || trailing;
    let searched = conf.search.iter().map(|d| format!("{bare}.{d}"));
    match libc {
        Libc::Glibc => {
            let mut out = Vec::new();
            if enough {
                out.push(bare.clone());
            }
            if !trailing {
                out.extend(searched);
            }
            if !enough {
                out.push(bare);
            }
            (out, enough)
        }
        Libc::Musl { .. } => {
            if enough {
                (vec![bare], true)
            } else {
                (
                    searched.chain(std::iter::once(bare.clone())).collect(),
                    false,
                )
            }
        }
    }
}

/// What a candidate's exchange gave: the answers to A and AAAA, or a timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SendResult {
    Answers([Option<Answer>; 2]),
    TimedOut,
    Refused,
}

const TYPES: [QType; 2] = [QType::A, QType::Aaaa];

/// glibc's `send_dg` on one nameserver.
#[derive(Clone, Debug)]
struct GlibcDg {
    ns: usize,
    socket: SocketId,
    deadline: SimTime,
    sent: [bool; 2],
    got: [Option<Answer>; 2],
}

/// glibc's `res_nsend` for one candidate.
#[derive(Clone, Debug)]
struct GlibcSend {
    try_: u8,
    /// Position in the (rotated) nameserver order.
    shift: usize,
    offset: usize,
    /// Each nameserver's UDP socket, open until the end of `res_nsend` (`__res_iclose`).
    sockets: [Option<SocketId>; 3],
    vc: bool,
    /// `gotsomewhere`: a nameserver timed out or answered (not only refusals).
    got_somewhere: bool,
    dg: Option<GlibcDg>,
    tcp: Option<(SocketId, [Option<Answer>; 2])>,
}

/// musl's `__res_msend_rc` for one candidate.
#[derive(Clone, Debug)]
struct MuslSend {
    socket: SocketId,
    t0: SimTime,
    next_retry: SimTime,
    got: [Option<Answer>; 2],
    /// A TCP retry in progress per query (1.2.4's `start_tcp`).
    tcp: [Option<SocketId>; 2],
}

#[derive(Clone, Debug)]
enum Send {
    Glibc(GlibcSend),
    Musl(MuslSend),
}

#[derive(Clone, Debug)]
struct Lookup {
    seq: u32,
    started: SimTime,
    candidates: Vec<NameId>,
    /// The index of the candidate being asked.
    at: usize,
    /// glibc: whether the name was asked as is first (`tried_as_is`), its error, and
    /// whether a NO_DATA was seen (`got_nodata`).
    as_is_first: bool,
    saved: Option<LookupResult>,
    got_nodata: bool,
    /// glibc: a timeout during the search list ends it (`done`); the name as is is still
    /// asked last.
    search_done: bool,
    send: Send,
}

/// A stub resolver: one `getaddrinfo` at a time (a blocking call of one thread).
#[derive(Clone, Debug)]
pub struct Resolver {
    libc: Libc,
    conf: ResolvConf,
    next_socket: u32,
    /// glibc `rotate`: the start of the next `res_nsend`'s nameserver order.
    rotate_next: usize,
    /// glibc switches the resolver state to `single-request` (then `single-request-reopen`)
    /// for good after a timeout with one of two answers in (`send_dg`).
    single_request: bool,
    single_request_reopen: bool,
    lookup: Option<Lookup>,
    actions: Vec<Action>,
    /// The current lookup's UDP queries sent and whether it used TCP.
    udp_queries: u32,
    tcp_used: bool,
    finished: Vec<LookupRecord>,
    tried: Vec<NameId>,
}

impl Resolver {
    /// A resolver of `libc` reading `conf`.
    pub fn new(libc: Libc, conf: ResolvConf) -> Resolver {
        Resolver {
            libc,
            single_request: conf.single_request || conf.single_request_reopen,
            single_request_reopen: conf.single_request_reopen,
            conf,
            next_socket: 0,
            rotate_next: 0,
            lookup: None,
            actions: Vec::new(),
            udp_queries: 0,
            tcp_used: false,
            finished: Vec::new(),
            tried: Vec::new(),
        }
    }

    /// The configuration it runs with.
    pub fn conf(&self) -> &ResolvConf {
        &self.conf
    }

    /// Whether a lookup is in progress.
    pub fn busy(&self) -> bool {
        self.lookup.is_some()
    }

    /// Actions to carry out, in order.
    pub fn take_actions(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.actions)
    }

    /// Lookups ended since the last call.
    pub fn take_finished(&mut self) -> Vec<LookupRecord> {
        std::mem::take(&mut self.finished)
    }

    fn emit(&mut self, a: Action) {
        match a {
            Action::SendUdp { .. } => self.udp_queries += 1,
            Action::SendTcp { .. } => self.tcp_used = true,
            _ => {}
        }
        self.actions.push(a);
    }

    fn socket(&mut self) -> SocketId {
        let s = SocketId(self.next_socket);
        self.next_socket += 1;
        s
    }

    fn open(&mut self) -> SocketId {
        let s = self.socket();
        self.actions.push(Action::Open(s));
        s
    }

    fn edns(&self) -> Option<u16> {
        (self.libc == Libc::Glibc && self.conf.edns0).then_some(GLIBC_EDNS_UDP_SIZE)
    }

    fn query(&self, name: NameId, qtype: QType) -> Query {
        Query {
            name,
            qtype,
            edns_udp_size: self.edns(),
        }
    }

    /// The per-nameserver wait of glibc's `send_dg`: `retrans << ns`, divided by the number of
    /// nameservers after the first, at least one second.
    fn glibc_wait(&self, ns: usize) -> SimDuration {
        let retrans = u64::from(self.conf.timeout_secs);
        let mut s = retrans << ns;
        if ns > 0 {
            s /= self.conf.nameservers.len() as u64;
        }
        SimDuration::from_secs(s.max(1))
    }

    /// musl's resend interval: `timeout / attempts` (in milliseconds, as it counts).
    fn musl_interval(&self) -> SimDuration {
        let timeout_ms = 1000 * u64::from(self.conf.timeout_secs);
        SimDuration::from_millis(timeout_ms / u64::from(self.conf.attempts.max(1)))
    }

    /// A new process with the same `resolv.conf`: what glibc keeps in `_res` for a process's
    /// life (the `single-request` fallback after a lost answer, `send_dg`) starts afresh.
    pub fn new_process(&mut self) {
        self.single_request = self.conf.single_request || self.conf.single_request_reopen;
        self.single_request_reopen = self.conf.single_request_reopen;
    }

    /// Starts lookup `seq` of the names `candidates` (see [`candidates`]) at `now`. Ignored
    /// (returns `false`) while a lookup is in progress or with no candidate.
    pub fn start(
        &mut self,
        now: SimTime,
        seq: u32,
        candidates: Vec<NameId>,
        as_is_first: bool,
    ) -> bool {
        if self.lookup.is_some() || candidates.is_empty() {
            return false;
        }
        self.tried.clear();
        self.udp_queries = 0;
        self.tcp_used = false;
        let send = self.begin_send(now, candidates[0]);
        self.lookup = Some(Lookup {
            seq,
            started: now,
            candidates,
            at: 0,
            as_is_first,
            saved: None,
            got_nodata: false,
            search_done: false,
            send,
        });
        true
    }

    fn begin_send(&mut self, now: SimTime, name: NameId) -> Send {
        self.tried.push(name);
        match self.libc {
            Libc::Glibc => {
                let n = self.conf.nameservers.len();
                let offset = if self.conf.rotate {
                    let o = self.rotate_next % n;
                    self.rotate_next = (o + 1) % n;
                    o
                } else {
                    0
                };
                let mut g = GlibcSend {
                    try_: 0,
                    shift: 0,
                    offset,
                    sockets: [None; 3],
                    vc: self.conf.use_vc,
                    got_somewhere: false,
                    dg: None,
                    tcp: None,
                };
                self.glibc_send_to(now, name, &mut g);
                Send::Glibc(g)
            }
            Libc::Musl { .. } => {
                let socket = self.open();
                let mut m = MuslSend {
                    socket,
                    t0: now,
                    next_retry: now,
                    got: [None; 2],
                    tcp: [None; 2],
                };
                self.musl_resend(now, name, &mut m);
                Send::Musl(m)
            }
        }
    }

    /// glibc: the exchange with the nameserver at the current position.
    fn glibc_send_to(&mut self, now: SimTime, name: NameId, g: &mut GlibcSend) {
        let n = self.conf.nameservers.len();
        let ns = (g.shift + g.offset) % n;
        if g.vc {
            let conn = self.socket();
            g.tcp = Some((conn, [None; 2]));
            self.emit(Action::SendTcp {
                conn,
                ns,
                queries: [
                    Some(self.query(name, QType::A)),
                    Some(self.query(name, QType::Aaaa)),
                ],
            });
            return;
        }
        let socket = match g.sockets[ns] {
            Some(s) => s,
            None => {
                let s = self.open();
                g.sockets[ns] = Some(s);
                s
            }
        };
        let mut dg = GlibcDg {
            ns,
            socket,
            deadline: now + self.glibc_wait(ns),
            sent: [false; 2],
            got: [None; 2],
        };
        self.glibc_dg_send(name, &mut dg);
        g.dg = Some(dg);
    }

    /// Sends what `send_dg` sends now: both queries back to back (`sendmmsg`), or with
    /// `single-request` the first one, then the second once the first is answered.
    fn glibc_dg_send(&mut self, name: NameId, dg: &mut GlibcDg) {
        for (k, qtype) in TYPES.into_iter().enumerate() {
            if dg.sent[k] {
                continue;
            }
            if k == 1 && self.single_request && dg.got[0].is_none() {
                break;
            }
            dg.sent[k] = true;
            self.emit(Action::SendUdp {
                socket: dg.socket,
                ns: dg.ns,
                query: self.query(name, qtype),
            });
        }
    }

    /// musl: (re)sends every unanswered query to every nameserver, queries outer.
    fn musl_resend(&mut self, now: SimTime, name: NameId, m: &mut MuslSend) {
        for (k, qtype) in TYPES.into_iter().enumerate() {
            if m.got[k].is_some() || m.tcp[k].is_some() {
                continue;
            }
            for ns in 0..self.conf.nameservers.len() {
                self.emit(Action::SendUdp {
                    socket: m.socket,
                    ns,
                    query: self.query(name, qtype),
                });
            }
        }
        m.next_retry = now + self.musl_interval();
    }

    /// When it next needs [`Resolver::handle_timeout`].
    pub fn poll_timeout(&self) -> Option<SimTime> {
        let l = self.lookup.as_ref()?;
        match &l.send {
            Send::Glibc(g) => g.dg.as_ref().map(|d| d.deadline),
            Send::Musl(m) => {
                let end = m.t0 + SimDuration::from_secs(u64::from(self.conf.timeout_secs));
                Some(m.next_retry.min(end))
            }
        }
    }

    fn current_name(&self) -> Option<NameId> {
        let l = self.lookup.as_ref()?;
        l.candidates.get(l.at).copied()
    }

    /// An answer arrived on UDP socket (or TCP connection) `socket` from nameserver `ns`.
    pub fn handle_answer(&mut self, now: SimTime, socket: SocketId, ns: usize, answer: Answer) {
        let Some(name) = self.current_name() else {
            return;
        };
        if answer.query.name != name {
            return; // an answer to an earlier name: its socket is closed, or ignored
        }
        let k = usize::from(answer.query.qtype == QType::Aaaa);
        let Some(mut l) = self.lookup.take() else {
            return;
        };
        let mut result = None;
        match &mut l.send {
            Send::Glibc(g) => {
                if let Some((conn, got)) = g.tcp.as_mut() {
                    if *conn == socket {
                        got[k] = Some(answer);
                        if got.iter().all(Option::is_some) {
                            result = Some(SendResult::Answers(*got));
                            g.tcp = None;
                        }
                    }
                } else if let Some(dg) = g.dg.as_mut() {
                    if dg.socket == socket && dg.ns == ns && dg.sent[k] && dg.got[k].is_none() {
                        if answer.truncated {
                            // "To get the rest of answer, use TCP with same server."
                            self.actions.push(Action::Close(dg.socket));
                            g.sockets[dg.ns] = None;
                            g.vc = true;
                            g.dg = None;
                            self.glibc_send_to(now, name, g);
                        } else {
                            dg.got[k] = Some(answer);
                            if dg.got.iter().all(Option::is_some) {
                                result = Some(SendResult::Answers(dg.got));
                            } else if self.single_request && !dg.sent[1] {
                                if self.single_request_reopen {
                                    self.actions.push(Action::Close(dg.socket));
                                    let s = self.open();
                                    dg.socket = s;
                                    g.sockets[dg.ns] = Some(s);
                                }
                                self.glibc_dg_send(name, dg);
                            }
                        }
                    }
                }
            }
            Send::Musl(m) => {
                let tcp_fallback = matches!(self.libc, Libc::Musl { tcp_fallback: true });
                if m.tcp[k] == Some(socket) {
                    m.got[k] = Some(answer);
                    m.tcp[k] = None;
                } else if socket == m.socket && m.got[k].is_none() && m.tcp[k].is_none() {
                    if answer.truncated && tcp_fallback {
                        let conn = self.socket();
                        m.tcp[k] = Some(conn);
                        let mut queries = [None; 2];
                        queries[0] = Some(answer.query);
                        self.emit(Action::SendTcp { conn, ns, queries });
                    } else {
                        m.got[k] = Some(answer);
                    }
                }
                if m.got.iter().all(Option::is_some) {
                    result = Some(SendResult::Answers(m.got));
                }
            }
        }
        self.lookup = Some(l);
        if let Some(r) = result {
            self.send_done(now, r);
        }
    }

    /// The next nameserver of the round, then the next round; the end when the rounds are
    /// used up (`res_nsend`'s two loops).
    fn glibc_next_ns(
        &mut self,
        now: SimTime,
        name: NameId,
        g: &mut GlibcSend,
    ) -> Option<SendResult> {
        g.shift += 1;
        if g.shift >= self.conf.nameservers.len() {
            g.shift = 0;
            g.try_ += 1;
        }
        if g.try_ < self.conf.attempts {
            self.glibc_send_to(now, name, g);
            None
        } else if g.got_somewhere {
            Some(SendResult::TimedOut)
        } else {
            Some(SendResult::Refused)
        }
    }

    /// An ICMP destination unreachable about a query from UDP socket `socket`. glibc's socket
    /// is connected, so `poll` reports POLLERR: `send_dg` closes every socket
    /// (`__res_iclose`) and goes on with the next nameserver at once. musl's socket is not
    /// connected (`sendto`): it never hears of it.
    pub fn handle_unreachable(&mut self, now: SimTime, socket: SocketId) {
        let Some(name) = self.current_name() else {
            return;
        };
        let Some(mut l) = self.lookup.take() else {
            return;
        };
        let mut result = None;
        if let Send::Glibc(g) = &mut l.send {
            if g.dg.as_ref().is_some_and(|d| d.socket == socket) {
                g.dg = None;
                for s in g.sockets.iter_mut() {
                    if let Some(s) = s.take() {
                        self.actions.push(Action::Close(s));
                    }
                }
                result = self.glibc_next_ns(now, name, g);
            }
        }
        self.lookup = Some(l);
        if let Some(r) = result {
            self.send_done(now, r);
        }
    }

    /// A TCP connection failed (refused, reset, timed out) before its answers were in.
    pub fn handle_tcp_failed(&mut self, now: SimTime, conn: SocketId) {
        let Some(mut l) = self.lookup.take() else {
            return;
        };
        let Some(name) = l.candidates.get(l.at).copied() else {
            self.lookup = Some(l);
            return;
        };
        let mut result = None;
        match &mut l.send {
            Send::Glibc(g) => {
                if g.tcp.is_some_and(|(c, _)| c == conn) {
                    g.tcp = None;
                    // `send_vc` failed: the next nameserver, still over TCP; no more rounds.
                    g.shift += 1;
                    if g.shift < self.conf.nameservers.len() {
                        self.glibc_send_to(now, name, g);
                    } else {
                        result = Some(if g.got_somewhere {
                            SendResult::TimedOut
                        } else {
                            SendResult::Refused
                        });
                    }
                }
            }
            Send::Musl(m) => {
                for k in 0..2 {
                    if m.tcp[k] == Some(conn) {
                        // `goto out`: the exchange ends; incomplete TCP results are dropped.
                        result = Some(SendResult::Answers(m.got));
                    }
                }
            }
        }
        self.lookup = Some(l);
        if let Some(r) = result {
            self.send_done(now, r);
        }
    }

    /// `now` reached [`Resolver::poll_timeout`].
    pub fn handle_timeout(&mut self, now: SimTime) {
        let Some(name) = self.current_name() else {
            return;
        };
        let Some(mut l) = self.lookup.take() else {
            return;
        };
        let mut result = None;
        match &mut l.send {
            Send::Glibc(g) => {
                let expired = g.dg.as_ref().is_some_and(|d| now >= d.deadline);
                if let Some(mut dg) = g.dg.take_if(|_| expired) {
                    let answered = dg.got.iter().filter(|a| a.is_some()).count();
                    if answered == 1 && !self.single_request {
                        // One of two answers, then silence: retry with single-request, for good.
                        self.single_request = true;
                        dg = GlibcDg {
                            deadline: now + self.glibc_wait(dg.ns),
                            sent: [false; 2],
                            got: [None; 2],
                            ..dg
                        };
                        self.glibc_dg_send(name, &mut dg);
                        g.dg = Some(dg);
                    } else if answered == 1 && !self.single_request_reopen {
                        self.single_request_reopen = true;
                        self.actions.push(Action::Close(dg.socket));
                        let s = self.open();
                        g.sockets[dg.ns] = Some(s);
                        dg = GlibcDg {
                            socket: s,
                            deadline: now + self.glibc_wait(dg.ns),
                            sent: [false; 2],
                            got: [None; 2],
                            ..dg
                        };
                        self.glibc_dg_send(name, &mut dg);
                        g.dg = Some(dg);
                    } else if answered == 1 {
                        result = Some(SendResult::Answers(dg.got));
                    } else {
                        // No answer from this one: the next nameserver, then the next round.
                        g.got_somewhere = true;
                        result = self.glibc_next_ns(now, name, g);
                    }
                }
            }
            Send::Musl(m) => {
                let end = m.t0 + SimDuration::from_secs(u64::from(self.conf.timeout_secs));
                if now >= end {
                    result = Some(if m.got[0].is_none() {
                        SendResult::TimedOut
                    } else {
                        SendResult::Answers(m.got)
                    });
                } else if now >= m.next_retry {
                    self.musl_resend(now, name, m);
                }
            }
        }
        self.lookup = Some(l);
        if let Some(r) = result {
            self.send_done(now, r);
        }
    }

    /// The candidate's exchange ended: close its sockets, then the next candidate or the end.
    fn send_done(&mut self, now: SimTime, r: SendResult) {
        let Some(mut l) = self.lookup.take() else {
            return;
        };
        match &l.send {
            Send::Glibc(g) => {
                for s in g.sockets.iter().flatten() {
                    self.actions.push(Action::Close(*s));
                }
            }
            Send::Musl(m) => self.actions.push(Action::Close(m.socket)),
        }
        let outcome = match self.libc {
            Libc::Glibc => glibc_pair(r),
            Libc::Musl { .. } => musl_pair(r),
        };
        let last = l.at + 1 >= l.candidates.len();
        // What to do next: Some(final) ends the lookup; None asks the next candidate.
        let end = match (self.libc, outcome) {
            // res_nsearch: `if (errno == ECONNREFUSED) return -1` at once.
            (_, LookupResult::Answered { .. } | LookupResult::Refused) => Some(outcome),
            (Libc::Musl { .. }, LookupResult::NxDomain) if !last => None,
            (Libc::Musl { .. }, o) => Some(o),
            (Libc::Glibc, o) => {
                if l.as_is_first && l.at == 0 {
                    l.saved = Some(o);
                }
                if o == LookupResult::NoData {
                    l.got_nodata = true;
                }
                let searching = l.at > 0 || !l.as_is_first;
                let as_is_last = !l.as_is_first && l.candidates.len() > 1;
                if o == LookupResult::TimedOut && searching && !last {
                    // `done`: the rest of the search list is skipped; the name as is is
                    // still asked when it was not asked first.
                    l.search_done = true;
                }
                let final_result = l
                    .saved
                    .or(l.got_nodata.then_some(LookupResult::NoData))
                    .unwrap_or(o);
                if last {
                    Some(final_result)
                } else if l.search_done && as_is_last {
                    l.at = l.candidates.len() - 2;
                    None
                } else if l.search_done {
                    Some(final_result)
                } else {
                    None
                }
            }
        };
        match end {
            Some(result) => {
                self.finished.push(LookupRecord {
                    seq: l.seq,
                    started: l.started,
                    ended: now,
                    result,
                    tried: std::mem::take(&mut self.tried),
                    udp_queries: self.udp_queries,
                    tcp: self.tcp_used,
                });
            }
            None => {
                l.at += 1;
                let name = l.candidates[l.at];
                l.send = self.begin_send(now, name);
                self.lookup = Some(l);
            }
        }
    }
}

fn records(a: &Option<Answer>) -> u32 {
    a.as_ref()
        .filter(|a| a.rcode == Rcode::NoError)
        .map_or(0, |a| u32::from(a.records))
}

/// glibc `__res_context_query` on the A/AAAA pair: success if either holds records; else the
/// AAAA answer's code when the A answer is NOERROR, the A answer's otherwise: NXDOMAIN →
/// HOST_NOT_FOUND, NOERROR → NO_DATA.
fn glibc_pair(r: SendResult) -> LookupResult {
    let [a, aaaa] = match r {
        SendResult::Answers(x) => x,
        SendResult::TimedOut => return LookupResult::TimedOut,
        SendResult::Refused => return LookupResult::Refused,
    };
    let n = records(&a) + records(&aaaa);
    if n > 0 {
        return LookupResult::Answered { records: n };
    }
    let code = match (a, aaaa) {
        (Some(a), Some(b)) if a.rcode == Rcode::NoError => b.rcode,
        (Some(a), _) => a.rcode,
        (None, Some(b)) => b.rcode,
        (None, None) => return LookupResult::TimedOut,
    };
    match code {
        Rcode::NxDomain => LookupResult::NxDomain,
        Rcode::NoError => LookupResult::NoData,
    }
}

/// musl `name_from_dns`: any record is an answer; else only the A answer's code counts:
/// missing → EAI_AGAIN, NOERROR → EAI_NONAME (the search stops), NXDOMAIN → next name.
fn musl_pair(r: SendResult) -> LookupResult {
    let SendResult::Answers([a, aaaa]) = r else {
        return LookupResult::TimedOut;
    };
    let n = records(&a) + records(&aaaa);
    if n > 0 {
        return LookupResult::Answered { records: n };
    }
    match a {
        None => LookupResult::TimedOut,
        Some(a) if a.rcode == Rcode::NoError => LookupResult::NoData,
        Some(_) => LookupResult::NxDomain,
    }
}
