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
use std::net::Ipv4Addr;

use sim_core::{SimDuration, SimTime};

use crate::rule::Bind;
use crate::ruleset::Ruleset;
use crate::types::{Counters, Hook, Table};

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SlotState {
    pub uid: u64,
    /// Packets (for the slot of a `statistic --mode nth` match: its counter).
    pub packets: u64,
    pub bytes: u64,
}

/// One address of a `recent` table (kernel `struct recent_entry`).
#[derive(Clone, Debug)]
pub(crate) struct RecentEntry {
    pub addr: u32,
    pub ttl: u8,
    /// Time stamps, oldest first; at most the table's capacity.
    pub stamps: VecDeque<SimTime>,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct RecentTable {
    pub uid: u64,
    /// Least recently used first.
    pub entries: Vec<RecentEntry>,
}

/// An entry of a `recent` list as `/proc/net/xt_recent/NAME` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecentEntryView {
    /// The (masked) address.
    pub addr: Ipv4Addr,
    /// The TTL recorded with the last update.
    pub ttl: u8,
    /// The time stamps kept, oldest first.
    pub stamps: Vec<SimTime>,
}

/// Counters and lists that change while packets are evaluated. See the module docs.
#[derive(Clone, Debug, Default)]
pub struct RulesetState {
    pub(crate) slots: Vec<SlotState>,
    pub(crate) recent: Vec<RecentTable>,
    pub(crate) nfacct: Vec<SlotState>,
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
        let i = b.idx as usize;
        if i >= self.slots.len() {
            let n = (i + 1).max(self.slots.len() * 2).max(64);
            self.slots.resize(n, SlotState::default());
        }
        let s = &mut self.slots[i];
        if s.uid != b.uid {
            *s = SlotState {
                uid: b.uid,
                packets: init.packets,
                bytes: init.bytes,
            };
        }
        s
    }

    #[inline]
    pub(crate) fn slot_lazy(&mut self, b: Bind, init: impl FnOnce() -> Counters) -> &mut SlotState {
        let i = b.idx as usize;
        if i >= self.slots.len() {
            let n = (i + 1).max(self.slots.len() * 2).max(64);
            self.slots.resize(n, SlotState::default());
        }
        let s = &mut self.slots[i];
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
        let i = b.idx as usize;
        if i >= self.nfacct.len() {
            self.nfacct.resize(i + 1, SlotState::default());
        }
        let s = &mut self.nfacct[i];
        if s.uid != b.uid {
            *s = SlotState {
                uid: b.uid,
                ..SlotState::default()
            };
        }
        s
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
                    addr: Ipv4Addr::from(e.addr),
                    ttl: e.ttl,
                    stamps: e.stamps.iter().copied().collect(),
                })
                .collect(),
            _ => Vec::new(),
        })
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
