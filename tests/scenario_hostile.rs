//! Hostile scenario input, round two (issue 31): every duration field bounded by the longest
//! run, YAML aliases and bombs, impossible Kubernetes objects, each refused with its place.

use nfsim::scenario::load_str;

/// The smallest scenario that loads; the tests break one thing in it at a time.
const GOOD: &str = include_str!("fixtures/scenario/minimal.yaml");

fn err(text: &str) -> nfsim::scenario::ScenarioError {
    load_str("t.yaml", text).unwrap_err()
}

/// `GOOD` with `from` replaced by `to` (which must occur).
fn with(from: &str, to: &str) -> String {
    assert!(GOOD.contains(from), "{from}");
    GOOD.replace(from, to)
}

/// Longer than any run (MAX_DURATION is 168h): 5124095h is just under 2^64 ns.
const HUGE: &str = "5124095h";

/// Checks that the scenario `text` is refused for `field`'s duration with its line and a
/// column on it, and that the same field at exactly 168h loads.
fn refused_beyond_a_week(text: &str, field: &str, line: u64) {
    let e = err(text);
    assert_eq!(e.line, line, "{field}: {}", e.message);
    assert!(e.column > 1, "{field}: {}", e.message);
    assert!(
        e.message
            .starts_with(&format!("{field}: {HUGE} is longer than the longest run"))
            && e.message.contains("expected at most 168h"),
        "{field}: {}",
        e.message
    );
}

#[test]
fn every_client_duration_is_bounded_by_the_longest_run() {
    // jitter near 2^64 ns panicked in SimRng::below(0) once the run reached the client.
    for field in ["jitter", "timeout", "start", "stop", "interval"] {
        let text = with(
            "udp: {target: default/dns:dns, interval: 10s}",
            &format!("udp: {{target: default/dns:dns, interval: 10s, {field}: {HUGE}}}")
                .replace("interval: 10s, interval", "interval"),
        );
        refused_beyond_a_week(&text, field, 23);
    }
    for field in ["jitter", "connectTimeout", "requestTimeout"] {
        let text = with(
            "udp: {target: default/dns:dns, interval: 10s}",
            &format!("tcp: {{target: 10.244.1.5:53, interval: 10s, {field}: {HUGE}}}"),
        );
        refused_beyond_a_week(&text, field, 23);
    }
    for field in ["jitter", "timeout"] {
        let text = with(
            "udp: {target: default/dns:dns, interval: 10s}",
            &format!("ping: {{target: 10.244.1.5, interval: 10s, {field}: {HUGE}}}"),
        );
        refused_beyond_a_week(&text, field, 23);
    }
    let text = with(
        "udp: {target: default/dns:dns, interval: 10s}",
        &format!(
            "tcp: {{target: 10.244.1.5:53, interval: 10s, connection: {{keepAlive: true, pause: {{after: 1s, for: {HUGE}}}}}}}"
        ),
    );
    refused_beyond_a_week(&text, "for", 23);
}

#[test]
fn every_cluster_duration_is_bounded_by_the_longest_run() {
    let cases = [
        (
            "name: t\n",
            format!("name: t\nnetwork: {{latency: {HUGE}}}\n"),
            "latency",
            2,
        ),
        (
            "name: t\n",
            format!("name: t\ncontrolPlane: {{watchDelay: {HUGE}}}\n"),
            "watchDelay",
            2,
        ),
        (
            "name: t\n",
            format!("name: t\ncontrolPlane: {{endpointSliceDelay: {HUGE}}}\n"),
            "endpointSliceDelay",
            2,
        ),
        (
            "name: t\n",
            format!("name: t\nkubeProxy: {{syncPeriod: {HUGE}}}\n"),
            "syncPeriod",
            2,
        ),
        (
            "name: t\n",
            format!("name: t\nkubeProxy: {{minSyncPeriod: {HUGE}}}\n"),
            "minSyncPeriod",
            2,
        ),
        (
            "name: t\n",
            format!("name: t\nkubeProxy: {{cleanup: {{command: [x], timeout: {HUGE}}}}}\n"),
            "timeout",
            2,
        ),
        (
            "    labels: {app: dns}\n",
            format!("    labels: {{app: dns}}\n    terminationGracePeriod: {HUGE}\n"),
            "terminationGracePeriod",
            12,
        ),
        (
            "udpServer: {port: 53}",
            format!("udpServer: {{port: 53, serviceTime: {HUGE}}}"),
            "serviceTime",
            13,
        ),
    ];
    for (from, to, field, line) in cases {
        refused_beyond_a_week(&with(from, &to), field, line);
    }
    let e = err(&with(
        "    labels: {app: dns}\n",
        "    labels: {app: dns}\n    readinessProbe: {periodSeconds: 4294967295}\n",
    ));
    assert_eq!(e.line, 8, "{}", e.message);
    assert!(
        e.message
            .contains("periodSeconds 4294967295 is longer than the longest run")
            && e.message.contains("expected at most 604800"),
        "{}",
        e.message
    );
}

