//! `nfsim run`: a scenario's timeline and summary, with the JSON lines, the HTML report, the
//! conntrack dumps and the captures the flags ask for; exit 1 if an expectation fails.

use super::{json_out, load, within_run, Named};
use anyhow::{anyhow, Context, Result};
use nfsim::cluster::sim::{
    DumpRecord, EndRecord, EventSink, JsonLinesSink, RunOptions, RunResult, Simulation,
    StartRecord, TextSink,
};
use nfsim::scenario::Scenario;
use sim_core::{SimDuration, SimTime};
use std::cell::RefCell;
use std::io::{BufWriter, IsTerminal, Write};
use std::process::ExitCode;
use std::rc::Rc;

/// `nfsim run`'s flags.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The scenario file.
    pub(crate) file: String,
    /// Override the scenario's seed.
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// Stop at this simulated time (e.g. 10m); expectations after it (or at the end) are skipped.
    #[arg(long)]
    pub(crate) until: Option<SimDuration>,
    /// Also write the timeline as JSON lines to FILE (`-`: to stdout, instead of the text;
    /// schema in docs/json-schema.md).
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<String>,
    /// Also write the run as one self-contained HTML page to FILE: swimlanes over simulated
    /// time (clients, conntrack entries, pods, EndpointSlices, kube-proxy), the
    /// expectations and the command that replays the run.
    #[arg(long, value_name = "FILE")]
    pub(crate) report: Option<String>,
    /// Print every node's `conntrack -L` at this simulated time (repeatable).
    #[arg(long, value_name = "AT")]
    pub(crate) dump_conntrack: Vec<SimDuration>,
    /// Leave conntrack events out of the timeline.
    #[arg(long)]
    pub(crate) no_conntrack_events: bool,
    /// Show progress on stderr (default: only when stderr is a terminal).
    #[arg(long)]
    pub(crate) progress: bool,
    /// Write what `tcpdump -i IF` would capture on every node's eth0 and every pod's veth
    /// into DIR (created if missing), one pcap file per interface: NODE-eth0.pcap,
    /// NODE-veth-POD.pcap (see docs/captures.md).
    #[arg(long, value_name = "DIR")]
    pub(crate) pcap: Option<String>,
    /// The Unix time of the scenario's start, for the --pcap timestamps (default 0,
    /// 1970-01-01 UTC, as `nfsim rules --epoch`).
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    pub(crate) epoch: u64,
}

/// The run the flags ask for: the scenario (cut at `--until`), and what was left out.
struct Plan {
    /// The scenario, its duration `--until` where that is earlier.
    sc: Scenario,
    /// The expectations after `--until`, by name, reported as skipped.
    skipped: Vec<String>,
    /// Whether progress goes to stderr.
    show_progress: bool,
}

/// Loads the scenario and checks the flags' instants against it.
fn resolve(a: &Args) -> Result<Plan> {
    let mut sc = load(&a.file, a.seed)?;
    if let Some(u) = a.until {
        within_run("--until", u, &sc)?;
    }
    for &at in &a.dump_conntrack {
        within_run("--dump-conntrack", at, &sc)?;
    }
    let mut skipped = Vec::new();
    if let Some(u) = a.until {
        if u < sc.duration {
            sc.duration = u;
            let end = SimTime::ZERO + u;
            sc.expectations.retain(|x| {
                // Checks at the end of the run refer to the scenario's end, not to --until.
                let keep = x.at.is_some_and(|t| t <= end);
                if !keep {
                    skipped.push(x.name.clone());
                }
                keep
            });
        }
    }
    let show_progress = a.progress || std::io::stderr().is_terminal();
    Ok(Plan {
        sc,
        skipped,
        show_progress,
    })
}

