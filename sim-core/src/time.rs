//! Simulated time.
//!
//! [`SimTime`] is an instant on the simulated clock and [`SimDuration`] a span of it, both whole
//! nanoseconds in a `u64` (enough for 584 years). Nothing in nfsim reads the wall clock: every
//! call that depends on time is handed a `SimTime`.
//!
//! Durations are written the way people write them in scenario files and the way the timeline
//! prints them: `30s`, `250ms`, `2m`, `1h30m`, `1.5s`, `2s500ms`. [`SimDuration`]'s `Display` is
//! the canonical form and parses back to the same value.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};
use std::str::FromStr;

/// Nanoseconds in one microsecond.
pub const NANOS_PER_MICRO: u64 = 1_000;
/// Nanoseconds in one millisecond.
pub const NANOS_PER_MILLI: u64 = 1_000_000;
/// Nanoseconds in one second.
pub const NANOS_PER_SEC: u64 = 1_000_000_000;

/// A span of simulated time, in whole nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimDuration(u64);

/// An instant on the simulated clock: nanoseconds since the start of the simulation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimTime(u64);

impl SimDuration {
    /// The empty span.
    pub const ZERO: SimDuration = SimDuration(0);
    /// The longest representable span.
    pub const MAX: SimDuration = SimDuration(u64::MAX);

    /// A span of `ns` nanoseconds.
    pub const fn from_nanos(ns: u64) -> Self {
        SimDuration(ns)
    }
    /// A span of `us` microseconds (saturating).
    pub const fn from_micros(us: u64) -> Self {
        SimDuration(us.saturating_mul(NANOS_PER_MICRO))
    }
    /// A span of `ms` milliseconds (saturating).
    pub const fn from_millis(ms: u64) -> Self {
        SimDuration(ms.saturating_mul(NANOS_PER_MILLI))
    }
    /// A span of `s` seconds (saturating).
    pub const fn from_secs(s: u64) -> Self {
        SimDuration(s.saturating_mul(NANOS_PER_SEC))
    }
    /// The span in nanoseconds.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// The span in whole milliseconds (floor).
    pub const fn as_millis(self) -> u64 {
        self.0 / NANOS_PER_MILLI
    }
    /// The span in whole seconds (floor).
    pub const fn as_secs(self) -> u64 {
        self.0 / NANOS_PER_SEC
    }
    /// The span in seconds as a float (for reports only, never for decisions).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / NANOS_PER_SEC as f64
    }
    /// `self + rhs`, or `None` on overflow.
    pub const fn checked_add(self, rhs: SimDuration) -> Option<SimDuration> {
        match self.0.checked_add(rhs.0) {
            Some(v) => Some(SimDuration(v)),
            None => None,
        }
    }
    /// `self - rhs`, or zero if `rhs` is longer.
    pub const fn saturating_sub(self, rhs: SimDuration) -> SimDuration {
        SimDuration(self.0.saturating_sub(rhs.0))
    }
    /// `self * n` (saturating).
    pub const fn saturating_mul(self, n: u64) -> SimDuration {
        SimDuration(self.0.saturating_mul(n))
    }
    /// Whether the span is empty.
    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }
}

impl SimTime {
    /// The start of every simulation.
    pub const ZERO: SimTime = SimTime(0);
    /// The end of time: later than anything a simulation schedules.
    pub const MAX: SimTime = SimTime(u64::MAX);

