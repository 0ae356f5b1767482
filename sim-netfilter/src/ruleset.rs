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
    /// recent: the table's mask (from the rule that created it).
    pub mask: u32,
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
            mask: u32::MAX,
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
    pub(crate) indexing: bool,
    /// What this content was derived from: see [`Ruleset::lineage`].
    lineage: Lineage,
}

/// A digest of the operations a [`Ruleset`] was built by, from [`Ruleset::new`] on.
///
/// Every change to a ruleset is a deterministic function of its content and the operation
/// (a restore's text and options, an nfacct command, the indexing switch), so two rulesets
/// with the same lineage have the same content: same chains, rules, counter slots and ids.
/// Different lineages say nothing (the same rules can be reached in different ways).
/// [`RestoreMemo`] relies on this to apply one payload to many identical rulesets once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lineage([u8; 32]);

impl Lineage {
    fn origin() -> Lineage {
        Lineage(Sha256::digest(b"nfsim ruleset: empty").into())
    }

    fn then(self, op: &[u8], payload: &[u8]) -> Lineage {
        let mut h = Sha256::new();
        h.update(self.0);
        h.update((op.len() as u64).to_le_bytes());
        h.update(op);
        h.update((payload.len() as u64).to_le_bytes());
        h.update(payload);
        Lineage(h.finalize().into())
    }
}

