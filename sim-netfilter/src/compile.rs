//! A compact, contiguous form of a table for fast evaluation.
//!
//! After every commit each table is flattened into a [`Program`]: all its chains' rules in
//! one array of small [`CRule`]s (addresses as masks, flags as bits, the common matches
//! inline in a second array, jumps as array positions), so following a packet through
//! `KUBE-SERVICES → KUBE-SVC-… → KUBE-SEP-…` touches a few adjacent cache lines instead of
//! chasing chain, rule and match allocations. Anything uncommon (interfaces, fragments,
//! conntrack beyond `--ctstate`, addrtype, recent, nfacct, multiport, icmp, NAT and the other
//! non-trivial targets) points back at the original rule and is evaluated by the same code as
//! the reference walk. The reference walk (`Ruleset::set_indexing(false)`, and every traced
//! walk) never uses this; a property test checks both agree.

use crate::index::{ChainIndex, NO_JUMP};
use crate::rule::*;
use crate::ruleset::{Chain, TableData};
use crate::types::{Counters, IpNet, PortRange};

pub(crate) const SRC_INV: u8 = 1 << 0;
pub(crate) const DST_INV: u8 = 1 << 1;
pub(crate) const PROTO_INV: u8 = 1 << 2;
/// Interfaces or fragment flag: check the original rule's IP part.
pub(crate) const SLOW_IP: u8 = 1 << 3;
/// The rule has `-s`.
pub(crate) const HAS_SRC: u8 = 1 << 4;
/// The rule has `-d`.
pub(crate) const HAS_DST: u8 = 1 << 5;
/// The rule has `-p`.
pub(crate) const HAS_PROTO: u8 = 1 << 6;
/// Any IP-part test at all: a rule without one (kube-proxy's `-m conntrack …` and
/// `-m comment …` rules) skips them with one test.
pub(crate) const IP_TESTS: u8 = HAS_SRC | HAS_DST | HAS_PROTO | SLOW_IP;
/// The rule's counters start from non-zero values (a restore with `-c` or `[p:b]`): a slot
/// taken over by it must read them from the original rule. Without this bit they start at
/// zero, and the walk never touches the original rule to count a packet.
pub(crate) const HAS_INIT: u8 = 1 << 7;

/// In a compiled jump's or goto's `end`: the target chain has a first-match index.
pub(crate) const END_INDEXED: u32 = 1 << 31;

/// The target of a compiled rule.
#[derive(Clone, Copy, Debug)]
pub(crate) enum CTarget {
    None,
    Accept,
    Drop,
    Return,
    /// Jump to the chain whose compiled rules are `start..end & !END_INDEXED` (the span
    /// is in the rule itself, so following a jump reads no other line).
    Jump {
        start: u32,
        end: u32,
    },
    /// Goto the chain at `start..end & !END_INDEXED`.
    Goto {
        start: u32,
        end: u32,
    },
    /// Jump to a chain without rules: it returns at once, so only the jump's own counters
    /// and the jump-stack limit matter.
    JumpEmpty,
    Mark {
        value: u32,
        mask: u32,
    },
    /// Anything else: `Program::others[i]`, a copy of the original target kept next to the
    /// program (DNAT's range is one cache miss away, not three).
    Other(u32),
}

/// A compiled match.
#[derive(Clone, Copy, Debug)]
pub(crate) enum CMatch {
    /// tcp (0), udp (1) or sctp (2) ports, and tcp flags.
    Ports {
        kind: u8,
        sport: PortRange,
        dport: PortRange,
        sinv: bool,
        dinv: bool,
        flags: Option<(u8, u8, bool)>,
    },
    Mark {
        value: u32,
        mask: u32,
        inv: bool,
    },
    /// conntrack/state with only a state test.
    State {
        mask: u16,
        inv: bool,
    },
    Random {
        threshold: u32,
        inv: bool,
    },
    /// Anything else: the original rule's match number `idx`.
    Slow {
        idx: u16,
    },
    /// `-m nfacct`: always matches, and counts the packet on the accounting object with
    /// this registry index (its current uid is read when it counts).
    Nfacct {
        idx: u32,
    },
    /// No test (the first match of a rule without compiled matches).
    Always,
}

