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
    /// Writing the output failed.
    #[error("writing the output: {0}")]
    Io(std::io::Error),
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
                    "{x:?} is not a seed: expected A..B (both included, as 1..10000) or one seed"
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
                "{s}: the last seed is below the first: expected A..B with A <= B"
            ));
        }
        if last - first >= u64::from(u32::MAX) {
            return Err(format!(
                "{s}: more than 2^32 seeds: expected a smaller range"
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
        let bad = || format!("{s:?}: expected i/N with 0 <= i < N, as 0/4");
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
        let base = load_str(file, text)?;
        let mut combos = Vec::new();
        let n_combos: usize = sets.iter().map(|s| s.values.len()).product();
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
            runs: n_combos as u64 * seeds.len(),
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

/// Runs the runs numbered `range` of `sweep` on `jobs` threads, handing each record to
/// `emit` in run order, and returns them all (in run order). Stops early, returning the
/// error, if `emit` fails.
pub fn execute(
    sweep: &Sweep,
    range: Range<u64>,
    jobs: usize,
    mut emit: impl FnMut(&RunRecord) -> std::io::Result<()>,
) -> Result<Vec<RunRecord>, SweepError> {
    let next = AtomicU64::new(range.start);
    let stop = AtomicBool::new(false);
    let mut out = Vec::with_capacity((range.end - range.start) as usize);
    let mut failure = None;
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::channel::<RunRecord>();
        for _ in 0..jobs.max(1) {
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
/// sweep (same header but for the shard) and hold every run exactly once, and returns the
/// header (without a shard) and the runs in order.
pub fn merge(inputs: &[(String, String)]) -> Result<(Header, Vec<RunRecord>), SweepError> {
    let mut header: Option<(Header, String)> = None;
    let mut runs: BTreeMap<u64, (RunRecord, String, usize)> = BTreeMap::new();
    for (file, text) in inputs {
        let err = |line: usize, message: String| SweepError::Merge {
            file: file.clone(),
            line,
            message,
        };
        let mut seen_header = false;
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
                    seen_header = true;
                }
                Some("run") => {
                    if !seen_header {
                        return Err(err(ln, "a run before the sweep header: expected the output of nfsim sweep, whole".into()));
                    }
                    let rec: RunRecord = serde_json::from_value(v)
                        .map_err(|e| err(ln, format!("a bad run line: {e}")))?;
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
                        format!("kind {other:?}: expected \"sweep\", \"run\" or \"aggregate\""),
                    ))
                }
            }
        }
        if !seen_header {
            return Err(err(
                0,
                "no sweep header: expected the output of nfsim sweep".into(),
            ));
        }
    }
    let Some((header, _)) = header else {
        return Err(SweepError::Merge {
            file: String::new(),
            line: 0,
            message: "no input: expected shard outputs".into(),
        });
    };
    for (r, (rec, f, l)) in &runs {
        if *r >= header.runs || rec.combo >= header.combos.len() {
            return Err(SweepError::Merge {
                file: f.clone(),
                line: *l,
                message: format!("run {r} is outside the sweep's {} runs", header.runs),
            });
        }
    }
    let missing = header.runs - runs.len() as u64;
    if missing > 0 {
        let first = (0..header.runs)
            .find(|r| !runs.contains_key(r))
            .unwrap_or(0);
        return Err(SweepError::Merge {
            file: String::new(),
            line: 0,
            message: format!(
                "{missing} of {} runs missing (the first: run {first}): expected every shard's output",
                header.runs
            ),
        });
    }
    Ok((header, runs.into_values().map(|(r, _, _)| r).collect()))
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
