//! The mutable side of a ruleset: rule and policy counters, `statistic --mode nth` counters,
//! `recent` address lists and `nfacct` counters.
//!
//! A [`RulesetState`] belongs to one [`Ruleset`]. The ruleset gives every rule (and every
//! nth match, built-in policy, recent table and nfacct object) a slot number and a unique id;
//! the state keeps the values per slot together with the id they belong to. When a slot is
//! reused by a new rule the id differs and the value starts afresh (from the counters a
//! restore with `-c` gave), so a restore never has to touch the state and replacing a chain
//! resets exactly its counters, as in the kernel.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::sync::Arc;

use sim_core::{IfName, SimDuration, SimTime};

use crate::compile::Program;
use crate::eval::{Action, NatRequest};
use crate::index::FastMap;
use crate::rule::Bind;
use crate::ruleset::{Registry, Ruleset, TableData};
use crate::types::{ip_from_num, ip_num, ip_to_numeric, Counters, Family, Hook, Table};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SlotState {
    pub uid: u64,
    /// Packets (for the slot of a `statistic --mode nth` match: its counter).
    pub packets: u64,
    pub bytes: u64,
}

/// One address of a `recent` table (kernel `struct recent_entry`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RecentEntry {
    /// The masked address, as [`crate::types::ip_num`] gives it.
    pub addr: u128,
    pub ttl: u8,
    /// Time stamps, oldest first; at most the table's capacity.
    pub stamps: VecDeque<SimTime>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RecentTable {
    pub uid: u64,
    /// Least recently used first.
    pub entries: Vec<RecentEntry>,
}

/// An entry of a `recent` list as `/proc/net/xt_recent/NAME` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecentEntryView {
    /// The (masked) address; IPv6 in an ip6tables ruleset's lists (xt_recent keeps one
    /// set of lists per family).
    pub addr: IpAddr,
    /// The TTL recorded with the last update.
    pub ttl: u8,
    /// The time stamps kept, oldest first.
    pub stamps: Vec<SimTime>,
}

/// Why [`RulesetState::load_recent`] refused a list.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RecentLoadError {
    /// The entry at fault (an index into the entries given), if one is.
    pub entry: Option<usize>,
    /// What was wrong.
    pub message: String,
}

/// Counter slots per page of [`Slots`].
const SLOT_PAGE: usize = 256;

/// The rule counter slots, in pages of [`SLOT_PAGE`] allocated when a slot of the page is
/// first counted. A node of a big cluster holds kube-proxy's whole ruleset (160,000 rules
/// for 5,000 Services of 10 endpoints) but its packets count on a few hundred of them: one
/// flat vector grown to the highest slot counted cost 6 MiB per node, the pages a few
/// dozen KiB. A slot never counted reads as absent, as a slot of another rule would.
#[derive(Clone, Debug, Default)]
pub(crate) struct Slots {
    pages: Vec<Option<Box<[SlotState; SLOT_PAGE]>>>,
}

impl Slots {
    /// Slot `i`, if its page exists.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&SlotState> {
        let page = self.pages.get(i / SLOT_PAGE)?.as_deref()?;
        Some(&page[i % SLOT_PAGE])
    }

    /// Asks the CPU to start loading the lines of slots `i..i + n` (those of `i`'s page).
    /// Changes nothing.
    #[inline]
    pub(crate) fn prefetch_run(&self, i: usize, n: usize) {
        let Some(Some(page)) = self.pages.get(i / SLOT_PAGE) else {
            return;
        };
        let run = page.get(i % SLOT_PAGE..).unwrap_or(&[]);
        let run = &run[..run.len().min(n)];
        // One prefetch per line: a slot is 24 bytes, so every third slot starts a new one
        // or nearly (a line a slot straddles is asked for by its first half's slot).
        for s in run.iter().step_by(2) {
            sim_core::prefetch::line(s);
        }
        if let Some(last) = run.last() {
            sim_core::prefetch::line(last);
        }
    }

    /// Slot `i`, its page allocated (all slots unused, uid 0) if it did not exist.
    #[inline]
    pub(crate) fn get_or_add(&mut self, i: usize) -> &mut SlotState {
        let p = i / SLOT_PAGE;
        if p >= self.pages.len() {
            self.pages.resize_with(p + 1, || None);
        }
        let page = self.pages[p].get_or_insert_with(|| Box::new([SlotState::default(); SLOT_PAGE]));
        &mut page[i % SLOT_PAGE]
    }

    /// The slots of the pages that exist, with their numbers, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, &SlotState)> {
        self.pages.iter().enumerate().flat_map(|(p, page)| {
            page.iter().flat_map(move |pg| {
                pg.iter()
                    .enumerate()
                    .map(move |(j, v)| (p * SLOT_PAGE + j, v))
            })
        })
    }
}

