//! The ruleset of one network namespace: tables, chains, rules, and applying
//! `iptables-restore` input to them.
//!
//! # Restore semantics (iptables-restore 1.8.9, nf_tables)
//!
//! - Each `*table … COMMIT` block is one transaction: it applies completely or not at all.
//!   Blocks commit one after the other, so when a later block fails the earlier ones stay
//!   (the [`RestoreError`] lists them), exactly like `iptables-restore`.
//! - Without `--noflush` a block starts from an empty table; a table whose block touches
//!   nothing ceases to exist. With `--noflush` (how kube-proxy writes) it starts from the
//!   current table: `:CHAIN` flushes a user chain or creates it, on a built-in chain it only
//!   sets the policy (and resets its counters); `-X` deletes an empty, unreferenced chain.
//! - A jump to a chain that does not exist when the block ends fails the block ("Chain 'X'
//!   does not exist"); so do jump loops and targets used in a hook they do not support
//!   (DNAT in POSTROUTING, MASQUERADE in PREROUTING, also through user chains).
//! - `[packets:bytes]` prefixes and policy counters are honoured with
//!   [`RestoreOptions::counters`] (`iptables-restore -c`); `-c P B` inside a rule always is.
//!
//! # Files
//!
//! This file holds the data (chains, tables, the recent/nfacct registries, the options) and
//! the accessors; `restore.rs` parses `iptables-restore` input into table blocks,
//! `commit.rs` installs a block, `validate.rs` checks it first, `save.rs` prints
//! `iptables-save` and `iptables -L`, `memo.rs` shares one restore among identical rulesets.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::compile::{compile, layout_order, Program};
use crate::error::{RestoreError, RestoreErrorKind, RuleErrorKind};
use crate::fmt as pr;
use crate::index::{ChainIndex, FastMap, KeyHasher};
use crate::parse::{parse_command, tokenize_into, Command, Token};
use crate::rule::*;
use crate::state::RulesetState;
use crate::types::*;

mod commit;
mod memo;
mod restore;
mod save;
mod validate;

use memo::{restore_op, text_digest};
pub use memo::{Lineage, RestoreMemo};
use validate::{name_hash, validate};

/// One chain of a table.
#[derive(Clone, Debug)]
pub struct Chain {
    name: String,
    hook: Option<Hook>,
    policy: Policy,
    pub(crate) policy_slot: Bind,
    pub(crate) policy_init: Counters,
    pub(crate) rules: Vec<Rule>,
    pub(crate) index: Option<ChainIndex>,
}

impl Chain {
    fn new(name: &str, hook: Option<Hook>) -> Chain {
        Chain {
            name: name.to_string(),
            hook,
            policy: Policy::Accept,
            policy_slot: Bind::default(),
            policy_init: Counters::default(),
            rules: Vec::new(),
            index: None,
        }
    }

    /// The chain's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The hook of a built-in chain, `None` for a user chain.
    pub fn hook(&self) -> Option<Hook> {
        self.hook
    }

    /// The policy (meaningful for built-in chains).
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Whether evaluation of this chain uses the first-match index.
    pub fn is_indexed(&self) -> bool {
        self.index.is_some()
    }
}

/// One table.
#[derive(Clone, Debug)]
pub(crate) struct TableData {
    /// Chains by id; `None` for a freed id.
    pub chains: Vec<Option<Arc<Chain>>>,
    /// Chain ids by name.
    pub by_name: FastMap<String, u32>,
    /// Built-in chain ids by hook.
    pub builtin: [Option<u32>; 5],
    /// Number of rules jumping or going to each chain name.
    pub refs: FastMap<String, u32>,
    /// The compiled form evaluation uses (rebuilt at every commit).
    pub program: Arc<Program>,
    free_ids: Vec<u32>,
}

