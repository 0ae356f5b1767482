//! Hostile scenario input is refused at load time with a located error, never a panic: names
//! beyond Kubernetes' limits, durations beyond the longest run.

use nfsim::scenario::load_str;

/// The smallest scenario that loads (one node, a DNS pod and Service, a client); the tests
/// break one thing in it at a time.
const GOOD: &str = include_str!("fixtures/scenario/minimal.yaml");

fn err(text: &str) -> nfsim::scenario::ScenarioError {
    load_str("t.yaml", text).unwrap_err()
}

#[test]
fn the_good_file_loads() {
    load_str("t.yaml", GOOD).unwrap();
}

#[test]
fn a_65536_character_pod_name_is_refused_with_its_place() {
    let long = "a".repeat(65_536);
    let e = err(&GOOD.replace("  - name: dns\n", &format!("  - name: {long}\n")));
    assert_eq!((e.line, e.column), (8, 11), "{}", e.message);
    assert!(
        e.message.contains("65536 characters long") && e.message.contains("at most 253"),
        "{}",
        e.message
    );
    assert!(e.message.len() < 300, "the name is not repeated whole");
}

#[test]
fn pod_names_and_namespaces_follow_kubernetes() {
    let e = err(&GOOD.replace("  - name: dns\n", "  - name: Dns_1\n"));
    assert_eq!(e.line, 8);
    assert!(e.message.contains("DNS-1123 subdomain"), "{}", e.message);
    let e = err(&GOOD.replace(
        "    node: n1\n    ip",
        "    namespace: a/b\n    node: n1\n    ip",
    ));
    assert_eq!(e.line, 8);
    assert!(
        e.message
            .contains("namespace \"a/b\" is not a DNS-1123 label"),
        "{}",
        e.message
    );
    let e = err(&GOOD.replace(
        "    node: n1\n    ip",
        &format!("    namespace: {}\n    node: n1\n    ip", "n".repeat(64)),
    ));
    assert!(e.message.contains("at most 63"), "{}", e.message);
}

#[test]
fn node_and_service_names_follow_kubernetes() {
    let e = err(&GOOD.replace("  - name: n1\n", "  - name: \"n1\\u0007\"\n"));
    assert_eq!(e.line, 4);
    assert!(e.message.contains("node name"), "{}", e.message);
    let e = err(&GOOD.replace("{name: dns, namespace", "{name: 9dns, namespace"));
    assert!(e.message.contains("Service name"), "{}", e.message);
}

#[test]
fn client_names_refuse_slashes_control_characters_and_great_lengths() {
    let e = err(&GOOD.replace("  - name: c\n", "  - name: a/b\n"));
    assert_eq!((e.line, e.column), (21, 11));
    assert!(e.message.contains("holds '/'"), "{}", e.message);
    let e = err(&GOOD.replace("  - name: c\n", "  - name: \"c\\e[2J\"\n"));
    assert!(e.message.contains("control character"), "{}", e.message);
    let e = err(&GOOD.replace(
        "  - name: c\n",
        &format!("  - name: {}\n", "c".repeat(65_536)),
    ));
    assert!(e.message.contains("65536 characters long"), "{}", e.message);
}

#[test]
fn a_duration_beyond_seven_days_is_refused() {
    let e = err(&GOOD.replace("duration: 1m", "duration: 5000000h"));
    assert_eq!(e.line, 2);
    assert!(
        e.message.contains("expected at most 168h") && e.message.contains("MAX_DURATION"),
        "{}",
        e.message
    );
    load_str("t.yaml", &GOOD.replace("duration: 1m", "duration: 168h")).unwrap();
}

fn msg(text: &str) -> (u64, u64, String) {
    let e = err(text);
    (e.line, e.column, e.message)
}