/// A compiled rule: exactly one cache line (`repr(C)`, 64-byte aligned, fields ordered so
/// that they fill it), so a walk touches one line per rule it tests. Where it came from
/// (chain and position, for the slow paths) is in [`Program::origins`].
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub(crate) struct CRule {
    pub slot_uid: u64,
    /// The first compiled match, kept in the rule (kube-proxy's rules have at most one once
    /// comments are dropped); [`CMatch::Always`] if there is none.
    pub first: CMatch,
    pub src: u32,
    pub smask: u32,
    pub dst: u32,
    pub dmask: u32,
    pub slot_idx: u32,
    /// The compiled matches after `first`: `Program::matches[match_start..][..nmatch]`.
    pub match_start: u32,
    pub target: CTarget,
    pub nmatch: u16,
    pub flags: u8,
    pub proto: u8,
}

/// A table in compiled form.
#[derive(Clone, Debug, Default)]
pub(crate) struct Program {
    pub rules: Vec<CRule>,
    /// By rule (parallel to `rules`): the chain id and position of the original rule.
    pub origins: Vec<(u32, u32)>,
    pub matches: Vec<CMatch>,
    /// Copies of the targets compiled as [`CTarget::Other`].
    pub others: Vec<Target>,
    /// The first-match indexes of the indexed chains, by chain id, ascending: copies of
    /// the chains' own, annotated with each single-rule key's jump target in this program
    /// and the first kept target after it ([`ChainIndex::annotate`]), so that a prefetch
    /// hint learns where a Service's chains are from the one map probe the walk makes
    /// anyway (`hint.rs`).
    pub indexes: Vec<(u32, ChainIndex)>,
    /// By chain id: where its rules are (empty for a freed id) and whether it is indexed.
    pub spans: Vec<Span>,
    /// By hook: what a walk from that hook's built-in chain reads of the packet, when that
    /// is all its outcome depends on (see [`MemoSpec`]); `None` when it may depend on more.
    pub memo: [Option<MemoSpec>; 5],
}

/// The packet features a hook's walk can read, when the walk is a pure function of them.
///
/// A walk is pure when every rule reachable from the built-in chain tests only the packet
/// (addresses, protocol, ports, TCP flags, ICMP type, interfaces, mark) and its ctstate, or
/// counts it with nfacct, and every target there is a verdict, a jump, MARK, REJECT, a NAT
/// target, LOG or TRACE: no random or nth statistic, recent, addrtype (the routing table can
/// change), other conntrack tests, CONNMARK or CT. Its whole effect is then a function of
/// these features: the verdict, the rule, policy and nfacct counters it bumps (by the
/// packet's length), and the mark as `(mark & keep) ^ xor` (MARK's `(mark & ~mask) ^ value`
/// composes to that form). The evaluator remembers that effect per feature key and replays
/// it (`state.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct MemoSpec {
    /// Source bits any `-s` looks at.
    pub smask: u32,
    /// Destination bits any `-d` looks at.
    pub dmask: u32,
    /// Mark bits any `-m mark` looks at.
    pub mark: u32,
    /// Some rule has `-p`.
    pub proto: bool,
    /// Some rule has a port match: whether the packet has ports matters.
    pub ports: bool,
    /// Some port match looks at the source port.
    pub sport: bool,
    /// Some port match looks at the destination port.
    pub dport: bool,
    /// Some `-m sctp` (whether the packet is SCTP matters).
    pub sctp: bool,
    /// Some `--tcp-flags` / `--syn`.
    pub tcp_flags: bool,
    /// Some `-m icmp`.
    pub icmp: bool,
    /// Some `--ctstate`.
    pub ct: bool,
    /// Some `-i`.
    pub iif: bool,
    /// Some `-o`.
    pub oif: bool,
    /// The bits of a packet's three raw key words (see `memo_key` in `eval.rs`) that the
    /// flags above select, set by [`MemoSpec::seal`].
    pub masks: [u64; 3],
}

