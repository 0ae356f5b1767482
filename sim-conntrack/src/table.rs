//! The table itself: [`Conntrack`], its entries, lookup, allocation with `nf_conntrack_max` and
//! early drop, confirmation, expiry, events, and the list/delete API.

use crate::config::Sysctls;
use crate::entry::{CtEntry, EntryId, Expiry, RuleView, Status, TcpState};
use crate::event::{CtEvent, DestroyCause, EventKind, Stats};
use crate::filter::Filter;
use crate::index::Index;
use crate::tuple::{icmp_is_error, reciprocal_scale, Dir, HashSeed, Key, Slim, Tuple};
use sim_core::packet::IPPROTO_TCP;
use sim_core::{IcmpBody, Packet, SimRng, SimTime, L4};
use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::collections::BinaryHeap;
use std::fmt;
#[cfg(test)]
use std::net::IpAddr;

/// How many packets ahead of the one it tracks [`Conntrack::conntrack_in_many`] starts
/// reading (the prefetch distance of the index; entries are prefetched half as far ahead).
pub const BATCH: usize = 16;

/// Below this many index slots (a 2 MiB index, 64K–128K entries) `conntrack_in_many` does
/// not read ahead: the table stays in the caches, so there would be nothing to overlap.
const READ_AHEAD_MIN_SLOTS: usize = 1 << 18;

/// How many buckets `early_drop` looks at (`NF_CT_EVICTION_RANGE`).
pub const EVICTION_RANGE: u32 = 8;

/// The packet's relation to its entry (`enum ip_conntrack_info`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CtInfo {
    /// Original direction, the entry has seen a reply (`IP_CT_ESTABLISHED`).
    Established,
    /// An ICMP error about the entry, travelling in the original direction (`IP_CT_RELATED`).
    Related,
    /// Original direction, no reply seen yet (`IP_CT_NEW`).
    New,
    /// Reply direction (`IP_CT_ESTABLISHED_REPLY`).
    EstablishedReply,
    /// An ICMP error about the entry, travelling in the reply direction
    /// (`IP_CT_RELATED_REPLY`).
    RelatedReply,
}

impl CtInfo {
    /// The direction the packet travels (`CTINFO2DIR`).
    pub fn dir(self) -> Dir {
        match self {
            CtInfo::EstablishedReply | CtInfo::RelatedReply => Dir::Reply,
            _ => Dir::Original,
        }
    }
}

/// What a packet carries after "conntrack in": its entry and how it relates to it
/// (the kernel's `skb->_nfct`). Valid until the packet is confirmed or discarded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CtHandle {
    /// The entry (unconfirmed for a connection's first packet).
    pub id: EntryId,
    /// NEW / ESTABLISHED / RELATED / …
    pub ctinfo: CtInfo,
}

impl CtHandle {
    /// The direction the packet travels.
    pub fn dir(&self) -> Dir {
        self.ctinfo.dir()
    }
}

/// Why a packet got no entry (ctstate INVALID).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InvalidReason {
    /// The TCP flag combination is never valid (`tcp_error`: a bare FIN, NULL, SYN|FIN…).
    TcpBadFlags,
    /// The TCP state machine rejects the packet in this state (`sIV`).
    TcpInvalidState,
    /// A TCP packet other than SYN (or ACK with `nf_conntrack_tcp_loose`) cannot start an
    /// entry (`tcp_new`).
    TcpCannotCreate,
    /// The segment is outside the TCP window the entry tracks (`tcp_in_window`: SEQ over
    /// the receiver's window, or an ACK of data not seen yet), and neither
    /// `nf_conntrack_tcp_be_liberal` nor the entry (a pickup) is liberal.
    TcpOutOfWindow,
    /// A RST whose sequence number is below what the other side acknowledged ("invalid
    /// rst", with `nf_conntrack_tcp_ignore_invalid_rst` 0).
    TcpInvalidRst,
    /// An ICMP type that is neither a request nor an error cannot start an entry (an
    /// unsolicited echo reply).
    IcmpCannotCreate,
    /// The tuple has no inverse (an ICMP type without a reply type).
    CannotInvert,
    /// An ICMP error that quotes no known connection (counted as `error`).
    IcmpErrorNoMatch,
    /// An ICMP error without a quoted header.
    IcmpErrorMalformed,
}

/// Why conntrack dropped a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// `nf_conntrack_max` reached and nothing could be early-dropped.
    TableFull,
}

impl fmt::Display for DropReason {
    /// The kernel log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DropReason::TableFull => f.write_str("nf_conntrack: table full, dropping packet"),
        }
    }
}

/// The result of [`Conntrack::conntrack_in`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CtVerdict {
    /// The packet belongs to an entry (maybe a new, unconfirmed one).
    Tracked(CtHandle),
    /// No entry: the packet goes on with ctstate INVALID.
    Invalid(InvalidReason),
    /// Drop the packet.
    Drop(DropReason),
}

/// Why a confirmation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ConfirmError {
    /// The handle names no live entry.
    #[error("no such conntrack entry {0}")]
    NoEntry(EntryId),
    /// A tuple of the new entry is already in the table (`insert_failed`): drop the packet.
    #[error(
        "entry {0} clashes with an entry already in the table: packet dropped (insert_failed)"
    )]
    InsertFailed(EntryId),
}

/// Where an entry slot is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Life {
    Free,
    Unconfirmed,
    Confirmed,
    /// Killed while a packet still holds it (RST before reply): out of the index, slot kept
    /// until that packet is confirmed or discarded.
    Dying,
}

/// Cached event bits (`IPCT_*`), delivered at confirmation like `nf_ct_deliver_cached_events`.
pub(crate) mod ev {
    pub const NEW: u8 = 1;
    pub const REPLY: u8 = 2;
    pub const ASSURED: u8 = 4;
    pub const PROTOINFO: u8 = 8;
    pub const MARK: u8 = 16;
}

/// Bits of `Entry::tcp_flags`.
pub(crate) mod tf {
    /// `last_index` (TcpIndex as u8) in bits 0..3.
    pub const LAST_INDEX_MASK: u8 = 0x07;
    /// `last_dir` is reply.
    pub const LAST_DIR_REPLY: u8 = 0x08;
    /// `IP_CT_TCP_FLAG_CLOSE_INIT` seen in the original direction.
    pub const CLOSE_INIT_ORIG: u8 = 0x10;
    /// … in the reply direction.
    pub const CLOSE_INIT_REPLY: u8 = 0x20;
    /// `IP_CT_TCP_SIMULTANEOUS_OPEN`.
    pub const SIMULTANEOUS_OPEN: u8 = 0x40;
}

/// One slab slot: one cache line (`repr(C)`, 64 bytes, 64-byte aligned) holding everything
/// a lookup and refresh touch in either direction: both keys in their 16-byte form
/// ([`Slim`]; an entry with an IPv6 address has its full keys in [`Conntrack`]'s side map),
/// the deadline written, the tracker state read (UDP `stream_ts` or the TCP state and flags,
/// which share eight bytes: an entry has one protocol), the timer's deadline, the id's
/// generation, status, life and pending events. The colder fields, the mark and the
/// creation sequence number, are in arrays of their own beside the slab.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub(crate) struct Entry {
    /// The original and the reply key, by [`Dir::index`].
    pub keys: [Slim; 2],
    /// Absolute deadline when confirmed; the timeout as nanoseconds while unconfirmed.
    pub timeout: SimTime,
    /// UDP: `stream_ts` (creation + 2 s) as little-endian nanoseconds. TCP: byte 0 is the
    /// state, byte 1 the flags ([`tf`]). Zero when allocated.
    pub proto_state: [u8; 8],
    /// The deadline of this entry's live timer in the heap (`SimTime::MAX` = none). Always
    /// `<= timeout` while confirmed.
    pub armed: SimTime,
    pub gen: u32,
    pub status: Status,
    pub life: Life,
    pub pending: u8,
}