#[test]
fn impossible_probe_and_addresses_are_refused_at_load_time() {
    let (l, _, m) = msg(&GOOD.replace(
        "    labels: {app: dns}\n",
        "    labels: {app: dns}\n    readinessProbe: {periodSeconds: 0}\n",
    ));
    assert_eq!(l, 8);
    assert!(
        m.contains("readinessProbe.periodSeconds 0: expected at least 1"),
        "{m}"
    );
    for (addr, why) in [
        ("0.0.0.0", "unspecified"),
        ("255.255.255.255", "broadcast"),
        ("127.0.0.1", "loopback"),
        ("224.0.0.1", "multicast"),
    ] {
        let (l, c, m) = msg(&GOOD.replace("address: 192.168.0.1", &format!("address: {addr}")));
        assert_eq!((l, c), (5, 14), "{m}");
        assert!(m.contains(why), "{addr}: {m}");
    }
    let two_nodes = GOOD.replace(
        "    podCIDR: 10.244.1.0/24\n",
        "    podCIDR: 10.244.1.0/24\n  - name: n2\n    address: 10.244.1.200\n    podCIDR: 10.244.2.0/24\n",
    );
    let (l, _, m) = msg(&two_nodes);
    assert_eq!(l, 8);
    assert!(m.contains("inside node n1's pod CIDR"), "{m}");
}

#[test]
fn pod_cidr_host_bits_and_broadcast_pod_ips_are_refused() {
    let (l, c, m) = msg(&GOOD.replace("podCIDR: 10.244.1.0/24", "podCIDR: 10.244.1.7/24"));
    assert_eq!((l, c), (6, 14));
    assert!(
        m.contains("has host bits set: expected 10.244.1.0/24"),
        "{m}"
    );
    let (l, _, m) = msg(&GOOD.replace("ip: 10.244.1.5", "ip: 10.244.1.255"));
    assert_eq!(l, 10);
    assert!(m.contains("broadcast address"), "{m}");
}

#[test]
fn repeated_service_ports_and_shared_fixed_source_ports_are_refused() {
    let (_, _, m) = msg(&GOOD.replace(
        "ports: [{name: dns, protocol: UDP, port: 53}]",
        "ports: [{name: dns, protocol: UDP, port: 53}, {name: dns2, protocol: UDP, port: 53}]",
    ));
    assert!(m.contains("spec.ports[1] repeats port 53"), "{m}");
    // The same port over TCP is another socket: fine.
    load_str(
        "t.yaml",
        &GOOD.replace(
            "ports: [{name: dns, protocol: UDP, port: 53}]",
            "ports: [{name: dns, protocol: UDP, port: 53}, {name: dnst, protocol: TCP, port: 53}]",
        )
        .replace("default/dns:dns,", "default/dns:dns, sourcePort: 40000,"),
    )
    .unwrap();
    let twice = GOOD
        .replace("default/dns:dns,", "default/dns:dns, sourcePort: 40000,")
        .replace(
            "expectations:",
            "  - name: d\n    node: n1\n    udp: {target: default/dns:dns, sourcePort: 40000, interval: 10s}\nexpectations:",
        );
    let (l, _, m) = msg(&twice);
    assert_eq!(l, 24);
    assert!(m.contains("EADDRINUSE"), "{m}");
}

#[test]
fn an_unknown_tcp_state_is_refused_at_load_time() {
    let text = GOOD.replace(
        "  - client: {name: c, sent: 6}\n",
        "  - client: {name: c, sent: 6}\n  - conntrack: {node: n1, state: DANCING}\n",
    );
    let (l, _, m) = msg(&text);
    assert_eq!(l, 26, "{m}");
    assert!(
        m.contains("unknown TCP state \"DANCING\"") && m.contains("ESTABLISHED"),
        "{m}"
    );
}

#[test]
fn yaml_errors_speak_of_the_scenario_not_of_the_reader() {
    let (l, _, m) = msg(&GOOD.replace("duration: 1m\n", "duration: 1m\nname: u\n"));
    assert_eq!(l, 3);
    assert_eq!(
        m,
        "duplicate key name: each key may appear once in a mapping"
    );
    let (l, c, m) = msg(&GOOD.replace("name: t\n", ""));
    assert_eq!((l, c), (1, 1));
    assert!(
        m.contains("missing field `name`: every scenario needs `name`"),
        "{m}"
    );
    let (_, _, m) = msg(&GOOD.replace("nodes:\n", "nodes: 5\nxnodes:\n"));
    assert!(
        m.contains("expected a list") && m.contains("found `5`"),
        "{m}"
    );
    let (_, _, m) = msg(&GOOD.replace("udpServer: {port: 53}", "udpServer: {port: 70000}"));
    assert_eq!(m, "port: `70000` is not an integer from 0 to 65535");
    let (_, _, m) = msg(&GOOD.replace("ip: 10.244.1.5", "ip: 10.244.1.500"));
    assert!(m.contains("ip: `10.244.1.500` is not an IP address"), "{m}");
    let (_, _, m) = msg(&GOOD.replace("duration: 1m\n", "duration: 1m\nname: u\n"));
    assert!(
        !m.contains("DuplicateKeyPolicy") && !m.contains("Options"),
        "{m}"
    );
}

