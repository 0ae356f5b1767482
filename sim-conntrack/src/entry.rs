//! What an entry is made of and how conntrack-tools prints it.

use crate::tuple::{ct_proto_name, Dir, Tuple, TupleV4};
use sim_core::packet::IPPROTO_TCP;
use sim_core::{SimDuration, SimTime};
use std::fmt;

/// The entry's status bits (`enum ip_conntrack_status`), bit for bit as in the kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Status(pub u16);

impl Status {
    /// `IPS_EXPECTED`: created by an expectation (never set: no helpers are modelled).
    pub const EXPECTED: Status = Status(1 << 0);
    /// `IPS_SEEN_REPLY`: a packet was seen in the reply direction.
    pub const SEEN_REPLY: Status = Status(1 << 1);
    /// `IPS_ASSURED`: the entry is not early-dropped.
    pub const ASSURED: Status = Status(1 << 2);
    /// `IPS_CONFIRMED`: in the table.
    pub const CONFIRMED: Status = Status(1 << 3);
    /// `IPS_SRC_NAT`: the source is translated (in the original direction).
    pub const SRC_NAT: Status = Status(1 << 4);
    /// `IPS_DST_NAT`: the destination is translated (in the original direction).
    pub const DST_NAT: Status = Status(1 << 5);
    /// `IPS_SRC_NAT_DONE`: source NAT (or its null binding) is set up.
    pub const SRC_NAT_DONE: Status = Status(1 << 7);
    /// `IPS_DST_NAT_DONE`: destination NAT (or its null binding) is set up.
    pub const DST_NAT_DONE: Status = Status(1 << 8);
    /// `IPS_DYING`: killed; no longer in the table.
    pub const DYING: Status = Status(1 << 9);
    /// `IPS_FIXED_TIMEOUT`: refreshes leave the timeout alone (set on a clash entry).
    pub const FIXED_TIMEOUT: Status = Status(1 << 10);
    /// `IPS_NAT_CLASH`: an entry inserted by its reply tuple only after losing a confirm race
    /// (`nf_ct_resolve_clash_harder`, 5.6 on): never ASSURED, gone after 1 s, not listed.
    pub const NAT_CLASH: Status = Status(1 << 12);
    /// Both NAT bits.
    pub const NAT_MASK: Status = Status((1 << 4) | (1 << 5));

    /// Whether every bit of `other` is set.
    pub const fn contains(self, other: Status) -> bool {
        self.0 & other.0 == other.0
    }
    /// Whether any bit of `other` is set.
    pub const fn intersects(self, other: Status) -> bool {
        self.0 & other.0 != 0
    }
    pub(crate) fn insert(&mut self, other: Status) {
        self.0 |= other.0;
    }
}

impl fmt::Display for Status {
    /// The set bits by their kernel names, `|`-separated (`SEEN_REPLY|ASSURED|CONFIRMED`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(u16, &str); 11] = [
            (1 << 0, "EXPECTED"),
            (1 << 1, "SEEN_REPLY"),
            (1 << 2, "ASSURED"),
            (1 << 3, "CONFIRMED"),
            (1 << 4, "SRC_NAT"),
            (1 << 5, "DST_NAT"),
            (1 << 7, "SRC_NAT_DONE"),
            (1 << 8, "DST_NAT_DONE"),
            (1 << 9, "DYING"),
            (1 << 10, "FIXED_TIMEOUT"),
            (1 << 12, "NAT_CLASH"),
        ];
        let mut first = true;
        for (b, n) in NAMES {
            if self.0 & b != 0 {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(n)?;
                first = false;
            }
        }
        if first {
            f.write_str("NONE")?;
        }
        Ok(())
    }
}

/// The TCP tracker's states (`enum tcp_conntrack`), in the kernel's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TcpState {
    /// `TCP_CONNTRACK_NONE`.
    None = 0,
    /// `TCP_CONNTRACK_SYN_SENT`.
    SynSent = 1,
    /// `TCP_CONNTRACK_SYN_RECV`.
    SynRecv = 2,
    /// `TCP_CONNTRACK_ESTABLISHED`.
    Established = 3,
    /// `TCP_CONNTRACK_FIN_WAIT`.
    FinWait = 4,
    /// `TCP_CONNTRACK_CLOSE_WAIT`.
    CloseWait = 5,
    /// `TCP_CONNTRACK_LAST_ACK`.
    LastAck = 6,
    /// `TCP_CONNTRACK_TIME_WAIT`.
    TimeWait = 7,
    /// `TCP_CONNTRACK_CLOSE`.
    Close = 8,
    /// `TCP_CONNTRACK_SYN_SENT2` (simultaneous open).
    SynSent2 = 9,
}

impl TcpState {
    /// Every state, in order.
    pub const ALL: [TcpState; 10] = [
        TcpState::None,
        TcpState::SynSent,
        TcpState::SynRecv,
        TcpState::Established,
        TcpState::FinWait,
        TcpState::CloseWait,
        TcpState::LastAck,
        TcpState::TimeWait,
        TcpState::Close,
        TcpState::SynSent2,
    ];

