//! Every way a packet's walk through a table can go, given its `statistic --mode random`
//! matches: one walk that forks at each such rule instead of one walk per outcome.
//!
//! A random statistic match draws `get_random_u32() & 0x7fffffff` and matches when the draw
//! is below the stored threshold (`statistic_mt`, `net/netfilter/xt_statistic.c`), so each
//! such rule the walk reaches either matches or not. `Ruleset::walk_all` follows both: it
//! walks the table once, and where it reaches a random statistic match whose outcome is not
//! certain it keeps a copy of the walk as it stands (position, jump stack, mark, random
//! stream, rule state) to continue later with the rule forced to fail, and goes on with the
//! rule forced to match. The rules before the fork are evaluated once for all branches: a
//! kube-proxy service of n endpoints costs n forks and O(n) rule evaluations, not O(n²).
//! Each finished branch is a [`WalkLeaf`]: its verdict, mark, random stream, rule-state
//! changes, the trace events that matter for its outcome (every event but the rules that
//! did not match) and its path of decisions ([`PathNode`], shared with the branches it forked
//! from).
//!
//! A rule whose outcome is certain (`--probability 1`, `0`, or inverted) is decided without
//! a fork but still recorded on the path. A rule decided earlier on the path (reached again
//! through another jump, or at another hook) gets the same decision again, where the kernel
//! would draw anew; [`WalkLeaf::repeats`] lists them so the caller can say so.
//!
//! [`Netns::process_branching`](crate::netns::Netns::process_branching) runs the rest of the
//! packet's way (later hooks, conntrack, routing) for one leaf of each branching walk and
//! hands back the others ([`Branching::alternatives`]) to be run the same way: every
//! outcome, and the walks that fork are walked once.

use std::collections::HashSet;
use std::sync::Arc;

use sim_core::SimRng;

use crate::eval::{effect, rule_matches, Action, EvalCtx, Pkt, Verdict, MAX_DEPTH};
use crate::rule::{Match, Rule, StatisticMode, Target};
use crate::ruleset::{Ruleset, TableData};
use crate::state::{RecentTable, RulesetState, SlotState, Slots};
use crate::trace::{StatDraw, Trace, TraceEvent};
use crate::types::{Hook, Table};

/// One decision on a path: a rule with random statistic matches forced to match or not, or
/// an nftables `numgen random` forced to one value. The path is a list from the newest
/// decision back to the first (shared between the branches that have it in common).
#[derive(Debug)]
pub struct PathNode {
    /// Chain.
    pub chain: Arc<str>,
    /// 1-based rule number.
    pub num: usize,
    /// What was decided.
    pub choice: Choice,
    /// The decision before it on the path.
    pub prev: Option<Arc<PathNode>>,
}

/// What a [`PathNode`] decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// An iptables rule's random statistic matches all matched, or one failed.
    Statistic {
        /// Table.
        table: Table,
        /// Whether they matched.
        matched: bool,
    },
    /// An nftables rule's `numgen random mod N offset O` gave `index + O`.
    Numgen {
        /// `ip kube-proxy`.
        table: Arc<str>,
        /// N.
        modulus: u32,
        /// O.
        offset: u32,
        /// The result before the offset, below N.
        index: u32,
        /// The rule as `nft list` prints it.
        text: Arc<str>,
    },
}

impl PathNode {
    /// The iptables table and whether it matched, for a statistic decision.
    pub fn statistic(&self) -> Option<(Table, bool)> {
        match self.choice {
            Choice::Statistic { table, matched } => Some((table, matched)),
            Choice::Numgen { .. } => None,
        }
    }
}

impl PathNode {
    /// The decisions from the first to `head`, in the order they were taken.
    pub fn in_order(head: Option<&Arc<PathNode>>) -> Vec<&Arc<PathNode>> {
        let mut v = Vec::new();
        let mut at = head;
        while let Some(n) = at {
            v.push(n);
            at = n.prev.as_ref();
        }
        v.reverse();
        v
    }

    fn find<'a>(
        head: Option<&'a Arc<PathNode>>,
        table: Table,
        chain: &str,
        num: usize,
    ) -> Option<&'a PathNode> {
        let mut at = head;
        while let Some(n) = at {
            if n.statistic().is_some_and(|(t, _)| t == table) && n.num == num && &*n.chain == chain
            {
                return Some(n);
            }
            at = n.prev.as_ref();
        }
        None
    }
}

