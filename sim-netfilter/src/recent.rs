//! `/proc/net/xt_recent/NAME`: the text a real node's `recent` list reads as, parsed back into
//! entries that [`RulesetState::load_recent`](crate::RulesetState::load_recent) takes.
//!
//! The kernel prints one line per address (`xt_recent.c`, `recent_seq_show`):
//!
//! ```text
//! src=10.244.2.9 ttl: 64 last_seen: 4297891173 oldest_pkt: 3 4297891168, 4297891171, 4297891173
//! ```
//!
//! - `src=` the (masked) address (`%pI4`; an ip6tables list's `%pI6c`, compressed);
//! - `ttl:` the TTL recorded by the last `--set`/`--update` (0 for an address written to the
//!   file by hand);
//! - `last_seen:` the newest stamp, in jiffies;
//! - `oldest_pkt:` despite its name, the entry's `index`: the slot the next stamp goes to,
//!   1 ..= the table's stamp capacity (not reduced modulo the capacity until the next update);
//! - then the `nstamps` stamps kept, in jiffies, in *array* order, `, `-separated. The array is
//!   a ring: until it first fills, array order is oldest first and `index == nstamps`; once
//!   full, the oldest stamp is the one at `index % nstamps`.
//!
//! Lines come in hash-bucket order (a random hash seed per boot), not in the list's LRU order;
//! the LRU order is that of the newest stamps (every `--set`/`--update` moves the address to
//! the tail as it stamps it). See docs/kernel-model.md §10.
//!
//! Jiffies count ticks since boot (starting at `2^32 - 300*HZ` on 64-bit kernels, to catch
//! wrap bugs early) at `CONFIG_HZ` ticks per second. [`ProcRecentEntry::to_view`] maps them to
//! simulated time given the jiffies value when the file was read and `HZ`.

use std::net::IpAddr;

use sim_core::{SimDuration, SimTime};

use crate::state::RecentEntryView;

/// One line of `/proc/net/xt_recent/NAME`, as printed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcRecentEntry {
    /// 1-based line number in the file.
    pub line: usize,
    /// `src=`: an IPv4 address in `/proc/net/xt_recent/`, IPv6 (`%pI6c`) in an
    /// ip6tables list.
    pub addr: IpAddr,
    /// `ttl:`.
    pub ttl: u8,
    /// `last_seen:` (jiffies).
    pub last_seen: u64,
    /// `oldest_pkt:` (the entry's ring index, see the module docs).
    pub index: usize,
    /// The stamps (jiffies) in array order.
    pub stamps: Vec<u64>,
}

/// Why a `/proc/net/xt_recent` file did not parse or load: the line, the column (1-based,
/// in characters) and what was expected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct ProcRecentError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What was wrong and what was expected.
    pub message: String,
}

/// The jiffies of an entry's stamps before this the file is read are `now`, `hz` ticks a
/// second; see [`ProcRecentEntry::to_view`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Jiffies {
    /// `jiffies` when the file was read (`grep -m1 ^jiffies /proc/timer_list`).
    pub now: u64,
    /// `CONFIG_HZ` of the node's kernel.
    pub hz: u32,
}

/// `CONFIG_HZ` assumed when none is given: the kernel's own default choice
/// (`kernel/Kconfig.hz`, `default HZ_250`).
pub const DEFAULT_HZ: u32 = 250;

/// The most stamps one address can carry (`XT_RECENT_MAX_NSTAMPS`): a line with more is
/// refused at the first one too many, so a line costs time linear in its length.
pub const MAX_PROC_STAMPS: usize = 65536;

/// A word of the file quoted in an error, cut to 64 characters.
fn q(s: &str) -> String {
    sim_core::input::quote_excerpt(s, 64)
}

struct Cursor<'a> {
    s: &'a str,
    pos: usize,
    line: usize,
}

impl<'a> Cursor<'a> {
    fn err(&self, message: impl Into<String>) -> ProcRecentError {
        ProcRecentError {
            line: self.line,
            column: self.s[..self.pos].chars().count() + 1,
            message: message.into(),
        }
    }

    fn lit(&mut self, want: &str, what: &str) -> Result<(), ProcRecentError> {
        if self.s[self.pos..].starts_with(want) {
            self.pos += want.len();
            Ok(())
        } else {
            Err(self.err(format!("expected {want:?} ({what})")))
        }
    }

    fn word(&mut self) -> &'a str {
        let rest = &self.s[self.pos..];
        let n = rest.find([' ', ',']).unwrap_or(rest.len());
        self.pos += n;
        &rest[..n]
    }

    fn number<T: std::str::FromStr>(&mut self, what: &str) -> Result<T, ProcRecentError> {
        let start = self.pos;
        let w = self.word();
        w.parse::<T>().map_err(|_| {
            self.pos = start;
            self.err(format!("expected {what}, found {}", q(w)))
        })
    }
}

