//! Exact probabilities of `statistic` branches.
//!
//! The kernel stores `--probability p` as `round(p × 2^31)` and matches when a 31-bit draw is
//! below it (`xt_statistic.c`, `statistic_mt`), so every probability along a path of `statistic`
//! rules is an integer over `2^31`, and the probability of a whole path is an integer over a
//! power of two: a *dyadic* rational. [`Dyadic`] holds such a value exactly (an arbitrary-size
//! numerator, a power-of-two denominator), adds and multiplies them, and prints them as a
//! reduced fraction and as a decimal.

use std::cmp::Ordering;
use std::fmt;

/// `num / 2^exp`, exactly, kept reduced (the numerator is odd unless `exp` is 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dyadic {
    /// Little-endian 32-bit limbs, without high zero limbs (zero is the empty vector).
    num: Vec<u32>,
    exp: u32,
}

impl Dyadic {
    /// 0.
    pub fn zero() -> Dyadic {
        Dyadic {
            num: Vec::new(),
            exp: 0,
        }
    }

    /// 1.
    pub fn one() -> Dyadic {
        Dyadic {
            num: vec![1],
            exp: 0,
        }
    }

    /// `num / 2^exp`.
    pub fn new(num: u64, exp: u32) -> Dyadic {
        let mut d = Dyadic {
            num: vec![num as u32, (num >> 32) as u32],
            exp,
        };
        d.reduce();
        d
    }

    /// Whether it is 0.
    pub fn is_zero(&self) -> bool {
        self.num.is_empty()
    }

    /// Whether it is exactly 1.
    pub fn is_one(&self) -> bool {
        self.exp == 0 && self.num == [1]
    }

    /// `self × other`.
    pub fn mul(&self, other: &Dyadic) -> Dyadic {
        if self.is_one() {
            return other.clone();
        }
        if other.is_one() {
            return self.clone();
        }
        let mut out = vec![0u32; self.num.len() + other.num.len()];
        for (i, &a) in self.num.iter().enumerate() {
            let mut carry = 0u64;
            for (j, &b) in other.num.iter().enumerate() {
                let t = u64::from(out[i + j]) + u64::from(a) * u64::from(b) + carry;
                out[i + j] = t as u32;
                carry = t >> 32;
            }
            out[i + other.num.len()] = carry as u32;
        }
        let mut d = Dyadic {
            num: out,
            exp: self.exp + other.exp,
        };
        d.reduce();
        d
    }

    /// `self + other`.
    pub fn add(&self, other: &Dyadic) -> Dyadic {
        if self.is_zero() {
            return other.clone();
        }
        if other.is_zero() {
            return self.clone();
        }
        let exp = self.exp.max(other.exp);
        let a = shl(&self.num, exp - self.exp);
        let b = shl(&other.num, exp - other.exp);
        let mut out = Vec::with_capacity(a.len().max(b.len()) + 1);
        let mut carry = 0u64;
        for i in 0..a.len().max(b.len()) {
            let t = u64::from(a.get(i).copied().unwrap_or(0))
                + u64::from(b.get(i).copied().unwrap_or(0))
                + carry;
            out.push(t as u32);
            carry = t >> 32;
        }
        out.push(carry as u32);
        let mut d = Dyadic { num: out, exp };
        d.reduce();
        d
    }

    /// `1 − self`, for `self` in [0, 1].
    pub fn complement(&self) -> Dyadic {
        let one = shl(&[1], self.exp);
        let mut out = Vec::with_capacity(one.len());
        let mut borrow = 0i64;
        for (i, &o) in one.iter().enumerate() {
            let mut t = i64::from(o) - i64::from(self.num.get(i).copied().unwrap_or(0)) - borrow;
            borrow = 0;
            if t < 0 {
                t += 1 << 32;
                borrow = 1;
            }
            out.push(t as u32);
        }
        debug_assert_eq!(borrow, 0, "complement of a value above 1");
        let mut d = Dyadic {
            num: out,
            exp: self.exp,
        };
        d.reduce();
        d
    }

    /// The denominator's exponent: the value is `numerator / 2^denominator_log2`.
    pub fn denominator_log2(&self) -> u32 {
        self.exp
    }