/// What a walk changed in the rule state (counters, nth counters, recent lists, nfacct):
/// the slots that differ from before the walk, and the lists when they differ.
#[derive(Clone, Debug, Default)]
pub(crate) struct StateDelta {
    slots: Vec<(usize, SlotState)>,
    recent: Option<Vec<RecentTable>>,
    nfacct: Option<Vec<SlotState>>,
}

/// The rule state a walk can change.
#[derive(Clone, Debug)]
struct StateSnap {
    slots: Slots,
    recent: Vec<RecentTable>,
    nfacct: Vec<SlotState>,
}

impl StateSnap {
    fn of(s: &RulesetState) -> StateSnap {
        StateSnap {
            slots: s.slots.clone(),
            recent: s.recent.clone(),
            nfacct: s.nfacct.clone(),
        }
    }

    fn restore(&self, s: &mut RulesetState) {
        s.slots.clone_from(&self.slots);
        s.recent.clone_from(&self.recent);
        s.nfacct.clone_from(&self.nfacct);
    }

    /// What `s` changed since this snapshot.
    fn delta(&self, s: &RulesetState) -> StateDelta {
        let slots = s
            .slots
            .iter()
            .filter(|(i, v)| self.slots.get(*i) != Some(v))
            .map(|(i, v)| (i, *v))
            .collect();
        StateDelta {
            slots,
            recent: (s.recent != self.recent).then(|| s.recent.clone()),
            nfacct: (s.nfacct != self.nfacct).then(|| s.nfacct.clone()),
        }
    }
}

impl StateDelta {
    pub(crate) fn apply(&self, s: &mut RulesetState) {
        for (i, v) in &self.slots {
            *s.slots.get_or_add(*i) = *v;
        }
        if let Some(r) = &self.recent {
            s.recent.clone_from(r);
        }
        if let Some(n) = &self.nfacct {
            s.nfacct.clone_from(n);
        }
    }
}

/// One way a table's walk ended.
#[derive(Clone, Debug)]
pub struct WalkLeaf {
    pub(crate) verdict: Verdict,
    pub(crate) mark: u32,
    pub(crate) rng: SimRng,
    pub(crate) state: StateDelta,
    pub(crate) events: Vec<TraceEvent>,
    /// The decisions on the path up to the end of this walk (those before it included).
    pub path: Option<Arc<PathNode>>,
    /// Rules decided before on the path and met again in this walk, their decision
    /// reapplied: (table, chain, rule number).
    pub repeats: Vec<(Table, Arc<str>, usize)>,
}

/// How many more branches the walks of one run may make, and whether one was not made for
/// want of them. The caller of [`Netns::process_branching`] limits its runs (each branch not
/// followed becomes a run of its own), and checks the limit here, as the branches are made,
/// not after a walk has enumerated them all: a chain of n non-terminal coin-flip rules has
/// 2^n leaves. A rule met with no branch to spare is decided as matched only (its
/// decision stays on the path, with its probability), so every leaf still made is exact and
/// the probability of the leaves not made is what is missing from the total.
///
/// [`Netns::process_branching`]: crate::netns::Netns::process_branching
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct BranchBudget {
    /// `None`: no limit.
    spare: Option<usize>,
    /// A branch was not made for want of budget.
    pub(crate) hit: bool,
}

impl BranchBudget {
    /// Takes one branch; `false` when none is left.
    fn take(&mut self) -> bool {
        match &mut self.spare {
            None => true,
            Some(0) => false,
            Some(n) => {
                *n -= 1;
                true
            }
        }
    }

    /// Gives back a branch taken but not made after all.
    fn refund(&mut self) {
        if let Some(n) = &mut self.spare {
            *n += 1;
        }
    }
}

