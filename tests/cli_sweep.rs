//! `nfsim sweep`: the same bytes whatever --jobs, shards merged back into the whole sweep,
//! the incident's probability measured, and located errors for bad --set paths.

#[path = "support/cli.rs"]
mod cli;
use cli::nfsim;

const FILE: &str = "scenarios/stale-dns-udp.yaml";

fn sweep(extra: &[&str]) -> String {
    let mut args = vec![
        "sweep",
        FILE,
        "--seeds",
        "1..24",
        "--set",
        "kubeProxy.release=v1.31.0,v1.33",
        "-q",
    ];
    args.extend_from_slice(extra);
    let (code, out, err) = nfsim(&args);
    assert_eq!(code, 0, "{err}");
    out
}

fn aggregate(out: &str) -> serde_json::Value {
    serde_json::from_str(out.lines().last().unwrap()).unwrap()
}

#[test]
fn output_is_the_same_bytes_whatever_the_number_of_threads() {
    let one = sweep(&["--jobs", "1"]);
    let three = sweep(&["--jobs", "3"]);
    assert_eq!(one, three);
    // A header, 2 combinations × 24 seeds, the aggregate; runs in order.
    let lines: Vec<&str> = one.lines().collect();
    assert_eq!(lines.len(), 1 + 48 + 1);
    for (i, l) in lines[1..49].iter().enumerate() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["run"], i as u64);
        assert_eq!(v["seed"], 1 + (i as u64 % 24));
        let release = if i < 24 { "v1.31.0" } else { "v1.33" };
        assert_eq!(v["set"]["kubeProxy.release"], release);
    }
}