#[test]
fn every_event_and_expectation_duration_is_bounded_by_the_longest_run() {
    let event = |body: &str| {
        with(
            "expectations:\n",
            &format!("events:\n  - {body}\nexpectations:\n"),
        )
    };
    let cases = [
        (
            event(&format!(
                "at: {HUGE}\n    readiness: {{pod: dns, ready: false}}"
            )),
            "at",
            25,
        ),
        (
            event(&format!(
                "at: 1s\n    deletePod: {{pod: dns, gracePeriod: {HUGE}}}"
            )),
            "gracePeriod",
            26,
        ),
        (
            event(&format!(
                "at: 1s\n    deletePod: {{pod: dns, recreate: {{after: {HUGE}}}}}"
            )),
            "after",
            26,
        ),
        (
            event(&format!(
                "at: 1s\n    oomKill: {{pod: dns, restartAfter: {HUGE}}}"
            )),
            "restartAfter",
            26,
        ),
        (
            event(&format!(
                "at: 1s\n    rebootNode: {{node: n1, kubeProxyAfter: {HUGE}}}"
            )),
            "kubeProxyAfter",
            26,
        ),
        (
            event(&format!(
                "at: 1s\n    scale: {{selector: {{app: dns}}, replicas: 0, gracePeriod: {HUGE}}}"
            )),
            "gracePeriod",
            26,
        ),
        (
            with(
                "  - client: {name: c, sent: 6}",
                &format!("  - client: {{name: c, sent: 6, from: {HUGE}}}"),
            ),
            "from",
            25,
        ),
        (
            with(
                "  - client: {name: c, sent: 6}",
                &format!("  - client: {{name: c, sent: 6, to: {HUGE}}}"),
            ),
            "to",
            25,
        ),
        (
            with(
                "  - client: {name: c, sent: 6}",
                &format!("  - at: {HUGE}\n    client: {{name: c, sent: 6}}"),
            ),
            "at",
            25,
        ),
    ];
    for (text, field, line) in cases {
        refused_beyond_a_week(&text, field, line);
    }
}

#[test]
fn a_week_long_jitter_loads_and_runs() {
    // The longest accepted jitter runs: its draw (`jitter + 1` values) does not overflow.
    let text = with(
        "udp: {target: default/dns:dns, interval: 10s}",
        "udp: {target: default/dns:dns, interval: 10s, jitter: 168h}",
    )
    .replace(
        "  - client: {name: c, sent: 6}\n",
        "  - client: {name: c, sent: \">= 0\"}\n",
    );
    let sc = load_str("t.yaml", &text).unwrap();
    let mut c = nfsim::testkit::Cluster::from_scenario(sc).unwrap();
    c.run_until(sim_core::SimTime::from_secs(60)).unwrap();
}

#[test]
fn an_error_on_a_huge_line_shows_a_window_around_the_caret() {
    // The whole line was echoed: a 20 MB line put 20 MB on stderr.
    let pad = "ü".repeat(1_000_000);
    let text = with(
        "    udp: {target: default/dns:dns, interval: 10s}",
        &format!("    udp: {{target: \"{pad}\", interval: 10s, bogus: 1, other: \"{pad}\"}}"),
    );
    let e = err(&text);
    let shown = e.to_string();
    assert!(shown.len() < 1000, "{} bytes shown", shown.len());
    let lines: Vec<&str> = shown.lines().collect();
    let src = lines[2].split_once(" | ").unwrap().1;
    let caret = lines[3].split_once(" | ").unwrap().1;
    assert!(src.starts_with('…') && src.ends_with('…'), "{src}");
    let at: String = src.chars().skip(caret.len() - 1).take(5).collect();
    assert_eq!(at, "bogus", "{shown}");
}

#[test]
fn an_error_line_with_control_characters_is_shown_escaped() {
    let e = err(&with(
        "  - name: c\n",
        "  - name: c\n    bogus: \"\u{1b}[2J\"\n",
    ));
    let shown = e.to_string();
    assert!(!shown.contains('\u{1b}'), "{shown}");
    // An ordinary line is shown as it was.
    let e = err(&with("  - name: c\n", "  - name: c\n    bogus: 1\n"));
    assert!(
        e.to_string().ends_with("22 |     bogus: 1\n   |     ^"),
        "{e}"
    );
}

/// `GOOD` with `n` more Services, each with its own name and the first one's anchored spec.
fn services_sharing_one_anchor(n: usize) -> String {
    let mut svc = String::from(
        "services:\n  - metadata: {name: dns, namespace: default}\n    spec: &spec\n      selector: {app: dns}\n      ports: [{name: dns, protocol: UDP, port: 53}]\n",
    );
    for i in 0..n {
        svc.push_str(&format!(
            "  - metadata: {{name: s{i}, namespace: default}}\n    spec: *spec\n"
        ));
    }
    let (a, b) = (
        GOOD.find("services:").unwrap(),
        GOOD.find("clients:").unwrap(),
    );
    format!("{}{svc}{}", &GOOD[..a], &GOOD[b..])
}

