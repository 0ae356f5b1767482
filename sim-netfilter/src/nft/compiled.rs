//! The compiled form of an nftables ruleset: the same walk as `eval.rs` (`nft_do_chain`),
//! with every name resolved and every lookup a table, for packets that are not traced.
//!
//! What compiling does, and why each result is the interpreter's:
//!
//! - Chains become spans of a flat rule array, rules spans of a flat statement array;
//!   `jump`/`goto` targets and verdict-map verdicts are chain indices (a target that does
//!   not exist drops, as the interpreter's name lookup does).
//! - A key (`ip daddr . meta l4proto . th dport`) is loaded field by field with the
//!   interpreter's own `load` (so `numgen` draws, `ct state` values and failed loads are
//!   its) and packed into one [`PKey`]: the fields' values side by side, each in its type's
//!   width (`ipv4_addr` 32 bits, `inet_proto` 8, `inet_service` 16, …), as the kernel lays
//!   a concatenation out in registers (`nft_concat`), without allocating.
//! - Named sets and verdict maps become hash tables of packed keys; interval sets a sorted
//!   array searched by halves when no two intervals overlap, else the elements in the
//!   interpreter's order; anonymous sets and maps the same, or a direct index for small
//!   integers (`numgen random mod N vmap { 0 : …, 1 : … }`). An element's expiry is kept and
//!   checked at lookup as the interpreter checks it.
//! - What a walk changes stays where the interpreter keeps it: counters are the rules'
//!   `counter` statements in the [`NftRuleset`], `update @set` writes the ruleset's set (and
//!   the compiled copy of it), `meta mark set` the packet.
//!
//! A ruleset that does not compile (a key wider than [`KEY_BITS`], an interval set written
//! by `update`) is walked by the interpreter. The netns compiles a ruleset the first time a
//! packet meets it after `nft -f`; a traced walk, or one that follows every `numgen` branch,
//! runs the interpreter, and after one the compiled copies of written sets are rebuilt.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::net::IpAddr;
use std::sync::Arc;

use sim_core::{SimDuration, SimTime};

use super::eval::{load, BaseRef, NftDraw, MAX_DEPTH};
use super::*;
use crate::eval::{EvalCtx, NatRequest, Verdict};
use crate::rule::{NatRange, PortNat, RejectWith};
use crate::Action;

/// The widest concatenation compiled: 192 bits (`ipv6_addr . inet_proto . inet_service`
/// is 152).
pub const KEY_BITS: u32 = 192;

/// The most fields of one concatenation compiled.
const MAX_FIELDS: usize = 6;

/// A key, packed: the fields' values side by side in 192 bits, the last field lowest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct PKey([u64; 3]);

impl Hash for PKey {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.0[0]);
        state.write_u64(self.0[1]);
        state.write_u64(self.0[2]);
    }
}

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

/// A multiply-and-fold hash for packed keys (deterministic: no per-process seed).
#[derive(Clone, Copy, Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(26) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 31)
    }
}

type KeyMap = HashMap<PKey, u32, BuildHasherDefault<KeyHasher>>;

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
    Hash(KeyMap),
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
    elems: Vec<CElem>,
    /// Field widths in bits.
    bits: Vec<u32>,
}

impl CSet {
    /// The first live element that holds `k`.
    #[inline]
    fn find(&self, k: PKey, now: SimTime) -> Option<&CElem> {
        let live = |e: &&CElem| e.expires.is_none_or(|x| x > now);
        let at = match &self.search {
            Search::Hash(m) => *m.get(&k)?,
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
                    .find(live)
            }
        };
        self.elems.get(at as usize).filter(live)
    }
}

/// Builds a search over `(key, element)` in the interpreter's order (the first holding a
/// key wins); `interval` keeps ranges. Range keys only ever hold single-field keys.
fn build_search(entries: Vec<(PKey, PKey, u32)>, single: bool, exact_only: bool) -> Search {
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
        let mut m = KeyMap::with_capacity_and_hasher(entries.len(), Default::default());
        for (lo, _, e) in entries {
            m.entry(lo).or_insert(e);
        }
        return Search::Hash(m);
    }
    let mut sorted = entries.clone();
    sorted.sort();
    if sorted.windows(2).all(|w| w[0].1 < w[1].0) {
        Search::Sorted(sorted)
    } else {
        Search::InOrder(entries)
    }
}

