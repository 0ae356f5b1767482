//! `nfsim trace --all-branches`: every reachable outcome of the `statistic` matches a packet
//! meets, with its exact probability.
//!
//! **How.** A `-m statistic --mode random --probability p` match is stored as
//! `t = round(p × 2^31)` and matches when a 31-bit draw is below `t` (`statistic_mt` in
//! `net/netfilter/xt_statistic.c`): exactly with probability `t / 2^31`. The packet goes
//! through a copy of the node with [`Netns::process_branching`]: each table's walk forks at
//! every random statistic rule it reaches ([`sim_netfilter::branch`]), going on with the rule
//! made to match and keeping the walk as it stands to go on later with the rule made to fail,
//! so the rules the branches share are walked once. The run follows the first leaf (every
//! fork matched) through the rest of the node (later hooks, conntrack, routing); every other
//! leaf becomes a run of its own that is handed that leaf at that walk instead of walking it
//! again, depth-first, matched first. A run is one path, an outcome; its probability is the
//! product of its decisions' probabilities, worked out once per shared prefix. Branches of
//! probability zero (`--probability 0` or `1`) are not followed, but a certain decision is
//! still listed on the path. Outcomes with the same [`Outcome`] (verdict, final tuple,
//! interface, NAT) are merged and their probabilities added; the sum over all outcomes is
//! checked to be exactly 1.
//!
//! `P(match)` of a rule with several random statistic matches is the product over them (each
//! `t/2^31`, or `1 − t/2^31` when inverted).
//!
//! For kube-proxy's cascade of n endpoints (probabilities 1/n, 1/(n−1), …, 1/2, then the last
//! endpoint unconditionally) this gives n outcomes, each 1/n up to the quantization: for three,
//! 715827883/2147483648 ≈ 0.333333333489 and twice 1431655765/4294967296 ≈ 0.333333333256.
//! The cascade is walked once (n forks, O(n) rule evaluations) and the node is run n times.
//!
//! **Limits, stated.** `--mode nth` matches are deterministic (they follow the rule's packet
//! counter, which is 0 for the traced packet in a fresh namespace) and are not branched. A rule
//! evaluated twice on one path (reached from two hooks) is decided alike both times, where the
//! kernel would draw twice; the report notes it. Other random choices (a `--random-fully` NAT
//! port) come from the node's seeded stream, the same in every branch. At most
//! [`MAX_BRANCH_RUNS`] runs: the limit is checked as the walks fork (each branch not followed
//! at once is a run to make), so memory stays bounded however many statistic rules a path
//! meets (a chain of n non-terminal coin-flip rules has 2^n paths). Where it is hit, the
//! walks stop forking: the outcomes reached are exact, the report says the limit was hit
//! ([`BranchReport::stopped_at_limit`]) and its total is the probability they cover, below 1.
//! Paths are not merged when their states become equal again (`-j MARK --set-mark 1` on
//! every coin): each path is its own run.

use super::dyadic::Dyadic;
use super::trace::{outcome_of, Outcome};
use super::ExplainError;
use indexmap::IndexMap;
use serde::Serialize;
use sim_core::Packet;
use sim_netfilter::branch::{Branching, Choice, PathNode, Taken};
use sim_netfilter::netns::{Ingress, Netns, Step};
use sim_netfilter::nft::NftStep;
use sim_netfilter::rule::{Rule, StatisticMode};
use sim_netfilter::{rule_spec, Match, Table, TraceEvent};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;

/// The most runs `--all-branches` makes for one packet (each run is one path).
pub const MAX_BRANCH_RUNS: usize = 4096;

/// Digits after the point in printed decimals.
const DECIMAL_DIGITS: u32 = 12;

/// An exact probability. It serialises as every form a reader may want: `fraction`
/// (`1431655765/4294967296`, or `1`), `numerator` and `denominator` (a power of two) in
/// decimal, `denominator_log2`, `decimal` (rounded half-up to 12 places) and `float` (the
/// nearest `f64`). The strings are made when asked for: a path through a thousand statistic
/// rules has a numerator of thousands of digits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probability(Dyadic);

