//! Sweeps: one scenario run across many seeds and `--set` combinations, with pass rates and
//! distributions instead of one seed's story.
//!
//! A sweep is a list of runs, numbered in a fixed order: the combinations of `--set` values
//! (the first `--set` varies slowest), and within each the seeds in increasing order, so run
//! `r` is combination `r / seeds` with seed `first + r % seeds`. The runs are independent;
//! [`execute`] shares them among threads and hands their records back in run order, so the
//! output is the same bytes whatever the number of threads. A shard (`--shard i/N`) is the
//! `i`-th of `N` contiguous slices of the run numbers; [`merge`] puts shards' outputs back
//! together and checks that every run is there exactly once.
//!
//! The output is JSON lines: a [`Header`] (`"kind":"sweep"`), one [`RunRecord`] per run
//! (`"kind":"run"`), then the [`stats::Aggregate`] (`"kind":"aggregate"`): per combination and
//! per expectation, the pass rate with its 95 % Wilson interval, and per client the
//! distributions of the time blackholed and the queries failed, answered and timed out.
//!
//! - [`set`]: `--set PATH=VALUE`, applied to the file's text.
//! - [`stats`]: pass rates, intervals, distributions.

pub mod set;
pub mod stats;

use crate::cluster::sim::{ClientFigures, RunOptions, Simulation};
use crate::scenario::{load_str, Scenario, ScenarioError};
use serde::{Deserialize, Serialize};
pub use set::{SetAxis, SetError};
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The most runs one sweep plans: 2^40, far past what any machine runs, and small enough
/// that every count over runs (run indices, shard bounds, totals) stays inside a `u64`.
pub const MAX_SWEEP_RUNS: u64 = 1 << 40;

/// Why a sweep could not be planned, run or merged.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// The scenario file (as written) was refused.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// A `--set` path could not be applied.
    #[error(transparent)]
    Set(#[from] SetError),
    /// The scenario with a combination of `--set` values was refused.
    #[error("with --set {set}: {error}")]
    SetScenario {
        /// The combination, as `PATH=VALUE PATH=VALUE`.
        set: String,
        /// The loader's error, located in the edited text.
        error: ScenarioError,
    },
    /// A line of a shard's output could not be read.
    #[error("{file}:{line}: {message}")]
    Merge {
        /// The file.
        file: String,
        /// 1-based line (0: the file as a whole).
        line: usize,
        /// What was wrong and what was expected.
        message: String,
    },
    /// The shards hold every run they claim, but not every run of the sweep.
    #[error("{files}: {missing} of {runs} runs missing: {detail}; expected every shard's output")]
    MergeIncomplete {
        /// The files read, as `a.jsonl, b.jsonl` (at most a few named, then how many more).
        files: String,
        /// Runs missing.
        missing: u64,
        /// Runs in the sweep.
        runs: u64,
        /// Which: the first ranges of missing runs with their combinations and seeds, and
        /// the shards absent when the files' labels tell.
        detail: String,
    },
    /// The `--set` values and seeds make more runs than a sweep can count.
    #[error("{combos} combinations of --set values times {seeds} seeds: more runs than a sweep can hold (expected at most {MAX_SWEEP_RUNS})")]
    TooManyRuns {
        /// The combinations, or a lower bound where their product overflows.
        combos: String,
        /// The seeds of the range.
        seeds: u64,
    },
    /// Writing the output failed (the source, so that a closed pipe is seen as one).
    #[error("writing the output: {0}")]
    Io(#[source] std::io::Error),
}

impl From<std::io::Error> for SweepError {
    fn from(e: std::io::Error) -> SweepError {
        SweepError::Io(e)
    }
}

/// `--seeds A..B` (both ends included, as `seq A B`) or `--seeds N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeedRange {
    /// The first seed.
    pub first: u64,
    /// The last seed (included).
    pub last: u64,
}

