//! The aggregate of a sweep: pass rates with Wilson score intervals, and distributions of
//! each client's figures, per combination of `--set` values.
//!
//! Everything here is computed from the run records alone, in run order, so a sweep run in
//! one go and the same sweep run as shards and merged give the same bytes.

use super::{Header, RunRecord};
use serde::Serialize;
use std::collections::BTreeMap;

/// z for a two-sided 95 % interval (the 0.975 quantile of the standard normal).
const Z95: f64 = 1.959_963_984_540_054;

/// Rounds to 6 decimals, so the output reads well and does not print float noise.
fn r6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// The Wilson score interval at 95 % for `k` successes out of `n` trials (Wilson 1927;
/// unlike the normal approximation it stays inside [0, 1] and is sound at 0 and n).
pub fn wilson95(k: u64, n: u64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (k, n) = (k as f64, n as f64);
    let p = k / n;
    let z2 = Z95 * Z95;
    let denom = 1.0 + z2 / n;
    let center = (p + z2 / (2.0 * n)) / denom;
    let half = Z95 * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denom;
    // At k = 0 (k = n) the bound is 0 (1) exactly; the formula leaves float noise there.
    let lo = if k == 0.0 {
        0.0
    } else {
        (center - half).max(0.0)
    };
    let hi = if k == n {
        1.0
    } else {
        (center + half).min(1.0)
    };
    (lo, hi)
}

/// A pass count with its rate and interval.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Rate {
    /// Runs that passed.
    pub passed: u64,
    /// Runs counted.
    pub runs: u64,
    /// passed / runs.
    pub pass_rate: f64,
    /// The 95 % Wilson score interval of the pass rate.
    pub ci95: [f64; 2],
}

impl Rate {
    fn new(passed: u64, runs: u64) -> Rate {
        let (lo, hi) = wilson95(passed, runs);
        Rate {
            passed,
            runs,
            pass_rate: if runs == 0 {
                0.0
            } else {
                r6(passed as f64 / runs as f64)
            },
            ci95: [r6(lo), r6(hi)],
        }
    }
}

/// A distribution of one figure across runs.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Distribution {
    /// Mean.
    pub mean: f64,
    /// Smallest.
    pub min: f64,
    /// Median (nearest rank).
    pub p50: f64,
    /// 90th percentile (nearest rank).
    pub p90: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Distribution {
    /// The distribution of `values` (empty: all zero).
    pub fn of(mut values: Vec<f64>) -> Distribution {
        if values.is_empty() {
            return Distribution {
                mean: 0.0,
                min: 0.0,
                p50: 0.0,
                p90: 0.0,
                p99: 0.0,
                max: 0.0,
            };
        }
        values.sort_by(f64::total_cmp);
        let n = values.len();
        // Nearest rank: the smallest value with at least p of the values at or below it.
        let rank = |p: f64| values[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
        Distribution {
            mean: r6(values.iter().sum::<f64>() / n as f64),
            min: r6(values[0]),
            p50: r6(rank(0.5)),
            p90: r6(rank(0.9)),
            p99: r6(rank(0.99)),
            max: r6(values[n - 1]),
        }
    }
}

/// One expectation's pass rate.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ExpectationRate {
    /// The expectation's name.
    pub name: String,
    /// Its pass rate.
    #[serde(flatten)]
    pub rate: Rate,
}

/// The distributions of one client's figures.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClientDistributions {
    /// The client.
    pub client: String,
    /// Seconds during which the client got no answers ([`crate::cluster::sim::ClientFigures`]).
    pub blackholed_secs: Distribution,
    /// Queries failed.
    pub failed: Distribution,
    /// Queries timed out.
    pub timed_out: Distribution,
    /// Queries answered.
    pub answered: Distribution,
}

/// The aggregate of one combination of `--set` values.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ComboAggregate {
    /// The combination's index.
    pub combo: usize,
    /// Its values.
    pub set: BTreeMap<String, String>,
    /// Runs in which every expectation passed.
    #[serde(flatten)]
    pub rate: Rate,
    /// Runs that stopped with an error (counted as failed).
    pub errors: u64,
    /// Per expectation.
    pub expectations: Vec<ExpectationRate>,
    /// Per client.
    pub figures: Vec<ClientDistributions>,
}

/// The last line of a sweep's output.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Aggregate {
    /// Always `"aggregate"`.
    pub kind: &'static str,
    /// Runs counted.
    pub runs: u64,
    /// Per combination, in order.
    pub combos: Vec<ComboAggregate>,
}