/// A timer of the heap: an entry's slot and the deadline it was armed at, in 12 bytes
/// (deadline high word, low word, slot), so that the derived order is by deadline, then slot.
/// It is live while the slot's entry is confirmed with `armed` equal to its deadline; any
/// other is stale and skipped. (Two records alike, one left by a freed entry, one armed by
/// the entry now in the slot at the same instant, are both live and interchangeable: the
/// first one handled re-arms or frees the entry, which makes the other stale.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Timer([u32; 3]);

impl Timer {
    #[inline]
    fn new(at: SimTime, slot: u32) -> Timer {
        let t = at.as_nanos();
        Timer([(t >> 32) as u32, t as u32, slot])
    }

    #[inline]
    fn at(self) -> SimTime {
        SimTime::from_nanos((u64::from(self.0[0]) << 32) | u64::from(self.0[1]))
    }

    #[inline]
    fn slot(self) -> u32 {
        self.0[2]
    }
}

impl Entry {
    /// Sets the timeout to `now + extra` (`nf_ct_refresh`): replaced, never max'd; relative
    /// while unconfirmed. Returns the new deadline when it moved earlier, for which a timer
    /// must be armed ([`Conntrack::rearm_earlier`]).
    ///
    /// The heap keeps the timer armed earlier (armed <= timeout) and `expire` re-arms it at
    /// the real deadline when it fires, so only a deadline moving earlier needs a new timer:
    /// the common refresh writes one field of the entry's first cache line.
    #[inline(always)]
    pub(crate) fn refresh(
        &mut self,
        now: SimTime,
        extra: sim_core::SimDuration,
    ) -> Option<SimTime> {
        if self.life == Life::Unconfirmed {
            self.timeout = SimTime::from_nanos(extra.as_nanos());
            return None;
        }
        let t = now.saturating_add(extra);
        let earlier = t < self.timeout;
        self.timeout = t;
        earlier.then_some(t)
    }

    /// UDP: `stream_ts`, in nanoseconds of simulated time; negative for an entry loaded from
    /// a listing whose creation + 2 s lies before the simulation's start.
    #[inline]
    pub(crate) fn stream_ts(&self) -> i64 {
        i64::from_le_bytes(self.proto_state)
    }

    #[inline]
    pub(crate) fn set_stream_ts(&mut self, ns: i64) {
        self.proto_state = ns.to_le_bytes();
    }

    /// TCP: the state (`TcpState as u8`).
    #[inline]
    pub(crate) fn tcp_state(&self) -> u8 {
        self.proto_state[0]
    }

    #[inline]
    pub(crate) fn set_tcp_state(&mut self, s: u8) {
        self.proto_state[0] = s;
    }

    /// TCP: the [`tf`] bits.
    #[inline]
    pub(crate) fn tcp_flags(&self) -> u8 {
        self.proto_state[1]
    }

    #[inline]
    pub(crate) fn tcp_flags_mut(&mut self) -> &mut u8 {
        &mut self.proto_state[1]
    }

    /// TCP: the name of its window record in [`Conntrack::windows`] (0: none yet).
    #[inline(always)]
    pub(crate) fn tcp_window(&self) -> u32 {
        let b = &self.proto_state;
        u32::from_le_bytes([b[4], b[5], b[6], b[7]])
    }

    #[inline]
    pub(crate) fn set_tcp_window(&mut self, name: u32) {
        self.proto_state[4..8].copy_from_slice(&name.to_le_bytes());
    }
}

/// `now` in signed nanoseconds of simulated time.
#[inline(always)]
pub(crate) fn sim_ns(now: SimTime) -> i64 {
    i64::try_from(now.as_nanos()).unwrap_or(i64::MAX)
}

/// When an entry `age` old at `now` was created, in signed nanoseconds of simulated time
/// (before 0 for an entry of a listing older than the simulation).
pub(crate) fn created_ns(now: SimTime, age: sim_core::SimDuration) -> i64 {
    sim_ns(now).saturating_sub(i64::try_from(age.as_nanos()).unwrap_or(i64::MAX))
}

/// A slot's timestamp start when it has none (`nf_conntrack_timestamp` was 0 at creation).
const NO_START: i64 = i64::MIN;

/// An entry to insert from userspace ([`Conntrack::insert`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewEntry {
    /// The original tuple.
    pub orig: Tuple,
    /// The reply tuple (after NAT).
    pub reply: Tuple,
    /// Status bits (`CONFIRMED` is added).
    pub status: Status,
    /// The TCP state (TCP only; ESTABLISHED if not given).
    pub tcp_state: Option<TcpState>,
    /// The connection mark.
    pub mark: u32,
    /// Time left before it times out.
    pub timeout: sim_core::SimDuration,
    /// How long ago it was created.
    pub age: sim_core::SimDuration,
    /// It has a timestamp (`nf_conn_tstamp`): its start is `age` before `now`. For
    /// [`Conntrack::load`], whether the listing printed one (`delta-time=`, `[start=…]`); for
    /// [`Conntrack::insert`], ignored (the kernel stamps an inserted entry at insertion when
    /// `nf_conntrack_timestamp` is 1).
    pub timestamped: bool,
    /// What is known of its TCP history.
    pub history: History,
}

/// What an inserted TCP entry's tracker state is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum History {
    /// As `conntrack -I` makes it (`ctnetlink_create_conntrack`): the state given, the
    /// rest of `struct ip_ct_tcp` zero (no close seen, last segment "SYN in the original
    /// direction", no window data).
    Userspace,
    /// An entry of a real node's `conntrack -L` listing, which prints only the state: what
    /// the state implies is filled in. FIN_WAIT, CLOSE_WAIT, LAST_ACK and TIME_WAIT are
    /// reached only after a FIN (`IP_CT_TCP_FLAG_CLOSE_INIT`); for CLOSE, which a RST from
    /// either side reaches, the RST is taken as the original direction's (so that a SYN from
    /// the client reopens it, as the kernel does when the client aborted); the window data
    /// are unknown, as after a mid-stream pickup: each direction's first segment
    /// initialises them, window checks liberal ([`crate::listing`]).
    Listed,
}

/// Why [`Conntrack::insert`] refused an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertError {
    /// One of its tuples is in the table already (`conntrack -I`: "File exists").
    Exists,
    /// The table is full (`nf_conntrack_max`) and nothing could be early-dropped.
    TableFull,
    /// The tuples are of different protocols or address families.
    Mismatch,
}

impl fmt::Display for InsertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InsertError::Exists => "an entry with one of these tuples is already in the table",
            InsertError::TableFull => "the table is full (nf_conntrack_max)",
            InsertError::Mismatch => "the two tuples differ in protocol or address family",
        })
    }
}

impl std::error::Error for InsertError {}