impl TableData {
    fn new(table: Table) -> TableData {
        let mut t = TableData {
            chains: Vec::new(),
            by_name: FastMap::default(),
            builtin: [None; 5],
            refs: FastMap::default(),
            program: Arc::new(Program::default()),
            free_ids: Vec::new(),
        };
        for &h in table.hooks() {
            let id = t.add_chain(h.chain_name(), Some(h));
            t.builtin[h as usize] = Some(id);
        }
        t
    }

    #[inline]
    pub(crate) fn chain(&self, id: u32) -> &Chain {
        match self.chains.get(id as usize) {
            Some(Some(c)) => c,
            _ => unreachable!("chain ids are resolved at commit"),
        }
    }

    /// Every chain id in use, in id order (`-F` and `-Z` without a chain name).
    fn all_ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self.by_name.values().copied().collect();
        ids.sort_unstable();
        ids
    }

    fn chain_mut(&mut self, id: u32) -> &mut Chain {
        match self.chains.get_mut(id as usize) {
            Some(Some(c)) => Arc::make_mut(c),
            _ => unreachable!("chain id {id} looked up by name"),
        }
    }

    pub(crate) fn id(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    fn add_chain(&mut self, name: &str, hook: Option<Hook>) -> u32 {
        let c = Some(Arc::new(Chain::new(name, hook)));
        let id = match self.free_ids.pop() {
            Some(id) => {
                self.chains[id as usize] = c;
                id
            }
            None => {
                self.chains.push(c);
                (self.chains.len() - 1) as u32
            }
        };
        self.by_name.insert(name.to_string(), id);
        id
    }

    fn note_refs(&mut self, rules: &[Rule], delta: i64) {
        for r in rules {
            if let Some(t) = r.jump_target() {
                match self.refs.get_mut(t) {
                    Some(e) => *e = (i64::from(*e) + delta).max(0) as u32,
                    None => {
                        self.refs.insert(t.to_string(), delta.max(0) as u32);
                    }
                }
            }
        }
    }

    /// User chain names in listing order (strcmp order, as iptables sorts them).
    pub(crate) fn user_names_sorted(&self) -> Vec<(&str, u32)> {
        let mut v: Vec<(&str, u32)> = self
            .by_name
            .iter()
            .filter(|(_, id)| self.chain(**id).hook.is_none())
            .map(|(n, id)| (n.as_str(), *id))
            .collect();
        v.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        v
    }

    /// Chain ids in listing order: built-ins by hook, then user chains by name.
    pub(crate) fn order(&self, table: Table) -> Vec<u32> {
        let mut v: Vec<u32> = table
            .hooks()
            .iter()
            .filter_map(|h| self.builtin[*h as usize])
            .collect();
        v.extend(self.user_names_sorted().into_iter().map(|(_, id)| id));
        v
    }
}

#[derive(Clone, Debug, Default)]
struct SlotAlloc {
    next: u32,
    free: Vec<u32>,
}

impl SlotAlloc {
    fn take(&mut self) -> u32 {
        match self.free.pop() {
            Some(s) => s,
            None => {
                self.next += 1;
                self.next - 1
            }
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct RegEntry {
    pub uid: u64,
    pub refs: i64,
    /// nfacct: the object exists.
    pub live: bool,
    /// recent: the table's mask (from the rule that created it), as [`ip_num`] gives it.
    pub mask: u128,
    /// recent: time stamps kept per address.
    pub cap: usize,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Registry {
    by_name: BTreeMap<String, u32>,
    pub entries: Vec<RegEntry>,
}

impl Registry {
    fn get_or_add(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.by_name.get(name) {
            return i;
        }
        self.entries.push(RegEntry {
            uid: 0,
            refs: 0,
            live: false,
            mask: u128::MAX,
            cap: 32,
        });
        let i = (self.entries.len() - 1) as u32;
        self.by_name.insert(name.to_string(), i);
        i
    }
}

/// Options of [`Ruleset::restore`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RestoreOptions {
    /// `--noflush`: keep what is not mentioned.
    pub noflush: bool,
    /// `-c`: take `[packets:bytes]` and policy counters from the input.
    pub counters: bool,
}

/// What a successful restore did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// The tables committed, in input order.
    pub committed: Vec<Table>,
}

/// Options of [`Ruleset::save`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SaveOptions {
    /// `-c`: print `[packets:bytes]` before each rule.
    pub counters: bool,
    /// Print the `# Generated by …` / `# Completed on …` lines with this Unix time (UTC);
    /// `None` leaves them out. Never the wall clock.
    pub timestamp: Option<u64>,
    /// Only this table (`-t`).
    pub table: Option<Table>,
}

/// Options of [`Ruleset::list`] (`iptables -L -n -v`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// `-x`: exact counters instead of K/M/G.
    pub exact: bool,
    /// `--line-numbers`.
    pub line_numbers: bool,
}

