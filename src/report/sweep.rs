//! `nfsim sweep … --report sweep.html`: a sweep as one self-contained HTML page. Per
//! combination of `--set` values: the pass rate of the whole scenario and of each expectation
//! with its 95 % Wilson interval, and per client the distribution across runs of the time it
//! was blackholed and of the queries it lost, as histograms with their percentiles; the seeds
//! that passed and failed first, to replay.

use crate::sweep::stats::{Aggregate, Distribution, Rate};
use crate::sweep::{Header, RunRecord};
use serde::Serialize;

/// At most this many bars per histogram.
const MAX_BINS: u64 = 40;
/// Seeds listed per combination and verdict.
const SEEDS_LISTED: usize = 12;

#[derive(Debug, Serialize)]
struct Hist {
    /// The first bin's lower edge.
    lo: f64,
    /// Bin width.
    width: f64,
    /// Runs per bin.
    counts: Vec<u64>,
}

#[derive(Debug, Serialize)]
struct Figure {
    name: &'static str,
    unit: &'static str,
    dist: Distribution,
    hist: Hist,
}

#[derive(Debug, Serialize)]
struct ClientPlots {
    client: String,
    figures: Vec<Figure>,
}

#[derive(Debug, Serialize)]
struct ExpRate {
    name: String,
    rate: Rate,
}

#[derive(Debug, Serialize)]
struct Combo {
    combo: usize,
    set: Vec<(String, String)>,
    rate: Rate,
    errors: u64,
    expectations: Vec<ExpRate>,
    clients: Vec<ClientPlots>,
    passed_seeds: Vec<u64>,
    failed_seeds: Vec<u64>,
}

#[derive(Debug, Serialize)]
struct SweepData {
    version: u32,
    kind: &'static str,
    scenario: String,
    file: String,
    seeds: String,
    runs: u64,
    shard: Option<String>,
    command: String,
    combos: Vec<Combo>,
}

/// A round bin width (1, 2 or 5 × 10^k) giving at most [`MAX_BINS`] bins over `0..=max`;
/// whole numbers keep a width of at least 1.
fn bin_width(max: f64, integer: bool) -> f64 {
    let want = (max / MAX_BINS as f64).max(if integer { 1.0 } else { 1e-9 });
    let mut unit = 10f64.powi(want.log10().floor() as i32);
    loop {
        for m in [1.0, 2.0, 5.0] {
            if unit * m >= want {
                return unit * m;
            }
        }
        unit *= 10.0;
    }
}

fn hist(values: &[f64], integer: bool) -> Hist {
    let max = values.iter().copied().fold(0.0, f64::max);
    let width = bin_width(max, integer);
    let bins = ((max / width).floor() as usize + 1).max(1);
    let mut counts = vec![0u64; bins];
    for v in values {
        let i = ((v / width).floor() as usize).min(bins - 1);
        counts[i] += 1;
    }
    Hist {
        lo: 0.0,
        width,
        counts,
    }
}

fn figure(name: &'static str, unit: &'static str, values: Vec<f64>, integer: bool) -> Figure {
    let hist = hist(&values, integer);
    Figure {
        name,
        unit,
        dist: Distribution::of(values),
        hist,
    }
}

/// The page of a sweep: its header, its runs (any order; shards merged) and their aggregate.
/// `command` is the command line that ran it.
pub fn render_sweep(header: &Header, runs: &[RunRecord], agg: &Aggregate, command: &str) -> String {
    let mut combos = Vec::new();
    for c in &agg.combos {
        let mine: Vec<&RunRecord> = runs.iter().filter(|r| r.combo == c.combo).collect();
        let names: Vec<String> = header
            .combos
            .get(c.combo)
            .map(|h| h.clients.clone())
            .unwrap_or_default();
        let clients = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let get = |f: &dyn Fn(&crate::cluster::sim::ClientFigures) -> f64| -> Vec<f64> {
                    mine.iter()
                        .filter_map(|r| r.clients.get(i))
                        .map(f)
                        .collect()
                };
                ClientPlots {
                    client: name.clone(),
                    figures: vec![
                        figure(
                            "time blackholed",
                            "s",
                            get(&|f| f.blackholed_ns as f64 / 1e9),
                            false,
                        ),
                        figure("queries failed", "", get(&|f| f.failed as f64), true),
                    ],
                }
            })
            .collect();
        let mut sorted = mine.clone();
        sorted.sort_by_key(|r| r.seed);
        combos.push(Combo {
            combo: c.combo,
            set: c.set.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            rate: c.rate.clone(),
            errors: c.errors,
            expectations: c
                .expectations
                .iter()
                .map(|e| ExpRate {
                    name: e.name.clone(),
                    rate: e.rate.clone(),
                })
                .collect(),
            clients,
            passed_seeds: sorted
                .iter()
                .filter(|r| r.passed)
                .take(SEEDS_LISTED)
                .map(|r| r.seed)
                .collect(),
            failed_seeds: sorted
                .iter()
                .filter(|r| !r.passed)
                .take(SEEDS_LISTED)
                .map(|r| r.seed)
                .collect(),
        });
    }
    let data = SweepData {
        version: 1,
        kind: "sweep",
        scenario: header.scenario.clone(),
        file: header.file.clone(),
        seeds: header.seeds.clone(),
        runs: agg.runs,
        shard: header.shard.clone(),
        command: command.to_string(),
        combos,
    };
    let title = format!(
        "nfsim sweep: {} (seeds {}, {} runs)",
        header.scenario, header.seeds, agg.runs
    );
    super::page(&title, &data, super::SWEEP_JS)
}