/// Parses the whole text of a `/proc/net/xt_recent/NAME` file. Blank lines are skipped; any
/// other line that is not in the kernel's format is an error naming its line and column.
pub fn parse_proc_recent(text: &str) -> Result<Vec<ProcRecentEntry>, ProcRecentError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let mut c = Cursor {
            s: raw,
            pos: 0,
            line,
        };
        c.lit(
            "src=",
            "each line starts with the address, as recent_seq_show prints it",
        )?;
        let at = c.pos;
        let a = c.word();
        let addr: IpAddr = a.parse().map_err(|_| {
            c.pos = at;
            c.err(format!("expected an IPv4 or IPv6 address, found {}", q(a)))
        })?;
        c.lit(" ttl: ", "the TTL follows the address")?;
        let ttl: u8 = c.number("a TTL (0-255)")?;
        c.lit(" last_seen: ", "the newest stamp follows the TTL")?;
        let last_seen: u64 = c.number("jiffies (an unsigned number)")?;
        c.lit(" oldest_pkt: ", "the ring index follows last_seen")?;
        let index_at = c.pos;
        let index: usize = c.number("the ring index (an unsigned number)")?;
        let mut stamps = Vec::new();
        let mut stamp_cols = Vec::new();
        loop {
            if c.pos == raw.len() {
                break;
            }
            if !stamps.is_empty() {
                c.lit(",", "stamps are separated by \", \"")?;
            }
            c.lit(" ", "a space before each stamp")?;
            stamp_cols.push(c.pos);
            stamps.push(c.number::<u64>("a stamp in jiffies")?);
            if stamps.len() > MAX_PROC_STAMPS {
                return Err(c.err(format!(
                    "more than {MAX_PROC_STAMPS} stamps (XT_RECENT_MAX_NSTAMPS)"
                )));
            }
        }
        if stamps.is_empty() {
            return Err(c.err("expected the stamps after oldest_pkt (an entry has at least one)"));
        }
        if index == 0 || index > stamps.len() {
            c.pos = index_at;
            return Err(c.err(format!(
                "oldest_pkt {index} is not a slot of the {} stamps (1 ..= {})",
                stamps.len(),
                stamps.len()
            )));
        }
        if stamps[index - 1] != last_seen {
            c.pos = stamp_cols[index - 1];
            return Err(c.err(format!(
                "last_seen {last_seen} is not the stamp in slot oldest_pkt - 1 ({}): the line is inconsistent",
                stamps[index - 1]
            )));
        }
        out.push(ProcRecentEntry {
            line,
            addr,
            ttl,
            last_seen,
            index,
            stamps,
        });
    }
    Ok(out)
}

impl ProcRecentEntry {
    /// The stamps oldest first (the ring unrolled from `index % nstamps`).
    pub fn stamps_oldest_first(&self) -> Vec<u64> {
        let mut s = self.stamps.clone();
        let n = s.len();
        s.rotate_left(self.index % n);
        s
    }