impl Probability {
    /// The exact value.
    pub fn exact(&self) -> &Dyadic {
        &self.0
    }

    /// The reduced fraction, `1431655765/4294967296` (or `1`).
    pub fn fraction(&self) -> String {
        self.0.fraction()
    }

    /// Rounded half-up to 12 decimal places.
    pub fn decimal(&self) -> String {
        self.0.decimal(DECIMAL_DIGITS)
    }
}

impl From<&Dyadic> for Probability {
    fn from(d: &Dyadic) -> Self {
        Probability(d.clone())
    }
}

impl Serialize for Probability {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let num = self.0.numerator_string();
        let den = self.0.denominator_string();
        let fraction = if self.0.denominator_log2() == 0 {
            num.clone()
        } else {
            format!("{num}/{den}")
        };
        let mut st = s.serialize_struct("Probability", 6)?;
        st.serialize_field("fraction", &fraction)?;
        st.serialize_field("numerator", &num)?;
        st.serialize_field("denominator", &den)?;
        st.serialize_field("denominator_log2", &self.0.denominator_log2())?;
        st.serialize_field("decimal", &self.0.decimal(DECIMAL_DIGITS))?;
        st.serialize_field("float", &self.0.to_f64())?;
        st.end()
    }
}

/// One forced statistic rule on a path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// Table.
    pub table: String,
    /// Chain.
    pub chain: String,
    /// 1-based rule number.
    pub rule: usize,
    /// Whether it matched on this path (always true for a `numgen`).
    pub matched: bool,
    /// For an nftables `numgen random mod N offset O`: the value it gave on this path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numgen: Option<u32>,
    /// The probability of this decision.
    pub probability: Probability,
    /// The rule as iptables-save prints it (without `-A CHAIN`), or as `nft list` does.
    pub spec: String,
}

/// One distinct outcome and how likely it is.
#[derive(Clone, Debug, Serialize)]
pub struct BranchOutcome {
    /// The exact probability (the sum over its paths).
    pub probability: Probability,
    /// What happens.
    pub outcome: Outcome,
    /// The paths leading to it, each the decisions taken, in evaluation order (a decision
    /// shared by many paths is one value).
    pub paths: Vec<Vec<Arc<Decision>>>,
    /// For each path (same order), every rule whose matches all matched on the way, in
    /// evaluation order: `nat KUBE-SVC-X #2: -m statistic … -j KUBE-SEP-Y`.
    pub rules_matched: Vec<Vec<String>>,
}

impl BranchOutcome {
    /// The exact probability.
    pub fn exact(&self) -> &Dyadic {
        self.probability.exact()
    }
}

/// Every reachable outcome of the statistic matches.
#[derive(Clone, Debug, Serialize)]
pub struct BranchReport {
    /// Runs of the packet through the node made (one per path: the walks that fork are walked
    /// once, see the module docs).
    pub runs: usize,
    /// Distinct statistic rules decided on some path.
    pub statistic_rules: usize,
    /// The outcomes, in the order first reached (matched branches first).
    pub outcomes: Vec<BranchOutcome>,
    /// The sum of the outcomes' probabilities.
    pub total: Probability,
    /// Whether that sum is exactly 1.
    pub sums_to_one: bool,
    /// Caveats met while exploring.
    pub notes: Vec<String>,
    /// The most runs made ([`MAX_BRANCH_RUNS`]).
    pub run_limit: usize,
    /// Whether some branch was not followed for want of runs: the outcomes are exact but do
    /// not cover every path, and `total` is the probability they cover.
    pub stopped_at_limit: bool,
}

