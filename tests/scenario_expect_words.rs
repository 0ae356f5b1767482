//! The expectation kinds on conntrack's own counters and events (`conntrackStats`,
//! `conntrackEvent`): what they check, what a failing one says it saw, and their load errors.

use nfsim::cluster::sim::{RunOptions, RunResult, Simulation};
use nfsim::scenario::{load_file, load_str, Scenario};

fn shipped(name: &str) -> String {
    std::fs::read_to_string(format!("{}/scenarios/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn run(sc: Scenario) -> RunResult {
    let o = RunOptions {
        record_timeline: false,
        conntrack_events: false,
        progress: None,
    };
    Simulation::new(sc, o).unwrap().finish().unwrap()
}

fn verdict<'a>(r: &'a RunResult, name: &str) -> &'a nfsim::cluster::sim::ExpectResult {
    r.results
        .iter()
        .find(|x| x.name == name)
        .unwrap_or_else(|| panic!("no expectation {name:?}: {:?}", r.results))
}

/// The latest release's cleanup deletes the stale entry at 5m2.1s: the event check passes
/// about then and fails (naming the time it saw) a second later.
#[test]
fn a_destroy_by_the_cleanup_is_found_about_when_it_happened() {
    let base = shipped("stale-dns-udp-latest.yaml");
    let sc = load_file(&format!(
        "{}/scenarios/stale-dns-udp-latest.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let r = run(sc);
    let ok = verdict(
        &r,
        "the first sync after the endpoint change (at 5m2.1s) deleted the stale entry",
    );
    assert!(ok.passed, "{}", ok.detail);
    assert_eq!(ok.detail, "events=1");

    let late = base.replace("about: 5m2.1s", "about: 5m3.2s");
    let r = run(load_str("late.yaml", &late).unwrap());
    let bad = verdict(
        &r,
        "the first sync after the endpoint change (at 5m2.1s) deleted the stale entry",
    );
    assert!(!bad.passed);
    assert_eq!(
        bad.detail,
        "events 0, expected 1; 1 of that kind on matching entries in the run, at 00:05:02.100 (userspace)"
    );
    // A cause other than the one that happened finds nothing in the window either.
    let timeout = base.replace("cause: userspace", "cause: timeout");
    let r = run(load_str("cause.yaml", &timeout).unwrap());
    assert!(
        !verdict(
            &r,
            "the first sync after the endpoint change (at 5m2.1s) deleted the stale entry"
        )
        .passed
    );
}

/// The full table: evictions before 1m, drops after; a wrong bound says the value seen.
#[test]
fn conntrack_stats_counters_are_checked_as_conntrack_s_prints_them() {
    let base = shipped("conntrack-table-full.yaml");
    let r = run(load_str("full.yaml", &base).unwrap());
    let v = verdict(
        &r,
        "while only DNS runs, evictions make the room and no packet is dropped for want of an entry",
    );
    assert!(v.passed, "{}", v.detail);
    assert_eq!(v.detail, "insert_failed=0, drop=0, early_drop=216");
    let wrong = base.replace("drop: \">= 300\"", "drop: 0");
    let r = run(load_str("full.yaml", &wrong).unwrap());
    let v = verdict(
        &r,
        "once assured entries fill the table, new connections' packets are dropped (table full)",
    );
    assert!(!v.passed);
    assert_eq!(v.detail, "drop 676, expected 0");
}

const BASE: &str = "
name: t
duration: 1m
nodes:
  - {name: node-1, address: 192.168.0.11, podCIDR: 10.244.1.0/24}
expectations:
";

fn load_err(expect: &str) -> String {
    load_str("t.yaml", &format!("{BASE}{expect}"))
        .map(|_| String::new())
        .unwrap_or_else(|e| e.to_string())
}

#[test]
fn bad_conntrack_expectations_are_located_errors() {
    let e = load_err("  - conntrackEvent: {node: node-1, event: GONE}\n");
    assert!(
        e.contains("t.yaml:7:")
            && e.contains("unknown conntrack event \"GONE\": expected NEW, UPDATE or DESTROY"),
        "{e}"
    );
    let e = load_err("  - conntrackEvent: {node: node-1, event: NEW, cause: timeout}\n");
    assert!(e.contains("`cause` is only for DESTROY events"), "{e}");
    let e = load_err("  - conntrackEvent: {node: node-1, event: DESTROY, about: 10s, from: 5s}\n");
    assert!(e.contains("give `about`"), "{e}");
    let e =
        load_err("  - at: 5s\n    conntrackEvent: {node: node-1, event: DESTROY, about: 10s}\n");
    assert!(
        e.contains("checked at 00:00:05.000 but its window ends at 00:00:11.000"),
        "{e}"
    );
    let e = load_err("  - conntrackStats: {node: node-1}\n");
    assert!(e.contains("needs at least one counter"), "{e}");
    let e = load_err("  - conntrackStats: {node: node-1, dropped: 1}\n");
    assert!(e.contains("unknown field `dropped`"), "{e}");
    let e = load_err("  - conntrackStats: {node: node-9, drop: 0}\n");
    assert!(e.contains("unknown node \"node-9\""), "{e}");
}

#[test]
fn a_counter_nfsim_never_increments_loads_with_a_warning() {
    let sc = load_str(
        "t.yaml",
        &format!("{BASE}  - conntrackStats: {{node: node-1, clash_resolve: 0, drop: 0}}\n"),
    )
    .unwrap();
    assert_eq!(sc.warnings.len(), 1, "{:?}", sc.warnings);
    let w = sc.warnings[0].to_string();
    assert!(
        w.starts_with("t.yaml:7:") && w.contains("conntrackStats.clash_resolve"),
        "{w}"
    );
}

/// The incident's headline says what happened in the run, in the report's data too.
#[test]
fn the_report_and_the_text_carry_the_runs_headline() {
    let sc = load_file(&format!(
        "{}/scenarios/stale-dns-udp.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let h = nfsim::report::Headline::of(&sc);
    let o = RunOptions {
        record_timeline: true,
        conntrack_events: true,
        progress: None,
    };
    let r = Simulation::new(sc.clone(), o).unwrap().finish().unwrap();
    let want = "the incident reproduced: sidecar lost 110 of 110 queries sent after 00:05:00.000 (oomKill kube-system/coredns-a), 0 of 10 before, blackholed 55m";
    assert_eq!(h.text(&r), want);
    let html = nfsim::report::render(&sc, &r, "nfsim run x", &[]);
    assert!(
        html.contains(&format!("\"headline\":\"{want}\"")),
        "headline not in the report data"
    );
}
