//! `nfsim trace --all-branches`: every reachable outcome of the `statistic` matches a packet
//! meets, with its exact probability.
//!
//! **How.** A `-m statistic --mode random --probability p` match is stored as
//! `t = round(p × 2^31)` and matches when a 31-bit draw is below `t` (`statistic_mt` in
//! `net/netfilter/xt_statistic.c`): exactly with probability `t / 2^31`. Its outcome can be
//! forced without touching the engine by rewriting the rule: `t = 2^31` (printed `1.00000000000`)
//! always matches, `t = 0` never does (`!` inverts both). The explorer runs the packet through
//! a fresh copy of the node, finds the first rule with a random draw on its path that is not
//! forced yet, and branches on it depth-first (matched first): one copy with the rule forced
//! to match, with probability `P(match)`, one forced not to, with `1 − P(match)`. A path whose
//! every random rule is forced is an outcome; its probability is the product of its
//! decisions' probabilities. Branches of probability zero (`--probability 0` or `1`) are not
//! followed. Outcomes with the same [`Outcome`] (verdict, final tuple, interface, NAT) are
//! merged and their probabilities added; the sum over all outcomes is checked to be exactly 1.
//!
//! `P(match)` of a rule with several random statistic matches is the product over them (each
//! `t/2^31`, or `1 − t/2^31` when inverted).
//!
//! For kube-proxy's cascade of n endpoints (probabilities 1/n, 1/(n−1), …, 1/2, then the last
//! endpoint unconditionally) this gives n outcomes, each 1/n up to the quantization: for three,
//! 715827883/2147483648 ≈ 0.333333333489 and twice 1431655765/4294967296 ≈ 0.333333333256.
//!
//! **Limits, stated.** `--mode nth` matches are deterministic (they follow the rule's packet
//! counter, which is 0 for the traced packet in a fresh namespace) and are not branched. A rule
//! evaluated twice on one path (reached from two hooks) is forced alike both times, where the
//! kernel would draw twice; the report notes it. Other random choices (a `--random-fully` NAT
//! port) come from the node's seeded stream, the same in every branch. At most
//! [`MAX_BRANCH_RUNS`] runs.

use super::dyadic::Dyadic;
use super::trace::{run_once, Outcome, RuleRef};
use super::ExplainError;
use indexmap::IndexMap;
use serde::Serialize;
use sim_core::Packet;
use sim_netfilter::netns::{Ingress, Netns};
use sim_netfilter::rule::{Rule, StatisticMode};
use sim_netfilter::{rule_spec, Match};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The most runs `--all-branches` makes for one packet (each run is one path prefix).
pub const MAX_BRANCH_RUNS: usize = 4096;

/// `round(p × 2^31)` for p = 1: the stored probability of a match that always matches.
const ALWAYS: u32 = 0x8000_0000;

/// Digits after the point in printed decimals.
const DECIMAL_DIGITS: u32 = 12;

/// An exact probability, printed every way a reader may want it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Probability {
    /// The reduced fraction, `1431655765/4294967296` (or `1`).
    pub fraction: String,
    /// Its numerator, in decimal.
    pub numerator: String,
    /// Its denominator (a power of two), in decimal.
    pub denominator: String,
    /// log2 of the denominator.
    pub denominator_log2: u32,
    /// Rounded to 12 decimal places.
    pub decimal: String,
}

