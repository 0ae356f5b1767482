//! The `nfsim` binary: golden output of the incident, byte-identical reruns, exit codes and
//! the replay command on failure. Bless the golden file with `NFSIM_BLESS=1 cargo test`.

use sha2::{Digest, Sha256};

#[path = "support/cli.rs"]
mod cli;
use cli::{nfsim, ROOT};

#[test]
fn incident_output_matches_the_golden_file() {
    let (code, out, _) = nfsim(&["run", "scenarios/stale-dns-udp.yaml"]);
    assert_eq!(code, 0, "{out}");
    let golden = format!("{ROOT}/tests/golden/stale-dns-udp.out");
    if std::env::var_os("NFSIM_BLESS").is_some() {
        std::fs::write(&golden, &out).unwrap();
    }
    let want = std::fs::read_to_string(&golden).expect("golden file (bless with NFSIM_BLESS=1)");
    assert!(
        out == want,
        "output differs from {golden}; rerun with NFSIM_BLESS=1 if intended"
    );
}

#[test]
fn two_runs_are_byte_identical() {
    let h = |s: &str| Sha256::digest(s.as_bytes());
    let dir = std::env::temp_dir();
    let (j1, j2) = (
        dir.join("nfsim-cli-run-1.jsonl"),
        dir.join("nfsim-cli-run-2.jsonl"),
    );
    let a = nfsim(&[
        "run",
        "scenarios/stale-dns-udp-per-query-port.yaml",
        "--json",
        j1.to_str().unwrap(),
    ]);
    let b = nfsim(&[
        "run",
        "scenarios/stale-dns-udp-per-query-port.yaml",
        "--json",
        j2.to_str().unwrap(),
    ]);
    assert_eq!(h(&a.1), h(&b.1));
    let (ja, jb) = (
        std::fs::read_to_string(j1).unwrap(),
        std::fs::read_to_string(j2).unwrap(),
    );
    assert_eq!(h(&ja), h(&jb));
    // JSON lines carry stable field names: a versioned start line, then timed events.
    let first: serde_json::Value = serde_json::from_str(ja.lines().next().unwrap()).unwrap();
    assert_eq!(first["kind"], "start", "{first}");
    assert_eq!(first["version"], 1, "{first}");
    let second: serde_json::Value = serde_json::from_str(ja.lines().nth(1).unwrap()).unwrap();
    assert!(
        second.get("kind").is_some() && second.get("t_ns").is_some(),
        "{second}"
    );
    let last: serde_json::Value = serde_json::from_str(ja.lines().last().unwrap()).unwrap();
    assert_eq!(last["kind"], "run");
    assert_eq!(last["passed"], true);
}

#[test]
fn a_failing_run_exits_1_and_prints_the_replay_command() {
    let (code, out, _) = nfsim(&["run", "scenarios/stale-dns-udp.yaml", "--seed", "7"]);
    // Another seed may send the first query to the other pod; either way the run must say
    // how to replay it when it fails.
    if code == 1 {
        assert!(out.contains("FAIL "), "{out}");
        assert!(
            out.ends_with("replay: nfsim run scenarios/stale-dns-udp.yaml --seed 7\n"),
            "{out}"
        );
    } else {
        assert_eq!(code, 0);
    }
    let (code, out, _) = nfsim(&["run", "scenarios/stale-dns-udp-v1.32.yaml", "--until", "4m"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("SKIP "),
        "expectations after --until are skipped: {out}"
    );
}

#[test]
fn bad_file_exits_2_with_file_line_column() {
    let dir = std::env::temp_dir().join("nfsim-cli-bad.yaml");
    std::fs::write(&dir, "name: x\nduration: 1h\nnodes:\n  - name: a\n    address: 1.2.3.4\n    podCIDR: 10.0.0.0/33\n").unwrap();
    let (code, _, err) = nfsim(&["run", dir.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("nfsim-cli-bad.yaml:6:14:"), "{err}");
}

#[test]
fn conntrack_and_rules_at_an_instant() {
    let (code, out, err) = nfsim(&[
        "conntrack",
        "scenarios/stale-dns-udp.yaml",
        "--node",
        "node-2",
        "--at",
        "30m",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("sport=40000 dport=53 src=10.244.1.5"), "{out}");
    assert!(out.contains("[ASSURED]"), "{out}");
    assert!(err.contains("1 flow entries have been shown."), "{err}");
    let (code, out, err) = nfsim(&[
        "rules",
        "scenarios/stale-dns-udp.yaml",
        "--node",
        "node-1",
        "--at",
        "1m",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("KUBE-SVC-TCOU7JCQXEZGVUNU"), "{out}");
}
