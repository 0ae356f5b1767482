//! Hostile scenario input is refused at load time with a located error, never a panic: names
//! beyond Kubernetes' limits, durations beyond the longest run.

use nfsim::scenario::load_str;

const GOOD: &str = r#"name: t
duration: 1m
nodes:
  - name: n1
    address: 192.168.0.1
    podCIDR: 10.244.1.0/24
pods:
  - name: dns
    node: n1
    ip: 10.244.1.5
    labels: {app: dns}
    apps:
      - udpServer: {port: 53}
services:
  - metadata: {name: dns, namespace: default}
    spec:
      clusterIP: 10.96.0.10
      selector: {app: dns}
      ports: [{name: dns, protocol: UDP, port: 53}]
clients:
  - name: c
    node: n1
    udp: {target: default/dns:dns, interval: 10s}
expectations:
  - client: {name: c, sent: 6}
"#;

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