#[test]
fn shards_merge_into_the_whole_sweep_and_missing_or_doubled_runs_are_refused() {
    let whole = sweep(&[]);
    let dir = std::env::temp_dir().join(format!("nfsim-sweep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = Vec::new();
    for i in 0..3 {
        let shard = format!("{i}/3");
        let out = sweep(&["--shard", &shard]);
        assert!(out
            .lines()
            .next()
            .unwrap()
            .contains(&format!("\"shard\":\"{i}/3\"")));
        let f = dir.join(format!("shard-{i}.jsonl"));
        std::fs::write(&f, out).unwrap();
        files.push(f.to_string_lossy().into_owned());
    }
    let mut args = vec!["sweep", "merge", "-q"];
    args.extend(files.iter().map(String::as_str));
    let (code, merged, err) = nfsim(&args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(merged, whole);

    let (code, _, err) = nfsim(&["sweep", "merge", &files[0], &files[2]]);
    assert_eq!(code, 2);
    assert!(
        err.contains("shard-2.jsonl: 16 of 48 runs missing: runs 16..=23 (combination 0, seeds 17..=24), runs 24..=31 (combination 1, seeds 1..=8); shard 1/3 not among the files"),
        "{err}"
    );
    let (code, _, err) = nfsim(&["sweep", "merge", &files[0], &files[1], &files[1], &files[2]]);
    assert_eq!(code, 2);
    assert!(err.contains("run 16 again"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_incident_is_a_coin_flip_before_the_fix_and_gone_after_it() {
    let a = aggregate(&sweep(&[]));
    let combos = a["combos"].as_array().unwrap();
    // v1.31: the sidecar's first query picks the soon-dead pod about half of the time, and
    // then stays blackholed from the kill (5m) to the end (1h).
    let stale = &combos[0]["expectations"][4];
    assert_eq!(
        stale["name"],
        "the stale entry still points at the dead pod, refreshed to 120 s"
    );
    let rate = stale["passRate"].as_f64().unwrap();
    assert!((0.2..=0.8).contains(&rate), "{stale}");
    let ci = stale["ci95"].as_array().unwrap();
    assert!(ci[0].as_f64().unwrap() < rate && rate < ci[1].as_f64().unwrap());
    let fig = &combos[0]["figures"][0];
    assert_eq!(fig["client"], "sidecar");
    assert_eq!(fig["blackholedSecs"]["max"], 3300.0);
    assert_eq!(fig["failed"]["max"], 110.0);
    // v1.33 clears the entry when the endpoint turns not-serving: never stale.
    assert_eq!(combos[1]["expectations"][4]["passed"], 0);
    assert!(
        combos[1]["figures"][0]["blackholedSecs"]["max"]
            .as_f64()
            .unwrap()
            <= 60.0
    );
}

#[test]
fn bad_set_paths_and_values_are_refused_with_their_place() {
    let (code, _, err) = nfsim(&[
        "sweep",
        FILE,
        "--seeds",
        "1..2",
        "--set",
        "kubeProxy.relase=v1.31.0",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("with --set kubeProxy.relase=v1.31.0: scenarios/stale-dns-udp.yaml:65:3: unknown field `relase`"), "{err}");
    assert!(err.contains("65 |   relase: v1.31.0"), "{err}");
    assert_eq!(err.matches("unknown field").count(), 1, "said once: {err}");
    let (code, _, err) = nfsim(&[
        "sweep",
        FILE,
        "--seeds",
        "1..2",
        "--set",
        "kubeProxy.release=v1.31.0,v9",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains(":62:12: unknown release \"v9\""), "{err}");
    let (code, _, err) = nfsim(&[
        "sweep",
        FILE,
        "--seeds",
        "1..2",
        "--set",
        "clients.proxy.udp.interval=1s",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("clients (line 69, column 3) has no item named \"proxy\""),
        "{err}"
    );
    let (code, _, err) = nfsim(&["sweep", FILE, "--seeds", "9..2"]);
    assert_eq!(code, 2);
    assert!(err.contains("A <= B"), "{err}");
}

/// Three shards of a small sweep (2 combinations × 6 seeds), as (file name, text).
fn small_shards() -> Vec<(String, String)> {
    (0..3)
        .map(|i| {
            let (code, out, err) = nfsim(&[
                "sweep",
                FILE,
                "--seeds",
                "1..6",
                "--set",
                "kubeProxy.release=v1.31.0,v1.33",
                "-q",
                "--shard",
                &format!("{i}/3"),
            ]);
            assert_eq!(code, 0, "{err}");
            (format!("shard-{i}.jsonl"), out)
        })
        .collect()
}

/// Shard `f`'s line `ln` (1-based) edited by `edit`.
fn forge(
    shards: &[(String, String)],
    f: usize,
    ln: usize,
    edit: impl Fn(&mut serde_json::Value),
) -> Vec<(String, String)> {
    let mut out = shards.to_vec();
    let mut lines: Vec<String> = out[f].1.lines().map(str::to_string).collect();
    let mut v: serde_json::Value = serde_json::from_str(&lines[ln - 1]).unwrap();
    edit(&mut v);
    lines[ln - 1] = v.to_string();
    out[f].1 = lines.join("\n") + "\n";
    out
}

fn merge_error(inputs: &[(String, String)]) -> String {
    match nfsim::sweep::merge(inputs) {
        Ok(_) => panic!("a forged shard was merged"),
        Err(e) => e.to_string(),
    }
}

/// `sweep merge` checks each run line against the header, and the header itself: a forged
/// seed, a failed expectation that does not exist, impossible client counts, a bogus shard
/// label, a run outside its file's shard are each a located error (file:line). Before, all
/// but the header's run count (refused as runs missing, without a place) were merged.
#[test]
fn merge_refuses_forged_shards_at_their_line() {
    let shards = small_shards();
    assert!(nfsim::sweep::merge(&shards).is_ok());
    // shard-1 holds runs 4..8: its line 2 is run 4 (combination 0, seed 5).
    let cases: Vec<(Vec<(String, String)>, &str)> = vec![
        (
            forge(&shards, 1, 2, |v| v["seed"] = 99.into()),
            "shard-1.jsonl:2: run 4 is of combination 0 with seed 99: run 4 of this sweep is combination 0 with seed 5",
        ),
        (
            forge(&shards, 1, 2, |v| {
                v["failed"] = serde_json::json!([17]);
                v["passed"] = false.into();
            }),
            "shard-1.jsonl:2: run 4: failed expectation 17 does not exist",
        ),
        (
            forge(&shards, 1, 2, |v| v["clients"][0]["answered"] = 1_000_000.into()),
            "shard-1.jsonl:2: run 4, client",
        ),
        (
            forge(&shards, 1, 2, |v| v["set"]["kubeProxy.release"] = "v1.33".into()),
            "shard-1.jsonl:2: run 4 has the values",
        ),
        (
            forge(&shards, 1, 2, |v| {
                v["passed"] = true.into();
                v["error"] = "boom".into();
            }),
            "shard-1.jsonl:2: run 4 passed, yet",
        ),
        (
            forge(&shards, 1, 1, |v| v["shard"] = "7/3".into()),
            "shard-1.jsonl:1: a bad sweep header: shard \"7/3\": expected i/N",
        ),
        (
            forge(&shards, 1, 1, |v| v["shard"] = "0/3".into()),
            "shard-1.jsonl:2: run 4 is not in this file's shard 0/3 (runs 0..4)",
        ),
        (
            forge(&shards, 0, 1, |v| v["runs"] = 13.into()),
            "shard-0.jsonl:1: a bad sweep header: runs 13, where 2 combinations of 6 seeds are 12",
        ),
    ];
    for (inputs, want) in cases {
        let e = merge_error(&inputs);
        assert!(e.starts_with(want), "expected {want:?}, got {e:?}");
    }
}

/// Missing runs name the files read, the runs (with combination and seeds) and the shards
/// absent (before: `error: :0: 4 of 12 runs missing (the first: run 4)`).
#[test]
fn merge_with_runs_missing_names_the_files_runs_and_shards() {
    let shards = small_shards();
    let e = merge_error(&[shards[0].clone(), shards[2].clone()]);
    assert_eq!(
        e,
        "shard-0.jsonl, shard-2.jsonl: 4 of 12 runs missing: runs 4..=5 (combination 0, seeds 5..=6), runs 6..=7 (combination 1, seeds 1..=2); shard 1/3 not among the files; expected every shard's output"
    );
}

/// `--jobs` far above the runs (and the machine) starts no more threads than either: a
/// sweep of two runs with `-j 2^64-1` finishes at once (before, it tried to start 2^64 - 1
/// threads and hung). Bounded by a deadline so that a regression fails instead of hanging.
#[test]
fn jobs_is_capped_by_the_runs_and_the_machine() {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nfsim"))
        .args([
            "sweep",
            FILE,
            "--seeds",
            "1..2",
            "-q",
            "-j",
            "18446744073709551615",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("sweep -j 2^64-1 did not finish within 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success());
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    assert_eq!(out.lines().count(), 1 + 2 + 1, "{out}");
    assert_eq!(
        nfsim::sweep::threads(usize::MAX, 2),
        2.min(nfsim::sweep::threads(usize::MAX, u64::MAX))
    );
    assert_eq!(nfsim::sweep::threads(0, 5), 1);
    assert_eq!(nfsim::sweep::threads(8, 1), 1);
}

/// `--set` values and seeds whose runs cannot be counted (or are past `MAX_SWEEP_RUNS`) are
/// refused before any run, exit 2: 300 values times 2^32 - 1 seeds would otherwise start
/// 1.3 × 10^12 runs, and a product of many `--set` axes would wrap.
#[test]
fn more_runs_than_a_sweep_can_hold_are_refused_at_once() {
    let values: Vec<String> = (1..=300).map(|m| format!("{m}m")).collect();
    let set = format!("duration={}", values.join(","));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nfsim"))
        .args([
            "sweep",
            FILE,
            "--seeds",
            "1..4294967295",
            "-q",
            "--set",
            &set,
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("300 combinations of --set values times 4294967295 seeds"),
        "{err}"
    );
}