/// Counters and lists that change while packets are evaluated. See the module docs.
#[derive(Clone, Debug, Default)]
pub struct RulesetState {
    pub(crate) slots: Slots,
    pub(crate) recent: Vec<RecentTable>,
    pub(crate) nfacct: Vec<SlotState>,
    /// Remembered outcomes of pure walks, by `table * 5 + hook` (a cache: it changes no
    /// result, see [`WalkMemo`]).
    pub(crate) memo: Vec<WalkMemo>,
    /// Scratch for the counters a walk bumps while it is being remembered.
    pub(crate) memo_scratch: Vec<MemoRef>,
}

/// What a pure walk's outcome depends on: the packet's features, masked as its rules look at
/// them ([`crate::compile::MemoSpec`]), packed in three words, and the interfaces when some
/// rule has `-i` / `-o`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MemoKey {
    pub words: [u64; 3],
    pub ifaces: Option<(Option<IfName>, Option<IfName>)>,
}

impl Hash for MemoKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        for w in self.words {
            h.write_u64(w);
        }
        if let Some(i) = &self.ifaces {
            i.hash(h);
        }
    }
}

/// In a [`MemoRef`]: the built-in chain's policy counter rather than a rule's.
pub(crate) const MEMO_POLICY: u32 = u32::MAX;

/// In a [`MemoRef`]: the nfacct object with registry index `bind.idx` (counted under the
/// uid it has when the walk is replayed, as a walk would).
pub(crate) const MEMO_NFACCT: u32 = u32::MAX - 1;

/// A counter a remembered walk bumps: its slot, and where its initial value comes from (the
/// rule at this position of the program, or [`MEMO_POLICY`]) should the slot have been
/// taken over since.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MemoRef {
    pub bind: Bind,
    pub pos: u32,
}

/// At most this many outcomes per table and hook; a full memo starts over.
pub(crate) const MEMO_MAX_ENTRIES: usize = 1024;

/// A walk that bumps more counters than this is not remembered (replaying it would save
/// little, and it would fill the memo).
pub(crate) const MEMO_MAX_REFS_PER_WALK: usize = 64;

/// At most this many counters over all outcomes of one table and hook (with
/// [`MEMO_MAX_ENTRIES`], a memo holds well under a megabyte); a full memo starts over.
pub(crate) const MEMO_MAX_REFS: usize = 16 * 1024;

/// The outcome of one pure walk.
#[derive(Clone, Debug)]
pub(crate) struct MemoEntry {
    action: Action,
    nat: Option<NatRequest>,
    /// The packet's mark after the walk is `(mark & keep) ^ xor`.
    keep: u32,
    xor: u32,
    /// The counters it bumped, in order: `refs[start..end]`.
    start: u32,
    end: u32,
}

/// Remembered outcomes of the pure walks of one table at one hook, valid for one compiled
/// program (a commit installs a new one, and the memo starts over). Holding the program
/// keeps it alive, so the pointer comparison cannot mistake a later program for it.
/// Lookups only: nothing iterates the map.
#[derive(Clone, Debug, Default)]
pub(crate) struct WalkMemo {
    program: Option<Arc<Program>>,
    map: FastMap<MemoKey, u32>,
    entries: Vec<MemoEntry>,
    refs: Vec<MemoRef>,
    /// The key found last and its entry: packets of one flow, or of one service, come in
    /// runs, and comparing a key is cheaper than hashing it.
    last: Option<(MemoKey, u32)>,
}

