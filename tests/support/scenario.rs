//! Running a scenario to its end in a test, with its timeline recorded.

#![allow(dead_code)]

use nfsim::cluster::sim::{RunOptions, RunResult, Simulation};
use nfsim::scenario::{load_str, Scenario};

/// Runs `sc` to its end with the timeline recorded, and with conntrack events in it when
/// `ct_events`.
pub fn run_scenario(sc: Scenario, ct_events: bool) -> RunResult {
    let opts = RunOptions {
        record_timeline: true,
        conntrack_events: ct_events,
        ..RunOptions::default()
    };
    Simulation::new(sc, opts).unwrap().finish().unwrap()
}

/// Loads scenario text (`file` names it in errors) and runs it as [`run_scenario`] does;
/// a load error panics with its message.
pub fn run_text(file: &str, text: &str, ct_events: bool) -> RunResult {
    let sc = load_str(file, text).unwrap_or_else(|e| panic!("{e}"));
    run_scenario(sc, ct_events)
}