/// Why an nfacct object could not be added or deleted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NfacctError {
    /// `nfacct add` of an existing name.
    #[error("nfacct object {0:?} already exists")]
    Exists(String),
    /// `nfacct delete` of an unknown name.
    #[error("nfacct object {0:?} does not exist")]
    Missing(String),
    /// `nfacct delete` of an object a rule uses.
    #[error("nfacct object {0:?} is used by a rule (device or resource busy)")]
    InUse(String),
    /// A name of more than 31 bytes or empty.
    #[error("nfacct name {0:?} must be 1-31 bytes")]
    BadName(String),
}

/// The ruleset of one network namespace. See the module docs for restore semantics and
/// [`Ruleset::run_hook`] for evaluation.
#[derive(Clone, Debug)]
pub struct Ruleset {
    /// Shared between clones (a [`RestoreMemo`] hands one outcome to many namespaces);
    /// a restore builds a new table and swaps it in.
    pub(crate) tables: [Option<Arc<TableData>>; 4],
    /// Shared between clones until one of them allocates or frees a slot: the free list of
    /// a big ruleset is hundreds of kilobytes, and a [`RestoreMemo`] hit clones the ruleset
    /// into every node of a group.
    alloc: Arc<SlotAlloc>,
    next_uid: u64,
    pub(crate) recent: Registry,
    pub(crate) nfacct: Registry,
    /// The namespace's ipsets (`-m set` reads them), shared between clones until changed.
    ipsets: Arc<crate::ipset::IpSets>,
    pub(crate) indexing: bool,
    /// `iptables` (IPv4) or `ip6tables` (IPv6): which rules parse, how they print, and
    /// which packets the tables see.
    pub(crate) family: Family,
    /// What this content was derived from: see [`Ruleset::lineage`].
    lineage: Lineage,
}

impl Default for Ruleset {
    fn default() -> Self {
        Ruleset::new()
    }
}

/// A table block being built.
struct Block {
    table: Table,
    work: TableData,
    touched: bool,
    flush: bool,
    /// (line, chain id, hash of the jump target) of rules added, to name the line of a
    /// dangling jump.
    jump_lines: Vec<(usize, u32, u64)>,
}

impl Ruleset {
    /// An empty `iptables` ruleset: no table exists (as in a fresh network namespace with
    /// nf_tables).
    pub fn new() -> Ruleset {
        Ruleset::new_family(Family::Ipv4)
    }

    /// An empty ruleset of `family`: [`Family::Ipv6`] is the namespace's `ip6tables`
    /// tables (`ip6tables-restore` syntax in, `ip6tables-save` text out, IPv6 packets
    /// evaluated).
    pub fn new_family(family: Family) -> Ruleset {
        let lineage = match family {
            Family::Ipv4 => Lineage::origin(),
            Family::Ipv6 => Lineage::origin().then(b"family", b"ipv6"),
        };
        Ruleset {
            tables: [None, None, None, None],
            alloc: Arc::default(),
            next_uid: 1,
            recent: Registry::default(),
            nfacct: Registry::default(),
            ipsets: Arc::default(),
            indexing: true,
            family,
            lineage,
        }
    }