/// The state of slot `b`, grown into and started afresh from `init` when the slot now
/// belongs to another rule (its uid differs).
#[inline]
fn slot_in(slots: &mut Slots, b: Bind, init: impl FnOnce() -> Counters) -> &mut SlotState {
    let s = slots.get_or_add(b.idx as usize);
    if s.uid != b.uid {
        let c = init();
        *s = SlotState {
            uid: b.uid,
            packets: c.packets,
            bytes: c.bytes,
        };
    }
    s
}

/// Bumps the counters of slot `b` (first setting them from `init` if the slot now belongs
/// to another rule).
#[inline]
fn bump(slots: &mut Slots, b: Bind, init: impl FnOnce() -> Counters, len: u64) {
    let s = slot_in(slots, b, init);
    s.packets += 1;
    s.bytes += len;
}

/// The counters of nfacct object `b` in `slots`: a slot last used by another object (uid)
/// starts from zero.
fn nfacct_slot_in(slots: &mut Vec<SlotState>, b: Bind) -> &mut SlotState {
    let i = b.idx as usize;
    if i >= slots.len() {
        slots.resize(i + 1, SlotState::default());
    }
    let s = &mut slots[i];
    if s.uid != b.uid {
        *s = SlotState {
            uid: b.uid,
            ..SlotState::default()
        };
    }
    s
}

/// At most this many addresses per `recent` table (`ip_list_tot`).
pub const RECENT_MAX_ENTRIES: usize = 100;

impl RulesetState {
    /// An empty state: every counter at its initial value.
    pub fn new() -> RulesetState {
        RulesetState::default()
    }

    #[inline]
    pub(crate) fn slot(&mut self, b: Bind, init: Counters) -> &mut SlotState {
        slot_in(&mut self.slots, b, || init)
    }

    #[inline]
    pub(crate) fn slot_lazy(&mut self, b: Bind, init: impl FnOnce() -> Counters) -> &mut SlotState {
        slot_in(&mut self.slots, b, init)
    }

