//! Reading `conntrack -L` output back: a real node's table as a starting state.
//!
//! The line format is libnetfilter_conntrack's `__snprintf_conntrack_default`
//! (`src/conntrack/snprintf_default.c`), which conntrack-tools 1.4.7 prints for `-L`:
//!
//! ```text
//! [ipv4     2 ]tcp      6 431999 ESTABLISHED src=… dst=… sport=… dport=… [zone-orig=N]
//!   [packets=N bytes=N] [UNREPLIED] src=… dst=… sport=… dport=… [zone-reply=N]
//!   [packets=N bytes=N] [ASSURED|OFFLOAD|HW_OFFLOAD] mark=N [secmark=N] [secctx=S] [zone=N]
//!   [delta-time=N] [[start=CTIME]] [[stop=CTIME]] [helper=S] use=N [id=N] [labels=…]
//! ```
//!
//! (`ipv4     2` with `-o extended`; `delta-time=` whenever the kernel keeps timestamps,
//! `nf_conntrack_timestamp=1`; `[start=…]` with `-o ktimestamp`; ICMP tuples are
//! `type=T code=C id=I`, GRE `srckey=0x… dstkey=0x…`). The closing line conntrack-tools writes
//! to stderr (`conntrack v1.4.7 (conntrack-tools): N flow entries have been shown.`), blank
//! lines and `#` comments are skipped.
//!
//! A listing does not print the status bits. They are rebuilt as the kernel would hold them
//! for a confirmed entry that went through both NAT hooks: `CONFIRMED`, `SRC_NAT_DONE`,
//! `DST_NAT_DONE`; `SEEN_REPLY` unless `[UNREPLIED]`; `ASSURED` with `[ASSURED]` (and with
//! `[OFFLOAD]`/`[HW_OFFLOAD]`, which the tool prints instead of it); `DST_NAT` when the reply's
//! source is not the original destination (`nf_nat_setup_info` sets it exactly then) and
//! `SRC_NAT` when the reply's destination is not the original source.
//!
//! An entry's age is not in a plain `-L` line, yet the UDP tracker's ASSURED decision needs
//! it (a packet more than 2 s after creation, `nf_conntrack_udp_packet`). It is read from
//! `delta-time=` (seconds since creation) where present, else from `[start=…]` relative to the
//! newest start in the listing, else it is the age the caller assumes ([`AgeSource`]).

use crate::entry::{Status, TcpState};
use crate::table::Conntrack;
use crate::tuple::{has_ports, is_icmp, Tuple, IPPROTO_GRE};
use sim_core::{SimDuration, SimTime};
use std::fmt;
use std::net::IpAddr;

/// The most fields (blank-separated words) one listing line may have. A line conntrack-tools
/// prints has at most about 33 (every optional field present: `ipv4 2`, zones, counters,
/// `secctx=`, `[start=…]`, `[stop=…]`, `helper=`, `id=`, `labels=`); it prints into a
/// 1,024-byte buffer (`dump_cb` in conntrack-tools' `src/conntrack.c`).
pub const MAX_FIELDS: usize = 64;

/// Most characters of a word quoted in an error.
const QUOTE_CHARS: usize = 64;

/// `s` quoted (`{:?}`), cut for an error message.
fn q(s: &str) -> String {
    sim_core::input::quote_excerpt(s, QUOTE_CHARS)
}

/// `s` bare, cut for an error message.
fn bare(s: &str) -> std::borrow::Cow<'_, str> {
    sim_core::input::cut(s, QUOTE_CHARS)
}

/// An error in a listing: where, and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListingError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column (characters) of the offending word.
    pub column: usize,
    /// What was wrong or expected.
    pub message: String,
}

impl fmt::Display for ListingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}, column {}: {}",
            self.line, self.column, self.message
        )
    }
}

impl std::error::Error for ListingError {}

/// One `conntrack -L` line, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedEntry {
    /// 1-based line in the listing.
    pub line: usize,
    /// The original tuple.
    pub orig: Tuple,
    /// The reply tuple.
    pub reply: Tuple,
    /// Whole seconds left.
    pub timeout_s: u64,
    /// The TCP state (TCP only).
    pub tcp_state: Option<TcpState>,
    /// Status bits, rebuilt (see the module documentation).
    pub status: Status,
    /// `mark=`.
    pub mark: u32,
    /// `zone=` (nfsim keeps one zone; a non-zero zone is read but not modelled).
    pub zone: Option<u16>,
    /// `delta-time=`: seconds since the entry was created.
    pub delta_time: Option<u64>,
    /// `[start=…]` (`-o ktimestamp`), as seconds since the epoch of the dumping machine's
    /// local time.
    pub start: Option<i64>,
    /// `id=` (`-o id`).
    pub id: Option<u32>,
}