/// `P(rule matches)` from its random statistic matches, exactly.
pub(crate) fn match_probability(rule: &Rule) -> Dyadic {
    let mut p = Dyadic::one();
    for m in &rule.matches {
        if let Match::Statistic(s) = m {
            if let StatisticMode::Random { probability } = s.mode {
                let q = Dyadic::new(u64::from(probability), 31);
                p = p.mul(&if s.inv { q.complement() } else { q });
            }
        }
    }
    p
}

/// The probability that `numgen random mod n` gives `index` (before its offset):
/// `nft_ng_random_eval` computes `reciprocal_scale(get_random_u32(), n)`, i.e.
/// `(x × n) >> 32` for a uniform 32-bit `x`, so `index` is given by the `x` with
/// `index × 2^32 ≤ x × n < (index + 1) × 2^32`: `⌈(index+1)·2^32/n⌉ − ⌈index·2^32/n⌉` of the
/// 2^32 values, which is exactly 1/n only when n divides 2^32 (docs/kernel-model.md §13).
pub fn numgen_probability(n: u32, index: u32) -> Dyadic {
    if n == 0 || index >= n {
        return Dyadic::zero();
    }
    let ceil = |v: u128| (v << 32).div_ceil(u128::from(n));
    let count = ceil(u128::from(index) + 1) - ceil(u128::from(index));
    Dyadic::new(count as u64, 32)
}

/// A path node as the report shows it, and its probability.
fn decision(base: &Netns, n: &PathNode) -> Result<(Decision, Dyadic), ExplainError> {
    match &n.choice {
        Choice::Statistic { table, matched } => {
            let rule = base
                .ruleset()
                .rules(*table, &n.chain)
                .and_then(|rules| rules.get(n.num.wrapping_sub(1)))
                .ok_or_else(|| {
                    ExplainError::Netns(format!(
                        "internal: traced rule {} {} #{} is not in the ruleset",
                        table, n.chain, n.num
                    ))
                })?;
            let p = match_probability(rule);
            let p = if *matched { p } else { p.complement() };
            Ok((
                Decision {
                    table: table.name().to_string(),
                    chain: n.chain.to_string(),
                    rule: n.num,
                    matched: *matched,
                    numgen: None,
                    probability: Probability(p.clone()),
                    spec: rule_spec(rule),
                },
                p,
            ))
        }
        Choice::Numgen {
            table,
            modulus,
            offset,
            index,
            text,
        } => {
            let p = numgen_probability(*modulus, *index);
            Ok((
                Decision {
                    table: table.to_string(),
                    chain: n.chain.to_string(),
                    rule: n.num,
                    matched: true,
                    numgen: Some(index.wrapping_add(*offset)),
                    probability: Probability(p.clone()),
                    spec: text.trim().to_string(),
                },
                p,
            ))
        }
    }
}