impl Program {
    /// The program's copy of chain `id`'s first-match index, if it has one.
    #[inline]
    pub(crate) fn index_of(&self, id: u32) -> Option<&ChainIndex> {
        self.indexes
            .iter()
            .find(|(c, _)| *c == id)
            .map(|(_, ix)| ix)
    }
}

impl MemoSpec {
    /// Computes [`MemoSpec::masks`] from the flags. Word 0 holds source and destination,
    /// word 1 mark, source and destination port, word 2 protocol, the L4 kind bits (ports 1,
    /// SCTP 2, TCP 4, ICMP 8), TCP flags or ICMP type, ICMP code, and the ctstate bits. A mask
    /// may keep more than a walk reads (the TCP-flags byte is also the ICMP-type byte): a key
    /// finer than needed only remembers more outcomes, never a wrong one.
    fn seal(&mut self) {
        let on = |b: bool, m: u64| if b { m } else { 0 };
        self.masks = [
            u64::from(self.smask) | u64::from(self.dmask) << 32,
            u64::from(self.mark) | on(self.sport, 0xffff << 32) | on(self.dport, 0xffff << 48),
            on(self.proto, 0xff)
                | on(self.ports, 1 << 8)
                | on(self.sctp, 2 << 8)
                | on(self.tcp_flags, 4 << 8 | 0xff << 16)
                | on(self.icmp, 8 << 8 | 0xffff << 16)
                | on(self.ct, 0xffff << 32),
        ];
    }

    fn merge(&mut self, o: &MemoSpec) {
        self.smask |= o.smask;
        self.dmask |= o.dmask;
        self.mark |= o.mark;
        self.proto |= o.proto;
        self.ports |= o.ports;
        self.sport |= o.sport;
        self.dport |= o.dport;
        self.sctp |= o.sctp;
        self.tcp_flags |= o.tcp_flags;
        self.icmp |= o.icmp;
        self.ct |= o.ct;
        self.iif |= o.iif;
        self.oif |= o.oif;
    }
}

/// Adds what rule `r` reads of the packet to `spec`; false if the rule makes a walk impure
/// (see [`MemoSpec`]).
fn rule_features(r: &Rule, spec: &mut MemoSpec) -> bool {
    let ip = &r.ip;
    // The memo key holds IPv4 addresses: a rule testing an IPv6 address makes the walk
    // impure (ip6tables rulesets are walked in order, see `run_hook`).
    for (n, m) in [(&ip.src, &mut spec.smask), (&ip.dst, &mut spec.dmask)] {
        match n {
            Some(IpNet::V4(n)) => *m |= n.mask,
            Some(IpNet::V6(_)) => return false,
            None => {}
        }
    }
    spec.proto |= ip.proto != 0;
    spec.iif |= ip.iif.is_some();
    spec.oif |= ip.oif.is_some();
    for m in &r.matches {
        match m {
            Match::Comment(_) => {}
            Match::Tcp(t) => {
                spec.ports = true;
                spec.sport |= t.sport != PortRange::ALL;
                spec.dport |= t.dport != PortRange::ALL;
                spec.tcp_flags |= t.flags.is_some();
            }
            Match::Udp(p) | Match::Sctp(p) => {
                spec.ports = true;
                spec.sport |= p.sport != PortRange::ALL;
                spec.dport |= p.dport != PortRange::ALL;
                spec.sctp |= matches!(m, Match::Sctp(_));
            }
            Match::Multiport(_) => {
                spec.ports = true;
                spec.sport = true;
                spec.dport = true;
            }
            Match::Icmp(_) | Match::Icmp6(_) => spec.icmp = true,
            Match::Mark(mk) => spec.mark |= mk.mask,
            Match::Conntrack(_) => match compile_match(m, 0) {
                Some(CMatch::State { .. }) => spec.ct = true,
                _ => return false,
            },
            // nfacct reads nothing of the packet; what it counts is remembered like a rule
            // counter.
            Match::Nfacct(_) => {}
            // A set test reads whole addresses and the set's content, which the key lacks;
            // physdev reads the bridge ports, which it lacks too.
            Match::Statistic(_)
            | Match::Addrtype(_)
            | Match::Recent(_)
            | Match::Set(_)
            | Match::Physdev(_) => return false,
        }
    }
    match &r.target {
        Target::None
        | Target::Accept
        | Target::Drop
        | Target::Return
        | Target::Jump(_)
        | Target::Goto(_)
        | Target::Reject(_)
        | Target::Dnat(_)
        | Target::Snat(_)
        | Target::Masquerade(_)
        | Target::Redirect(_)
        | Target::Mark { .. }
        | Target::Log(_)
        | Target::Trace => true,
        Target::Connmark(_) | Target::Ct { .. } => false,
    }
}

