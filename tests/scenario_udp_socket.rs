//! UDP clients as the tools people run: a shell loop around `dig` (one query at a time, a
//! sleep between, the port bound only while a query runs), a client that pauses on its socket
//! or closes and reopens it, and two clients binding one fixed source port in turn.

#[path = "support/scenario.rs"]
mod scenario_run;

use nfsim::cluster::sim::RunResult;
use nfsim::scenario::load_str;
use scenario_run::run_text;

const GOOD: &str = include_str!("fixtures/scenario/minimal.yaml");

fn with_clients(clients: &str) -> String {
    GOOD.replace(
        "  - name: c\n    node: n1\n    udp: {target: default/dns:dns, interval: 10s}\n",
        clients,
    )
    .replace("  - client: {name: c, sent: 6}\n", "  []\n")
}

fn run(text: &str) -> RunResult {
    run_text("t.yaml", text, false)
}

/// `(time, source)` of each query `client` sent (first tries and retries).
fn sends(r: &RunResult, client: &str) -> Vec<(String, String)> {
    let prefix = format!("{client}: query #");
    r.timeline
        .iter()
        .map(|e| {
            (
                e.time.clone(),
                e.line().split_once("  ").unwrap().1.to_string(),
            )
        })
        .filter(|(_, l)| l.starts_with(&prefix) && l.contains(" sent "))
        .map(|(t, l)| {
            let src = l.split(" sent ").nth(1).unwrap().split(' ').next().unwrap();
            (t, src.to_string())
        })
        .collect()
}

#[test]
fn a_dig_loop_sleeps_after_each_answer_from_its_one_port() {
    let r = run(&with_clients(
        "  - name: d\n    node: n1\n    dig: {target: default/dns:dns, sourcePort: 40000, sleep: 10s}\n",
    ));
    let s = sends(&r, "d");
    // Each run ends with its answer (the server's 1 ms; no link latency here), then the
    // sleep: the runs drift later than a fixed 10 s interval would put them.
    let ns: Vec<u64> = r
        .timeline
        .iter()
        .filter(|e| e.line().contains("d: query #") && e.line().contains(" sent "))
        .map(|e| e.t_ns)
        .collect();
    assert_eq!(ns.len(), 6, "{s:?}");
    assert_eq!(ns[0], 0);
    for w in ns.windows(2) {
        assert_eq!(w[1] - w[0], 10_001_000_000, "{ns:?}");
    }
    assert!(s.iter().all(|(_, src)| src == "192.168.0.1:40000"), "{s:?}");
    assert_eq!(r.clients[0].answered, 6, "{:?}", r.clients[0]);
}

#[test]
fn a_dig_loop_never_has_two_queries_in_flight_and_waits_out_its_tries() {
    let text = with_clients(
        "  - name: d\n    node: n1\n    dig: {target: default/dns:dns, sourcePort: 40000, sleep: 10s, tries: 2, timeout: 2s}\n",
    )
    .replace("udpServer: {port: 53}", "udpServer: {port: 53, answer: false}");
    let r = run(&text);
    let times: Vec<String> = sends(&r, "d").into_iter().map(|(t, _)| t).collect();
    // Two tries of 2 s each, then 10 s of sleep: a run every 14 s; a fixed-interval
    // client would have sent at 0, 10, 20, ... with queries overlapping.
    assert_eq!(
        times,
        [
            "00:00:00.000",
            "00:00:02.000",
            "00:00:14.000",
            "00:00:16.000",
            "00:00:28.000",
            "00:00:30.000",
            "00:00:42.000",
            "00:00:44.000",
            "00:00:56.000",
            "00:00:58.000",
        ]
    );
    assert_eq!(r.clients[0].sent, 5);
}

