//! `nfsim run --report`: the page as a person sees it. The shipped incident's report is opened
//! in headless Chromium (skipped with `skipped: <test>: chromium missing` where it is not
//! installed): the page's script must run without a console message, draw a lane per client,
//! an entry bar that spans the dead pod's kill, and the PASS/FAIL table; a screenshot is taken.
//! Without a browser, the file itself is still checked: self-contained, deterministic, and
//! aggregated for a run with many clients.

#[path = "support/tools.rs"]
mod tools;

use nfsim::cluster::sim::{RunOptions, Simulation};
use nfsim::scenario::{load_file, load_str};
use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nfsim-report-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `nfsim run SCENARIO --report OUT [extra]`; returns the exit code.
fn run_report(scenario: &str, out: &Path, extra: &[&str]) -> i32 {
    let st = Command::new(env!("CARGO_BIN_EXE_nfsim"))
        .args(["run", scenario, "--report"])
        .arg(out)
        .args(extra)
        .current_dir(ROOT)
        .output()
        .unwrap();
    st.status.code().unwrap_or(-1)
}

/// What headless Chromium made of a page: the DOM after the scripts ran, and its log.
struct Rendered {
    dom: String,
    log: String,
}

fn chromium(dir: &Path, page: &Path, extra: &[&str]) -> Rendered {
    let exe = tools::find("chromium").expect("checked by the caller");
    let out = Command::new(exe)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1400,1250",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    let mut dom = String::from_utf8_lossy(&out.stdout).into_owned();
    // The page as drawn: everything before the data and the script (whose text would
    // otherwise match what the checks look for).
    if let Some(at) = dom.find("<script id=\"nfsim-data\"") {
        dom.truncate(at);
    }
    Rendered {
        dom,
        log: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The value of `attr` in the first tag that contains `marker`.
fn attr<'a>(dom: &'a str, marker: &str, attr: &str) -> Option<&'a str> {
    let at = dom.find(marker)?;
    let tag_start = dom[..at].rfind('<')?;
    let tag = &dom[tag_start..tag_start + dom[tag_start..].find('>')?];
    let key = format!(" {attr}=\"");
    let v = tag.find(&key)? + key.len();
    Some(&tag[v..v + tag[v..].find('"')?])
}

/// Every tag (up to its `>`) that contains `marker`.
fn tags<'a>(dom: &'a str, marker: &str) -> Vec<&'a str> {
    dom.match_indices(marker)
        .filter_map(|(at, _)| {
            let s = dom[..at].rfind('<')?;
            Some(&dom[s..s + dom[s..].find('>')?])
        })
        .collect()
}

fn tag_attr<'a>(tag: &'a str, attr: &str) -> Option<&'a str> {
    let key = format!(" {attr}=\"");
    let v = tag.find(&key)? + key.len();
    Some(&tag[v..v + tag[v..].find('"')?])
}

fn console_lines(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains(":CONSOLE")).collect()
}