/// The digest of a restore input (what [`Lineage`] records of it).
fn text_digest(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

fn restore_op(opts: &RestoreOptions) -> [u8; 9] {
    let mut op = *b"restore--";
    op[7] = u8::from(opts.noflush);
    op[8] = u8::from(opts.counters);
    op
}

/// Applies the same `iptables-restore` input to many rulesets, doing the work once per
/// distinct (ruleset, input): a node fleet whose kube-proxies write identical payloads to
/// identical rulesets parses and compiles each payload once.
///
/// A restore's outcome depends only on the ruleset's content and the input (a restore never
/// reads counters, the clock or any randomness: see [`crate::state`]). The memo keeps the
/// last few outcomes keyed by the ruleset's [`Lineage`], the options and the input text;
/// when a ruleset with that lineage gets that input again it becomes a clone of the stored
/// outcome (chains are shared, not copied) and the stored report or error is returned.
/// The result is the same as [`Ruleset::restore`] in every case, hit or miss.
#[derive(Debug, Default)]
pub struct RestoreMemo {
    entries: Vec<MemoEntry>,
    hits: u64,
    misses: u64,
}

#[derive(Debug)]
struct MemoEntry {
    before: Lineage,
    opts: RestoreOptions,
    /// Shared with the caller's [`RestoreMemo::restore_shared`] input when it came that
    /// way: the same allocation is the same text, without comparing megabytes per ruleset.
    text: Arc<str>,
    digest: [u8; 32],
    after: Ruleset,
    result: Result<RestoreReport, RestoreError>,
}

/// How many outcomes a [`RestoreMemo`] keeps.
const MEMO_ENTRIES: usize = 2;

impl RestoreMemo {
    /// An empty memo.
    pub fn new() -> RestoreMemo {
        RestoreMemo::default()
    }

    /// [`Ruleset::restore`] of `input` into `rs`, reusing a stored outcome when `rs` has the
    /// lineage it was computed from.
    pub fn restore(
        &mut self,
        rs: &mut Ruleset,
        input: &str,
        opts: &RestoreOptions,
    ) -> Result<RestoreReport, RestoreError> {
        self.restore_text(rs, input, None, opts)
    }

    /// [`RestoreMemo::restore`] of an input many rulesets get: the memo keeps `input`
    /// itself, so the next ruleset given the same `Arc` is matched without comparing the
    /// text (a big cluster's payload is megabytes, given to a thousand nodes).
    pub fn restore_shared(
        &mut self,
        rs: &mut Ruleset,
        input: &Arc<str>,
        opts: &RestoreOptions,
    ) -> Result<RestoreReport, RestoreError> {
        self.restore_text(rs, input, Some(input), opts)
    }

    fn restore_text(
        &mut self,
        rs: &mut Ruleset,
        input: &str,
        shared: Option<&Arc<str>>,
        opts: &RestoreOptions,
    ) -> Result<RestoreReport, RestoreError> {
        let same_text =
            |e: &MemoEntry| shared.is_some_and(|a| Arc::ptr_eq(a, &e.text)) || *e.text == *input;
        if let Some(e) = self
            .entries
            .iter()
            .find(|e| e.before == rs.lineage && e.opts == *opts && same_text(e))
        {
            self.hits += 1;
            *rs = e.after.clone();
            return e.result.clone();
        }
        self.misses += 1;
        let digest = match self.entries.iter().find(|e| same_text(e)) {
            Some(e) => e.digest,
            None => text_digest(input),
        };
        let before = rs.lineage;
        let result = rs.restore_digested(input, opts, &digest);
        if self.entries.len() == MEMO_ENTRIES {
            self.entries.remove(0);
        }
        self.entries.push(MemoEntry {
            before,
            opts: *opts,
            text: shared.cloned().unwrap_or_else(|| Arc::from(input)),
            digest,
            after: rs.clone(),
            result: result.clone(),
        });
        result
    }

    /// Restores served from a stored outcome.
    pub fn hits(&self) -> u64 {
        self.hits
    }

    /// Restores that did the work.
    pub fn misses(&self) -> u64 {
        self.misses
    }
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

fn chain_name_ok(name: &str) -> Result<(), RestoreErrorKind> {
    let bad = |why| {
        Err(RestoreErrorKind::BadChainName {
            name: name.to_string(),
            why,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() >= 29 {
        return bad("longer than 28 characters");
    }
    if name.starts_with('-') || name.starts_with('!') {
        return bad("must not start with `-` or `!`");
    }
    if name.chars().any(char::is_whitespace) {
        return bad("contains whitespace");
    }
    if Hook::from_chain_name(name).is_some() {
        return bad("is the name of a built-in chain of another table");
    }
    if matches!(
        name,
        "ACCEPT"
            | "DROP"
            | "RETURN"
            | "REJECT"
            | "DNAT"
            | "SNAT"
            | "MASQUERADE"
            | "REDIRECT"
            | "MARK"
            | "CONNMARK"
            | "CT"
            | "NOTRACK"
            | "LOG"
            | "TRACE"
            | "QUEUE"
            | "NFQUEUE"
            | "NFLOG"
    ) {
        return bad("clashes with a target name");
    }
    Ok(())
}

fn parse_counters(s: &str) -> Option<Counters> {
    let inner = s.strip_prefix('[')?.strip_suffix(']')?;
    let (p, b) = inner.split_once(':')?;
    Some(Counters {
        packets: p.parse().ok()?,
        bytes: b.parse().ok()?,
    })
}

impl Ruleset {
    /// An empty ruleset: no table exists (as in a fresh network namespace with nf_tables).
    pub fn new() -> Ruleset {
        Ruleset {
            tables: [None, None, None, None],
            alloc: Arc::default(),
            next_uid: 1,
            recent: Registry::default(),
            nfacct: Registry::default(),
            indexing: true,
            lineage: Lineage::origin(),
        }
    }

    /// What this content was derived from (see [`Lineage`]).
    pub fn lineage(&self) -> Lineage {
        self.lineage
    }

    /// A ruleset from iptables-save text (a full restore with counters).
    pub fn from_save(text: &str) -> Result<Ruleset, RestoreError> {
        let mut rs = Ruleset::new();
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
    pub(crate) fn recent_shape(&self, b: Bind) -> (u32, usize) {
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

    /// Runs one iptables command against `table` as `iptables -t TABLE ARGS` would
    /// (e.g. `"-I INPUT -p tcp --dport 22 -j ACCEPT"`): a one-line `--noflush` transaction.
    pub fn command(&mut self, table: Table, args: &str) -> Result<(), RestoreError> {
        let text = format!("*{}\n{}\nCOMMIT\n", table.name(), args);
        self.restore(
            &text,
            &RestoreOptions {
                noflush: true,
                counters: false,
            },
        )
        .map(|_| ())
        .map_err(|mut e| {
            // Report against the command itself rather than the wrapper's line 2.
            e.line = 1;
            e
        })
    }

    /// Applies `iptables-restore` input. See the module docs.
    pub fn restore(
        &mut self,
        input: &str,
        opts: &RestoreOptions,
    ) -> Result<RestoreReport, RestoreError> {
        self.restore_digested(input, opts, &text_digest(input))
    }

    /// [`Ruleset::restore`] with the input's digest already computed.
    fn restore_digested(
        &mut self,
        input: &str,
        opts: &RestoreOptions,
        digest: &[u8; 32],
    ) -> Result<RestoreReport, RestoreError> {
        // Recorded whatever the outcome: a failed restore may still have committed earlier
        // blocks, and the outcome is as deterministic as a success.
        self.lineage = self.lineage.then(&restore_op(opts), digest);
        let mut report = RestoreReport::default();
        let mut block: Option<Block> = None;
        let mut last_line = 0;
        let mut toks: Vec<Token<'_>> = Vec::with_capacity(32);
        let fail = |line: usize, text: &str, kind, span, report: &RestoreReport| RestoreError {
            line,
            text: text.to_string(),
            kind,
            span,
            committed: report.committed.clone(),
        };
        for (i, raw) in input.split('\n').enumerate() {
            let lineno = i + 1;
            let line = raw.strip_suffix('\r').unwrap_or(raw);
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            last_line = lineno;
            let Some(b) = block.as_mut() else {
                if let Some(rest) = line.strip_prefix('*') {
                    let name = rest.split_whitespace().next().unwrap_or("");
                    let table = Table::from_name(name).ok_or_else(|| {
                        fail(
                            lineno,
                            line,
                            RestoreErrorKind::UnknownTable(name.to_string()),
                            Some((1, line.len())),
                            &report,
                        )
                    })?;
                    let existing = self.tables[table.index()].as_deref().cloned();
                    let (work, flush) = match (opts.noflush, existing) {
                        (true, Some(t)) => (t, false),
                        _ => (TableData::new(table), !opts.noflush),
                    };
                    block = Some(Block {
                        table,
                        work,
                        touched: false,
                        flush,
                        jump_lines: Vec::new(),
                    });
                    continue;
                }
                let what = if line.starts_with(':') {
                    "chain line"
                } else if line == "COMMIT" {
                    "COMMIT"
                } else {
                    "rule"
                };
                return Err(fail(
                    lineno,
                    line,
                    RestoreErrorKind::OutsideTable(what),
                    None,
                    &report,
                ));
            };
            if line == "COMMIT" {
                let Some(b) = block.take() else {
                    continue;
                };
                let table = b.table;
                self.commit(b).map_err(|(l, kind)| match l {
                    Some((l, text)) => fail(l, &text, kind, None, &report),
                    None => fail(lineno, line, kind, None, &report),
                })?;
                report.committed.push(table);
                continue;
            }
            if let Some(rest) = line.strip_prefix(':') {
                self.chain_line(b, rest, opts)
                    .map_err(|kind| fail(lineno, line, kind, None, &report))?;
                continue;
            }
            self.rule_line(b, line, lineno, opts, &mut toks)
                .map_err(|(kind, span)| fail(lineno, line, kind, span, &report))?;
        }
        if let Some(b) = block {
            return Err(fail(
                last_line + 1,
                "",
                RestoreErrorKind::MissingCommit(b.table),
                None,
                &report,
            ));
        }
        Ok(report)
    }

    fn chain_line(
        &mut self,
        b: &mut Block,
        rest: &str,
        opts: &RestoreOptions,
    ) -> Result<(), RestoreErrorKind> {
        let mut words = rest.split([' ', '\t']).filter(|w| !w.is_empty());
        let name = words.next().unwrap_or("");
        let policy = words.next();
        let counters = words.next();
        if name.len() >= 29 {
            return Err(RestoreErrorKind::BadChainName {
                name: name.into(),
                why: "longer than 28 characters",
            });
        }
        let Some(policy) = policy else {
            return Err(RestoreErrorKind::BadPolicy(String::new()));
        };
        b.touched = true;
        let builtin_hook = Hook::from_chain_name(name).filter(|h| b.table.has_hook(*h));
        if let Some(h) = builtin_hook {
            let pol = match policy {
                "-" => None,
                "ACCEPT" => Some(Policy::Accept),
                "DROP" => Some(Policy::Drop),
                other => return Err(RestoreErrorKind::BadPolicy(other.into())),
            };
            let init = if opts.counters {
                match counters {
                    Some(c) => {
                        parse_counters(c).ok_or_else(|| RestoreErrorKind::BadCounters(c.into()))?
                    }
                    None => Counters::default(),
                }
            } else {
                Counters::default()
            };
            if let Some(p) = pol {
                let id = b.work.builtin[h as usize].unwrap_or_else(|| unreachable!());
                let c = b.work.chain_mut(id);
                c.policy = p;
                c.policy_slot = Bind::default();
                c.policy_init = init;
            }
            return Ok(());
        }
        chain_name_ok(name)?;
        match b.work.id(name) {
            Some(id) => {
                let old = std::mem::take(&mut b.work.chain_mut(id).rules);
                b.work.note_refs(&old, -1);
            }
            None => {
                b.work.add_chain(name, None);
            }
        }
        Ok(())
    }

    fn rule_line<'a>(
        &mut self,
        b: &mut Block,
        line: &'a str,
        lineno: usize,
        opts: &RestoreOptions,
        toks: &mut Vec<Token<'a>>,
    ) -> Result<(), (RestoreErrorKind, Option<(usize, usize)>)> {
        let (prefix_counters, body, offset) = if line.starts_with('[') {
            let close = line
                .find(']')
                .ok_or((RestoreErrorKind::BadCounters(line.into()), None))?;
            let c = parse_counters(&line[..=close]).ok_or((
                RestoreErrorKind::BadCounters(line[..=close].into()),
                Some((0, close + 1)),
            ))?;
            (Some(c), &line[close + 1..], close + 1)
        } else {
            (None, line, 0)
        };
        tokenize_into(body, toks)
            .map_err(|e| (RestoreErrorKind::Rule(RuleErrorKind::Invalid(e)), None))?;
        let toks = &*toks;
        let cmd = parse_command(toks, b.table).map_err(|e| {
            let span = e
                .token
                .and_then(|i| toks.get(i))
                .map(|t| (t.start + offset, t.end + offset));
            (RestoreErrorKind::Rule(e.kind), span)
        })?;
        let chain_span = toks.get(1).map(|t| (t.start + offset, t.end + offset));
        b.touched = true;
        let with_counters = |mut rules: Vec<Rule>| -> Vec<Rule> {
            if let (true, Some(c)) = (opts.counters, prefix_counters) {
                for r in &mut rules {
                    r.initial_counters = c;
                }
            }
            rules
        };
        let need =
            |b: &Block, name: &str| -> Result<u32, (RestoreErrorKind, Option<(usize, usize)>)> {
                b.work
                    .id(name)
                    .ok_or((RestoreErrorKind::NoSuchChain(name.into()), chain_span))
            };
        match cmd {
            Command::Append { chain, rules } => {
                let id = need(b, &chain)?;
                let rules = with_counters(rules);
                for r in &rules {
                    if let Some(t) = r.jump_target() {
                        b.jump_lines.push((lineno, id, name_hash(t)));
                    }
                }
                b.work.note_refs(&rules, 1);
                b.work.chain_mut(id).rules.extend(rules);
            }
            Command::Insert { chain, num, rules } => {
                let id = need(b, &chain)?;
                let len = b.work.chain(id).rules.len();
                if num as usize > len + 1 {
                    return Err((RestoreErrorKind::IndexTooBig { chain, num, len }, None));
                }
                let rules = with_counters(rules);
                for r in &rules {
                    if let Some(t) = r.jump_target() {
                        b.jump_lines.push((lineno, id, name_hash(t)));
                    }
                }
                b.work.note_refs(&rules, 1);
                let at = num as usize - 1;
                b.work.chain_mut(id).rules.splice(at..at, rules);
            }
            Command::DeleteNum { chain, num } => {
                let id = need(b, &chain)?;
                let len = b.work.chain(id).rules.len();
                if num as usize > len {
                    return Err((RestoreErrorKind::IndexTooBig { chain, num, len }, None));
                }
                let r = b.work.chain_mut(id).rules.remove(num as usize - 1);
                b.work.note_refs(std::slice::from_ref(&r), -1);
            }
            Command::DeleteSpec { chain, rules } => {
                let id = need(b, &chain)?;
                for spec in rules {
                    let pos = b
                        .work
                        .chain(id)
                        .rules
                        .iter()
                        .position(|r| r.same_spec(&spec))
                        .ok_or((RestoreErrorKind::NoMatchingRule(chain.clone()), None))?;
                    let r = b.work.chain_mut(id).rules.remove(pos);
                    b.work.note_refs(std::slice::from_ref(&r), -1);
                }
            }
            Command::NewChain(name) => {
                if b.work.id(&name).is_some() {
                    return Err((RestoreErrorKind::ChainExists(name), chain_span));
                }
                chain_name_ok(&name).map_err(|k| (k, chain_span))?;
                b.work.add_chain(&name, None);
            }
            Command::DeleteChain(name) => {
                let names: Vec<String> = match name {
                    Some(n) => {
                        let id = need(b, &n)?;
                        if b.work.chain(id).hook.is_some() {
                            return Err((RestoreErrorKind::DeleteBuiltin(n), chain_span));
                        }
                        vec![n]
                    }
                    None => b
                        .work
                        .user_names_sorted()
                        .into_iter()
                        .map(|(n, _)| n.to_string())
                        .collect(),
                };
                for n in names {
                    let id = need(b, &n)?;
                    let busy = !b.work.chain(id).rules.is_empty()
                        || b.work.refs.get(&n).copied().unwrap_or(0) > 0;
                    if busy {
                        return Err((RestoreErrorKind::ChainBusy(n), None));
                    }
                    b.work.chains[id as usize] = None;
                    b.work.by_name.remove(&n);
                    b.work.refs.remove(&n);
                    b.work.free_ids.push(id);
                }
            }
            Command::Flush(name) => {
                let ids: Vec<u32> = match name {
                    Some(n) => vec![need(b, &n)?],
                    None => {
                        let mut ids: Vec<u32> = b.work.by_name.values().copied().collect();
                        ids.sort_unstable();
                        ids
                    }
                };
                for id in ids {
                    if b.work.chain(id).rules.is_empty() {
                        continue;
                    }
                    let old = std::mem::take(&mut b.work.chain_mut(id).rules);
                    b.work.note_refs(&old, -1);
                }
            }
            Command::Policy { chain, policy } => {
                let id = need(b, &chain)?;
                if b.work.chain(id).hook.is_none() {
                    return Err((RestoreErrorKind::NotBuiltin(chain), chain_span));
                }
                b.work.chain_mut(id).policy = policy;
            }
            Command::Zero(name) => {
                let ids: Vec<u32> = match name {
                    Some(n) => vec![need(b, &n)?],
                    None => {
                        let mut ids: Vec<u32> = b.work.by_name.values().copied().collect();
                        ids.sort_unstable();
                        ids
                    }
                };
                for id in ids {
                    // Fresh ids give fresh (zero) counters; nth counters are kept.
                    let c = b.work.chain_mut(id);
                    for r in &mut c.rules {
                        r.slot.uid = 0;
                        r.initial_counters = Counters::default();
                    }
                    if c.hook.is_some() {
                        c.policy_slot = Bind::default();
                        c.policy_init = Counters::default();
                    }
                }
            }
        }
        Ok(())
    }

    /// Validates and installs a block. Errors carry the line of the offending rule when known.
    #[allow(clippy::type_complexity)]
    fn commit(&mut self, mut b: Block) -> Result<(), (Option<(usize, String)>, RestoreErrorKind)> {
        let ti = b.table.index();
        if !b.touched {
            if b.flush {
                self.release_table(ti);
                self.tables[ti] = None;
            }
            return Ok(());
        }
        let old = self.tables[ti].take();
        let modified: Vec<u32> = (0..b.work.chains.len() as u32)
            .filter(|&id| {
                let Some(new) = &b.work.chains[id as usize] else {
                    return false;
                };
                match old.as_ref().and_then(|o| o.chains.get(id as usize)) {
                    Some(Some(oc)) => !Arc::ptr_eq(oc, new),
                    _ => true,
                }
            })
            .collect();
        // Resolve jumps of modified chains.
        for &id in &modified {
            let resolved: Vec<Result<Option<u32>, String>> = b
                .work
                .chain(id)
                .rules
                .iter()
                .map(|r| match r.jump_target() {
                    None => Ok(None),
                    Some(t) => b.work.id(t).map(Some).ok_or_else(|| t.to_string()),
                })
                .collect();
            for (i, res) in resolved.into_iter().enumerate() {
                let kind = match res {
                    Ok(None) => continue,
                    Ok(Some(tid)) if b.work.chain(tid).hook.is_none() => {
                        if let Target::Jump(c) | Target::Goto(c) =
                            &mut b.work.chain_mut(id).rules[i].target
                        {
                            c.id = Bind { idx: tid, uid: 0 };
                        }
                        continue;
                    }
                    Ok(Some(tid)) => {
                        RestoreErrorKind::JumpToBuiltin(b.work.chain(tid).name.clone())
                    }
                    Err(t) => RestoreErrorKind::DanglingJump {
                        target: t,
                        from: b.work.chain(id).name.clone(),
                    },
                };
                let target = match &kind {
                    RestoreErrorKind::JumpToBuiltin(t) => t.clone(),
                    RestoreErrorKind::DanglingJump { target, .. } => target.clone(),
                    _ => String::new(),
                };
                self.tables[ti] = old;
                let h = name_hash(&target);
                let line = b
                    .jump_lines
                    .iter()
                    .rev()
                    .find(|(_, c, t)| *c == id && *t == h)
                    .map(|(l, _, _)| (*l, String::new()));
                return Err((line, kind));
            }
        }
        if let Err(k) = validate(&b.work, b.table) {
            self.tables[ti] = old;
            return Err((None, k));
        }
        for &id in &modified {
            for r in &b.work.chain(id).rules {
                for m in &r.matches {
                    if let Match::Nfacct(n) = m {
                        if self.nfacct_bind(&n.name).is_none() {
                            self.tables[ti] = old;
                            return Err((None, RestoreErrorKind::NoSuchNfacct(n.name.clone())));
                        }
                    }
                }
            }
        }
        // Release what the replaced chains held, keep what carried over, bind the new.
        let mut freed: Vec<Bind> = Vec::new();
        let mut recent_delta: BTreeMap<String, i64> = BTreeMap::new();
        let mut nfacct_delta: BTreeMap<String, i64> = BTreeMap::new();
        if let Some(o) = &old {
            for (id, oc) in o.chains.iter().enumerate() {
                let Some(oc) = oc else { continue };
                let same = matches!(b.work.chains.get(id), Some(Some(nc)) if Arc::ptr_eq(nc, oc));
                if !same {
                    collect_binds(oc, &mut freed, &mut recent_delta, &mut nfacct_delta, -1);
                }
            }
        }
        // Looked up only (`contains`), never iterated: its order cannot reach any output.
        let mut kept: HashSet<u32> = HashSet::new();
        let mut recent_first: BTreeMap<String, (u32, u32)> = BTreeMap::new();
        // Counter slots first, in the layout order of the compiled program
        // (`compile::layout_order`): a fresh table's slots then lie in the order a walk
        // meets its rules, one service's counters next to each other.
        let mut rank = vec![u32::MAX; b.work.chains.len()];
        for (i, id) in layout_order(&b.work).into_iter().enumerate() {
            rank[id as usize] = i as u32;
        }
        let mut by_layout = modified.clone();
        by_layout.sort_by_key(|&id| rank[id as usize]);
        for &id in &by_layout {
            let c = b.work.chain_mut(id);
            if c.hook.is_some() {
                if c.policy_slot.uid == 0 {
                    c.policy_slot = Bind {
                        idx: Arc::make_mut(&mut self.alloc).take(),
                        uid: self.next_uid,
                    };
                    self.next_uid += 1;
                } else {
                    kept.insert(c.policy_slot.idx);
                }
            }
            for r in &mut c.rules {
                if r.slot.uid == 0 {
                    r.slot = Bind {
                        idx: Arc::make_mut(&mut self.alloc).take(),
                        uid: self.next_uid,
                    };
                    self.next_uid += 1;
                } else {
                    kept.insert(r.slot.idx);
                }
                for m in &mut r.matches {
                    if let Match::Statistic(s) = m {
                        if matches!(s.mode, StatisticMode::Nth { .. }) {
                            if s.slot.uid == 0 {
                                s.slot = Bind {
                                    idx: Arc::make_mut(&mut self.alloc).take(),
                                    uid: self.next_uid,
                                };
                                self.next_uid += 1;
                            } else {
                                kept.insert(s.slot.idx);
                            }
                        }
                    }
                }
            }
        }
        for &id in &modified {
            let c = b.work.chain_mut(id);
            for r in &mut c.rules {
                for m in &mut r.matches {
                    match m {
                        Match::Recent(rm) => {
                            let idx = self.recent.get_or_add(&rm.name);
                            rm.table = Bind { idx, uid: 0 };
                            *recent_delta.entry(rm.name.clone()).or_insert(0) += 1;
                            let cap = recent_cap(rm.hitcount);
                            let e = recent_first
                                .entry(rm.name.clone())
                                .or_insert((u32::from(rm.mask), cap as u32));
                            e.1 = e.1.max(cap as u32);
                        }
                        Match::Nfacct(n) => {
                            let idx = self.nfacct.get_or_add(&n.name);
                            n.obj = Bind { idx, uid: 0 };
                            *nfacct_delta.entry(n.name.clone()).or_insert(0) += 1;
                        }
                        _ => {}
                    }
                }
            }
            c.index = ChainIndex::build(&c.rules);
        }
        for f in freed {
            if !kept.contains(&f.idx) {
                Arc::make_mut(&mut self.alloc).free.push(f.idx);
            }
        }
        for (name, d) in recent_delta {
            let i = self.recent.get_or_add(&name) as usize;
            let e = &mut self.recent.entries[i];
            let was = e.refs;
            e.refs = (e.refs + d).max(0);
            if let Some(&(mask, cap)) = recent_first.get(&name) {
                if was <= 0 && e.refs > 0 {
                    e.uid = self.next_uid;
                    self.next_uid += 1;
                    e.mask = mask;
                    e.cap = cap as usize;
                } else if cap as usize > e.cap {
                    // A rule needing more stamps flushes the table (recent_mt_check).
                    e.cap = cap as usize;
                    e.uid = self.next_uid;
                    self.next_uid += 1;
                }
            }
        }
        for (name, d) in nfacct_delta {
            let i = self.nfacct.get_or_add(&name) as usize;
            let e = &mut self.nfacct.entries[i];
            e.refs = (e.refs + d).max(0);
        }
        b.work.program = Arc::new(compile(&b.work));
        self.tables[ti] = Some(Arc::new(b.work));
        Ok(())
    }

    /// Releases the slots and registry references of a table being dropped.
    fn release_table(&mut self, ti: usize) {
        let Some(o) = &self.tables[ti] else { return };
        let mut freed = Vec::new();
        let mut rd = BTreeMap::new();
        let mut nd = BTreeMap::new();
        for c in o.chains.iter().flatten() {
            collect_binds(c, &mut freed, &mut rd, &mut nd, -1);
        }
        Arc::make_mut(&mut self.alloc)
            .free
            .extend(freed.into_iter().map(|b| b.idx));
        for (name, d) in rd {
            let i = self.recent.get_or_add(&name) as usize;
            let e = &mut self.recent.entries[i];
            e.refs = (e.refs + d).max(0);
        }
        for (name, d) in nd {
            let i = self.nfacct.get_or_add(&name) as usize;
            let e = &mut self.nfacct.entries[i];
            e.refs = (e.refs + d).max(0);
        }
    }

    /// `iptables-save` output.
    pub fn save(&self, state: &RulesetState, opts: &SaveOptions) -> String {
        let mut out = String::new();
        for t in Table::ALL {
            if opts.table.is_some_and(|x| x != t) {
                continue;
            }
            let Some(td) = &self.tables[t.index()] else {
                continue;
            };
            if let Some(ts) = opts.timestamp {
                out.push_str("# Generated by iptables-save v1.8.9 (nf_tables) on ");
                out.push_str(&ctime(ts));
                out.push('\n');
            }
            out.push('*');
            out.push_str(t.name());
            out.push('\n');
            let order = td.order(t);
            for &id in &order {
                let c = td.chain(id);
                if c.hook.is_some() {
                    let pc = state.peek(c.policy_slot, c.policy_init);
                    out.push_str(&format!(
                        ":{} {} [{}:{}]\n",
                        c.name,
                        c.policy.name(),
                        pc.packets,
                        pc.bytes
                    ));
                } else {
                    out.push_str(&format!(":{} - [0:0]\n", c.name));
                }
            }
            for &id in &order {
                let c = td.chain(id);
                for r in &c.rules {
                    let counters = opts
                        .counters
                        .then(|| state.peek(r.slot, r.initial_counters));
                    pr::save_rule(&mut out, &c.name, r, counters);
                }
            }
            out.push_str("COMMIT\n");
            if let Some(ts) = opts.timestamp {
                out.push_str("# Completed on ");
                out.push_str(&ctime(ts));
                out.push('\n');
            }
        }
        out
    }

    /// `iptables -t TABLE -L [CHAIN] -n -v [-x] [--line-numbers]`.
    pub fn list(
        &self,
        state: &RulesetState,
        table: Table,
        chain: Option<&str>,
        opts: &ListOptions,
    ) -> Result<String, RestoreErrorKind> {
        let mut out = String::new();
        let Some(td) = &self.tables[table.index()] else {
            // iptables-nft lists the built-in chains of a table it creates on demand.
            let tmp = TableData::new(table);
            return list_table(&tmp, table, state, chain, opts, &mut out).map(|_| out);
        };
        list_table(td, table, state, chain, opts, &mut out)?;
        Ok(out)
    }
}

fn list_table(
    td: &TableData,
    table: Table,
    state: &RulesetState,
    chain: Option<&str>,
    opts: &ListOptions,
    out: &mut String,
) -> Result<(), RestoreErrorKind> {
    let ids = match chain {
        Some(n) => vec![td
            .id(n)
            .ok_or_else(|| RestoreErrorKind::NoSuchChain(n.to_string()))?],
        None => td.order(table),
    };
    for (k, id) in ids.into_iter().enumerate() {
        let c = td.chain(id);
        if k > 0 {
            out.push('\n');
        }
        if c.hook.is_some() {
            let pc = state.peek(c.policy_slot, c.policy_init);
            out.push_str(&format!("Chain {} (policy {} ", c.name, c.policy.name()));
            pr::print_num(out, pc.packets, opts.exact, true);
            out.push_str("packets, ");
            pr::print_num(out, pc.bytes, opts.exact, true);
            out.push_str("bytes)\n");
        } else {
            out.push_str(&format!(
                "Chain {} ({} references)\n",
                c.name,
                td.refs.get(&c.name).copied().unwrap_or(0)
            ));
        }
        pr::list_header(out, opts.exact, opts.line_numbers);
        for (i, r) in c.rules.iter().enumerate() {
            let counters = state.peek(r.slot, r.initial_counters);
            pr::list_rule(
                out,
                opts.line_numbers.then_some(i + 1),
                r,
                counters,
                opts.exact,
            );
        }
    }
    Ok(())
}

/// Stamps kept per address (`recent_mt_check`, with the module parameter `ip_pkt_list_tot`
/// at its default 0): 32 without `--hitcount`, else `--hitcount` rounded up to a power of two
/// (a table used only by `--hitcount 5` rules keeps 8; measured on Linux 6.18, see
/// docs/kernel-model.md §10).
fn recent_cap(hitcount: u32) -> usize {
    if hitcount == 0 {
        32
    } else {
        (hitcount as usize).next_power_of_two()
    }
}

fn collect_binds(
    c: &Chain,
    freed: &mut Vec<Bind>,
    recent: &mut BTreeMap<String, i64>,
    nfacct: &mut BTreeMap<String, i64>,
    d: i64,
) {
    if c.hook.is_some() && c.policy_slot.uid != 0 {
        freed.push(c.policy_slot);
    }
    for r in &c.rules {
        if r.slot.uid != 0 {
            freed.push(r.slot);
        }
        for m in &r.matches {
            match m {
                Match::Statistic(s) if s.slot.uid != 0 => freed.push(s.slot),
                Match::Recent(rm) => *recent.entry(rm.name.clone()).or_insert(0) += d,
                Match::Nfacct(n) => *nfacct.entry(n.name.clone()).or_insert(0) += d,
                _ => {}
            }
        }
    }
}

const PRE: u8 = Hook::PreRouting.bit();
const IN: u8 = Hook::Input.bit();
const FWD: u8 = Hook::Forward.bit();
const OUT: u8 = Hook::Output.bit();
const POST: u8 = Hook::PostRouting.bit();

fn hook_names(mask: u8) -> &'static str {
    match mask {
        m if m == PRE | OUT => "PREROUTING and OUTPUT",
        m if m == POST | IN => "POSTROUTING and INPUT",
        m if m == POST => "POSTROUTING",
        m if m == IN | FWD | OUT => "INPUT, FORWARD and OUTPUT",
        m if m == IN | FWD | PRE => "PREROUTING, INPUT and FORWARD",
        m if m == OUT | FWD | POST => "FORWARD, OUTPUT and POSTROUTING",
        _ => "other hooks",
    }
}

/// Loop detection from the built-in chains, nesting depth, and per-hook validity of targets
/// and matches (xt `.hooks` masks: DNAT/REDIRECT PRE|OUT, SNAT POST|IN, MASQUERADE POST,
/// REJECT IN|FWD|OUT; addrtype `--limit-iface-in` not in OUTPUT/POSTROUTING,
/// `--limit-iface-out` not in PREROUTING/INPUT). One pass over the rules builds the jump graph
/// and the constraints; the graph walks are over chains only.
fn validate(td: &TableData, table: Table) -> Result<(), RestoreErrorKind> {
    let n = td.chains.len();
    let mut edges: Vec<Vec<u32>> = vec![Vec::new(); n];
    // (chain, what, valid hooks, checked against the chain's own hook only)
    let mut constraints: Vec<(u32, &'static str, u8, bool)> = Vec::new();
    for (id, c) in td.chains.iter().enumerate() {
        let Some(c) = c else { continue };
        let e = &mut edges[id];
        for r in &c.rules {
            match &r.target {
                Target::Jump(t) | Target::Goto(t) => e.push(t.id.idx),
                Target::Dnat(_) => constraints.push((id as u32, "DNAT", PRE | OUT, false)),
                Target::Redirect(_) => constraints.push((id as u32, "REDIRECT", PRE | OUT, false)),
                Target::Snat(_) => constraints.push((id as u32, "SNAT", POST | IN, false)),
                Target::Masquerade(_) => constraints.push((id as u32, "MASQUERADE", POST, false)),
                Target::Reject(_) => constraints.push((id as u32, "REJECT", IN | FWD | OUT, false)),
                _ => {}
            }
            // Match hook checks run in checkentry, which nf_tables' compat layer only gives a
            // hook mask for rules directly in a base chain.
            if c.hook.is_some() {
                for m in &r.matches {
                    if let Match::Addrtype(a) = m {
                        match a.limit {
                            Some(LimitIface::In) => constraints.push((
                                id as u32,
                                "addrtype --limit-iface-in",
                                PRE | IN | FWD,
                                true,
                            )),
                            Some(LimitIface::Out) => constraints.push((
                                id as u32,
                                "addrtype --limit-iface-out",
                                OUT | FWD | POST,
                                true,
                            )),
                            None => {}
                        }
                    }
                }
            }
        }
        e.sort_unstable();
        e.dedup();
    }
    let mut mask = vec![0u8; n];
    let mut height: Vec<Option<u32>> = vec![None; n];
    for &h in table.hooks() {
        let Some(root) = td.builtin[h as usize] else {
            continue;
        };
        // Iterative DFS with the current path marked, to find cycles.
        let mut state = vec![0u8; n]; // 0 new, 1 on path, 2 done
        let mut stack: Vec<(u32, usize)> = vec![(root, 0)];
        state[root as usize] = 1;
        mask[root as usize] |= h.bit();
        while let Some(&mut (cid, ref mut pos)) = stack.last_mut() {
            let next = edges[cid as usize].get(*pos).copied();
            *pos += 1;
            match next {
                Some(t) => {
                    let ts = t as usize;
                    if state[ts] == 1 {
                        return Err(RestoreErrorKind::Loop(td.chain(t).name.clone()));
                    }
                    mask[ts] |= h.bit();
                    if state[ts] == 0 {
                        state[ts] = 1;
                        stack.push((t, 0));
                    }
                }
                None => {
                    // All children are done: this chain's height is known.
                    let hgt = edges[cid as usize]
                        .iter()
                        .map(|&t| height[t as usize].unwrap_or(0) + 1)
                        .max()
                        .unwrap_or(0);
                    height[cid as usize] = Some(hgt);
                    state[cid as usize] = 2;
                    stack.pop();
                }
            }
        }
        // nf_tables refuses more than 15 nested jumps/gotos below a base chain
        // (NFT_JUMP_STACK_SIZE, "Too many links"); measured with iptables-restore 1.8.9.
        if height[root as usize].unwrap_or(0) > 15 {
            return Err(RestoreErrorKind::TooDeep(h.chain_name().to_string()));
        }
    }
    let hook_of = |bad: u8| -> &'static str {
        Hook::ALL
            .iter()
            .find(|h| bad & h.bit() != 0)
            .map(|h| h.chain_name())
            .unwrap_or("?")
    };
    for (cid, what, valid, own_only) in constraints {
        let c = td.chain(cid);
        let m = if own_only {
            c.hook.map(|h| h.bit()).unwrap_or(0)
        } else {
            mask[cid as usize]
        };
        if m & !valid != 0 {
            return Err(RestoreErrorKind::WrongHook {
                what,
                chain: c.name.clone(),
                hook: hook_of(m & !valid),
                valid: hook_names(valid),
            });
        }
    }
    Ok(())
}

fn name_hash(name: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = KeyHasher::default();
    name.hash(&mut h);
    h.finish()
}