/// The connection tracking table of one network namespace. Sans-IO: every call that depends
/// on time takes `now`, nothing reads a clock, and the outputs (events) are drained by the
/// caller.
///
/// # Order of calls, per packet (the hook pipeline)
///
/// 1. At PREROUTING / OUTPUT, after raw: [`Conntrack::conntrack_in`]. [`CtVerdict::Drop`] →
///    drop the packet; [`CtVerdict::Invalid`] → continue without an entry (ctstate INVALID);
///    [`CtVerdict::Tracked`] → the packet carries the [`CtHandle`] from here on. Untracked
///    packets (`CT --notrack`) simply never call it.
/// 2. At each NAT hook (`Dst` at PREROUTING/OUTPUT, `Src` at POSTROUTING/INPUT): if
///    `!nat_initialized(id, manip)` the nat table is consulted (this is a connection's first
///    packet); a rule calls [`Conntrack::nat_setup`], no rule calls
///    [`Conntrack::nat_null_binding`]. Then, for every packet, [`Conntrack::nat_packet`].
/// 3. At the confirm hook (POSTROUTING, INPUT): [`Conntrack::confirm`] — for a new entry it
///    enters the table (`[NEW]` event); for any entry it delivers the events the packet
///    caused (`[UPDATE]`). `Err(InsertFailed)` → drop the packet.
///    A packet dropped (or consumed) before that calls [`Conntrack::discard`] instead: a new
///    entry vanishes without an event. Every handle ends in exactly one of the two.
/// 4. Between packets: [`Conntrack::drain_events`], [`Conntrack::next_expiry`] /
///    [`Conntrack::expire`] for a driver that wants DESTROY events on time even without
///    traffic (every call taking `now` expires first anyway), and [`Conntrack::list`] /
///    [`Conntrack::delete`] for tools and reconcilers.
///
/// Expiry is exact: an entry whose timeout is `t` is found by lookups at any `now < t` and
/// gone at `now >= t`; its DESTROY event is stamped `t`.
///
/// `conntrack -L` order here is creation order (the real tool prints hash order).
#[derive(Clone, Debug)]
pub struct Conntrack {
    pub(crate) cfg: Sysctls,
    pub(crate) slab: Vec<Entry>,
    /// Each slot's connection mark (`ctmark`), beside the slab: rarely read.
    marks: Vec<u32>,
    /// Each slot's creation sequence number ([`CtEntry::seq`]), beside the slab.
    seqs: Vec<u64>,
    /// Each slot's timestamp start ([`CtEntry::start_ns`]; `NO_START` without one), beside
    /// the slab.
    starts: Vec<i64>,
    /// The full keys (original, reply) of the entries with an IPv6 address, by slot: their
    /// [`Slim`]s hold only the ports, protocol and families.
    wide: BTreeMap<u32, [Key; 2]>,
    free: Vec<u32>,
    index: Index,
    hseed: HashSeed,
    timers: BinaryHeap<Reverse<Timer>>,
    pub(crate) bysource: crate::nat::BySource,
    /// The TCP entries' window records.
    pub(crate) windows: crate::tcp_window::Windows,
    pub(crate) nat_rng: SimRng,
    events: Vec<CtEvent>,
    pub(crate) stats: Stats,
    count: u32,
    confirmed: u32,
    next_seq: u64,
    scratch: Vec<u32>,
    portid: u32,
    /// Tests only: every packet through `conntrack_in_general`, so that the inline fast
    /// paths can be compared with it.
    #[cfg(test)]
    pub(crate) general_only: bool,
    /// Tests only: packets the inline TCP path took.
    #[cfg(test)]
    pub(crate) tcp_fast_hits: u64,
}

impl Conntrack {
    /// An empty table. Its random streams (the bucket hash seed, NAT port offsets) are
    /// `SimRng::derive(seed, "<label>/hash")` and `"<label>/nat-port"`; give each node its
    /// own label (`"node/worker-1/conntrack"`).
    pub fn new(seed: u64, label: &str, sysctls: Sysctls) -> Conntrack {
        let mut hrng = SimRng::derive(seed, &format!("{label}/hash"));
        Conntrack {
            cfg: sysctls,
            slab: Vec::new(),
            marks: Vec::new(),
            seqs: Vec::new(),
            starts: Vec::new(),
            wide: BTreeMap::new(),
            free: Vec::new(),
            index: Index::new(),
            hseed: HashSeed::new(&mut hrng),
            timers: BinaryHeap::new(),
            bysource: crate::nat::BySource::default(),
            windows: crate::tcp_window::Windows::default(),
            nat_rng: SimRng::derive(seed, &format!("{label}/nat-port")),
            events: Vec::new(),
            stats: Stats::default(),
            count: 0,
            confirmed: 0,
            next_seq: 0,
            scratch: Vec::new(),
            portid: 0,
            #[cfg(test)]
            general_only: false,
            #[cfg(test)]
            tcp_fast_hits: 0,
        }
    }

    /// The settings.
    pub fn sysctls(&self) -> &Sysctls {
        &self.cfg
    }

    /// The settings, to change. New timeouts apply from the next refresh, as in the kernel.
    pub fn sysctls_mut(&mut self) -> &mut Sysctls {
        &mut self.cfg
    }

    /// A sysctl's value as its file prints it, `nf_conntrack_count` included.
    pub fn sysctl(&self, name: &str) -> Result<String, crate::SysctlError> {
        let short = name.trim();
        let short = short
            .strip_prefix(crate::config::SYSCTL_PREFIX)
            .unwrap_or(short);
        if short == "nf_conntrack_count" {
            return Ok(self.count.to_string());
        }
        self.cfg.get(name)
    }

    /// The `conntrack -S` counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Entries in the table (confirmed), what `conntrack -C` prints once expired ones are
    /// reaped.
    pub fn len(&self) -> usize {
        self.confirmed as usize
    }

    /// Whether the table has no confirmed entry.
    pub fn is_empty(&self) -> bool {
        self.confirmed == 0
    }

    /// The sequence number ([`CtEntry::seq`]) the next new entry gets: entries are numbered
    /// in creation order, so an entry whose `seq` is at least a value read before a packet
    /// was created by that packet.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// `nf_conntrack_count`: allocated entries, unconfirmed ones included.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The netlink port id printed in `[USERSPACE] portid=N` for later deletes (default 0).
    pub fn set_userspace_portid(&mut self, portid: u32) {
        self.portid = portid;
    }

    /// Heap bytes held by the table's own structures (slab, marks, sequence numbers, index,
    /// timers, free list, from their capacities; the IPv6 side map, from its length). Events
    /// not yet drained and the SNAT source map are not counted.
    pub fn heap_bytes(&self) -> usize {
        self.slab.capacity() * std::mem::size_of::<Entry>()
            + self.marks.capacity() * std::mem::size_of::<u32>()
            + self.seqs.capacity() * std::mem::size_of::<u64>()
            + self.starts.capacity() * std::mem::size_of::<i64>()
            + self.wide.len() * std::mem::size_of::<(u32, [Key; 2])>()
            + self.index.heap_bytes()
            + self.timers.capacity() * std::mem::size_of::<Reverse<Timer>>()
            + self.free.capacity() * 4
            + self.windows.heap_bytes()
    }

    // ----- keys ----------------------------------------------------------------------------

    /// The key of direction `dir` (0 original, 1 reply) of the entry `e` in `slot`.
    #[inline(always)]
    pub(crate) fn entry_key(&self, e: &Entry, slot: usize, dir: u32) -> Key {
        let s = e.keys[(dir & 1) as usize];
        if s.is_narrow() {
            s.narrow_key()
        } else {
            self.wide_key(slot, dir)
        }
    }

    /// The key of direction `dir` of the entry in `slot`.
    #[inline]
    pub(crate) fn key(&self, slot: usize, dir: u32) -> Key {
        self.entry_key(&self.slab[slot], slot, dir)
    }

    #[inline(never)]
    fn wide_key(&self, slot: usize, dir: u32) -> Key {
        self.wide
            .get(&(slot as u32))
            .expect("an entry with a wide key has its keys in the side map")[(dir & 1) as usize]
    }

    /// Whether the index value `v` (`slot << 1 | dir`) names a key equal to `k`, whose
    /// [`Slim`] is `ks`.
    #[inline(always)]
    fn key_matches(&self, v: u32, k: &Key, ks: Slim) -> bool {
        let slot = (v >> 1) as usize;
        let s = self.slab[slot].keys[(v & 1) as usize];
        s == ks && (s.is_narrow() || self.wide_key(slot, v & 1).same(k))
    }

    /// Stores an entry's two keys: in its slims, and in the side map if either is wide.
    pub(crate) fn set_keys(&mut self, slot: usize, orig: Key, reply: Key) {
        self.slab[slot].keys = [orig.slim(), reply.slim()];
        if orig.is_narrow() && reply.is_narrow() {
            if !self.wide.is_empty() {
                self.wide.remove(&(slot as u32));
            }
        } else {
            self.wide.insert(slot as u32, [orig, reply]);
        }
    }

    // ----- ids, snapshots ---------------------------------------------------------------

    #[inline]
    pub(crate) fn slot_of(&self, id: EntryId) -> Option<usize> {
        let s = id.slot as usize;
        match self.slab.get(s) {
            Some(e) if e.gen == id.gen && e.life != Life::Free => Some(s),
            _ => None,
        }
    }

    fn id_of(&self, slot: usize) -> EntryId {
        EntryId {
            slot: slot as u32,
            gen: self.slab[slot].gen,
        }
    }