#[test]
fn many_services_may_share_one_anchored_block() {
    // 199 aliases of one anchor were refused with a library dump
    // (`AliasAnchorRatio { aliases: 199, anchors: 1 }`).
    for n in [199, 2000] {
        let sc = load_str("t.yaml", &services_sharing_one_anchor(n)).unwrap();
        assert_eq!(sc.services.len(), n + 1);
    }
}

#[test]
fn a_billion_laughs_is_refused_in_words_at_its_place() {
    let mut laughs =
        String::from("        l0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for k in 1..10 {
        let refs = vec![format!("*a{}", k - 1); 9].join(", ");
        laughs.push_str(&format!("        l{k}: &a{k} [{refs}]\n"));
    }
    let text = with(
        "  - metadata: {name: dns, namespace: default}\n",
        &format!("  - metadata:\n      name: dns\n      namespace: default\n      managedFields:\n{laughs}"),
    );
    let e = err(&text);
    assert!((19..=28).contains(&e.line), "{e}");
    assert!(e.message.contains("YAML parser events"), "{}", e.message);
    assert!(!e.message.contains(" { "), "a library dump: {}", e.message);
}

#[test]
fn deep_nesting_is_refused_in_words() {
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let e = err(&with(
        "      clusterIP: 10.96.0.10\n",
        &format!("      clusterIP: 10.96.0.10\n      x: {deep}\n"),
    ));
    assert_eq!(e.line, 18, "{}", e.message);
    assert!(
        e.message.contains("nested") && e.message.contains("MAX_YAML_DEPTH"),
        "{}",
        e.message
    );
    // Block style, in a field kube-proxy does not read (read past, not refused as unknown).
    let deep = format!("{}1", "- ".repeat(100));
    let e = err(&with(
        "      clusterIP: 10.96.0.10\n",
        &format!("      clusterIP: 10.96.0.10\n      x:\n        {deep}\n"),
    ));
    assert_eq!(e.line, 19, "{}", e.message);
    assert!(
        e.message.contains("nested") && e.message.contains("MAX_YAML_DEPTH"),
        "{}",
        e.message
    );
}

#[test]
fn an_embedded_object_of_the_wrong_kind_or_version_is_refused() {
    // A Service written `kind: Pod` loaded as a Service.
    let e = err(&with(
        "  - metadata: {name: dns, namespace: default}\n",
        "  - kind: Pod\n    metadata: {name: dns, namespace: default}\n",
    ));
    assert_eq!(e.line, 15, "{}", e.message);
    assert!(
        e.message.contains("kind: \"Pod\": expected Service here"),
        "{}",
        e.message
    );
    let e = err(&with(
        "  - metadata: {name: dns, namespace: default}\n",
        "  - apiVersion: apps/v1\n    metadata: {name: dns, namespace: default}\n",
    ));
    assert!(
        e.message.contains("apiVersion: \"apps/v1\": expected v1"),
        "{}",
        e.message
    );
    // As kubectl prints it: fine.
    load_str(
        "t.yaml",
        &with(
            "  - metadata: {name: dns, namespace: default}\n",
            "  - apiVersion: v1\n    kind: Service\n    metadata: {name: dns, namespace: default}\n",
        ),
    )
    .unwrap();
}

#[test]
fn labels_and_selectors_kubernetes_rejects_are_refused() {
    // Each was accepted before.
    for (from, to, line, what) in [
        (
            "labels: {app: dns}",
            "labels: {app: \"-dns\"}",
            8,
            "label value \"-dns\"",
        ),
        (
            "labels: {app: dns}",
            "labels: {app: \"a b\"}",
            8,
            "label value \"a b\"",
        ),
        (
            "labels: {app: dns}",
            &format!("labels: {{app: {}}}", "d".repeat(64)),
            8,
            "label value of 64 characters: expected at most 63",
        ),
        (
            "labels: {app: dns}",
            "labels: {\"bad key\": dns}",
            8,
            "label key \"bad key\"",
        ),
        (
            "labels: {app: dns}",
            "labels: {\"Example.com/app\": dns}",
            8,
            "DNS-1123 subdomain",
        ),
        (
            "selector: {app: dns}",
            "selector: {app: \"dns!\"}",
            15,
            "spec.selector: app: label value \"dns!\"",
        ),
    ] {
        let e = err(&with(from, to));
        assert_eq!(e.line, line, "{to}: {}", e.message);
        assert!(e.message.contains(what), "{to}: {}", e.message);
    }
    let e = err(&with(
        "expectations:\n",
        "events:\n  - at: 1s\n    scale: {selector: {app: \"x y\"}, replicas: 2}\nexpectations:\n",
    ));
    assert_eq!(e.line, 26, "{}", e.message);
    assert!(
        e.message
            .contains("scale.selector: app: label value \"x y\""),
        "{}",
        e.message
    );
    // What Kubernetes takes loads: empty values, prefixed keys, `_` and `.` inside.
    load_str(
        "t.yaml",
        &with(
            "labels: {app: dns}",
            "labels: {app: dns, app.kubernetes.io/part-of: \"\", tier: a_b.c}",
        ),
    )
    .unwrap();
}
