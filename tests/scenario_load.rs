//! Bad scenario files are refused with the file, line and column, and what was expected.

use nfsim::scenario::load_str;

/// The smallest scenario that loads (one node, a DNS pod and Service, a client); the tests
/// break one thing in it at a time.
const GOOD: &str = include_str!("fixtures/scenario/minimal.yaml");

fn err(text: &str) -> nfsim::scenario::ScenarioError {
    load_str("t.yaml", text).unwrap_err()
}

#[test]
fn the_good_file_loads_and_resolves_the_service_target() {
    let sc = load_str("t.yaml", GOOD).unwrap();
    assert_eq!(sc.clients[0].target.to_string(), "10.96.0.10:53");
    assert_eq!(sc.seed, 1);
}

#[test]
fn unknown_node_names_the_place_and_the_choices() {
    let e = err(&GOOD.replace("    node: n1\n    ip", "    node: n9\n    ip"));
    assert_eq!((e.line, e.column), (9, 11), "{e}");
    assert!(
        e.message.contains("unknown node \"n9\"") && e.message.contains("n1"),
        "{e}"
    );
    let shown = e.to_string();
    assert!(shown.starts_with("t.yaml:9:11: "), "{shown}");
    assert!(shown.contains("node: n9") && shown.contains('^'), "{shown}");
}

#[test]
fn pod_ip_outside_the_node_pod_cidr() {
    let e = err(&GOOD.replace("ip: 10.244.1.5", "ip: 10.244.7.5"));
    assert_eq!(e.line, 10);
    assert!(
        e.message
            .contains("outside node n1's pod CIDR 10.244.1.0/24"),
        "{e}"
    );
}

#[test]
fn duplicate_pod_names() {
    let dup = GOOD.replace(
        "services:",
        "  - name: dns\n    node: n1\n    ip: 10.244.1.6\nservices:",
    );
    let e = err(&dup);
    assert!(e.message.contains("duplicate pod default/dns"), "{e}");
    assert_eq!(e.line, 14);
}

#[test]
fn a_client_targeting_nothing() {
    let e = err(&GOOD.replace("default/dns:dns", "default/nope:dns"));
    assert!(
        e.message
            .contains("target Service \"default/nope\" is not defined"),
        "{e}"
    );
    assert_eq!(e.line, 23);
    let e = err(&GOOD.replace("default/dns:dns", "default/dns:http"));
    assert!(e.message.contains("no port named \"http\""), "{e}");
}

#[test]
fn bad_durations_and_unknown_fields_come_from_the_yaml_reader_with_places() {
    let e = err(&GOOD.replace("duration: 1m", "duration: 1 minute"));
    assert_eq!(e.line, 2, "{e}");
    assert!(
        e.message.contains("unit") || e.message.contains("duration"),
        "{e}"
    );
    let e = err(&GOOD.replace("interval: 10s", "intervall: 10s"));
    assert_eq!((e.line, e.column), (23, 36), "{e}");
    assert!(e.message.contains("unknown field `intervall`"), "{e}");
}

#[test]
fn semantic_errors_for_events_and_expectations() {
    let e = err(&format!(
        "{GOOD}events:\n  - at: 2m\n    oomKill: {{pod: dns}}\n"
    ));
    assert!(e.message.contains("after the end of the run"), "{e}");
    let e = err(&format!(
        "{GOOD}events:\n  - at: 10s\n    oomKill: {{pod: ghost}}\n"
    ));
    assert!(e.message.contains("unknown pod \"ghost\""), "{e}");
    let e = err(&GOOD.replace("client: {name: c, sent: 6}", "client: {name: d, sent: 6}"));
    assert!(e.message.contains("unknown client \"d\""), "{e}");
    let e = err(&GOOD.replace("release", "x").replace(
        "expectations:",
        "kubeProxy: {release: v1.38}\nexpectations:",
    ));
    assert!(
        e.message.contains("unknown release \"v1.38\"") && e.message.contains("v1.31-fixed"),
        "{e}"
    );
    let e = err(&GOOD.replace(
        "expectations:",
        "sysctls: {net.netfilter.nf_conntrack_udp_timeot: 5}\nexpectations:",
    ));
    assert!(
        e.message
            .contains("did you mean net.netfilter.nf_conntrack_udp_timeout"),
        "{e}"
    );
}