    /// The namespace's ipsets.
    pub fn ipsets(&self) -> &crate::ipset::IpSets {
        &self.ipsets
    }

    /// `ipset restore`: applies `text` to the namespace's sets (see
    /// [`IpSets::restore`](crate::ipset::IpSets::restore)); a set a rule uses cannot be
    /// destroyed. Lines before a bad one stay applied, as with `ipset restore`.
    pub fn ipset_restore(&mut self, text: &str) -> Result<(), crate::ipset::IpsetError> {
        self.lineage = self.lineage.then(b"ipset restore", text.as_bytes());
        let mut sets = (*self.ipsets).clone();
        let in_use: BTreeMap<String, u32> = self.set_references_all();
        let r = sets.restore(text, &|n| in_use.get(n).copied().unwrap_or(0) > 0);
        self.ipsets = Arc::new(sets);
        r
    }

    /// How many rules use each set (`References:` of `ipset list`: each `-m set` match
    /// holds its set, `ip_set_nfnl_get_byindex`).
    pub fn set_references_all(&self) -> BTreeMap<String, u32> {
        let mut refs = BTreeMap::new();
        for t in self.tables.iter().flatten() {
            for c in t.chains.iter().flatten() {
                for r in &c.rules {
                    for m in &r.matches {
                        if let Match::Set(m) = m {
                            *refs.entry(m.name.clone()).or_insert(0) += 1;
                        }
                    }
                }
            }
        }
        refs
    }

    /// `ipset list` text of the namespace's sets, `References:` counted from the rules
    /// (`terse`: `ipset list -t`).
    pub fn ipset_list(&self, terse: bool) -> String {
        let refs = self.set_references_all();
        self.ipsets
            .list(terse, &|n| refs.get(n).copied().unwrap_or(0))
    }

    /// `iptables` or `ip6tables`.
    pub fn family(&self) -> Family {
        self.family
    }

    /// What this content was derived from (see [`Lineage`]).
    pub fn lineage(&self) -> Lineage {
        self.lineage
    }

    /// A ruleset from iptables-save text (a full restore with counters).
    pub fn from_save(text: &str) -> Result<Ruleset, RestoreError> {
        Ruleset::from_save_family(Family::Ipv4, text)
    }

    /// A ruleset of `family` from `iptables-save` / `ip6tables-save` text (a full restore
    /// with counters).
    pub fn from_save_family(family: Family, text: &str) -> Result<Ruleset, RestoreError> {
        let mut rs = Ruleset::new_family(family);
        rs.restore(
            text,
            &RestoreOptions {
                noflush: false,
                counters: true,
            },
        )?;
        Ok(rs)
    }

    /// Turns the first-match index on or off (on by default). Results are identical either
    /// way; off is plain in-order evaluation.
    pub fn set_indexing(&mut self, on: bool) {
        self.lineage = self.lineage.then(b"indexing", &[u8::from(on)]);
        self.indexing = on;
    }

    /// Whether the index is used.
    pub fn indexing(&self) -> bool {
        self.indexing
    }

    /// Whether `table` exists.
    pub fn has_table(&self, table: Table) -> bool {
        self.tables[table.index()].is_some()
    }

    /// The chains of `table` in listing order (built-ins by hook, then user chains by name).
    pub fn chains(&self, table: Table) -> Vec<&Chain> {
        match &self.tables[table.index()] {
            Some(t) => t.order(table).into_iter().map(|id| t.chain(id)).collect(),
            None => Vec::new(),
        }
    }

    /// A chain by name.
    pub fn chain(&self, table: Table, name: &str) -> Option<&Chain> {
        let t = self.tables[table.index()].as_ref()?;
        Some(t.chain(t.id(name)?))
    }

    /// The built-in chain of `hook` in `table`.
    pub fn builtin_chain(&self, table: Table, hook: Hook) -> Option<&Chain> {
        let t = self.tables[table.index()].as_ref()?;
        Some(t.chain(t.builtin[hook as usize]?))
    }