    /// The numerator in decimal.
    pub fn numerator_string(&self) -> String {
        to_decimal(&self.num)
    }

    /// The denominator (`2^exp`) in decimal.
    pub fn denominator_string(&self) -> String {
        to_decimal(&shl(&[1], self.exp))
    }

    /// The reduced fraction, `1431655765/4294967296` (or `0`, `1`).
    pub fn fraction(&self) -> String {
        if self.exp == 0 {
            return self.numerator_string();
        }
        format!("{}/{}", self.numerator_string(), self.denominator_string())
    }

    /// The value rounded half-up to `digits` decimal places, as `0.333333333488`.
    pub fn decimal(&self, digits: u32) -> String {
        // round(num × 10^digits / 2^exp) = (num × 10^digits + 2^(exp−1)) >> exp.
        let mut scaled = self.num.clone();
        for _ in 0..digits {
            scaled = mul_small(&scaled, 10);
        }
        if self.exp > 0 {
            scaled = add_big(&scaled, &shl(&[1], self.exp - 1));
        }
        let q = shr(&scaled, self.exp);
        let s = to_decimal(&q);
        if digits == 0 {
            return s;
        }
        let d = digits as usize;
        let padded = format!("{s:0>width$}", width = d + 1);
        let (int, frac) = padded.split_at(padded.len() - d);
        format!("{int}.{frac}")
    }

    /// An approximation as `f64` (for sorting and tests), correct to f64 precision however
    /// long the numerator: only its top three limbs count, the rest is below f64's 53 bits.
    pub fn to_f64(&self) -> f64 {
        let skip = self.num.len().saturating_sub(3);
        let mut v = 0f64;
        for &l in self.num[skip..].iter().rev() {
            v = v * 4294967296.0 + f64::from(l);
        }
        // v × 2^(32·skip − exp), scaled in steps so neither factor overflows on the way.
        let mut e = 32 * skip as i64 - i64::from(self.exp);
        while e != 0 {
            let step = e.clamp(-1000, 1000);
            v *= 2f64.powi(step as i32);
            e -= step;
        }
        v
    }

    fn reduce(&mut self) {
        while self.num.last() == Some(&0) {
            self.num.pop();
        }
        if self.num.is_empty() {
            self.exp = 0;
            return;
        }
        let mut tz = 0u32;
        for &l in &self.num {
            if l == 0 {
                tz += 32;
            } else {
                tz += l.trailing_zeros();
                break;
            }
        }
        let k = tz.min(self.exp);
        if k > 0 {
            self.num = shr(&self.num, k);
            self.exp -= k;
        }
    }
}

impl PartialOrd for Dyadic {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Dyadic {
    fn cmp(&self, other: &Self) -> Ordering {
        let exp = self.exp.max(other.exp);
        let a = trim(shl(&self.num, exp - self.exp));
        let b = trim(shl(&other.num, exp - other.exp));
        a.len()
            .cmp(&b.len())
            .then_with(|| a.iter().rev().cmp(b.iter().rev()))
    }
}

impl fmt::Display for Dyadic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.fraction())
    }
}

fn trim(mut v: Vec<u32>) -> Vec<u32> {
    while v.last() == Some(&0) {
        v.pop();
    }
    v
}

fn shl(v: &[u32], bits: u32) -> Vec<u32> {
    let (limbs, rem) = ((bits / 32) as usize, bits % 32);
    let mut out = vec![0u32; limbs];
    let mut carry = 0u32;
    for &l in v {
        if rem == 0 {
            out.push(l);
        } else {
            out.push((l << rem) | carry);
            carry = l >> (32 - rem);
        }
    }
    if carry != 0 {
        out.push(carry);
    }
    out
}

fn shr(v: &[u32], bits: u32) -> Vec<u32> {
    let (limbs, rem) = ((bits / 32) as usize, bits % 32);
    if limbs >= v.len() {
        return Vec::new();
    }
    let src = &v[limbs..];
    let mut out = Vec::with_capacity(src.len());
    for i in 0..src.len() {
        let lo = src[i];
        let hi = src.get(i + 1).copied().unwrap_or(0);
        out.push(if rem == 0 {
            lo
        } else {
            (lo >> rem) | (hi << (32 - rem))
        });
    }
    trim(out)
}

