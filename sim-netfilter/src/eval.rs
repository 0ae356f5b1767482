//! Evaluating a packet against a table's chain at one hook, as `ipt_do_table` does.
//!
//! The caller (the namespace pipeline) supplies everything that is not the ruleset's own
//! business as plain values in an [`EvalCtx`]: the packet, its conntrack view ([`CtState`]),
//! a way to classify addresses for `-m addrtype` ([`AddrTypeLookup`]), the time, and the
//! random stream for `-m statistic`. [`Ruleset::run_hook`] returns a [`Verdict`] saying what
//! the pipeline must do (accept, drop, reject with an ICMP error or TCP RST) and what it must
//! hand to conntrack (a NAT request, notrack, a new ct mark). MARK changes the packet's mark
//! in the context directly; LOG and TRACE only appear in the [`Trace`].
//!
//! Counting follows `ipt_do_table`: a rule's counters go up when all its matches pass, before
//! its target runs; a built-in chain's policy counters when its policy decides.

use std::net::{IpAddr, Ipv4Addr};

use sim_core::packet::icmp;
use sim_core::{Packet, SimRng, SimTime, TcpFlags, L4};

use crate::compile::{
    CMatch, CRule, CTarget, MemoSpec, Program, DST_INV, END_INDEXED, HAS_DST, HAS_INIT, HAS_PROTO,
    HAS_SRC, IP_TESTS, PROTO_INV, SLOW_IP, SRC_INV,
};
use crate::fmt::rule_spec;
use crate::index::{Key, Lookup};
use crate::rule::*;
use crate::ruleset::{Chain, Ruleset, TableData};
use crate::state::{
    MemoKey, MemoRef, RecentEntry, RulesetState, MEMO_NFACCT, MEMO_POLICY, RECENT_MAX_ENTRIES,
};
use crate::trace::{StatDraw, Trace, TraceEvent};
use crate::types::*;

/// Classifies addresses for `-m addrtype`: `inet_dev_addr_type(net, dev, addr)`.
pub trait AddrTypeLookup {
    /// The route type of `addr` in the host's local table; with `dev`, a local or broadcast
    /// address only counts if it belongs to that interface (else it is UNICAST).
    fn addr_type(&self, addr: Ipv4Addr, dev: Option<&str>) -> AddrType;
}

/// A simple [`AddrTypeLookup`]: the host's addresses per interface. 127.0.0.0/8 is LOCAL on
/// `lo`; 0.0.0.0/8 and 255.255.255.255 are BROADCAST; 224.0.0.0/4 MULTICAST; each subnet's
/// broadcast address is BROADCAST on its interface; everything else UNICAST.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalAddrs {
    entries: Vec<(String, Ipv4Addr, u8)>,
}

impl Default for LocalAddrs {
    fn default() -> Self {
        LocalAddrs::new()
    }
}

impl LocalAddrs {
    /// Only the loopback interface with 127.0.0.1/8.
    pub fn new() -> LocalAddrs {
        LocalAddrs {
            entries: vec![("lo".into(), Ipv4Addr::new(127, 0, 0, 1), 8)],
        }
    }

    /// Adds `addr/prefix` on `iface`.
    pub fn add(&mut self, iface: &str, addr: Ipv4Addr, prefix: u8) -> &mut Self {
        self.entries.push((iface.to_string(), addr, prefix.min(32)));
        self
    }
}

impl AddrTypeLookup for LocalAddrs {
    fn addr_type(&self, addr: Ipv4Addr, dev: Option<&str>) -> AddrType {
        let a = u32::from(addr);
        if a >> 24 == 0 || a == u32::MAX {
            return AddrType::Broadcast;
        }
        if addr.is_multicast() {
            return AddrType::Multicast;
        }
        let found = if a >> 24 == 127 {
            Some((AddrType::Local, "lo"))
        } else {
            self.entries.iter().find_map(|(ifc, ip, len)| {
                let mask = prefix_mask(*len);
                let ipu = u32::from(*ip);
                if ipu == a {
                    Some((AddrType::Local, ifc.as_str()))
                } else if *len < 31 && (ipu & mask) | !mask == a {
                    Some((AddrType::Broadcast, ifc.as_str()))
                } else {
                    None
                }
            })
        };
        match found {
            Some((t, ifc)) if dev.is_none_or(|d| d == ifc) => t,
            _ => AddrType::Unicast,
        }
    }
}

/// A conntrack tuple as plain values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CtTuple {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// IP protocol.
    pub proto: u8,
    /// Source port (ICMP: id).
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

impl CtTuple {
    /// The tuple of an IPv4 packet (ports 0 where it has none; an IPv6 address reads
    /// 0.0.0.0).
    pub fn of(p: &Packet) -> CtTuple {
        let v4 = |a: IpAddr| match a {
            IpAddr::V4(v) => v,
            IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
        };
        CtTuple {
            src: v4(p.src),
            dst: v4(p.dst),
            proto: p.protocol(),
            sport: p.sport().unwrap_or(0),
            dport: p.dport().unwrap_or(0),
        }
    }

    /// The tuple with source and destination swapped: the reply's, without NAT.
    pub fn inverted(self) -> CtTuple {
        CtTuple {
            src: self.dst,
            dst: self.src,
            proto: self.proto,
            sport: self.dport,
            dport: self.sport,
        }
    }
}

/// How the packet relates to its entry (`enum ip_conntrack_info`, direction apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CtInfoKind {
    /// `IP_CT_NEW`: no reply seen yet.
    New,
    /// `IP_CT_ESTABLISHED` (or `_REPLY`).
    Established,
    /// `IP_CT_RELATED` (or `_REPLY`): an ICMP error about the entry, an expectation.
    Related,
}

/// What conntrack knows about a packet's connection, as plain values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CtInfo {
    /// NEW / ESTABLISHED / RELATED.
    pub info: CtInfoKind,
    /// Direction of this packet.
    pub dir: CtDirection,
    /// `IPS_*` status bits ([`ctstatus`]).
    pub status: u32,
    /// Original-direction tuple.
    pub orig: CtTuple,
    /// Reply-direction tuple.
    pub reply: CtTuple,
    /// The entry's mark.
    pub mark: u32,
    /// Seconds until the entry expires (`--ctexpire`).
    pub expires_secs: u32,
}

/// The conntrack view of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CtState {
    /// No entry: `INVALID` (also what the raw table sees, before conntrack runs).
    Invalid,
    /// `CT --notrack` was applied: `UNTRACKED`.
    Untracked,
    /// An entry.
    Tracked(CtInfo),
}

impl CtState {
    /// The view of an original-direction packet `p` of a connection without NAT, seen by its
    /// entry as `info` (`New` for a first packet): tuples from the packet, status and mark
    /// 0, `expires_secs` left. For evaluating rules without a conntrack table (rule tests,
    /// benches).
    pub fn for_packet(p: &Packet, info: CtInfoKind, expires_secs: u32) -> CtState {
        let orig = CtTuple::of(p);
        CtState::Tracked(CtInfo {
            info,
            dir: CtDirection::Original,
            status: 0,
            orig,
            reply: orig.inverted(),
            mark: 0,
            expires_secs,
        })
    }

    /// The `--ctstate` bits rules test.
    pub(crate) fn state_bits(&self) -> u16 {
        match self {
            CtState::Invalid => ctstate::INVALID,
            CtState::Untracked => ctstate::UNTRACKED,
            CtState::Tracked(i) => tracked_state_bits(i.info, i.status),
        }
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            CtState::Invalid => "INVALID".into(),
            CtState::Untracked => "UNTRACKED".into(),
            CtState::Tracked(i) => {
                let mut s = format!("{:?}", i.info).to_uppercase();
                if i.dir == CtDirection::Reply {
                    s.push_str(" reply");
                }
                let _ = std::fmt::Write::write_fmt(
                    &mut s,
                    format_args!(" status=0x{:x} mark=0x{:x}", i.status, i.mark),
                );
                s
            }
        }
    }
}