/// A walk in progress, as it stands where it forked.
#[derive(Clone)]
struct Cont {
    chain_id: u32,
    pos: usize,
    stack: [(u32, u32); MAX_DEPTH],
    sp: usize,
    out: Verdict,
    mark: u32,
    rng: SimRng,
    /// `None`: the state as the walk found it (nothing stateful evaluated yet).
    snap: Option<Arc<StateSnap>>,
    /// A stateful match (`--mode nth`, `recent`, `nfacct`) was evaluated on the way: the
    /// rule state may differ from the walk's start.
    touched: bool,
    events: Trace,
    path: Option<Arc<PathNode>>,
    repeats: Vec<(Table, Arc<str>, usize)>,
    /// The decision for the rule at `pos` (the fork's other side).
    force_next: Option<bool>,
}

/// Whether a rule's random statistic matches all match, as far as a decision can say:
/// `Some(true)` certainly (every threshold is 2^31, or 0 when inverted), `Some(false)`
/// certainly not (one is 0, or 2^31 when inverted), `None` either.
fn certain(rule: &Rule) -> Option<bool> {
    let mut all_one = true;
    for m in &rule.matches {
        if let Match::Statistic(s) = m {
            if let StatisticMode::Random { probability } = s.mode {
                // Matches when draw < t, draw in [0, 2^31): never for t = 0, always for t = 2^31.
                let (never, always) = (probability == 0, probability >= 0x8000_0000);
                let (p_zero, p_one) = if s.inv {
                    (always, never)
                } else {
                    (never, always)
                };
                if p_zero {
                    return Some(false);
                }
                all_one &= p_one;
            }
        }
    }
    all_one.then_some(true)
}

/// Whether evaluating the rule can change the rule state (besides its counters).
fn is_stateful(rule: &Rule) -> bool {
    rule.matches.iter().any(|m| match m {
        Match::Statistic(s) => matches!(s.mode, StatisticMode::Nth { .. }),
        Match::Recent(_) | Match::Nfacct(_) => true,
        _ => false,
    })
}

/// A cheap key for "this rule may have been decided before": table, number and a hash of the
/// chain's name (a collision only costs an exact look along the path).
fn maybe_key(table: Table, chain: &str, num: usize) -> (Table, usize, u64) {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    chain.hash(&mut h);
    (table, num, h.finish())
}

fn has_random(rule: &Rule) -> bool {
    rule.matches.iter().any(|m| {
        matches!(
            m,
            Match::Statistic(s) if matches!(s.mode, StatisticMode::Random { .. })
        )
    })
}

impl Ruleset {
    /// Every way the walk of `table` at `hook` can end for the packet in `ctx`, forking at
    /// each random statistic match not decided on `path` (see the module docs): the first
    /// (every fork matched) and the others, in depth-first, matched-first order. `ctx` (mark, random stream) and `state` are as they were on return; the
    /// caller applies the leaf it follows ([`WalkLeaf`]).
    pub(crate) fn walk_all(
        &self,
        table: Table,
        hook: Hook,
        ctx: &mut EvalCtx<'_>,
        state: &mut RulesetState,
        path: Option<Arc<PathNode>>,
        budget: &mut BranchBudget,
    ) -> (WalkLeaf, Vec<WalkLeaf>) {
        let mut events = Trace::new();
        let td = match &self.tables[table.index()] {
            Some(td) if td.builtin[hook as usize].is_some() && self.sees(&ctx.packet) => td,
            _ => {
                // Nothing to walk: what run_hook says, one leaf.
                let v = self.run_hook(table, hook, ctx, state, Some(&mut events));
                let leaf = WalkLeaf {
                    verdict: v,
                    mark: ctx.packet.mark,
                    rng: ctx.rng.clone(),
                    state: StateDelta::default(),
                    events: events.events,
                    path,
                    repeats: Vec::new(),
                };
                return (leaf, Vec::new());
            }
        };
        events.push(TraceEvent::Enter {
            table,
            hook,
            packet: ctx.packet.to_string(),
            ct: ctx.ct.describe(),
        });
        let before = Arc::new(StateSnap::of(state));
        let (mark0, rng0) = (ctx.packet.mark, ctx.rng.clone());
        let base = td.builtin[hook as usize].unwrap_or_default();
        let start = Cont {
            chain_id: base,
            pos: 0,
            stack: [(0, 0); MAX_DEPTH],
            sp: 0,
            out: Verdict::accept(),
            mark: mark0,
            rng: rng0.clone(),
            snap: None,
            touched: false,
            events,
            path,
            repeats: Vec::new(),
            force_next: None,
        };
        let mut w = Walker {
            td,
            table,
            hook,
            pending: Vec::new(),
            incoming: start.path.clone(),
            before: None,
            decided: HashSet::new(),
            budget: *budget,
        };
        let (leaf, mut dirty) = self.walk_from(&mut w, ctx, state, start);
        let first = WalkLeaf {
            state: if dirty {
                before.delta(state)
            } else {
                StateDelta::default()
            },
            ..leaf
        };
        let mut others = Vec::new();
        while let Some(c) = w.pending.pop() {
            match &c.snap {
                Some(s) => s.restore(state),
                None if dirty => before.restore(state),
                None => {}
            }
            ctx.packet.mark = c.mark;
            *ctx.rng = c.rng.clone();
            let (leaf, touched) = self.walk_from(&mut w, ctx, state, c);
            dirty = touched;
            others.push(WalkLeaf {
                state: if touched {
                    before.delta(state)
                } else {
                    StateDelta::default()
                },
                ..leaf
            });
        }
        if dirty {
            before.restore(state);
        }
        *budget = w.budget;
        ctx.packet.mark = mark0;
        *ctx.rng = rng0;
        (first, others)
    }

