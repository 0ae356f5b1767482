//! Where the output goes: a reader that closes the pipe early ends the program quietly with
//! exit 0 (as ripgrep does); a write error (`/dev/full`) is exit 2 with exactly one message;
//! the timeline is written while the run goes on, not kept until the end.

use std::io::Read;
use std::process::{Command, Stdio};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn cmd(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nfsim"));
    c.args(args).current_dir(ROOT);
    c
}

/// Runs with stdout on a pipe whose reading end is closed at once, as `| head -0` would.
/// The outputs used are larger than a pipe's buffer (64 KiB), so the program does meet the
/// closed pipe.
fn closed_pipe(args: &[&str]) -> (i32, String) {
    let mut child = cmd(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    (status.code().unwrap_or(-1), err)
}

/// Runs with stdout on `/dev/full` (every write fails with ENOSPC); `None` where there is none.
fn full_disk(args: &[&str]) -> Option<(i32, String)> {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .ok()?;
    let out = cmd(args).stdout(full).output().unwrap();
    Some((
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stderr).unwrap(),
    ))
}

/// A rules file whose normalised form is far larger than a pipe's buffer, named for the test
/// that writes it: tests run in parallel threads of one process, and one's cleanup must not
/// remove the file another is reading.
fn big_rules(test: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("nfsim-big-{}-{test}.rules", std::process::id()));
    let mut s =
        String::from("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n");
    for i in 0..3000 {
        s.push_str(&format!(
            "-A INPUT -s 10.{}.{}.0/24 -p tcp -m tcp --dport {} -j ACCEPT\n",
            i / 256,
            i % 256,
            1000 + i
        ));
    }
    s.push_str("COMMIT\n");
    std::fs::write(&path, s).unwrap();
    path
}

const BIG_RUN: &str = "scenarios/stale-dns-udp-per-query-port.yaml";

#[test]
fn a_closed_pipe_ends_run_quietly() {
    let (code, err) = closed_pipe(&["run", BIG_RUN]);
    assert_eq!((code, err.as_str()), (0, ""));
    let (code, err) = closed_pipe(&["run", BIG_RUN, "--no-conntrack-events"]);
    assert_eq!((code, err.as_str()), (0, ""));
}

#[test]
fn a_closed_pipe_ends_rules_normalize_and_trace_quietly() {
    let big = big_rules("closed_pipe");
    let (code, err) = closed_pipe(&["rules", "normalize", big.to_str().unwrap()]);
    assert_eq!((code, err.as_str()), (0, ""));
    let (code, err) = closed_pipe(&[
        "trace",
        "--rules",
        "tests/fixtures/cli/kube-proxy.rules",
        "--node-addr",
        "172.18.0.2",
        "--pod-cidr",
        "10.244.0.0/16",
        "--packet",
        "udp 10.244.1.9:40000 -> 10.96.0.10:53",
        "--all-branches",
        "--json",
    ]);
    assert_eq!((code, err.as_str()), (0, ""));
    let _ = std::fs::remove_file(big);
}

fn assert_one_error(got: Option<(i32, String)>, what: &str) {
    let Some((code, err)) = got else {
        println!("skipped: no /dev/full");
        return;
    };
    assert_eq!(code, 2, "{what}: {err}");
    assert_eq!(err.lines().count(), 1, "{what}: exactly one message: {err}");
    assert!(
        err.starts_with("error: writing stdout: ") && err.contains("No space left"),
        "{what}: {err}"
    );
}

#[test]
fn a_full_disk_is_exit_2_with_one_message() {
    assert_one_error(full_disk(&["run", BIG_RUN]), "run");
    assert_one_error(
        full_disk(&[
            "run",
            "scenarios/stale-dns-udp.yaml",
            "--dump-conntrack",
            "1m",
        ]),
        "run --dump-conntrack",
    );
    let big = big_rules("full_disk");
    assert_one_error(
        full_disk(&["rules", "normalize", big.to_str().unwrap()]),
        "rules normalize",
    );
    let _ = std::fs::remove_file(big);
    assert_one_error(
        full_disk(&[
            "trace",
            "--rules",
            "tests/fixtures/cli/kube-proxy.rules",
            "--packet",
            "udp 10.244.1.9:40000 -> 10.96.0.10:53",
        ]),
        "trace",
    );
    assert_one_error(
        full_disk(&[
            "conntrack",
            "scenarios/stale-dns-udp.yaml",
            "--node",
            "node-1",
            "--at",
            "1m",
        ]),
        "conntrack",
    );
}

#[test]
fn a_full_json_file_is_exit_2_naming_it() {
    if !std::path::Path::new("/dev/full").exists() {
        println!("skipped: a_full_json_file_is_exit_2_naming_it: no /dev/full");
        return;
    }
    let out = cmd(&["run", "scenarios/stale-dns-udp.yaml", "--json", "/dev/full"])
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: writing /dev/full: "), "{err}");
}

/// `sweep` prints its table on stderr: a full stderr is exit 2 (the message cannot be
/// written either), not a panic (exit 101, as `eprint!` gave); a closed one ends quietly.
#[test]
fn sweep_table_on_a_full_or_closed_stderr_is_not_a_panic() {
    let args = ["sweep", "scenarios/stale-dns-udp.yaml", "--seeds", "1..3"];
    if let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") {
        let out = cmd(&args)
            .stdout(Stdio::null())
            .stderr(full)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
    } else {
        println!("skipped: sweep_table_on_a_full_stderr: no /dev/full");
    }
    let mut child = cmd(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

/// The timeline reaches the sinks while the run goes on: after `run_until(1m)` a sink holds
/// every event up to 1m and none after; nothing is kept in the result unless asked.
#[test]
fn the_timeline_is_handed_to_sinks_as_it_happens() {
    use nfsim::cluster::sim::{Collect, RunOptions, Simulation};
    use sim_core::{SimDuration, SimTime};
    use std::cell::RefCell;
    use std::rc::Rc;
    let sc = nfsim::scenario::load_file(&format!("{ROOT}/scenarios/stale-dns-udp.yaml")).unwrap();
    let seen = Rc::new(RefCell::new(Collect::default()));
    let opts = RunOptions {
        conntrack_events: true,
        ..RunOptions::default()
    };
    let mut sim = Simulation::builder(sc)
        .options(opts)
        .sink(Box::new(seen.clone()))
        .build()
        .unwrap();
    let minute = SimTime::ZERO + SimDuration::from_secs(60);
    sim.run_until(minute).unwrap();
    let early = seen.borrow().events.len();
    assert!(early > 0);
    assert!(seen
        .borrow()
        .events
        .iter()
        .all(|e| e.t_ns <= minute.as_nanos()));
    let r = sim.finish().unwrap();
    assert!(r.timeline.is_empty(), "not kept unless record_timeline");
    let all = seen.borrow().events.len();
    assert!(all > early);
    assert!(seen
        .borrow()
        .events
        .windows(2)
        .all(|w| w[0].t_ns <= w[1].t_ns));
}

/// `sweep` into a closed pipe ends quietly too (before: exit 2, "writing the output: Broken
/// pipe", the io error hidden from the closed-pipe check). Eighty runs' lines (about 17 KB)
/// are well over the 8 KiB output buffer, so the program meets the closed pipe mid-sweep.
#[test]
fn a_closed_pipe_ends_sweep_quietly() {
    let (code, err) = closed_pipe(&[
        "sweep",
        "scenarios/stale-dns-udp.yaml",
        "--seeds",
        "1..80",
        "-q",
    ]);
    assert_eq!((code, err.as_str()), (0, ""));
}