    pub(crate) fn snapshot(&self, slot: usize) -> CtEntry {
        let e = &self.slab[slot];
        CtEntry {
            id: self.id_of(slot),
            orig: self.entry_key(e, slot, 0).tuple(),
            reply: self.entry_key(e, slot, 1).tuple(),
            status: e.status,
            tcp_state: (e.keys[0].proto() == IPPROTO_TCP).then(|| TcpState::from_u8(e.tcp_state())),
            mark: self.marks[slot],
            start_ns: Some(self.starts[slot]).filter(|&t| t != NO_START),
            expiry: match e.life {
                Life::Unconfirmed => Expiry::AfterConfirm(e.timeout.since_start()),
                _ => Expiry::At(e.timeout),
            },
            seq: self.seqs[slot],
        }
    }

    /// The entry a handle or id names, as it is now (`None` once it is gone).
    pub fn get(&self, id: EntryId) -> Option<CtEntry> {
        self.slot_of(id).map(|s| self.snapshot(s))
    }

    /// What rules read of the entry `id` names (`None` once it is gone), read in place: the
    /// fields of [`Conntrack::get`]'s snapshot that `-m conntrack` and `-m connmark` look
    /// at, without building the snapshot's [`Tuple`]s.
    #[inline]
    pub fn rule_view(&self, id: EntryId) -> Option<RuleView> {
        let e = self.slab.get(id.slot as usize)?;
        if e.gen != id.gen || e.life == Life::Free {
            return None;
        }
        let slot = id.slot as usize;
        Some(RuleView {
            status: e.status,
            mark: self.marks[slot],
            expiry: if e.life == Life::Unconfirmed {
                Expiry::AfterConfirm(e.timeout.since_start())
            } else {
                Expiry::At(e.timeout)
            },
            orig: self.entry_key(e, slot, 0).v4(),
            reply: self.entry_key(e, slot, 1).v4(),
        })
    }

    /// The confirmed, unexpired entry whose original or reply tuple is `t`, and which one.
    pub fn find(&self, now: SimTime, t: &Tuple) -> Option<(CtEntry, Dir)> {
        let (slot, dir) = self.lookup(t)?;
        (self.slab[slot].timeout > now).then(|| (self.snapshot(slot), dir))
    }

    // ----- ctmark ----------------------------------------------------------------------

    /// The entry's status bits (what `--ctstate SNAT/DNAT` and `--ctstatus` read), without a
    /// snapshot; `None` once it is gone.
    #[inline]
    pub fn status(&self, id: EntryId) -> Option<Status> {
        self.slot_of(id).map(|s| self.slab[s].status)
    }

    /// The connection mark.
    #[inline]
    pub fn mark(&self, id: EntryId) -> Option<u32> {
        self.slot_of(id).map(|s| self.marks[s])
    }

    /// Sets the connection mark (CONNMARK `--set-xmark` computes `(mark & !mask) ^ value`
    /// first). A change is reported as an UPDATE (`IPCT_MARK`) at the next confirm.
    /// Returns false if the entry is gone.
    #[inline]
    pub fn set_mark(&mut self, id: EntryId, mark: u32) -> bool {
        let Some(s) = self.slot_of(id) else {
            return false;
        };
        if self.marks[s] != mark {
            self.marks[s] = mark;
            self.slab[s].pending |= ev::MARK;
        }
        true
    }

    // ----- lookup ------------------------------------------------------------------------

    #[inline]
    pub(crate) fn lookup(&self, t: &Tuple) -> Option<(usize, Dir)> {
        let k = Key::from_tuple(t);
        self.lookup_key(k.hash(&self.hseed), &k)
    }

    /// The slot and direction of the key `k` whose hash is `h`. Always inlined: the
    /// compiler's own choice, once the comparison went through [`Slim`]s, was a call.
    #[inline(always)]
    fn lookup_key(&self, h: u32, k: &Key) -> Option<(usize, Dir)> {
        let ks = k.slim();
        self.index.find(h, |v| self.key_matches(v, k, ks)).map(|v| {
            let dir = if v & 1 == 0 {
                Dir::Original
            } else {
                Dir::Reply
            };
            ((v >> 1) as usize, dir)
        })
    }

    // ----- conntrack in ------------------------------------------------------------------

    /// "Conntrack in" (`nf_conntrack_in`) for a packet at PREROUTING or OUTPUT: find its
    /// entry by either tuple, or allocate an unconfirmed one (where `nf_conntrack_max`,
    /// early drop and "table full" apply), then run the protocol tracker. ICMP errors that
    /// quote a known connection are RELATED to it and create nothing.
    #[inline]
    pub fn conntrack_in(&mut self, now: SimTime, pkt: &Packet) -> CtVerdict {
        self.conntrack_in_then(now, pkt, || {})
    }

    /// [`Conntrack::conntrack_in`], calling `on_new` when the packet's tuple is in no entry,
    /// before the new entry is made: the caller can start on what a new flow will need
    /// next (a namespace asks the CPU for the nat rules it is about to walk). `on_new` must
    /// not change anything this call's outcome depends on.
    #[inline]
    pub fn conntrack_in_then(
        &mut self,
        now: SimTime,
        pkt: &Packet,
        on_new: impl FnOnce(),
    ) -> CtVerdict {
        let key = Key::from_packet(pkt);
        let h = key.hash(&self.hseed);
        self.conntrack_in_keyed(now, pkt, key, h, on_new)
    }

    /// [`Conntrack::conntrack_in`] for each packet of `pkts` in order, the verdicts appended
    /// to `out`: the same verdicts, entries, events and statistics as that many calls (with
    /// nothing in between: a new entry is not confirmed before the next packet).
    ///
    /// Faster on a large table: a single call waits for two dependent memory reads (the
    /// index line, then the entry), while this works as a pipeline over the packets: while
    /// it tracks packet `i`, it has asked the CPU (software prefetch) for the home index slot
    /// of packet `i +` [`BATCH`] and for the entry named by the home slot of packet
    /// `i + BATCH / 2`, so the cache misses of many packets are in flight at once and mostly
    /// over by the time each packet is tracked. Prefetches are hints: what the packets find
    /// is decided by the same reads as in `conntrack_in`. On a table small enough to stay in
    /// the caches it simply calls `conntrack_in` for each packet.
    pub fn conntrack_in_many(&mut self, now: SimTime, pkts: &[Packet], out: &mut Vec<CtVerdict>) {
        out.reserve(pkts.len());
        if self.index.slot_count() < READ_AHEAD_MIN_SLOTS {
            // A table this small stays in the caches: no misses to overlap.
            for p in pkts {
                out.push(self.conntrack_in(now, p));
            }
            return;
        }
        // Stages, by distance ahead of the packet being tracked: hash the key and prefetch
        // its home index slot (AHEAD_INDEX); read that slot and prefetch the entry it names
        // (AHEAD_ENTRY); compare that entry's key, and for a packet whose tuple is not at
        // home (most likely a new flow), prefetch the home slot of its reply tuple, which
        // the new entry's confirm will look up (AHEAD_CHECK).
        const AHEAD_INDEX: usize = BATCH;
        const AHEAD_ENTRY: usize = BATCH / 2;
        const AHEAD_CHECK: usize = 2;
        const RING: usize = 2 * BATCH;
        let n = pkts.len();
        let mut keys = [Key([0; 5]); RING];
        let mut hashes = [0u32; RING];
        let mut homes: [Option<u32>; RING] = [None; RING];
        for j in 0..AHEAD_INDEX.min(n) {
            self.stage_index(pkts, j, &mut keys, &mut hashes);
        }
        for j in 0..AHEAD_ENTRY.min(n) {
            homes[j % RING] = self.stage_entry(hashes[j % RING]);
        }
        for j in 0..AHEAD_CHECK.min(n) {
            self.stage_check(&keys[j % RING], homes[j % RING]);
        }
        for i in 0..n {
            let j = i + AHEAD_INDEX;
            if j < n {
                self.stage_index(pkts, j, &mut keys, &mut hashes);
            }
            let j = i + AHEAD_ENTRY;
            if j < n {
                homes[j % RING] = self.stage_entry(hashes[j % RING]);
            }
            let j = i + AHEAD_CHECK;
            if j < n {
                self.stage_check(&keys[j % RING], homes[j % RING]);
            }
            let r = i % RING;
            out.push(self.conntrack_in_keyed(now, &pkts[i], keys[r], hashes[r], || {}));
        }
    }