/// Whether `pkt` is an ICMP error, which the kernel never answers with another
/// (`__icmp_send`: an inner type above `NR_ICMP_TYPES` or with `icmp_pointers[].error`, i.e.
/// anything but the query and reply types; `icmpv6_send` / `is_ineligible`: any ICMPv6 type
/// below 128).
pub(crate) fn is_icmp_error(pkt: &Packet) -> bool {
    match pkt.l4 {
        L4::Icmp { icmp_type, .. } if pkt.is_ipv4() => {
            !sim_core::wire::icmp_is_query(true, icmp_type)
        }
        L4::Icmp { icmp_type, .. } => sim_core::wire::icmp_is_error(false, icmp_type),
        _ => false,
    }
}

/// The `--ctstate` bits of a tracked packet: its ctinfo, and SNAT / DNAT from the entry's
/// status (`conntrack_mt`'s `statebit`).
#[inline]
pub(crate) fn tracked_state_bits(info: CtInfoKind, status: u32) -> u16 {
    let mut b = match info {
        CtInfoKind::New => ctstate::NEW,
        CtInfoKind::Established => ctstate::ESTABLISHED,
        CtInfoKind::Related => ctstate::RELATED,
    };
    if status & ctstatus::SRC_NAT != 0 {
        b |= ctstate::SNAT;
    }
    if status & ctstatus::DST_NAT != 0 {
        b |= ctstate::DNAT;
    }
    b
}

/// The inputs of one evaluation. The packet's mark may be changed by MARK / CONNMARK; the
/// ct view by `CT --notrack` and CONNMARK.
pub struct EvalCtx<'a> {
    /// The packet (its `iif`/`oif` must be set as the hook has them).
    pub packet: Packet,
    /// Its conntrack view.
    pub ct: CtState,
    /// Address classification for `-m addrtype`.
    pub addr_types: &'a dyn AddrTypeLookup,
    /// Now (for `-m recent`).
    pub now: SimTime,
    /// The random stream for `-m statistic --mode random`.
    pub rng: &'a mut SimRng,
    /// The packet was generated by a local process (`skb->sk` set); affects `--rttl`.
    pub local_origin: bool,
    /// Forces the outcome of `statistic --mode random` matches: `Some(true)` makes each one
    /// match, `Some(false)` fail, whatever the draw (which is still taken from `rng`, so the
    /// stream advances as it would). `None` (the default) lets the draw decide. Used to follow
    /// every branch of a packet ([`crate::branch`]).
    pub force_random: Option<bool>,
    /// Forces the result of an nftables `numgen random mod N` expression to this value
    /// (before its offset; below N) whatever the draw (which is still taken). `None` lets
    /// the draw decide.
    pub force_numgen: Option<u32>,
}

impl<'a> EvalCtx<'a> {
    /// A context with no conntrack entry (`INVALID`) and a forwarded/received packet.
    pub fn new(
        packet: Packet,
        addr_types: &'a dyn AddrTypeLookup,
        now: SimTime,
        rng: &'a mut SimRng,
    ) -> EvalCtx<'a> {
        EvalCtx {
            packet,
            ct: CtState::Invalid,
            addr_types,
            now,
            rng,
            local_origin: false,
            force_random: None,
            force_numgen: None,
        }
    }
}

/// A NAT binding to ask conntrack for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NatRequest {
    /// `DNAT --to-destination`.
    Dnat(NatRange),
    /// `SNAT --to-source`.
    Snat(NatRange),
    /// `MASQUERADE`: source NAT to the outgoing interface's primary address.
    Masquerade(PortNat),
    /// `REDIRECT`: destination NAT to the incoming interface's primary address (or 127.0.0.1
    /// for locally generated packets).
    Redirect(PortNat),
}

/// What happens to the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Continue (to the next table or hook).
    Accept,
    /// Dropped silently.
    Drop,
    /// Dropped, answered with an ICMP error or TCP RST ([`RejectWith::response`]).
    Reject(RejectWith),
}

/// The result of a hook evaluation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Verdict {
    /// Accept, drop or reject.
    pub action: Action,
    /// A NAT target matched: the binding to set up (the verdict is then ACCEPT).
    pub nat: Option<NatRequest>,
    /// `CT --notrack` / `NOTRACK` ran: do not track this packet.
    pub notrack: bool,
    /// CONNMARK changed the entry's mark to this.
    pub ct_mark: Option<u32>,
}

impl Verdict {
    pub(crate) fn accept() -> Verdict {
        Verdict {
            action: Action::Accept,
            nat: None,
            notrack: false,
            ct_mark: None,
        }
    }

    /// Whether the packet continues.
    pub fn is_accept(&self) -> bool {
        self.action == Action::Accept
    }

    fn describe(&self) -> String {
        let mut s = match self.action {
            Action::Accept => "ACCEPT".to_string(),
            Action::Drop => "DROP".to_string(),
            Action::Reject(w) => format!("REJECT {}", w.name()),
        };
        match &self.nat {
            Some(NatRequest::Dnat(r)) => s.push_str(&format!(", DNAT to {}", r.range_text())),
            Some(NatRequest::Snat(r)) => s.push_str(&format!(", SNAT to {}", r.range_text())),
            Some(NatRequest::Masquerade(_)) => s.push_str(", MASQUERADE"),
            Some(NatRequest::Redirect(_)) => s.push_str(", REDIRECT"),
            None => {}
        }
        if self.notrack {
            s.push_str(", notrack");
        }
        if let Some(m) = self.ct_mark {
            s.push_str(&format!(", ctmark 0x{m:x}"));
        }
        s
    }
}

impl RejectWith {
    /// The packet the kernel sends back for a packet rejected with this (`nf_send_unreach` /
    /// `nf_send_reset`), or `None` when it sends nothing (a RST is never answered with a RST;
    /// an ICMP error never with an ICMP error). `icmp_src` is the address the ICMP error comes
    /// from (the rejecting host's address toward the sender).
    pub fn response(self, pkt: &Packet, icmp_src: IpAddr) -> Option<Packet> {
        match self.icmp_code() {
            Some(code) => {
                if is_icmp_error(pkt) {
                    return None;
                }
                Some(Packet::icmp_error(icmp_src, pkt, icmp::DEST_UNREACH, code))
            }
            None => {
                let L4::Tcp {
                    sport,
                    dport,
                    flags,
                    seq,
                    ack,
                    ..
                } = pkt.l4
                else {
                    return None;
                };
                if flags.contains(TcpFlags::RST) {
                    return None;
                }
                let mut r = Packet::tcp(
                    std::net::SocketAddr::new(pkt.dst, dport),
                    std::net::SocketAddr::new(pkt.src, sport),
                    TcpFlags::RST,
                );
                r.len = if pkt.is_ipv4() { 40 } else { 60 };
                let payload = pkt.tcp_payload_len();
                if let L4::Tcp {
                    flags: rf,
                    seq: rseq,
                    ack: rack,
                    ..
                } = &mut r.l4
                {
                    if flags.contains(TcpFlags::ACK) {
                        *rseq = ack;
                    } else {
                        *rseq = 0;
                        *rack = seq
                            .wrapping_add(u32::from(flags.contains(TcpFlags::SYN)))
                            .wrapping_add(u32::from(flags.contains(TcpFlags::FIN)))
                            .wrapping_add(payload);
                        *rf = TcpFlags::RST | TcpFlags::ACK;
                    }
                }
                Some(r)
            }
        }
    }
}

/// The jump stack: nf_tables' `NFT_JUMP_STACK_SIZE`; deeper rulesets are refused at commit.
pub(crate) const MAX_DEPTH: usize = 16;

pub(crate) struct Pkt {
    src: u32,
    dst: u32,
    proto: u8,
    sport: Option<u16>,
    dport: Option<u16>,
    pub(crate) len: u64,
    /// `ctx.ct.state_bits()`, for the compiled walk's `--ctstate` tests (kept up to date
    /// when a target changes `ctx.ct`).
    ctbits: u16,
}

impl Pkt {
    /// The packet in `ctx` as the walk tests it.
    pub(crate) fn of(ctx: &EvalCtx<'_>) -> Pkt {
        let ip4 = |a: IpAddr| match a {
            IpAddr::V4(v) => u32::from(v),
            IpAddr::V6(_) => 0,
        };
        Pkt {
            src: ip4(ctx.packet.src),
            dst: ip4(ctx.packet.dst),
            proto: ctx.packet.protocol(),
            sport: ctx.packet.sport(),
            dport: ctx.packet.dport(),
            len: u64::from(ctx.packet.len),
            ctbits: ctx.ct.state_bits(),
        }
    }
}

