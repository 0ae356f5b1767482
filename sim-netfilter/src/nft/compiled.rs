//! The compiled form of an nftables ruleset: the same walk as `eval.rs` (`nft_do_chain`),
//! with every name resolved and every lookup a table, for packets that are not traced.
//!
//! What compiling does, and why each result is the interpreter's:
//!
//! - Chains become code: one array of instructions, each chain's rules one after the other,
//!   each rule a header (where the next rule starts, where the rule is in the ruleset) and
//!   its statements, chains laid out depth first from the base chains so that a Service's
//!   chain is followed by its endpoints' chains. `jump`/`goto` targets and verdict-map
//!   verdicts are code positions (a target that does not exist drops, as the interpreter's
//!   name lookup does); a `numgen` map's verdicts lie in the code after its lookup.
//! - A key (`ip daddr . meta l4proto . th dport`) is loaded field by field with the
//!   interpreter's own `load` (so `numgen` draws, `ct state` values and failed loads are
//!   its) and packed into one [`PKey`]: the fields' values side by side, each in its type's
//!   width (`ipv4_addr` 32 bits, `inet_proto` 8, `inet_service` 16, …), as the kernel lays
//!   a concatenation out in registers (`nft_concat`), without allocating.
//! - Named sets and verdict maps become hash tables of packed keys (open addressing, the
//!   verdict in the key's slot: one line a lookup); interval sets a sorted
//!   array searched by halves when no two intervals overlap, else the elements in the
//!   interpreter's order; anonymous sets and maps the same, or a direct index for small
//!   integers (`numgen random mod N vmap { 0 : …, 1 : … }`). An element's expiry is kept and
//!   checked at lookup as the interpreter checks it.
//! - What a walk changes stays where the interpreter keeps it: counters are the rules'
//!   `counter` statements in the [`NftRuleset`], `update @set` writes the ruleset's set (and
//!   the compiled copy of it), `meta mark set` the packet.
//!
//! A ruleset that does not compile (a key wider than [`KEY_BITS`], an interval set written
//! or map written by `update`) is walked by the interpreter. The netns compiles a ruleset
//! when `nft -f` input is applied; a traced walk, or one that follows every `numgen`
//! branch, runs the interpreter, and after one the compiled copies of written sets are
//! rebuilt. When conntrack finds no entry for a packet, the netns asks the program for the
//! lines its walk will read ([`NftProgram::prefetch_new_flow`], as `hint.rs` does for
//! iptables).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use sim_core::{Packet, SimDuration, SimTime};

use super::eval::{load, BaseRef, NftDraw, MAX_DEPTH};
use super::*;
use crate::eval::{EvalCtx, NatRequest, Verdict};
use crate::rule::{NatRange, PortNat, RejectWith};

/// The widest concatenation compiled: 192 bits (`ipv6_addr . inet_proto . inet_service`
/// is 152).
pub const KEY_BITS: u32 = 192;

/// The most fields of one concatenation compiled.
const MAX_FIELDS: usize = 6;

/// A key, packed: the fields' values side by side in 192 bits, the last field lowest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct PKey([u64; 3]);

impl PKey {
    /// A single field's value, as it is (no width: single-field keys compare as numbers).
    #[inline]
    fn single(v: u128) -> PKey {
        PKey([0, (v >> 64) as u64, v as u64])
    }
}

/// Packs values of widths `bits` (as the key's types give them). `None` when a value does
/// not fit its width (then no loaded key can equal it). A single field is its value.
#[inline]
fn pack(vals: &[u128], bits: &[u32]) -> Option<PKey> {
    if vals.len() == 1 {
        return Some(PKey::single(vals[0]));
    }
    let (mut hi, mut lo) = (0u64, 0u128);
    for (&v, &w) in vals.iter().zip(bits) {
        if w < 128 && v >> w != 0 {
            return None;
        }
        // (hi:lo) = (hi:lo) << w | v; the total width is at most KEY_BITS.
        let carry = if w >= 128 { lo } else { lo >> (128 - w) };
        hi = hi.checked_shl(w).unwrap_or(0) | carry as u64;
        lo = if w >= 128 { v } else { (lo << w) | v };
    }
    Some(PKey([hi, (lo >> 64) as u64, lo as u64]))
}

/// An open-addressing hash table of packed keys (linear probing, never more than half
/// full), each slot holding the key, its element's index and the element's verdict: a
/// lookup reads one slot, usually one cache line, and [`KeyTable::prefetch`] can ask for
/// that line from the key alone. Deterministic: the hash has no per-process seed.
#[derive(Clone, Debug)]
struct KeyTable {
    slots: Vec<Slot>,
    /// `slots.len() - 1` (a power of two less one).
    mask: usize,
    len: usize,
    /// The least and greatest key held (`lo > hi` when empty): a key outside them is not
    /// there, found without reading a slot. Keys are packed with the first field highest,
    /// so for kube-proxy's sets this is the span of the addresses: a packet DNAT'd to a
    /// pod, looked up in `cluster-ips` (`cluster-ips-check`), lies outside the Service CIDR
    /// and misses without a cache miss.
    lo: PKey,
    hi: PKey,
}

/// One slot of a [`KeyTable`]: 32 bytes.
#[derive(Clone, Copy, Debug)]
struct Slot {
    key: PKey,
    /// The element's index, or [`EMPTY`].
    elem: u32,
    verdict: PVerdict,
}

/// A free slot.
const EMPTY: u32 = u32::MAX;

impl KeyTable {
    fn with_capacity(n: usize) -> KeyTable {
        let cap = (n.max(4) * 2).next_power_of_two();
        KeyTable {
            slots: vec![
                Slot {
                    key: PKey::default(),
                    elem: EMPTY,
                    verdict: PVerdict::of(CVerdict::Accept),
                };
                cap
            ],
            mask: cap - 1,
            len: 0,
            lo: PKey([u64::MAX; 3]),
            hi: PKey([0; 3]),
        }
    }

    /// Whether `k` lies within the least and greatest key held.
    #[inline]
    fn may_hold(&self, k: PKey) -> bool {
        self.lo <= k && k <= self.hi
    }