/// Explores every statistic branch of `pkt` entering `base` at `ingress`.
pub(crate) fn explore(
    base: &Netns,
    pkt: Packet,
    ingress: Ingress,
    now: sim_core::SimTime,
) -> Result<BranchReport, ExplainError> {
    // Depth-first: each entry is the leaves to follow at the walks that forked earlier.
    let mut stack: Vec<Vec<(usize, Taken)>> = vec![Vec::new()];
    let mut runs = 0usize;
    // Per path node (by address; `heads` keeps every node alive, so no address is reused):
    // the path's probability up to and including it, and the decision it stands for.
    let mut heads: Vec<Arc<PathNode>> = Vec::new();
    // Per node: the probability of the path up to it, and its decisions.
    type Memo = (Dyadic, Arc<Vec<Arc<Decision>>>);
    let mut memo: HashMap<usize, Memo> = HashMap::new();
    let mut decided: BTreeSet<(String, Arc<str>, usize)> = BTreeSet::new();
    let mut notes: Vec<String> = Vec::new();
    type Merged = (Dyadic, Vec<Vec<Arc<Decision>>>, Vec<Vec<String>>);
    let mut merged: IndexMap<Outcome, Merged> = IndexMap::new();
    let mut stopped_at_limit = false;
    while let Some(inject) = stack.pop() {
        runs += 1;
        // Every branch this run leaves is a run to make: the runs made, those on the stack
        // and those this run may leave stay within the limit.
        let spare = MAX_BRANCH_RUNS.saturating_sub(runs + stack.len());
        let mut ns = base.clone();
        let (result, br) =
            ns.process_branching(now, pkt, ingress, Branching::new(inject).with_limit(spare));
        stopped_at_limit |= br.limit_hit();
        let steps: &[Step] = result
            .trace
            .as_ref()
            .map(|t| t.steps.as_slice())
            .unwrap_or(&[]);
        let outcome = outcome_of(&ns, &pkt, &result, steps);
        // The path's decisions and probability: back from its last decision to the first
        // one worked out by an earlier run (paths share their prefixes), then forward.
        let mut fresh: Vec<&Arc<PathNode>> = Vec::new();
        let mut at = br.path();
        let mut known: Option<&Memo> = None;
        while let Some(n) = at {
            if let Some(k) = memo.get(&(Arc::as_ptr(n) as usize)) {
                known = Some(k);
                break;
            }
            fresh.push(n);
            at = n.prev.as_ref();
        }
        let (mut prob, mut path) = match known {
            Some((p, path)) => (p.clone(), path.clone()),
            None => (Dyadic::one(), Arc::new(Vec::new())),
        };
        for n in fresh.into_iter().rev() {
            let (d, p) = decision(base, n)?;
            prob = prob.mul(&p);
            let mut v = Vec::with_capacity(path.len() + 1);
            v.extend(path.iter().cloned());
            decided.insert((d.table.clone(), n.chain.clone(), n.num));
            v.push(Arc::new(d));
            path = Arc::new(v);
            memo.insert(Arc::as_ptr(n) as usize, (prob.clone(), path.clone()));
        }
        let path: Vec<Arc<Decision>> = path.to_vec();
        if let Some(h) = br.path() {
            heads.push(h.clone());
        }
        let mut repeats: BTreeMap<(Table, &str, usize), usize> = BTreeMap::new();
        for (t, c, num) in br.repeats() {
            *repeats.entry((*t, c, *num)).or_insert(1) += 1;
        }
        for ((t, c, num), n) in repeats {
            let note = format!(
                "{t} {c} #{num} was evaluated {n} times on one path; its forced outcome applied to every evaluation, where the kernel draws each time, so that path counts one draw"
            );
            if !notes.contains(&note) {
                notes.push(note);
            }
        }
        let matched = rules_matched(steps);
        let e = merged
            .entry(outcome)
            .or_insert_with(|| (Dyadic::zero(), Vec::new(), Vec::new()));
        e.0 = e.0.add(&prob);
        e.1.push(path);
        e.2.push(matched);
        stack.extend(br.alternatives());
    }
    let mut total = Dyadic::zero();
    let outcomes: Vec<BranchOutcome> = merged
        .into_iter()
        .map(|(outcome, (p, paths, rules_matched))| {
            total = total.add(&p);
            BranchOutcome {
                probability: Probability(p),
                outcome,
                paths,
                rules_matched,
            }
        })
        .collect();
    drop(heads);
    if stopped_at_limit {
        notes.push(format!(
            "stopped at the limit of {MAX_BRANCH_RUNS} runs (MAX_BRANCH_RUNS): the paths past it were not followed, so the outcomes listed are exact but cover a probability of {} ≈ {}, not 1",
            total.fraction(),
            total.decimal(DECIMAL_DIGITS)
        ));
    }
    Ok(BranchReport {
        runs,
        statistic_rules: decided.len(),
        sums_to_one: total.is_one(),
        total: Probability(total),
        outcomes,
        notes,
        run_limit: MAX_BRANCH_RUNS,
        stopped_at_limit,
    })
}

