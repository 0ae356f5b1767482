//! [`RestoreMemo`]: one restore's work shared by identical rulesets, keyed by [`Lineage`].

use super::*;

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
    pub(super) fn origin() -> Lineage {
        Lineage(Sha256::digest(b"nfsim ruleset: empty").into())
    }

    pub(super) fn then(self, op: &[u8], payload: &[u8]) -> Lineage {
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
pub(super) fn text_digest(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

pub(super) fn restore_op(opts: &RestoreOptions) -> [u8; 9] {
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
