// Skipped real-tool comparisons, said aloud and counted. (Plain comments, no inner
// attributes: the summary doctest in sim-netfilter/src/lib.rs `include!`s this file.)
//
// libtest captures what a passing test prints, so a comparison that skipped for want of a
// tool looked like one that passed unless run with `--nocapture`. [`report`] still prints the
// `skipped: <test>: <reason>` line (captured: shown with `--nocapture` or when the test fails;
// written past the capture it would land inside libtest's `test X ... ok` lines of other
// tests), and records the skip for the one-line summary that ends
// `cargo test --workspace` ([`summary`]); [`ran`] records a comparison that did run, so the
// line can also say that none skipped. The line is printed by the last doctest of the run
// ([`print_summary_last`], from `skipped_comparisons` in `sim-netfilter/src/lib.rs`): cargo runs
// every test binary, then the doctests, package by package in name order, so sim-netfilter's
// doctests come last of all.
//
// A record belongs to one `cargo test` run: it is a line in
// `$TMPDIR/nfsim-skipped/<pid>-<start>` where `<pid>` and `<start>` (its start time in clock
// ticks since boot, `/proc/PID/stat` field 22) name the nearest `cargo` process above the
// test, which is the same for every test binary and doctest of a run and never the same for
// two runs. So a record left by an earlier run (interrupted, or run for one test binary only,
// which never reaches the summary) cannot leak into a later run's line; the summary deletes
// its own run's file and those of runs whose cargo has gone. A test binary started by hand,
// not under cargo, records nothing.

use std::io::Write;
use std::path::PathBuf;

/// `/proc/PID/stat`'s fields after the command name (which may hold spaces and parentheses):
/// `[0]` is the state (field 3), `[1]` the parent's pid (field 4), `[19]` the start time
/// (field 22).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    Some(after.split_whitespace().map(str::to_string).collect())
}

/// The nearest `cargo` process above this one, as `<pid>-<start time>`: the id of this
/// `cargo test` run. `None` when no ancestor is cargo (a test binary run by hand).
pub fn run_id() -> Option<String> {
    let mut pid = std::process::id();
    for _ in 0..16 {
        let parent: u32 = stat_fields(pid)?.get(1)?.parse().ok()?;
        if parent <= 1 {
            return None;
        }
        let comm = std::fs::read_to_string(format!("/proc/{parent}/comm")).ok()?;
        if comm.trim_end() == "cargo" {
            let start = stat_fields(parent)?.get(19)?.clone();
            return Some(format!("{parent}-{start}"));
        }
        pid = parent;
    }
    None
}

/// Where the runs' records are kept.
pub fn records_dir() -> PathBuf {
    std::env::temp_dir().join("nfsim-skipped")
}

/// The test binary's name without cargo's hash (`kernel_diff` for `kernel_diff-0123abcd`).
fn binary_name() -> String {
    let exe = std::env::current_exe().ok();
    let stem = exe
        .as_deref()
        .and_then(|p| p.file_stem())
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_string(),
        _ => stem,
    }
}

/// Says that `test` skipped because of `reason`: `skipped: <test>: <reason>` on stderr, and a
/// record for this run's summary line.
pub fn report(test: &str, reason: &str) {
    eprintln!("skipped: {test}: {reason}");
    record(test, reason);
}

/// Records that `test` found every tool it needs and ran its comparison.
pub fn ran(test: &str) {
    record(test, "");
}

/// Appends `<binary>::<test>\t<reason>` (an empty reason: it ran) to this run's records.
fn record(test: &str, reason: &str) {
    let Some(run) = run_id() else { return };
    let dir = records_dir();
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    // One short append per test: lines written with O_APPEND by concurrent tests do not
    // interleave.
    let record = format!("{}::{test}\t{reason}\n", binary_name());
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(run))
    {
        let _ = f.write_all(record.as_bytes());
    }
}

/// Whether the cargo run `<pid>-<start>` is still going.
pub fn run_alive(id: &str) -> bool {
    let Some((pid, start)) = id.split_once('-') else {
        return false;
    };
    let Ok(pid) = pid.parse::<u32>() else {
        return false;
    };
    stat_fields(pid).and_then(|f| f.get(19).cloned()).as_deref() == Some(start)
}

/// The summary line of this run's real-tool comparisons: `real-tool comparisons: all N ran`,
/// or `… N ran, M skipped (…): <reason>: <tests>; …`; `None` when none was reached (or outside
/// cargo). This run's records, and those of runs that have ended, are deleted.
pub fn summary() -> Option<String> {
    let run = run_id()?;
    let dir = records_dir();
    let text = std::fs::read_to_string(dir.join(&run)).unwrap_or_default();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name == run || !run_alive(&name) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    summary_of(&text)
}