/// Where an entry's age came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum AgeSource {
    /// `delta-time=` (`nf_conntrack_timestamp=1`).
    DeltaTime,
    /// `[start=…]` (`-o ktimestamp`), relative to the newest entry's start plus the assumed
    /// age.
    Ktimestamp,
    /// Neither: the age the caller assumed.
    Assumed,
}

/// Reads a `conntrack -L` listing (with or without `-o extended`, `-o ktimestamp`, `-o id`).
pub fn parse_listing(text: &str) -> Result<Vec<ListedEntry>, ListingError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let t = raw.trim();
        if t.is_empty()
            || t.starts_with('#')
            || (t.starts_with("conntrack v") && t.contains("(conntrack-tools)"))
        {
            continue;
        }
        out.push(parse_line(raw, i + 1)?);
    }
    Ok(out)
}

/// A word of a line and its 1-based column.
struct Word<'a> {
    text: &'a str,
    col: usize,
}

/// Splits on blanks, keeping `[start=Tue Dec  1 09:18:07 2026]` as one word; stops after
/// [`MAX_FIELDS`] + 1 words (the caller refuses the line then). Linear in the line's length:
/// each word's column is counted on from the previous one's.
fn words(line: &str) -> Vec<Word<'_>> {
    let mut out = Vec::new();
    let b = line.as_bytes();
    let mut i = 0;
    // Characters in `line[..counted]`.
    let (mut counted, mut chars) = (0usize, 0usize);
    while i < b.len() && out.len() <= MAX_FIELDS {
        if b[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        let bracketed = line[i..].starts_with("[start=") || line[i..].starts_with("[stop=");
        if bracketed {
            while i < b.len() && b[i] != b']' {
                i += 1;
            }
            i = (i + 1).min(b.len());
        } else {
            while i < b.len() && !b[i].is_ascii_whitespace() {
                i += 1;
            }
        }
        chars += line[counted..start].chars().count();
        counted = start;
        out.push(Word {
            text: &line[start..i],
            col: chars + 1,
        });
    }
    out
}

struct Cursor<'a> {
    w: Vec<Word<'a>>,
    i: usize,
    line: usize,
    end_col: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<&'a str> {
        self.w.get(self.i).map(|w| w.text)
    }
    fn col(&self) -> usize {
        self.w.get(self.i).map_or(self.end_col, |w| w.col)
    }
    fn err(&self, message: String) -> ListingError {
        ListingError {
            line: self.line,
            column: self.col(),
            message,
        }
    }
    fn next(&mut self, what: &str) -> Result<&'a str, ListingError> {
        match self.peek() {
            Some(t) => {
                self.i += 1;
                Ok(t)
            }
            None => Err(self.err(format!("expected {what}, found the end of the line"))),
        }
    }
    /// The value of `key=` at the cursor.
    fn value(&mut self, key: &str) -> Result<&'a str, ListingError> {
        let col = self.col();
        let t = self.next(&format!("{key}="))?;
        t.strip_prefix(key)
            .and_then(|r| r.strip_prefix('='))
            .ok_or_else(|| ListingError {
                line: self.line,
                column: col,
                message: format!("expected {key}=…, found {}", q(t)),
            })
    }
    fn num<T: std::str::FromStr>(&mut self, key: &str) -> Result<T, ListingError> {
        let col = self.col();
        let v = self.value(key)?;
        v.parse().map_err(|_| ListingError {
            line: self.line,
            column: col,
            message: format!("{key}={}: not a number in range", bare(v)),
        })
    }
    fn addr(&mut self, key: &str) -> Result<IpAddr, ListingError> {
        let col = self.col();
        let v = self.value(key)?;
        v.parse().map_err(|_| ListingError {
            line: self.line,
            column: col,
            message: format!("{key}={}: not an IP address", bare(v)),
        })
    }
}

/// conntrack-tools' protocol names and their numbers.
fn proto_number(name: &str) -> Option<u8> {
    Some(match name {
        "tcp" => 6,
        "udp" => 17,
        "udplite" => crate::tuple::IPPROTO_UDPLITE,
        "icmp" => 1,
        "icmpv6" => 58,
        "sctp" => 132,
        "gre" => IPPROTO_GRE,
        "dccp" => crate::tuple::IPPROTO_DCCP,
        _ => return None,
    })
}