    /// Pipeline stage of `conntrack_in_many`: packet `j`'s key and hash into the ring, and a
    /// prefetch of its home index slot.
    #[inline(always)]
    fn stage_index(
        &self,
        pkts: &[Packet],
        j: usize,
        keys: &mut [Key; 2 * BATCH],
        hashes: &mut [u32; 2 * BATCH],
    ) {
        let r = j % (2 * BATCH);
        keys[r] = Key::from_packet(&pkts[j]);
        hashes[r] = keys[r].hash(&self.hseed);
        self.index.prefetch_home(hashes[r]);
    }

    /// Pipeline stage of `conntrack_in_many`: reads the home index slot of `hash` (fetched
    /// by then) and prefetches the entry it names (one line, whichever the direction).
    /// Returns the slot's value.
    #[inline(always)]
    fn stage_entry(&self, hash: u32) -> Option<u32> {
        let v = self.index.home_value(hash)?;
        if let Some(e) = self.slab.get((v >> 1) as usize) {
            sim_core::prefetch::line(e);
        }
        Some(v)
    }

    /// Pipeline stage of `conntrack_in_many`: if the entry at the key's home slot is not the
    /// key's, prefetch the home index slot of the key's reply tuple.
    #[inline(always)]
    fn stage_check(&self, key: &Key, home: Option<u32>) {
        if home.is_some_and(|v| {
            ((v >> 1) as usize) < self.slab.len() && self.key_matches(v, key, key.slim())
        }) {
            return;
        }
        if let Some(r) = key.swapped() {
            self.index.prefetch_home(r.hash(&self.hseed));
        }
    }

    /// [`Conntrack::conntrack_in`] with the packet's key and its hash computed.
    #[inline(always)]
    fn conntrack_in_keyed(
        &mut self,
        now: SimTime,
        pkt: &Packet,
        key: Key,
        h: u32,
        on_new: impl FnOnce(),
    ) -> CtVerdict {
        self.expire_due(now);
        if let L4::Icmp {
            icmp_type, body, ..
        } = pkt.l4
        {
            if icmp_is_error(pkt.is_ipv4(), icmp_type) {
                return self.icmp_error(now, pkt, body);
            }
        }
        let found = self.lookup_key(h, &key);
        #[cfg(test)]
        if self.general_only {
            return self.conntrack_in_general(now, pkt, key, h, found);
        }
        // The common cases, a packet of a known UDP flow and a plain ACK of an ESTABLISHED
        // TCP connection, without leaving this function: the same trackers and bookkeeping
        // as `conntrack_in_general`, only inlined, on one borrow of the entry.
        match found {
            Some((slot, dir)) => {
                if let Some(v) = self.track_inline(now, pkt, slot, dir) {
                    return v;
                }
            }
            None => on_new(),
        }
        self.conntrack_in_general(now, pkt, key, h, found)
    }

    /// The inline part of [`Conntrack::conntrack_in_keyed`]: a known UDP flow's packet
    /// (`track::udp`) or a plain ACK of an ESTABLISHED TCP entry (`track::tcp` for it), then
    /// the refresh and what `tracked` does. `None`: anything else, for the general path.
    #[inline(always)]
    fn track_inline(
        &mut self,
        now: SimTime,
        pkt: &Packet,
        slot: usize,
        dir: Dir,
    ) -> Option<CtVerdict> {
        let cfg = &self.cfg;
        let e = self.slab.get_mut(slot)?;
        let seen_reply = e.status.contains(Status::SEEN_REPLY);
        let extra = match pkt.l4 {
            L4::Udp { .. } => crate::track::udp_known(e, cfg, now),
            L4::Tcp { flags, .. }
                if crate::track::tcp_is_plain_ack(flags)
                    && e.tcp_state() == TcpState::Established as u8 =>
            {
                let w = self.windows.get_mut(e.tcp_window())?;
                let seg = crate::tcp_window::Segment::of(pkt)?;
                let t = crate::track::tcp_established_ack(e, w, cfg, dir, &seg)?;
                #[cfg(test)]
                {
                    self.tcp_fast_hits += 1;
                }
                t
            }
            _ => return None,
        };
        let rearm = e.refresh(now, extra);
        let ctinfo = if dir == Dir::Reply {
            if !seen_reply {
                e.status.insert(Status::SEEN_REPLY);
                e.pending |= ev::REPLY;
            }
            CtInfo::EstablishedReply
        } else if seen_reply {
            CtInfo::Established
        } else {
            CtInfo::New
        };
        let id = EntryId {
            slot: slot as u32,
            gen: e.gen,
        };
        if let Some(t) = rearm {
            self.rearm_earlier(slot, t);
        }
        Some(CtVerdict::Tracked(CtHandle { id, ctinfo }))
    }

    /// The packet's `ctinfo` from its direction and the entry's status, before tracking.
    #[inline(always)]
    fn ctinfo_of(&self, slot: usize, dir: Dir) -> CtInfo {
        if dir == Dir::Reply {
            CtInfo::EstablishedReply
        } else if self.slab[slot].status.contains(Status::SEEN_REPLY) {
            CtInfo::Established
        } else {
            CtInfo::New
        }
    }

    /// After an accepting tracker: a first reply-direction packet sets `SEEN_REPLY`
    /// (`IPCT_REPLY`); the packet carries the entry.
    #[inline(always)]
    fn tracked(&mut self, slot: usize, dir: Dir, ctinfo: CtInfo) -> CtVerdict {
        let e = &mut self.slab[slot];
        if dir == Dir::Reply && !e.status.contains(Status::SEEN_REPLY) {
            e.status.insert(Status::SEEN_REPLY);
            e.pending |= ev::REPLY;
        }
        CtVerdict::Tracked(CtHandle {
            id: EntryId {
                slot: slot as u32,
                gen: e.gen,
            },
            ctinfo,
        })
    }

    /// [`Conntrack::conntrack_in`] for everything but a known UDP flow or a plain ACK of an
    /// ESTABLISHED TCP connection: allocation, the trackers, and their outcomes. `found` is
    /// the lookup of `key` (hash `h`).
    #[inline(never)]
    fn conntrack_in_general(
        &mut self,
        now: SimTime,
        pkt: &Packet,
        key: Key,
        h: u32,
        mut found: Option<(usize, Dir)>,
    ) -> CtVerdict {
        let mut repeated = false;
        loop {
            let (slot, dir, new) = match found {
                Some((slot, dir)) => (slot, dir, false),
                None => {
                    let reply = key.swapped().or_else(|| {
                        Tuple::from_packet(pkt)
                            .invert()
                            .map(|r| Key::from_tuple(&r))
                    });
                    let Some(reply) = reply else {
                        self.stats.invalid += 1;
                        return CtVerdict::Invalid(InvalidReason::CannotInvert);
                    };
                    match self.alloc(now, key, reply, h) {
                        Some(slot) => (slot, Dir::Original, true),
                        None => {
                            self.stats.drop += 1;
                            return CtVerdict::Drop(DropReason::TableFull);
                        }
                    }
                }
            };
            let ctinfo = self.ctinfo_of(slot, dir);
            match crate::track::track(self, now, slot, dir, pkt, new) {
                crate::track::Track::Accept => {}
                crate::track::Track::Invalid(r) => {
                    if new {
                        self.free_slot(slot);
                    }
                    self.stats.invalid += 1;
                    return CtVerdict::Invalid(r);
                }
                crate::track::Track::Kill => {
                    self.destroy(slot, now, DestroyCause::Killed, true);
                }
                crate::track::Track::Repeat => {
                    self.destroy(slot, now, DestroyCause::Killed, false);
                    if !repeated {
                        repeated = true;
                        found = self.lookup_key(h, &key);
                        continue;
                    }
                    self.stats.invalid += 1;
                    return CtVerdict::Invalid(InvalidReason::TcpInvalidState);
                }
            }
            return self.tracked(slot, dir, ctinfo);
        }
    }

