//! Pearson's chi-square test of observed counts against expected probabilities (the rules'
//! probabilities of a Service's endpoints), with its p-value computed in nfsim's own code:
//! the chi-square survival function is the regularized upper incomplete gamma function,
//! `P(X ≥ x) = Q(k/2, x/2)` for `k` degrees of freedom, which the scenario expectations'
//! uniformity test already evaluates ([`chi_square_sf`]: the power series of `P = 1 − Q`
//! below `a + 1`, Legendre's continued fraction with the modified Lentz method above, `ln Γ`
//! by Lanczos). One implementation serves both; this module tests it against closed forms and
//! textbook critical values. Plain `f64` arithmetic in a fixed order: the same inputs give
//! the same bits on every machine with IEEE 754 doubles.

pub use crate::cluster::sim::chi_square_sf;

/// The outcome of a goodness-of-fit test.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChiSquare {
    /// Pearson's statistic `Σ (observed − expected)² / expected`.
    pub statistic: f64,
    /// Degrees of freedom: cells with a non-zero probability, less one.
    pub df: u32,
    /// `P(X ≥ statistic)` under the probabilities.
    pub p_value: f64,
    /// The smallest expected count (below 5 the chi-square approximation is rough).
    pub min_expected: f64,
}

/// Pearson's test of `observed` counts against `probabilities` (same length; they should sum
/// to 1). A cell with probability 0 and a count is impossible under the rules: the statistic
/// is infinite and the p-value 0. `None` without counts or with fewer than two possible cells.
pub fn chi_square(observed: &[u64], probabilities: &[f64]) -> Option<ChiSquare> {
    let n: u64 = observed.iter().sum();
    if n == 0 || observed.len() != probabilities.len() {
        return None;
    }
    let cells = probabilities.iter().filter(|p| **p > 0.0).count();
    if cells < 2 {
        return None;
    }
    let mut stat = 0.0;
    let mut min_expected = f64::INFINITY;
    for (&o, &p) in observed.iter().zip(probabilities) {
        let e = p * n as f64;
        if p <= 0.0 {
            if o > 0 {
                stat = f64::INFINITY;
            }
            continue;
        }
        min_expected = min_expected.min(e);
        let d = o as f64 - e;
        stat += d * d / e;
    }
    let df = u32::try_from(cells - 1).unwrap_or(u32::MAX);
    let p_value = if stat.is_infinite() {
        0.0
    } else {
        chi_square_sf(stat, df).clamp(0.0, 1.0)
    };
    Some(ChiSquare {
        statistic: stat,
        df,
        p_value,
        min_expected,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) {
        assert!((a - b).abs() <= tol * b.abs().max(1e-300), "{a} vs {b}");
    }

    #[test]
    fn survival_function_matches_known_values() {
        // Two degrees of freedom: exactly e^(−x/2).
        for x in [0.5, 2.0, 5.991_464_547_107_979, 20.0] {
            close(chi_square_sf(x, 2), (-x / 2.0).exp(), 1e-12);
        }
        // One degree of freedom: erfc(√(x/2)); x = 1 gives 0.31731050786291415.
        close(chi_square_sf(1.0, 1), 0.317_310_507_862_914_15, 1e-12);
        // The textbook critical values (scipy.stats.chi2.isf).
        close(chi_square_sf(3.841_458_820_694_124, 1), 0.05, 1e-10);
        close(chi_square_sf(11.344_866_730_144_373, 3), 0.01, 1e-10);
        close(chi_square_sf(18.307_038_053_275_146, 10), 0.05, 1e-10);
        close(chi_square_sf(10.827_566_170_662_733, 1), 0.001, 1e-9);
        // Far in the tail (the continued fraction), against closed forms: with 2 degrees of
        // freedom e^(−x/2); with 4, e^(−x/2)(1 + x/2); with 3,
        // erfc(√(x/2)) + √(2x/π) e^(−x/2), whose erfc term is below 1 % of the total at x = 100.
        close(chi_square_sf(100.0, 2), (-50.0_f64).exp(), 1e-12);
        close(chi_square_sf(100.0, 4), (-50.0_f64).exp() * 51.0, 1e-12);
        let main = (200.0 / std::f64::consts::PI).sqrt() * (-50.0_f64).exp();
        let sf3 = chi_square_sf(100.0, 3);
        assert!(sf3 > main && sf3 < main * 1.01, "{sf3} vs {main}");
        assert_eq!(chi_square_sf(0.0, 4), 1.0);
    }

    #[test]
    fn a_fair_spread_passes_and_a_stuck_one_fails() {
        let fair = chi_square(&[34, 33, 33], &[1.0 / 3.0; 3]).unwrap();
        assert_eq!(fair.df, 2);
        assert!(fair.p_value > 0.9, "{fair:?}");
        let stuck = chi_square(&[100, 0, 0], &[1.0 / 3.0; 3]).unwrap();
        close(stuck.statistic, 200.0, 1e-12);
        assert!(stuck.p_value < 1e-40, "{stuck:?}");
        let impossible = chi_square(&[5, 1], &[1.0, 0.0]);
        assert_eq!(impossible, None, "one possible cell: nothing to test");
        let impossible = chi_square(&[5, 1, 1], &[0.5, 0.5, 0.0]).unwrap();
        assert_eq!(impossible.p_value, 0.0);
    }
}