fn tuple(c: &mut Cursor<'_>, proto: u8, which: &str) -> Result<Tuple, ListingError> {
    let col = c.col();
    let src = c.addr("src")?;
    let dst = c.addr("dst")?;
    if src.is_ipv4() != dst.is_ipv4() {
        return Err(ListingError {
            line: c.line,
            column: col,
            message: format!("{which} tuple mixes IPv4 and IPv6 addresses"),
        });
    }
    let (sport, dport) = if has_ports(proto) {
        (c.num::<u16>("sport")?, c.num::<u16>("dport")?)
    } else if is_icmp(proto) {
        let t: u8 = c.num("type")?;
        let code: u8 = c.num("code")?;
        let id: u16 = c.num("id")?;
        (id, u16::from(t) << 8 | u16::from(code))
    } else if proto == IPPROTO_GRE {
        // GRE keys are printed but not modelled (GRE is tracked like the generic protocol).
        c.value("srckey")?;
        c.value("dstkey")?;
        (0, 0)
    } else {
        (0, 0)
    };
    Ok(Tuple {
        src,
        dst,
        sport,
        dport,
        proto,
    })
}

/// Skips `zone-orig=`/`zone-reply=` and `packets= bytes=` after a tuple.
fn tuple_extras(c: &mut Cursor<'_>, zone_key: &str) -> Result<(), ListingError> {
    if c.peek().is_some_and(|t| t.starts_with(zone_key)) {
        c.num::<u16>(&zone_key[..zone_key.len() - 1])?;
    }
    if c.peek().is_some_and(|t| t.starts_with("packets=")) {
        c.num::<u64>("packets")?;
        c.num::<u64>("bytes")?;
    }
    Ok(())
}

fn parse_line(raw: &str, line: usize) -> Result<ListedEntry, ListingError> {
    let mut c = Cursor {
        w: words(raw),
        i: 0,
        line,
        end_col: raw.chars().count() + 1,
    };
    if let Some(w) = c.w.get(MAX_FIELDS) {
        return Err(ListingError {
            line,
            column: w.col,
            message: format!(
                "more than {MAX_FIELDS} fields (MAX_FIELDS): a conntrack -L line has at most about 33"
            ),
        });
    }
    // -o extended: the layer-3 name and number.
    if let Some(l3) = c.peek().filter(|t| *t == "ipv4" || *t == "ipv6") {
        c.i += 1;
        let want = if l3 == "ipv4" { "2" } else { "10" };
        let col = c.col();
        let n = c.next("the layer-3 number")?;
        if n != want {
            return Err(ListingError {
                line,
                column: col,
                message: format!("{l3} is family {want}, found {}", q(n)),
            });
        }
    }
    let col = c.col();
    let name = c.next("a protocol name (tcp, udp, icmp, …)")?;
    let known = proto_number(name);
    if known.is_none() && name != "unknown" {
        return Err(ListingError {
            line,
            column: col,
            message: format!("unknown protocol name {}", q(name)),
        });
    }
    let col = c.col();
    let num = c.next("the protocol number")?;
    let proto: u8 = num.parse().map_err(|_| ListingError {
        line,
        column: col,
        message: format!("expected the protocol number, found {}", q(num)),
    })?;
    if known.is_some_and(|k| k != proto) {
        return Err(ListingError {
            line,
            column: col,
            message: format!("{name} is protocol {}, found {proto}", known.unwrap_or(0)),
        });
    }
    let col = c.col();
    let secs = c.next("the seconds left")?;
    let timeout_s: u64 = secs.parse().map_err(|_| ListingError {
        line,
        column: col,
        message: format!("expected the seconds left, found {}", q(secs)),
    })?;
    let mut tcp_state = None;
    if c.peek().is_some_and(|t| !t.contains('=')) {
        let col = c.col();
        let st = c.next("a state")?;
        if proto == 6 {
            tcp_state = Some(TcpState::from_name(st).ok_or_else(|| ListingError {
                line,
                column: col,
                message: format!("unknown TCP state {}", q(st)),
            })?);
        } else if proto != 132 && proto != crate::tuple::IPPROTO_DCCP {
            return Err(ListingError {
                line,
                column: col,
                message: format!("expected src=, found {}", q(st)),
            });
        }
        // SCTP and DCCP states are read and dropped: those trackers are not modelled.
    }
    if proto == 6 && tcp_state.is_none() {
        return Err(c.err("expected the TCP state (ESTABLISHED, TIME_WAIT, …)".into()));
    }
    let orig = tuple(&mut c, proto, "original")?;
    tuple_extras(&mut c, "zone-orig=")?;
    let mut status = Status::CONFIRMED;
    status.insert(Status::SRC_NAT_DONE);
    status.insert(Status::DST_NAT_DONE);
    if c.peek() == Some("[UNREPLIED]") {
        c.i += 1;
    } else {
        status.insert(Status::SEEN_REPLY);
    }
    let reply = tuple(&mut c, proto, "reply")?;
    if reply.src.is_ipv4() != orig.src.is_ipv4() {
        return Err(ListingError {
            line,
            column: 1,
            message: "the two tuples are of different address families".into(),
        });
    }
    tuple_extras(&mut c, "zone-reply=")?;
    if matches!(c.peek(), Some("[ASSURED]" | "[OFFLOAD]" | "[HW_OFFLOAD]")) {
        c.i += 1;
        status.insert(Status::ASSURED);
    }
    // NAT, from the tuples (see the module documentation).
    if let Some(inv) = orig.invert() {
        let ports = has_ports(proto);
        if reply.src != inv.src || (ports && reply.sport != inv.sport) {
            status.insert(Status::DST_NAT);
        }
        if reply.dst != inv.dst
            || (ports && reply.dport != inv.dport)
            || (is_icmp(proto) && reply.sport != inv.sport)
        {
            status.insert(Status::SRC_NAT);
        }
    }
    let mut e = ListedEntry {
        line,
        orig,
        reply,
        timeout_s,
        tcp_state,
        status,
        mark: 0,
        zone: None,
        delta_time: None,
        start: None,
        id: None,
    };
    while let Some(t) = c.peek() {
        let col = c.col();
        let key = t.split('=').next().unwrap_or(t);
        match key {
            "mark" => e.mark = c.num("mark")?,
            "secmark" => {
                c.num::<u32>("secmark")?;
            }
            "zone" => e.zone = Some(c.num("zone")?),
            "delta-time" => e.delta_time = Some(c.num("delta-time")?),
            "use" => {
                c.num::<u32>("use")?;
            }
            "id" => e.id = Some(c.num("id")?),
            "secctx" | "helper" | "labels" => {
                c.value(key)?;
            }
            _ if t.starts_with("[start=") || t.starts_with("[stop=") => {
                c.i += 1;
                let inner = t.trim_start_matches('[').trim_end_matches(']');
                let (k, v) = inner.split_once('=').unwrap_or((inner, ""));
                let secs = parse_ctime(v).ok_or_else(|| ListingError {
                    line,
                    column: col,
                    message: format!(
                        "{}={}: expected a ctime date like \"Tue Dec  1 09:18:07 2026\"",
                        bare(k),
                        q(v)
                    ),
                })?;
                if k == "start" {
                    e.start = Some(secs);
                }
            }
            _ => {
                return Err(ListingError {
                    line,
                    column: col,
                    message: format!(
                        "unexpected {} (expected mark=, zone=, delta-time=, use=, id=, …)",
                        q(t)
                    ),
                })
            }
        }
    }
    Ok(e)
}