    /// `nf_conntrack_inet_error`: an ICMP error is RELATED to the entry of the packet it
    /// quotes.
    fn icmp_error(&mut self, now: SimTime, pkt: &Packet, body: IcmpBody) -> CtVerdict {
        let IcmpBody::Error(inner) = body else {
            self.stats.error += 1;
            return CtVerdict::Invalid(InvalidReason::IcmpErrorMalformed);
        };
        let ports = crate::tuple::has_ports(inner.proto);
        let icmp = crate::tuple::is_icmp(inner.proto);
        let quoted = Tuple {
            src: inner.src,
            dst: inner.dst,
            sport: if ports || icmp { inner.sport } else { 0 },
            dport: if ports {
                inner.dport
            } else if icmp {
                u16::from(inner.icmp_type) << 8
            } else {
                0
            },
            proto: inner.proto,
        };
        let found = quoted
            .invert()
            .and_then(|t| self.lookup(&t))
            .filter(|(slot, _)| self.slab[*slot].timeout > now);
        let _ = pkt;
        match found {
            Some((slot, dir)) => CtVerdict::Tracked(CtHandle {
                id: self.id_of(slot),
                ctinfo: if dir == Dir::Reply {
                    CtInfo::RelatedReply
                } else {
                    CtInfo::Related
                },
            }),
            None => {
                self.stats.error += 1;
                CtVerdict::Invalid(InvalidReason::IcmpErrorNoMatch)
            }
        }
    }