/// A key to load: fields `fields[start..start + len]` of the program.
#[derive(Clone, Copy, Debug)]
struct KeyRef {
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

/// How a match compares its loaded key.
#[derive(Clone, Copy, Debug)]
enum Test {
    /// Never holds.
    Never,
    /// `meta mark & M == V`: the first field.
    MaskEq(u128, u128),
    /// A flag field (`ct state`, `ct status`): any bit in common.
    Flags(u128),
    /// One key.
    Eq(PKey),
    /// An inclusive range of a single field.
    Range(PKey, PKey),
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
    /// `update @set { key }`: the set's index in its table, and its compiled copy.
    Update {
        key: KeyRef,
        set: Option<(u32, u32)>,
    },
    Nat(Box<NatRequest>),
    Reject(RejectWith),
    Iifname {
        negated: bool,
        name: Box<str>,
        prefix: bool,
    },
}

/// A rule: its statements, and where it is in the ruleset (for its counters).
#[derive(Clone, Copy, Debug)]
struct CRule {
    ops: (u32, u32),
    table: u32,
    chain: u32,
    rule: u32,
}

/// A chain: its rules, and its policy if it is a base chain.
#[derive(Clone, Copy, Debug)]
struct CChain {
    rules: (u32, u32),
    /// A base chain (only those are walked from: `BaseRef`s name them).
    base: bool,
    policy_accept: bool,
}

/// What does not change while packets walk the ruleset.
#[derive(Debug)]
struct Program {
    chains: Vec<CChain>,
    /// Per table, the index of its first chain in `chains`.
    table_chain0: Vec<u32>,
    rules: Vec<CRule>,
    ops: Vec<COp>,
    fields: Vec<Field>,
    sets: Vec<CSet>,
    /// The sets `update` writes, as compiled: `(table, set index)` and the copy to start from.
    written: Vec<((u32, u32), CSet)>,
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

enum Outcome {
    NoMatch,
    Next,
    Verdict(CVerdict),
    Nat(NatRequest),
    Reject(RejectWith),
}

fn accept() -> Verdict {
    Verdict {
        action: Action::Accept,
        nat: None,
        notrack: false,
        ct_mark: None,
    }
}

fn drop_verdict() -> Verdict {
    Verdict {
        action: Action::Drop,
        ..accept()
    }
}

fn policy(accept_it: bool) -> Verdict {
    if accept_it {
        accept()
    } else {
        drop_verdict()
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
            search: build_search(entries, bits.len() == 1, exact_only),
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
                            Some(x0) => Test::MaskEq(u128::from(*m), *x0),
                            None => Test::Never,
                        },
                        _ if lhs.len() == 1
                            && matches!(lhs[0], Field::CtState | Field::CtStatus) =>
                        {
                            match k {
                                ElemKey::Exact(x) => match x.first() {
                                    Some(x0) => Test::Flags(*x0),
                                    None => Test::Never,
                                },
                                ElemKey::Range(..) => Test::Never,
                            }
                        }
                        _ => match entry_of(k, &bits) {
                            Some((lo, hi)) if lo == hi => Test::Eq(lo),
                            Some((lo, hi)) => Test::Range(lo, hi),
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
            Stmt::Nat { dnat, addr, port } => {
                let a = IpAddr::from(*addr);
                let range = NatRange {
                    addrs: Some((a, a)),
                    ports: port.map(|p| (p, p)),
                    base_port: None,
                    random: false,
                    random_fully: false,
                    persistent: false,
                };
                COp::Nat(Box::new(if *dnat {
                    NatRequest::Dnat(range)
                } else {
                    NatRequest::Snat(range)
                }))
            }
            Stmt::Masquerade { fully_random } => {
                COp::Nat(Box::new(NatRequest::Masquerade(PortNat {
                    ports: None,
                    random: false,
                    random_fully: *fully_random,
                })))
            }
            Stmt::Reject(w) => COp::Reject(*w),
            Stmt::Iifname { negated, name } => match name.strip_suffix('*') {
                Some(p) => COp::Iifname {
                    negated: *negated,
                    name: p.into(),
                    prefix: true,
                },
                None => COp::Iifname {
                    negated: *negated,
                    name: name.as_str().into(),
                    prefix: false,
                },
            },
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
        let mut m = KeyMap::with_capacity_and_hasher(entries.len(), Default::default());
        for (lo, _, e) in entries {
            m.entry(lo).or_insert(e);
        }
        Search::Hash(m)
    } else {
        build_search(entries, bits.len() == 1, !s.is_interval())
    };
    CSet {
        search,
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
                                if t.sets[si].is_interval() {
                                    return Err(NotCompiled(format!(
                                        "update of the interval set {set}"
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
            table_chain0: Vec::new(),
            rules: Vec::new(),
            ops: Vec::new(),
            fields: Vec::new(),
            sets: Vec::new(),
            written: Vec::new(),
        };
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
                let r0 = p.rules.len() as u32;
                for (ri, r) in c.rules.iter().enumerate() {
                    let o0 = p.ops.len() as u32;
                    for (si, s) in r.stmts.iter().enumerate() {
                        cx.stmt(si, s, &mut p.ops)?;
                    }
                    p.rules.push(CRule {
                        ops: (o0, p.ops.len() as u32),
                        table: ti as u32,
                        chain: ci as u32,
                        rule: ri as u32,
                    });
                }
                p.chains.push(CChain {
                    rules: (r0, p.rules.len() as u32),
                    base: c.base.is_some(),
                    policy_accept: c.base.is_none_or(|b| b.policy_accept),
                });
            }
        }
        for ((ti, si), key) in &writes {
            let (_, t) = rs
                .tables
                .get_index(*ti as usize)
                .expect("table of a written set");
            let chain0 = p.table_chain0[*ti as usize];
            let verdict = |v: &NftVerdict| resolve(t, chain0, v);
            let s = &t.sets[*si as usize];
            p.written
                .push(((*ti, *si), compile_set(s, &bits_of(key), verdict, true)));
        }
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
            // Element verdicts do not matter in a written set (a set, not a map).
            self.written[i] = compile_set(s, &start.bits, |_| CVerdict::Accept, true);
        }
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
            return accept();
        };
        let base = chain0 as usize + at.chain;
        let Some(bc) = prog.chains.get(base) else {
            return accept();
        };
        if !bc.base {
            return accept();
        }
        let mut w = Walk {
            prog,
            written: &mut self.written,
            draws: &mut self.draws,
        };
        let base_policy = bc.policy_accept;
        let mut stack = [(0u32, 0u32); MAX_DEPTH];
        let mut depth = 0usize;
        let (mut ci, mut ri) = (base as u32, prog.chains[base].rules.0);
        loop {
            let chain = prog.chains[ci as usize];
            if ri >= chain.rules.1 {
                if depth == 0 {
                    return policy(base_policy);
                }
                depth -= 1;
                (ci, ri) = stack[depth];
                continue;
            }
            let rule = prog.rules[ri as usize];
            let out = w.eval_rule(rs, rule, ctx);
            let v = match out {
                Outcome::NoMatch | Outcome::Next => {
                    ri += 1;
                    continue;
                }
                Outcome::Nat(req) => {
                    return Verdict {
                        action: Action::Accept,
                        nat: Some(req),
                        notrack: false,
                        ct_mark: None,
                    }
                }
                Outcome::Reject(w) => {
                    return Verdict {
                        action: Action::Reject(w),
                        nat: None,
                        notrack: false,
                        ct_mark: None,
                    }
                }
                Outcome::Verdict(v) => v,
            };
            match v {
                CVerdict::Accept => return accept(),
                CVerdict::Drop => return drop_verdict(),
                CVerdict::Continue => ri += 1,
                CVerdict::Return => {
                    if depth == 0 {
                        return policy(base_policy);
                    }
                    depth -= 1;
                    (ci, ri) = stack[depth];
                }
                CVerdict::Jump(to) => {
                    if depth >= MAX_DEPTH {
                        return drop_verdict();
                    }
                    stack[depth] = (ci, ri + 1);
                    depth += 1;
                    ci = to;
                    ri = prog.chains[to as usize].rules.0;
                }
                CVerdict::Goto(to) => {
                    ci = to;
                    ri = prog.chains[to as usize].rules.0;
                }
            }
        }
    }
}

/// One walk: the program, and what a walk changes besides the ruleset.
struct Walk<'a> {
    prog: &'a Program,
    written: &'a mut [CSet],
    draws: &'a mut Vec<NftDraw>,
}