    /// The rules of a chain.
    pub fn rules(&self, table: Table, chain: &str) -> Option<&[Rule]> {
        self.chain(table, chain).map(|c| c.rules())
    }

    /// How many rules jump or go to `chain` (the "references" of `iptables -L`).
    pub fn references(&self, table: Table, chain: &str) -> u32 {
        self.tables[table.index()]
            .as_ref()
            .and_then(|t| t.refs.get(chain).copied())
            .unwrap_or(0)
    }

    /// The number of rules in all tables.
    pub fn rule_count(&self) -> usize {
        self.tables
            .iter()
            .flatten()
            .flat_map(|t| t.chains.iter().flatten())
            .map(|c| c.rules.len())
            .sum()
    }

    /// `nfacct add NAME`.
    pub fn nfacct_add(&mut self, name: &str) -> Result<(), NfacctError> {
        if name.is_empty() || name.len() > 31 {
            return Err(NfacctError::BadName(name.into()));
        }
        self.lineage = self.lineage.then(b"nfacct add", name.as_bytes());
        let i = self.nfacct.get_or_add(name) as usize;
        let uid = self.next_uid;
        let e = &mut self.nfacct.entries[i];
        if e.live {
            return Err(NfacctError::Exists(name.into()));
        }
        e.live = true;
        e.uid = uid;
        self.next_uid += 1;
        Ok(())
    }

    /// `nfacct delete NAME`.
    pub fn nfacct_del(&mut self, name: &str) -> Result<(), NfacctError> {
        self.lineage = self.lineage.then(b"nfacct delete", name.as_bytes());
        let i = match self.nfacct.by_name.get(name) {
            Some(&i) if self.nfacct.entries[i as usize].live => i as usize,
            _ => return Err(NfacctError::Missing(name.into())),
        };
        if self.nfacct.entries[i].refs > 0 {
            return Err(NfacctError::InUse(name.into()));
        }
        self.nfacct.entries[i].live = false;
        Ok(())
    }

    /// The nfacct objects, by name.
    pub fn nfacct_names(&self) -> Vec<&str> {
        self.nfacct
            .by_name
            .iter()
            .filter(|(_, &i)| self.nfacct.entries[i as usize].live)
            .map(|(n, _)| n.as_str())
            .collect()
    }

    pub(crate) fn nfacct_bind(&self, name: &str) -> Option<Bind> {
        let &i = self.nfacct.by_name.get(name)?;
        let e = &self.nfacct.entries[i as usize];
        e.live.then_some(Bind { idx: i, uid: e.uid })
    }

    pub(crate) fn recent_bind(&self, name: &str) -> Option<Bind> {
        let &i = self.recent.by_name.get(name)?;
        let e = &self.recent.entries[i as usize];
        (e.refs > 0).then_some(Bind { idx: i, uid: e.uid })
    }

    /// The names of the `recent` lists some rule uses, sorted.
    pub fn recent_names(&self) -> Vec<String> {
        self.recent
            .by_name
            .iter()
            .filter(|(_, &i)| self.recent.entries[i as usize].refs > 0)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// A live `recent` list's address mask and stamps kept per address.
    pub(crate) fn recent_shape(&self, b: Bind) -> (u128, usize) {
        let e = &self.recent.entries[b.idx as usize];
        (e.mask, e.cap)
    }

    pub(crate) fn for_each_counter_bind(&self, table: Option<Table>, mut f: impl FnMut(Bind)) {
        for t in Table::ALL {
            if table.is_some_and(|x| x != t) {
                continue;
            }
            if let Some(td) = &self.tables[t.index()] {
                for c in td.chains.iter().flatten() {
                    if c.hook.is_some() {
                        f(c.policy_slot);
                    }
                    for r in &c.rules {
                        f(r.slot);
                    }
                }
            }
        }
    }
}