    #[inline]
    fn home(&self, k: PKey) -> usize {
        // Fibonacci hashing of the three words folded into one.
        let h = (k.0[0].rotate_left(42) ^ k.0[1].rotate_left(21) ^ k.0[2])
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h ^ (h >> 32)) as usize & self.mask
    }

    /// The slot holding `k`.
    #[inline]
    fn get(&self, k: PKey) -> Option<&Slot> {
        if !self.may_hold(k) {
            return None;
        }
        let mut i = self.home(k);
        loop {
            let s = &self.slots[i];
            if s.elem == EMPTY {
                return None;
            }
            if s.key == k {
                return Some(s);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Asks the CPU for the line where a lookup of `k` starts.
    #[inline]
    fn prefetch(&self, k: PKey) {
        if !self.may_hold(k) {
            return;
        }
        if let Some(s) = self.slots.get(self.home(k)) {
            sim_core::prefetch::line(s);
        }
    }

    /// Adds `k` unless it is there (the first element of a key wins, as in the
    /// interpreter's element order).
    fn insert(&mut self, k: PKey, elem: u32, verdict: CVerdict) {
        if (self.len + 1) * 2 > self.slots.len() {
            let mut bigger = KeyTable::with_capacity(self.slots.len());
            for s in self.slots.iter().filter(|s| s.elem != EMPTY) {
                bigger.insert(s.key, s.elem, s.verdict.get());
            }
            *self = bigger;
        }
        let mut i = self.home(k);
        loop {
            let s = &mut self.slots[i];
            if s.elem == EMPTY {
                *s = Slot {
                    key: k,
                    elem,
                    verdict: PVerdict::of(verdict),
                };
                self.len += 1;
                self.lo = self.lo.min(k);
                self.hi = self.hi.max(k);
                return;
            }
            if s.key == k {
                return;
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Every verdict, for relocating jump targets.
    fn verdicts_mut(&mut self) -> impl Iterator<Item = &mut PVerdict> {
        self.slots
            .iter_mut()
            .filter(|s| s.elem != EMPTY)
            .map(|s| &mut s.verdict)
    }
}

/// A [`CVerdict`] in 32 bits: the kind in the top 3, a target in the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PVerdict(u32);

impl PVerdict {
    const TARGET: u32 = (1 << 29) - 1;

    fn of(v: CVerdict) -> PVerdict {
        PVerdict(match v {
            CVerdict::Accept => 0,
            CVerdict::Drop => 1 << 29,
            CVerdict::Continue => 2 << 29,
            CVerdict::Return => 3 << 29,
            CVerdict::Jump(t) => 4 << 29 | (t & Self::TARGET),
            CVerdict::Goto(t) => 5 << 29 | (t & Self::TARGET),
        })
    }

    #[inline]
    fn get(self) -> CVerdict {
        let t = self.0 & Self::TARGET;
        match self.0 >> 29 {
            0 => CVerdict::Accept,
            1 => CVerdict::Drop,
            2 => CVerdict::Continue,
            3 => CVerdict::Return,
            4 => CVerdict::Jump(t),
            _ => CVerdict::Goto(t),
        }
    }
}

/// A verdict with its target resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CVerdict {
    Accept,
    Drop,
    Continue,
    Return,
    /// `jump`: the program's chain index.
    Jump(u32),
    /// `goto`.
    Goto(u32),
}

impl CVerdict {
    /// The verdict with a jump's or goto's chain index turned into where its code starts.
    fn relocated(self, chain_pc: &[u32]) -> CVerdict {
        let at = |c: u32| chain_pc.get(c as usize).copied();
        match self {
            CVerdict::Jump(c) => at(c).map_or(CVerdict::Drop, CVerdict::Jump),
            CVerdict::Goto(c) => at(c).map_or(CVerdict::Drop, CVerdict::Goto),
            v => v,
        }
    }
}

/// An element's part of a lookup's result: when it expires and, in a map, its verdict.
#[derive(Clone, Copy, Debug)]
struct CElem {
    expires: Option<SimTime>,
    verdict: CVerdict,
}

/// How a set's keys are searched.
#[derive(Clone, Debug)]
enum Search {
    /// Exact keys.
    Hash(KeyTable),
    /// Exact single-field keys below the length: the element, or `u32::MAX`.
    Direct(Vec<u32>),
    /// Intervals `(lo, hi, element)`, sorted, no two overlapping.
    Sorted(Vec<(PKey, PKey, u32)>),
    /// Intervals in the interpreter's order: the first that holds the key (and is live).
    InOrder(Vec<(PKey, PKey, u32)>),
}

/// A compiled set or map.
#[derive(Clone, Debug)]
struct CSet {
    search: Search,
    /// Whether an element may expire (a set with timeouts, or one `update` writes).
    timed: bool,
    elems: Vec<CElem>,
    /// Field widths in bits.
    bits: Vec<u32>,
}

impl CSet {
    /// The verdict of the first live element that holds `k` (a set's elements: accept).
    #[inline]
    fn find(&self, k: PKey, now: SimTime) -> Option<CVerdict> {
        let live = |e: &CElem| e.expires.is_none_or(|x| x > now);
        let at = match &self.search {
            Search::Hash(m) => {
                let s = m.get(k)?;
                // Only a set with timeouts has elements to check.
                if !self.timed {
                    return Some(s.verdict.get());
                }
                s.elem
            }
            Search::Direct(v) => {
                let i = usize::try_from(k.0[2]).ok()?;
                if k.0[0] != 0 || k.0[1] != 0 {
                    return None;
                }
                match v.get(i) {
                    Some(&e) if e != u32::MAX => e,
                    _ => return None,
                }
            }
            Search::Sorted(v) => {
                let i = v.partition_point(|(lo, _, _)| *lo <= k).checked_sub(1)?;
                let (_, hi, e) = v[i];
                if k > hi {
                    return None;
                }
                e
            }
            Search::InOrder(v) => {
                return v
                    .iter()
                    .filter(|(lo, hi, _)| *lo <= k && k <= *hi)
                    .map(|(_, _, e)| &self.elems[*e as usize])
                    .find(|e| live(e))
                    .map(|e| e.verdict)
            }
        };
        self.elems
            .get(at as usize)
            .filter(|e| live(e))
            .map(|e| e.verdict)
    }

    /// Asks the CPU for the line where a lookup of `k` starts (hash tables only).
    #[inline]
    fn prefetch(&self, k: PKey) {
        if let Search::Hash(m) = &self.search {
            m.prefetch(k);
        }
    }

    /// Turns the chain indices of jump and goto verdicts into code positions.
    fn relocate(&mut self, chain_pc: &[u32]) {
        for e in &mut self.elems {
            e.verdict = e.verdict.relocated(chain_pc);
        }
        if let Search::Hash(m) = &mut self.search {
            for v in m.verdicts_mut() {
                *v = PVerdict::of(v.get().relocated(chain_pc));
            }
        }
    }
}

/// A hash table of `entries` (exact keys: `lo == hi`), the first of a key winning.
fn table_of(entries: &[(PKey, PKey, u32)], elems: &[CElem]) -> KeyTable {
    let mut m = KeyTable::with_capacity(entries.len());
    for &(lo, _, e) in entries {
        m.insert(lo, e, elems[e as usize].verdict);
    }
    m
}

/// Builds a search over `(key, element)` in the interpreter's order (the first holding a
/// key wins); `interval` keeps ranges. Range keys only ever hold single-field keys.
fn build_search(
    entries: Vec<(PKey, PKey, u32)>,
    elems: &[CElem],
    single: bool,
    exact_only: bool,
) -> Search {
    if exact_only {
        if single
            && entries
                .iter()
                .all(|(lo, _, _)| lo.0[0] == 0 && lo.0[1] == 0)
        {
            let max = entries.iter().map(|(lo, _, _)| lo.0[2]).max().unwrap_or(0);
            if max < 256 {
                let mut d = vec![u32::MAX; max as usize + 1];
                for (lo, _, e) in &entries {
                    let slot = &mut d[lo.0[2] as usize];
                    if *slot == u32::MAX {
                        *slot = *e;
                    }
                }
                return Search::Direct(d);
            }
        }
        return Search::Hash(table_of(&entries, elems));
    }
    let mut sorted = entries.clone();
    sorted.sort();
    if sorted.windows(2).all(|w| w[0].1 < w[1].0) {
        Search::Sorted(sorted)
    } else {
        Search::InOrder(entries)
    }
}

/// A key to load: fields `fields[start..start + len]` of the program, the first of them
/// also here (a key of one field is loaded without reading `fields`).
#[derive(Clone, Copy, Debug)]
struct KeyRef {
    first: Field,
    start: u32,
    len: u32,
}

/// Which set a lookup reads.
#[derive(Clone, Copy, Debug)]
enum SetRef {
    /// Not there: finds nothing.
    Missing,
    /// A set no rule writes, or an anonymous one: `Program::sets`.
    Fixed(u32),
    /// A set `update` writes: `NftProgram::written`.
    Written(u32),
}

/// A 128-bit value held as two 64-bit halves (high, low), so that an instruction keeps
/// 8-byte alignment and stays within a cache line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct W([u64; 2]);

impl W {
    fn of(v: u128) -> W {
        W([(v >> 64) as u64, v as u64])
    }

    #[inline]
    fn get(self) -> u128 {
        (u128::from(self.0[0]) << 64) | u128::from(self.0[1])
    }
}

impl PKey {
    /// The value of a single-field key ([`PKey::single`]).
    #[inline]
    fn value(self) -> u128 {
        (u128::from(self.0[1]) << 64) | u128::from(self.0[2])
    }
}

/// How a match compares its loaded key.
#[derive(Clone, Copy, Debug)]
enum Test {
    /// Never holds.
    Never,
    /// `meta mark & M == V`: the first field.
    MaskEq(W, W),
    /// A flag field (`ct state`, `ct status`): any bit in common.
    Flags(W),
    /// One key.
    Eq(PKey),
    /// An inclusive range of a single field.
    Range(W, W),
    /// In a set.
    In(SetRef),
}

/// One statement.
#[derive(Clone, Debug)]
enum COp {
    Match {
        key: KeyRef,
        test: Test,
        negated: bool,
    },
    /// `counter`: the statement's position in its rule (the count is kept there).
    Counter(u32),
    Verdict(CVerdict),
    Vmap {
        key: KeyRef,
        set: SetRef,
    },
    Mark(MarkOp),
    /// `update @set { key }`: the set's index in the rule's table, and its compiled copy.
    Update {
        key: KeyRef,
        set: Option<(u32, u32)>,
    },
    /// `dnat to` / `snat to`.
    Nat {
        dnat: bool,
        addr: IpAddr,
        port: Option<u16>,
    },
    /// `masquerade`.
    Masquerade {
        fully_random: bool,
    },
    Reject(RejectWith),
    /// `iifname` (`out` false) or `oifname`: the name, or its prefix before a `*`.
    Ifname {
        out: bool,
        negated: bool,
        name: Box<str>,
        prefix: bool,
    },
}

/// One instruction of the program's code, where chains lie one after the other, each
/// chain's rules in order, each rule a header and its statements. A jump is a position in
/// the code: reaching a chain reads the lines it starts at, and what follows them is the
/// rest of the chain and, laid out depth first, the chains it reaches.
#[derive(Clone, Debug)]
enum Insn {
    /// A rule starts: where the next one starts (where a statement that breaks goes on),
    /// and where the rule is in the ruleset (for its counters and `update`s).
    Rule {
        next: u32,
        table: u32,
        chain: u32,
        rule: u32,
    },
    /// A statement.
    Op(COp),
    /// `key vmap { 0 : …, 1 : … }` with small integer keys (`numgen random mod N`): the
    /// verdict of key `i` is the `i`-th of the `len` [`Insn::Arm`]s that follow.
    VmapDirect { key: KeyRef, len: u32 },
    /// A verdict of the [`Insn::VmapDirect`] before it, or none for a key not in the map.
    Arm(Option<CVerdict>),
    /// The chain ends: back to the chain that jumped here, or the base chain's policy.
    End,
}

/// A chain: whether it is a base chain, and its policy if so.
#[derive(Clone, Copy, Debug)]
struct CChain {
    /// A base chain (only those are walked from: `BaseRef`s name them).
    base: bool,
    policy_accept: bool,
    /// A base chain that sees the packet before DNAT rewrites it: a `nat` chain at
    /// prerouting or output, or a `filter` chain there of priority below -100.
    sees_pre_dnat: bool,
    /// When every rule starts with `ct state S` (kube-proxy's filter chains: `ct state new
    /// jump …`), the union of the states: a packet in none of them breaks every rule at its
    /// first statement, before anything has an effect, and gets the policy.
    ct_gate: Option<u32>,
}

/// A lookup the first-packet hint makes early: the key (loaded from the packet alone) and
/// the set (`Program::sets`), and whether it is a verdict map whose target chain's code the
/// hint asks for too.
#[derive(Clone, Copy, Debug)]
struct Hint {
    key: KeyRef,
    set: u32,
    vmap: bool,
}

/// `NF_IP_PRI_NAT_DST`: where DNAT's hook entry is.
const NF_IP_PRI_NAT_DST: i32 = -100;

/// Hash tables with fewer elements than this get no hints: they stay in the caches.
const HINT_MIN_ELEMS: usize = 1024;

/// The most lookups the hint makes (kube-proxy's `service-ips`, `cluster-ips`,
/// `no-endpoint-services`, `firewall-ips`).
const HINTS: usize = 4;

/// How many instructions from a verdict map's target chain on the hint asks for: a
/// Service's chain and, laid out after it, its endpoints' chains.
const HINT_INSNS: usize = 24;

/// What does not change while packets walk the ruleset.
#[derive(Debug)]
struct Program {
    chains: Vec<CChain>,
    /// Per chain, where its code starts.
    chain_pc: Vec<u32>,
    /// Per table, the index of its first chain in `chains`.
    table_chain0: Vec<u32>,
    code: Vec<Insn>,
    fields: Vec<Field>,
    sets: Vec<CSet>,
    /// The sets `update` writes, as compiled: `(table, set index)` and the copy to start from.
    written: Vec<((u32, u32), CSet)>,
    hints: Vec<Hint>,
}

/// A compiled ruleset: the program, shared by copies of the namespace, and the compiled
/// copies of the sets its rules write.
#[derive(Clone, Debug)]
pub struct NftProgram {
    prog: Arc<Program>,
    written: Vec<CSet>,
    draws: Vec<NftDraw>,
}

/// Why a ruleset is walked by the interpreter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotCompiled(pub String);

/// What one statement does to the walk.
enum Step {
    /// The next statement.
    Next,
    /// The rule breaks: the next rule.
    Break,
    Verdict(CVerdict),
    Nat(NatRequest),
    Reject(RejectWith),
}

fn policy(accept_it: bool) -> Verdict {
    if accept_it {
        Verdict::accept()
    } else {
        Verdict::drop()
    }
}

struct Compiler<'a> {
    t: &'a NftTable,
    ti: u32,
    chain0: u32,
    written_idx: &'a HashMap<(u32, u32), u32>,
    fields: &'a mut Vec<Field>,
    sets: &'a mut Vec<CSet>,
    /// Named sets no rule writes, compiled once: set index → `sets` index.
    fixed: &'a mut HashMap<(u32, u32), u32>,
}

fn bits_of(fields: &[Field]) -> Vec<u32> {
    fields
        .iter()
        .map(|f| f.dtype().width() as u32 * 8)
        .collect()
}

/// The `(lo, hi)` of an element key for a key of widths `bits`; `None` when it can hold no
/// loaded key.
fn entry_of(k: &ElemKey, bits: &[u32]) -> Option<(PKey, PKey)> {
    match k {
        ElemKey::Exact(x) => {
            if x.len() != bits.len() {
                return None;
            }
            let p = pack(x, bits)?;
            Some((p, p))
        }
        ElemKey::Range(lo, hi) => {
            if bits.len() != 1 {
                return None;
            }
            Some((PKey::single(*lo), PKey::single(*hi)))
        }
    }
}

/// A verdict of table `t` (whose first chain is the program's `chain0`), its target
/// resolved; a target that is not there drops, as the interpreter's name lookup does.
fn resolve(t: &NftTable, chain0: u32, v: &NftVerdict) -> CVerdict {
    let target = |c: &str| t.chains.get_index_of(c).map(|i| chain0 + i as u32);
    match v {
        NftVerdict::Accept => CVerdict::Accept,
        NftVerdict::Drop => CVerdict::Drop,
        NftVerdict::Continue => CVerdict::Continue,
        NftVerdict::Return => CVerdict::Return,
        NftVerdict::Jump(c) => target(c).map_or(CVerdict::Drop, CVerdict::Jump),
        NftVerdict::Goto(c) => target(c).map_or(CVerdict::Drop, CVerdict::Goto),
    }
}

impl Compiler<'_> {
    fn verdict(&self, v: &NftVerdict) -> CVerdict {
        resolve(self.t, self.chain0, v)
    }

    fn key(&mut self, lhs: &[Field]) -> Result<KeyRef, NotCompiled> {
        let bits: u32 = bits_of(lhs).iter().sum();
        if lhs.is_empty() || lhs.len() > MAX_FIELDS || (lhs.len() > 1 && bits > KEY_BITS) {
            return Err(NotCompiled(format!(
                "a key of {} fields, {bits} bits (at most {MAX_FIELDS} fields, {KEY_BITS} bits)",
                lhs.len()
            )));
        }
        let start = self.fields.len() as u32;
        self.fields.extend_from_slice(lhs);
        Ok(KeyRef {
            first: lhs[0],
            start,
            len: lhs.len() as u32,
        })
    }

    /// A named set or map, as a lookup keyed by `lhs` reads it.
    fn named(&mut self, name: &str, lhs: &[Field]) -> SetRef {
        let Some(si) = self.t.sets.get_index_of(name) else {
            return SetRef::Missing;
        };
        let at = (self.ti, si as u32);
        if let Some(w) = self.written_idx.get(&at) {
            return SetRef::Written(*w);
        }
        if let Some(f) = self.fixed.get(&at) {
            return SetRef::Fixed(*f);
        }
        let s = &self.t.sets[si];
        let c = compile_set(s, &bits_of(lhs), |v| self.verdict(v), false);
        self.sets.push(c);
        let i = self.sets.len() as u32 - 1;
        self.fixed.insert(at, i);
        SetRef::Fixed(i)
    }

    fn anon(&mut self, lhs: &[Field], elems: &[(ElemKey, CVerdict)]) -> SetRef {
        let bits = bits_of(lhs);
        let mut out = Vec::new();
        let mut entries = Vec::new();
        let mut exact_only = true;
        for (k, v) in elems {
            if let Some((lo, hi)) = entry_of(k, &bits) {
                exact_only &= matches!(k, ElemKey::Exact(_));
                entries.push((lo, hi, out.len() as u32));
                out.push(CElem {
                    expires: None,
                    verdict: *v,
                });
            }
        }
        self.sets.push(CSet {
            search: build_search(entries, &out, bits.len() == 1, exact_only),
            timed: false,
            elems: out,
            bits,
        });
        SetRef::Fixed(self.sets.len() as u32 - 1)
    }

    fn stmt(&mut self, si: usize, s: &Stmt, out: &mut Vec<COp>) -> Result<(), NotCompiled> {
        let op = match s {
            Stmt::Match {
                lhs,
                mask,
                negated,
                rhs,
            } => {
                let key = self.key(lhs)?;
                let bits = bits_of(lhs);
                let test = match rhs {
                    Rhs::Value(k) => match (mask, k) {
                        (Some(m), ElemKey::Exact(x)) => match x.first() {
                            Some(x0) => Test::MaskEq(W::of(u128::from(*m)), W::of(*x0)),
                            None => Test::Never,
                        },
                        _ if lhs.len() == 1
                            && matches!(lhs[0], Field::CtState | Field::CtStatus) =>
                        {
                            match k {
                                ElemKey::Exact(x) => match x.first() {
                                    Some(x0) => Test::Flags(W::of(*x0)),
                                    None => Test::Never,
                                },
                                ElemKey::Range(..) => Test::Never,
                            }
                        }
                        _ => match entry_of(k, &bits) {
                            Some((lo, hi)) if lo == hi => Test::Eq(lo),
                            // Ranges are of single fields only (`entry_of`).
                            Some((lo, hi)) => Test::Range(W::of(lo.value()), W::of(hi.value())),
                            None => Test::Never,
                        },
                    },
                    Rhs::Set(elems) => {
                        let e: Vec<_> = elems
                            .iter()
                            .map(|k| (k.clone(), CVerdict::Accept))
                            .collect();
                        Test::In(self.anon(lhs, &e))
                    }
                    Rhs::SetRef(name) => Test::In(self.named(name, lhs)),
                };
                COp::Match {
                    key,
                    test,
                    negated: *negated,
                }
            }
            Stmt::Counter { .. } => COp::Counter(si as u32),
            Stmt::Verdict(v) => COp::Verdict(self.verdict(v)),
            Stmt::Vmap { lhs, map, anon } => {
                let key = self.key(lhs)?;
                let set = match map {
                    Some(name) => self.named(name, lhs),
                    None => {
                        let e: Vec<_> = anon
                            .iter()
                            .map(|(k, v)| (k.clone(), self.verdict(v)))
                            .collect();
                        self.anon(lhs, &e)
                    }
                };
                COp::Vmap { key, set }
            }
            Stmt::MarkSet(op) => COp::Mark(*op),
            Stmt::Update { set, key } => {
                let k = self.key(key)?;
                let si = self.t.sets.get_index_of(set.as_str()).map(|i| i as u32);
                let set = si.and_then(|si| self.written_idx.get(&(self.ti, si)).map(|w| (si, *w)));
                COp::Update { key: k, set }
            }
            Stmt::Nat {
                dnat, addr, port, ..
            } => COp::Nat {
                dnat: *dnat,
                addr: *addr,
                port: *port,
            },
            Stmt::Masquerade { fully_random } => COp::Masquerade {
                fully_random: *fully_random,
            },
            Stmt::Reject(w) => COp::Reject(*w),
            Stmt::Iifname { negated, name } | Stmt::Oifname { negated, name } => {
                let (name, prefix) = match name.strip_suffix('*') {
                    Some(p) => (p, true),
                    None => (name.as_str(), false),
                };
                COp::Ifname {
                    out: matches!(s, Stmt::Oifname { .. }),
                    negated: *negated,
                    name: name.into(),
                    prefix,
                }
            }
        };
        out.push(op);
        Ok(())
    }
}

/// A named set as a lookup with widths `bits` reads it.
fn compile_set(
    s: &NftSet,
    bits: &[u32],
    verdict: impl Fn(&NftVerdict) -> CVerdict,
    written: bool,
) -> CSet {
    let mut elems = Vec::with_capacity(s.elements.len());
    let mut entries = Vec::with_capacity(s.elements.len());
    for (k, e) in &s.elements {
        if let Some((lo, hi)) = entry_of(k, bits) {
            entries.push((lo, hi, elems.len() as u32));
            elems.push(CElem {
                expires: e.expires,
                verdict: e.verdict.as_ref().map_or(CVerdict::Accept, &verdict),
            });
        }
    }
    let search = if written {
        // `update` adds exact keys: a hash, whatever the keys now.
        Search::Hash(table_of(&entries, &elems))
    } else {
        build_search(entries, &elems, bits.len() == 1, !s.is_interval())
    };
    CSet {
        search,
        timed: written || elems.iter().any(|e| e.expires.is_some()),
        elems,
        bits: bits.to_vec(),
    }
}

impl NftProgram {
    /// Compiles `rs`, or says why it walks in the interpreter.
    pub fn compile(rs: &NftRuleset) -> Result<NftProgram, NotCompiled> {
        // The sets `update` statements write, with the key they write.
        let mut writes: Vec<((u32, u32), Vec<Field>)> = Vec::new();
        for (ti, t) in rs.tables.values().enumerate() {
            for c in t.chains.values() {
                for r in &c.rules {
                    for s in &r.stmts {
                        if let Stmt::Update { set, key } = s {
                            if let Some(si) = t.sets.get_index_of(set.as_str()) {
                                let at = (ti as u32, si as u32);
                                let st = &t.sets[si];
                                if st.is_interval() || st.is_map {
                                    return Err(NotCompiled(format!(
                                        "update of the interval set or map {set}"
                                    )));
                                }
                                if !writes.iter().any(|(a, _)| *a == at) {
                                    writes.push((at, key.clone()));
                                }
                            }
                        }
                    }
                }
            }
        }
        let written_idx: HashMap<(u32, u32), u32> = writes
            .iter()
            .enumerate()
            .map(|(i, (at, _))| (*at, i as u32))
            .collect();
        let mut p = Program {
            chains: Vec::new(),
            chain_pc: Vec::new(),
            table_chain0: Vec::new(),
            code: Vec::new(),
            fields: Vec::new(),
            sets: Vec::new(),
            written: Vec::new(),
            hints: Vec::new(),
        };
        // Each chain's rules (its index in the chain, its statements), with chain indices as
        // targets.
        let mut bodies: Vec<Vec<(u32, Vec<COp>)>> = Vec::new();
        let mut origin: Vec<(u32, u32)> = Vec::new();
        let mut fixed = HashMap::new();
        for (ti, t) in rs.tables.values().enumerate() {
            let chain0 = p.chains.len() as u32;
            p.table_chain0.push(chain0);
            let mut cx = Compiler {
                t,
                ti: ti as u32,
                chain0,
                written_idx: &written_idx,
                fields: &mut p.fields,
                sets: &mut p.sets,
                fixed: &mut fixed,
            };
            for (ci, c) in t.chains.values().enumerate() {
                let mut rules = Vec::with_capacity(c.rules.len());
                for (ri, r) in c.rules.iter().enumerate() {
                    let mut ops = Vec::with_capacity(r.stmts.len());
                    for (si, s) in r.stmts.iter().enumerate() {
                        cx.stmt(si, s, &mut ops)?;
                    }
                    rules.push((ri as u32, ops));
                }
                p.chains.push(CChain {
                    base: c.base.is_some(),
                    policy_accept: c.base.is_none_or(|b| b.policy_accept),
                    sees_pre_dnat: c.base.is_some_and(|b| {
                        matches!(b.hook, Hook::PreRouting | Hook::Output)
                            && (b.ty == ChainType::Nat || b.priority < NF_IP_PRI_NAT_DST)
                    }),
                    ct_gate: None,
                });
                bodies.push(rules);
                origin.push((ti as u32, ci as u32));
            }
        }
        for ((ti, si), key) in &writes {
            let (_, t) = rs
                .tables
                .get_index(*ti as usize)
                .expect("table of a written set");
            let s = &t.sets[*si as usize];
            // A set, not a map: its elements' verdicts are never read.
            p.written.push((
                (*ti, *si),
                compile_set(s, &bits_of(key), |_| CVerdict::Accept, true),
            ));
        }
        p.drop_no_ops(&mut bodies);
        for (c, rules) in p.chains.iter_mut().zip(&bodies) {
            c.ct_gate = ct_gate(rules);
        }
        p.lay_out(&bodies, &origin)?;
        let written = p.written.iter().map(|(_, s)| s.clone()).collect();
        Ok(NftProgram {
            prog: Arc::new(p),
            written,
            draws: Vec::new(),
        })
    }

    /// Whether rules write sets (`update`), whose compiled copies a walk of the interpreter
    /// leaves behind.
    pub fn writes_sets(&self) -> bool {
        !self.written.is_empty()
    }

    /// Rebuilds the compiled copies of the written sets from `rs` (after the interpreter
    /// walked it).
    pub fn resync(&mut self, rs: &NftRuleset) {
        for (i, ((ti, si), start)) in self.prog.written.iter().enumerate() {
            let Some((_, t)) = rs.tables.get_index(*ti as usize) else {
                continue;
            };
            let Some((_, s)) = t.sets.get_index(*si as usize) else {
                continue;
            };
            self.written[i] = compile_set(s, &start.bits, |_| CVerdict::Accept, true);
        }
    }

    /// Asks the CPU for what the walk of a new flow's first packet `pkt` is likely to read
    /// (`crate::hint` does the same for iptables): the slots of the big hash tables it will
    /// look the packet up in (kube-proxy's `service-ips`, `cluster-ips`), and the code of
    /// the chain `service-ips` sends it to, with its endpoints' chains laid out after it.
    ///
    /// A hint: it changes no result and nothing in the program. The namespace calls it when
    /// conntrack finds no entry for a packet, so that the lines load while the entry is
    /// made. Its one probe (the verdict map's) is the walk's own next one, which then finds
    /// its line in the cache. Rulesets without big tables get no hints.
    #[inline]
    pub fn prefetch_new_flow(&self, pkt: &Packet) {
        let prog = &*self.prog;
        if prog.hints.is_empty() {
            return;
        }
        let mut target = None;
        for h in &prog.hints {
            let Some(k) = packet_key(prog, h.key, pkt) else {
                continue;
            };
            let set = &prog.sets[h.set as usize];
            set.prefetch(k);
            if h.vmap && target.is_none() && !set.timed {
                target = Some((set, k));
            }
        }
        if let Some((set, k)) = target {
            if let Some(CVerdict::Jump(pc) | CVerdict::Goto(pc)) = set.find(k, SimTime::ZERO) {
                let code = prog.code.get(pc as usize..).unwrap_or(&[]);
                for i in code.iter().take(HINT_INSNS) {
                    sim_core::prefetch::line(i);
                }
            }
        }
    }

    /// Whether the base chain `at` accepts, doing nothing else, every packet whose `ct state`
    /// (`ct_state`: the value `ct state` loads, 1 invalid, 2 established, 4 related, 8 new,
    /// 64 untracked) is `ct_state`: its policy is accept and every rule starts with a
    /// `ct state` match this state fails. The namespace then skips the walk (an established
    /// packet through kube-proxy's filter chains).
    #[inline]
    pub fn accepts_untouched(&self, at: BaseRef, ct_state: u32) -> bool {
        let prog = &*self.prog;
        let Some(&chain0) = prog.table_chain0.get(at.table) else {
            return false;
        };
        prog.chains
            .get(chain0 as usize + at.chain)
            .is_some_and(|c| {
                c.base && c.policy_accept && c.ct_gate.is_some_and(|m| m & ct_state == 0)
            })
    }

    /// Walks the base chain `at` of `rs` for the packet in `ctx`, as
    /// [`NftRuleset::run_base_chain`] does without a trace: the same verdict, counters, set
    /// contents and mark.
    pub fn run_base_chain(
        &mut self,
        rs: &mut NftRuleset,
        at: BaseRef,
        ctx: &mut EvalCtx<'_>,
    ) -> Verdict {
        let prog: &Program = &self.prog;
        let Some(&chain0) = prog.table_chain0.get(at.table) else {
            return Verdict::accept();
        };
        let ci = chain0 as usize + at.chain;
        let Some(bc) = prog.chains.get(ci) else {
            return Verdict::accept();
        };
        if !bc.base {
            return Verdict::accept();
        }
        let base_policy = bc.policy_accept;
        let mut w = Walk {
            prog,
            written: &mut self.written,
            draws: &mut self.draws,
        };
        let mut stack = [0u32; MAX_DEPTH];
        let mut depth = 0usize;
        let mut pc = prog.chain_pc[ci] as usize;
        // The current rule: where it is, and where the next one starts.
        let (mut next, mut here) = (pc, (0u32, 0u32, 0u32));
        loop {
            let v = match &prog.code[pc] {
                Insn::Rule {
                    next: n,
                    table,
                    chain,
                    rule,
                } => {
                    next = *n as usize;
                    here = (*table, *chain, *rule);
                    pc += 1;
                    continue;
                }
                Insn::Op(op) => match w.op(op, here, rs, ctx) {
                    Step::Next => {
                        pc += 1;
                        continue;
                    }
                    Step::Break => {
                        pc = next;
                        continue;
                    }
                    Step::Verdict(v) => v,
                    Step::Nat(req) => return Verdict::nat(req),
                    Step::Reject(with) => return Verdict::reject(with),
                },
                Insn::VmapDirect { key, len } => {
                    let mut vals: [Datum; MAX_FIELDS] = Default::default();
                    let arm = w
                        .load_key(*key, ctx, &mut vals)
                        .filter(|k| k.0[0] == 0 && k.0[1] == 0 && k.0[2] < u64::from(*len))
                        .and_then(|k| match prog.code.get(pc + 1 + k.0[2] as usize) {
                            Some(Insn::Arm(v)) => *v,
                            _ => None,
                        });
                    match arm {
                        Some(v) => v,
                        None => {
                            pc = next;
                            continue;
                        }
                    }
                }
                // Only reached through their VmapDirect; never fallen into.
                Insn::Arm(_) => {
                    pc = next;
                    continue;
                }
                Insn::End => {
                    if depth == 0 {
                        return policy(base_policy);
                    }
                    depth -= 1;
                    pc = stack[depth] as usize;
                    continue;
                }
            };
            match v {
                CVerdict::Accept => return Verdict::accept(),
                CVerdict::Drop => return Verdict::drop(),
                CVerdict::Continue => pc = next,
                CVerdict::Return => {
                    if depth == 0 {
                        return policy(base_policy);
                    }
                    depth -= 1;
                    pc = stack[depth] as usize;
                }
                CVerdict::Jump(to) => {
                    if depth >= MAX_DEPTH {
                        return Verdict::drop();
                    }
                    stack[depth] = next as u32;
                    depth += 1;
                    pc = to as usize;
                }
                CVerdict::Goto(to) => pc = to as usize,
            }
        }
    }
}

impl Program {
    /// The chains reached from each base chain, depth first (a chain, then the chains its
    /// rules and maps send packets to, in order), then the rest: a Service's chain is
    /// followed by its endpoints' chains.
    /// The chains a chain of rules `body` sends packets to (`jump`, `goto`, verdict-map
    /// verdicts), in order.
    fn targets(&self, body: &[(u32, Vec<COp>)]) -> Vec<usize> {
        let mut targets = Vec::new();
        let mut note = |v: CVerdict| {
            if let CVerdict::Jump(t) | CVerdict::Goto(t) = v {
                targets.push(t as usize);
            }
        };
        for op in body.iter().flat_map(|(_, ops)| ops) {
            match op {
                COp::Verdict(v) => note(*v),
                COp::Vmap {
                    set: SetRef::Fixed(i),
                    ..
                } => self.sets[*i as usize]
                    .elems
                    .iter()
                    .for_each(|e| note(e.verdict)),
                _ => {}
            }
        }
        targets
    }

    /// The chains a packet can reach before DNAT has rewritten it: from the `nat` base
    /// chains at prerouting and output (where the DNAT lookup is) and the `filter` ones
    /// that run before them (priority below `NF_IP_PRI_NAT_DST`, -100).
    fn before_dnat(&self, bodies: &[Vec<(u32, Vec<COp>)>]) -> Vec<bool> {
        let mut seen = vec![false; bodies.len()];
        let mut stack: Vec<usize> = (0..bodies.len())
            .filter(|&c| self.chains[c].sees_pre_dnat)
            .collect();
        while let Some(c) = stack.pop() {
            if std::mem::replace(&mut seen[c], true) {
                continue;
            }
            stack.extend(
                self.targets(&bodies[c])
                    .into_iter()
                    .filter(|&t| t < seen.len()),
            );
        }
        seen
    }

    fn layout_order(&self, bodies: &[Vec<(u32, Vec<COp>)>]) -> Vec<usize> {
        let mut seen = vec![false; bodies.len()];
        let mut order = Vec::with_capacity(bodies.len());
        let mut stack = Vec::new();
        let roots = (0..bodies.len())
            .filter(|&c| self.chains[c].base)
            .chain(0..bodies.len());
        for root in roots {
            stack.push(root);
            while let Some(c) = stack.pop() {
                if std::mem::replace(&mut seen[c], true) {
                    continue;
                }
                order.push(c);
                let targets = self.targets(&bodies[c]);
                stack.extend(targets.into_iter().rev().filter(|&t| t < seen.len()));
            }
        }
        order
    }

    /// Takes out of `bodies` the rules that provably do nothing, for any packet, at any
    /// time: the walk gives the same verdict, counts, marks, sets and draws without them,
    /// and reads less. A rule does nothing when every statement it may run before it ends is
    /// free of effects (a match or an interface test whose key draws no `numgen` number) and
    /// it ends in one of these:
    ///
    /// - a match that never holds (`ip daddr @s` of a set `s` with no elements that no rule
    ///   writes, a missing set, a value no key can equal) or a verdict-map lookup in such a
    ///   map: the rule breaks;
    /// - `continue`;
    /// - in a base chain, `jump` to a chain left with no rules: the walk comes back at once
    ///   and goes on with the next rule (a base chain's jump is at depth 0, so nf_tables'
    ///   jump stack cannot overflow there; elsewhere the jump stays, for its drop at depth
    ///   16).
    ///
    /// Repeated until nothing changes, so a jump to a chain that only looked up an empty map
    /// goes too: kube-proxy's `ct state new jump firewall-check` with no
    /// loadBalancerSourceRanges anywhere (`firewall-ips` empty), and `ct state new jump
    /// service-endpoints-check` while every Service has endpoints. A base chain left with
    /// no rules and policy accept is then skipped by the namespace ([`ct_gate`] of no rules
    /// is the empty state set). Sets change only by `nft -f`, which compiles anew, or by
    /// `update`, whose sets are never taken for empty.
    fn drop_no_ops(&self, bodies: &mut [Vec<(u32, Vec<COp>)>]) {
        let pure = |k: &KeyRef| {
            self.fields[k.start as usize..(k.start + k.len) as usize]
                .iter()
                .all(|f| !matches!(f, Field::Numgen { .. }))
        };
        let empty = |r: SetRef| match r {
            SetRef::Missing => true,
            SetRef::Fixed(i) => self.sets.get(i as usize).is_none_or(|s| s.elems.is_empty()),
            SetRef::Written(_) => false,
        };
        let mut emptied = vec![false; bodies.len()];
        loop {
            let mut changed = false;
            for c in 0..bodies.len() {
                let base = self.chains[c].base;
                let no_op = |ops: &[COp]| {
                    for op in ops {
                        match op {
                            COp::Match { key, test, negated } => {
                                if !pure(key) {
                                    return false;
                                }
                                let never = match *test {
                                    Test::Never => true,
                                    Test::In(r) => empty(r),
                                    _ => false,
                                };
                                if never && !negated {
                                    return true;
                                }
                            }
                            COp::Ifname { .. } => {}
                            COp::Vmap { key, set } => return pure(key) && empty(*set),
                            COp::Verdict(CVerdict::Continue) => return true,
                            COp::Verdict(CVerdict::Jump(t)) => {
                                return base && emptied.get(*t as usize) == Some(&true)
                            }
                            _ => return false,
                        }
                    }
                    // A rule of matches only: it does nothing whether they hold or not.
                    true
                };
                let before = bodies[c].len();
                bodies[c].retain(|(_, ops)| !no_op(ops));
                changed |= bodies[c].len() != before;
                if bodies[c].is_empty() && !emptied[c] {
                    emptied[c] = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
    }

    /// Lays the chains' `bodies` out as code (`origin`: each chain's table and index in
    /// it), resolves jump targets to code positions and picks the hint's lookups.
    fn lay_out(
        &mut self,
        bodies: &[Vec<(u32, Vec<COp>)>],
        origin: &[(u32, u32)],
    ) -> Result<(), NotCompiled> {
        self.chain_pc = vec![0; bodies.len()];
        let mut code = Vec::new();
        for c in self.layout_order(bodies) {
            self.chain_pc[c] = code.len() as u32;
            let (table, chain) = origin[c];
            for (ri, ops) in &bodies[c] {
                let header = code.len();
                code.push(Insn::End);
                for op in ops {
                    match self.direct_arms(op) {
                        Some((key, arms)) => {
                            code.push(Insn::VmapDirect {
                                key,
                                len: arms.len() as u32,
                            });
                            code.extend(arms.into_iter().map(Insn::Arm));
                        }
                        None => code.push(Insn::Op(op.clone())),
                    }
                }
                code[header] = Insn::Rule {
                    next: code.len() as u32,
                    table,
                    chain,
                    rule: *ri,
                };
            }
            code.push(Insn::End);
        }
        if code.len() > PVerdict::TARGET as usize {
            return Err(NotCompiled(format!("{} instructions", code.len())));
        }
        let pcs = &self.chain_pc;
        for i in &mut code {
            match i {
                Insn::Op(COp::Verdict(v)) | Insn::Arm(Some(v)) => *v = v.relocated(pcs),
                _ => {}
            }
        }
        for s in &mut self.sets {
            s.relocate(pcs);
        }
        self.code = code;
        self.pick_hints(&self.before_dnat(bodies));
        Ok(())
    }

    /// A verdict map with small integer keys and no timeouts, as the arms to lay out after
    /// its lookup (`Insn::VmapDirect`).
    fn direct_arms(&self, op: &COp) -> Option<(KeyRef, Vec<Option<CVerdict>>)> {
        let COp::Vmap {
            key,
            set: SetRef::Fixed(i),
        } = op
        else {
            return None;
        };
        let s = &self.sets[*i as usize];
        let Search::Direct(d) = &s.search else {
            return None;
        };
        if d.len() > 16 || s.timed || key.len != 1 {
            return None;
        }
        let arms = d
            .iter()
            .map(|&e| s.elems.get(e as usize).map(|e| e.verdict))
            .collect();
        Some((*key, arms))
    }

    /// The lookups the first-packet hint makes: big hash tables looked up by keys of the
    /// packet's own fields, in the order the code meets them, in the chains (`reached`) the
    /// packet walks before DNAT changes those fields. (`cluster-ips-check` looks the packet
    /// up in `cluster-ips` after DNAT: by then its destination is the endpoint's, so a hint
    /// keyed by the ClusterIP would only take a line fill buffer and a line of cache.)
    fn pick_hints(&mut self, reached: &[bool]) {
        let mut hints: Vec<Hint> = Vec::new();
        let mut chains: Vec<usize> = (0..self.chains.len()).filter(|&c| reached[c]).collect();
        chains.sort_by_key(|&c| self.chain_pc[c]);
        let code = chains.into_iter().flat_map(|c| {
            self.code[self.chain_pc[c] as usize..]
                .iter()
                .take_while(|i| !matches!(i, Insn::End))
        });
        for i in code {
            let (key, set, vmap) = match i {
                Insn::Op(COp::Vmap {
                    key,
                    set: SetRef::Fixed(s),
                }) => (*key, *s, true),
                Insn::Op(COp::Match {
                    key,
                    test: Test::In(SetRef::Fixed(s)),
                    ..
                }) => (*key, *s, false),
                _ => continue,
            };
            let fields = &self.fields[key.start as usize..(key.start + key.len) as usize];
            let big = match &self.sets[set as usize].search {
                Search::Hash(m) => m.len >= HINT_MIN_ELEMS,
                _ => false,
            };
            if big
                && fields.iter().all(|f| is_packet_field(*f))
                && !hints.iter().any(|h| h.set == set)
            {
                hints.push(Hint { key, set, vmap });
                if hints.len() == HINTS {
                    break;
                }
            }
        }
        self.hints = hints;
    }
}

/// The union of the `ct state` values that every rule of a chain (`rules`) starts by
/// matching, when every rule starts so.
fn ct_gate(rules: &[(u32, Vec<COp>)]) -> Option<u32> {
    let mut mask = 0u32;
    for (_, ops) in rules {
        match ops.first()? {
            COp::Match {
                key,
                test: Test::Flags(x),
                negated: false,
            } if key.len == 1 && key.first == Field::CtState => {
                mask |= u32::try_from(x.get()).ok()?;
            }
            _ => return None,
        }
    }
    Some(mask)
}

/// Whether the value of `f` comes from the packet's headers alone ([`packet_field`]).
fn is_packet_field(f: Field) -> bool {
    matches!(
        f,
        Field::IpSaddr
            | Field::IpDaddr
            | Field::IpProtocol
            | Field::Ip6Saddr
            | Field::Ip6Daddr
            | Field::Ip6Nexthdr
            | Field::MetaNfproto
            | Field::MetaL4proto
            | Field::ThSport
            | Field::ThDport
            | Field::Sport(_)
            | Field::Dport(_)
    )
}

/// The value `load` gives field `f` of `pkt`, for the fields [`is_packet_field`] names.
fn packet_field(f: Field, pkt: &Packet) -> Option<Datum> {
    let v4 = |a: IpAddr| match a {
        IpAddr::V4(v) => Some(Datum::from(u32::from(v))),
        IpAddr::V6(_) => None,
    };
    let v6 = |a: IpAddr| match a {
        IpAddr::V4(_) => None,
        IpAddr::V6(v) => Some(u128::from(v)),
    };
    Some(match f {
        Field::Ip6Saddr => v6(pkt.src)?,
        Field::Ip6Daddr => v6(pkt.dst)?,
        Field::Ip6Nexthdr => {
            v6(pkt.src)?;
            Datum::from(pkt.protocol())
        }
        Field::MetaNfproto => {
            if pkt.is_ipv4() {
                2
            } else {
                10
            }
        }
        Field::IpSaddr => v4(pkt.src)?,
        Field::IpDaddr => v4(pkt.dst)?,
        Field::IpProtocol => {
            v4(pkt.src)?;
            Datum::from(pkt.protocol())
        }
        Field::MetaL4proto => Datum::from(pkt.protocol()),
        Field::ThSport => Datum::from(pkt.sport()?),
        Field::ThDport => Datum::from(pkt.dport()?),
        Field::Sport(q) if pkt.protocol() == q => Datum::from(pkt.sport()?),
        Field::Dport(q) if pkt.protocol() == q => Datum::from(pkt.dport()?),
        _ => return None,
    })
}

/// Key `k` of the packet's own fields, packed.
fn packet_key(prog: &Program, k: KeyRef, pkt: &Packet) -> Option<PKey> {
    let fields = &prog.fields[k.start as usize..(k.start + k.len) as usize];
    let mut vals = [0 as Datum; MAX_FIELDS];
    let mut bits = [0u32; MAX_FIELDS];
    for (i, f) in fields.iter().enumerate() {
        vals[i] = packet_field(*f, pkt)?;
        bits[i] = f.dtype().width() as u32 * 8;
    }
    pack(&vals[..fields.len()], &bits[..fields.len()])
}

/// One walk: the program, and what a walk changes besides the ruleset.
struct Walk<'a> {
    prog: &'a Program,
    written: &'a mut [CSet],
    draws: &'a mut Vec<NftDraw>,
}

impl Walk<'_> {
    /// Loads key `k` into `vals` (the interpreter's `load`, field by field) and packs it;
    /// `None` when a load fails.
    #[inline]
    fn load_key(
        &mut self,
        k: KeyRef,
        ctx: &mut EvalCtx<'_>,
        vals: &mut [Datum; MAX_FIELDS],
    ) -> Option<PKey> {
        if k.len == 1 {
            let v = load(k.first, ctx, self.draws);
            self.draws.clear();
            vals[0] = v?;
            return Some(PKey::single(vals[0]));
        }
        let fields = &self.prog.fields[k.start as usize..(k.start + k.len) as usize];
        let mut ok = true;
        for (i, f) in fields.iter().enumerate() {
            match load(*f, ctx, self.draws) {
                Some(v) => vals[i] = v,
                None => {
                    ok = false;
                    break;
                }
            }
        }
        self.draws.clear();
        if !ok {
            return None;
        }
        let n = fields.len();
        if n == 1 {
            return Some(PKey::single(vals[0]));
        }
        let mut bits = [0u32; MAX_FIELDS];
        for i in 0..n {
            bits[i] = fields[i].dtype().width() as u32 * 8;
        }
        // Loaded values always fit their type's width.
        pack(&vals[..n], &bits[..n])
    }

    fn set(&self, r: SetRef) -> Option<&CSet> {
        match r {
            SetRef::Missing => None,
            SetRef::Fixed(i) => self.prog.sets.get(i as usize),
            SetRef::Written(i) => self.written.get(i as usize),
        }
    }

    /// Runs one statement of the rule at `here` (table, chain, rule).
    #[inline]
    fn op(
        &mut self,
        op: &COp,
        here: (u32, u32, u32),
        rs: &mut NftRuleset,
        ctx: &mut EvalCtx<'_>,
    ) -> Step {
        let mut vals: [Datum; MAX_FIELDS] = Default::default();
        match op {
            COp::Match { key, test, negated } => {
                let Some(k) = self.load_key(*key, ctx, &mut vals) else {
                    return Step::Break;
                };
                let hit = match *test {
                    Test::Never => false,
                    Test::MaskEq(m, x) => vals[0] & m.get() == x.get(),
                    Test::Flags(x) => vals[0] & x.get() != 0,
                    Test::Eq(x) => k == x,
                    Test::Range(lo, hi) => (lo.get()..=hi.get()).contains(&k.value()),
                    Test::In(s) => self.set(s).is_some_and(|s| s.find(k, ctx.now).is_some()),
                };
                if hit == *negated {
                    return Step::Break;
                }
                Step::Next
            }
            COp::Counter(si) => {
                count(rs, here, *si, ctx.packet.len);
                Step::Next
            }
            COp::Verdict(v) => Step::Verdict(*v),
            COp::Vmap { key, set } => {
                let Some(k) = self.load_key(*key, ctx, &mut vals) else {
                    return Step::Break;
                };
                match self.set(*set).and_then(|s| s.find(k, ctx.now)) {
                    Some(v) => Step::Verdict(v),
                    None => Step::Break,
                }
            }
            COp::Mark(op) => {
                let m = &mut ctx.packet.mark;
                *m = match *op {
                    MarkOp::Set(v) => v,
                    MarkOp::Or(v) => *m | v,
                    MarkOp::Xor(v) => *m ^ v,
                    MarkOp::And(v) => *m & v,
                };
                Step::Next
            }
            COp::Update { key, set } => {
                let Some(k) = self.load_key(*key, ctx, &mut vals) else {
                    return Step::Break;
                };
                if let Some((si, w)) = *set {
                    let n = key.len as usize;
                    self.update(rs, (here.0, si, w), k, &vals[..n], ctx.now);
                }
                Step::Next
            }
            COp::Nat { dnat, addr, port } => {
                // nft_nat_inet_eval: an address of the other family does nothing (`inet`
                // tables), and the rule goes on.
                if addr.is_ipv4() != ctx.packet.is_ipv4() {
                    return Step::Next;
                }
                let range = NatRange {
                    addrs: Some((*addr, *addr)),
                    ports: port.map(|p| (p, p)),
                    base_port: None,
                    random: false,
                    random_fully: false,
                    persistent: false,
                };
                Step::Nat(if *dnat {
                    NatRequest::Dnat(range)
                } else {
                    NatRequest::Snat(range)
                })
            }
            COp::Masquerade { fully_random } => Step::Nat(NatRequest::Masquerade(PortNat {
                ports: None,
                random: false,
                random_fully: *fully_random,
            })),
            COp::Reject(w) => Step::Reject(match *w {
                // nft_reject_inet: an IPv6 packet gets ICMPv6 port-unreachable.
                RejectWith::IcmpPortUnreachable if !ctx.packet.is_ipv4() => {
                    RejectWith::Icmp6PortUnreachable
                }
                w => w,
            }),
            COp::Ifname {
                out,
                negated,
                name,
                prefix,
            } => {
                let dev = if *out {
                    ctx.packet.oif.as_ref()
                } else {
                    ctx.packet.iif.as_ref()
                };
                let dev = dev.map(|i| i.as_str()).unwrap_or("");
                let hit = if *prefix {
                    dev.starts_with(&**name)
                } else {
                    dev == &**name
                };
                if hit == *negated {
                    Step::Break
                } else {
                    Step::Next
                }
            }
        }
    }

    /// `update @set { key }` (`at`: the table, the set's index in it, its compiled copy):
    /// in the ruleset as the interpreter does it, and in the compiled copy.
    fn update(
        &mut self,
        rs: &mut NftRuleset,
        (table, si, w): (u32, u32, u32),
        k: PKey,
        vals: &[Datum],
        now: SimTime,
    ) {
        let Some((_, t)) = rs.tables.get_index_mut(table as usize) else {
            return;
        };
        let Some((_, st)) = t.sets.get_index_mut(si as usize) else {
            return;
        };
        let expires = st.timeout_ms.map(|ms| now + SimDuration::from_millis(ms));
        let key: Vec<Datum> = vals.to_vec();
        let e = st.elements.entry(ElemKey::Exact(key)).or_insert(Element {
            verdict: None,
            comment: None,
            timeout_ms: None,
            expires,
        });
        e.expires = expires;
        let Some(c) = self.written.get_mut(w as usize) else {
            return;
        };
        let Search::Hash(m) = &mut c.search else {
            return;
        };
        match m.get(k).map(|s| s.elem) {
            Some(i) => c.elems[i as usize].expires = expires,
            None => {
                m.insert(k, c.elems.len() as u32, CVerdict::Accept);
                c.elems.push(CElem {
                    expires,
                    verdict: CVerdict::Accept,
                });
            }
        }
    }
}

/// `counter`: the count kept in the rule's statement `si` (the rule at `here`), as the
/// interpreter keeps it.
#[inline]
fn count(rs: &mut NftRuleset, (table, chain, rule): (u32, u32, u32), si: u32, len: u16) {
    let stmt = rs
        .tables
        .get_index_mut(table as usize)
        .and_then(|(_, t)| t.chains.get_index_mut(chain as usize))
        .and_then(|(_, c)| c.rules.get_mut(rule as usize))
        .and_then(|r| r.stmts.get_mut(si as usize));
    if let Some(Stmt::Counter { packets, bytes }) = stmt {
        *packets += 1;
        *bytes += u64::from(len);
    }
}

#[cfg(test)]
#[path = "compiled_tests.rs"]
mod tests;