#[test]
fn expected_one_of_never_ends_in_nothing() {
    let (_, _, m) = msg(&GOOD.replace("    node: n1\n    udp:", "    host: h1\n    udp:"));
    assert!(m.contains("no host is defined"), "{m}");
    let (_, _, m) = msg(&GOOD.replace("client: {name: c, sent: 6}", "client: {name: zz, sent: 6}").replace("clients:\n  - name: c\n    node: n1\n    udp: {target: default/dns:dns, interval: 10s}\n", ""));
    assert!(m.contains("no client is defined"), "{m}");
}

#[test]
fn an_endless_scenario_file_is_refused_at_64_mib() {
    if !std::path::Path::new("/dev/zero").exists() {
        println!("skipped: an_endless_scenario_file_is_refused_at_64_mib: no /dev/zero");
        return;
    }
    let e = nfsim::scenario::load_file("/dev/zero").unwrap_err();
    assert!(
        e.message.contains("larger than 64 MiB") && e.message.contains("MAX_SCENARIO_BYTES"),
        "{}",
        e.message
    );
}

#[test]
fn a_service_selecting_no_pod_is_a_warning_with_its_place() {
    assert!(load_str("t.yaml", GOOD).unwrap().warnings.is_empty());
    let sc = load_str(
        "t.yaml",
        &GOOD.replace("selector: {app: dns}", "selector: {app: dnz}"),
    )
    .unwrap();
    let w: Vec<String> = sc.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].starts_with("t.yaml:15:5: warning: Service default/dns selects no pod")
            && w[0].contains("has the labels app=dnz"),
        "{w:?}"
    );
    // A pod in another namespace with the labels is named.
    let sc = load_str(
        "t.yaml",
        &GOOD.replace(
            "    node: n1\n    ip",
            "    namespace: other\n    node: n1\n    ip",
        ),
    )
    .unwrap();
    assert_eq!(sc.warnings.len(), 1);
    assert!(
        sc.warnings[0]
            .message
            .contains("other/dns in another namespace"),
        "{}",
        sc.warnings[0].message
    );
    // A pod an event creates counts; a Service an event creates is checked too, once.
    let later = GOOD.replace("selector: {app: dns}", "selector: {app: late}").replace(
        "expectations:",
        "events:\n  - at: 30s\n    createPod: {name: late, node: n1, ip: 10.244.1.6, labels: {app: late}}\n  - at: 40s\n    createService:\n      metadata: {name: nobody, namespace: default}\n      spec: {clusterIP: 10.96.0.11, selector: {app: nobody}, ports: [{port: 80}]}\nexpectations:",
    );
    let sc = load_str("t.yaml", &later).unwrap();
    let w: Vec<String> = sc.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("Service default/nobody selects no pod"),
        "{w:?}"
    );
    // Without a selector (endpoints managed by hand) there is nothing to match.
    let sc = load_str("t.yaml", &GOOD.replace("      selector: {app: dns}\n", "")).unwrap();
    assert!(sc.warnings.is_empty());
}

#[test]
fn service_port_names_are_dns_1123_labels() {
    for bad in ["\"d\\u0007ns\"", "DNS", "dns_1", "-dns"] {
        let e = err(&GOOD.replace(
            "{name: dns, protocol: UDP, port: 53}",
            &format!("{{name: {bad}, protocol: UDP, port: 53}}"),
        ));
        assert_eq!(e.line, 15, "{bad}: {}", e.message);
        assert!(
            e.message.contains("spec.ports[0].name") && e.message.contains("DNS-1123 label"),
            "{bad}: {}",
            e.message
        );
        assert!(!e.message.contains('\u{7}'), "shown escaped: {}", e.message);
    }
}