    /// Walks on from `c` to the end, pushing the other side of every fork to `w.pending`.
    /// Returns the leaf and whether a stateful match was evaluated on its way. Rule and
    /// policy counters are not counted: the branches are followed in copies of the node that
    /// are thrown away, and no branch's outcome depends on them.
    fn walk_from(
        &self,
        w: &mut Walker<'_>,
        ctx: &mut EvalCtx<'_>,
        state: &mut RulesetState,
        mut c: Cont,
    ) -> (WalkLeaf, bool) {
        let (td, table, hook) = (w.td, w.table, w.hook);
        let pk = Pkt::of(ctx);
        let base = td.builtin[hook as usize].unwrap_or_default();
        let mut chain = td.chain(c.chain_id);
        loop {
            if c.pos >= chain.rules.len() {
                let Some(caller) = c.pop_frame(td, table, chain) else {
                    let v = policy(td, base, table, &c.out, &mut c.events);
                    return finish(c, v, ctx);
                };
                chain = caller;
                continue;
            }
            let rule = &chain.rules[c.pos];
            let mut draws = Vec::new();
            let matched = if has_random(rule) {
                let num = c.pos + 1;
                let key = maybe_key(table, chain.name(), num);
                let earlier = if w.may_be_decided(key) {
                    PathNode::find(c.path.as_ref(), table, chain.name(), num)
                        .and_then(|n| n.statistic())
                        .map(|(_, m)| m)
                } else {
                    None
                };
                let (mut forked, mut starved) = (false, false);
                let force = match (c.force_next.take(), earlier, certain(rule)) {
                    (Some(f), _, _) => f,
                    (None, Some(m), _) => m,
                    (None, None, Some(m)) => m,
                    (None, None, None) if !w.budget.take() => {
                        // No branch to spare: this rule matches on this path only.
                        starved = true;
                        true
                    }
                    (None, None, None) => {
                        // The other side of the fork: this walk as it stands, to evaluate
                        // this rule again forced to fail.
                        let mut other = c.clone();
                        other.force_next = Some(false);
                        other.mark = ctx.packet.mark;
                        other.rng = ctx.rng.clone();
                        if c.touched {
                            other.snap = Some(Arc::new(StateSnap::of(state)));
                        }
                        w.pending.push(other);
                        forked = true;
                        true
                    }
                };
                c.touched |= is_stateful(rule);
                ctx.force_random = Some(force);
                let m = rule_matches(self, rule, hook, ctx, &pk, state, Some(&mut draws));
                ctx.force_random = None;
                let reached = draws.iter().any(|d| matches!(d, StatDraw::Random { .. }));
                if reached {
                    w.budget.hit |= starved;
                    if earlier.is_some() {
                        c.repeats.push((table, chain.name().into(), num));
                    } else {
                        w.decided.insert(key);
                        c.path = Some(Arc::new(PathNode {
                            chain: chain.name().into(),
                            num,
                            choice: Choice::Statistic {
                                table,
                                matched: force,
                            },
                            prev: c.path.take(),
                        }));
                    }
                } else if forked {
                    // Not reached (an earlier match failed): no fork after all.
                    w.pending.pop();
                    w.budget.refund();
                }
                m
            } else {
                c.touched |= is_stateful(rule);
                rule_matches(self, rule, hook, ctx, &pk, state, Some(&mut draws))
            };
            if matched {
                c.events.push(TraceEvent::Rule {
                    table,
                    chain: chain.name().to_string(),
                    num: c.pos + 1,
                    matched,
                    draws,
                    spec: crate::fmt::rule_spec(rule),
                });
            } else {
                c.pos += 1;
                continue;
            }
            match &rule.target {
                Target::None => c.pos += 1,
                Target::Accept => {
                    let v = c.out.clone();
                    return finish(c, v, ctx);
                }
                Target::Drop => {
                    let mut v = c.out.clone();
                    v.action = Action::Drop;
                    return finish(c, v, ctx);
                }
                Target::Return => {
                    let Some(caller) = c.pop_frame(td, table, chain) else {
                        let v = policy(td, base, table, &c.out, &mut c.events);
                        return finish(c, v, ctx);
                    };
                    chain = caller;
                }
                Target::Jump(j) | Target::Goto(j) => {
                    if matches!(rule.target, Target::Jump(_)) {
                        if c.sp >= MAX_DEPTH {
                            let mut v = c.out.clone();
                            v.action = Action::Drop;
                            return finish(c, v, ctx);
                        }
                        c.stack[c.sp] = (c.chain_id, (c.pos + 1) as u32);
                        c.sp += 1;
                    }
                    c.chain_id = j.id.idx;
                    chain = td.chain(c.chain_id);
                    c.pos = 0;
                }
                other => {
                    if effect(other, ctx, &mut c.out, Some(&mut c.events)) {
                        let v = c.out.clone();
                        return finish(c, v, ctx);
                    }
                    c.pos += 1;
                }
            }
        }
    }
}