impl Ruleset {
    /// Whether `table` exists with a built-in chain at `hook` (else [`Ruleset::run_hook`]
    /// accepts without evaluating anything).
    #[inline]
    pub(crate) fn has_hook(&self, table: Table, hook: Hook) -> bool {
        matches!(&self.tables[table.index()], Some(td) if td.builtin[hook as usize].is_some())
    }

    /// Evaluates the packet in `ctx` through `table`'s built-in chain at `hook`.
    ///
    /// Returns ACCEPT without evaluating anything when the table does not exist, has no chain
    /// at this hook, or the packet is IPv6 (iptables only sees IPv4). With a `trace`, every
    /// rule evaluated is recorded and evaluation is plain in-order (the index is only a
    /// shortcut to the same result).
    pub fn run_hook(
        &self,
        table: Table,
        hook: Hook,
        ctx: &mut EvalCtx<'_>,
        state: &mut RulesetState,
        mut trace: Option<&mut Trace>,
    ) -> Verdict {
        let td = match &self.tables[table.index()] {
            Some(td) if td.builtin[hook as usize].is_some() && ctx.packet.is_ipv4() => td,
            _ => {
                if let Some(t) = trace.as_deref_mut() {
                    let reason = if !ctx.packet.is_ipv4() {
                        "IPv6 packet: not seen by iptables"
                    } else if self.tables[table.index()].is_none() {
                        "table does not exist"
                    } else {
                        "no built-in chain at this hook"
                    };
                    t.push(TraceEvent::Skip {
                        table,
                        hook,
                        reason: reason.into(),
                    });
                }
                return Verdict::accept();
            }
        };
        if let Some(t) = trace.as_deref_mut() {
            t.push(TraceEvent::Enter {
                table,
                hook,
                packet: ctx.packet.to_string(),
                ct: ctx.ct.describe(),
            });
        }
        let v = if trace.is_none() && self.indexing {
            self.walk_fast(td, table, hook, ctx, state)
        } else {
            self.walk(td, table, hook, ctx, state, trace.as_deref_mut())
        };
        if let Some(t) = trace {
            t.push(TraceEvent::Verdict {
                table,
                hook,
                verdict: v.describe(),
            });
        }
        v
    }