impl From<&Dyadic> for Probability {
    fn from(d: &Dyadic) -> Self {
        Probability {
            fraction: d.fraction(),
            numerator: d.numerator_string(),
            denominator: d.denominator_string(),
            denominator_log2: d.denominator_log2(),
            decimal: d.decimal(DECIMAL_DIGITS),
        }
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
    /// Whether it matched on this path.
    pub matched: bool,
    /// The probability of this decision.
    pub probability: Probability,
    /// The rule as iptables-save prints it.
    pub spec: String,
}

/// One distinct outcome and how likely it is.
#[derive(Clone, Debug, Serialize)]
pub struct BranchOutcome {
    /// The exact probability (the sum over its paths).
    pub probability: Probability,
    /// What happens.
    pub outcome: Outcome,
    /// The paths leading to it, each the decisions taken, in evaluation order.
    pub paths: Vec<Vec<Decision>>,
    /// For each path (same order), every rule whose matches all matched on the way, in
    /// evaluation order: `nat KUBE-SVC-X #2: -m statistic … -j KUBE-SEP-Y`.
    pub rules_matched: Vec<Vec<String>>,
    #[serde(skip)]
    exact: Dyadic,
}

impl BranchOutcome {
    /// The exact probability.
    pub fn exact(&self) -> &Dyadic {
        &self.exact
    }
}

/// Every reachable outcome of the statistic matches.
#[derive(Clone, Debug, Serialize)]
pub struct BranchReport {
    /// Runs made (path prefixes explored).
    pub runs: usize,
    /// Distinct statistic rules branched on.
    pub statistic_rules: usize,
    /// The outcomes, in the order first reached (matched branches first).
    pub outcomes: Vec<BranchOutcome>,
    /// The sum of the outcomes' probabilities.
    pub total: Probability,
    /// Whether that sum is exactly 1.
    pub sums_to_one: bool,
    /// Caveats met while exploring.
    pub notes: Vec<String>,
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

/// `rule` with its random statistic matches forced to all match (`matched`) or all fail.
fn forced_rule(rule: &Rule, matched: bool) -> Rule {
    let mut r = rule.clone();
    for m in &mut r.matches {
        if let Match::Statistic(s) = m {
            if let StatisticMode::Random { probability } = &mut s.mode {
                // Non-inverted: matches iff draw < t. Inverted: matches iff draw >= t.
                *probability = if matched != s.inv { ALWAYS } else { 0 };
            }
        }
    }
    r
}

fn base_rule<'a>(base: &'a Netns, r: &RuleRef) -> Option<&'a Rule> {
    base.ruleset()
        .rules(r.table, &r.chain)
        .and_then(|rules| rules.get(r.num.wrapping_sub(1)))
}

/// Rewrites the forced rules of a copy of `base` in place (`-D CHAIN N` then `-I CHAIN N …`,
/// one `--noflush` restore per table).
fn apply_forcing(
    ns: &mut Netns,
    base: &Netns,
    forced: &[(RuleRef, bool)],
) -> Result<(), ExplainError> {
    let mut per_table: BTreeMap<&'static str, String> = BTreeMap::new();
    for (r, matched) in forced {
        let rule = base_rule(base, r).ok_or_else(|| {
            ExplainError::Netns(format!(
                "internal: traced rule {} {} #{} is not in the ruleset",
                r.table, r.chain, r.num
            ))
        })?;
        let text = per_table.entry(r.table.name()).or_default();
        let _ = writeln!(text, "-D {} {}", r.chain, r.num);
        let _ = writeln!(
            text,
            "-I {} {} {}",
            r.chain,
            r.num,
            rule_spec(&forced_rule(rule, *matched))
        );
    }
    for (table, cmds) in per_table {
        let text = format!("*{table}\n{cmds}COMMIT\n");
        ns.restore(&text, true).map_err(|e| {
            ExplainError::Netns(format!(
                "internal: forcing statistic rules failed: {e}\n{text}"
            ))
        })?;
    }
    Ok(())
}