/// The `numgen` results one nftables base-chain walk is made to give, by rule: the first
/// value of each `numgen` not forced yet, with the other values noted as walks to make.
#[derive(Clone, Debug, Default)]
pub struct NumgenPlan {
    /// (chain, rule number, value index), in the order met.
    forced: Vec<(Arc<str>, usize, u32)>,
    /// The path: the decisions before the walk, then each `numgen` met.
    path: Option<Arc<PathNode>>,
    /// Other forcings to walk with: each this walk's forcing up to a `numgen` it met for the
    /// first time, and one of that `numgen`'s other values.
    others: Vec<Vec<(Arc<str>, usize, u32)>>,
    /// The branches left to make (the run's, lent to this walk).
    pub(crate) budget: BranchBudget,
}

/// The most values of one `numgen` followed (more would pass [`Branching`]'s caller's run
/// limit anyway); a `numgen` with more is followed that far, and the run says its limit was
/// hit ([`Branching::limit_hit`]).
const MAX_NUMGEN_VALUES: u32 = 65_536;

impl NumgenPlan {
    /// The value index forced for rule `num` of `chain`, if any.
    pub(crate) fn forced(&self, chain: &str, num: usize) -> Option<u32> {
        self.forced
            .iter()
            .find(|(c, n, _)| &**c == chain && *n == num)
            .map(|(_, _, v)| *v)
    }

    /// A rule's `numgen` gave `d` (forced: see [`NumgenPlan::forced`], else its first value).
    pub(crate) fn reached(
        &mut self,
        table: &str,
        chain: &str,
        num: usize,
        d: &crate::nft::NftDraw,
        text: String,
    ) {
        let index = match self.forced(chain, num) {
            Some(v) => v,
            None => {
                let key: Arc<str> = chain.into();
                for v in 1..d.modulus {
                    if v > MAX_NUMGEN_VALUES || !self.budget.take() {
                        self.budget.hit = true;
                        break;
                    }
                    let mut f = self.forced.clone();
                    f.push((key.clone(), num, v));
                    self.others.push(f);
                }
                self.forced.push((key, num, 0));
                0
            }
        };
        self.path = Some(Arc::new(PathNode {
            chain: chain.into(),
            num,
            choice: Choice::Numgen {
                table: table.into(),
                modulus: d.modulus,
                offset: d.value.wrapping_sub(index),
                index,
                text: text.into(),
            },
            prev: self.path.take(),
        }));
    }
}

