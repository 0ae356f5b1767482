//! Pearson's chi-square test of observed counts against expected probabilities, with the
//! p-value computed here: the chi-square survival function is the regularized upper
//! incomplete gamma function, `P(X ≥ x) = Q(k/2, x/2)` for `k` degrees of freedom.
//!
//! `Q(a, x)` is evaluated by its power series (`P = 1 − Q` converges fast for `x < a + 1`)
//! or by its continued fraction (Legendre's, evaluated with the modified Lentz method, for
//! `x ≥ a + 1`), and `ln Γ(a)` by the Lanczos approximation (g = 7, nine coefficients),
//! accurate to about 1e-15 relative for the arguments a test of a Service's endpoints needs.
//! Everything is plain `f64` arithmetic in a fixed order: the same inputs give the same bits
//! on every machine with IEEE 754 doubles.

/// `ln Γ(x)` for `x > 0` (Lanczos, g = 7, n = 9; reflection below 0.5).
pub fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Γ(x)Γ(1−x) = π / sin(πx).
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

const EPS: f64 = 1e-15;
const MAX_ITER: usize = 10_000;

/// The regularized upper incomplete gamma function `Q(a, x) = Γ(a, x) / Γ(a)`, for `a > 0`,
/// `x ≥ 0`. `Q(a, 0) = 1`.
pub fn gamma_q(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    if x < a + 1.0 {
        1.0 - gamma_p_series(a, x)
    } else {
        gamma_q_fraction(a, x)
    }
}

/// `P(a, x)` by its series: `e^−x x^a / Γ(a+1) · Σ x^n / ((a+1)…(a+n))`.
fn gamma_p_series(a: f64, x: f64) -> f64 {
    let mut term = 1.0 / a;
    let mut sum = term;
    let mut ap = a;
    for _ in 0..MAX_ITER {
        ap += 1.0;
        term *= x / ap;
        sum += term;
        if term.abs() < sum.abs() * EPS {
            break;
        }
    }
    sum * (-x + a * x.ln() - ln_gamma(a)).exp()
}

/// `Q(a, x)` by Legendre's continued fraction
/// `e^−x x^a / Γ(a) · 1/(x+1−a− 1·(1−a)/(x+3−a− 2·(2−a)/(x+5−a− …)))`, modified Lentz.
fn gamma_q_fraction(a: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let mut b = x + 1.0 - a;
    let mut c = 1.0 / TINY;
    let mut d = 1.0 / b;
    let mut h = d;
    for i in 1..MAX_ITER {
        let an = -(i as f64) * (i as f64 - a);
        b += 2.0;
        d = an * d + b;
        if d.abs() < TINY {
            d = TINY;
        }
        c = b + an / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let delta = d * c;
        h *= delta;
        if (delta - 1.0).abs() < EPS {
            break;
        }
    }
    (-x + a * x.ln() - ln_gamma(a)).exp() * h
}

/// The probability that a chi-square variable with `df` degrees of freedom is at least `x`.
pub fn chi_square_sf(x: f64, df: u32) -> f64 {
    if df == 0 {
        return 1.0;
    }
    gamma_q(f64::from(df) / 2.0, x / 2.0).clamp(0.0, 1.0)
}

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
        chi_square_sf(stat, df)
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
    fn ln_gamma_matches_factorials_and_half_integers() {
        // Γ(n) = (n−1)!
        assert!(ln_gamma(1.0).abs() < 1e-14);
        assert!(ln_gamma(2.0).abs() < 1e-14);
        close(ln_gamma(5.0), 24.0_f64.ln(), 1e-14);
        close(ln_gamma(11.0), 3_628_800.0_f64.ln(), 1e-14);
        // Γ(1/2) = √π.
        close(ln_gamma(0.5), std::f64::consts::PI.sqrt().ln(), 1e-13);
        // Γ(0.1) = 9.513507698668731836…
        close(ln_gamma(0.1), 9.513_507_698_668_732_f64.ln(), 1e-13);
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