/// The [`MemoSpec`] of a walk from built-in chain `base`: the union of the chains it can
/// reach (`chains[id]`: the chain's own features, `None` if impure; `targets(id)`: the chains
/// it jumps or goes to), `None` if any of them is impure.
fn hook_spec<'a>(
    base: u32,
    chains: &[Option<MemoSpec>],
    targets: impl Fn(usize) -> &'a [u32],
) -> Option<MemoSpec> {
    let mut spec = MemoSpec::default();
    let mut seen = vec![false; chains.len()];
    let mut todo = vec![base];
    while let Some(id) = todo.pop() {
        let id = id as usize;
        if std::mem::replace(seen.get_mut(id)?, true) {
            continue;
        }
        spec.merge(chains.get(id)?.as_ref()?);
        todo.extend_from_slice(targets(id));
    }
    spec.seal();
    Some(spec)
}

/// Where a chain's compiled rules are.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Span {
    pub start: u32,
    pub end: u32,
    /// The chain has a first-match index.
    pub indexed: bool,
}

fn compile_match(m: &Match, idx: usize) -> Option<CMatch> {
    Some(match m {
        Match::Comment(_) => return None,
        Match::Tcp(t) => CMatch::Ports {
            kind: 0,
            sport: t.sport,
            dport: t.dport,
            sinv: t.sport_inv,
            dinv: t.dport_inv,
            flags: t.flags,
        },
        Match::Udp(p) | Match::Sctp(p) => CMatch::Ports {
            kind: if matches!(m, Match::Udp(_)) { 1 } else { 2 },
            sport: p.sport,
            dport: p.dport,
            sinv: p.sport_inv,
            dinv: p.dport_inv,
            flags: None,
        },
        Match::Mark(mk) => CMatch::Mark {
            value: mk.value,
            mask: mk.mask,
            inv: mk.inv,
        },
        Match::Conntrack(c)
            if c.proto.is_none()
                && c.orig_src.is_none()
                && c.orig_dst.is_none()
                && c.repl_src.is_none()
                && c.repl_dst.is_none()
                && c.orig_src_port.is_none()
                && c.orig_dst_port.is_none()
                && c.repl_src_port.is_none()
                && c.repl_dst_port.is_none()
                && c.status.is_none()
                && c.expires.is_none()
                && c.dir.is_none()
                && c.state.is_some() =>
        {
            let (mask, inv) = c.state.unwrap_or_default();
            CMatch::State { mask, inv }
        }
        Match::Statistic(StatisticMatch {
            mode: StatisticMode::Random { probability },
            inv,
            ..
        }) => CMatch::Random {
            threshold: *probability,
            inv: *inv,
        },
        Match::Nfacct(n) => CMatch::Nfacct { idx: n.obj.idx },
        _ => CMatch::Slow { idx: idx as u16 },
    })
}