    /// The instant `ns` nanoseconds after the start.
    pub const fn from_nanos(ns: u64) -> Self {
        SimTime(ns)
    }
    /// The instant `ms` milliseconds after the start.
    pub const fn from_millis(ms: u64) -> Self {
        SimTime(ms.saturating_mul(NANOS_PER_MILLI))
    }
    /// The instant `s` seconds after the start.
    pub const fn from_secs(s: u64) -> Self {
        SimTime(s.saturating_mul(NANOS_PER_SEC))
    }
    /// Nanoseconds since the start.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// The time elapsed since the start, as a span.
    pub const fn since_start(self) -> SimDuration {
        SimDuration(self.0)
    }
    /// `self + d`, saturating at [`SimTime::MAX`].
    pub const fn saturating_add(self, d: SimDuration) -> SimTime {
        SimTime(self.0.saturating_add(d.0))
    }
    /// `self + d`, or `None` on overflow.
    pub const fn checked_add(self, d: SimDuration) -> Option<SimTime> {
        match self.0.checked_add(d.0) {
            Some(v) => Some(SimTime(v)),
            None => None,
        }
    }
    /// The span from `earlier` to `self`, or zero if `earlier` is later.
    pub const fn saturating_since(self, earlier: SimTime) -> SimDuration {
        SimDuration(self.0.saturating_sub(earlier.0))
    }
    /// `HH:MM:SS.mmm` since the start, as the timeline prints it (hours grow past 99).
    pub fn hms(self) -> HmsDisplay {
        HmsDisplay(self)
    }
}

/// `Display` adapter returned by [`SimTime::hms`].
#[derive(Clone, Copy, Debug)]
pub struct HmsDisplay(SimTime);

impl fmt::Display for HmsDisplay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0 .0;
        let ms_total = ns / NANOS_PER_MILLI;
        let ms = ms_total % 1000;
        let s_total = ms_total / 1000;
        let (h, m, s) = (s_total / 3600, (s_total / 60) % 60, s_total % 60);
        write!(f, "{h:02}:{m:02}:{s:02}.{ms:03}")
    }
}

impl Add<SimDuration> for SimTime {
    type Output = SimTime;
    /// Saturates at [`SimTime::MAX`] rather than wrapping.
    fn add(self, rhs: SimDuration) -> SimTime {
        self.saturating_add(rhs)
    }
}

impl AddAssign<SimDuration> for SimTime {
    fn add_assign(&mut self, rhs: SimDuration) {
        *self = *self + rhs;
    }
}

impl Sub<SimTime> for SimTime {
    type Output = SimDuration;
    /// Saturates at zero when `rhs` is later.
    fn sub(self, rhs: SimTime) -> SimDuration {
        self.saturating_since(rhs)
    }
}

impl Add for SimDuration {
    type Output = SimDuration;
    /// Saturates at [`SimDuration::MAX`].
    fn add(self, rhs: SimDuration) -> SimDuration {
        SimDuration(self.0.saturating_add(rhs.0))
    }
}

impl fmt::Display for SimDuration {
    /// Canonical form: `0s`, `250ms`, `30s`, `1h30m`, `2s500ms`, `1m0s15us`… Hours, minutes and
    /// seconds are printed while anything remains above a second; the sub-second rest is
    /// printed in the largest unit of ms/us/ns that divides it exactly.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0;
        if ns == 0 {
            return f.write_str("0s");
        }
        let secs = ns / NANOS_PER_SEC;
        let sub = ns % NANOS_PER_SEC;
        let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
        let mut out = String::new();
        if h > 0 {
            out.push_str(&format!("{h}h"));
        }
        if m > 0 {
            out.push_str(&format!("{m}m"));
        }
        if s > 0 || (secs > 0 && sub != 0 && (h > 0 || m > 0)) {
            out.push_str(&format!("{s}s"));
        }
        if sub != 0 {
            if sub % NANOS_PER_MILLI == 0 {
                out.push_str(&format!("{}ms", sub / NANOS_PER_MILLI));
            } else if sub % NANOS_PER_MICRO == 0 {
                out.push_str(&format!("{}us", sub / NANOS_PER_MICRO));
            } else {
                out.push_str(&format!("{sub}ns"));
            }
        }
        f.pad(&out)
    }
}

impl fmt::Display for SimTime {
    /// The time since the start in [`SimDuration`]'s canonical form (`1m30s`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.since_start(), f)
    }
}

