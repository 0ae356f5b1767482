//! ICMP errors are rate limited per destination by the kernel that sends them
//! (`icmp_ratelimit`: a burst of 6, then one a second): a client hammering a closed UDP port
//! of a pod hears "port unreachable" for six queries, then mostly silence.

use nfsim::cluster::sim::{RunOptions, Simulation};
use nfsim::scenario::load_str;

const SCENARIO: &str = r#"
name: icmp-ratelimit
seed: 1
duration: 3s
network:
  latency: 100us
nodes:
  - name: node-1
    address: 192.168.0.11
    podCIDR: 10.244.1.0/24
pods:
  - name: closed
    namespace: default
    labels: {app: closed}
    node: node-1
    ip: 10.244.1.5
  - name: client
    namespace: default
    labels: {app: client}
    node: node-1
    ip: 10.244.1.9
services:
  - apiVersion: v1
    kind: Service
    metadata: {name: closed, namespace: default}
    spec:
      clusterIP: 10.96.0.20
      selector: {app: closed}
      ports:
        - {name: dns, protocol: UDP, port: 53, targetPort: 53}
kubeProxy:
  release: v1.32.0
clients:
  - name: hammer
    pod: client
    udp:
      target: default/closed:dns
      interval: 100ms
      timeout: 50ms
      connected: true
expectations:
  - name: the first second, a burst of six errors
    client: {name: hammer, from: 0s, to: 1s, sent: 10, refused: 6, timedOut: 4}
  - name: then one error a second
    client: {name: hammer, from: 1s, to: 2s, sent: 10, refused: 1, timedOut: 9}
"#;

#[test]
fn a_closed_port_answers_a_burst_of_six_then_one_a_second() {
    let sc = load_str("icmp-ratelimit.yaml", SCENARIO).expect("scenario loads");
    let opts = RunOptions {
        record_timeline: true,
        conntrack_events: false,
        progress: None,
    };
    let r = Simulation::new(sc, opts)
        .expect("builds")
        .finish()
        .expect("runs");
    let report: Vec<String> = r.results.iter().map(|x| format!("{x:?}")).collect();
    assert!(r.passed(), "{}\n{report:#?}", r.summary);
}

/// A Service without endpoints: the node's kube-proxy rules REJECT, and it is the node's
/// kernel that limits the answers; `net.ipv4.icmp_ratelimit: 0` on the node lifts it.
fn no_endpoints(node_sysctls: &str, refused_first_second: u32) -> String {
    SCENARIO
        .replace("selector: {app: closed}", "selector: {app: nobody}")
        .replace(
            "    podCIDR: 10.244.1.0/24\n",
            &format!("    podCIDR: 10.244.1.0/24\n{node_sysctls}"),
        )
        .replace(
            "sent: 10, refused: 6, timedOut: 4",
            &format!(
                "sent: 10, refused: {refused_first_second}, timedOut: {}",
                10 - refused_first_second
            ),
        )
        .replace(
            "sent: 10, refused: 1, timedOut: 9",
            if refused_first_second == 10 {
                "sent: 10, refused: 10, timedOut: 0"
            } else {
                "sent: 10, refused: 1, timedOut: 9"
            },
        )
}

#[test]
fn a_service_without_endpoints_is_refused_at_the_node_rate_and_the_node_sysctl_lifts_it() {
    let opts = || RunOptions {
        record_timeline: false,
        conntrack_events: false,
        progress: None,
    };
    for (sysctls, refused) in [
        ("", 6),
        ("    sysctls:\n      net.ipv4.icmp_ratelimit: 0\n", 10),
    ] {
        let text = no_endpoints(sysctls, refused);
        let sc = load_str("no-endpoints.yaml", &text).expect("scenario loads");
        let r = Simulation::new(sc, opts())
            .expect("builds")
            .finish()
            .expect("runs");
        let report: Vec<String> = r.results.iter().map(|x| format!("{x:?}")).collect();
        assert!(r.passed(), "{sysctls}\n{}\n{report:#?}", r.summary);
    }
}

#[test]
fn an_unknown_or_out_of_range_sysctl_is_refused_with_its_line() {
    let bad = SCENARIO.replace(
        "    podCIDR: 10.244.1.0/24\n",
        "    podCIDR: 10.244.1.0/24\n    sysctls:\n      net.ipv4.icmp_ratelimit: 9999999999\n",
    );
    let e = load_str("bad.yaml", &bad).unwrap_err().to_string();
    assert!(e.contains("bad.yaml") && e.contains("out of range"), "{e}");
    let bad = SCENARIO.replace(
        "    podCIDR: 10.244.1.0/24\n",
        "    podCIDR: 10.244.1.0/24\n    sysctls:\n      net.ipv4.icmp_rate: 5\n",
    );
    let e = load_str("bad.yaml", &bad).unwrap_err().to_string();
    assert!(
        e.contains("unknown sysctl") && e.contains("icmp_ratelimit"),
        "{e}"
    );
}