    /// The name conntrack-tools prints (`ESTABLISHED`, `TIME_WAIT`, …).
    pub fn name(self) -> &'static str {
        match self {
            TcpState::None => "NONE",
            TcpState::SynSent => "SYN_SENT",
            TcpState::SynRecv => "SYN_RECV",
            TcpState::Established => "ESTABLISHED",
            TcpState::FinWait => "FIN_WAIT",
            TcpState::CloseWait => "CLOSE_WAIT",
            TcpState::LastAck => "LAST_ACK",
            TcpState::TimeWait => "TIME_WAIT",
            TcpState::Close => "CLOSE",
            TcpState::SynSent2 => "SYN_SENT2",
        }
    }

    /// Parses a state name as `conntrack --state` takes it (case-insensitive; `LISTEN` is the
    /// old name of SYN_SENT2).
    pub fn from_name(s: &str) -> Option<TcpState> {
        let u = s.to_ascii_uppercase();
        if u == "LISTEN" {
            return Some(TcpState::SynSent2);
        }
        TcpState::ALL.into_iter().find(|t| t.name() == u)
    }

    pub(crate) fn from_u8(v: u8) -> TcpState {
        TcpState::ALL
            .get(usize::from(v))
            .copied()
            .unwrap_or(TcpState::None)
    }
}

impl fmt::Display for TcpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// A stable name for an entry: its slot in the table and that slot's generation, so an id
/// of a destroyed entry never names a later one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryId {
    pub(crate) slot: u32,
    pub(crate) gen: u32,
}

impl fmt::Display for EntryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ct{}.{}", self.slot, self.gen)
    }
}

/// When an entry times out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Expiry {
    /// A confirmed entry expires at this instant (gone from lookups and dumps from then on).
    At(SimTime),
    /// An unconfirmed entry: its timeout starts when it is confirmed (the kernel keeps it
    /// relative until `__nf_conntrack_confirm` adds the current time).
    AfterConfirm(SimDuration),
}

impl Expiry {
    /// Whole seconds left at `now` (floor), as `ctnetlink_dump_timeout` reports them.
    pub fn secs_left(self, now: SimTime) -> u64 {
        match self {
            Expiry::At(t) => t.saturating_since(now).as_secs(),
            Expiry::AfterConfirm(d) => d.as_secs(),
        }
    }
}

/// A copy of an entry at one instant: everything `-m conntrack`, CONNMARK, the tracer and the
/// conntrack-tools text need.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CtEntry {
    /// The entry's id.
    pub id: EntryId,
    /// The original-direction tuple.
    pub orig: Tuple,
    /// The reply-direction tuple (after NAT, what replies look like).
    pub reply: Tuple,
    /// Status bits.
    pub status: Status,
    /// The TCP state, for TCP.
    pub tcp_state: Option<TcpState>,
    /// The connection mark (`ctmark`).
    pub mark: u32,
    /// Its timestamp start (`nf_conn_tstamp.start`), in nanoseconds of simulated time (before
    /// 0 for an entry loaded from a listing older than the simulation): set when
    /// `nf_conntrack_timestamp` was 1 at its creation, or when the listing it was loaded from
    /// printed one. `conntrack -L` prints `delta-time=` from it, `-o ktimestamp` `[start=…]`.
    pub start_ns: Option<i64>,
    /// When it times out.
    pub expiry: Expiry,
    /// Creation order: entries are listed by it.
    pub seq: u64,
}

impl CtEntry {
    /// The tuple of a direction.
    pub fn tuple(&self, dir: Dir) -> &Tuple {
        match dir {
            Dir::Original => &self.orig,
            Dir::Reply => &self.reply,
        }
    }

    /// The IP protocol number.
    pub fn proto(&self) -> u8 {
        self.orig.proto
    }

    /// Whether the source was translated: status `SRC_NAT`.
    pub fn is_src_nat(&self) -> bool {
        self.status.contains(Status::SRC_NAT)
    }

    /// Whether the destination was translated: status `DST_NAT`.
    pub fn is_dst_nat(&self) -> bool {
        self.status.contains(Status::DST_NAT)
    }

