//! `nfsim sweep`: a scenario across many seeds and `--set` combinations, JSON lines out and
//! the aggregate; `nfsim sweep merge`: shards' outputs put back together.

use super::{err_out, open_out};
use anyhow::{anyhow, Context, Result};
use clap::Subcommand;
use nfsim::sweep::{execute, header_line, merge, run_line, Sweep};
use std::io::Write;
use std::ops::Range;
use std::process::ExitCode;

/// `nfsim sweep`'s flags.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct Args {
    #[command(subcommand)]
    pub(crate) sub: Option<Sub>,
    /// The scenario file.
    pub(crate) file: Option<String>,
    /// The seeds: A..B, both included (1..10000 is 10,000 seeds), or one seed.
    #[arg(long, value_name = "A..B")]
    pub(crate) seeds: Option<nfsim::sweep::SeedRange>,
    /// Set a scenario field to each of these values in turn: a dotted path as the file spells
    /// it (kubeProxy.release, clients.sidecar.udp.interval, sysctls.net.netfilter.NAME) and
    /// comma-separated values (repeatable: every combination runs).
    #[arg(long = "set", value_name = "PATH=V1,V2")]
    pub(crate) sets: Vec<nfsim::sweep::SetAxis>,
    /// Threads (default: the machine's cores; never more than the runs or the machine's cores).
    #[arg(long, short)]
    pub(crate) jobs: Option<usize>,
    /// Run only the i-th (from 0) of N contiguous slices of the runs.
    #[arg(long, value_name = "i/N")]
    pub(crate) shard: Option<nfsim::sweep::Shard>,
    /// Write the JSON lines to FILE instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub(crate) out: Option<String>,
    /// Print no table on stderr.
    #[arg(long, short)]
    pub(crate) quiet: bool,
    /// Also write the sweep as one self-contained HTML page to FILE: pass rates with their
    /// intervals, distributions of the clients' figures as histograms.
    #[arg(long, value_name = "FILE")]
    pub(crate) report: Option<String>,
}

/// `nfsim sweep`'s subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum Sub {
    /// Merge shards' outputs: check every run is there once, print the whole sweep's output.
    Merge {
        /// The shards' outputs.
        #[arg(required = true)]
        files: Vec<String>,
        /// Write the JSON lines to FILE instead of stdout.
        #[arg(long, short, value_name = "FILE")]
        out: Option<String>,
        /// Print no table on stderr.
        #[arg(long, short)]
        quiet: bool,
        /// Also write the merged sweep as one self-contained HTML page to FILE.
        #[arg(long, value_name = "FILE")]
        report: Option<String>,
    },
}

/// The sweep the flags ask for: the plan, the threads, and this shard's runs.
struct Plan {
    /// The runs, planned.
    sweep: Sweep,
    /// The threads (`--jobs`, default the machine's cores).
    jobs: usize,
    /// The header line's record (with `--shard` in it).
    header: nfsim::sweep::Header,
    /// The runs of this shard (all without `--shard`).
    range: Range<u64>,
}

/// Reads the scenario and plans its runs.
fn resolve(a: &Args) -> Result<Plan> {
    let file = a.file.as_deref().ok_or_else(|| {
        anyhow!("usage: nfsim sweep FILE --seeds A..B [--set PATH=V1,V2] [--jobs N] [--shard i/N] | nfsim sweep merge FILES...")
    })?;
    let seeds = a
        .seeds
        .ok_or_else(|| anyhow!("--seeds is required: which seeds to run, as 1..10000"))?;
    let text = sim_core::input::read_text_limited(
        std::path::Path::new(file),
        sim_core::input::MAX_SCENARIO_BYTES,
        "MAX_SCENARIO_BYTES",
    )
    .with_context(|| format!("{file}: cannot read the scenario file"))?;
    let sweep = Sweep::plan(file, &text, seeds, &a.sets)?;
    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if jobs == 0 {
        return Err(anyhow!("--jobs 0: expected at least one thread"));
    }
    let mut header = sweep.header().clone();
    let range = match &a.shard {
        Some(s) => {
            header.shard = Some(s.to_string());
            s.range(sweep.runs())
        }
        None => 0..sweep.runs(),
    };
    Ok(Plan {
        sweep,
        jobs,
        header,
        range,
    })
}

/// Runs the sweep (or merges shards), writing each run's line as it completes in order.
pub(crate) fn run(a: Args) -> Result<ExitCode> {
    if let Some(Sub::Merge {
        files,
        out,
        quiet,
        report,
    }) = &a.sub
    {
        return merge_shards(files, out.as_deref(), *quiet, report.as_deref());
    }
    let Plan {
        sweep,
        jobs,
        header,
        range,
    } = resolve(&a)?;
    let mut w = open_out(a.out.as_deref())?;
    writeln!(w, "{}", header_line(&header)).context("writing the output")?;
    let runs = execute(&sweep, range, jobs, |r| writeln!(w, "{}", run_line(r)))?;
    finish_sweep(&mut w, &header, &runs, a.quiet, a.report.as_deref())
}

/// `nfsim sweep merge`: checks every run is there once and prints the whole sweep's output.
fn merge_shards(
    files: &[String],
    out: Option<&str>,
    quiet: bool,
    report: Option<&str>,
) -> Result<ExitCode> {
    let mut inputs = Vec::new();
    for f in files {
        let text = sim_core::input::read_text_limited(
            std::path::Path::new(f),
            sim_core::input::MAX_RESULTS_BYTES,
            "MAX_RESULTS_BYTES",
        )
        .with_context(|| format!("reading {f}"))?;
        inputs.push((f.clone(), text));
    }
    let (header, runs) = merge(&inputs)?;
    let mut w = open_out(out)?;
    writeln!(w, "{}", header_line(&header)).context("writing the output")?;
    for r in &runs {
        writeln!(w, "{}", run_line(r)).context("writing the output")?;
    }
    finish_sweep(&mut w, &header, &runs, quiet, report)
}

/// The aggregate line, the report and the table: the end of a sweep and of a merge.
fn finish_sweep(
    w: &mut dyn Write,
    header: &nfsim::sweep::Header,
    runs: &[nfsim::sweep::RunRecord],
    quiet: bool,
    report: Option<&str>,
) -> Result<ExitCode> {
    let agg = nfsim::sweep::stats::aggregate(header, runs);
    writeln!(w, "{}", nfsim::sweep::aggregate_line(&agg)).context("writing the output")?;
    w.flush().context("writing the output")?;
    if let Some(path) = report {
        // The command as typed (its arguments, quoted where they hold spaces).
        let mut command = String::from("nfsim");
        for arg in std::env::args().skip(1) {
            if arg.contains(char::is_whitespace) || arg.is_empty() {
                command.push_str(&format!(" '{arg}'"));
            } else {
                command.push(' ');
                command.push_str(&arg);
            }
        }
        let html = nfsim::report::render_sweep(header, runs, &agg, &command);
        std::fs::write(path, html).with_context(|| format!("writing {path}"))?;
    }
    if !quiet {
        err_out(&nfsim::sweep::stats::render(&agg))?;
    }
    Ok(ExitCode::SUCCESS)
}