/// `ctime(3)` text, `Tue Dec  1 09:18:07 2026`, as seconds since the epoch (read as UTC: only
/// differences between entries of one listing are used).
fn parse_ctime(s: &str) -> Option<i64> {
    let p: Vec<&str> = s.split_whitespace().collect();
    let [_wd, mon, day, hms, year] = p.as_slice() else {
        return None;
    };
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let m = MONTHS.iter().position(|x| x == mon)? as i64 + 1;
    let d: i64 = day.parse().ok().filter(|d| (1..=31).contains(d))?;
    let y: i64 = year.parse().ok()?;
    let mut t = hms.split(':').map(|x| x.parse::<i64>().ok());
    let (h, mi, se) = (t.next()??, t.next()??, t.next()??);
    if t.next().is_some() || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y2, m2) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * m2 + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + mi * 60 + se)
}

/// The ages of a listing's entries: `delta-time=`, else `[start=…]` relative to the newest
/// start (plus `assumed`), else `assumed`.
pub fn entry_ages(entries: &[ListedEntry], assumed: SimDuration) -> Vec<(SimDuration, AgeSource)> {
    let newest = entries.iter().filter_map(|e| e.start).max();
    entries
        .iter()
        .map(|e| {
            if let Some(d) = e.delta_time {
                (SimDuration::from_secs(d), AgeSource::DeltaTime)
            } else if let (Some(s), Some(n)) = (e.start, newest) {
                let behind = u64::try_from(n - s).unwrap_or(0);
                (
                    SimDuration::from_nanos(
                        assumed
                            .as_nanos()
                            .saturating_add(behind.saturating_mul(1_000_000_000)),
                    ),
                    AgeSource::Ktimestamp,
                )
            } else {
                (assumed, AgeSource::Assumed)
            }
        })
        .collect()
}