/// The order in which `td`'s chains are laid out (compiled rules, and counter slots of a
/// freshly restored table): depth first from the built-in chains in hook order, each chain
/// followed by the chains it jumps or goes to that were not placed before, in rule order;
/// then the chains no built-in chain reaches, by id. kube-proxy's `KUBE-SVC-…` chain then
/// sits right before its `KUBE-SEP-…` chains, so a new flow's walk through one service reads
/// one short stretch of memory instead of lines scattered over the whole table (its chains'
/// names are hashes, so id order, iptables-save's sorted order, scatters them).
pub(crate) fn layout_order(td: &TableData) -> Vec<u32> {
    let n = td.chains.len();
    let mut placed = vec![false; n];
    let mut order = Vec::with_capacity(n);
    let mut todo: Vec<u32> = Vec::new();
    let mut targets: Vec<u32> = Vec::new();
    for base in td.builtin.iter().flatten() {
        todo.push(*base);
        while let Some(id) = todo.pop() {
            let Some(Some(c)) = td.chains.get(id as usize) else {
                continue;
            };
            if std::mem::replace(&mut placed[id as usize], true) {
                continue;
            }
            order.push(id);
            targets.clear();
            targets.extend(c.rules.iter().filter_map(|r| match &r.target {
                Target::Jump(t) | Target::Goto(t) => Some(t.id.idx),
                _ => None,
            }));
            // The stack pops the first target first.
            todo.extend(targets.iter().rev().filter(|&&t| !placed[t as usize]));
        }
    }
    for (id, c) in td.chains.iter().enumerate() {
        if c.is_some() && !placed[id] {
            order.push(id as u32);
        }
    }
    order
}

/// Flattens `td` (whose jumps are resolved), in one pass over its chains in
/// [`layout_order`]. The same pass collects each chain's [`MemoSpec`] features and jump
/// targets, from which each hook's spec follows.
pub(crate) fn compile(td: &TableData) -> Program {
    let n = td.chains.len();
    let mut p = Program {
        rules: Vec::new(),
        origins: Vec::new(),
        matches: Vec::new(),
        others: Vec::new(),
        indexes: Vec::new(),
        spans: vec![Span::default(); n],
        memo: [None; 5],
    };
    // Per chain: its own features (None: impure) and its targets, `edges[edge_at[id]..]`.
    let mut features: Vec<Option<MemoSpec>> = vec![None; n];
    let mut edge_at: Vec<(u32, u32)> = vec![(0, 0); n];
    let mut edges: Vec<u32> = Vec::new();
    for id in layout_order(td) {
        let id = id as usize;
        let Some(c) = &td.chains[id] else { continue };
        let first_edge = edges.len() as u32;
        let mut spec = Some(MemoSpec::default());
        compile_chain(&mut p, id, c, &mut spec, &mut edges);
        features[id] = spec;
        edge_at[id] = (first_edge, edges.len() as u32);
    }
    for (hook, base) in td.builtin.iter().enumerate() {
        if let Some(base) = base {
            p.memo[hook] = hook_spec(*base, &features, |id| {
                let (a, b) = edge_at[id];
                &edges[a as usize..b as usize]
            });
        }
    }
    // Jumps were compiled with the target's chain id in `start` (its span was not known
    // yet): now the span.
    for r in &mut p.rules {
        let jump = matches!(r.target, CTarget::Jump { .. });
        if let CTarget::Jump { start, end } | CTarget::Goto { start, end } = &mut r.target {
            let span = p.spans[*start as usize];
            if jump && span.start == span.end {
                r.target = CTarget::JumpEmpty;
            } else {
                *start = span.start;
                *end = span.end | if span.indexed { END_INDEXED } else { 0 };
            }
        }
    }
    // `others` is filled in rule order: the first entry at or after each position.
    let mut others_from = Vec::with_capacity(p.rules.len() + 1);
    let mut seen = 0u32;
    for r in &p.rules {
        others_from.push(seen);
        seen += u32::from(matches!(r.target, CTarget::Other(_)));
    }
    others_from.push(seen);
    for id in 0..n {
        let (Some(c), true) = (&td.chains[id], p.spans[id].indexed) else {
            continue;
        };
        let Some(mut ix) = c.index.clone() else {
            continue;
        };
        let start = p.spans[id].start as usize;
        ix.annotate(|at| match p.rules.get(start + at).map(|r| r.target) {
            Some(CTarget::Jump { start: to, .. } | CTarget::Goto { start: to, .. }) => {
                (to, others_from[to as usize])
            }
            _ => (NO_JUMP, 0),
        });
        p.indexes.push((id as u32, ix));
    }
    p
}

