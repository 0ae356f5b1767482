//! The table itself: [`Conntrack`], its entries, lookup, allocation with `nf_conntrack_max` and
//! early drop, confirmation, expiry, events, and the list/delete API.
//!
//! This file holds the entry layout and [`Conntrack`] with its accessors; `verdict.rs` what
//! [`Conntrack::conntrack_in`] and [`Conntrack::confirm`] return, `input.rs` lookup and the
//! per-packet path, `life.rs` an entry's life from allocation to destroy and expiry,
//! `tools.rs` what conntrack(8) does to a table (list, delete, insert, dump).

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

mod input;
mod life;
mod tools;
mod verdict;

pub use tools::{History, InsertError, NewEntry};
pub use verdict::{ConfirmError, CtHandle, CtInfo, CtVerdict, DropReason, InvalidReason};

/// How many packets ahead of the one it tracks [`Conntrack::conntrack_in_many`] starts
/// reading (the prefetch distance of the index; entries are prefetched half as far ahead).
pub const BATCH: usize = 16;

/// Below this many index slots (a 2 MiB index, 64K–128K entries) `conntrack_in_many` does
/// not read ahead: the table stays in the caches, so there would be nothing to overlap.
const READ_AHEAD_MIN_SLOTS: usize = 1 << 18;

/// How many buckets `early_drop` looks at (`NF_CT_EVICTION_RANGE`).
pub const EVICTION_RANGE: u32 = 8;

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
    /// The Linux release whose clash handling `confirm` follows (`life.rs`).
    pub(crate) kernel: crate::kernel::KernelVersion,
    /// A confirmed entry whose keys are out of the index for the length of one packet on
    /// another CPU ([`Conntrack::race_hide`]): its slot and generation.
    hidden: Option<(u32, u32)>,
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
            kernel: crate::kernel::KernelVersion::MODEL,
            hidden: None,
            #[cfg(test)]
            general_only: false,
            #[cfg(test)]
            tcp_fast_hits: 0,
        }
    }

    /// The Linux release this table behaves as (default [`KernelVersion::MODEL`]): it decides
    /// how a clash at confirmation is handled (docs/kernel-model.md §22).
    ///
    /// [`KernelVersion::MODEL`]: crate::kernel::KernelVersion::MODEL
    pub fn kernel(&self) -> crate::kernel::KernelVersion {
        self.kernel
    }

    /// Sets the release this table behaves as.
    pub fn set_kernel(&mut self, v: crate::kernel::KernelVersion) {
        self.kernel = v;
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
}

#[cfg(test)]
mod fast_path_tests;

#[cfg(test)]
mod layout;

#[cfg(test)]
mod read_ahead;