/// Aggregates `runs` (any subset of the sweep `header` describes, e.g. one shard).
pub fn aggregate(header: &Header, runs: &[RunRecord]) -> Aggregate {
    let mut combos = Vec::new();
    for (ci, c) in header.combos.iter().enumerate() {
        let mine: Vec<&RunRecord> = runs.iter().filter(|r| r.combo == ci).collect();
        let n = mine.len() as u64;
        let passed = mine.iter().filter(|r| r.passed).count() as u64;
        let errors = mine.iter().filter(|r| r.error.is_some()).count() as u64;
        let expectations = c
            .expectations
            .iter()
            .enumerate()
            .map(|(ei, name)| {
                let ok = mine
                    .iter()
                    .filter(|r| r.error.is_none() && !r.failed.contains(&ei))
                    .count() as u64;
                ExpectationRate {
                    name: name.clone(),
                    rate: Rate::new(ok, n),
                }
            })
            .collect();
        let figures = c
            .clients
            .iter()
            .enumerate()
            .map(|(k, name)| {
                let col = |f: &dyn Fn(&crate::cluster::sim::ClientFigures) -> f64| {
                    Distribution::of(
                        mine.iter()
                            .filter_map(|r| r.clients.get(k))
                            .map(f)
                            .collect(),
                    )
                };
                ClientDistributions {
                    client: name.clone(),
                    blackholed_secs: col(&|f| f.blackholed_ns as f64 / 1e9),
                    failed: col(&|f| f.failed as f64),
                    timed_out: col(&|f| f.timed_out as f64),
                    answered: col(&|f| f.answered as f64),
                }
            })
            .collect();
        combos.push(ComboAggregate {
            combo: ci,
            set: c.set.clone(),
            rate: Rate::new(passed, n),
            errors,
            expectations,
            figures,
        });
    }
    Aggregate {
        kind: "aggregate",
        runs: runs.len() as u64,
        combos,
    }
}

/// The aggregate as a table for people (the sweep prints it on stderr).
pub fn render(a: &Aggregate) -> String {
    let pct = |x: f64| format!("{:.2}%", x * 100.0);
    let mut s = String::new();
    for c in &a.combos {
        let set: Vec<String> = c.set.iter().map(|(k, v)| format!("{k}={v}")).collect();
        s.push_str(&format!(
            "combination {}{}: {} runs, all expectations passed in {} [{} – {}]{}\n",
            c.combo,
            if set.is_empty() {
                String::new()
            } else {
                format!(" ({})", set.join(" "))
            },
            c.rate.runs,
            pct(c.rate.pass_rate),
            pct(c.rate.ci95[0]),
            pct(c.rate.ci95[1]),
            if c.errors > 0 {
                format!(", {} errors", c.errors)
            } else {
                String::new()
            }
        ));
        for x in &c.expectations {
            s.push_str(&format!(
                "  {:>6} [{} – {}]  {}\n",
                pct(x.rate.pass_rate),
                pct(x.rate.ci95[0]),
                pct(x.rate.ci95[1]),
                x.name
            ));
        }
        for f in &c.figures {
            let b = &f.blackholed_secs;
            s.push_str(&format!(
                "  client {}: blackholed s mean {} p50 {} p90 {} p99 {} max {}; failed mean {} p50 {} max {}\n",
                f.client, b.mean, b.p50, b.p90, b.p99, b.max, f.failed.mean, f.failed.p50, f.failed.max
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_interval_matches_the_textbook_values() {
        // 50/100: 0.4038 – 0.5962 (Newcombe 1998, table I style values).
        let (lo, hi) = wilson95(50, 100);
        assert!(
            (lo - 0.4038).abs() < 1e-4 && (hi - 0.5962).abs() < 1e-4,
            "{lo} {hi}"
        );
        // 0/10 stays at 0 and reaches 0.2775.
        let (lo, hi) = wilson95(0, 10);
        assert_eq!(lo, 0.0);
        assert!((hi - 0.2775).abs() < 1e-4, "{hi}");
        let (lo, hi) = wilson95(10, 10);
        assert!((lo - 0.7225).abs() < 1e-4 && hi == 1.0, "{lo} {hi}");
    }

    #[test]
    fn nearest_rank_percentiles() {
        let d = Distribution::of((1..=100).map(f64::from).collect());
        assert_eq!(
            (d.min, d.p50, d.p90, d.p99, d.max),
            (1.0, 50.0, 90.0, 99.0, 100.0)
        );
        assert_eq!(d.mean, 50.5);
        let d = Distribution::of(vec![3.0]);
        assert_eq!((d.p50, d.p99), (3.0, 3.0));
    }
}