impl SeedRange {
    /// How many seeds.
    pub fn len(&self) -> u64 {
        self.last - self.first + 1
    }
    /// Never: a range holds at least its first seed.
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl std::str::FromStr for SeedRange {
    type Err = String;
    fn from_str(s: &str) -> Result<SeedRange, String> {
        let num = |x: &str| {
            x.trim().parse::<u64>().map_err(|_| {
                format!(
                    "{} is not a seed: expected A..B (both included, as 1..10000) or one seed",
                    sim_core::input::quote_excerpt(x, 40)
                )
            })
        };
        let (first, last) = match s.split_once("..") {
            Some((a, b)) => (num(a)?, num(b.strip_prefix('=').unwrap_or(b))?),
            None => {
                let n = num(s)?;
                (n, n)
            }
        };
        if last < first {
            return Err(format!(
                "{}: the last seed is below the first: expected A..B with A <= B",
                sim_core::input::cut(s, 40)
            ));
        }
        if last - first >= u64::from(u32::MAX) {
            return Err(format!(
                "{}: more than 2^32 seeds: expected a smaller range",
                sim_core::input::cut(s, 40)
            ));
        }
        Ok(SeedRange { first, last })
    }
}

impl fmt::Display for SeedRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.first, self.last)
    }
}

/// `--shard i/N`: the `i`-th (from 0) of `N` contiguous slices of the runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// Which slice, from 0 (a Kubernetes Indexed Job's `JOB_COMPLETION_INDEX`).
    pub index: u64,
    /// How many slices.
    pub count: u64,
}

impl Shard {
    /// The run numbers of this slice of `total` runs.
    pub fn range(&self, total: u64) -> Range<u64> {
        let at = |i: u64| ((u128::from(total) * u128::from(i)) / u128::from(self.count)) as u64;
        at(self.index)..at(self.index + 1)
    }
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Shard, String> {
        let bad = || {
            format!(
                "{}: expected i/N with 0 <= i < N, as 0/4",
                sim_core::input::quote_excerpt(s, 40)
            )
        };
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count) = (
            i.trim().parse::<u64>().map_err(|_| bad())?,
            n.trim().parse::<u64>().map_err(|_| bad())?,
        );
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// One `--set` as the header records it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SetHeader {
    /// The dotted path.
    pub path: String,
    /// Its values.
    pub values: Vec<String>,
}

/// One combination of `--set` values, as the header records it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ComboHeader {
    /// Its index.
    pub combo: usize,
    /// Path → value.
    pub set: BTreeMap<String, String>,
    /// The scenario's expectations, in file order ([`RunRecord::failed`] indexes them).
    pub expectations: Vec<String>,
    /// The scenario's clients, in file order ([`RunRecord::clients`] follows it).
    pub clients: Vec<String>,
}

/// The first line of a sweep's output: what was swept.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Header {
    /// Always `"sweep"`.
    pub kind: String,
    /// The scenario's name.
    pub scenario: String,
    /// The scenario file as given.
    pub file: String,
    /// SHA-256 of the file's bytes (merging refuses shards of different files).
    pub sha256: String,
    /// The seeds, as `A..B`.
    pub seeds: String,
    /// The `--set`s.
    pub set: Vec<SetHeader>,
    /// Runs in the whole sweep.
    pub runs: u64,
    /// The combinations.
    pub combos: Vec<ComboHeader>,
    /// The shard this output holds (`None`: every run).
    pub shard: Option<String>,
}

/// One run's line.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RunRecord {
    /// Always `"run"`.
    pub kind: String,
    /// The run's number.
    pub run: u64,
    /// Its combination.
    pub combo: usize,
    /// Its seed: `nfsim run FILE --seed SEED` (with the combination's edits) replays it.
    pub seed: u64,
    /// The combination's values.
    pub set: BTreeMap<String, String>,
    /// Whether every expectation passed.
    pub passed: bool,
    /// The expectations that failed (indices into the header's list).
    pub failed: Vec<usize>,
    /// Why the run stopped early, if it did (it then counts as failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Events processed.
    pub events: u64,
    /// Each client's figures.
    pub clients: Vec<ClientFigures>,
}

struct Combo {
    set: BTreeMap<String, String>,
    scenario: Scenario,
}