/// Every rule whose matches all matched before the packet's fate, in evaluation order, in
/// the tools' words: `nat KUBE-SVC-X #2: -m statistic … -j KUBE-SEP-Y` (iptables-save's,
/// without `-A CHAIN`) or `ip kube-proxy service-X #1: numgen random mod 3 vmap { … }`
/// (`nft list`'s).
fn rules_matched(steps: &[Step]) -> Vec<String> {
    let mut nft_table = String::new();
    let mut out = Vec::new();
    for st in steps.iter().take_while(|st| !matches!(st, Step::Fate(_))) {
        match st {
            Step::Rules(TraceEvent::Rule {
                table,
                chain,
                num,
                matched: true,
                spec,
                ..
            }) => out.push(format!("{} {chain} #{num}: {spec}", table.name())),
            Step::Nft(NftStep::Enter { table, .. }) => nft_table.clone_from(table),
            Step::Nft(NftStep::Rule {
                chain,
                num,
                matched: true,
                text,
                ..
            }) => out.push(format!("{nft_table} {chain} #{num}: {}", text.trim())),
            _ => {}
        }
    }
    out
}

impl BranchReport {
    /// The report for people.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "all branches: {} outcome{} ({} statistic rule{} branched, {} run{}{})",
            self.outcomes.len(),
            if self.outcomes.len() == 1 { "" } else { "s" },
            self.statistic_rules,
            if self.statistic_rules == 1 { "" } else { "s" },
            self.runs,
            if self.runs == 1 { "" } else { "s" },
            if self.stopped_at_limit {
                ": stopped at the run limit, not every path followed"
            } else {
                ""
            },
        );
        for (i, o) in self.outcomes.iter().enumerate() {
            let _ = writeln!(
                s,
                "  [{}] p = {} ≈ {}",
                i + 1,
                o.probability.fraction(),
                o.probability.decimal()
            );
            let _ = writeln!(s, "      {}", o.outcome.detail);
            let _ = writeln!(s, "      {}", o.outcome.nat_summary());
            for path in &o.paths {
                if path.is_empty() {
                    let _ = writeln!(s, "      path: no random statistic match on the way");
                    continue;
                }
                let parts: Vec<String> = path
                    .iter()
                    .map(|d| {
                        let what = match d.numgen {
                            Some(v) => format!("numgen = {v}"),
                            None if d.matched => "matched".to_string(),
                            None => "not matched".to_string(),
                        };
                        format!(
                            "{} {} #{} {what} ({})",
                            d.table,
                            d.chain,
                            d.rule,
                            d.probability.fraction()
                        )
                    })
                    .collect();
                let _ = writeln!(s, "      path: {}", parts.join(", then "));
            }
        }
        let _ = writeln!(
            s,
            "  total: {} ({})",
            self.total.fraction(),
            if self.sums_to_one {
                "exactly 1"
            } else if self.stopped_at_limit {
                "NOT 1: stopped at the run limit, see the note"
            } else {
                "NOT 1: some outcome was lost"
            }
        );
        for n in &self.notes {
            let _ = writeln!(s, "  note: {n}");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numgen_values_own_their_share_of_the_32_bit_draws() {
        // 2^32 = 3 × 1431655765 + 1: value 0 gets the extra draw.
        assert_eq!(numgen_probability(3, 0), Dyadic::new(1_431_655_766, 32));
        assert_eq!(numgen_probability(3, 1), Dyadic::new(1_431_655_765, 32));
        assert_eq!(numgen_probability(3, 2), Dyadic::new(1_431_655_765, 32));
        assert!(numgen_probability(1, 0).is_one());
        assert_eq!(numgen_probability(64, 63), Dyadic::new(1, 6));
        assert!(numgen_probability(3, 3).is_zero());
        for n in [1u32, 2, 3, 5, 7, 10, 1000, 65_537] {
            let total = (0..n).fold(Dyadic::zero(), |t, v| t.add(&numgen_probability(n, v)));
            assert!(total.is_one(), "n = {n}");
        }
    }
}