    /// The `conntrack -L` line at `now` (no newline): `udp      17 29 src=… [UNREPLIED] src=…
    /// mark=0 use=1`.
    /// With a timestamp ([`CtEntry::start_ns`]), `delta-time=N` before `use=1`.
    pub fn list_line(&self, now: SimTime) -> ListLine<'_> {
        self.list_line_as(now, ListFormat::default())
    }

    /// The `conntrack -L -o extended` line at `now` (`ipv4     2 ` in front).
    pub fn list_line_extended(&self, now: SimTime) -> ListLine<'_> {
        self.list_line_as(
            now,
            ListFormat {
                extended: true,
                ..ListFormat::default()
            },
        )
    }

    /// The `conntrack -L -o …` line at `now` in `format`.
    pub fn list_line_as(&self, now: SimTime, format: ListFormat) -> ListLine<'_> {
        ListLine {
            e: self,
            now,
            format,
        }
    }

    /// The part every conntrack-tools line shares: protocol, number, optional seconds,
    /// TCP state, tuples and flags, without `mark=`/`use=`.
    pub(crate) fn fmt_body(&self, f: &mut fmt::Formatter<'_>, secs: Option<u64>) -> fmt::Result {
        write!(f, "{:<8} {} ", ct_proto_name(self.proto()), self.proto())?;
        if let Some(s) = secs {
            write!(f, "{s} ")?;
        }
        if self.proto() == IPPROTO_TCP {
            if let Some(st) = self.tcp_state {
                write!(f, "{} ", st.name())?;
            }
        }
        write!(f, "{} ", self.orig)?;
        if !self.status.contains(Status::SEEN_REPLY) {
            f.write_str("[UNREPLIED] ")?;
        }
        write!(f, "{}", self.reply)?;
        if self.status.contains(Status::ASSURED) {
            f.write_str(" [ASSURED]")?;
        }
        Ok(())
    }
}

/// What rules read of an entry, without a snapshot of it: what `-m conntrack`
/// (`--ctstatus`, `--ctorigsrc` …, `--ctexpire`) and `-m connmark` look at. Built in place
/// by [`crate::Conntrack::rule_view`]; every field equals the one of
/// [`crate::Conntrack::get`]'s [`CtEntry`] (tuples through [`TupleV4::from_tuple`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleView {
    /// Status bits.
    pub status: Status,
    /// The connection mark (`ctmark`).
    pub mark: u32,
    /// When it times out, exactly as [`CtEntry::expiry`].
    pub expiry: Expiry,
    /// The original-direction tuple.
    pub orig: TupleV4,
    /// The reply-direction tuple.
    pub reply: TupleV4,
}

/// What `conntrack -L -o LIST` adds to a line (conntrack-tools 1.4.7 with
/// libnetfilter_conntrack's `nfct_snprintf` default output).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListFormat {
    /// `-o extended`: the layer-3 name and number first (`ipv4     2 `).
    pub extended: bool,
    /// `-o ktimestamp`: `[start=DATE]` after `delta-time=` for an entry with a timestamp.
    pub ktimestamp: bool,
    /// The Unix time (seconds) of the simulation's start: the dates `[start=…]` prints and
    /// the clock `delta-time=` is counted on (whole seconds, as the tool's `time()` is).
    pub epoch_secs: u64,
}

/// `Display` adapter of [`CtEntry::list_line`].
#[derive(Clone, Copy, Debug)]
pub struct ListLine<'a> {
    e: &'a CtEntry,
    now: SimTime,
    format: ListFormat,
}

/// The Unix time (whole seconds, floor) of `ns` nanoseconds of simulated time after an epoch
/// of `epoch_secs`.
fn unix_secs(epoch_secs: u64, ns: i64) -> i64 {
    i64::try_from(epoch_secs)
        .unwrap_or(i64::MAX)
        .saturating_add(ns.div_euclid(1_000_000_000))
}

impl fmt::Display for ListLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.format.extended {
            let (fam, num) = if self.e.orig.src.is_ipv4() {
                ("ipv4", 2)
            } else {
                ("ipv6", 10)
            };
            write!(f, "{fam:<8} {num} ")?;
        }
        self.e
            .fmt_body(f, Some(self.e.expiry.secs_left(self.now)))?;
        write!(f, " mark={} ", self.e.mark)?;
        if let Some(start) = self.e.start_ns {
            // __snprintf_timestamp_delta: time(NULL) - start / NSEC_PER_SEC, both whole
            // seconds; then __snprintf_timestamp_start's ctime() with -o ktimestamp.
            let epoch = self.format.epoch_secs;
            let start_s = unix_secs(epoch, start);
            let now_s = unix_secs(
                epoch,
                i64::try_from(self.now.as_nanos()).unwrap_or(i64::MAX),
            );
            write!(f, "delta-time={} ", now_s.saturating_sub(start_s).max(0))?;
            if self.format.ktimestamp {
                let date = sim_core::time::ctime(u64::try_from(start_s).unwrap_or(0));
                write!(f, "[start={date}] ")?;
            }
        }
        f.write_str("use=1")
    }
}

/// The closing line conntrack-tools writes to stderr after `-L`:
/// `conntrack v1.4.7 (conntrack-tools): N flow entries have been shown.`
pub fn shown_summary(n: usize) -> String {
    format!("conntrack v1.4.7 (conntrack-tools): {n} flow entries have been shown.")
}

/// The closing line after `-D`: `conntrack v1.4.7 (conntrack-tools): N flow entries have been
/// deleted.`
pub fn deleted_summary(n: usize) -> String {
    format!("conntrack v1.4.7 (conntrack-tools): {n} flow entries have been deleted.")
}