/// A planned sweep: the scenario of every combination, checked.
pub struct Sweep {
    header: Header,
    combos: Vec<Combo>,
    seeds: SeedRange,
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Sweep {
    /// Plans the sweep of the scenario `text` (named `file` in messages) over `seeds` and
    /// every combination of the `sets`' values. Every combination's scenario is loaded and
    /// checked here, before any run.
    pub fn plan(
        file: &str,
        text: &str,
        seeds: SeedRange,
        sets: &[SetAxis],
    ) -> Result<Sweep, SweepError> {
        // Counted without wrapping: `--set` values multiply, and hostile ones must not
        // overflow the product (or the runs after it).
        let n_combos = sets
            .iter()
            .try_fold(1usize, |n, s| n.checked_mul(s.values.len()));
        let runs = n_combos.and_then(|n| (n as u64).checked_mul(seeds.len()));
        let n_combos = match (n_combos, runs) {
            (Some(n), Some(r)) if r <= MAX_SWEEP_RUNS => n,
            _ => {
                return Err(SweepError::TooManyRuns {
                    combos: n_combos.map_or("more than 2^64".into(), |n| n.to_string()),
                    seeds: seeds.len(),
                })
            }
        };
        let base = load_str(file, text)?;
        let mut combos = Vec::new();
        for c in 0..n_combos {
            // Mixed radix, the first --set the most significant digit.
            let mut rem = c;
            let mut picks = vec![0; sets.len()];
            for (k, s) in sets.iter().enumerate().rev() {
                picks[k] = rem % s.values.len();
                rem /= s.values.len();
            }
            let mut edited = text.to_string();
            let mut set = BTreeMap::new();
            let mut shown = Vec::new();
            for (s, &p) in sets.iter().zip(&picks) {
                let v = &s.values[p];
                edited = s.apply(file, &edited, v)?;
                set.insert(s.path.clone(), v.clone());
                shown.push(format!("{}={v}", s.path));
            }
            let scenario = if sets.is_empty() {
                base.clone()
            } else {
                load_str(file, &edited).map_err(|error| SweepError::SetScenario {
                    set: shown.join(" "),
                    error,
                })?
            };
            combos.push(Combo { set, scenario });
        }
        let header = Header {
            kind: "sweep".into(),
            scenario: base.name.clone(),
            file: file.to_string(),
            sha256: sha256_hex(text.as_bytes()),
            seeds: seeds.to_string(),
            set: sets
                .iter()
                .map(|s| SetHeader {
                    path: s.path.clone(),
                    values: s.values.clone(),
                })
                .collect(),
            runs: n_combos as u64 * seeds.len(), // checked against MAX_SWEEP_RUNS above
            combos: combos
                .iter()
                .enumerate()
                .map(|(i, c)| ComboHeader {
                    combo: i,
                    set: c.set.clone(),
                    expectations: c
                        .scenario
                        .expectations
                        .iter()
                        .map(|x| x.name.clone())
                        .collect(),
                    clients: c.scenario.clients.iter().map(|x| x.name.clone()).collect(),
                })
                .collect(),
            shard: None,
        };
        Ok(Sweep {
            header,
            combos,
            seeds,
        })
    }

    /// The header (with `shard` unset).
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Runs in the whole sweep.
    pub fn runs(&self) -> u64 {
        self.header.runs
    }

    /// Runs run number `r`.
    pub fn run(&self, r: u64) -> RunRecord {
        let n = self.seeds.len();
        let combo = (r / n) as usize;
        let seed = self.seeds.first + r % n;
        let c = &self.combos[combo];
        let mut sc = c.scenario.clone();
        sc.seed = seed;
        let mut rec = RunRecord {
            kind: "run".into(),
            run: r,
            combo,
            seed,
            set: c.set.clone(),
            passed: false,
            failed: Vec::new(),
            error: None,
            events: 0,
            clients: Vec::new(),
        };
        let result = Simulation::new(sc, RunOptions::default()).and_then(|s| s.finish());
        match result {
            Ok(res) => {
                // Results come in check order; name them by their place in the file.
                let mut used = vec![false; c.scenario.expectations.len()];
                for x in &res.results {
                    let idx = c
                        .scenario
                        .expectations
                        .iter()
                        .enumerate()
                        .position(|(i, e)| !used[i] && e.line == x.line && e.name == x.name);
                    if let Some(i) = idx {
                        used[i] = true;
                        if !x.passed {
                            rec.failed.push(i);
                        }
                    }
                }
                rec.failed.sort_unstable();
                rec.passed = res.passed();
                rec.events = res.events;
                rec.clients = res.clients;
            }
            Err(e) => rec.error = Some(e.to_string()),
        }
        rec
    }
}

/// The threads a sweep of `runs` runs asked to use `requested` uses: no more than the runs
/// (a thread with no run to make would only be started and stopped), nor than the machine
/// runs at once (`std::thread::available_parallelism`: more would share the cores and add
/// nothing but memory), and at least one. The output does not depend on it.
pub fn threads(requested: usize, runs: u64) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let runs = usize::try_from(runs).unwrap_or(usize::MAX);
    requested.min(runs).min(cores).max(1)
}

