//! [`Selection`]: the exact probabilities with which a chain's `statistic` rules pick their
//! targets, as the kernel draws them.
//!
//! The kernel keeps `--probability p` as `t = round(p × 2^31)` and matches when a 31-bit draw
//! is below `t` (`statistic_mt`, `docs/kernel-model.md §7`). Walking a chain top to bottom,
//! rule *i* is taken with probability `reach_i × P(match_i)`, where `reach_i` is the product of
//! `1 − P(match_j)` over the earlier rules that decide: exactly the products `nfsim trace
//! --all-branches` forms along each path, with the same [`Dyadic`] arithmetic and the same
//! per-rule `P(match)` ([`crate::explain::branches`]), so the figures are identical to the
//! ones it prints.
//!
//! The walk is over the chain alone, so it refuses a rule whose outcome depends on the packet
//! (an address, port, mark, `recent` or `conntrack` match), naming the rule: follow a packet
//! with `nfsim trace --all-branches` for those. Two kinds of rules are let through because they
//! cannot change which later rule is taken: comments, and jumps to a chain that only marks
//! or logs and returns (kube-proxy's `KUBE-MARK-MASQ`, whatever the jump's matches).

use super::TestkitError;
use crate::explain::branches::match_probability;
use crate::explain::Dyadic;
use sim_netfilter::rule::{IpMatch, Rule, Target};
use sim_netfilter::{rule_spec, Match, Ruleset, Table};

/// One rule of the chain that can take the packet, and how likely it is to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    /// 1-based rule number in the chain.
    pub rule: usize,
    /// The target as iptables-save prints it after `-j`/`-g` (`KUBE-SEP-…`, `DNAT`,
    /// `RETURN`, …).
    pub target: String,
    /// The DNAT destination of the target chain (`10.244.1.5:53`), when the target is a
    /// chain whose first DNAT rule gives one (kube-proxy's `KUBE-SEP-…` chains).
    pub endpoint: Option<String>,
    /// The exact probability that this rule takes the packet.
    pub probability: Dyadic,
}

/// What a chain does with a new packet, by exact probability.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    /// The chain.
    pub chain: String,
    /// The rules that can take the packet, in chain order.
    pub choices: Vec<Choice>,
    /// The probability that no rule takes it (it returns to the calling chain, or meets the
    /// policy of a built-in chain).
    pub fall_through: Dyadic,
}

impl Selection {
    /// The probability of each choice as an `f64` (for tolerances), in chain order.
    pub fn probabilities(&self) -> Vec<f64> {
        self.choices
            .iter()
            .map(|c| c.probability.to_f64())
            .collect()
    }

    /// The total probability of the choices whose endpoint (else target) is `what`.
    pub fn of(&self, what: &str) -> Dyadic {
        self.choices
            .iter()
            .filter(|c| c.endpoint.as_deref() == Some(what) || c.target == what)
            .fold(Dyadic::zero(), |acc, c| acc.add(&c.probability))
    }

    /// Whether the choices and the fall-through add up to exactly 1 (always, by
    /// construction: a check on the arithmetic).
    pub fn sums_to_one(&self) -> bool {
        self.choices
            .iter()
            .fold(self.fall_through.clone(), |acc, c| acc.add(&c.probability))
            .is_one()
    }
}

/// Whether a chain only marks or logs and returns: jumping to it never decides anything.
fn pass_through(rs: &Ruleset, table: Table, chain: &str, depth: u32) -> bool {
    if depth > 8 {
        return false;
    }
    let Some(rules) = rs.rules(table, chain) else {
        return false;
    };
    rules.iter().all(|r| match &r.target {
        Target::None | Target::Mark { .. } | Target::Connmark(_) | Target::Log(_) => true,
        Target::Return => r.ip == IpMatch::default() && r.matches.is_empty(),
        Target::Jump(c) => pass_through(rs, table, &c.name, depth + 1),
        _ => false,
    })
}

/// The DNAT destination of the first DNAT rule of `chain`.
fn endpoint_of(rs: &Ruleset, table: Table, chain: &str) -> Option<String> {
    let rules = rs.rules(table, chain)?;
    rules.iter().find_map(|r| match &r.target {
        Target::Dnat(_) => {
            let spec = rule_spec(r);
            let (_, to) = spec.split_once("--to-destination ")?;
            Some(to.split_whitespace().next()?.to_string())
        }
        _ => None,
    })
}

fn decides_alone(rule: &Rule) -> bool {
    rule.ip == IpMatch::default()
        && rule
            .matches
            .iter()
            .all(|m| matches!(m, Match::Statistic(_) | Match::Comment(_)))
}

/// The selection of `chain` in `table` of `rs` (see the module documentation).
pub(crate) fn selection_of(
    rs: &Ruleset,
    table: Table,
    chain: &str,
) -> Result<Selection, TestkitError> {
    let rules = rs.rules(table, chain).ok_or_else(|| TestkitError::Input {
        what: format!("chain {chain}"),
        message: format!("no chain {chain:?} in the {} table", table.name()),
    })?;
    let mut reach = Dyadic::one();
    let mut choices = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        let jump = rule.jump_target();
        if jump.is_some_and(|c| pass_through(rs, table, c, 0)) || rule.target == Target::None {
            continue;
        }
        if !decides_alone(rule) {
            return Err(TestkitError::Input {
                what: format!("{} {chain} rule {}", table.name(), i + 1),
                message: format!(
                    "`{}` depends on the packet, so the chain alone does not fix the selection; trace a packet with `nfsim trace --all-branches` instead",
                    rule_spec(rule)
                ),
            });
        }
        let p = match_probability(rule);
        let taken = reach.mul(&p);
        reach = reach.mul(&p.complement());
        if !taken.is_zero() {
            choices.push(Choice {
                rule: i + 1,
                target: rule.target.list_name().to_string(),
                endpoint: jump.and_then(|c| endpoint_of(rs, table, c)),
                probability: taken,
            });
        }
        if reach.is_zero() {
            break;
        }
    }
    Ok(Selection {
        chain: chain.to_string(),
        choices,
        fall_through: reach,
    })
}