#[test]
fn two_clients_bind_one_fixed_port_in_turn() {
    let text = with_clients(
        "  - name: a\n    node: n1\n    udp: {target: default/dns:dns, sourcePort: 40000, interval: 10s, timeout: 2s, stop: 20s}\n  - name: b\n    node: n1\n    udp: {target: default/dns:dns, sourcePort: 40000, interval: 10s, timeout: 2s, start: 30s}\n",
    );
    let r = run(&text);
    let a = sends(&r, "a");
    let b = sends(&r, "b");
    assert_eq!(a.len(), 2, "{a:?}");
    assert_eq!(b.len(), 3, "{b:?}");
    assert!(a
        .iter()
        .chain(&b)
        .all(|(_, src)| src == "192.168.0.1:40000"));
    assert!(
        r.clients.iter().all(|c| c.answered == c.sent),
        "{:?}",
        r.clients
    );
    // While a may still have the port open (its last query at 10s can wait until 12s, and a
    // query before its stop until 22s), b's bind fails.
    let e = load_str("t.yaml", &text.replace("start: 30s", "start: 15s")).unwrap_err();
    assert!(
        e.message.contains("EADDRINUSE") && e.message.contains("at 00:00:15"),
        "{e}"
    );
}

#[test]
fn a_dig_loop_and_a_client_on_one_port_clash_while_both_may_hold_it() {
    let text = with_clients(
        "  - name: a\n    node: n1\n    udp: {target: default/dns:dns, sourcePort: 40000, interval: 10s}\n  - name: d\n    node: n1\n    dig: {target: default/dns:dns, sourcePort: 40000, sleep: 10s}\n",
    );
    let e = load_str("t.yaml", &text).unwrap_err();
    assert!(e.message.contains("EADDRINUSE"), "{e}");
    let e = load_str(
        "t.yaml",
        &with_clients(
            "  - name: d\n    node: n1\n    dig: {target: default/dns:dns, sourcePort: fixed, sleep: 10s}\n",
        ),
    )
    .unwrap_err();
    assert!(e.message.contains("dig -b ADDR#PORT"), "{e}");
    assert_eq!(e.line, 23, "{e}");
}

#[test]
fn a_pause_keeps_the_port_and_a_reopen_binds_a_new_one() {
    let pause = run(&with_clients(
        "  - name: p\n    node: n1\n    udp: {target: default/dns:dns, sourcePort: fixed, interval: 10s, pause: {after: 20s, for: 15s}}\n",
    ));
    let s = sends(&pause, "p");
    let times: Vec<&str> = s.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        times,
        [
            "00:00:00.000",
            "00:00:10.000",
            "00:00:35.000",
            "00:00:45.000",
            "00:00:55.000"
        ]
    );
    assert!(s.iter().all(|(_, src)| *src == s[0].1), "one socket: {s:?}");

    let reopen = run(&with_clients(
        "  - name: p\n    node: n1\n    udp: {target: default/dns:dns, sourcePort: fixed, interval: 10s, reopen: {after: 20s, for: 15s}}\n",
    ));
    let s2 = sends(&reopen, "p");
    let times2: Vec<&str> = s2.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(times2, times, "the same schedule");
    assert_eq!(s2[0].1, s2[1].1);
    assert_eq!(s2[2].1, s2[4].1);
    assert_ne!(s2[1].1, s2[2].1, "a new socket draws a new port: {s2:?}");

    let e = load_str(
        "t.yaml",
        &with_clients(
            "  - name: p\n    node: n1\n    udp: {target: default/dns:dns, interval: 10s, reopen: {after: 20s, for: 15s}}\n",
        ),
    )
    .unwrap_err();
    assert!(e.message.contains("reopen on a perQuery client"), "{e}");
}

#[test]
fn two_clients_share_a_fixed_port_across_a_reopen_gap() {
    // a closes its socket from 20 s to 40 s; b binds the port inside that gap.
    let text = with_clients(
        "  - name: a\n    node: n1\n    udp: {target: default/dns:dns, sourcePort: 40000, interval: 10s, timeout: 2s, reopen: {after: 20s, for: 20s}}\n  - name: b\n    node: n1\n    udp: {target: default/dns:dns, sourcePort: 40000, interval: 5s, timeout: 2s, start: 25s, count: 2}\n",
    );
    let r = run(&text);
    let b = sends(&r, "b");
    assert_eq!(b.len(), 2, "{b:?}");
    assert!(
        r.clients.iter().all(|c| c.answered == c.sent),
        "{:?}",
        r.clients
    );
    let e = load_str("t.yaml", &text.replace("count: 2", "count: 4")).unwrap_err();
    assert!(e.message.contains("EADDRINUSE"), "{e}");
}
