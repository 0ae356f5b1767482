//! Applications in scenarios: the ping client, UDP servers that never answer or answer from
//! another port; their fields' errors are located.

use nfsim::cluster::sim::{RunOptions, Simulation};
use nfsim::scenario::load_str;

const GOOD: &str = include_str!("fixtures/scenario/minimal.yaml");

fn with_client(client: &str) -> String {
    GOOD.replace(
        "    udp: {target: default/dns:dns, interval: 10s}\n",
        &format!("{client}\n"),
    )
}

#[test]
fn a_ping_target_that_is_not_an_address_is_a_located_error() {
    let text = with_client("    ping: {target: dns, interval: 1s}");
    let e = load_str("t.yaml", &text).unwrap_err();
    assert_eq!(e.line, 23, "{e}");
    assert!(e.message.contains("expected an IP address"), "{e}");
    let text = with_client("    ping: {target: 10.244.1.5, interval: 1s}\n    udp: {target: default/dns:dns, interval: 10s}");
    let e = load_str("t.yaml", &text).unwrap_err();
    assert!(
        e.message.contains("exactly one of `udp`, `tcp` or `ping`"),
        "{e}"
    );
    let text = with_client("    ping: {target: 10.244.1.5, interval: 0s}");
    let e = load_str("t.yaml", &text).unwrap_err();
    assert!(e.message.contains("interval 0s"), "{e}");
}

#[test]
fn a_ping_is_answered_by_the_target_kernel_even_with_its_process_dead() {
    let text = with_client("    ping: {target: 10.244.1.5, interval: 1s, count: 5}").replace(
        "  - client: {name: c, sent: 6}",
        "  - client: {name: c, sent: 5, answered: 5}",
    ) + "events:\n  - at: 0s\n    oomKill: {pod: dns}\n";
    let sc = load_str("t.yaml", &text).unwrap();
    let r = Simulation::new(
        sc,
        RunOptions {
            record_timeline: true,
            ..RunOptions::default()
        },
    )
    .unwrap()
    .finish()
    .unwrap();
    assert!(r.results.iter().all(|x| x.passed), "{:#?}", r.results);
    let lines: Vec<String> = r.timeline.iter().map(|e| e.line()).collect();
    let sent: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("echo request"))
        .collect();
    assert_eq!(sent.len(), 5);
    // One socket: one identifier; sequence numbers from 1.
    let id = sent[0]
        .split("id=")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    assert!(
        sent.iter().all(|l| l.contains(&format!("id={id} "))),
        "{sent:?}"
    );
    assert!(sent[4].ends_with("seq=5"), "{}", sent[4]);
}

#[test]
fn a_ping_to_nowhere_times_out() {
    let text = with_client("    ping: {target: 10.244.1.77, interval: 1s, count: 3, timeout: 2s}")
        .replace(
            "  - client: {name: c, sent: 6}",
            "  - client: {name: c, sent: 3, answered: 0, timedOut: 3}",
        );
    let sc = load_str("t.yaml", &text).unwrap();
    let r = Simulation::new(sc, RunOptions::default())
        .unwrap()
        .finish()
        .unwrap();
    assert!(r.results.iter().all(|x| x.passed), "{:#?}", r.results);
}
