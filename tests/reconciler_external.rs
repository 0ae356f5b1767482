//! External reconcilers: processes speaking docs/reconciler-protocol.md. The shipped Python
//! and Go examples fix the incident; a misbehaving process is a located error, never a hang
//! or a panic.

#[path = "support/tools.rs"]
mod tools;

use nfsim::testkit::{load_scenario_str, Cluster, SimTime, TestkitError};

const SCENARIO: &str = "scenarios/stale-dns-udp-external.yaml";
const PYTHON_CMD: &str = "command: [python3, examples/reconciler/python/reconciler.py]";

/// The external scenario with its cleanup command line replaced (and `timeout`).
fn with_command(command: &str, timeout: &str) -> String {
    let text = std::fs::read_to_string(SCENARIO).unwrap();
    assert!(text.contains(PYTHON_CMD));
    text.replace(PYTHON_CMD, command)
        .replace("timeout: 10s\n", &format!("timeout: {timeout}\n"))
}

fn run_text(text: &str) -> Result<nfsim::testkit::RunResult, TestkitError> {
    let sc = load_scenario_str(SCENARIO, text)?;
    let mut c = Cluster::from_scenario(sc)?;
    c.run_until(SimTime::MAX)?;
    c.finish()
}

#[test]
fn the_python_reconciler_fixes_the_incident() {
    if !tools::have_or_skip("the_python_reconciler_fixes_the_incident", &["python3"]) {
        return;
    }
    let text = std::fs::read_to_string(SCENARIO).unwrap();
    let r = run_text(&text).unwrap();
    for e in &r.results {
        assert!(e.passed, "{}: {}", e.name, e.detail);
    }
    let lines: Vec<String> = r.timeline.iter().map(|e| e.line()).collect();
    let all = lines.join("\n");
    assert!(
        all.contains("reconciler node-2: list -p udp --orig-dst 10.96.0.10 --orig-port-dst 53"),
        "{all}"
    );
    assert!(
        all.contains("reconciler node-2: delete -p udp --orig-dst 10.96.0.10 --orig-port-dst 53 --reply-src 10.244.1.5 --reply-port-src 53 → 1 deleted"),
        "{all}"
    );
    assert!(all.contains("cleanup deleted udp"), "{all}");
    // Deterministic: the same run again, byte for byte.
    let again = run_text(&text).unwrap();
    let again: Vec<String> = again.timeline.iter().map(|e| e.line()).collect();
    assert_eq!(again, lines);
}

#[test]
fn the_go_reconciler_fixes_the_incident() {
    if !tools::have_or_skip("the_go_reconciler_fixes_the_incident", &["go", "python3"]) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("nfsim-go-reconciler-{}", std::process::id()));
    let bin = dir.join("reconciler");
    let out = std::process::Command::new("go")
        .args(["build", "-o"])
        .arg(&bin)
        .arg(".")
        .current_dir("examples/reconciler/go")
        .env("GOFLAGS", "-mod=mod")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "go build: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = with_command(&format!("command: [{}]", bin.display()), "10s");
    let r = run_text(&text).unwrap();
    for e in &r.results {
        assert!(e.passed, "{}: {}", e.name, e.detail);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn failure(command: &str, timeout: &str) -> String {
    match run_text(&with_command(command, timeout)) {
        Err(TestkitError::Sim(nfsim::cluster::sim::SimError::Reconciler(m))) => m,
        other => panic!("expected a reconciler error, got {other:?}"),
    }
}

#[test]
fn a_misbehaving_reconciler_is_a_located_error() {
    if !tools::have_or_skip("a_misbehaving_reconciler_is_a_located_error", &["sh"]) {
        return;
    }
    let crash = failure("command: [sh, -c, 'echo dying >&2; exit 3']", "10s");
    assert!(
        crash.starts_with(
            "reconciler `sh -c echo dying >&2; exit 3` on node node-1 at 00:00:00.000 (sync 1):"
        ),
        "{crash}"
    );
    assert!(
        crash.contains("exit status: 3") && crash.contains("dying"),
        "{crash}"
    );

    let garbage = failure("command: [sh, -c, 'read l; echo hello']", "10s");
    assert!(
        garbage.contains("line 1 of its output \"hello\\n\": not JSON"),
        "{garbage}"
    );

    let unknown = failure(
        r#"command: [sh, -c, 'read l; echo "{\"type\":\"flush\"}"']"#,
        "10s",
    );
    assert!(unknown.contains("unknown type \"flush\""), "{unknown}");

    let bad_filter = failure(
        r#"command: [sh, -c, 'read l; echo "{\"type\":\"delete\",\"filter\":\"-p udp --bogus 1\"}"']"#,
        "10s",
    );
    assert!(
        bad_filter.contains("unknown or unsupported option \"--bogus\""),
        "{bad_filter}"
    );

    let slow = failure("command: [sh, -c, 'read l; sleep 30']", "300ms");
    assert!(slow.contains("no answer within 0.3 s"), "{slow}");

    let missing = failure("command: [/nonexistent/reconciler]", "10s");
    assert!(missing.contains("cannot start it"), "{missing}");
}

#[test]
fn an_empty_command_is_a_load_error_with_its_line() {
    let e = load_scenario_str(SCENARIO, &with_command("command: []", "10s"))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("cleanup.command is empty"), "{e}");
    assert!(e.starts_with(&format!("{SCENARIO}:")), "{e}");
}

/// A process that writes a 10 MiB line, or one whose filter is 3,000 options long: nfsim
/// reads at most MAX_LINE_BYTES of it and the error quotes a bounded excerpt once (before,
/// the line was read whole — a 100 MiB line cost 1.85 GB — and quoted up to three times).
#[test]
fn a_huge_line_from_the_reconciler_is_refused_after_a_bounded_read() {
    if !tools::have_or_skip(
        "a_huge_line_from_the_reconciler_is_refused_after_a_bounded_read",
        &["sh", "head", "tr"],
    ) {
        return;
    }
    let huge = failure(
        "command: [sh, -c, 'read l; head -c 10485760 /dev/zero | tr \"\\0\" x; echo']",
        "10s",
    );
    assert!(huge.len() < 1000, "{} bytes: {}", huge.len(), &huge[..1000]);
    assert!(
        huge.contains("line 1 of its output \"xxxx") && huge.contains("longer than 4096 bytes"),
        "{huge}"
    );
    assert_eq!(huge.matches("\"xxx").count(), 1, "quoted once: {huge}");

    // Under the limit but long: a filter of many unknown options, quoted once, cut.
    let long = failure(
        r#"command: [sh, -c, 'read l; printf "{\"type\":\"list\",\"filter\":\"--bogus%01000d\"}\n" 0']"#,
        "10s",
    );
    assert!(long.len() < 1000, "{long}");
    // The command (in the message head), the line excerpt and the option: once each.
    assert_eq!(long.matches("--bogus").count(), 3, "{long}");
    assert!(long.contains("…"), "{long}");
}