/// What loading a listing did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Entries loaded.
    pub loaded: usize,
    /// Of which, age from `delta-time=`.
    pub from_delta_time: usize,
    /// Age from `[start=…]`.
    pub from_ktimestamp: usize,
    /// Age assumed.
    pub assumed: usize,
    /// The age assumed where none was printed.
    pub assumed_age: SimDuration,
    /// Entries with a non-zero `zone=` (loaded into the one zone nfsim models).
    pub zoned: usize,
    /// TCP entries in CLOSE, whose RST is assumed to have come from the original direction
    /// (a listing does not say which side sent it; see [`crate::History::Listed`]).
    pub close_rst_assumed: usize,
}

impl fmt::Display for LoadReport {
    /// `12 entries loaded: 3 aged from delta-time=, 9 with no age printed, assumed 60 s old`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} entr{} loaded",
            self.loaded,
            if self.loaded == 1 { "y" } else { "ies" }
        )?;
        let mut parts = Vec::new();
        if self.from_delta_time > 0 {
            parts.push(format!("{} aged from delta-time=", self.from_delta_time));
        }
        if self.from_ktimestamp > 0 {
            parts.push(format!(
                "{} aged from [start=] relative to the newest (itself assumed {} old)",
                self.from_ktimestamp, self.assumed_age
            ));
        }
        if self.assumed > 0 {
            parts.push(format!(
                "{} with no age printed (no delta-time=: nf_conntrack_timestamp=0), assumed {} old",
                self.assumed, self.assumed_age
            ));
        }
        if self.zoned > 0 {
            parts.push(format!("{} with a zone= (zones not modelled)", self.zoned));
        }
        if self.close_rst_assumed > 0 {
            parts.push(format!(
                "{} TCP CLOSE: the listing does not say which side's RST closed {}; assumed the original direction's, so a SYN from the client reopens {} (the kernel ignores that SYN when the server sent the RST)",
                self.close_rst_assumed,
                if self.close_rst_assumed == 1 { "it" } else { "them" },
                if self.close_rst_assumed == 1 { "it" } else { "them" },
            ));
        }
        if !parts.is_empty() {
            write!(f, ": {}", parts.join(", "))?;
        }
        Ok(())
    }
}

/// Why an entry could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    /// The entry's line.
    pub line: usize,
    /// Why.
    pub message: String,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for LoadError {}

/// The age assumed for an entry whose line prints none (no `delta-time=`, no `[start=…]`):
/// older than the 2 s after which a replied UDP entry's next packet makes it ASSURED
/// (`nf_conntrack_udp_packet`), as almost every entry of a dump taken on a busy node is.
/// The `assumed_age` [`load_listing`] takes when its caller has no better figure.
pub const DEFAULT_ASSUMED_AGE: SimDuration = SimDuration::from_secs(60);