impl Walk<'_> {
    /// Loads key `k` into `vals` (the interpreter's `load`, field by field); `None` when a
    /// load fails.
    #[inline]
    fn load_key(
        &mut self,
        k: KeyRef,
        ctx: &mut EvalCtx<'_>,
        vals: &mut [Datum; MAX_FIELDS],
    ) -> Option<PKey> {
        let fields = &self.prog.fields[k.start as usize..(k.start + k.len) as usize];
        for (i, f) in fields.iter().enumerate() {
            vals[i] = load(*f, ctx, self.draws)?;
        }
        self.draws.clear();
        let n = fields.len();
        if n == 1 {
            return Some(PKey::single(vals[0]));
        }
        let mut bits = [0u32; MAX_FIELDS];
        let mut wide = [0u128; MAX_FIELDS];
        for i in 0..n {
            bits[i] = fields[i].dtype().width() as u32 * 8;
            wide[i] = vals[i];
        }
        // Loaded values always fit their type's width.
        pack(&wide[..n], &bits[..n])
    }

    fn set(&self, r: SetRef) -> Option<&CSet> {
        match r {
            SetRef::Missing => None,
            SetRef::Fixed(i) => self.prog.sets.get(i as usize),
            SetRef::Written(i) => self.written.get(i as usize),
        }
    }

    fn eval_rule(&mut self, rs: &mut NftRuleset, rule: CRule, ctx: &mut EvalCtx<'_>) -> Outcome {
        let mut vals: [Datum; MAX_FIELDS] = Default::default();
        let prog = self.prog;
        for op in &prog.ops[rule.ops.0 as usize..rule.ops.1 as usize] {
            match op {
                COp::Match { key, test, negated } => {
                    let Some(k) = self.load_key(*key, ctx, &mut vals) else {
                        self.draws.clear();
                        return Outcome::NoMatch;
                    };
                    let hit = match *test {
                        Test::Never => false,
                        Test::MaskEq(m, x) => vals[0] & m == x,
                        Test::Flags(x) => vals[0] & x != 0,
                        Test::Eq(x) => k == x,
                        Test::Range(lo, hi) => lo <= k && k <= hi,
                        Test::In(s) => self.set(s).is_some_and(|s| s.find(k, ctx.now).is_some()),
                    };
                    if hit == *negated {
                        return Outcome::NoMatch;
                    }
                }
                COp::Counter(si) => count(rs, rule, *si, ctx.packet.len),
                COp::Verdict(v) => return Outcome::Verdict(*v),
                COp::Vmap { key, set } => {
                    let Some(k) = self.load_key(*key, ctx, &mut vals) else {
                        self.draws.clear();
                        return Outcome::NoMatch;
                    };
                    return match self.set(*set).and_then(|s| s.find(k, ctx.now)) {
                        Some(e) => Outcome::Verdict(e.verdict),
                        None => Outcome::NoMatch,
                    };
                }
                COp::Mark(op) => {
                    let m = &mut ctx.packet.mark;
                    *m = match *op {
                        MarkOp::Set(v) => v,
                        MarkOp::Or(v) => *m | v,
                        MarkOp::Xor(v) => *m ^ v,
                        MarkOp::And(v) => *m & v,
                    };
                }
                COp::Update { key, set } => {
                    let Some(k) = self.load_key(*key, ctx, &mut vals) else {
                        self.draws.clear();
                        return Outcome::NoMatch;
                    };
                    if let Some((si, w)) = *set {
                        let n = key.len as usize;
                        self.update(rs, rule.table, si, w, k, &vals[..n], ctx.now);
                    }
                }
                COp::Nat(req) => return Outcome::Nat((**req).clone()),
                COp::Reject(w) => return Outcome::Reject(*w),
                COp::Iifname {
                    negated,
                    name,
                    prefix,
                } => {
                    let dev = ctx.packet.iif.as_ref().map(|i| i.as_str()).unwrap_or("");
                    let hit = if *prefix {
                        dev.starts_with(&**name)
                    } else {
                        dev == &**name
                    };
                    if hit == *negated {
                        return Outcome::NoMatch;
                    }
                }
            }
        }
        Outcome::Next
    }

    /// `update @set { key }`: in the ruleset as the interpreter does it, and in the
    /// compiled copy.
    #[allow(clippy::too_many_arguments)]
    fn update(
        &mut self,
        rs: &mut NftRuleset,
        table: u32,
        si: u32,
        w: u32,
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
        match m.get(&k) {
            Some(&i) => c.elems[i as usize].expires = expires,
            None => {
                m.insert(k, c.elems.len() as u32);
                c.elems.push(CElem {
                    expires,
                    verdict: CVerdict::Accept,
                });
            }
        }
    }
}

/// `counter`: the count kept in the rule's statement, as the interpreter keeps it.
#[inline]
fn count(rs: &mut NftRuleset, rule: CRule, si: u32, len: u16) {
    let stmt = rs
        .tables
        .get_index_mut(rule.table as usize)
        .and_then(|(_, t)| t.chains.get_index_mut(rule.chain as usize))
        .and_then(|(_, c)| c.rules.get_mut(rule.rule as usize))
        .and_then(|r| r.stmts.get_mut(si as usize));
    if let Some(Stmt::Counter { packets, bytes }) = stmt {
        *packets += 1;
        *bytes += u64::from(len);
    }
}

#[cfg(test)]
#[path = "compiled_tests.rs"]
mod tests;