    fn walk(
        &self,
        td: &TableData,
        table: Table,
        hook: Hook,
        ctx: &mut EvalCtx<'_>,
        state: &mut RulesetState,
        mut trace: Option<&mut Trace>,
    ) -> Verdict {
        let pk = Pkt::of(ctx);
        let key = pk.dport.map(|d| Key {
            dst: Some(pk.dst),
            proto: pk.proto,
            dport: d,
        });
        // The reference walk: in order, no index (the fast walk is `walk_fast`).
        let use_index = false;
        let mut out = Verdict::accept();
        let base = td.builtin[hook as usize].unwrap_or_default();
        let mut stack = [(0u32, 0u32); MAX_DEPTH];
        let mut sp = 0usize;
        let mut chain_id = base;
        let mut chain: &Chain = td.chain(base);
        let mut pos = 0usize;
        loop {
            if pos >= chain.rules.len() {
                match sp.checked_sub(1) {
                    None => return self.policy(td, base, table, state, &pk, out, trace),
                    Some(top) => {
                        sp = top;
                        let (cid, p) = stack[top];
                        let p = p as usize;
                        if let Some(t) = trace.as_deref_mut() {
                            t.push(TraceEvent::Return {
                                table,
                                from: chain.name().to_string(),
                                to: td.chain(cid).name().to_string(),
                            });
                        }
                        chain_id = cid;
                        chain = td.chain(cid);
                        pos = p;
                        continue;
                    }
                }
            }
            let mut known = false;
            if use_index {
                if let Some(ix) = &chain.index {
                    match ix.lookup(pos, key) {
                        Lookup::Outside => {}
                        Lookup::Past(end) => {
                            pos = end;
                            continue;
                        }
                        Lookup::Match(at) => {
                            pos = at;
                            known = true;
                        }
                    }
                }
            }
            let rule = &chain.rules[pos];
            let mut draws = Vec::new();
            // A rule the index found matches by construction: its only tests are its key.
            let matched = known
                || rule_matches(
                    self,
                    rule,
                    hook,
                    ctx,
                    &pk,
                    state,
                    trace.is_some().then_some(&mut draws),
                );
            if let Some(t) = trace.as_deref_mut() {
                t.push(TraceEvent::Rule {
                    table,
                    chain: chain.name().to_string(),
                    num: pos + 1,
                    matched,
                    draws,
                    spec: rule_spec(rule),
                });
            }
            if !matched {
                pos += 1;
                continue;
            }
            let s = state.slot(rule.slot, rule.initial_counters);
            s.packets += 1;
            s.bytes += pk.len;
            match &rule.target {
                Target::None => pos += 1,
                Target::Accept => return out,
                Target::Drop => {
                    out.action = Action::Drop;
                    return out;
                }
                Target::Return => match sp.checked_sub(1) {
                    None => return self.policy(td, base, table, state, &pk, out, trace),
                    Some(top) => {
                        sp = top;
                        let (cid, p) = stack[top];
                        let p = p as usize;
                        if let Some(t) = trace.as_deref_mut() {
                            t.push(TraceEvent::Return {
                                table,
                                from: chain.name().to_string(),
                                to: td.chain(cid).name().to_string(),
                            });
                        }
                        chain_id = cid;
                        chain = td.chain(cid);
                        pos = p;
                    }
                },
                Target::Jump(c) | Target::Goto(c) => {
                    if matches!(rule.target, Target::Jump(_)) {
                        if sp >= MAX_DEPTH {
                            out.action = Action::Drop;
                            return out;
                        }
                        stack[sp] = (chain_id, (pos + 1) as u32);
                        sp += 1;
                    }
                    chain_id = c.id.idx;
                    chain = td.chain(chain_id);
                    pos = 0;
                }
                other => {
                    if effect(other, ctx, &mut out, trace.as_deref_mut()) {
                        return out;
                    }
                    pos += 1;
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn policy(
        &self,
        td: &TableData,
        base: u32,
        table: Table,
        state: &mut RulesetState,
        pk: &Pkt,
        mut out: Verdict,
        trace: Option<&mut Trace>,
    ) -> Verdict {
        let c = td.chain(base);
        let s = state.slot(c.policy_slot, c.policy_init);
        s.packets += 1;
        s.bytes += pk.len;
        if let Some(t) = trace {
            t.push(TraceEvent::Policy {
                table,
                chain: c.name().to_string(),
                policy: c.policy(),
            });
        }
        if c.policy() == Policy::Drop {
            out.action = Action::Drop;
        }
        out
    }
}

#[inline]
pub(crate) fn rule_matches(
    rs: &Ruleset,
    rule: &Rule,
    hook: Hook,
    ctx: &mut EvalCtx<'_>,
    pk: &Pkt,
    state: &mut RulesetState,
    mut draws: Option<&mut Vec<StatDraw>>,
) -> bool {
    let ip = &rule.ip;
    // ip_packet_match.
    if let Some(n) = ip.src {
        if n.contains(pk.src) == ip.src_inv {
            return false;
        }
    }
    if let Some(n) = ip.dst {
        if n.contains(pk.dst) == ip.dst_inv {
            return false;
        }
    }
    if let Some(p) = &ip.iif {
        let name = ctx.packet.iif.as_ref().map(|i| i.as_str()).unwrap_or("");
        if p.matches(name) == ip.iif_inv {
            return false;
        }
    }
    if let Some(p) = &ip.oif {
        let name = ctx.packet.oif.as_ref().map(|i| i.as_str()).unwrap_or("");
        if p.matches(name) == ip.oif_inv {
            return false;
        }
    }
    if ip.proto != 0 && (pk.proto == ip.proto) == ip.proto_inv {
        return false;
    }
    // Simulated packets are never non-first fragments: `-f` never matches, `! -f` always.
    if ip.frag == Some(false) {
        return false;
    }
    for m in &rule.matches {
        if !match_one(rs, m, hook, ctx, pk, state, draws.as_deref_mut()) {
            return false;
        }
    }
    true
}

#[inline]
fn ports_ok(sport: &PortRange, sinv: bool, dport: &PortRange, dinv: bool, pk: &Pkt) -> bool {
    match (pk.sport, pk.dport) {
        (Some(s), Some(d)) => sport.contains(s) != sinv && dport.contains(d) != dinv,
        _ => false,
    }
}

fn match_one(
    rs: &Ruleset,
    m: &Match,
    hook: Hook,
    ctx: &mut EvalCtx<'_>,
    pk: &Pkt,
    state: &mut RulesetState,
    draws: Option<&mut Vec<StatDraw>>,
) -> bool {
    match m {
        Match::Comment(_) => true,
        // iptables-nft turns tcp/udp port matches into transport-header payload comparisons,
        // which do not check the protocol themselves (`! -p udp -m udp --dport 5` compares
        // the ports of any packet that has them).
        Match::Tcp(t) => {
            if !ports_ok(&t.sport, t.sport_inv, &t.dport, t.dport_inv, pk) {
                return false;
            }
            match t.flags {
                Some((mask, cmp, inv)) => match ctx.packet.l4 {
                    L4::Tcp { flags, .. } => ((flags.0 & mask) == cmp) != inv,
                    _ => false,
                },
                None => true,
            }
        }
        Match::Udp(p) => ports_ok(&p.sport, p.sport_inv, &p.dport, p.dport_inv, pk),
        Match::Sctp(p) => {
            matches!(ctx.packet.l4, L4::Sctp { .. })
                && ports_ok(&p.sport, p.sport_inv, &p.dport, p.dport_inv, pk)
        }
        Match::Icmp(i) => {
            let L4::Icmp {
                icmp_type, code, ..
            } = ctx.packet.l4
            else {
                return false;
            };
            // icmp_type_code_match.
            let hit = i.icmp_type == 0xff
                || (i.icmp_type == icmp_type && code >= i.code_min && code <= i.code_max);
            hit != i.inv
        }
        Match::Multiport(mp) => {
            let (Some(s), Some(d)) = (pk.sport, pk.dport) else {
                return false;
            };
            // ports_match_v1.
            for r in &mp.ports {
                let hit = match mp.kind {
                    MultiportKind::Source => r.contains(s),
                    MultiportKind::Destination => r.contains(d),
                    MultiportKind::Either => r.contains(s) || r.contains(d),
                };
                if hit {
                    return !mp.inv;
                }
            }
            mp.inv
        }
        Match::Statistic(s) => match s.mode {
            StatisticMode::Random { probability } => {
                // statistic_mt: (get_random_u32() & 0x7FFFFFFF) < probability.
                let draw = ctx.rng.next_u32() & 0x7fff_ffff;
                if let Some(d) = draws {
                    d.push(StatDraw::Random {
                        draw,
                        threshold: probability,
                    });
                }
                match ctx.force_random {
                    Some(forced) => forced,
                    None => (draw < probability) != s.inv,
                }
            }
            StatisticMode::Nth { every, packet } => {
                // statistic_mt with the count libxt_statistic starts at (every-1)-packet:
                // the i-th packet (0-based) reaching the match matches when i % every == packet.
                let slot = state.slot(s.slot, Counters::default());
                let index = slot.packets as u32;
                slot.packets = if index + 1 >= every {
                    0
                } else {
                    u64::from(index + 1)
                };
                if let Some(d) = draws {
                    d.push(StatDraw::Nth {
                        index,
                        every,
                        packet,
                    });
                }
                (index == packet) != s.inv
            }
        },
        Match::Mark(mk) => ((ctx.packet.mark & mk.mask) == mk.value) != mk.inv,
        Match::Conntrack(c) => conntrack_mt(c, &ctx.ct),
        Match::Addrtype(a) => {
            let dev = match a.limit {
                Some(LimitIface::In) => ctx.packet.iif.as_ref().map(|i| i.as_str()),
                Some(LimitIface::Out) => ctx.packet.oif.as_ref().map(|i| i.as_str()),
                None => None,
            };
            if let Some((mask, inv)) = a.src {
                let t = ctx.addr_types.addr_type(Ipv4Addr::from(pk.src), dev);
                if (mask & t.bit() != 0) == inv {
                    return false;
                }
            }
            if let Some((mask, inv)) = a.dst {
                let t = ctx.addr_types.addr_type(Ipv4Addr::from(pk.dst), dev);
                if (mask & t.bit() != 0) == inv {
                    return false;
                }
            }
            true
        }
        Match::Recent(r) => recent_mt(rs, r, hook, ctx, pk, state),
        Match::Nfacct(n) => {
            let e = &rs.nfacct.entries[n.obj.idx as usize];
            let s = state.nfacct_slot(Bind {
                idx: n.obj.idx,
                uid: e.uid,
            });
            s.packets += 1;
            s.bytes += pk.len;
            true
        }
    }
}

/// xt_conntrack `conntrack_mt` (revision 3).
fn conntrack_mt(c: &ConntrackMatch, ct: &CtState) -> bool {
    if let Some((mask, inv)) = c.state {
        if (mask & ct.state_bits() != 0) == inv {
            return false;
        }
    }
    let CtState::Tracked(ci) = ct else {
        // No entry: only a state test can match.
        return c.state.is_some();
    };
    if let Some(d) = c.dir {
        if d != ci.dir {
            return false;
        }
    }
    let addr_ok = |v: &Option<(Ipv4Net, bool)>, a: Ipv4Addr| match v {
        Some((n, inv)) => n.contains(u32::from(a)) != *inv,
        None => true,
    };
    if !addr_ok(&c.orig_src, ci.orig.src)
        || !addr_ok(&c.orig_dst, ci.orig.dst)
        || !addr_ok(&c.repl_src, ci.reply.src)
        || !addr_ok(&c.repl_dst, ci.reply.dst)
    {
        return false;
    }
    if let Some((p, inv)) = c.proto {
        if (ci.orig.proto == p) == inv {
            return false;
        }
    }
    let port_ok = |v: &Option<(PortRange, bool)>, p: u16| match v {
        Some((r, inv)) => r.contains(p) != *inv,
        None => true,
    };
    if !port_ok(&c.orig_src_port, ci.orig.sport)
        || !port_ok(&c.orig_dst_port, ci.orig.dport)
        || !port_ok(&c.repl_src_port, ci.reply.sport)
        || !port_ok(&c.repl_dst_port, ci.reply.dport)
    {
        return false;
    }
    if let Some((mask, inv)) = c.status {
        if (mask & ci.status != 0) == inv {
            return false;
        }
    }
    if let Some((lo, hi, inv)) = c.expires {
        let e = ci.expires_secs;
        if (e >= lo && e <= hi) == inv {
            return false;
        }
    }
    true
}

/// xt_recent `recent_mt`.
fn recent_mt(
    rs: &Ruleset,
    r: &RecentMatch,
    hook: Hook,
    ctx: &mut EvalCtx<'_>,
    pk: &Pkt,
    state: &mut RulesetState,
) -> bool {
    let reg = &rs.recent.entries[r.table.idx as usize];
    let table = state.recent_table(Bind {
        idx: r.table.idx,
        uid: reg.uid,
    });
    let addr = if r.rdest { pk.dst } else { pk.src } & reg.mask;
    let mut ttl = ctx.packet.ttl;
    // "use TTL as seen before forwarding": an output device and no local socket.
    if matches!(hook, Hook::Forward | Hook::PostRouting) && !ctx.local_origin {
        ttl = ttl.wrapping_add(1);
    }
    let now = ctx.now;
    let mut ret = r.inv;
    let want_ttl = if r.rttl { ttl } else { 0 };
    let found = table
        .entries
        .iter()
        .position(|e| e.addr == addr && (want_ttl == e.ttl || want_ttl == 0 || e.ttl == 0));
    let Some(i) = found else {
        if r.command != RecentCommand::Set {
            return ret;
        }
        if table.entries.len() >= RECENT_MAX_ENTRIES {
            table.entries.remove(0);
        }
        let mut stamps = std::collections::VecDeque::with_capacity(4);
        stamps.push_back(now);
        table.entries.push(RecentEntry { addr, ttl, stamps });
        return !ret;
    };
    match r.command {
        RecentCommand::Set => ret = !ret,
        RecentCommand::Remove => {
            table.entries.remove(i);
            return !ret;
        }
        RecentCommand::Check | RecentCommand::Update => {
            let window = sim_core::SimDuration::from_secs(u64::from(r.seconds));
            let mut hits = 0;
            for &st in &table.entries[i].stamps {
                if r.seconds != 0 && now.saturating_since(st) > window {
                    continue;
                }
                hits += 1;
                if r.hitcount == 0 || hits >= r.hitcount {
                    ret = !ret;
                    break;
                }
            }
            if r.reap {
                // recent_entry_reap: drop the least recently used entry if its newest stamp is
                // outside the window, unless it is the entry about to be updated.
                let updating = r.command == RecentCommand::Update && ret;
                let head_old = table.entries.first().is_some_and(|e| {
                    e.stamps
                        .back()
                        .is_some_and(|s| now.saturating_since(*s) > window)
                });
                if head_old && !(updating && i == 0) {
                    table.entries.remove(0);
                    if i == 0 {
                        return ret;
                    }
                    return update_after(table, i - 1, r, ret, ttl, now, reg.cap);
                }
            }
        }
    }
    update_after(table, i, r, ret, ttl, now, reg.cap)
}

fn update_after(
    table: &mut crate::state::RecentTable,
    i: usize,
    r: &RecentMatch,
    ret: bool,
    ttl: u8,
    now: SimTime,
    cap: usize,
) -> bool {
    let matched_update = r.command == RecentCommand::Update && ret;
    if r.command == RecentCommand::Set || matched_update {
        // recent_entry_update: a new stamp, most recently used.
        let mut e = table.entries.remove(i);
        if e.stamps.len() >= cap {
            e.stamps.pop_front();
        }
        e.stamps.push_back(now);
        e.ttl = ttl;
        table.entries.push(e);
    }
    ret
}

/// Runs a target that is not a verdict or a jump: REJECT and the NAT targets end the walk
/// (returns true); MARK, CONNMARK, CT, LOG and TRACE change the context and continue.
pub(crate) fn effect(
    target: &Target,
    ctx: &mut EvalCtx<'_>,
    out: &mut Verdict,
    trace: Option<&mut Trace>,
) -> bool {
    match target {
        Target::Reject(w) => {
            out.action = Action::Reject(*w);
            true
        }
        Target::Dnat(r) => {
            out.nat = Some(NatRequest::Dnat(r.clone()));
            true
        }
        Target::Snat(r) => {
            out.nat = Some(NatRequest::Snat(r.clone()));
            true
        }
        Target::Masquerade(p) => {
            out.nat = Some(NatRequest::Masquerade(p.clone()));
            true
        }
        Target::Redirect(p) => {
            out.nat = Some(NatRequest::Redirect(p.clone()));
            true
        }
        Target::Mark { value, mask } => {
            let from = ctx.packet.mark;
            ctx.packet.mark = (from & !mask) ^ value;
            if let Some(t) = trace {
                t.push(TraceEvent::Mark {
                    from,
                    to: ctx.packet.mark,
                });
            }
            false
        }
        Target::Connmark(op) => {
            // xt_connmark connmark_tg_shift: nothing without a tracked entry.
            if let CtState::Tracked(ci) = &mut ctx.ct {
                let (old_ct, old_mark) = (ci.mark, ctx.packet.mark);
                match *op {
                    ConnmarkOp::Set { value, mask } => ci.mark = (ci.mark & !mask) ^ value,
                    ConnmarkOp::Save { nfmask, ctmask } => {
                        ci.mark = (ci.mark & !ctmask) ^ (ctx.packet.mark & nfmask)
                    }
                    ConnmarkOp::Restore { nfmask, ctmask } => {
                        ctx.packet.mark = (ctx.packet.mark & !nfmask) ^ (ci.mark & ctmask)
                    }
                }
                if ci.mark != old_ct {
                    out.ct_mark = Some(ci.mark);
                }
                if let Some(t) = trace {
                    if ci.mark != old_ct {
                        t.push(TraceEvent::CtMark {
                            from: old_ct,
                            to: ci.mark,
                        });
                    }
                    if ctx.packet.mark != old_mark {
                        t.push(TraceEvent::Mark {
                            from: old_mark,
                            to: ctx.packet.mark,
                        });
                    }
                }
            }
            false
        }
        Target::Ct { notrack, .. } => {
            if *notrack {
                out.notrack = true;
                ctx.ct = CtState::Untracked;
            }
            false
        }
        Target::Log(l) => {
            if let Some(t) = trace {
                t.push(TraceEvent::Log {
                    prefix: l.prefix.clone(),
                    level: l.level,
                });
            }
            false
        }
        Target::Trace => {
            if let Some(t) = trace {
                t.push(TraceEvent::TraceTarget);
            }
            false
        }
        // Verdicts and jumps are the walkers' business.
        Target::None
        | Target::Accept
        | Target::Drop
        | Target::Return
        | Target::Jump(_)
        | Target::Goto(_) => false,
    }
}

/// The IP part checks the compiled form leaves to the original rule (interfaces, fragments).
#[inline]
fn slow_ip_ok(ip: &IpMatch, ctx: &EvalCtx<'_>) -> bool {
    if let Some(p) = &ip.iif {
        let name = ctx.packet.iif.as_ref().map(|i| i.as_str()).unwrap_or("");
        if p.matches(name) == ip.iif_inv {
            return false;
        }
    }
    if let Some(p) = &ip.oif {
        let name = ctx.packet.oif.as_ref().map(|i| i.as_str()).unwrap_or("");
        if p.matches(name) == ip.oif_inv {
            return false;
        }
    }
    ip.frag != Some(false)
}

/// The original rule of compiled rule `at`.
#[inline]
pub(crate) fn origin_rule<'a>(td: &'a TableData, prog: &Program, at: usize) -> &'a Rule {
    let (chain, pos) = prog.origins[at];
    &td.chain(chain).rules[pos as usize]
}

#[inline]
#[allow(clippy::too_many_arguments)]
fn fast_matches(
    rs: &Ruleset,
    td: &TableData,
    prog: &Program,
    cr: &CRule,
    at: usize,
    hook: Hook,
    ctx: &mut EvalCtx<'_>,
    pk: &Pkt,
    state: &mut RulesetState,
    mut rec: Option<&mut Recorder<'_>>,
) -> bool {
    if cr.flags & IP_TESTS != 0 {
        if cr.flags & HAS_SRC != 0
            && ((pk.src ^ cr.src) & cr.smask == 0) == (cr.flags & SRC_INV != 0)
        {
            return false;
        }
        if cr.flags & HAS_DST != 0
            && ((pk.dst ^ cr.dst) & cr.dmask == 0) == (cr.flags & DST_INV != 0)
        {
            return false;
        }
        if cr.flags & HAS_PROTO != 0 && (pk.proto == cr.proto) == (cr.flags & PROTO_INV != 0) {
            return false;
        }
        if cr.flags & SLOW_IP != 0 && !slow_ip_ok(&origin_rule(td, prog, at).ip, ctx) {
            return false;
        }
    }
    let rest = match cr.nmatch {
        0 => &[][..],
        n => &prog.matches[cr.match_start as usize..][..usize::from(n)],
    };
    for m in std::iter::once(&cr.first).chain(rest) {
        if !cmatch_ok(
            rs,
            td,
            prog,
            m,
            at,
            hook,
            ctx,
            pk,
            state,
            rec.as_deref_mut(),
        ) {
            return false;
        }
    }
    true
}

/// One compiled match of `cr`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn cmatch_ok(
    rs: &Ruleset,
    td: &TableData,
    prog: &Program,
    m: &CMatch,
    at: usize,
    hook: Hook,
    ctx: &mut EvalCtx<'_>,
    pk: &Pkt,
    state: &mut RulesetState,
    rec: Option<&mut Recorder<'_>>,
) -> bool {
    match *m {
        CMatch::Always => true,
        CMatch::Ports {
            kind,
            sport,
            dport,
            sinv,
            dinv,
            flags,
        } => {
            if kind == 2 && !matches!(ctx.packet.l4, L4::Sctp { .. }) {
                return false;
            }
            if !ports_ok(&sport, sinv, &dport, dinv, pk) {
                return false;
            }
            match flags {
                Some((mask, cmp, inv)) => match ctx.packet.l4 {
                    L4::Tcp { flags, .. } => ((flags.0 & mask) == cmp) != inv,
                    _ => false,
                },
                None => true,
            }
        }
        CMatch::Mark { value, mask, inv } => ((ctx.packet.mark & mask) == value) != inv,
        CMatch::State { mask, inv } => (mask & pk.ctbits != 0) != inv,
        CMatch::Random { threshold, inv } => {
            ((ctx.rng.next_u32() & 0x7fff_ffff) < threshold) != inv
        }
        CMatch::Nfacct { idx } => {
            // xt_nfacct: count and match (a walk being remembered notes the count).
            let bind = Bind {
                idx,
                uid: rs.nfacct.entries[idx as usize].uid,
            };
            let s = state.nfacct_slot(bind);
            s.packets += 1;
            s.bytes += pk.len;
            if let Some(r) = rec {
                r.refs.push(MemoRef {
                    bind,
                    pos: MEMO_NFACCT,
                });
            }
            true
        }
        CMatch::Slow { idx } => {
            let rule = origin_rule(td, prog, at);
            match_one(
                rs,
                &rule.matches[usize::from(idx)],
                hook,
                ctx,
                pk,
                state,
                None,
            )
        }
    }
}

/// What a walk being remembered collects: the counters it bumps and its mark change.
struct Recorder<'a> {
    refs: &'a mut Vec<MemoRef>,
    keep: u32,
    xor: u32,
}