/// Runs the runs numbered `range` of `sweep` on `jobs` threads (as [`threads`] caps them),
/// handing each record to `emit` in run order, and returns them all (in run order). Stops
/// early, returning the error, if `emit` fails.
pub fn execute(
    sweep: &Sweep,
    range: Range<u64>,
    jobs: usize,
    mut emit: impl FnMut(&RunRecord) -> std::io::Result<()>,
) -> Result<Vec<RunRecord>, SweepError> {
    let next = AtomicU64::new(range.start);
    let stop = AtomicBool::new(false);
    // Reserved for at most 65,536 records up front: a range of billions grows as it runs.
    let mut out = Vec::with_capacity((range.end.saturating_sub(range.start)).min(1 << 16) as usize);
    let mut failure = None;
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::channel::<RunRecord>();
        for _ in 0..threads(jobs, range.end.saturating_sub(range.start)) {
            let tx = tx.clone();
            let (next, stop) = (&next, &stop);
            scope.spawn(move || loop {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let r = next.fetch_add(1, Ordering::Relaxed);
                if r >= range.end {
                    break;
                }
                if tx.send(sweep.run(r)).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        // Records arrive in any order; hold them until their turn.
        let mut pending: BTreeMap<u64, RunRecord> = BTreeMap::new();
        let mut want = range.start;
        for rec in rx {
            pending.insert(rec.run, rec);
            while let Some(rec) = pending.remove(&want) {
                if failure.is_none() {
                    if let Err(e) = emit(&rec) {
                        failure = Some(e);
                        stop.store(true, Ordering::Relaxed);
                    }
                }
                out.push(rec);
                want += 1;
            }
        }
    });
    match failure {
        Some(e) => Err(e.into()),
        None => Ok(out),
    }
}

/// The output of a sweep (or a shard): header, run lines, aggregate line.
pub fn header_line(header: &Header) -> String {
    serde_json::to_string(header).expect("a header serializes")
}

/// One run's line.
pub fn run_line(rec: &RunRecord) -> String {
    serde_json::to_string(rec).expect("a run record serializes")
}

/// The aggregate's line.
pub fn aggregate_line(a: &stats::Aggregate) -> String {
    serde_json::to_string(a).expect("an aggregate serializes")
}

/// Puts shards' outputs (`(file name, text)`) back together: checks that they come from one
/// sweep (same header but for the shard), that the header is one `nfsim sweep` writes (its
/// runs, seeds and combinations agree, its shard label is `i/N`), that each run line fits it
/// (number, combination, seed and values; failed expectations that exist, in order;
/// consistent pass, error and client figures; within its file's shard) and that every run is
/// there exactly once; returns the header (without a shard) and the runs in order. A line
/// that does not fit is a located error (`file:line`); missing runs name the files read and
/// which runs (and shards) are absent.
pub fn merge(inputs: &[(String, String)]) -> Result<(Header, Vec<RunRecord>), SweepError> {
    let mut header: Option<(Header, String)> = None;
    let mut runs: BTreeMap<u64, (RunRecord, String, usize)> = BTreeMap::new();
    // The shard labels read, by file.
    let mut shards: Vec<Option<Shard>> = Vec::new();
    for (file, text) in inputs {
        let err = |line: usize, message: String| SweepError::Merge {
            file: file.clone(),
            line,
            message,
        };
        // This file's header, checked, and its shard (a file of shards concatenated has one
        // header per shard: each holds for the runs after it).
        let mut this: Option<(SeedRange, Option<Shard>)> = None;
        for (i, line) in text.lines().enumerate() {
            let ln = i + 1;
            if line.trim().is_empty() {
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(line).map_err(|e| {
                err(
                    ln,
                    format!("not JSON ({e}): expected a line of nfsim sweep output"),
                )
            })?;
            match v.get("kind").and_then(|k| k.as_str()) {
                Some("sweep") => {
                    let mut h: Header = serde_json::from_value(v)
                        .map_err(|e| err(ln, format!("a bad sweep header: {e}")))?;
                    let (seeds, shard) = check_header(&h).map_err(|m| err(ln, m))?;
                    h.shard = None;
                    match &header {
                        None => header = Some((h, file.clone())),
                        Some((first, from)) if *first != h => {
                            return Err(err(
                                ln,
                                format!("this shard is of another sweep than {from}'s (scenario file, seeds or --set differ): expected shards of one sweep"),
                            ))
                        }
                        Some(_) => {}
                    }
                    shards.push(shard);
                    this = Some((seeds, shard));
                }
                Some("run") => {
                    let (Some((seeds, shard)), Some((h, _))) = (&this, &header) else {
                        return Err(err(ln, "a run before the sweep header: expected the output of nfsim sweep, whole".into()));
                    };
                    let rec: RunRecord = serde_json::from_value(v)
                        .map_err(|e| err(ln, format!("a bad run line: {e}")))?;
                    check_run(h, *seeds, *shard, &rec).map_err(|m| err(ln, m))?;
                    if let Some((_, f, l)) = runs.get(&rec.run) {
                        return Err(err(
                            ln,
                            format!("run {} again (first at {f}:{l}): expected each run in one shard only", rec.run),
                        ));
                    }
                    runs.insert(rec.run, (rec, file.clone(), ln));
                }
                Some("aggregate") => {}
                other => {
                    return Err(err(
                        ln,
                        format!(
                            "kind {}: expected \"sweep\", \"run\" or \"aggregate\"",
                            other.map_or("missing".into(), |k| sim_core::input::quote_excerpt(
                                k, 40
                            ))
                        ),
                    ))
                }
            }
        }
        if this.is_none() {
            return Err(err(
                0,
                "no sweep header: expected the output of nfsim sweep".into(),
            ));
        }
    }
    let Some((header, _)) = header else {
        return Err(SweepError::Merge {
            file: "sweep merge".into(),
            line: 0,
            message: "no input: expected shard outputs".into(),
        });
    };
    let missing = header.runs - runs.len() as u64;
    if missing > 0 {
        let seeds: SeedRange = header
            .seeds
            .parse()
            .unwrap_or(SeedRange { first: 0, last: 0 });
        return Err(SweepError::MergeIncomplete {
            files: name_files(inputs.iter().map(|(f, _)| f.as_str())),
            missing,
            runs: header.runs,
            detail: missing_detail(&header, seeds, &runs, &shards),
        });
    }
    Ok((header, runs.into_values().map(|(r, _, _)| r).collect()))
}

/// Checks a header read back is one `nfsim sweep` writes: its seeds a range, its runs the
/// combinations times the seeds, its combinations numbered in order with the `--set` values
/// in mixed radix (as [`Sweep::plan`] makes them), its shard label `i/N`.
fn check_header(h: &Header) -> Result<(SeedRange, Option<Shard>), String> {
    let seeds: SeedRange = h
        .seeds
        .parse()
        .map_err(|e| format!("a bad sweep header: seeds {e}"))?;
    let n_combos = h
        .set
        .iter()
        .try_fold(1usize, |n, s| n.checked_mul(s.values.len()))
        .filter(|&n| n > 0)
        .ok_or("a bad sweep header: a --set with no values, or too many combinations")?;
    if h.combos.len() != n_combos {
        return Err(format!(
            "a bad sweep header: {} combinations, where its --set values make {n_combos}",
            h.combos.len()
        ));
    }
    let runs = (n_combos as u64).checked_mul(seeds.len());
    if runs != Some(h.runs) {
        return Err(format!(
            "a bad sweep header: runs {}, where {n_combos} combinations of {} seeds are {}",
            h.runs,
            seeds.len(),
            runs.map_or("more than 2^64".into(), |r| r.to_string())
        ));
    }
    for (c, combo) in h.combos.iter().enumerate() {
        let mut rem = c;
        let mut want = BTreeMap::new();
        for s in h.set.iter().rev() {
            want.insert(s.path.clone(), s.values[rem % s.values.len()].clone());
            rem /= s.values.len();
        }
        if combo.combo != c || combo.set != want {
            return Err(format!(
                "a bad sweep header: combination {c} is numbered {} with the values {:?}, where its --set values make {want:?}",
                combo.combo, combo.set
            ));
        }
    }
    let shard = h
        .shard
        .as_deref()
        .map(|s| {
            s.parse::<Shard>()
                .map_err(|e| format!("a bad sweep header: shard {e}"))
        })
        .transpose()?;
    Ok((seeds, shard))
}

/// Checks a run line fits its header (see [`merge`]).
fn check_run(
    h: &Header,
    seeds: SeedRange,
    shard: Option<Shard>,
    rec: &RunRecord,
) -> Result<(), String> {
    let r = rec.run;
    if r >= h.runs {
        return Err(format!("run {r} is outside the sweep's {} runs", h.runs));
    }
    if let Some(s) = shard {
        let range = s.range(h.runs);
        if !range.contains(&r) {
            return Err(format!(
                "run {r} is not in this file's shard {s} (runs {}..{})",
                range.start, range.end
            ));
        }
    }
    let (combo, seed) = ((r / seeds.len()) as usize, seeds.first + r % seeds.len());
    if rec.combo != combo || rec.seed != seed {
        return Err(format!(
            "run {r} is of combination {} with seed {}: run {r} of this sweep is combination {combo} with seed {seed}",
            rec.combo, rec.seed
        ));
    }
    let ch = &h.combos[combo];
    if rec.set != ch.set {
        return Err(format!(
            "run {r} has the values {:?}: its combination {combo} has {:?}",
            rec.set, ch.set
        ));
    }
    let n = ch.expectations.len();
    if let Some(&bad) = rec.failed.iter().find(|&&i| i >= n) {
        return Err(format!(
            "run {r}: failed expectation {bad} does not exist (the scenario has {n}: 0..{n})"
        ));
    }
    if rec.failed.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!(
            "run {r}: failed expectations {:?} are not in increasing order, each once",
            rec.failed
        ));
    }
    if rec.passed && (!rec.failed.is_empty() || rec.error.is_some()) {
        return Err(format!(
            "run {r} passed, yet lists a failed expectation or an error"
        ));
    }
    if rec.error.is_some() {
        if !rec.clients.is_empty() || !rec.failed.is_empty() {
            return Err(format!(
                "run {r} stopped with an error, yet has client figures or failed expectations (a run that stops has neither)"
            ));
        }
        return Ok(());
    }
    let names: Vec<&str> = rec.clients.iter().map(|c| c.name.as_str()).collect();
    if names != ch.clients.iter().map(String::as_str).collect::<Vec<_>>() {
        return Err(format!(
            "run {r} has figures for the clients {names:?}: its scenario's clients are {:?}",
            ch.clients
        ));
    }
    for c in &rec.clients {
        let done = c.answered.checked_add(c.failed);
        if done.is_none_or(|d| d > c.sent) || c.timed_out.checked_add(c.refused) != Some(c.failed) {
            return Err(format!(
                "run {r}, client {:?}: sent {}, answered {}, failed {} (timed out {}, refused {}) cannot be: expected answered + failed <= sent and failed = timed out + refused",
                c.name, c.sent, c.answered, c.failed, c.timed_out, c.refused
            ));
        }
    }
    Ok(())
}