    /// `__nf_conntrack_alloc`: a new unconfirmed entry, after early drop if the table is
    /// full. `None` = table full.
    fn alloc(&mut self, now: SimTime, orig: Key, reply: Key, hash: u32) -> Option<usize> {
        if self.cfg.max != 0 && self.count >= self.cfg.max && !self.early_drop(now, hash) {
            return None;
        }
        self.count += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        // nf_ct_tstamp_ext_add at init_conntrack when nf_conntrack_timestamp is 1; the start
        // is written at confirmation (__nf_conntrack_confirm), the same instant here.
        let start = if self.cfg.timestamp {
            sim_ns(now)
        } else {
            NO_START
        };
        let fresh = |gen: u32| Entry {
            keys: [Slim::default(); 2],
            timeout: SimTime::ZERO,
            armed: SimTime::MAX,
            proto_state: [0; 8],
            gen,
            status: Status::default(),
            pending: 0,
            life: Life::Unconfirmed,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                let s = s as usize;
                let gen = self.slab[s].gen;
                self.slab[s] = fresh(gen);
                self.marks[s] = 0;
                self.seqs[s] = seq;
                self.starts[s] = start;
                s
            }
            None => {
                self.slab.push(fresh(0));
                self.marks.push(0);
                self.seqs.push(seq);
                self.starts.push(start);
                self.slab.len() - 1
            }
        };
        self.set_keys(slot, orig, reply);
        Some(slot)
    }

    /// `early_drop`: from the new tuple's bucket, up to [`EVICTION_RANGE`] buckets, drop every
    /// non-ASSURED entry of the first bucket that has any.
    fn early_drop(&mut self, now: SimTime, hash: u32) -> bool {
        let nb = self.cfg.buckets.max(1);
        let mut bucket = reciprocal_scale(hash, nb);
        let mut members = std::mem::take(&mut self.scratch);
        for i in 0..EVICTION_RANGE {
            if i > 0 {
                bucket = (bucket + 1) % nb;
            }
            self.index.bucket_members(bucket, nb, &mut members);
            let mut drops = 0u64;
            for &v in &members {
                let slot = (v >> 1) as usize;
                let e = &self.slab[slot];
                if e.life != Life::Confirmed || e.status.contains(Status::ASSURED) {
                    continue;
                }
                self.destroy(slot, now, DestroyCause::EarlyDrop, false);
                drops += 1;
            }
            if drops > 0 {
                self.stats.early_drop += drops;
                self.scratch = members;
                return true;
            }
        }
        self.scratch = members;
        false
    }

    /// Sets an entry's timeout to `now + extra` (`nf_ct_refresh`): replaced, never max'd.
    #[inline(always)]
    pub(crate) fn refresh(&mut self, slot: usize, now: SimTime, extra: sim_core::SimDuration) {
        if let Some(t) = self.slab[slot].refresh(now, extra) {
            self.rearm_earlier(slot, t);
        }
    }

    /// A confirmed entry's deadline moved earlier, to `t`: arm a timer there unless one is
    /// armed sooner.
    #[inline(never)]
    fn rearm_earlier(&mut self, slot: usize, t: SimTime) {
        let e = &mut self.slab[slot];
        if t < e.armed && e.life == Life::Confirmed {
            e.armed = t;
            self.timers.push(Reverse(Timer::new(t, slot as u32)));
        }
    }

    // ----- confirm / discard -------------------------------------------------------------

    /// The confirm hook (`nf_conntrack_confirm`), at POSTROUTING or INPUT: a new entry enters
    /// the table (`[NEW]`) and its timeout starts; then the events this packet caused are
    /// delivered. A handle of an entry killed on the way (RST before reply) is released.
    #[inline]
    pub fn confirm(&mut self, now: SimTime, handle: CtHandle) -> Result<(), ConfirmError> {
        self.expire_due(now);
        // The common case, a packet of a confirmed entry with no event to deliver, without a
        // call: what `confirm_general` and `deliver` do for it.
        let events = self.cfg.events != 0;
        if let Some(e) = self.slab.get_mut(handle.id.slot as usize) {
            if e.gen == handle.id.gen && e.life == Life::Confirmed && (e.pending == 0 || !events) {
                e.pending = 0;
                return Ok(());
            }
        }
        self.confirm_general(now, handle)
    }

    /// [`Conntrack::confirm`] of a new, dying or gone entry, or one with events to deliver.
    #[inline(never)]
    fn confirm_general(&mut self, now: SimTime, handle: CtHandle) -> Result<(), ConfirmError> {
        self.expire_due(now);
        let Some(slot) = self.slot_of(handle.id) else {
            return Err(ConfirmError::NoEntry(handle.id));
        };
        match self.slab[slot].life {
            Life::Dying => {
                self.free_slot(slot);
                return Ok(());
            }
            Life::Unconfirmed => {
                let (o, r) = (self.key(slot, 0), self.key(slot, 1));
                let ho = o.hash(&self.hseed);
                let hr = r.hash(&self.hseed);
                if self.lookup_key(ho, &o).is_some() || self.lookup_key(hr, &r).is_some() {
                    self.stats.insert_failed += 1;
                    self.free_slot(slot);
                    return Err(ConfirmError::InsertFailed(handle.id));
                }
                let v = (slot as u32) << 1;
                // The reply key goes in first so that, as with the kernel's head insertion of
                // the reply tuplehash after the original, a connection whose two tuples are
                // equal (a packet to itself) is found in the reply direction.
                self.index.insert(hr, v | 1);
                self.index.insert(ho, v);
                let e = &mut self.slab[slot];
                let deadline = now.saturating_add(e.timeout.since_start());
                e.timeout = deadline;
                e.armed = deadline;
                e.life = Life::Confirmed;
                e.status.insert(Status::CONFIRMED);
                e.pending |= ev::NEW;
                self.timers.push(Reverse(Timer::new(deadline, slot as u32)));
                self.confirmed += 1;
            }
            Life::Confirmed | Life::Free => {}
        }
        self.deliver(slot, now);
        Ok(())
    }

    /// A packet holding `handle` was dropped or consumed before any confirm hook: a new
    /// entry vanishes without an event (`nf_ct_put` of an unconfirmed entry). For a confirmed
    /// entry nothing happens; its pending events wait for the next packet's confirm.
    pub fn discard(&mut self, now: SimTime, handle: CtHandle) {
        let _ = now;
        if let Some(slot) = self.slot_of(handle.id) {
            if matches!(self.slab[slot].life, Life::Unconfirmed | Life::Dying) {
                self.free_slot(slot);
            }
        }
    }

    fn deliver(&mut self, slot: usize, now: SimTime) {
        let pending = std::mem::take(&mut self.slab[slot].pending);
        if pending == 0 || self.cfg.events == 0 {
            return;
        }
        let kind = if pending & ev::NEW != 0 {
            EventKind::New
        } else {
            EventKind::Update
        };
        let entry = self.snapshot(slot);
        self.events.push(CtEvent {
            at: now,
            kind,
            cause: None,
            entry,
        });
    }

    // ----- destroy, free -----------------------------------------------------------------

    /// Removes a confirmed entry from the table with a DESTROY event stamped `at`. With
    /// `keep_slot` the slot stays (Dying) until its packet's handle is released.
    fn destroy(&mut self, slot: usize, at: SimTime, cause: DestroyCause, keep_slot: bool) {
        if self.slab[slot].life != Life::Confirmed {
            if !keep_slot {
                self.free_slot(slot);
            }
            return;
        }
        let (o, r) = (self.key(slot, 0), self.key(slot, 1));
        let v = (slot as u32) << 1;
        self.index.remove(o.hash(&self.hseed), v);
        self.index.remove(r.hash(&self.hseed), v | 1);
        self.confirmed -= 1;
        if self.cfg.events != 0 {
            let mut entry = self.snapshot(slot);
            entry.status.insert(Status::DYING);
            self.events.push(CtEvent {
                at,
                kind: EventKind::Destroy,
                cause: Some(cause),
                entry,
            });
        }
        let e = &mut self.slab[slot];
        e.status.insert(Status::DYING);
        e.pending = 0;
        if keep_slot {
            e.life = Life::Dying;
        } else {
            self.free_slot(slot);
        }
    }

    fn free_slot(&mut self, slot: usize) {
        if self.slab[slot].life == Life::Free {
            return;
        }
        let o = self.key(slot, 0);
        if !self.wide.is_empty() {
            self.wide.remove(&(slot as u32));
        }
        let e = &mut self.slab[slot];
        if e.keys[0].proto() == IPPROTO_TCP {
            self.windows.release(e.tcp_window());
            e.set_tcp_window(0);
        }
        let nat_src = e.status.contains(Status::SRC_NAT);
        let id = EntryId {
            slot: slot as u32,
            gen: e.gen,
        };
        e.life = Life::Free;
        e.gen = e.gen.wrapping_add(1);
        e.armed = SimTime::MAX;
        e.pending = 0;
        self.count -= 1;
        self.free.push(slot as u32);
        if nat_src {
            let o = o.tuple();
            self.bysource.remove((o.proto, o.src, o.sport), id);
        }
    }

    // ----- expiry --------------------------------------------------------------------------

    /// [`Conntrack::expire`] when a timer is due, else nothing: one comparison with the
    /// earliest timer, so a packet that expires nothing pays nothing more.
    #[inline]
    fn expire_due(&mut self, now: SimTime) {
        if matches!(self.timers.peek(), Some(&Reverse(t)) if t.at() <= now) {
            self.expire(now);
        }
    }

    /// Reaps every entry whose timeout is ≤ `now`, in deadline order, each with a DESTROY
    /// event stamped with its exact expiry instant. O(log n) per timer.
    pub fn expire(&mut self, now: SimTime) {
        while let Some(&Reverse(timer)) = self.timers.peek() {
            let (t, slot) = (timer.at(), timer.slot());
            if t > now {
                break;
            }
            self.timers.pop();
            let s = slot as usize;
            let e = &self.slab[s];
            if e.life != Life::Confirmed || e.armed != t {
                continue; // stale timer
            }
            if e.timeout <= t {
                let at = e.timeout;
                self.destroy(s, at, DestroyCause::Timeout, false);
            } else {
                // Refreshed since it was armed: re-arm at the current deadline (even if that
                // too is past, so that DESTROY events come out in deadline order).
                let d = e.timeout;
                self.slab[s].armed = d;
                self.timers.push(Reverse(Timer::new(d, slot)));
            }
        }
    }

    /// The next instant an entry expires, if any (quinn's `poll_timeout`). Exact: stale
    /// timers left by refreshes are re-armed here, which is why it takes `&mut self`.
    pub fn next_expiry(&mut self) -> Option<SimTime> {
        while let Some(&Reverse(timer)) = self.timers.peek() {
            let (t, slot) = (timer.at(), timer.slot());
            let s = slot as usize;
            let e = &self.slab[s];
            if e.life != Life::Confirmed || e.armed != t {
                self.timers.pop();
                continue;
            }
            if e.timeout == t {
                return Some(t);
            }
            let d = e.timeout;
            self.timers.pop();
            self.slab[s].armed = d;
            self.timers.push(Reverse(Timer::new(d, slot)));
        }
        None
    }

    // ----- events --------------------------------------------------------------------------

    /// Takes the events recorded so far, oldest first.
    pub fn drain_events(&mut self) -> Vec<CtEvent> {
        std::mem::take(&mut self.events)
    }

    /// Events recorded and not yet drained.
    pub fn pending_events(&self) -> &[CtEvent] {
        &self.events
    }

    // ----- list / delete -------------------------------------------------------------------

    /// `conntrack -L [filter]` at `now`: confirmed entries not yet expired that match, in
    /// creation order.
    pub fn list(&self, now: SimTime, filter: &Filter) -> Vec<CtEntry> {
        let mut out: Vec<CtEntry> = self
            .slab
            .iter()
            .enumerate()
            .filter(|(_, e)| e.life == Life::Confirmed && e.timeout > now)
            .map(|(s, _)| self.snapshot(s))
            .filter(|e| filter.matches(e))
            .collect();
        out.sort_by_key(|e| e.seq);
        out
    }

    /// `conntrack -D [filter]` at `now`: deletes the matching entries (DESTROY events with
    /// cause [`DestroyCause::Delete`]) and returns them as they were, in creation order.
    /// An empty result is what makes the real tool exit non-zero.
    pub fn delete(&mut self, now: SimTime, filter: &Filter) -> Vec<CtEntry> {
        self.expire(now);
        let found = self.list(now, filter);
        let cause = DestroyCause::Delete {
            portid: self.portid,
        };
        for e in &found {
            if let Some(slot) = self.slot_of(e.id) {
                self.destroy(slot, now, cause, false);
            }
        }
        found
    }

    /// Deletes one entry by id (a reconciler that already listed it). Returns it as it was.
    pub fn delete_entry(&mut self, now: SimTime, id: EntryId) -> Option<CtEntry> {
        self.expire(now);
        let slot = self.slot_of(id)?;
        if self.slab[slot].life != Life::Confirmed {
            return None;
        }
        let snap = self.snapshot(slot);
        let cause = DestroyCause::Delete {
            portid: self.portid,
        };
        self.destroy(slot, now, cause, false);
        Some(snap)
    }

    /// Inserts a confirmed entry from userspace, as `conntrack -I` does
    /// (`ctnetlink_create_conntrack`): its tuples, status, TCP state, mark and timeout as
    /// given, created `age` ago (which decides when a UDP entry's next packet may make it
    /// ASSURED: more than 2 s after creation, `nf_conntrack_udp_packet`). Queues a `[NEW]`
    /// event and counts `insert` (`nf_conntrack_hash_check_insert`). Refused when either
    /// tuple is in the table already (the kernel's `EEXIST`) or the table is full.
    pub fn insert(&mut self, now: SimTime, e: &NewEntry) -> Result<EntryId, InsertError> {
        self.insert_as(now, e, false)
    }

    /// Puts an entry of a node's saved state (`conntrack -L` of a real node) into the table:
    /// as [`Conntrack::insert`], but it is the starting state, not traffic: no `[NEW]` event,
    /// no `insert` counted, and its timestamp start (when [`NewEntry::timestamped`]) `age`
    /// before `now`, which may lie before the simulation's start.
    pub fn load(&mut self, now: SimTime, e: &NewEntry) -> Result<EntryId, InsertError> {
        self.insert_as(now, e, true)
    }

    fn insert_as(
        &mut self,
        now: SimTime,
        e: &NewEntry,
        loaded: bool,
    ) -> Result<EntryId, InsertError> {
        self.expire(now);
        if e.orig.proto != e.reply.proto || e.orig.src.is_ipv4() != e.reply.src.is_ipv4() {
            return Err(InsertError::Mismatch);
        }
        let (o, r) = (Key::from_tuple(&e.orig), Key::from_tuple(&e.reply));
        let (ho, hr) = (o.hash(&self.hseed), r.hash(&self.hseed));
        if self.lookup_key(ho, &o).is_some() || self.lookup_key(hr, &r).is_some() {
            return Err(InsertError::Exists);
        }
        let slot = self.alloc(now, o, r, ho).ok_or(InsertError::TableFull)?;
        let v = (slot as u32) << 1;
        self.index.insert(hr, v | 1);
        self.index.insert(ho, v);
        let deadline = now.saturating_add(e.timeout);
        let events = self.cfg.events != 0 && !loaded;
        self.marks[slot] = e.mark;
        if loaded {
            self.starts[slot] = if e.timestamped {
                created_ns(now, e.age)
            } else {
                NO_START
            };
        }
        let ent = &mut self.slab[slot];
        ent.status = e.status;
        ent.status.insert(Status::CONFIRMED);
        if e.orig.proto == IPPROTO_TCP {
            let st = e.tcp_state.unwrap_or(TcpState::Established);
            ent.set_tcp_state(st as u8);
            let w = match e.history {
                History::Userspace => crate::tcp_window::Window::default(),
                History::Listed => {
                    use crate::track::TcpIndex;
                    *ent.tcp_flags_mut() = match st {
                        TcpState::FinWait
                        | TcpState::CloseWait
                        | TcpState::LastAck
                        | TcpState::TimeWait => TcpIndex::None as u8 | tf::CLOSE_INIT_ORIG,
                        TcpState::Close => TcpIndex::Rst as u8,
                        _ => TcpIndex::None as u8,
                    };
                    crate::tcp_window::Window::listed()
                }
            };
            let name = self.windows.alloc(w);
            self.slab[slot].set_tcp_window(name);
        } else if e.orig.proto == sim_core::packet::IPPROTO_UDP {
            // stream_ts = creation + 2 s, which may lie before the simulation's start (an
            // entry of a real node's listing older than the run).
            ent.set_stream_ts(created_ns(now, e.age).saturating_add(2_000_000_000));
        }
        let ent = &mut self.slab[slot];
        ent.timeout = deadline;
        ent.armed = deadline;
        ent.life = Life::Confirmed;
        ent.pending = if events { ev::NEW } else { 0 };
        self.timers.push(Reverse(Timer::new(deadline, slot as u32)));
        self.confirmed += 1;
        if !loaded {
            self.stats.insert += 1;
        }
        self.deliver(slot, now);
        Ok(self.id_of(slot))
    }

    /// The whole `conntrack -L` output at `now` (stdout lines, then the stderr summary line
    /// is [`crate::shown_summary`]).
    pub fn dump(&self, now: SimTime, filter: &Filter) -> String {
        let mut s = String::new();
        for e in self.list(now, filter) {
            s.push_str(&e.list_line(now).to_string());
            s.push('\n');
        }
        s
    }

    pub(crate) fn tcp_flags_mut(&mut self, slot: usize) -> &mut u8 {
        self.slab[slot].tcp_flags_mut()
    }
}