/// What a run is handed for one of its walks, or took there.
#[derive(Clone, Debug)]
pub enum Taken {
    /// An iptables walk's leaf.
    Leaf(Arc<WalkLeaf>),
    /// An nftables walk's `numgen` forcing, and the path after it.
    Numgen(Arc<NumgenPlan>),
}

impl Taken {
    fn path(&self) -> Option<&Arc<PathNode>> {
        match self {
            Taken::Leaf(l) => l.path.as_ref(),
            Taken::Numgen(p) => p.path.as_ref(),
        }
    }

    fn repeats(&self) -> &[(Table, Arc<str>, usize)] {
        match self {
            Taken::Leaf(l) => &l.repeats,
            Taken::Numgen(_) => &[],
        }
    }
}

/// The forcing and forking of one traced run ([`Netns::process_branching`]): the leaves to
/// follow for walks that forked in an earlier run, and what this run found.
///
/// [`Netns::process_branching`]: crate::netns::Netns::process_branching
#[derive(Clone, Debug, Default)]
pub struct Branching {
    /// Walks (by their number in the run, from 0) whose outcome is given.
    inject: Vec<(usize, Taken)>,
    /// Walks so far in this run.
    pub(crate) walks: usize,
    /// Every leaf or forcing this run followed, by walk number.
    taken: Vec<(usize, Taken)>,
    /// The leaves or forcings of walks this run did not follow, by walk number.
    found: Vec<(usize, Vec<Taken>)>,
    /// The branches this run may still make.
    pub(crate) budget: BranchBudget,
}

impl Branching {
    /// A run that follows `inject`'s leaf or forcing at each of its walks (and the first
    /// branch of every other walk that forks). `Branching::default()` starts from nothing.
    pub fn new(inject: Vec<(usize, Taken)>) -> Branching {
        Branching {
            inject,
            ..Branching::default()
        }
    }

    /// At most `n` branches left for later runs ([`Branching::alternatives`]): the walks
    /// stop forking there, so a run's memory is bounded by `n` however many statistic rules
    /// it meets. [`Branching::limit_hit`] says whether a branch was left unmade.
    pub fn with_limit(mut self, n: usize) -> Branching {
        self.budget.spare = Some(n);
        self
    }

    /// Whether a walk met a rule it would have forked at (or a `numgen` value it would have
    /// followed) with no branch left under [`Branching::with_limit`]: the leaves this run
    /// and its alternatives reach are exact, but do not cover every outcome.
    pub fn limit_hit(&self) -> bool {
        self.budget.hit
    }

    /// What is given for walk `j`, if anything.
    pub(crate) fn injected(&self, j: usize) -> Option<Taken> {
        self.inject
            .iter()
            .find(|(w, _)| *w == j)
            .map(|(_, l)| l.clone())
    }

    /// Notes that walk `j` followed `taken`, leaving `others`.
    pub(crate) fn took(&mut self, j: usize, taken: Taken, others: Vec<Taken>) {
        self.taken.push((j, taken));
        if !others.is_empty() {
            self.found.push((j, others));
        }
    }

    /// The path of decisions this run took (the last walk that decided holds it all).
    pub fn path(&self) -> Option<&Arc<PathNode>> {
        self.taken.iter().rev().find_map(|(_, l)| l.path())
    }

    /// Rules met again on this run's path, their earlier decision reapplied.
    pub fn repeats(&self) -> impl Iterator<Item = &(Table, Arc<str>, usize)> {
        self.taken.iter().flat_map(|(_, l)| l.repeats().iter())
    }

    /// The runs still to make for the branches this run did not follow, each as what to
    /// inject: in the order to push them on a stack so that popping gives depth-first,
    /// first-branch-first order (a later walk's alternatives come out before an earlier
    /// one's).
    pub fn alternatives(&self) -> Vec<Vec<(usize, Taken)>> {
        let mut out = Vec::new();
        for (j, others) in &self.found {
            let prefix: Vec<(usize, Taken)> =
                self.taken.iter().filter(|(w, _)| w < j).cloned().collect();
            for t in others.iter().rev() {
                let mut inj = prefix.clone();
                inj.push((*j, t.clone()));
                out.push(inj);
            }
        }
        out
    }
}