/// Loads a listing's entries into `ct` at `now`, each with its timeout and age, as the
/// table's starting state ([`Conntrack::load`]: no `[NEW]` events, no `insert` counted). An
/// entry whose line printed `delta-time=` or `[start=…]` keeps a timestamp start `age`
/// before `now` (the node had `nf_conntrack_timestamp=1`); the others have none.
pub fn load_listing(
    ct: &mut Conntrack,
    now: SimTime,
    entries: &[ListedEntry],
    assumed_age: SimDuration,
) -> Result<LoadReport, LoadError> {
    let ages = entry_ages(entries, assumed_age);
    let mut r = LoadReport {
        assumed_age,
        ..LoadReport::default()
    };
    for (e, (age, src)) in entries.iter().zip(ages) {
        ct.load(
            now,
            &crate::table::NewEntry {
                orig: e.orig,
                reply: e.reply,
                status: e.status,
                tcp_state: e.tcp_state,
                mark: e.mark,
                timeout: SimDuration::from_secs(e.timeout_s),
                age,
                history: crate::table::History::Listed,
                timestamped: src != AgeSource::Assumed,
            },
        )
        .map_err(|err| LoadError {
            line: e.line,
            message: err.to_string(),
        })?;
        r.loaded += 1;
        match src {
            AgeSource::DeltaTime => r.from_delta_time += 1,
            AgeSource::Ktimestamp => r.from_ktimestamp += 1,
            AgeSource::Assumed => r.assumed += 1,
        }
        if e.zone.is_some_and(|z| z != 0) {
            r.zoned += 1;
        }
        if e.tcp_state == Some(TcpState::Close) {
            r.close_rst_assumed += 1;
        }
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Filter, Sysctls};

    const PLAIN: &str = "\
tcp      6 431999 ESTABLISHED src=10.244.1.5 dst=10.96.0.1 sport=43210 dport=443 src=192.168.0.2 dst=10.244.1.5 sport=6443 dport=43210 [ASSURED] mark=0 use=1
udp      17 29 src=10.244.1.5 dst=10.96.0.10 sport=40000 dport=53 [UNREPLIED] src=10.244.2.7 dst=10.244.1.5 sport=53 dport=40000 mark=0 use=1
icmp     1 29 src=10.244.1.5 dst=10.244.2.7 type=8 code=0 id=7 src=10.244.2.7 dst=10.244.1.5 type=0 code=0 id=7 mark=0 use=1
udp      17 110 src=10.244.1.5 dst=10.96.0.10 sport=40001 dport=53 src=10.244.2.7 dst=192.168.0.11 sport=53 dport=61234 [ASSURED] mark=16384 use=1
conntrack v1.4.7 (conntrack-tools): 4 flow entries have been shown.
";

    #[test]
    fn a_plain_listing_loads_and_dumps_back_byte_for_byte() {
        let es = parse_listing(PLAIN).unwrap();
        assert_eq!(es.len(), 4);
        assert_eq!(es[0].tcp_state, Some(TcpState::Established));
        assert!(es[0]
            .status
            .contains(Status(Status::DST_NAT.0 | Status::ASSURED.0)));
        assert!(!es[0].status.contains(Status::SRC_NAT));
        assert!(!es[1].status.contains(Status::SEEN_REPLY));
        assert!(es[1].status.contains(Status::DST_NAT));
        assert!(!es[2].status.intersects(Status::NAT_MASK));
        assert_eq!(es[2].orig.icmp_type(), 8);
        assert!(es[3].status.contains(Status::NAT_MASK));
        assert_eq!(es[3].mark, 16384);
        let mut ct = Conntrack::new(1, "t", Sysctls::default());
        let now = SimTime::from_secs(100);
        let r = load_listing(&mut ct, now, &es, SimDuration::from_secs(60)).unwrap();
        assert_eq!(r.loaded, 4);
        assert_eq!(r.assumed, 4);
        let dump = ct.dump(now, &Filter::all());
        let want: String = PLAIN.lines().take(4).map(|l| format!("{l}\n")).collect();
        assert_eq!(dump, want);
        // The timeouts run on: 29 s left means gone 29 s later.
        assert_eq!(
            ct.list(now + SimDuration::from_secs(29), &Filter::all())
                .len(),
            2
        );
    }

    #[test]
    fn ipv6_lines_of_the_real_tool_load_and_print_back() {
        // `conntrack -L -f ipv6` and `-o extended` on Linux 6.18, conntrack-tools 1.4.7, after
        // `ping -6 ::1` and a datagram to a closed port on ::1 (the port unreachable is
        // RELATED: the entry stays UNREPLIED).
        let plain = "\
icmpv6   58 29 src=::1 dst=::1 type=128 code=0 id=2454 src=::1 dst=::1 type=129 code=0 id=2454 mark=0 use=1
udp      17 29 src=::1 dst=::1 sport=56944 dport=9999 [UNREPLIED] src=::1 dst=::1 sport=9999 dport=56944 mark=0 use=1
";
        let ext = "\
ipv6     10 icmpv6   58 29 src=::1 dst=::1 type=128 code=0 id=2454 src=::1 dst=::1 type=129 code=0 id=2454 mark=0 use=1
ipv6     10 udp      17 29 src=::1 dst=::1 sport=56944 dport=9999 [UNREPLIED] src=::1 dst=::1 sport=9999 dport=56944 mark=0 use=1
";
        for text in [plain, ext] {
            let es = parse_listing(text).unwrap();
            let mut ct = Conntrack::new(1, "t", Sysctls::default());
            let now = SimTime::from_secs(100);
            load_listing(&mut ct, now, &es, SimDuration::from_secs(1)).unwrap();
            let f = Filter::parse("-f ipv6").unwrap();
            let mut lines: Vec<String> = ct
                .list(now, &f)
                .iter()
                .map(|e| e.list_line(now).to_string())
                .collect();
            lines.sort();
            let mut want: Vec<&str> = plain.lines().collect();
            want.sort();
            assert_eq!(lines, want);
            let mut lines: Vec<String> = ct
                .list(now, &f)
                .iter()
                .map(|e| e.list_line_extended(now).to_string())
                .collect();
            lines.sort();
            let mut want: Vec<&str> = ext.lines().collect();
            want.sort();
            assert_eq!(lines, want);
            assert!(ct.list(now, &Filter::parse("-f ipv4").unwrap()).is_empty());
        }
    }

    #[test]
    fn extended_ktimestamp_and_delta_time() {
        let text = "\
ipv4     2 udp      17 25 src=10.0.0.1 dst=10.0.0.2 sport=1 dport=2 src=10.0.0.2 dst=10.0.0.1 sport=2 dport=1 mark=0 delta-time=1 [start=Tue Dec  1 09:18:06 2026] use=1 id=42
ipv4     2 udp      17 25 src=10.0.0.1 dst=10.0.0.2 sport=3 dport=2 src=10.0.0.2 dst=10.0.0.1 sport=2 dport=3 mark=0 [start=Tue Dec  1 09:17:00 2026] use=1
ipv4     2 udp      17 25 src=10.0.0.1 dst=10.0.0.2 sport=4 dport=2 src=10.0.0.2 dst=10.0.0.1 sport=2 dport=4 mark=0 [start=Tue Dec  1 09:18:07 2026] use=1
";
        let es = parse_listing(text).unwrap();
        assert_eq!(es[0].delta_time, Some(1));
        assert_eq!(es[0].id, Some(42));
        assert_eq!(es[1].start.unwrap() + 67, es[2].start.unwrap());
        let ages = entry_ages(&es, SimDuration::from_secs(5));
        assert_eq!(ages[0], (SimDuration::from_secs(1), AgeSource::DeltaTime));
        assert_eq!(ages[1], (SimDuration::from_secs(72), AgeSource::Ktimestamp));
        assert_eq!(ages[2], (SimDuration::from_secs(5), AgeSource::Ktimestamp));
    }

    /// The age decides whether the next packet makes a replied UDP entry ASSURED: only more
    /// than 2 s after creation (`nf_conntrack_udp_packet`).
    #[test]
    fn a_loaded_udp_entry_is_assured_by_its_next_packet_only_when_old_enough() {
        let line = |d: u64| {
            format!("udp      17 20 src=10.0.0.1 dst=10.0.0.2 sport=5000 dport=53 src=10.0.0.2 dst=10.0.0.1 sport=53 dport=5000 mark=0 delta-time={d} use=1\n")
        };
        let now = SimTime::from_secs(50);
        let pkt = sim_core::Packet::udp(
            "10.0.0.1:5000".parse().unwrap(),
            "10.0.0.2:53".parse().unwrap(),
        );
        for (d, assured) in [(1, false), (3, true)] {
            let es = parse_listing(&line(d)).unwrap();
            let mut ct = Conntrack::new(1, "t", Sysctls::default());
            load_listing(&mut ct, now, &es, SimDuration::ZERO).unwrap();
            let crate::CtVerdict::Tracked(h) = ct.conntrack_in(now, &pkt) else {
                panic!("not tracked")
            };
            ct.confirm(now, h).unwrap();
            let e = ct.get(h.id).unwrap();
            assert_eq!(
                e.status.contains(Status::ASSURED),
                assured,
                "delta-time={d}"
            );
        }
    }

    /// An entry of a listing older than the table's clock still has its age: its creation
    /// (and so the UDP 2-second rule and `delta-time=`) lies before the simulation's start,
    /// not clamped to it (failed before: loaded at 0, an entry 60 s old was 0 s old).
    #[test]
    fn a_listing_older_than_the_clock_keeps_its_ages() {
        let text = "udp      17 20 src=10.0.0.1 dst=10.0.0.2 sport=5000 dport=53 src=10.0.0.2 dst=10.0.0.1 sport=53 dport=5000 mark=0 delta-time=60 use=1\n";
        let es = parse_listing(text).unwrap();
        let mut ct = Conntrack::new(1, "t", Sysctls::default());
        let r = load_listing(&mut ct, SimTime::ZERO, &es, SimDuration::ZERO).unwrap();
        assert_eq!(r.from_delta_time, 1);
        // The starting state: no [NEW] event, no insert= counted.
        assert!(ct.pending_events().is_empty());
        assert_eq!(ct.stats().insert, 0);
        assert_eq!(ct.dump(SimTime::ZERO, &Filter::all()), text);
        let pkt = sim_core::Packet::udp(
            "10.0.0.1:5000".parse().unwrap(),
            "10.0.0.2:53".parse().unwrap(),
        );
        let crate::CtVerdict::Tracked(h) = ct.conntrack_in(SimTime::ZERO, &pkt) else {
            panic!("not tracked")
        };
        ct.confirm(SimTime::ZERO, h).unwrap();
        let e = ct.get(h.id).unwrap();
        assert!(e.status.contains(Status::ASSURED));
        assert_eq!(e.start_ns, Some(-60_000_000_000));
        let later = SimTime::from_millis(2_500);
        assert_eq!(
            e.list_line_as(
                later,
                crate::ListFormat {
                    extended: true,
                    ktimestamp: true,
                    epoch_secs: 1_764_581_000,
                },
            )
            .to_string(),
            "ipv4     2 udp      17 117 src=10.0.0.1 dst=10.0.0.2 sport=5000 dport=53 src=10.0.0.2 dst=10.0.0.1 sport=53 dport=5000 [ASSURED] mark=0 delta-time=62 [start=Mon Dec  1 09:22:20 2025] use=1"
        );
    }

    /// `nf_conntrack_timestamp=1`: a new entry records its start; `delta-time=` counts whole
    /// seconds of the clock (`time()` minus the start's second), as conntrack-tools does.
    /// Entries made while it is 0 have none.
    #[test]
    fn the_timestamp_sysctl_stamps_new_entries() {
        let mut sys = Sysctls::default();
        sys.set("net.netfilter.nf_conntrack_timestamp", "1")
            .unwrap();
        assert_eq!(sys.get("nf_conntrack_timestamp").unwrap(), "1");
        assert!(sys.set("nf_conntrack_timestamp", "2").is_err());
        let mut ct = Conntrack::new(1, "t", sys);
        let pkt = |sport: u16| {
            sim_core::Packet::udp(
                format!("10.0.0.1:{sport}").parse().unwrap(),
                "10.0.0.2:53".parse().unwrap(),
            )
        };
        let t0 = SimTime::from_millis(10_700);
        let crate::CtVerdict::Tracked(h) = ct.conntrack_in(t0, &pkt(1)) else {
            panic!("not tracked")
        };
        ct.confirm(t0, h).unwrap();
        let now = SimTime::from_millis(15_100);
        let line = ct.get(h.id).unwrap().list_line(now).to_string();
        assert!(line.ends_with(" mark=0 delta-time=5 use=1"), "{line}");
        ct.sysctls_mut().timestamp = false;
        let crate::CtVerdict::Tracked(h) = ct.conntrack_in(now, &pkt(2)) else {
            panic!("not tracked")
        };
        ct.confirm(now, h).unwrap();
        let line = ct.get(h.id).unwrap().list_line(now).to_string();
        assert!(line.ends_with(" mark=0 use=1"), "{line}");
    }

    #[test]
    fn errors_are_located() {
        let e = parse_listing("udp      17 29 src=10.0.0.1 dst=10.0.0.x sport=1 dport=2\n")
            .unwrap_err();
        assert_eq!((e.line, e.column), (1, 29));
        assert!(e.message.contains("dst=10.0.0.x"), "{e}");
        let e = parse_listing("\ntcp      6 5 BOGUS src=1.1.1.1").unwrap_err();
        assert_eq!((e.line, e.column), (2, 14));
        let e = parse_listing("udp 6 5 src=1.1.1.1").unwrap_err();
        assert!(e.message.contains("udp is protocol 17"), "{e}");
        let e = parse_listing(
            "udp      17 29 src=10.0.0.1 dst=10.0.0.2 sport=1 dport=2 src=10.0.0.2 dst=10.0.0.1 sport=2 dport=1 color=3",
        )
        .unwrap_err();
        assert!(e.message.contains("color=3"), "{e}");
        let e = parse_listing("udp      17 29 src=10.0.0.1 dst=10.0.0.2 sport=1").unwrap_err();
        assert!(e.message.contains("end of the line"), "{e}");
    }

    #[test]
    fn a_line_of_many_fields_is_refused_at_the_first_one_too_many() {
        const HEAD: &str = "udp      17 29 src=10.0.0.1 dst=10.0.0.2 sport=1 dport=2 src=10.0.0.2 dst=10.0.0.1 sport=2 dport=1";
        // 200,000 fields took 5 s (each word's column counted from the line's start) and
        // were accepted; now the 65th field is the error's place.
        let line = format!("{HEAD}{}", " mark=0".repeat(200_000));
        let e = parse_listing(&line).unwrap_err();
        assert!(
            e.message.starts_with("more than 64 fields (MAX_FIELDS)"),
            "{e}"
        );
        assert_eq!(e.column, HEAD.len() + 1 + (MAX_FIELDS - 11) * 7 + 1, "{e}");
        // At the limit the line is read.
        let ok = format!("{HEAD}{}", " mark=0".repeat(MAX_FIELDS - 11));
        assert_eq!(parse_listing(&ok).unwrap().len(), 1);
        // Columns count characters, not bytes, and a long word is quoted cut.
        let e = parse_listing(&format!("{HEAD} secctx=ééé {}=3", "c".repeat(10_000))).unwrap_err();
        assert_eq!(e.column, HEAD.len() + 1 + "secctx=ééé ".chars().count() + 1);
        assert!(e.message.len() < 200, "{e}");
        assert!(
            e.message.contains("\"cccc") && e.message.contains('…'),
            "{e}"
        );
    }
}