/// Appends chain `id`'s compiled rules to `p`, adds their features to `spec` (`None` once one
/// is impure) and their jump and goto targets to `edges`.
fn compile_chain(
    p: &mut Program,
    id: usize,
    c: &Chain,
    spec: &mut Option<MemoSpec>,
    edges: &mut Vec<u32>,
) {
    let start = p.rules.len() as u32;
    for (pos, r) in c.rules.iter().enumerate() {
        if let Some(s) = spec {
            if !rule_features(r, s) {
                *spec = None;
            }
        }
        if let Target::Jump(t) | Target::Goto(t) = &r.target {
            edges.push(t.id.idx);
        }
        let ip = &r.ip;
        let mut flags = 0;
        if ip.src_inv {
            flags |= SRC_INV;
        }
        if ip.dst_inv {
            flags |= DST_INV;
        }
        if ip.proto_inv {
            flags |= PROTO_INV;
        }
        let v6 = |n: &Option<IpNet>| matches!(n, Some(IpNet::V6(_)));
        if ip.iif.is_some() || ip.oif.is_some() || ip.frag.is_some() || v6(&ip.src) || v6(&ip.dst) {
            flags |= SLOW_IP;
        }
        if matches!(ip.src, Some(IpNet::V4(_))) {
            flags |= HAS_SRC;
        }
        if matches!(ip.dst, Some(IpNet::V4(_))) {
            flags |= HAS_DST;
        }
        if ip.proto != 0 {
            flags |= HAS_PROTO;
        }
        if r.initial_counters != Counters::default() {
            flags |= HAS_INIT;
        }
        let mut compiled = r
            .matches
            .iter()
            .enumerate()
            .filter_map(|(i, m)| compile_match(m, i));
        let first = compiled.next().unwrap_or(CMatch::Always);
        let match_start = p.matches.len() as u32;
        p.matches.extend(compiled);
        let target = match &r.target {
            Target::None => CTarget::None,
            Target::Accept => CTarget::Accept,
            Target::Drop => CTarget::Drop,
            Target::Return => CTarget::Return,
            Target::Jump(c) => CTarget::Jump {
                start: c.id.idx,
                end: 0,
            },
            Target::Goto(c) => CTarget::Goto {
                start: c.id.idx,
                end: 0,
            },
            Target::Mark { value, mask } => CTarget::Mark {
                value: *value,
                mask: *mask,
            },
            other => {
                p.others.push(other.clone());
                CTarget::Other((p.others.len() - 1) as u32)
            }
        };
        let (src, smask) = ip
            .src
            .and_then(|n| n.v4())
            .map(|n| (n.addr, n.mask))
            .unwrap_or((0, 0));
        let (dst, dmask) = ip
            .dst
            .and_then(|n| n.v4())
            .map(|n| (n.addr, n.mask))
            .unwrap_or((0, 0));
        p.rules.push(CRule {
            first,
            src,
            smask,
            dst,
            dmask,
            slot_uid: r.slot.uid,
            slot_idx: r.slot.idx,
            match_start,
            nmatch: (p.matches.len() as u32 - match_start) as u16,
            flags,
            proto: ip.proto,
            target,
        });
        p.origins.push((id as u32, pos as u32));
    }
    p.spans[id] = Span {
        start,
        end: p.rules.len() as u32,
        indexed: c.index.is_some(),
    };
}

#[cfg(test)]
mod layout {
    /// A compiled rule is one cache line: a walk fetches one line per rule it tests.
    #[test]
    fn a_compiled_rule_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<super::CRule>(), 64);
        assert_eq!(std::mem::align_of::<super::CRule>(), 64);
    }
}