/// Explores every statistic branch of `pkt` entering `base` at `ingress`.
pub(crate) fn explore(
    base: &Netns,
    pkt: Packet,
    ingress: Ingress,
    now: sim_core::SimTime,
) -> Result<BranchReport, ExplainError> {
    struct Leaf {
        outcome: Outcome,
        prob: Dyadic,
        path: Vec<(RuleRef, bool, Dyadic)>,
        matched: Vec<String>,
    }
    // Depth-first with an explicit stack: (forced decisions in order, their probabilities,
    // the path's probability).
    type Pending = (Vec<(RuleRef, bool)>, Vec<Dyadic>, Dyadic);
    let mut stack: Vec<Pending> = vec![(Vec::new(), Vec::new(), Dyadic::one())];
    let mut leaves: Vec<Leaf> = Vec::new();
    let mut runs = 0usize;
    let mut branched: BTreeMap<RuleRef, ()> = BTreeMap::new();
    let mut notes: Vec<String> = Vec::new();
    while let Some((forced, probs, prob)) = stack.pop() {
        runs += 1;
        if runs > MAX_BRANCH_RUNS {
            return Err(ExplainError::TooManyBranches {
                limit: MAX_BRANCH_RUNS,
            });
        }
        let mut ns = base.clone();
        apply_forcing(&mut ns, base, &forced)?;
        let run = run_once(&mut ns, pkt, ingress, now);
        let is_forced = |r: &RuleRef| forced.iter().any(|(f, _)| f == r);
        match run.stat_rules.iter().find(|r| !is_forced(r)) {
            None => {
                for (r, _) in &forced {
                    let n = run.stat_rules.iter().filter(|x| *x == r).count();
                    if n > 1 {
                        let note = format!(
                            "{} {} #{} was evaluated {n} times on one path; its forced outcome applied to every evaluation, where the kernel draws each time, so that path counts one draw",
                            r.table, r.chain, r.num
                        );
                        if !notes.contains(&note) {
                            notes.push(note);
                        }
                    }
                }
                let matched = run
                    .result
                    .trace
                    .as_ref()
                    .map(|t| {
                        t.steps
                            .iter()
                            .take_while(|st| !matches!(st, sim_netfilter::netns::Step::Fate(_)))
                            .filter_map(|st| match st {
                                sim_netfilter::netns::Step::Rules(
                                    sim_netfilter::TraceEvent::Rule {
                                        table,
                                        chain,
                                        num,
                                        matched: true,
                                        spec,
                                        ..
                                    },
                                ) => Some(format!("{} {chain} #{num}: {spec}", table.name())),
                                _ => None,
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                leaves.push(Leaf {
                    outcome: run.outcome,
                    matched,
                    prob,
                    path: forced
                        .into_iter()
                        .zip(probs)
                        .map(|((r, m), p)| (r, m, p))
                        .collect(),
                });
            }
            Some(r) => {
                let rule = base_rule(base, r).ok_or_else(|| {
                    ExplainError::Netns(format!(
                        "internal: traced rule {} {} #{} is not in the ruleset",
                        r.table, r.chain, r.num
                    ))
                })?;
                branched.insert(r.clone(), ());
                let p = match_probability(rule);
                let q = p.complement();
                // Pushed second, popped first: the matched branch is explored first.
                for (matched, pp) in [(false, q), (true, p)] {
                    if pp.is_zero() {
                        continue;
                    }
                    let mut f = forced.clone();
                    f.push((r.clone(), matched));
                    let mut ps = probs.clone();
                    ps.push(pp.clone());
                    stack.push((f, ps, prob.mul(&pp)));
                }
            }
        }
    }
    // Merge equal outcomes, in the order first reached.
    type Merged = (Dyadic, Vec<Vec<Decision>>, Vec<Vec<String>>);
    let mut merged: IndexMap<Outcome, Merged> = IndexMap::new();
    for leaf in leaves {
        let decisions = leaf
            .path
            .iter()
            .map(|(r, matched, p)| Decision {
                table: r.table.name().to_string(),
                chain: r.chain.clone(),
                rule: r.num,
                matched: *matched,
                probability: Probability::from(p),
                spec: base_rule(base, r).map(rule_spec).unwrap_or_default(),
            })
            .collect();
        let e = merged
            .entry(leaf.outcome)
            .or_insert_with(|| (Dyadic::zero(), Vec::new(), Vec::new()));
        e.0 = e.0.add(&leaf.prob);
        e.1.push(decisions);
        e.2.push(leaf.matched);
    }
    let mut total = Dyadic::zero();
    let outcomes: Vec<BranchOutcome> = merged
        .into_iter()
        .map(|(outcome, (p, paths, rules_matched))| {
            total = total.add(&p);
            BranchOutcome {
                probability: Probability::from(&p),
                outcome,
                paths,
                rules_matched,
                exact: p,
            }
        })
        .collect();
    Ok(BranchReport {
        runs,
        statistic_rules: branched.len(),
        sums_to_one: total.is_one(),
        total: Probability::from(&total),
        outcomes,
        notes,
    })
}

impl BranchReport {
    /// The report for people.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "all branches: {} outcome{} ({} statistic rule{} branched, {} run{})",
            self.outcomes.len(),
            if self.outcomes.len() == 1 { "" } else { "s" },
            self.statistic_rules,
            if self.statistic_rules == 1 { "" } else { "s" },
            self.runs,
            if self.runs == 1 { "" } else { "s" },
        );
        for (i, o) in self.outcomes.iter().enumerate() {
            let _ = writeln!(
                s,
                "  [{}] p = {} ≈ {}",
                i + 1,
                o.probability.fraction,
                o.probability.decimal
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
                        format!(
                            "{} {} #{} {} ({})",
                            d.table,
                            d.chain,
                            d.rule,
                            if d.matched { "matched" } else { "not matched" },
                            d.probability.fraction
                        )
                    })
                    .collect();
                let _ = writeln!(s, "      path: {}", parts.join(", then "));
            }
        }
        let _ = writeln!(
            s,
            "  total: {} ({})",
            self.total.fraction,
            if self.sums_to_one {
                "exactly 1"
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