/// Why a duration did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationParseError {
    /// The text was empty.
    #[error("empty duration: expected a number with a unit, such as 30s, 250ms, 2m or 1h30m")]
    Empty,
    /// A number was not followed by a unit.
    #[error("missing unit after {number:?} in {input:?}: expected one of h, m, s, ms, us, ns (as in 30s, 250ms, 2m, 1h30m)")]
    MissingUnit {
        /// The whole text.
        input: String,
        /// The number that lacked a unit.
        number: String,
    },
    /// A unit was not one of h, m, s, ms, us, ns.
    #[error("unknown unit {unit:?} in {input:?}: expected one of h, m, s, ms, us, ns")]
    UnknownUnit {
        /// The whole text.
        input: String,
        /// The unit found.
        unit: String,
    },
    /// Something other than a digit stood where a number was expected.
    #[error("expected a number at {rest:?} in {input:?} (durations look like 30s, 250ms, 2m, 1h30m, 1.5s)")]
    ExpectedNumber {
        /// The whole text.
        input: String,
        /// Where the number was expected.
        rest: String,
    },
    /// The value is larger than 584 years or finer than a nanosecond.
    #[error("duration {input:?} is out of range: at most 584 years, in whole nanoseconds")]
    OutOfRange {
        /// The whole text.
        input: String,
    },
}

impl FromStr for SimDuration {
    type Err = DurationParseError;

    /// Parses a sequence of `<number><unit>` parts (`1h30m`, `2s500ms`, `1.5s`). Numbers may
    /// have a decimal fraction; the result must be a whole number of nanoseconds. Negative
    /// durations do not exist.
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let s = input.trim();
        if s.is_empty() {
            return Err(DurationParseError::Empty);
        }
        let bytes = s.as_bytes();
        let mut i = 0;
        let mut total: u128 = 0;
        let err_range = || DurationParseError::OutOfRange {
            input: input.to_string(),
        };
        while i < bytes.len() {
            let num_start = i;
            while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b'.') {
                i += 1;
            }
            if i == num_start {
                return Err(DurationParseError::ExpectedNumber {
                    input: input.to_string(),
                    rest: s[num_start..].to_string(),
                });
            }
            let number = &s[num_start..i];
            let unit_start = i;
            while i < bytes.len() && bytes[i].is_ascii_alphabetic()
                || (i < bytes.len() && bytes[i] >= 0x80)
            {
                i += 1;
            }
            let unit = &s[unit_start..i];
            if unit.is_empty() {
                return Err(DurationParseError::MissingUnit {
                    input: input.to_string(),
                    number: number.to_string(),
                });
            }
            let scale: u128 = match unit {
                "h" => 3600 * NANOS_PER_SEC as u128,
                "m" => 60 * NANOS_PER_SEC as u128,
                "s" => NANOS_PER_SEC as u128,
                "ms" => NANOS_PER_MILLI as u128,
                "us" | "µs" => NANOS_PER_MICRO as u128,
                "ns" => 1,
                _ => {
                    return Err(DurationParseError::UnknownUnit {
                        input: input.to_string(),
                        unit: unit.to_string(),
                    })
                }
            };
            let (int_part, frac_part) = match number.split_once('.') {
                Some((a, b)) => (a, b),
                None => (number, ""),
            };
            if (int_part.is_empty() && frac_part.is_empty())
                || frac_part.contains('.')
                || (number.contains('.') && frac_part.is_empty())
            {
                return Err(DurationParseError::ExpectedNumber {
                    input: input.to_string(),
                    rest: s[num_start..].to_string(),
                });
            }
            let int_val: u128 = if int_part.is_empty() {
                0
            } else {
                int_part.parse().map_err(|_| err_range())?
            };
            let mut part = int_val.checked_mul(scale).ok_or_else(err_range)?;
            if !frac_part.is_empty() {
                if frac_part.len() > 18 {
                    return Err(err_range());
                }
                let frac_val: u128 = frac_part.parse().map_err(|_| err_range())?;
                let denom = 10u128.pow(frac_part.len() as u32);
                let scaled = frac_val * scale;
                if scaled % denom != 0 {
                    return Err(err_range());
                }
                part += scaled / denom;
            }
            total = total.checked_add(part).ok_or_else(err_range)?;
        }
        if total > u64::MAX as u128 {
            return Err(err_range());
        }
        Ok(SimDuration(total as u64))
    }
}