impl NumgenPlan {
    /// A walk forced as `plan` was (an alternative a run found), on `path`.
    pub(crate) fn again(plan: &NumgenPlan, path: Option<Arc<PathNode>>) -> NumgenPlan {
        NumgenPlan {
            forced: plan.forced.clone(),
            path,
            others: Vec::new(),
            budget: BranchBudget::default(),
        }
    }

    /// A first walk on `path`.
    pub(crate) fn start(path: Option<Arc<PathNode>>) -> NumgenPlan {
        NumgenPlan {
            path,
            ..NumgenPlan::default()
        }
    }

    /// The other forcings found, as plans to inject.
    pub(crate) fn take_others(&mut self) -> Vec<Taken> {
        std::mem::take(&mut self.others)
            .into_iter()
            .map(|forced| {
                Taken::Numgen(Arc::new(NumgenPlan {
                    forced,
                    path: None,
                    others: Vec::new(),
                    budget: BranchBudget::default(),
                }))
            })
            .collect()
    }
}

/// The built-in chain's policy decides (its counters, like the rules', are not counted).
fn policy(td: &TableData, base: u32, table: Table, out: &Verdict, events: &mut Trace) -> Verdict {
    let c = td.chain(base);
    events.push(TraceEvent::Policy {
        table,
        chain: c.name().to_string(),
        policy: c.policy(),
    });
    let mut v = out.clone();
    if c.policy() == crate::types::Policy::Drop {
        v.action = Action::Drop;
    }
    v
}

/// What one walk's branches share.
struct Walker<'a> {
    td: &'a TableData,
    table: Table,
    hook: Hook,
    /// The other sides of the forks met, to walk on from later (last in, first out).
    pending: Vec<Cont>,
    /// The path on the way in.
    incoming: Option<Arc<PathNode>>,
    /// [`maybe_key`]s of its decisions, made when a walk first needs them.
    before: Option<HashSet<(Table, usize, u64)>>,
    /// [`maybe_key`]s of the rules decided by the branches of this walk.
    decided: HashSet<(Table, usize, u64)>,
    /// The branches left to make.
    budget: BranchBudget,
}

impl Cont {
    /// Returns from the chain being walked to its caller, recording the `Return` and resuming
    /// at the rule after the jump; `None` at the bottom of the stack, where the built-in
    /// chain's policy decides.
    fn pop_frame<'t>(
        &mut self,
        td: &'t TableData,
        table: Table,
        from: &crate::ruleset::Chain,
    ) -> Option<&'t crate::ruleset::Chain> {
        let top = self.sp.checked_sub(1)?;
        self.sp = top;
        let (cid, p) = self.stack[top];
        let to = td.chain(cid);
        self.events.push(TraceEvent::Return {
            table,
            from: from.name().to_string(),
            to: to.name().to_string(),
        });
        self.chain_id = cid;
        self.pos = p as usize;
        Some(to)
    }
}

impl Walker<'_> {
    /// Whether the rule may be decided on a path already: only then is the path searched.
    fn may_be_decided(&mut self, key: (Table, usize, u64)) -> bool {
        if self.decided.contains(&key) {
            return true;
        }
        let incoming = &self.incoming;
        self.before
            .get_or_insert_with(|| {
                let mut set = HashSet::new();
                let mut at = incoming.as_ref();
                while let Some(n) = at {
                    if let Some((t, _)) = n.statistic() {
                        set.insert(maybe_key(t, &n.chain, n.num));
                    }
                    at = n.prev.as_ref();
                }
                set
            })
            .contains(&key)
    }
}

fn finish(c: Cont, verdict: Verdict, ctx: &EvalCtx<'_>) -> (WalkLeaf, bool) {
    let touched = c.touched;
    let leaf = WalkLeaf {
        verdict,
        mark: ctx.packet.mark,
        rng: ctx.rng.clone(),
        state: StateDelta::default(),
        events: c.events.events,
        path: c.path,
        repeats: c.repeats,
    };
    (leaf, touched)
}