/// At most this many files, and ranges of missing runs, are named in a message.
const NAMED: usize = 5;

/// `a, b, c` (at most [`NAMED`], then `and N more`).
fn name_files<'a>(files: impl Iterator<Item = &'a str>) -> String {
    let all: Vec<&str> = files.collect();
    let mut s = all
        .iter()
        .take(NAMED)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if all.len() > NAMED {
        s += &format!(" and {} more files", all.len() - NAMED);
    }
    s
}

/// The first ranges of missing runs, each with its combination and seeds, and the shards
/// absent when every file is labelled `i/N` with one `N`.
fn missing_detail(
    h: &Header,
    seeds: SeedRange,
    runs: &BTreeMap<u64, (RunRecord, String, usize)>,
    shards: &[Option<Shard>],
) -> String {
    // Gaps between the runs present: linear in the runs read, not in the sweep's size.
    let mut gaps: Vec<(u64, u64)> = Vec::new();
    let mut next = 0u64;
    for &r in runs.keys().chain(std::iter::once(&h.runs)) {
        if r > next {
            gaps.push((next, r - 1));
        }
        next = r + 1;
    }
    let n = seeds.len();
    // A range of runs may span combinations: one part per combination.
    let mut parts = Vec::new();
    let mut more = 0usize;
    for &(a, b) in &gaps {
        let mut at = a;
        while at <= b {
            let combo = at / n;
            let end = b.min((combo + 1) * n - 1);
            if parts.len() < NAMED {
                let (s0, s1) = (seeds.first + at % n, seeds.first + end % n);
                parts.push(if at == end {
                    format!("run {at} (combination {combo}, seed {s0})")
                } else {
                    format!("runs {at}..={end} (combination {combo}, seeds {s0}..={s1})")
                });
            } else {
                more += 1;
            }
            if end == u64::MAX {
                break;
            }
            at = end + 1;
        }
    }
    let mut s = parts.join(", ");
    if more > 0 {
        s += &format!(" and {more} more ranges");
    }
    let labels: Vec<Shard> = shards.iter().flatten().copied().collect();
    if labels.len() == shards.len() && !labels.is_empty() {
        let count = labels[0].count;
        if labels.iter().all(|l| l.count == count) {
            let absent: Vec<String> = (0..count)
                .filter(|i| !labels.iter().any(|l| l.index == *i))
                .take(NAMED)
                .map(|i| format!("{i}/{count}"))
                .collect();
            if !absent.is_empty() {
                let total = count as usize
                    - labels
                        .iter()
                        .map(|l| l.index)
                        .collect::<std::collections::BTreeSet<_>>()
                        .len();
                s += &format!(
                    "; shard{} {}{} not among the files",
                    if total == 1 { "" } else { "s" },
                    absent.join(", "),
                    if total > absent.len() {
                        format!(" and {} more", total - absent.len())
                    } else {
                        String::new()
                    }
                );
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_cover_every_run_once() {
        for total in [0u64, 1, 7, 10, 10_000] {
            for n in 1..6u64 {
                let mut next = 0;
                for i in 0..n {
                    let r = Shard { index: i, count: n }.range(total);
                    assert_eq!(r.start, next);
                    next = r.end;
                }
                assert_eq!(next, total);
            }
        }
    }

    #[test]
    fn seeds_and_shards_parse_or_say_what_is_expected() {
        assert_eq!(
            "1..10000".parse::<SeedRange>(),
            Ok(SeedRange {
                first: 1,
                last: 10_000
            })
        );
        assert_eq!("1..10000".parse::<SeedRange>().unwrap().len(), 10_000);
        assert_eq!("7".parse::<SeedRange>().unwrap().len(), 1);
        assert!("5..1".parse::<SeedRange>().unwrap_err().contains("A <= B"));
        assert!("x"
            .parse::<SeedRange>()
            .unwrap_err()
            .contains("expected A..B"));
        assert_eq!("2/4".parse::<Shard>(), Ok(Shard { index: 2, count: 4 }));
        assert!("4/4".parse::<Shard>().is_err());
        assert!("1".parse::<Shard>().is_err());
    }
}