impl From<std::time::Duration> for SimDuration {
    fn from(d: std::time::Duration) -> Self {
        SimDuration(d.as_nanos().min(u64::MAX as u128) as u64)
    }
}

impl serde::Serialize for SimDuration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for SimDuration {
    /// Accepts the text form (`30s`) or a bare number of seconds.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = SimDuration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as 30s, 250ms, 2m or 1h30m")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<SimDuration, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<SimDuration, E> {
                v.checked_mul(NANOS_PER_SEC)
                    .map(SimDuration)
                    .ok_or_else(|| E::custom("duration out of range"))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<SimDuration, E> {
                if v < 0 {
                    return Err(E::custom("a duration cannot be negative"));
                }
                self.visit_u64(v as u64)
            }
        }
        d.deserialize_any(V)
    }
}

/// Formats a Unix time (seconds, UTC) like C's `ctime()` without the newline:
/// `Sun Nov 29 09:27:28 2026`. This is what the `# Generated by iptables-save …` line and
/// `conntrack -o ktimestamp`'s `[start=…]` carry.
pub fn ctime(unix_secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = unix_secs / 86_400;
    let secs = unix_secs % 86_400;
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    let weekday = DAYS[(days % 7) as usize];
    // Civil-from-days (proleptic Gregorian), Howard Hinnant's algorithm.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if mo <= 2 { y + 1 } else { y };
    format!(
        "{weekday} {} {d:>2} {h:02}:{m:02}:{s:02} {y}",
        MONTHS[(mo - 1) as usize]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> SimDuration {
        s.parse().unwrap()
    }

    #[test]
    fn parses_the_usual_forms() {
        assert_eq!(d("30s"), SimDuration::from_secs(30));
        assert_eq!(d("250ms"), SimDuration::from_millis(250));
        assert_eq!(d("2m"), SimDuration::from_secs(120));
        assert_eq!(d("1h30m"), SimDuration::from_secs(5400));
        assert_eq!(d("1.5s"), SimDuration::from_millis(1500));
        assert_eq!(d("2s500ms"), SimDuration::from_millis(2500));
        assert_eq!(d("0s"), SimDuration::ZERO);
        assert_eq!(d("7ns"), SimDuration::from_nanos(7));
    }

    #[test]
    fn prints_canonically() {
        for (v, s) in [
            (SimDuration::from_secs(30), "30s"),
            (SimDuration::from_millis(250), "250ms"),
            (SimDuration::from_secs(120), "2m"),
            (SimDuration::from_secs(5400), "1h30m"),
            (SimDuration::from_millis(2500), "2s500ms"),
            (SimDuration::from_millis(60_500), "1m0s500ms"),
            (SimDuration::ZERO, "0s"),
            (SimDuration::from_nanos(1_000_001), "1000001ns"),
        ] {
            assert_eq!(v.to_string(), s);
            assert_eq!(d(s), v, "{s} parses back");
        }
    }

    #[test]
    fn rejects_bad_text_with_a_reason() {
        for bad in [
            "",
            "30",
            "30x",
            "s",
            "1..5s",
            "1.s",
            "-1s",
            "1.0000000001ns",
            "99999999999h",
        ] {
            let e = bad.parse::<SimDuration>().unwrap_err();
            assert!(!e.to_string().is_empty(), "{bad}");
        }
        assert!(matches!(
            "30".parse::<SimDuration>(),
            Err(DurationParseError::MissingUnit { .. })
        ));
        assert!(matches!(
            "3d".parse::<SimDuration>(),
            Err(DurationParseError::UnknownUnit { .. })
        ));
    }

    #[test]
    fn hms() {
        assert_eq!(
            SimTime::from_millis(3_723_045).hms().to_string(),
            "01:02:03.045"
        );
    }

    proptest::proptest! {
        #[test]
        fn display_round_trips(ns in 0u64..u64::MAX) {
            let v = SimDuration::from_nanos(ns);
            proptest::prop_assert_eq!(v.to_string().parse::<SimDuration>().unwrap(), v);
        }
    }
}
