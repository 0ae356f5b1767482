//! `nfsim run --json`: every line is one JSON object; the first carries the schema version,
//! conntrack events carry the entry field by field, queries one `id`, RTTs integer
//! nanoseconds, and the last line the summary and every verdict (docs/json-schema.md).

use serde_json::Value;
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn run(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_nfsim"))
        .args(args)
        .current_dir(ROOT)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
    )
}

fn lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn of_kind<'a>(v: &'a [Value], kind: &str) -> Vec<&'a Value> {
    v.iter().filter(|x| x["kind"] == kind).collect()
}

#[test]
fn json_to_stdout_is_only_json_lines_with_version_entries_ids_and_summary() {
    let (code, out, _) = run(&[
        "run",
        "scenarios/stale-dns-udp-latest.yaml",
        "--json",
        "-",
        "--dump-conntrack",
        "4m",
    ]);
    assert_eq!(code, 0);
    let v = lines(&out);
    assert_eq!(v[0]["kind"], "start");
    assert_eq!(
        v[0]["version"],
        u64::from(nfsim::cluster::sim::JSON_SCHEMA_VERSION)
    );
    assert_eq!(v[0]["seed"], 1);
    let end = v.last().unwrap();
    assert_eq!(end["kind"], "run");
    assert_eq!(end["version"], v[0]["version"]);
    assert_eq!(end["passed"], true);

    // Queries: one id field, RTT as integer nanoseconds.
    let answered = of_kind(&v, "query_answered");
    assert!(!answered.is_empty());
    for a in &answered {
        assert!(a["id"].is_u64() && a.get("query").is_none(), "{a}");
        let rtt = a["rtt_ns"].as_u64().expect("rtt_ns is an integer");
        assert!(rtt > 0 && rtt < 1_000_000_000, "{a}");
    }
    for k in ["query_sent", "dnat"] {
        for e in of_kind(&v, k) {
            assert!(e["id"].is_u64(), "{e}");
        }
    }

    // Conntrack events: both tuples, flags, status, timeout, mark, NAT, all agreeing with
    // the conntrack -E line they come with.
    let ct = of_kind(&v, "conntrack");
    assert!(!ct.is_empty());
    let mut saw_dnat = false;
    for e in &ct {
        let line = e["line"].as_str().unwrap();
        let en = &e["entry"];
        assert_eq!(en["proto"], "udp");
        assert_eq!(en["proto_num"], 17);
        let o = &en["orig"];
        assert!(line.contains(&format!(
            "src={} dst={} sport={} dport={}",
            o["src"].as_str().unwrap(),
            o["dst"].as_str().unwrap(),
            o["sport"],
            o["dport"]
        )));
        let r = &en["reply"];
        assert!(line.contains(&format!(
            "src={} dst={} sport={} dport={}",
            r["src"].as_str().unwrap(),
            r["dst"].as_str().unwrap(),
            r["sport"],
            r["dport"]
        )));
        let flags: Vec<&str> = en["flags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        assert_eq!(flags.contains(&"UNREPLIED"), line.contains("[UNREPLIED]"));
        assert_eq!(flags.contains(&"ASSURED"), line.contains("[ASSURED]"));
        assert_eq!(en["mark"], 0);
        match en.get("timeout_s") {
            Some(t) => assert!(line.contains(&format!(" 17 {t} src="))),
            None => assert_eq!(e["event"], "DESTROY"),
        }
        if e["event"] == "DESTROY" {
            assert!(e["cause"].is_string(), "{e}");
        }
        if let Some(d) = en.get("dnat") {
            saw_dnat = true;
            assert_eq!(d["from_addr"], o["dst"]);
            assert_eq!(d["to_addr"], r["src"]);
            assert!(en["status"]
                .as_array()
                .unwrap()
                .contains(&Value::from("DST_NAT")));
        }
    }
    assert!(saw_dnat);

    // kube-proxy's cleanup delete carries the entry too.
    let del = of_kind(&v, "cleanup_delete");
    assert_eq!(del.len(), 1);
    assert!(del[0]["entry"]["orig"]["dst"].is_string());

    // --dump-conntrack: one record per node.
    let dumps = of_kind(&v, "conntrack_dump");
    assert_eq!(dumps.len(), 2);
    assert_eq!(dumps[0]["t_ns"], 240_000_000_000u64);

    // The summary and each verdict.
    let clients = end["summary"]["clients"].as_array().unwrap();
    assert_eq!(clients.len(), 1);
    let c = &clients[0];
    assert_eq!(
        c["sent"].as_u64().unwrap(),
        of_kind(&v, "query_sent")
            .iter()
            .filter(|q| q["attempt"] == 0)
            .count() as u64
    );
    assert_eq!(c["answered"].as_u64().unwrap(), answered.len() as u64);
    assert!(!end["summary"]["endpoints"].as_array().unwrap().is_empty());
    let verdicts = end["expectations"].as_array().unwrap();
    assert_eq!(verdicts.len(), of_kind(&v, "expectation").len());
    assert!(verdicts
        .iter()
        .all(|x| x["passed"] == true && x["line"].is_u64()));
}

#[test]
fn json_to_a_file_keeps_the_text_on_stdout() {
    let dir = std::env::temp_dir().join(format!("nfsim-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("run.jsonl");
    let p = path.to_str().unwrap();
    let (code, out, _) = run(&[
        "run",
        "scenarios/stale-dns-udp.yaml",
        "--until",
        "1m",
        "--json",
        p,
    ]);
    assert_eq!(code, 0);
    assert!(out.starts_with("scenario stale-dns-udp (seed 1)"));
    assert!(out.contains("\nsummary\n"));
    let (_, stdout_json, _) = run(&[
        "run",
        "scenarios/stale-dns-udp.yaml",
        "--until",
        "1m",
        "--json",
        "-",
    ]);
    // The same lines either way.
    assert_eq!(std::fs::read_to_string(&path).unwrap(), stdout_json);
    let _ = std::fs::remove_dir_all(&dir);
}