/// The summary line of a run's records (see [`summary`]).
pub fn summary_of(records: &str) -> Option<String> {
    let mut all: Vec<(&str, &str)> = records.lines().filter_map(|l| l.split_once('\t')).collect();
    all.sort();
    all.dedup();
    if all.is_empty() {
        return None;
    }
    // A test that skipped once (one of its cases) counts as skipped.
    let skipped: Vec<(&str, &str)> = all.iter().copied().filter(|(_, r)| !r.is_empty()).collect();
    let mut tests: Vec<&str> = all.iter().map(|(t, _)| *t).collect();
    tests.dedup();
    let mut skipped_tests: Vec<&str> = skipped.iter().map(|(t, _)| *t).collect();
    skipped_tests.dedup();
    let ran = tests.len() - skipped_tests.len();
    if skipped.is_empty() {
        return Some(format!(
            "real-tool comparisons: all {ran} ran, none skipped"
        ));
    }
    // Grouped by reason: `conntrack missing: kernel_diff::a, kernel_diff::b; tshark missing: …`.
    let mut reasons: Vec<&str> = skipped.iter().map(|(_, r)| *r).collect();
    reasons.sort();
    reasons.dedup();
    let groups: Vec<String> = reasons
        .iter()
        .map(|r| {
            let names: Vec<&str> = skipped
                .iter()
                .filter(|(_, why)| why == r)
                .map(|(t, _)| *t)
                .collect();
            format!("{r}: {}", names.join(", "))
        })
        .collect();
    Some(format!(
        "real-tool comparisons: {ran} ran, {} skipped (NFSIM_REQUIRE_KERNEL_LAB=1 makes a skip fail): {}",
        skipped_tests.len(),
        groups.join("; ")
    ))
}

/// The pids of the other children of process `parent` (all its threads' children).
fn other_children(parent: u32) -> Option<Vec<u32>> {
    let me = std::process::id();
    let mut pids = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{parent}/task"))
        .ok()?
        .flatten()
    {
        let children = std::fs::read_to_string(task.path().join("children")).ok()?;
        pids.extend(
            children
                .split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok())
                .filter(|&p| p != me),
        );
    }
    Some(pids)
}

/// Whether the file description behind `/proc/PID/fd/FD` was opened with `O_APPEND`
/// (`/proc/PID/fdinfo/FD`'s `flags:`, octal).
fn opened_for_append(pid: u32, fd: u32) -> bool {
    const O_APPEND: u32 = 0o2000;
    std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}"))
        .ok()
        .and_then(|info| {
            let flags = info.lines().find_map(|l| l.strip_prefix("flags:"))?;
            u32::from_str_radix(flags.trim(), 8).ok()
        })
        .is_some_and(|flags| flags & O_APPEND != 0)
}

/// For the doctest that runs last: prints [`summary`]'s line where the person running
/// `cargo test` sees it. rustdoc keeps a passing doctest's own output, so the line goes to
/// rustdoc's stderr, which is cargo's: opened anew as `/proc/PPID/fd/2` for appending, after
/// waiting (at most a minute) until the doctests running beside it have finished, so that only
/// rustdoc's last lines follow it. A terminal or a pipe (CI) takes the line at once. A log file
/// that cargo's output truncated into (`> log`, not `>> log`) would have the line overwritten
/// by rustdoc's next writes, which go at rustdoc's own offset; there the line is appended by a
/// `sh` that waits for cargo to exit.
pub fn print_summary_last() {
    let Some(line) = summary() else { return };
    let Some(parent) = stat_fields(std::process::id()).and_then(|f| f.get(1)?.parse::<u32>().ok())
    else {
        return;
    };
    for _ in 0..1200 {
        match other_children(parent) {
            Some(others) if !others.is_empty() => {
                std::thread::sleep(std::time::Duration::from_millis(50))
            }
            _ => break,
        }
    }
    let stderr = format!("/proc/{parent}/fd/2");
    let file = std::fs::metadata(&stderr).is_ok_and(|m| m.is_file());
    if file && !opened_for_append(parent, 2) {
        let (Ok(path), Some(run)) = (std::fs::read_link(&stderr), run_id()) else {
            return;
        };
        let cargo = run.split('-').next().unwrap_or_default().to_string();
        let _ = std::process::Command::new("sh")
            .arg("-c")
            .arg(r#"while kill -0 "$3" 2>/dev/null; do sleep 0.05; done; printf '%s\n' "$1" >> "$2""#)
            .args(["sh", &line])
            .arg(path)
            .arg(cargo)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        return;
    }
    match std::fs::OpenOptions::new().append(true).open(&stderr) {
        Ok(mut f) => {
            let _ = writeln!(f, "{line}");
        }
        Err(_) => eprintln!("{line}"),
    }
}
