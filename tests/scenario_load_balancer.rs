//! The cloud load balancer in front of an `externalTrafficPolicy: Local` Service: it checks
//! each node's `healthCheckNodePort`, where kube-proxy's health server answers by the node's
//! ready local endpoints, and sends new connections only to the nodes that pass
//! (docs/kube-proxy-model.md §13; `scenarios/etp-local-lb-health.yaml`).

#[path = "support/scenario.rs"]
mod scenario_run;

use nfsim::cluster::sim::RunResult;
use nfsim::scenario::{load_file, load_str};
use scenario_run::{run_scenario, run_text};

fn shipped() -> String {
    format!(
        "{}/scenarios/etp-local-lb-health.yaml",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn run_file(path: &str) -> RunResult {
    run_scenario(load_file(path).unwrap(), false)
}

fn run_str(yaml: &str) -> RunResult {
    run_text("t.yaml", yaml, false)
}

/// The timeline's load-balancer lines.
fn lb_lines(r: &RunResult) -> Vec<String> {
    r.timeline
        .iter()
        .map(|e| e.line())
        .filter(|l| l.contains("load balancer "))
        .collect()
}

fn failed(r: &RunResult) -> Vec<String> {
    r.results
        .iter()
        .filter(|x| !x.passed)
        .map(|x| format!("{}: {}", x.name, x.detail))
        .collect()
}

#[test]
fn the_load_balancer_feeds_a_node_without_local_endpoints_until_its_third_failed_check() {
    let r = run_file(&shipped());
    assert_eq!(
        lb_lines(&r),
        [
            "00:00:00.000  load balancer default/web: node-1 :32000/healthz answers 200 (localEndpoints 1)",
            "00:00:00.000  load balancer default/web: node-1 HEALTHY (1 check passed in a row, healthyThreshold 1); new connections go to node-1",
            "00:00:00.000  load balancer default/web: node-2 :32000/healthz answers 200 (localEndpoints 1)",
            "00:00:00.000  load balancer default/web: node-2 HEALTHY (1 check passed in a row, healthyThreshold 1); new connections go to node-1, node-2",
            "00:00:00.000  load balancer default/web: node-3 :32000/healthz answers 503 (localEndpoints 0)",
            // node-1's sync at 1:01.1 left it no local endpoint: the check at 1:04 says so, the
            // ones at 1:12 and 1:20 too, and the third turns it unhealthy.
            "00:01:04.000  load balancer default/web: node-1 :32000/healthz answers 503 (localEndpoints 0)",
            "00:01:20.000  load balancer default/web: node-1 UNHEALTHY (3 checks failed in a row, unhealthyThreshold 3); new connections go to node-2",
        ]
    );
    // Meanwhile node-1 drops what it is sent: kube-proxy's rule for a Local Service without
    // local endpoints.
    let dropped_on_node_1 = r
        .timeline
        .iter()
        .map(|e| e.line())
        .filter(|l| l.contains("dropped by filter FORWARD on node-1"))
        .count();
    assert!(dropped_on_node_1 > 0);
    assert!(failed(&r).is_empty(), "{:#?}", failed(&r));
    assert_eq!(r.results.len(), 4);
}

/// The shipped scenario with `extra` put in before `clients:`.
fn shipped_with(extra: &str) -> String {
    let text = std::fs::read_to_string(shipped()).unwrap();
    let (head, tail) = text.split_once("clients:\n").unwrap();
    let (clients, _) = tail.split_once("expectations:\n").unwrap();
    format!("{head}{extra}clients:\n{clients}")
}

#[test]
fn a_stopped_kube_proxy_refuses_the_check_and_its_node_turns_unhealthy() {
    let yaml = shipped_with("").replace(
        "events:\n  - at: 1m\n    deletePod: {pod: web-a}\n",
        "events:\n  - at: 1m\n    kubeProxy: {node: node-2, action: stop}\n",
    );
    let r = run_str(&yaml);
    let lines = lb_lines(&r);
    let from_1m: Vec<&str> = lines
        .iter()
        .map(String::as_str)
        .filter(|l| l >= &"00:01")
        .collect();
    assert_eq!(
        from_1m,
        [
            "00:01:04.000  load balancer default/web: node-2 :32000/healthz refuses the connection (kube-proxy is not running)",
            "00:01:20.000  load balancer default/web: node-2 UNHEALTHY (3 checks failed in a row, unhealthyThreshold 3); new connections go to node-1",
        ]
    );
}

const UDP: &str = "name: udp-lb
duration: 1m
nodes:
  - {name: node-1, address: 192.168.0.11, podCIDR: 10.244.1.0/24}
  - {name: node-2, address: 192.168.0.12, podCIDR: 10.244.2.0/24}
hosts:
  - {name: outside, address: 203.0.113.7}
pods:
  - {name: dns-a, labels: {app: dns}, node: node-1, ip: 10.244.1.5, termination: {onSigterm: exit}, apps: [{udpServer: {port: 53}}]}
  - {name: dns-b, labels: {app: dns}, node: node-2, ip: 10.244.2.5, apps: [{udpServer: {port: 53}}]}
services:
  - metadata: {name: dns}
    spec:
      type: LoadBalancer
      clusterIP: 10.96.0.53
      selector: {app: dns}
      externalTrafficPolicy: Local
      healthCheckNodePort: 32053
      ports: [{protocol: UDP, port: 53, nodePort: 30053}]
    status: {loadBalancer: {ingress: [{ip: 198.51.100.53}]}}
clients:
  - name: q
    host: outside
    udp: {target: 198.51.100.53:53, interval: 1s, sourcePort: SPORT, timeout: 500ms, start: 10s}
events:
  - {at: 30s, deletePod: {pod: dns-a}}
";

#[test]
fn a_udp_flow_leaves_the_node_that_turned_unhealthy() {
    // Find the source port whose one flow the load balancer puts on node-1.
    let (r, hits) = (5000..5020)
        .map(|port| {
            let r = run_str(&UDP.replace("SPORT", &port.to_string()));
            let on_1 = r
                .timeline
                .iter()
                .any(|e| e.line().contains("DNAT'd on node-1"));
            (r, on_1)
        })
        .find(|(_, on_1)| *on_1)
        .expect("some port's flow goes to node-1");
    assert!(hits);
    let lines: Vec<String> = r.timeline.iter().map(|e| e.line()).collect();
    // Until node-1 is unhealthy (3 checks after its sync at 31.1 s: 48 s) the flow stays on
    // it and times out; from then on it goes to node-2 (UDP does not persist on an
    // unhealthy backend) and is answered.
    let unhealthy = lines
        .iter()
        .find(|l| l.contains("node-1 UNHEALTHY"))
        .expect("node-1 turns unhealthy");
    assert!(unhealthy.starts_with("00:00:48.000"), "{unhealthy}");
    let q = &r.clients[0];
    assert!(q.timed_out > 0, "queries to node-1 in the window time out");
    // (The query sent at 48 s, just before the verdict, still went to node-1.)
    let after: Vec<&String> = lines
        .iter()
        .filter(|l| {
            l.as_str() > "00:00:49" && (l.contains("answered by") || l.contains("TIMED OUT"))
        })
        .collect();
    assert!(!after.is_empty());
    assert!(
        after.iter().all(|l| l.contains("answered by")),
        "{after:#?}"
    );
}

#[test]
fn a_terminating_endpoint_fails_the_check_while_it_serves_so_a_long_lameduck_drains_the_node() {
    // web-a keeps serving for 25 s after SIGTERM: kube-proxy on node-1 still sends it the
    // load balancer's connections (its serving-terminating fallback), but the health server
    // counts only ready endpoints and answers 503 from the first sync after the deletion. The
    // node is unhealthy (1:20) before web-a exits (1:25): no connection fails.
    let yaml = std::fs::read_to_string(shipped()).unwrap().replace(
        "termination: {onSigterm: exit}",
        "termination: {onSigterm: lameduck, lameduck: 25s}",
    );
    let r = run_str(&yaml);
    let lines = lb_lines(&r);
    assert!(
        lines.contains(&"00:01:04.000  load balancer default/web: node-1 :32000/healthz answers 503 (localEndpoints 0)".to_string()),
        "{lines:#?}"
    );
    assert!(lines
        .iter()
        .any(|l| l.starts_with("00:01:20.000") && l.contains("node-1 UNHEALTHY")));
    let served_by_a_while_terminating = r
        .timeline
        .iter()
        .map(|e| e.line())
        .filter(|l| {
            l.as_str() > "00:01:01.2"
                && l.contains("DNAT'd on node-1: 198.51.100.10:80 -> 10.244.1.5:8080")
        })
        .count();
    assert!(served_by_a_while_terminating > 0);
    let browser = &r.clients[0];
    assert_eq!((browser.sent, browser.failed), (90, 0));
}

#[test]
fn a_faster_health_check_shortens_the_window() {
    // Checks every 2 s, unhealthy after 2 failures: node-1 fails at 1:02 and 1:04 (its sync
    // at 1:01.1 came first) and is steered away from at 1:04 instead of 1:20.
    let yaml = std::fs::read_to_string(shipped()).unwrap().replace(
        "healthCheck: {interval: 8s, timeout: 1s, healthyThreshold: 1, unhealthyThreshold: 3}",
        "healthCheck: {interval: 2s, timeout: 1s, unhealthyThreshold: 2}",
    );
    assert!(yaml.contains("interval: 2s"));
    let r = run_str(&yaml);
    let from_1m: Vec<String> = lb_lines(&r)
        .into_iter()
        .filter(|l| l.as_str() >= "00:01")
        .collect();
    assert_eq!(
        from_1m,
        [
            "00:01:02.000  load balancer default/web: node-1 :32000/healthz answers 503 (localEndpoints 0)",
            "00:01:04.000  load balancer default/web: node-1 UNHEALTHY (2 checks failed in a row, unhealthyThreshold 2); new connections go to node-2",
        ]
    );
    let slow = run_file(&shipped());
    let fast = &r.clients[0];
    assert!(
        fast.failed < slow.clients[0].failed,
        "{} failed with the fast check, {} with GCE's",
        fast.failed,
        slow.clients[0].failed
    );
}

#[test]
fn health_check_settings_out_of_range_are_refused_at_their_place() {
    for (hc, line, col, want) in [
        (
            "{interval: 0s}",
            2,
            27,
            "cloudLoadBalancer.healthCheck.interval 0s: expected a positive duration",
        ),
        (
            "{interval: 5s, timeout: 6s}",
            2,
            40,
            "cloudLoadBalancer.healthCheck.timeout 6s is longer than the interval 5s",
        ),
        (
            "{unhealthyThreshold: 0}",
            2,
            37,
            "cloudLoadBalancer.healthCheck.unhealthyThreshold 0 is out of range: expected 1 to 10",
        ),
        (
            "{healthyThreshold: 11}",
            2,
            35,
            "cloudLoadBalancer.healthCheck.healthyThreshold 11 is out of range",
        ),
        ("{intervall: 5s}", 2, 17, "unknown field `intervall`"),
    ] {
        let yaml = format!(
            "name: t\ncloudLoadBalancer:\n  healthCheck: {hc}\nduration: 1m\nnodes:\n  - {{name: n1, address: 192.168.0.11, podCIDR: 10.244.1.0/24}}\n"
        );
        let e = load_str("t.yaml", &yaml).unwrap_err();
        assert!(e.message.contains(want), "{hc}: {e}");
        assert_eq!((e.line, e.column), (line + 1, col), "{hc}: {e}");
    }
}

#[test]
fn a_load_balancer_no_service_uses_is_warned_about_at_its_place() {
    let yaml = "name: t\ncloudLoadBalancer:\n  healthCheck: {interval: 5s}\nduration: 1m\nnodes:\n  - {name: n1, address: 192.168.0.11, podCIDR: 10.244.1.0/24}\n";
    let sc = load_str("t.yaml", yaml).unwrap();
    let w: Vec<String> = sc.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].starts_with("t.yaml:3:") && w[0].contains("no Service of the scenario"),
        "{w:?}"
    );
    // The shipped scenario has its LoadBalancer Service: no such warning.
    let shipped = load_file(&shipped()).unwrap();
    assert!(
        !shipped
            .warnings
            .iter()
            .any(|w| w.to_string().contains("cloudLoadBalancer")),
        "{:?}",
        shipped.warnings
    );
}