#[cfg(test)]
#[path = "fast_path_tests.rs"]
mod fast_path_tests;

#[cfg(test)]
mod layout {
    #[test]
    fn an_entry_is_one_cache_line_and_a_timer_twelve_bytes() {
        assert_eq!(std::mem::size_of::<super::Entry>(), 64);
        assert_eq!(std::mem::align_of::<super::Entry>(), 64);
        assert_eq!(std::mem::size_of::<std::cmp::Reverse<super::Timer>>(), 12);
    }
}

#[cfg(test)]
mod read_ahead {
    use super::*;
    use crate::filter::Filter;
    use sim_core::{SimDuration, TcpFlags};
    use std::net::{Ipv4Addr, SocketAddr};

    fn sa(host: u32, port: u16) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::from(0x7f00_0000 + host)), port)
    }

    /// `conntrack_in_then` calls its hook for a packet of no known flow only, before the
    /// entry is made, and tracks every packet as `conntrack_in` does.
    #[test]
    fn the_new_flow_hook_runs_for_new_flows_only() {
        let mut hooked = Conntrack::new(7, "hook", Sysctls::default());
        let mut plain = hooked.clone();
        let (c, s) = (sa(1, 40_000), sa(2, 53));
        let packets = [
            Packet::udp(c, s),
            Packet::udp(c, s),
            Packet::udp(s, c),
            Packet::udp(sa(3, 40_000), s),
        ];
        let mut calls = Vec::new();
        for (i, p) in packets.iter().enumerate() {
            let now = SimTime::from_millis(i as u64);
            let mut called = false;
            let v = hooked.conntrack_in_then(now, p, || called = true);
            calls.push(called);
            let w = plain.conntrack_in(now, p);
            assert_eq!(format!("{v:?}"), format!("{w:?}"), "packet {i}");
            if let (CtVerdict::Tracked(h), CtVerdict::Tracked(g)) = (v, w) {
                hooked.confirm(now, h).expect("no clash");
                plain.confirm(now, g).expect("no clash");
            }
        }
        // New, known, its reply, another new flow.
        assert_eq!(calls, [true, false, false, true]);
        let now = SimTime::from_millis(10);
        assert_eq!(
            hooked.dump(now, &Filter::default()),
            plain.dump(now, &Filter::default())
        );
    }

    /// On a table large enough for `conntrack_in_many` to read ahead, a batch mixing known
    /// flows, replies, new flows, TCP, ICMP errors and entries expiring at the batch's
    /// instant gives what one call per packet gives.
    #[test]
    fn read_ahead_changes_nothing_on_a_large_table() {
        let mut one = Conntrack::new(7, "read-ahead", Sysctls::default());
        let n = 50_000u32;
        for i in 0..n {
            let now = SimTime::from_nanos(20_000 * u64::from(i));
            let p = Packet::udp(sa(1 + i / 100, 1000 + (i % 100) as u16), sa(1, 53));
            if let CtVerdict::Tracked(h) = one.conntrack_in(now, &p) {
                one.confirm(now, h).expect("no clash");
            }
        }
        one.drain_events();
        assert!(one.index.slot_count() >= READ_AHEAD_MIN_SLOTS);
        let mut many = one.clone();
        // Created 20 µs apart over one second: at 30.02 s the first thousand have expired.
        let now = SimTime::from_millis(30_020);
        let mut pkts = Vec::new();
        for k in 0..3000u32 {
            let i = (k * 7919) % (n + 500);
            let (c, s) = (sa(1 + i / 100, 1000 + (i % 100) as u16), sa(1, 53));
            let p = match k % 6 {
                0 | 1 => Packet::udp(c, s),
                2 => Packet::udp(s, c),
                3 => Packet::tcp(c, sa(2, 80), TcpFlags::SYN),
                4 => Packet::icmp_error(
                    IpAddr::V4(Ipv4Addr::new(127, 9, 9, 9)),
                    &Packet::udp(s, c),
                    3,
                    3,
                ),
                _ => Packet::icmp_echo_request(c.ip(), s.ip(), k as u16, 1),
            };
            pkts.push(p);
        }
        let want: Vec<CtVerdict> = pkts.iter().map(|p| one.conntrack_in(now, p)).collect();
        let mut got = Vec::new();
        many.conntrack_in_many(now, &pkts, &mut got);
        assert_eq!(got, want);
        for ct in [&mut one, &mut many] {
            for v in &want {
                if let CtVerdict::Tracked(h) = v {
                    let _ = ct.confirm(now, *h);
                }
            }
        }
        let ev = |ct: &mut Conntrack| {
            ct.drain_events()
                .iter()
                .map(|e| format!("{} {e}", e.at.as_nanos()))
                .collect::<Vec<_>>()
        };
        let (a, b) = (ev(&mut one), ev(&mut many));
        assert!(a.iter().any(|l| l.contains("[DESTROY]")), "some expired");
        assert_eq!(a, b);
        assert_eq!(one.stats(), many.stats());
        assert_eq!(one.len(), many.len());
        let later = now + SimDuration::from_secs(5);
        assert_eq!(
            one.dump(later, &Filter::all()),
            many.dump(later, &Filter::all())
        );
    }
}