fn mul_small(v: &[u32], m: u32) -> Vec<u32> {
    let mut out = Vec::with_capacity(v.len() + 1);
    let mut carry = 0u64;
    for &l in v {
        let t = u64::from(l) * u64::from(m) + carry;
        out.push(t as u32);
        carry = t >> 32;
    }
    if carry != 0 {
        out.push(carry as u32);
    }
    out
}

fn add_big(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(a.len().max(b.len()) + 1);
    let mut carry = 0u64;
    for i in 0..a.len().max(b.len()) {
        let t = u64::from(a.get(i).copied().unwrap_or(0))
            + u64::from(b.get(i).copied().unwrap_or(0))
            + carry;
        out.push(t as u32);
        carry = t >> 32;
    }
    if carry != 0 {
        out.push(carry as u32);
    }
    out
}

fn to_decimal(v: &[u32]) -> String {
    let mut v = trim(v.to_vec());
    if v.is_empty() {
        return "0".to_string();
    }
    // Repeated division by 10^9, least significant chunk first.
    let mut chunks = Vec::new();
    while !v.is_empty() {
        let mut rem = 0u64;
        for l in v.iter_mut().rev() {
            let cur = (rem << 32) | u64::from(*l);
            *l = (cur / 1_000_000_000) as u32;
            rem = cur % 1_000_000_000;
        }
        chunks.push(rem as u32);
        v = trim(v);
    }
    let mut s = chunks.pop().map(|c| c.to_string()).unwrap_or_default();
    for c in chunks.iter().rev() {
        s.push_str(&format!("{c:09}"));
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn to_f64_of_a_long_product_stays_finite() {
        // 40 factors of 2^31 − 1 over 2^31: numerator and denominator far beyond f64's range.
        let q = Dyadic::new((1u64 << 31) - 1, 31);
        let mut p = Dyadic::one();
        for _ in 0..40 {
            p = p.mul(&q);
        }
        let want = (1.0 - 1.0 / 2f64.powi(31)).powi(40);
        assert!(
            (p.to_f64() - want).abs() < 1e-15,
            "{} vs {want}",
            p.to_f64()
        );
    }

    use super::*;

    #[test]
    fn kube_proxy_three_endpoint_cascade_is_exact_and_sums_to_one() {
        // round(0.3333333333 × 2^31) and round(0.5 × 2^31), as the kernel stores them.
        let p1 = Dyadic::new(715_827_883, 31);
        let p2 = Dyadic::new(1 << 30, 31);
        let a = p1.clone();
        let b = p1.complement().mul(&p2);
        let c = p1.complement().mul(&p2.complement());
        assert_eq!(a.fraction(), "715827883/2147483648");
        assert_eq!(b.fraction(), "1431655765/4294967296");
        assert_eq!(b, c);
        assert_eq!(a.decimal(12), "0.333333333489");
        assert_eq!(b.decimal(12), "0.333333333256");
        assert!(a.add(&b).add(&c).is_one());
        assert!(a > b);
    }

    #[test]
    fn long_paths_stay_exact() {
        // 99 halvings then the rest: the cascade of a 100-endpoint service's last endpoint.
        let half = Dyadic::new(1 << 30, 31);
        let mut p = Dyadic::one();
        for _ in 0..99 {
            p = p.mul(&half);
        }
        assert_eq!(p.denominator_log2(), 99);
        assert_eq!(p.numerator_string(), "1");
        assert_eq!(p.denominator_string(), "633825300114114700748351602688");
        let mut total = p.clone();
        let mut q = Dyadic::one();
        for _ in 0..99 {
            total = total.add(&q.mul(&half));
            q = q.mul(&half);
        }
        assert!(total.is_one(), "{total}");
        assert_eq!(Dyadic::zero().decimal(3), "0.000");
        assert_eq!(Dyadic::one().decimal(2), "1.00");
        assert_eq!(Dyadic::new(1, 1).complement(), Dyadic::new(1, 1));
        assert!((Dyadic::new(715_827_883, 31).to_f64() - 1.0 / 3.0).abs() < 1e-9);
    }
}
