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
//!
//! This file holds what goes in and comes out (the context, the conntrack view, the verdict)
//! and the packet as the walks test it. The rooms: `walk` is the reference walk of a chain,
//! in order, with jumps, gotos, policies and the trace; `matches` tests one rule's matches;
//! `target` runs the targets that are not verdicts (REJECT's response, NAT, MARK, CONNMARK,
//! CT, LOG, TRACE); `compiled` is the indexed walk of the compiled program and its memo of
//! pure walks, which gives what `walk` gives.
//!
//! [`Ruleset::run_hook`]: crate::Ruleset::run_hook
//! [`Trace`]: crate::Trace

mod compiled;
mod matches;
mod target;
mod walk;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use sim_core::{Packet, SimRng, SimTime, L4};

use crate::rule::*;
use crate::types::*;

pub(crate) use compiled::origin_rule;
pub(crate) use matches::rule_matches;
pub(crate) use target::effect;

/// Classifies addresses for `-m addrtype`: `inet_dev_addr_type(net, dev, addr)`.
pub trait AddrTypeLookup {
    /// The route type of `addr` in the host's local table; with `dev`, a local or broadcast
    /// address only counts if it belongs to that interface (else it is UNICAST).
    fn addr_type(&self, addr: Ipv4Addr, dev: Option<&str>) -> AddrType;

    /// Whether IPv6 `addr` routes as local (`RTF_LOCAL` of the route `match_lookup_rt6`
    /// finds; with `dev`, only an address of that interface). The default knows `::1` on
    /// `lo` alone.
    fn is_local6(&self, addr: Ipv6Addr, dev: Option<&str>) -> bool {
        addr == Ipv6Addr::LOCALHOST && dev.is_none_or(|d| d == "lo")
    }
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
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol.
    pub proto: u8,
    /// Source port (ICMP: id).
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

impl CtTuple {
    /// The tuple of a packet (ports 0 where it has none).
    pub fn of(p: &Packet) -> CtTuple {
        CtTuple {
            src: p.src,
            dst: p.dst,
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
    /// The bridge ports of a packet that came through a bridge with `br_netfilter` (the
    /// skb's `nf_bridge_info`), for `-m physdev`; `None` for any other packet.
    pub phys: Option<PhysDevs>,
}

/// What `br_netfilter` remembers of a bridged packet (`struct nf_bridge_info`): the port it
/// came in by (`physindev`) and, once the bridge has chosen one, the port it goes out by
/// (`physoutdev`, set by `br_nf_forward_ip`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PhysDevs {
    /// The bridge port it was received on.
    pub indev: Option<sim_core::IfName>,
    /// The bridge port it leaves by (FORWARD and POSTROUTING of a bridged packet).
    pub outdev: Option<sim_core::IfName>,
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
            phys: None,
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
    /// Accept, with no NAT, tracking or mark change.
    pub(crate) fn accept() -> Verdict {
        Verdict {
            action: Action::Accept,
            nat: None,
            notrack: false,
            ct_mark: None,
        }
    }

    /// Drop (nftables' `drop`, a chain's `policy drop`).
    pub(crate) fn drop() -> Verdict {
        Verdict {
            action: Action::Drop,
            ..Verdict::accept()
        }
    }

    /// A NAT statement's verdict: accept, with the binding to set up.
    pub(crate) fn nat(req: NatRequest) -> Verdict {
        Verdict {
            nat: Some(req),
            ..Verdict::accept()
        }
    }

    /// A reject statement's verdict.
    pub(crate) fn reject(with: crate::rule::RejectWith) -> Verdict {
        Verdict {
            action: Action::Reject(with),
            ..Verdict::accept()
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

/// An IPv4 address as a number (0 for IPv6).
#[inline]
pub(crate) fn ip4(a: IpAddr) -> u32 {
    match a {
        IpAddr::V4(v) => u32::from(v),
        IpAddr::V6(_) => 0,
    }
}

/// An IPv6 address as a number (0 for IPv4).
#[inline]
pub(crate) fn ip6(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(_) => 0,
        IpAddr::V6(v) => u128::from(v),
    }
}

/// The jump stack: nf_tables' `NFT_JUMP_STACK_SIZE`; deeper rulesets are refused at commit.
pub(crate) const MAX_DEPTH: usize = 16;

pub(crate) struct Pkt {
    src: u32,
    dst: u32,
    /// The IPv6 addresses (0 for an IPv4 packet, whose `src`/`dst` are then set).
    src6: u128,
    dst6: u128,
    proto: u8,
    sport: Option<u16>,
    dport: Option<u16>,
    pub(crate) len: u64,
    /// `ctx.ct.state_bits()`, for the compiled walk's `--ctstate` tests (kept up to date
    /// when a target changes `ctx.ct`).
    ctbits: u16,
}

impl Pkt {
    /// The packet in `ctx` as the walks (reference and compiled) test it.
    #[inline]
    pub(crate) fn of(ctx: &EvalCtx<'_>) -> Pkt {
        Pkt {
            src: ip4(ctx.packet.src),
            dst: ip4(ctx.packet.dst),
            src6: ip6(ctx.packet.src),
            dst6: ip6(ctx.packet.dst),
            proto: ctx.packet.protocol(),
            sport: ctx.packet.sport(),
            dport: ctx.packet.dport(),
            len: u64::from(ctx.packet.len),
            ctbits: ctx.ct.state_bits(),
        }
    }
}