/// The memo key of a packet whose `--ctstate` bits are `ctbits`, for a pure walk reading
/// `spec` (see [`MemoSpec`]): the packet's raw key words masked by `spec.masks`.
#[inline]
fn memo_key(spec: &MemoSpec, packet: &Packet, ctbits: u16) -> MemoKey {
    let v4 = |a: IpAddr| match a {
        IpAddr::V4(v) => u32::from(v),
        IpAddr::V6(_) => 0,
    };
    let (sport, dport, l4, a, b) = match packet.l4 {
        L4::Tcp {
            sport,
            dport,
            flags,
            ..
        } => (sport, dport, 1u8 | 4, flags.0, 0u8),
        L4::Udp { sport, dport } => (sport, dport, 1, 0, 0),
        L4::Sctp { sport, dport } => (sport, dport, 1 | 2, 0, 0),
        L4::Icmp {
            icmp_type, code, ..
        } => (0, 0, 8, icmp_type, code),
        L4::Other { .. } => (0, 0, 0, 0, 0),
    };
    let m = &spec.masks;
    MemoKey {
        words: [
            (u64::from(v4(packet.src)) | u64::from(v4(packet.dst)) << 32) & m[0],
            (u64::from(packet.mark) | u64::from(sport) << 32 | u64::from(dport) << 48) & m[1],
            (u64::from(packet.protocol())
                | u64::from(l4) << 8
                | u64::from(a) << 16
                | u64::from(b) << 24
                | u64::from(ctbits) << 32)
                & m[2],
        ],
        ifaces: (spec.iif || spec.oif).then(|| {
            (
                packet.iif.filter(|_| spec.iif),
                packet.oif.filter(|_| spec.oif),
            )
        }),
    }
}