    /// Replays the remembered outcome of a pure walk of `td` (from built-in chain `base`)
    /// for `key`, if there is one: bumps its counters by `len`, applies its mark change to
    /// `mark`, and returns its verdict.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn memo_replay(
        &mut self,
        at: usize,
        td: &TableData,
        nfacct: &Registry,
        base: u32,
        key: &MemoKey,
        len: u64,
        mark: &mut u32,
    ) -> Option<(Action, Option<NatRequest>)> {
        let m = self.memo.get_mut(at)?;
        if !m
            .program
            .as_ref()
            .is_some_and(|p| Arc::ptr_eq(p, &td.program))
        {
            return None;
        }
        let i = match &m.last {
            Some((k, i)) if k == key => *i,
            _ => {
                let i = *m.map.get(key)?;
                m.last = Some((*key, i));
                i
            }
        };
        let e = &m.entries[i as usize];
        for r in &m.refs[e.start as usize..e.end as usize] {
            if r.pos == MEMO_NFACCT {
                let idx = r.bind.idx;
                let uid = nfacct.entries[idx as usize].uid;
                let s = nfacct_slot_in(&mut self.nfacct, Bind { idx, uid });
                s.packets += 1;
                s.bytes += len;
                continue;
            }
            let init = || {
                if r.pos == MEMO_POLICY {
                    td.chain(base).policy_init
                } else if td.program.rules[r.pos as usize].flags & crate::compile::HAS_INIT == 0 {
                    Counters::default()
                } else {
                    crate::eval::origin_rule(td, &td.program, r.pos as usize).initial_counters
                }
            };
            bump(&mut self.slots, r.bind, init, len);
        }
        *mark = (*mark & e.keep) ^ e.xor;
        Some((e.action, e.nat.clone()))
    }

    /// Remembers the outcome of a pure walk of `program`: `refs` are the counters it bumped
    /// (see [`MemoEntry`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn memo_insert(
        &mut self,
        at: usize,
        program: &Arc<Program>,
        key: MemoKey,
        action: Action,
        nat: Option<NatRequest>,
        keep: u32,
        xor: u32,
        refs: &[MemoRef],
    ) {
        if refs.len() > MEMO_MAX_REFS_PER_WALK {
            return;
        }
        if self.memo.len() <= at {
            self.memo.resize_with(at + 1, WalkMemo::default);
        }
        let m = &mut self.memo[at];
        let current = m.program.as_ref().is_some_and(|p| Arc::ptr_eq(p, program));
        let full = m.entries.len() >= MEMO_MAX_ENTRIES || m.refs.len() + refs.len() > MEMO_MAX_REFS;
        if !current || full {
            m.map.clear();
            m.entries.clear();
            m.refs.clear();
            m.last = None;
            m.program = Some(Arc::clone(program));
        }
        let start = m.refs.len() as u32;
        m.refs.extend_from_slice(refs);
        m.entries.push(MemoEntry {
            action,
            nat,
            keep,
            xor,
            start,
            end: m.refs.len() as u32,
        });
        let i = (m.entries.len() - 1) as u32;
        m.map.insert(key, i);
        m.last = Some((key, i));
    }

    /// How many walk outcomes are remembered, over all tables and hooks.
    #[cfg(test)]
    pub(crate) fn memo_entries(&self) -> usize {
        self.memo.iter().map(|m| m.entries.len()).sum()
    }

    pub(crate) fn peek(&self, b: Bind, init: Counters) -> Counters {
        match self.slots.get(b.idx as usize) {
            Some(s) if s.uid == b.uid && b.uid != 0 => Counters {
                packets: s.packets,
                bytes: s.bytes,
            },
            _ => init,
        }
    }

    pub(crate) fn recent_table(&mut self, b: Bind) -> &mut RecentTable {
        let i = b.idx as usize;
        if i >= self.recent.len() {
            self.recent.resize(i + 1, RecentTable::default());
        }
        let t = &mut self.recent[i];
        if t.uid != b.uid {
            *t = RecentTable {
                uid: b.uid,
                entries: Vec::new(),
            };
        }
        t
    }

    pub(crate) fn nfacct_slot(&mut self, b: Bind) -> &mut SlotState {
        nfacct_slot_in(&mut self.nfacct, b)
    }

    /// Counters of rule `num` (1-based) of `chain` in `table`.
    pub fn rule_counters(
        &self,
        rs: &Ruleset,
        table: Table,
        chain: &str,
        num: usize,
    ) -> Option<Counters> {
        let r = rs.rules(table, chain)?.get(num.checked_sub(1)?)?;
        Some(self.peek(r.slot, r.initial_counters))
    }

    /// Counters of the policy of built-in chain `hook` in `table` (packets that fell off the
    /// end of the chain or RETURNed from it).
    pub fn policy_counters(&self, rs: &Ruleset, table: Table, hook: Hook) -> Option<Counters> {
        let c = rs.builtin_chain(table, hook)?;
        Some(self.peek(c.policy_slot, c.policy_init))
    }

    /// Counters of nfacct object `name` (`nfacct list`).
    pub fn nfacct_counters(&self, rs: &Ruleset, name: &str) -> Option<Counters> {
        let b = rs.nfacct_bind(name)?;
        Some(match self.nfacct.get(b.idx as usize) {
            Some(s) if s.uid == b.uid => Counters {
                packets: s.packets,
                bytes: s.bytes,
            },
            _ => Counters::default(),
        })
    }

    /// The addresses of `recent` list `name`, least recently used first, with the stamps
    /// still relevant at `now` (all of them: the kernel keeps stamps until overwritten).
    pub fn recent_list(&self, rs: &Ruleset, name: &str) -> Option<Vec<RecentEntryView>> {
        let b = rs.recent_bind(name)?;
        Some(match self.recent.get(b.idx as usize) {
            Some(t) if t.uid == b.uid => t
                .entries
                .iter()
                .map(|e| RecentEntryView {
                    addr: ip_from_num(rs.family(), e.addr),
                    ttl: e.ttl,
                    stamps: e.stamps.iter().copied().collect(),
                })
                .collect(),
            _ => Vec::new(),
        })
    }

    /// Replaces the addresses of `recent` list `name` with `entries` (a real node's
    /// `/proc/net/xt_recent/NAME`, see [`crate::recent`]): each with its TTL and stamps,
    /// oldest first. The list's LRU order is taken from the newest stamps (ties keep the
    /// given order), as every `--set`/`--update` moves the address it stamps to the tail.
    pub fn load_recent(
        &mut self,
        rs: &Ruleset,
        name: &str,
        entries: &[RecentEntryView],
    ) -> Result<(), RecentLoadError> {
        let b = rs.recent_bind(name).ok_or_else(|| RecentLoadError {
            entry: None,
            message: {
                let names = rs.recent_names();
                format!(
                    "no rule uses recent list {name:?} (the kernel has no /proc/net/xt_recent/{name} without one); {}",
                    if names.is_empty() {
                        "the rules use no recent list".to_string()
                    } else {
                        format!("the rules use {}", names.join(", "))
                    }
                )
            },
        })?;
        let (mask, cap) = rs.recent_shape(b);
        if entries.len() > RECENT_MAX_ENTRIES {
            return Err(RecentLoadError {
                entry: Some(RECENT_MAX_ENTRIES),
                message: format!(
                    "{} addresses, more than a list holds ({RECENT_MAX_ENTRIES}, ip_list_tot)",
                    entries.len()
                ),
            });
        }
        let mut loaded: Vec<(usize, RecentEntry)> = Vec::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            let fail = |message: String| RecentLoadError {
                entry: Some(i),
                message,
            };
            if Family::of(e.addr) != rs.family() {
                return Err(fail(format!(
                    "{} is not an address of this {} ruleset's lists",
                    ip_to_numeric(e.addr),
                    rs.family().command()
                )));
            }
            let addr = ip_num(e.addr);
            if addr & mask != addr {
                return Err(fail(format!(
                    "{} is not masked by the list's --mask {}",
                    ip_to_numeric(e.addr),
                    ip_to_numeric(ip_from_num(rs.family(), mask))
                )));
            }
            if e.stamps.is_empty() {
                return Err(fail("an address without stamps".into()));
            }
            if e.stamps.len() > cap {
                return Err(fail(format!(
                    "{} stamps, but the rules' list keeps {cap} per address (32, or --hitcount rounded up to a power of two)",
                    e.stamps.len()
                )));
            }
            if e.stamps.windows(2).any(|w| w[1] < w[0]) {
                return Err(fail("stamps are not in time order".into()));
            }
            if loaded.iter().any(|(_, x)| x.addr == addr) {
                return Err(fail(format!("{} appears twice", ip_to_numeric(e.addr))));
            }
            loaded.push((
                i,
                RecentEntry {
                    addr,
                    ttl: e.ttl,
                    stamps: e.stamps.iter().copied().collect(),
                },
            ));
        }
        loaded.sort_by_key(|(i, e)| (e.stamps.back().copied(), *i));
        let t = self.recent_table(b);
        t.entries = loaded.into_iter().map(|(_, e)| e).collect();
        Ok(())
    }

    /// `iptables -Z [-t table]`: zero rule and policy counters (nth counters and recent lists
    /// are untouched, as in the kernel).
    pub fn zero_counters(&mut self, rs: &Ruleset, table: Option<Table>) {
        let mut binds = Vec::new();
        rs.for_each_counter_bind(table, |b| binds.push(b));
        for b in binds {
            let s = self.slot(b, Counters::default());
            s.packets = 0;
            s.bytes = 0;
        }
    }

    /// Forgets `recent` entries whose newest stamp is older than `age` before `now`
    /// (a convenience for long simulations; the kernel only drops them on `--reap` or when the
    /// table is full).
    pub fn expire_recent(&mut self, now: SimTime, age: SimDuration) {
        for t in &mut self.recent {
            t.entries.retain(|e| {
                e.stamps
                    .back()
                    .is_some_and(|s| now.saturating_since(*s) <= age)
            });
        }
    }
}