/// Runs the scenario, writing the timeline as it happens.
pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let Plan {
        sc,
        skipped,
        show_progress,
    } = resolve(&a)?;
    let (file, seed, name) = (sc.file.clone(), sc.seed, sc.name.clone());
    // The timeline is written as it happens: text to stdout, JSON lines to --json (to stdout
    // instead of the text with `--json -`).
    let json_to_stdout = a.json.as_deref() == Some("-");
    let text = (!json_to_stdout).then(|| {
        let stdout = Named::new("stdout", std::io::stdout());
        Rc::new(RefCell::new(TextSink::new(BufWriter::new(stdout))))
    });
    let mut sinks: Vec<Box<dyn EventSink>> = Vec::new();
    if let Some(t) = &text {
        sinks.push(Box::new(t.clone()));
    }
    type JsonOut = Rc<RefCell<JsonLinesSink<BufWriter<Named<Box<dyn Write>>>>>>;
    let json: Option<JsonOut> = match &a.json {
        Some(path) => {
            let j = Rc::new(RefCell::new(JsonLinesSink::new(BufWriter::new(json_out(
                path,
            )?))));
            sinks.push(Box::new(j.clone()));
            Some(j)
        }
        None => None,
    };
    // The report follows the run event by event, like the other sinks.
    let report = a
        .report
        .as_ref()
        .map(|_| Rc::new(RefCell::new(nfsim::report::Report::new(&sc))));
    if let Some(r) = &report {
        sinks.push(Box::new(r.clone()));
    }
    if let Some(t) = &text {
        let mut t = t.borrow_mut();
        let w = t.writer();
        writeln!(w, "scenario {name} (seed {seed})")?;
        // Free text: each of its lines indented, control characters escaped, so that it
        // cannot forge a line of the output.
        for line in sc.description.trim().lines() {
            writeln!(w, "  {}", sim_core::text::Escaped(line))?;
        }
        writeln!(w)?;
    }
    if let Some(j) = &json {
        let mut j = j.borrow_mut();
        let w = j.writer();
        let start = StartRecord::new(&name, &file, seed, sc.duration.as_nanos());
        serde_json::to_writer(&mut *w, &start).map_err(std::io::Error::from)?;
        writeln!(w)?;
    }
    let opts = RunOptions {
        record_timeline: false,
        conntrack_events: !a.no_conntrack_events,
        progress: progress_printer(show_progress),
    };
    let headline = nfsim::report::Headline::of(&sc);
    let mut b = Simulation::builder(sc).options(opts);
    for s in sinks {
        b = b.sink(s);
    }
    if let Some(dir) = &a.pcap {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the --pcap directory {dir}"))?;
        let epoch_ns = a.epoch.checked_mul(1_000_000_000).ok_or_else(|| {
            anyhow!(
                "--epoch {}: more seconds than a capture's time holds",
                a.epoch
            )
        })?;
        b = b.capture(Box::new(nfsim::cluster::sim::PcapDir::new(dir, epoch_ns)));
    }
    let mut sim = b.build()?;
    let mut ats = a.dump_conntrack.clone();
    ats.sort();
    for at in ats {
        let t = SimTime::ZERO + at;
        sim.run_until(t)?;
        if let Some(text) = &text {
            let mut s = format!("{}  conntrack -L at {}:\n", t.hms(), t.hms());
            for (i, n) in sim.node_names().iter().enumerate() {
                let dump = sim.conntrack_dump(i);
                let count = dump.lines().count();
                s.push_str(&format!("--- {n} ---\n{dump}conntrack v1.4.7 (conntrack-tools): {count} flow entries have been shown.\n"));
            }
            text.borrow_mut().writer().write_all(s.as_bytes())?;
        }
        if let Some(j) = &json {
            let mut j = j.borrow_mut();
            let w = j.writer();
            for (i, n) in sim.node_names().iter().enumerate() {
                let rec = DumpRecord::new(n, t, &sim.conntrack_entries(i));
                serde_json::to_writer(&mut *w, &rec).map_err(std::io::Error::from)?;
                writeln!(w)?;
            }
        }
    }
    let result = sim.finish()?;
    if show_progress {
        let _ = write!(std::io::stderr(), "\r\x1b[K");
    }
    let mut replay = format!("nfsim run {file} --seed {seed}");
    if let Some(u) = a.until {
        replay.push_str(&format!(" --until {u}"));
    }
    if let Some(t) = &text {
        let mut t = t.borrow_mut();
        let w = t.writer();
        w.write_all(render_end(&result, &skipped, &headline.text(&result)).as_bytes())?;
        if !result.passed() {
            writeln!(w, "replay: {replay}")?;
        }
        w.flush()?;
    } else if !result.passed() {
        let _ = writeln!(std::io::stderr(), "replay: {replay}");
    }
    if let Some(j) = json {
        let mut j = j.borrow_mut();
        let w = j.writer();
        let line = headline.text(&result);
        let end = EndRecord::new(&name, &file, seed, &result, &skipped, &line);
        serde_json::to_writer(&mut *w, &end).map_err(std::io::Error::from)?;
        writeln!(w)?;
        w.flush()?;
    }
    if let (Some(path), Some(report)) = (&a.report, report) {
        let report = Rc::try_unwrap(report)
            .map_err(|_| anyhow!("the report is still held by the run"))?
            .into_inner();
        let html = report.finish(&result, &format!("{replay} --report {path}"), &skipped);
        std::fs::write(path, html).with_context(|| format!("writing {path}"))?;
    }
    if result.passed() {
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(1))
    }
}

/// What `nfsim run` prints after the timeline: the summary, the verdicts and the headline.
fn render_end(r: &RunResult, skipped: &[String], headline: &str) -> String {
    let mut s = String::from("\nsummary\n");
    s.push_str(&r.summary);
    s.push_str("\nexpectations\n");
    for x in &r.results {
        s.push_str(&format!(
            "  {} {} (line {}, at {}): {}\n",
            if x.passed { "PASS" } else { "FAIL" },
            sim_core::text::Escaped(&x.name),
            x.line,
            x.at,
            sim_core::text::Escaped(&x.detail)
        ));
    }
    for n in skipped {
        s.push_str(&format!("  SKIP {n} (after --until)\n"));
    }
    let failed = r.results.iter().filter(|x| !x.passed).count();
    s.push_str(&format!(
        "\n{} passed, {} failed\noutcome: {}\n",
        r.results.len() - failed,
        failed,
        sim_core::text::Escaped(headline)
    ));
    s
}

/// Progress on stderr, at most every half second of wall time, only after the first second.
fn progress_printer(enabled: bool) -> Option<Box<dyn FnMut(SimTime, SimTime)>> {
    if !enabled {
        return None;
    }
    let start = std::time::Instant::now();
    let mut last = start;
    Some(Box::new(move |now: SimTime, end: SimTime| {
        let t = std::time::Instant::now();
        if t.duration_since(start).as_secs_f64() < 1.0 || t.duration_since(last).as_secs_f64() < 0.5
        {
            return;
        }
        last = t;
        let pct = if end.as_nanos() == 0 {
            100.0
        } else {
            now.as_nanos() as f64 * 100.0 / end.as_nanos() as f64
        };
        let mut e = std::io::stderr();
        let _ = write!(
            e,
            "\r[nfsim] simulated {} / {} ({pct:.0}%)",
            now.hms(),
            end.hms()
        );
        let _ = e.flush();
    }))
}