impl Ruleset {
    /// The remembered outcome of `table` at `hook` for `packet` (whose `--ctstate` bits are
    /// `ctbits`), without an [`EvalCtx`]: when the hook's walk is pure and this feature key
    /// was walked before, its counters are bumped, its mark change applied to `packet` and
    /// its verdict returned, exactly as [`Ruleset::run_hook`] without a trace would.
    /// `None`: nothing remembered (or indexing is off); evaluate with `run_hook`, which then
    /// remembers it.
    #[inline]
    pub(crate) fn replay_hook(
        &self,
        table: Table,
        hook: Hook,
        packet: &mut Packet,
        ctbits: u16,
        state: &mut RulesetState,
    ) -> Option<Verdict> {
        if !self.indexing || !packet.is_ipv4() {
            return None;
        }
        let td = self.tables[table.index()].as_ref()?;
        let base = td.builtin[hook as usize]?;
        let spec = td.program.memo[hook as usize].as_ref()?;
        let key = memo_key(spec, packet, ctbits);
        let at = table.index() * 5 + hook as usize;
        let len = u64::from(packet.len);
        let (action, nat) =
            state.memo_replay(at, td, &self.nfacct, base, &key, len, &mut packet.mark)?;
        Some(Verdict {
            action,
            nat,
            notrack: false,
            ct_mark: None,
        })
    }

    /// The compiled, indexed walk: same results as `walk` (see `compile.rs`). A pure walk
    /// (see [`MemoSpec`]) is remembered per feature key in the state and replayed the next
    /// time: same verdict, counters and mark.
    fn walk_fast(
        &self,
        td: &TableData,
        table: Table,
        hook: Hook,
        ctx: &mut EvalCtx<'_>,
        state: &mut RulesetState,
    ) -> Verdict {
        let ip4 = |a: IpAddr| match a {
            IpAddr::V4(v) => u32::from(v),
            IpAddr::V6(_) => 0,
        };
        let mut pk = Pkt {
            src: ip4(ctx.packet.src),
            dst: ip4(ctx.packet.dst),
            proto: ctx.packet.protocol(),
            sport: ctx.packet.sport(),
            dport: ctx.packet.dport(),
            len: u64::from(ctx.packet.len),
            ctbits: ctx.ct.state_bits(),
        };
        let base = td.builtin[hook as usize].unwrap_or_default();
        let Some(spec) = &td.program.memo[hook as usize] else {
            return self.walk_compiled(td, base, hook, ctx, state, &mut pk, None);
        };
        let key = memo_key(spec, &ctx.packet, pk.ctbits);
        let at = table.index() * 5 + hook as usize;
        if let Some((action, nat)) = state.memo_replay(
            at,
            td,
            &self.nfacct,
            base,
            &key,
            pk.len,
            &mut ctx.packet.mark,
        ) {
            return Verdict {
                action,
                nat,
                notrack: false,
                ct_mark: None,
            };
        }
        let mut refs = std::mem::take(&mut state.memo_scratch);
        refs.clear();
        let mut rec = Recorder {
            refs: &mut refs,
            keep: u32::MAX,
            xor: 0,
        };
        let v = self.walk_compiled(td, base, hook, ctx, state, &mut pk, Some(&mut rec));
        let (keep, xor) = (rec.keep, rec.xor);
        state.memo_insert(
            at,
            &td.program,
            key,
            v.action,
            v.nat.clone(),
            keep,
            xor,
            &refs,
        );
        state.memo_scratch = refs;
        v
    }