#[test]
fn the_file_stands_alone_and_is_the_same_every_time() {
    let dir = scratch("alone");
    let (a, b) = (dir.join("a.html"), dir.join("b.html"));
    assert_eq!(run_report("scenarios/stale-dns-udp.yaml", &a, &[]), 0);
    assert_eq!(run_report("scenarios/stale-dns-udp.yaml", &b, &[]), 0);
    let (ha, hb) = (
        std::fs::read_to_string(&a).unwrap(),
        std::fs::read_to_string(&b).unwrap(),
    );
    // The same run, the same bytes, apart from the file name in the replay command.
    assert_eq!(
        ha.replace("a.html", "X"),
        hb.replace("b.html", "X"),
        "two reports of one run differ"
    );
    // Nothing is fetched when the page is viewed.
    for needle in [
        "http://", "https://", "<link", "src=\"", "@import", "url(http",
    ] {
        assert!(
            !ha.contains(needle),
            "the report refers outside itself: {needle}"
        );
    }
    // The data is inline, and no text in it can close its element.
    let data_at = ha.find("id=\"nfsim-data\"").unwrap();
    let data = &ha[data_at..];
    let data = &data[data.find('>').unwrap() + 1..data.find("</script>").unwrap()];
    assert!(!data.contains('<'));
    let v: serde_json::Value = serde_json::from_str(data).unwrap();
    assert_eq!(v["meta"]["seed"], 1);
    assert_eq!(v["clients"].as_array().unwrap().len(), 1);
    assert!(
        v["meta"]["command"]
            .as_str()
            .unwrap()
            .starts_with("nfsim run scenarios/stale-dns-udp.yaml --seed 1"),
        "{}",
        v["meta"]["command"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn incident_report_in_headless_chromium() {
    let test = "incident_report_in_headless_chromium";
    let dir = scratch("incident");
    let page = dir.join("report.html");
    assert_eq!(run_report("scenarios/stale-dns-udp.yaml", &page, &[]), 0);
    if !tools::have_programs_or_skip(test, &["chromium"]) {
        return;
    }
    let r = chromium(&dir, &page, &["--dump-dom"]);
    assert!(
        console_lines(&r.log).is_empty(),
        "console messages: {:?}",
        console_lines(&r.log)
    );
    let state = attr(&r.dom, "id=\"nfsim-status\"", "data-state");
    assert_eq!(state, Some("ok"), "the page's script did not finish: {}", {
        let at = r.dom.find("nfsim-status").unwrap_or(0);
        &r.dom[at..(at + 300).min(r.dom.len())]
    });
    // A lane per client.
    let sc = load_file(&format!("{ROOT}/scenarios/stale-dns-udp.yaml")).unwrap();
    for c in &sc.clients {
        assert!(
            r.dom.contains(&format!("data-lane=\"client:{}\"", c.name)),
            "no lane for client {}",
            c.name
        );
    }
    // Each of the sidecar's 120 queries is drawn with its outcome.
    let queries = tags(&r.dom, "class=\"hit q\"");
    let answered = queries
        .iter()
        .filter(|t| tag_attr(t, "data-outcome") == Some("a"))
        .count();
    let timed_out = queries
        .iter()
        .filter(|t| tag_attr(t, "data-outcome") == Some("t"))
        .count();
    assert_eq!((answered, timed_out), (10, 110));
    // The kill is marked, and node-2's entry to the dead pod spans it: created before, still
    // alive at the end of the run.
    let kill: u64 = tags(&r.dom, "class=\"guide\"")
        .iter()
        .find_map(|t| tag_attr(t, "data-t"))
        .expect("a guide line at the kill")
        .parse()
        .unwrap();
    assert_eq!(kill, 300_000_000_000);
    let entries = tags(&r.dom, "class=\"hit entry\"");
    let spanning = entries.iter().find(|t| {
        tag_attr(t, "data-node") == Some("node-2")
            && tag_attr(t, "data-ep") == Some("10.244.1.5")
            && tag_attr(t, "data-t0").and_then(|v| v.parse::<u64>().ok()) < Some(kill)
            && tag_attr(t, "data-end") == Some("open")
    });
    assert!(
        spanning.is_some(),
        "no entry bar on node-2 to 10.244.1.5 spanning the kill: {entries:?}"
    );
    // Its ASSURED phase is drawn solid.
    assert!(r.dom.contains("data-phase=\"a\""));
    // The pod's lane shows it killed; the slice shows it not serving.
    assert!(r
        .dom
        .contains("data-key=\"kube-system/coredns-a\" data-state=\"killed\""));
    assert!(r
        .dom
        .contains("data-key=\"10.244.1.5\" data-state=\"notserving\""));
    // The PASS/FAIL table: every expectation, each PASS.
    assert!(r.dom.contains("<table id=\"expectations\">"));
    let verdicts: Vec<&str> = tags(&r.dom, "class=\"exp\"")
        .iter()
        .filter_map(|t| tag_attr(t, "data-verdict"))
        .collect();
    assert_eq!(verdicts, vec!["PASS"; sc.expectations.len()]);
    // The seed and the replay command.
    assert!(r.dom.contains("id=\"seed\">1<"));
    assert!(r
        .dom
        .contains("nfsim run scenarios/stale-dns-udp.yaml --seed 1"));

    // A screenshot, zoomed on the kill, as a person would look at it.
    let shot = dir.join("shot.png");
    let zoomed = PathBuf::from(format!("{}#from=00:04:50&to=00:05:40", page.display()));
    let r = chromium(
        &dir,
        &zoomed,
        &[&format!("--screenshot={}", shot.display())],
    );
    assert!(
        console_lines(&r.log).is_empty(),
        "{:?}",
        console_lines(&r.log)
    );
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 20_000);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failing_run_reports_fail_with_what_was_observed() {
    let test = "a_failing_run_reports_fail_with_what_was_observed";
    let dir = scratch("fail");
    let page = dir.join("report.html");
    // With seed 3 the first query goes to coredns-b: the expectations about coredns-a fail.
    assert_eq!(
        run_report("scenarios/stale-dns-udp.yaml", &page, &["--seed", "3"]),
        1
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("<title>nfsim: stale-dns-udp (seed 3) — FAIL</title>"));
    if !tools::have_programs_or_skip(test, &["chromium"]) {
        return;
    }
    let r = chromium(&dir, &page, &["--dump-dom"]);
    assert!(
        console_lines(&r.log).is_empty(),
        "{:?}",
        console_lines(&r.log)
    );
    assert_eq!(
        attr(&r.dom, "id=\"nfsim-status\"", "data-state"),
        Some("ok")
    );
    assert!(r.dom.contains("✗ FAIL"));
    assert!(tags(&r.dom, "class=\"exp\"")
        .iter()
        .any(|t| tag_attr(t, "data-verdict") == Some("FAIL")));
    assert!(r.dom.contains("--seed 3"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The benchmark's generated cluster, small enough for a debug test: 20 nodes, 40 Services,
/// 80 endpoints, 60 clients querying every 30 s for 10 minutes.
fn many_clients() -> String {
    let (nodes, services, endpoints, clients) = (20, 40, 80, 60);
    let mut s = String::from(
        "name: many\nduration: 10m\nkubeProxy: {clusterCIDR: 10.100.0.0/14}\nnodes:\n",
    );
    for n in 0..nodes {
        s.push_str(&format!(
            "  - {{name: n{n}, address: 192.168.0.{}, podCIDR: 10.100.{n}.0/24}}\n",
            n + 1
        ));
    }
    s.push_str("pods:\n");
    let mut slot = vec![0usize; nodes];
    let mut place = |i: usize| {
        let n = i % nodes;
        slot[n] += 1;
        (n, format!("10.100.{n}.{}", slot[n] + 1))
    };
    for e in 0..endpoints {
        let (n, ip) = place(e);
        s.push_str(&format!(
            "  - {{name: ep{e}, labels: {{svc: s{}}}, node: n{n}, ip: {ip}, apps: [{{udpServer: {{port: 53}}}}]}}\n",
            e % services
        ));
    }
    for c in 0..clients {
        let (n, ip) = place(endpoints + c);
        s.push_str(&format!("  - {{name: cl{c}, node: n{n}, ip: {ip}}}\n"));
    }
    s.push_str("services:\n");
    for v in 0..services {
        s.push_str(&format!(
            "  - {{metadata: {{name: s{v}}}, spec: {{clusterIP: 10.96.0.{}, selector: {{svc: s{v}}}, ports: [{{protocol: UDP, port: 53}}]}}}}\n",
            v + 1
        ));
    }
    s.push_str("clients:\n");
    for c in 0..clients {
        s.push_str(&format!(
            "  - {{name: c{c}, pod: cl{c}, udp: {{target: default/s{}, interval: 30s, jitter: 1s, start: {}ms}}}}\n",
            c % services,
            c * 400
        ));
    }
    s
}

#[test]
fn many_clients_are_aggregated_per_node_and_per_service() {
    let test = "many_clients_are_aggregated_per_node_and_per_service";
    let sc = load_str("many.yaml", &many_clients()).unwrap();
    assert!(sc.clients.len() > nfsim::report::MAX_CLIENT_LANES);
    let opts = RunOptions {
        record_timeline: true,
        conntrack_events: true,
        ..RunOptions::default()
    };
    let result = Simulation::new(sc.clone(), opts).unwrap().finish().unwrap();
    let html = nfsim::report::render(&sc, &result, "nfsim run many.yaml --seed 0", &[]);
    let data_at = html.find("id=\"nfsim-data\"").unwrap();
    let data = &html[data_at..];
    let data = &data[data.find('>').unwrap() + 1..data.find("</script>").unwrap()];
    let v: serde_json::Value = serde_json::from_str(data).unwrap();
    assert_eq!(v["meta"]["aggregated_clients"], true);
    assert!(v["clients"].as_array().unwrap().is_empty());
    let agg = &v["agg"];
    assert_eq!(agg["nodes"].as_array().unwrap().len(), 20);
    assert_eq!(agg["services"].as_array().unwrap().len(), 40);
    // Every query is counted once per node lane and once per Service lane.
    let sum = |lanes: &serde_json::Value| -> u64 {
        lanes
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                l["total"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap())
                    .sum::<u64>()
            })
            .sum()
    };
    let finished = result
        .timeline
        .iter()
        .filter(|e| {
            matches!(
                e.what,
                nfsim::cluster::sim::What::QueryAnswered { .. }
                    | nfsim::cluster::sim::What::QueryTimedOut { .. }
                    | nfsim::cluster::sim::What::QueryRefused { .. }
            )
        })
        .count() as u64;
    assert!(finished > 1000, "{finished}");
    assert_eq!(sum(&agg["nodes"]), finished);
    assert_eq!(sum(&agg["services"]), finished);
    // Aggregated, the page does not grow with the timeline.
    assert!(html.len() < 2_000_000, "{} bytes", html.len());
    if !tools::have_programs_or_skip(test, &["chromium"]) {
        return;
    }
    let dir = scratch("many");
    let page = dir.join("report.html");
    std::fs::write(&page, &html).unwrap();
    let r = chromium(&dir, &page, &["--dump-dom"]);
    assert!(
        console_lines(&r.log).is_empty(),
        "{:?}",
        console_lines(&r.log)
    );
    assert_eq!(
        attr(&r.dom, "id=\"nfsim-status\"", "data-state"),
        Some("ok")
    );
    let lanes: usize = attr(&r.dom, "id=\"nfsim-status\"", "data-agg-lanes")
        .unwrap()
        .parse()
        .unwrap();
    assert!(lanes >= 20 + 30, "{lanes} aggregated lanes drawn");
    assert!(r.dom.contains("data-lane=\"node:n0\""));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_sweep_report_plots_pass_rates_and_distributions() {
    let test = "a_sweep_report_plots_pass_rates_and_distributions";
    let dir = scratch("sweep");
    let (out, page) = (dir.join("sweep.jsonl"), dir.join("sweep.html"));
    let st = Command::new(env!("CARGO_BIN_EXE_nfsim"))
        .args([
            "sweep",
            "scenarios/stale-dns-udp.yaml",
            "--seeds",
            "1..4",
            "--set",
            "kubeProxy.release=v1.31.0,v1.32.0",
            "-q",
            "--jobs",
            "1",
            "--out",
        ])
        .arg(&out)
        .arg("--report")
        .arg(&page)
        .current_dir(ROOT)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let html = std::fs::read_to_string(&page).unwrap();
    for needle in ["http://", "https://", "<link", "src=\""] {
        assert!(!html.contains(needle), "{needle}");
    }
    let at = html.find("id=\"nfsim-data\"").unwrap();
    let data = &html[at..];
    let data = &data[data.find('>').unwrap() + 1..data.find("</script>").unwrap()];
    let v: serde_json::Value = serde_json::from_str(data).unwrap();
    let combos = v["combos"].as_array().unwrap();
    assert_eq!(combos.len(), 2);
    // The aggregate line of the JSON output and the page agree on every pass rate.
    let jsonl = std::fs::read_to_string(&out).unwrap();
    let agg: serde_json::Value = serde_json::from_str(jsonl.lines().last().unwrap()).unwrap();
    for (c, a) in combos.iter().zip(agg["combos"].as_array().unwrap()) {
        assert_eq!(c["rate"]["passed"], a["passed"]);
        assert_eq!(c["rate"]["runs"], 4);
        // Every run lands in one bin of each histogram.
        for f in c["clients"][0]["figures"].as_array().unwrap() {
            let n: u64 = f["hist"]["counts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .sum();
            assert_eq!(n, 4, "{f}");
        }
    }
    if !tools::have_programs_or_skip(test, &["chromium"]) {
        return;
    }
    let r = chromium(&dir, &page, &["--dump-dom"]);
    assert!(
        console_lines(&r.log).is_empty(),
        "{:?}",
        console_lines(&r.log)
    );
    assert_eq!(
        attr(&r.dom, "id=\"nfsim-status\"", "data-state"),
        Some("ok")
    );
    assert_eq!(tags(&r.dom, "class=\"combo\"").len(), 2);
    assert!(tags(&r.dom, "class=\"hist\"").len() >= 4);
    assert!(r.dom.contains("data-p=\"p90\""));
    let _ = std::fs::remove_dir_all(&dir);
}
