//! Foreign text in text outputs is escaped (issue 31): a reconciler's reason, a scenario's
//! description and expectation names, a rule's comment in a trace. No newline in it forges a
//! line, no escape sequence reaches the terminal; ordinary text prints as it is.

#[path = "support/tools.rs"]
mod tools;

use nfsim::testkit::{load_scenario_str, Cluster, SimTime};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const SCENARIO: &str = "scenarios/stale-dns-udp-external.yaml";

/// Whether `out` holds a raw control character (other than the newlines ending lines).
fn raw_control(out: &str) -> bool {
    out.chars()
        .any(|c| c != '\n' && sim_core::text::needs_escape(c))
}

#[test]
fn a_reconcilers_reason_cannot_forge_a_timeline_line() {
    if !tools::have_or_skip(
        "a_reconcilers_reason_cannot_forge_a_timeline_line",
        &["python3"],
    ) {
        return;
    }
    let script = std::fs::read_to_string("examples/reconciler/python/reconciler.py").unwrap();
    let honest = r#""reason": f"{ep_ip}:{ep_port} is not a serving endpoint of {svc['name']}","#;
    assert!(script.contains(honest));
    let forged = script.replace(
        honest,
        r#""reason": "x)\n00:05:00.000  expect PASS: forged (\u001b[2J\u202e","#,
    );
    let path = std::env::temp_dir().join(format!("nfsim-forging-{}.py", std::process::id()));
    std::fs::write(&path, forged).unwrap();
    let text = std::fs::read_to_string(SCENARIO).unwrap().replace(
        "command: [python3, examples/reconciler/python/reconciler.py]",
        &format!("command: [python3, {}]", path.display()),
    );
    let sc = load_scenario_str(SCENARIO, &text).unwrap();
    let mut c = Cluster::from_scenario(sc).unwrap();
    c.run_until(SimTime::MAX).unwrap();
    let timeline = c.timeline_text();
    let _ = std::fs::remove_file(&path);
    let deleted: Vec<&str> = timeline
        .lines()
        .filter(|l| l.contains("cleanup deleted"))
        .collect();
    assert!(!deleted.is_empty(), "{timeline}");
    assert!(
        deleted[0].ends_with(r"(x)\n00:05:00.000  expect PASS: forged (\x1b[2J\u{202e})"),
        "{}",
        deleted[0]
    );
    assert!(
        !timeline
            .lines()
            .any(|l| l.starts_with("00:05:00.000  expect PASS: forged")),
        "a forged line"
    );
    assert!(!raw_control(&timeline));
}

#[test]
fn a_description_and_expectation_names_cannot_forge_run_output() {
    let text = std::fs::read_to_string("tests/fixtures/scenario/minimal.yaml")
        .unwrap()
        .replace(
            "duration: 1m\n",
            "duration: 1m\ndescription: \"one\\ntwo \\e[31mred\\u202e\"\n",
        );
    let path = std::env::temp_dir().join(format!("nfsim-describe-{}.yaml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nfsim"))
        .args(["run", path.to_str().unwrap()])
        .current_dir(ROOT)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{stdout}");
    // Each line of the description indented; controls escaped.
    assert!(
        stdout.starts_with("scenario t (seed 1)\n  one\n  two \\x1b[31mred\\u{202e}\n\n"),
        "{stdout}"
    );
    assert!(!raw_control(&stdout));
}

#[test]
fn a_rule_comment_cannot_forge_a_trace_line() {
    let rules = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A FORWARD -p udp -m comment --comment \"a\u{1b}[2J\u{85}b\" -j ACCEPT\nCOMMIT\n";
    let path = std::env::temp_dir().join(format!("nfsim-comment-{}.rules", std::process::id()));
    std::fs::write(&path, rules).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nfsim"))
        .args([
            "trace",
            "--rules",
            path.to_str().unwrap(),
            "--packet",
            "udp 10.0.0.1:1000 -> 10.0.0.2:53",
        ])
        .current_dir(ROOT)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains(r#"--comment "a\x1b[2J\u{85}b""#),
        "{stdout}"
    );
    assert!(!raw_control(&stdout), "{stdout}");
}