    #[allow(clippy::too_many_arguments)]
    fn walk_compiled(
        &self,
        td: &TableData,
        base: u32,
        hook: Hook,
        ctx: &mut EvalCtx<'_>,
        state: &mut RulesetState,
        pk: &mut Pkt,
        mut rec: Option<&mut Recorder<'_>>,
    ) -> Verdict {
        let prog = &*td.program;
        let key = pk.dport.map(|d| Key {
            dst: Some(pk.dst),
            proto: pk.proto,
            dport: d,
        });
        let mut out = Verdict::accept();
        // The chains jumped from: (start, end with END_INDEXED, position to return to).
        let mut stack = [(0u32, 0u32, 0u32); MAX_DEPTH];
        let mut sp = 0usize;
        let span = prog.spans[base as usize];
        let mut start = span.start as usize;
        let mut end = span.end as usize;
        let mut indexed = span.indexed;
        let mut pos = start;
        loop {
            if pos >= end {
                match sp.checked_sub(1) {
                    None => {
                        if let Some(r) = rec.as_deref_mut() {
                            r.refs.push(MemoRef {
                                bind: td.chain(base).policy_slot,
                                pos: MEMO_POLICY,
                            });
                        }
                        return self.policy(td, base, Table::Filter, state, pk, out, None);
                    }
                    Some(top) => {
                        sp = top;
                        let (s, e, p) = stack[top];
                        start = s as usize;
                        end = (e & !END_INDEXED) as usize;
                        indexed = e & END_INDEXED != 0;
                        pos = p as usize;
                        continue;
                    }
                }
            }
            let mut known = false;
            if indexed {
                // An indexed chain has rules: its first one says which chain it is.
                let chain = prog.origins[start].0;
                if let Some(ix) = prog.index_of(chain) {
                    match ix.lookup(pos - start, key) {
                        Lookup::Outside => {}
                        Lookup::Past(e) => {
                            pos = start + e;
                            continue;
                        }
                        Lookup::Match(at) => {
                            pos = start + at;
                            known = true;
                        }
                    }
                }
            }
            let cr = &prog.rules[pos];
            if !known
                && !fast_matches(
                    self,
                    td,
                    prog,
                    cr,
                    pos,
                    hook,
                    ctx,
                    pk,
                    state,
                    rec.as_deref_mut(),
                )
            {
                pos += 1;
                continue;
            }
            let bind = Bind {
                idx: cr.slot_idx,
                uid: cr.slot_uid,
            };
            let s = state.slot_lazy(bind, || {
                if cr.flags & HAS_INIT != 0 {
                    origin_rule(td, prog, pos).initial_counters
                } else {
                    Counters::default()
                }
            });
            s.packets += 1;
            s.bytes += pk.len;
            if let Some(r) = rec.as_deref_mut() {
                r.refs.push(MemoRef {
                    bind,
                    pos: pos as u32,
                });
            }
            match cr.target {
                CTarget::None => pos += 1,
                CTarget::Accept => return out,
                CTarget::Drop => {
                    out.action = Action::Drop;
                    return out;
                }
                // RETURN is falling off the end of the chain: the top of the loop pops the
                // stack, or applies the built-in chain's policy.
                CTarget::Return => pos = end,
                CTarget::Jump { start: s, end: e } | CTarget::Goto { start: s, end: e } => {
                    if matches!(cr.target, CTarget::Jump { .. }) {
                        if sp >= MAX_DEPTH {
                            out.action = Action::Drop;
                            return out;
                        }
                        let here = end as u32 | if indexed { END_INDEXED } else { 0 };
                        stack[sp] = (start as u32, here, (pos + 1) as u32);
                        sp += 1;
                    }
                    start = s as usize;
                    end = (e & !END_INDEXED) as usize;
                    indexed = e & END_INDEXED != 0;
                    pos = start;
                }
                CTarget::JumpEmpty => {
                    // The chain returns at once: as a jump and a return, with the same
                    // jump-stack limit.
                    if sp >= MAX_DEPTH {
                        out.action = Action::Drop;
                        return out;
                    }
                    pos += 1;
                }
                CTarget::Mark { value, mask } => {
                    ctx.packet.mark = (ctx.packet.mark & !mask) ^ value;
                    if let Some(r) = rec.as_deref_mut() {
                        r.keep &= !mask;
                        r.xor = (r.xor & !mask) ^ value;
                    }
                    pos += 1;
                }
                CTarget::Other(i) => {
                    if effect(&prog.others[i as usize], ctx, &mut out, None) {
                        return out;
                    }
                    // CT --notrack changes what `--ctstate` sees from here on.
                    pk.ctbits = ctx.ct.state_bits();
                    pos += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod memo_tests {
    //! The remembered walks give what walking gives: verdicts, NAT requests, marks, every
    //! counter and the random stream, on random filter tables mixing pure rules (addresses,
    //! masks, ports, TCP flags, ICMP, multiport, interfaces, marks, ctstate; MARK, REJECT,
    //! jumps, gotos, LOG) with rules that make a walk impure (statistic, addrtype, CONNMARK,
    //! other conntrack tests), and packets drawn from small pools so that keys repeat; with a
    //! commit and a counter reset in the middle.
    use super::*;
    use crate::{RestoreOptions, SaveOptions};
    use proptest::prelude::*;
    use sim_core::{IfName, TcpFlags};

    fn pick<'a, T>(r: &mut SimRng, xs: &'a [T]) -> &'a T {
        &xs[r.below(xs.len() as u64) as usize]
    }

    fn random_filter(r: &mut SimRng, impure: bool) -> String {
        let mut t = String::from(
            "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n:A - [0:0]\n:B - [0:0]\n:E - [0:0]\n",
        );
        let tests = [
            "",
            " -s 10.0.0.0/8",
            " ! -s 127.0.0.0/8",
            " -d 10.96.0.1/32",
            " -d 10.96.0.0/24",
            " -p tcp -m tcp --dport 80",
            " -p udp -m udp --sport 1000:1002",
            " -p tcp -m tcp --tcp-flags SYN,ACK SYN",
            " -p tcp -m multiport --dports 53,80:90",
            " -p icmp -m icmp --icmp-type echo-request",
            " -p sctp -m sctp --dport 80",
            " -m mark --mark 0x1/0x1",
            " -m mark ! --mark 0x10/0x30",
            " -m conntrack --ctstate NEW",
            " -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT",
            " -m comment --comment x",
            " -i eth0",
            " ! -o lo",
        ];
        let impure_tests = [
            " -m statistic --mode random --probability 0.5",
            " -m addrtype --dst-type LOCAL",
            " -m conntrack --ctstate NEW --ctorigdst 10.96.0.0/12",
            " -m statistic --mode nth --every 3 --packet 1",
        ];
        let targets = [
            "",
            " -j ACCEPT",
            " -j DROP",
            " -j RETURN",
            " -j REJECT",
            " -j A",
            " -j B",
            " -j E",
            " -g B",
            " -j MARK --set-xmark 0x1/0x3",
            " -j MARK --set-xmark 0x10/0x0",
            " -j LOG --log-prefix x",
        ];
        for chain in ["INPUT", "FORWARD", "OUTPUT", "A", "B"] {
            for _ in 0..(2 + r.below(6)) {
                // Interfaces only where both exist (and each at most once).
                let usable = if matches!(chain, "INPUT" | "OUTPUT") {
                    &tests[..15]
                } else {
                    &tests[..]
                };
                let mut test = pick(r, usable).to_string();
                if r.below(3) == 0 {
                    test.push_str(pick::<&str>(r, &tests[11..15]));
                }
                if r.below(6) == 0 {
                    // Counted on an accounting object: still pure.
                    test.push_str(" -m nfacct --nfacct-name acct");
                }
                if impure && r.below(12) == 0 {
                    test.push_str(pick::<&str>(r, &impure_tests));
                }
                let mut target = *pick(r, &targets);
                // Keep jumps acyclic: A may go to B, B to nothing.
                if chain == "B" && (target.contains("-j A") || target.contains("B")) {
                    target = " -j RETURN";
                }
                if chain == "A" && target.contains("-j A") {
                    target = "";
                }
                if impure && r.below(20) == 0 {
                    target = " -j CONNMARK --set-xmark 0x5/0xff";
                }
                t.push_str(&format!("-A {chain}{test}{target}\n"));
            }
        }
        t.push_str("COMMIT\n");
        t
    }

    fn random_packet(r: &mut SimRng) -> (Packet, CtState) {
        let src = *pick(r, &["10.1.0.1", "127.0.0.1", "192.168.0.5"]);
        let dst = *pick(r, &["10.96.0.1", "10.96.0.7", "10.0.0.9"]);
        let sport = *pick(r, &[1000u16, 1001, 5000]);
        let dport = *pick(r, &[53u16, 80, 85, 443]);
        let s = std::net::SocketAddr::new(src.parse().unwrap(), sport);
        let d = std::net::SocketAddr::new(dst.parse().unwrap(), dport);
        let mut p = match r.below(7) {
            6 => {
                // An echo reply: ICMP of another type.
                let mut p = Packet::icmp_echo_request(s.ip(), d.ip(), 7, 1);
                if let L4::Icmp { icmp_type, .. } = &mut p.l4 {
                    *icmp_type = 0;
                }
                p
            }
            0 => Packet::udp(s, d),
            1 => Packet::tcp(s, d, TcpFlags::SYN),
            2 => Packet::tcp(s, d, TcpFlags::ACK),
            3 => Packet::icmp_echo_request(s.ip(), d.ip(), 7, 1),
            4 => {
                let mut p = Packet::udp(s, d);
                p.l4 = L4::Sctp { sport, dport };
                p
            }
            _ => Packet::tcp(s, d, TcpFlags::SYN | TcpFlags::ACK),
        };
        p.mark = *pick(r, &[0u32, 1, 0x10, 0x11, 0x20]);
        p.len = 40 + r.below(3) as u16;
        p.iif = Some(IfName::new(pick::<&str>(r, &["eth0", "lo", "veth1"])).unwrap());
        p.oif = Some(IfName::new(pick::<&str>(r, &["eth0", "lo"])).unwrap());
        let tuple = CtTuple {
            src: "10.1.0.1".parse().unwrap(),
            dst: "10.96.0.1".parse().unwrap(),
            proto: 6,
            sport: 1,
            dport: 2,
        };
        let ct = match r.below(4) {
            0 => CtState::Invalid,
            n => CtState::Tracked(CtInfo {
                info: [
                    CtInfoKind::New,
                    CtInfoKind::Established,
                    CtInfoKind::Related,
                ][n as usize - 1],
                dir: CtDirection::Original,
                status: if r.below(2) == 0 {
                    0
                } else {
                    ctstatus::DST_NAT
                },
                orig: tuple,
                reply: tuple,
                mark: 0,
                expires_secs: 30,
            }),
        };
        (p, ct)
    }

    fn check(seed: u64, impure: bool) -> usize {
        let mut r = SimRng::derive(seed, "memo-rules");
        let text = random_filter(&mut r, impure);
        let mut fast = Ruleset::new();
        fast.nfacct_add("acct").unwrap();
        fast.restore(&text, &RestoreOptions::default())
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        let mut plain = fast.clone();
        plain.set_indexing(false);
        let addrs = LocalAddrs::new();
        let (mut s1, mut s2) = (RulesetState::new(), RulesetState::new());
        let (mut g1, mut g2) = (SimRng::derive(seed, "stat"), SimRng::derive(seed, "stat"));
        let mut pr = SimRng::derive(seed, "memo-packets");
        for i in 0..300u64 {
            if i == 150 {
                // A commit installs a new program: what was remembered no longer applies.
                let extra = "-I FORWARD 1 -m mark --mark 0x20/0x20 -j DROP";
                fast.command(Table::Filter, extra).unwrap();
                plain.command(Table::Filter, extra).unwrap();
            }
            if i == 200 {
                s1.zero_counters(&fast, None);
                s2.zero_counters(&plain, None);
            }
            let (pkt, ct) = random_packet(&mut pr);
            for hook in [Hook::Input, Hook::Forward, Hook::Output] {
                let now = SimTime::from_millis(i * 10);
                let mut c1 = EvalCtx::new(pkt, &addrs, now, &mut g1);
                c1.ct = ct;
                let v1 = fast.run_hook(Table::Filter, hook, &mut c1, &mut s1, None);
                let (m1, ct1) = (c1.packet.mark, c1.ct);
                let mut c2 = EvalCtx::new(pkt, &addrs, now, &mut g2);
                c2.ct = ct;
                let v2 = plain.run_hook(Table::Filter, hook, &mut c2, &mut s2, None);
                assert_eq!(v1, v2, "seed {seed} packet {i} {pkt} {hook}\n{text}");
                assert_eq!(
                    m1, c2.packet.mark,
                    "seed {seed} packet {i} {pkt} {hook}\n{text}"
                );
                assert_eq!(ct1, c2.ct, "seed {seed} packet {i}");
            }
        }
        let opts = SaveOptions {
            counters: true,
            ..SaveOptions::default()
        };
        assert_eq!(
            fast.save(&s1, &opts),
            plain.save(&s2, &opts),
            "seed {seed}: counters differ\n{text}"
        );
        assert_eq!(
            g1.next_u64(),
            g2.next_u64(),
            "seed {seed}: random draws differ"
        );
        assert_eq!(
            s1.nfacct_counters(&fast, "acct"),
            s2.nfacct_counters(&plain, "acct"),
            "seed {seed}: nfacct counters differ\n{text}"
        );
        s1.memo_entries()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn remembered_walks_equal_walking(seed in any::<u64>(), impure in any::<bool>()) {
            check(seed, impure);
        }
    }

    #[test]
    fn the_memo_stays_bounded() {
        let addrs = LocalAddrs::new();
        let mut g = SimRng::derive(1, "stat");
        let run = |rs: &Ruleset, st: &mut RulesetState, g: &mut SimRng, p: Packet| {
            let mut c = EvalCtx::new(p, &addrs, SimTime::ZERO, g);
            rs.run_hook(Table::Filter, Hook::Forward, &mut c, st, None)
        };
        let pkt = |i: u32| {
            let dst = std::net::Ipv4Addr::from(0x0a00_0000 + i);
            Packet::udp(
                "10.1.0.1:1000".parse().unwrap(),
                std::net::SocketAddr::new(dst.into(), 53),
            )
        };
        // A walk bumping 100 counters is walked every time, not remembered.
        let mut text = String::from("*filter\n:FORWARD ACCEPT [0:0]\n");
        for _ in 0..100 {
            text.push_str("-A FORWARD\n");
        }
        text.push_str("COMMIT\n");
        let rs = Ruleset::from_save(&text).unwrap();
        let mut st = RulesetState::new();
        run(&rs, &mut st, &mut g, pkt(1));
        run(&rs, &mut st, &mut g, pkt(1));
        assert_eq!(st.memo_entries(), 0);
        let c = st
            .rule_counters(&rs, Table::Filter, "FORWARD", 100)
            .unwrap();
        assert_eq!(c.packets, 2);
        // Keys beyond the limit start the memo over.
        let rs = Ruleset::from_save(
            "*filter\n:FORWARD ACCEPT [0:0]\n-A FORWARD -d 10.0.0.7/32 -j DROP\nCOMMIT\n",
        )
        .unwrap();
        let mut st = RulesetState::new();
        for i in 0..(crate::state::MEMO_MAX_ENTRIES as u32 + 10) {
            let v = run(&rs, &mut st, &mut g, pkt(i));
            assert_eq!(v.action == Action::Drop, i == 7);
        }
        assert_eq!(st.memo_entries(), 10);
    }

    #[test]
    fn pure_tables_are_remembered_and_impure_ones_are_not() {
        // Pure rulesets are remembered (the property test above is not vacuous)...
        assert!((0..8).map(|s| check(s, false)).sum::<usize>() > 0);
        // ...and a statistic rule anywhere a hook can reach keeps that hook walking.
        let mut rs = Ruleset::new();
        rs.restore(
            "*filter\n:FORWARD ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:S - [0:0]\n\
             -A FORWARD -m conntrack --ctstate NEW -j S\n\
             -A S -m statistic --mode random --probability 0.5 -j DROP\n\
             -A INPUT -m conntrack --ctstate NEW -j ACCEPT\nCOMMIT\n",
            &RestoreOptions::default(),
        )
        .unwrap();
        let prog = &rs.tables[Table::Filter.index()].as_ref().unwrap().program;
        assert!(prog.memo[Hook::Forward as usize].is_none());
        assert!(prog.memo[Hook::Input as usize].is_some());
        // kube-proxy >= 1.29 counts its INVALID drops with nfacct: still remembered.
        let mut rs = Ruleset::new();
        rs.nfacct_add("ct_state_invalid_dropped_pkts").unwrap();
        rs.restore(
            "*filter\n:FORWARD ACCEPT [0:0]\n:KUBE-FORWARD - [0:0]\n\
             -A FORWARD -j KUBE-FORWARD\n\
             -A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP\n\
             -A KUBE-FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\nCOMMIT\n",
            &RestoreOptions::default(),
        )
        .unwrap();
        let prog = &rs.tables[Table::Filter.index()].as_ref().unwrap().program;
        assert!(prog.memo[Hook::Forward as usize].is_some());
    }
}
