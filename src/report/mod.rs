//! `nfsim run FILE --report report.html`: the run as a picture.
//!
//! One self-contained HTML file (inline CSS, JavaScript and SVG; nothing fetched when it is
//! viewed) drawn from the run's events: a swimlane per client with each query placed on the
//! row of the endpoint it reached and shaped by its outcome; each conntrack entry as a bar from
//! NEW to DESTROY with its UNREPLIED / replied / ASSURED phases and the packets that refreshed
//! its timer; pod lifecycles; EndpointSlice conditions; kube-proxy syncs and cleanup
//! deletions; the expectations' verdicts. Hovering shows, clicking pins, the exact lines
//! (`conntrack -E` text, the query's lines). The view zooms from the whole run down to a
//! millisecond. Above it, the run's [`headline`]. Below: the expectations as a PASS/FAIL table, the summary, the seed and the
//! command that replays the run.
//!
//! Runs with more than [`MAX_CLIENT_LANES`] clients or [`MAX_ENTRY_BARS`] conntrack entries
//! are drawn aggregated: outcomes per node and per Service, live conntrack entries per node,
//! counted in fixed buckets (at most about 720 over the run), so the file stays small.
//!
//! A sweep's page ([`render_sweep`], `nfsim sweep … --report sweep.html`) plots, per
//! combination of `--set` values, the pass rate of the scenario and of each expectation with
//! its 95 % interval, and the distribution across runs of each client's blackholed time and
//! lost queries.
//!
//! The report is built event by event ([`Report::push`]), so it can follow a run as it goes;
//! the same run gives the same bytes.
//!
//! ```no_run
//! use nfsim::cluster::sim::{RunOptions, Simulation};
//! use nfsim::report::Report;
//! let sc = nfsim::scenario::load_file("scenarios/stale-dns-udp.yaml").unwrap();
//! let mut report = Report::new(&sc);
//! let opts = RunOptions { record_timeline: true, conntrack_events: true, ..Default::default() };
//! let result = Simulation::new(sc, opts).unwrap().finish().unwrap();
//! for e in &result.timeline {
//!     report.push(e);
//! }
//! let html = report.finish(&result, "nfsim run scenarios/stale-dns-udp.yaml --seed 1", &[]);
//! std::fs::write("report.html", html).unwrap();
//! ```

mod adapter;
mod build;
mod ctline;
pub mod headline;
mod sweep;

pub use headline::Headline;

pub use sweep::render_sweep;

pub use build::{MAX_CLIENT_LANES, MAX_ENTRY_BARS, MAX_KP_LANES, MAX_POD_LANES};

use crate::cluster::sim::{EventSink, RunResult, TimelineEvent};
use crate::scenario::Scenario;

const TEMPLATE: &str = include_str!("template.html");
const SWEEP_TEMPLATE: &str = include_str!("sweep.html");
const CSS: &str = include_str!("report.css");
const JS: &str = include_str!("report.js");
const SWEEP_JS: &str = include_str!("sweep.js");

/// A report being built from a run's events.
pub struct Report {
    builder: build::Builder,
    name: String,
    file: String,
    description: String,
    seed: u64,
    end_ns: u64,
    headline: Headline,
}

impl Report {
    /// A report for a run of `sc` (its nodes, pods, Services and clients name the lanes).
    pub fn new(sc: &Scenario) -> Report {
        Report {
            builder: build::Builder::new(sc),
            name: sc.name.clone(),
            file: sc.file.clone(),
            description: sc.description.trim().to_string(),
            seed: sc.seed,
            end_ns: sc.duration.as_nanos(),
            headline: Headline::of(sc),
        }
    }

    /// Takes the run's next event (in timeline order).
    pub fn push(&mut self, e: &TimelineEvent) {
        self.builder.push(e);
    }

    /// The HTML page: `result` gives the verdicts and the summary, `command` is the command
    /// line that replays the run, `skipped` names the expectations `--until` left out.
    pub fn finish(self, result: &RunResult, command: &str, skipped: &[String]) -> String {
        let meta = build::Meta {
            name: self.name,
            file: self.file,
            description: self.description,
            seed: self.seed,
            command: command.to_string(),
            end_ns: self.end_ns,
            passed: result.passed(),
            headline: self.headline.text(result),
            aggregated_clients: false,
            aggregated_conntrack: false,
            events: 0,
        };
        let expectations = result
            .results
            .iter()
            .map(|r| build::ExpRow {
                name: r.name.clone(),
                line: r.line,
                at: r.at.clone(),
                passed: r.passed,
                detail: r.detail.clone(),
            })
            .collect();
        let title = format!(
            "nfsim: {} (seed {}) — {}",
            meta.name,
            meta.seed,
            if meta.passed { "PASS" } else { "FAIL" }
        );
        let data =
            self.builder
                .finish(meta, expectations, skipped.to_vec(), result.summary.clone());
        page(&title, &data, JS)
    }
}

impl EventSink for Report {
    fn event(&mut self, e: &TimelineEvent) -> std::io::Result<()> {
        self.push(e);
        Ok(())
    }
}

/// Fills the template. The data goes in a `application/json` script element; `<`, `>` and
/// `&` are written as JSON escapes so no text can end the element early.
fn page<T: serde::Serialize>(title: &str, data: &T, js: &str) -> String {
    let json = serde_json::to_string(data).unwrap_or_else(|_| unreachable!("plain data"));
    let mut safe = String::with_capacity(json.len() + 64);
    for c in json.chars() {
        match c {
            '<' => safe.push_str("\\u003c"),
            '>' => safe.push_str("\\u003e"),
            '&' => safe.push_str("\\u0026"),
            c => safe.push(c),
        }
    }
    let template = if js == SWEEP_JS {
        SWEEP_TEMPLATE
    } else {
        TEMPLATE
    };
    template
        .replace("{{TITLE}}", &html_escape(title))
        .replace("/*{{CSS}}*/", CSS)
        .replace("/*{{JS}}*/", js)
        .replace("{{DATA}}", &safe)
}

fn html_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '&' => o.push_str("&amp;"),
            '"' => o.push_str("&quot;"),
            c => o.push(c),
        }
    }
    o
}

/// The report of a finished run whose timeline was recorded.
pub fn render(sc: &Scenario, result: &RunResult, command: &str, skipped: &[String]) -> String {
    let mut r = Report::new(sc);
    for e in &result.timeline {
        r.push(e);
    }
    r.finish(result, command, skipped)
}