    /// The entry in simulated time: a stamp `j` jiffies becomes `at - (clock.now - j) / HZ`,
    /// so that `--rcheck --seconds` sees the same ages at `at` as the node saw when the file
    /// was read. Fails if a stamp is after `clock.now` or older than `at` allows.
    pub fn to_view(&self, clock: Jiffies, at: SimTime) -> Result<RecentEntryView, ProcRecentError> {
        let err = |message: String| ProcRecentError {
            line: self.line,
            column: 1,
            message,
        };
        let mut stamps = Vec::with_capacity(self.stamps.len());
        for j in self.stamps_oldest_first() {
            let ticks = clock.now.wrapping_sub(j);
            if ticks > u64::MAX / 2 {
                return Err(err(format!(
                    "stamp {j} is after the jiffies the file was read at ({}): give the node's jiffies when it was read",
                    clock.now
                )));
            }
            let ns = u128::from(ticks) * 1_000_000_000 / u128::from(clock.hz.max(1));
            let age = u64::try_from(ns)
                .ok()
                .map(SimDuration::from_nanos)
                .filter(|d| at.as_nanos() >= d.as_nanos())
                .ok_or_else(|| {
                    err(format!(
                        "stamp {j} is {ticks} jiffies ({}s at HZ={}) before the file was read, earlier than the simulation can start",
                        ticks / u64::from(clock.hz.max(1)),
                        clock.hz
                    ))
                })?;
            stamps.push(SimTime::from_nanos(at.as_nanos() - age.as_nanos()));
        }
        Ok(RecentEntryView {
            addr: self.addr,
            ttl: self.ttl,
            stamps,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Read from Linux 6.18 in a private namespace (see docs/kernel-model.md §10).
    const REAL: &str = "src=127.0.0.1 ttl: 64 last_seen: 4297891173 oldest_pkt: 3 4297891168, 4297891171, 4297891173\n\
src=127.0.0.2 ttl: 64 last_seen: 4297891176 oldest_pkt: 1 4297891176\n";

    #[test]
    fn parses_the_kernels_lines() {
        let v = parse_proc_recent(REAL).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].addr, IpAddr::from([127, 0, 0, 1]));
        assert_eq!(v[0].ttl, 64);
        assert_eq!(v[0].index, 3);
        assert_eq!(v[0].stamps, vec![4297891168, 4297891171, 4297891173]);
        assert_eq!(v[1].stamps, vec![4297891176]);
    }

    #[test]
    fn a_full_ring_unrolls_from_its_index() {
        // 8 slots, 12 stamps written: the next write goes to slot 4, which holds the oldest.
        let line = "src=127.0.0.3 ttl: 0 last_seen: 112 oldest_pkt: 4 109, 110, 111, 112, 105, 106, 107, 108\n";
        let v = parse_proc_recent(line).unwrap();
        assert_eq!(
            v[0].stamps_oldest_first(),
            vec![105, 106, 107, 108, 109, 110, 111, 112]
        );
    }

    #[test]
    fn jiffies_map_to_ages_before_the_instant() {
        let v = parse_proc_recent(REAL).unwrap();
        let at = SimTime::ZERO + SimDuration::from_secs(100);
        let view = v[0]
            .to_view(
                Jiffies {
                    now: 4297891173 + 250,
                    hz: 250,
                },
                at,
            )
            .unwrap();
        // The newest stamp is 250 ticks = 1 s old; the oldest 255 ticks = 1.02 s.
        assert_eq!(view.stamps[2], SimTime::ZERO + SimDuration::from_secs(99));
        assert_eq!(
            view.stamps[0],
            SimTime::ZERO + SimDuration::from_millis(98_980)
        );
    }

    #[test]
    fn bad_lines_are_located() {
        let e = parse_proc_recent("\nsrc=10.0.0.300 ttl: 64 last_seen: 1 oldest_pkt: 1 1\n")
            .unwrap_err();
        assert_eq!((e.line, e.column), (2, 5));
        let e =
            parse_proc_recent("src=10.0.0.3 ttl: 64 last_seen: 2 oldest_pkt: 1 1\n").unwrap_err();
        assert!(e.message.contains("inconsistent"), "{e}");
        assert_eq!(e.column, 49);
        let e =
            parse_proc_recent("src=10.0.0.3 ttl: 64 last_seen: 1 oldest_pkt: 1 1,2\n").unwrap_err();
        assert!(e.message.contains("space before each stamp"), "{e}");
        assert_eq!(e.column, 51);
        // An ip6tables list (`%pI6c`) parses; loading it checks the ruleset's family.
        let v = parse_proc_recent("src=fd00::1 ttl: 64 last_seen: 1 oldest_pkt: 1 1\n").unwrap();
        assert_eq!(v[0].addr, "fd00::1".parse::<IpAddr>().unwrap());
        let e =
            parse_proc_recent("src=fd00::zz ttl: 64 last_seen: 1 oldest_pkt: 1 1\n").unwrap_err();
        assert!(e.message.contains("IPv4 or IPv6"), "{e}");
        let e =
            parse_proc_recent("src=10.0.0.3 ttl: 64 last_seen: 1 oldest_pkt: 2 1\n").unwrap_err();
        assert!(e.message.contains("oldest_pkt 2"), "{e}");
        let e = parse_proc_recent("10.0.0.3\n").unwrap_err();
        assert_eq!((e.line, e.column), (1, 1));
    }

    #[test]
    fn a_stamp_after_now_is_refused() {
        let v = parse_proc_recent(REAL).unwrap();
        let e = v[1]
            .to_view(
                Jiffies {
                    now: 4297891170,
                    hz: 250,
                },
                SimTime::ZERO + SimDuration::from_secs(100),
            )
            .unwrap_err();
        assert!(e.message.contains("after the jiffies"), "{e}");
    }

    #[test]
    fn a_line_of_the_most_stamps_reads_in_linear_time_and_one_more_is_refused() {
        let line = |n: usize| {
            let mut s = String::from("src=10.0.0.1 ttl: 64 last_seen: 5 oldest_pkt: 1 5");
            s += &", 5".repeat(n - 1);
            s
        };
        let e = parse_proc_recent(&line(MAX_PROC_STAMPS)).unwrap();
        assert_eq!(e[0].stamps.len(), MAX_PROC_STAMPS);
        let text = line(MAX_PROC_STAMPS + 1);
        let e = parse_proc_recent(&text).unwrap_err();
        assert!(e.message.contains("more than 65536 stamps"), "{e}");
        assert_eq!(e.column, text.chars().count() + 1);
        // A long bad word is quoted cut.
        let e = parse_proc_recent(&format!("src={}", "9".repeat(100_000))).unwrap_err();
        assert!(e.message.len() < 200, "{e}");
    }
}
