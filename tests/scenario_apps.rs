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
        e.message
            .contains("exactly one of `udp`, `tcp`, `dig` or `ping`"),
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

#[test]
fn chi_square_p_values_match_the_closed_form_and_flag_a_skewed_spread() {
    use nfsim::cluster::sim::chi_square_uniform;
    // Two degrees of freedom: p = exp(-chi2 / 2).
    let (chi2, p) = chi_square_uniform(&[98, 99, 103]);
    assert!(
        (chi2 - 0.14).abs() < 1e-9 && (p - (-0.07f64).exp()).abs() < 1e-9,
        "{chi2} {p}"
    );
    // One degree of freedom at the 0.001 critical value 10.828.
    let (chi2, p) = chi_square_uniform(&[0, 0]);
    assert_eq!((chi2, p), (0.0, 1.0));
    let (_, p) = chi_square_uniform(&[200, 100]);
    assert!(p < 0.001, "{p}");
    let (_, p) = chi_square_uniform(&[160, 140]);
    assert!(p > 0.2, "{p}");
}

#[test]
fn endpoints_checks_fail_on_a_skewed_share_and_refuse_bad_ranges() {
    let base = GOOD.replace(
        "  - client: {name: c, sent: 6}",
        "  - endpoints: {client: c, share: {dns: SHARE}}",
    );
    let run = |share: &str| {
        let sc = load_str("t.yaml", &base.replace("SHARE", share)).unwrap();
        Simulation::new(sc, RunOptions::default())
            .unwrap()
            .finish()
            .unwrap()
            .results
    };
    assert!(run("\"0.99..1\"")[0].passed);
    let r = run("\"<= 0.5\"");
    assert!(
        !r[0].passed && r[0].detail.contains("expected <= 0.5"),
        "{r:?}"
    );
    let e = load_str("t.yaml", &base.replace("SHARE", "\"0.3..1.7\"")).unwrap_err();
    assert_eq!(e.line, 25, "{e}");
    assert!(e.message.contains("between 0 and 1"), "{e}");
    let e = load_str("t.yaml", &base.replace("{dns: SHARE}", "{}")).unwrap_err();
    assert!(e.message.contains("`share` or `uniform: true`"), "{e}");
}

/// A one-way sender (`oneWay: true`) never reads the server's answers: a send counts as
/// answered when it reaches the listening server, lost (timed out) when it vanishes, refused
/// when an ICMP error about it comes back; it takes no `retries`.
#[test]
fn a_one_way_sender_counts_deliveries_not_answers() {
    let run = |client: &str, expect: &str| {
        let text = with_client(client).replace("  - client: {name: c, sent: 6}", expect);
        let sc = load_str("t.yaml", &text).unwrap_or_else(|e| panic!("{e}"));
        let r = Simulation::new(sc, RunOptions::default())
            .unwrap()
            .finish()
            .unwrap();
        assert!(r.results.iter().all(|x| x.passed), "{:#?}", r.results);
    };
    // The server answers, the sender never reads it; every send is delivered.
    run(
        "    udp: {target: default/dns:dns, interval: 10s, sourcePort: 40000, oneWay: true}",
        "  - client: {name: c, sent: 6, answered: 6, failed: 0}",
    );
    // To an address where nothing is: every send is lost.
    run(
        "    udp: {target: 10.244.1.77:53, interval: 10s, sourcePort: 40000, oneWay: true, timeout: 1s}",
        "  - client: {name: c, sent: 6, answered: 0, timedOut: 6}",
    );
    // To a closed port on the pod: port unreachable, refused.
    run(
        "    udp: {target: 10.244.1.5:54, interval: 10s, sourcePort: 40000, oneWay: true}",
        "  - client: {name: c, sent: 6, refused: 6}",
    );
    let text =
        with_client("    udp: {target: default/dns:dns, interval: 10s, oneWay: true, retries: 2}");
    let e = load_str("t.yaml", &text).unwrap_err();
    assert_eq!(e.line, 23, "{e}");
    assert!(e.message.contains("a one-way sender never retries"), "{e}");
}
